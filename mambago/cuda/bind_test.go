package cuda_test

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
)

const bindKernels = `
extern "C" __global__ void twice(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.f * x[i];
}
extern "C" __global__ void plus_one(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += 1.f;
}
// A 128-byte argument (a tensor map's size) whose first word is y.
struct __align__(64) wide { float *y; unsigned long long rest[15]; };
extern "C" __global__ void plus_one_wide(const wide w, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) w.y[i] += 1.f;
}`

// TestGraphBind captures poison(y) -> twice(x + 16 elements, y) ->
// plus_one(y), binds x and y, and checks that replays rebound to other
// buffers compute y' = 2 x'[16:] + 1 there, leave the captured buffers
// untouched, and compute into them again once pointed back; and that Bind
// refuses a buffer that a copy node, a memset across its edge, or an
// argument of ours holding its address inside a larger value uses.
func TestGraphBind(t *testing.T) {
	d := gputest.Device(t)
	if !cuda.GraphRebinds() {
		t.Skip("this driver lacks the entry points Graph.Bind needs (CUDA 12.4 or later)")
	}
	cubin, err := cuda.Compile(bindKernels, "bind.cu", d.Arch())
	must(t, err)
	mod, err := cuda.LoadModule(cubin)
	must(t, err)
	defer mod.Unload()
	twice, err := mod.Function("twice")
	must(t, err)
	plusOne, err := mod.Function("plus_one")
	must(t, err)
	plusOneWide, err := mod.Function("plus_one_wide")
	must(t, err)
	s, err := cuda.NewStream()
	must(t, err)
	defer s.Destroy()
	const n, lead = 4096, 16
	alloc := func(elems int) *cuda.Buffer {
		b, err := cuda.Alloc(4 * elems)
		must(t, err)
		t.Cleanup(func() { b.Free() })
		return b
	}
	x, y, x2, y2 := alloc(n+lead), alloc(n), alloc(n+lead), alloc(n)
	fill := func(b *cuda.Buffer, f func(i int) float32) {
		v := make([]float32, b.Bytes/4)
		for i := range v {
			v[i] = f(i)
		}
		must(t, cuda.CopyIn(b.Ptr, v, s))
	}
	fill(x, func(i int) float32 { return float32(i) })
	fill(x2, func(i int) float32 { return float32(-3 * i) })
	grid, block := cuda.D1(n/256), cuda.D1(256)
	body := func(copyX, wide bool) func() error {
		return func() error {
			if err := cuda.Fill32(y.Ptr, math.Float32bits(float32(math.NaN())), n, s); err != nil {
				return err
			}
			if err := twice.Launch(grid, block, 0, s, x.Ptr+4*lead, y.Ptr, n); err != nil {
				return err
			}
			if copyX {
				if err := cuda.Copy(x2.Ptr, x.Ptr, x.Bytes, s); err != nil {
					return err
				}
			}
			if wide {
				var w cuda.TensorMap
				binary.LittleEndian.PutUint64(w[:], uint64(y.Ptr))
				return plusOneWide.Launch(grid, block, 0, s, w, n)
			}
			return plusOne.Launch(grid, block, 0, s, y.Ptr, n)
		}
	}
	g, err := cuda.Capture(s, body(false, false))
	must(t, err)
	defer g.Destroy()
	ours := []*cuda.Function{twice, plusOne}
	bx, err := g.Bind(x.Ptr, x.Bytes, ours)
	must(t, err)
	by, err := g.Bind(y.Ptr, y.Bytes, ours)
	must(t, err)
	if k, m, read := bx.Uses(); k != 1 || m != 0 || read != 2 {
		t.Fatalf("x: %d kernel and %d memset uses of %d kernels read, want 1, 0 of 2", k, m, read)
	}
	if k, m, _ := by.Uses(); k != 2 || m != 1 {
		t.Fatalf("y: %d kernel and %d memset uses, want 2 and 1", k, m)
	}
	// replay rebinds x and y to src and dst, replays, and checks dst and
	// that the other output buffer kept its sentinel.
	replay := func(src, dst, other *cuda.Buffer, scale float32) {
		t.Helper()
		must(t, bx.Rebind(src.Ptr))
		must(t, by.Rebind(dst.Ptr))
		fill(other, func(int) float32 { return 42 })
		must(t, g.Launch(s))
		got, kept := make([]float32, n), make([]float32, n)
		must(t, cuda.CopyOut(got, dst.Ptr, s))
		must(t, cuda.CopyOut(kept, other.Ptr, s))
		must(t, s.Synchronize())
		for i := range got {
			if want := 2*scale*float32(i+lead) + 1; got[i] != want {
				t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
			}
			if kept[i] != 42 {
				t.Fatalf("a replay bound elsewhere wrote [%d] = %v of the other output", i, kept[i])
			}
		}
	}
	replay(x2, y2, y, -3)
	replay(x, y, y2, 1)
	replay(x2, y2, y, -3)
	replay(x2, y2, y, -3) // already bound: a no-op rebinding

	refused := func(what string, g *cuda.Graph, buf *cuda.Buffer, bytes int, ours []*cuda.Function) {
		t.Helper()
		if _, err := g.Bind(buf.Ptr, bytes, ours); !errors.Is(err, cuda.ErrUnbindable) {
			t.Errorf("%s: Bind gave %v, want ErrUnbindable", what, err)
		}
	}
	refused("half of y, which the memset writes whole", g, y, y.Bytes/2, ours)
	gc, err := cuda.Capture(s, body(true, false))
	must(t, err)
	defer gc.Destroy()
	refused("x read by a copy node", gc, x, x.Bytes, ours)
	gw, err := cuda.Capture(s, body(false, true))
	must(t, err)
	defer gw.Destroy()
	refused("y's address inside a 128-byte argument", gw, y, y.Bytes, append(ours, plusOneWide))
	// A kernel not of ours is on the caller's word: Bind neither reads nor moves it.
	bn, err := gw.Bind(y.Ptr, y.Bytes, ours)
	must(t, err)
	if k, m, read := bn.Uses(); k != 1 || m != 1 || read != 1 {
		t.Errorf("y with plus_one_wide not ours: %d kernel and %d memset uses of %d kernels read, want 1, 1 of 1", k, m, read)
	}
}
