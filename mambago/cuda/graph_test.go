package cuda_test

import (
	"math"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
)

const hoistKernels = `
extern "C" __global__ void poison(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __int_as_float(0x7fc00000);
}
// write runs after poison, launched with PDL where the device has it; its
// last three arguments are a fill, as MemsetEdit's Fold wants them.
extern "C" __global__ void write(float *x, int n, unsigned *fill, unsigned word, long long words) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 2.f * i;
    for (long long j = i; j < words; j += (long long)gridDim.x * blockDim.x) fill[j] = word;
}
extern "C" __global__ void use(const float *x, const float *scratch, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + scratch[i];
}`

// TestCaptureEditing captures poison(y) -> write(x) (PDL) -> memset of
// scratch -> use(x, scratch) into y, as cuBLASLt's memset sits between a
// kernel and its GEMM, and checks that CaptureEditing edits the memset
// (into memset_rows, hoisted beside write, both, or folded into write) only
// when the span and the kernel before it allow, and that every version
// computes y = x + 7 in each of three replays, scratch poisoned before
// each.
func TestCaptureEditing(t *testing.T) {
	d := gputest.Device(t)
	fn := map[string]*cuda.Function{}
	load := func(src, name string, entries ...string) {
		cubin, err := cuda.Compile(src, name, d.Arch())
		must(t, err)
		mod, err := cuda.LoadModule(cubin)
		must(t, err)
		t.Cleanup(func() { mod.Unload() })
		for _, e := range entries {
			fn[e], err = mod.Function(e)
			must(t, err)
		}
	}
	load(hoistKernels, "hoist.cu", "poison", "write", "use")
	elementwise, err := kernels.Source("elementwise.cu")
	must(t, err)
	load(elementwise, "elementwise.cu", "memset_rows")
	s, err := cuda.NewStream()
	must(t, err)
	defer s.Destroy()
	const n = 1 << 20
	x, _ := cuda.Alloc(4 * n)
	y, _ := cuda.Alloc(4 * n)
	scratch, _ := cuda.Alloc(4 * n)
	defer x.Free()
	defer y.Free()
	defer scratch.Free()
	grid, block := cuda.D1(n/256), cuda.D1(256)
	body := func() error {
		if err := fn["poison"].Launch(grid, block, 0, s, y.Ptr, n); err != nil {
			return err
		}
		if err := fn["write"].LaunchMaybePDL(d.Major >= 9, grid, block, 0, s, x.Ptr, n, cuda.Ptr(0), uint32(0),
			int64(0)); err != nil {
			return err
		}
		if err := cuda.Fill32(scratch.Ptr, math.Float32bits(7), n, s); err != nil {
			return err
		}
		return fn["use"].Launch(grid, block, 0, s, x.Ptr, scratch.Ptr, y.Ptr, n)
	}
	edit := func(fill, hoist bool) *cuda.MemsetEdit {
		ed := &cuda.MemsetEdit{Span: scratch.Ptr, Bytes: scratch.Bytes, Ours: []*cuda.Function{fn["write"]}, Hoist: hoist}
		if fill {
			ed.Fill = fn["memset_rows"]
		}
		return ed
	}
	elsewhere := edit(true, true)
	elsewhere.Span, elsewhere.Bytes = y.Ptr, y.Bytes
	notOurs := edit(true, true)
	notOurs.Ours = []*cuda.Function{fn["poison"], fn["use"]}
	folded := edit(true, true)
	folded.Fold = []*cuda.Function{fn["write"]}
	foldedElsewhere := edit(true, true)
	foldedElsewhere.Fold = []*cuda.Function{fn["poison"]}
	cases := []struct {
		name           string
		ed             *cuda.MemsetEdit
		edited, folded int
	}{{"plain", nil, 0, 0}, {"hoisted", edit(false, true), 1, 0}, {"kernel", edit(true, false), 1, 0},
		{"kernel hoisted", edit(true, true), 1, 0}, {"outside the span", elsewhere, 0, 0}, {"not ours", notOurs, 0, 0},
		{"folded", folded, 1, 1}, {"a fold for another kernel", foldedElsewhere, 1, 0}}
	for _, c := range cases {
		g, err := cuda.CaptureEditing(s, c.ed, body)
		must(t, err)
		if g.Edited() != c.edited && cuda.GraphEdits() {
			t.Errorf("%s: %d memsets edited, want %d", c.name, g.Edited(), c.edited)
		}
		switch {
		case c.folded > 0 && !cuda.GraphFolds():
			t.Logf("%s: this driver cannot set a captured node's arguments: Fill and Hoist applied instead", c.name)
		case g.Folded() != c.folded:
			t.Errorf("%s: %d memsets folded, want %d", c.name, g.Folded(), c.folded)
		}
		got := make([]float32, n)
		for rep := 0; rep < 3; rep++ {
			must(t, cuda.Fill32(scratch.Ptr, math.Float32bits(float32(math.NaN())), n, s))
			must(t, g.Launch(s))
			must(t, cuda.CopyOut(got, y.Ptr, s))
			must(t, s.Synchronize())
			for i, v := range got {
				if want := 2*float32(i) + 7; v != want {
					t.Fatalf("%s, replay %d: y[%d] = %v, want %v", c.name, rep, i, v, want)
				}
			}
		}
		must(t, g.Destroy())
	}
	if !cuda.GraphEdits() {
		t.Log("this driver lacks the graph-edit entry points: no memset was edited")
	}
}
