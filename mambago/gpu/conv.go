package gpu

import "github.com/mambago/mambago/mambago/cuda"

// Conv is one layer's causal depthwise conv with fused SiLU over a chunk of
// B sequences of T positions, continuing from and then updating the carried
// windows (kernels/conv.cu has the math and the layouts).
type Conv struct {
	XZ     cuda.Ptr // in_proj's output, f32; the conv reads its first E columns
	LDX    int      // XZ's row stride
	Window cuda.Ptr // [B, E, K], updated in place
	W      cuda.Ptr // [E, K]
	Bias   cuda.Ptr // [E], or 0
	U      cuda.Ptr // [B, T, E] out, of type DType
	B, T   int
	E, K   int
	DType  cuda.DType // of U; the rest is f32
	PDL    bool       // launch with programmatic dependent launch (Engine.PrefillPDL)
}

const convRun = 16 // RUN in conv.cu

// Launch queues the conv, which also updates the windows, on stream; fn
// looks kernels up by name.
func (c Conv) Launch(fn func(string) *cuda.Function, stream *cuda.Stream) error {
	blocks := (c.E + 127) / 128
	return fn("conv_silu_"+c.DType.Suffix()).LaunchMaybePDL(c.PDL, cuda.Dim3{X: blocks, Y: (c.T + convRun - 1) / convRun, Z: c.B},
		cuda.D1(128), 0, stream, c.XZ, c.LDX, c.Window, c.W, c.Bias, c.U, c.T, c.E, c.K)
}
