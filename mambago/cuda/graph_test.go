package cuda_test

import (
	"math"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
)

const hoistKernels = `
extern "C" __global__ void poison(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __int_as_float(0x7fc00000);
}
// write runs after poison, launched with PDL where the device has it.
extern "C" __global__ void write(float *x, int n) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 2.f * i;
}
extern "C" __global__ void use(const float *x, const float *scratch, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + scratch[i];
}`

// TestCaptureHoisting captures poison(y) -> write(x) (PDL) -> memset of
// scratch -> use(x, scratch) into y, as cuBLASLt's memset sits between a
// kernel and its GEMM, and checks that CaptureHoisting moves the memset
// only when the span and the kernel before it allow, and that every
// version computes y = x + 7.
func TestCaptureHoisting(t *testing.T) {
	d := gputest.Device(t)
	cubin, err := cuda.Compile(hoistKernels, "hoist.cu", d.Arch())
	must(t, err)
	mod, err := cuda.LoadModule(cubin)
	must(t, err)
	defer mod.Unload()
	fn := map[string]*cuda.Function{}
	for _, name := range []string{"poison", "write", "use"} {
		fn[name], err = mod.Function(name)
		must(t, err)
	}
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
		if err := fn["write"].LaunchMaybePDL(d.Major >= 9, grid, block, 0, s, x.Ptr, n); err != nil {
			return err
		}
		if err := cuda.Fill32(scratch.Ptr, math.Float32bits(7), n, s); err != nil {
			return err
		}
		return fn["use"].Launch(grid, block, 0, s, x.Ptr, scratch.Ptr, y.Ptr, n)
	}
	span := cuda.Hoist{Span: scratch.Ptr, Bytes: scratch.Bytes, Ours: []*cuda.Function{fn["write"]}}
	elsewhere := span
	elsewhere.Span, elsewhere.Bytes = y.Ptr, y.Bytes
	notOurs := span
	notOurs.Ours = []*cuda.Function{fn["poison"], fn["use"]}
	cases := []struct {
		name  string
		h     *cuda.Hoist
		moved int
	}{{"plain", nil, 0}, {"hoisted", &span, 1}, {"outside the span", &elsewhere, 0}, {"not ours", &notOurs, 0}}
	for _, c := range cases {
		g, err := cuda.CaptureHoisting(s, c.h, body)
		must(t, err)
		if g.Hoisted() != c.moved && cuda.GraphEdits() {
			t.Errorf("%s: %d memsets hoisted, want %d", c.name, g.Hoisted(), c.moved)
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
}
