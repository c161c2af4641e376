package gpu

import (
	"fmt"

	"github.com/mambago/mambago/mambago/cuda"
)

// ConvXProj is one layer's conv (Conv's math) and x_proj in one launch over
// a chunk of B sequences of T positions, for the 16-bit storage types on
// sm_80 and newer (kernels/conv_xproj.cu has the math, the layouts and the
// scheme). It writes u as Conv does, and dbl = u Wᵀ in f32.
type ConvXProj struct {
	Conv           // the conv's inputs and u; DType is BF16 or F16
	XProj cuda.Ptr // x_proj's weight [J, E], of type DType
	DBL   cuda.Ptr // [B, T, J] out, f32
	J     int      // dt_rank + 2 state sizes
	Part  cuda.Ptr // scratch of B·T·8·J floats (the blocks' partial products)
	Count cuda.Ptr // ConvXProjCounters(B, T) counters, zero before the launch and after it
}

// ConvXProjCounters is how many counters a launch over B sequences of T
// positions takes: one a tile of 64 positions.
func ConvXProjCounters(B, T int) int { return B * ((T + convXProjTM - 1) / convXProjTM) }

// Kernel constants, as in conv_xproj.cu.
const (
	convXProjTM      = 64   // CX_TM: positions a tile
	convXProjSlices  = 8    // CX_CS: blocks a tile, each a slice of the channels
	convXProjThreads = 256  // CX_THREADS
	convXProjMaxE    = 2048 // CX_CS x 64 x CX_MAXC: every chunk's inputs in shared memory at once
)

// convXProjEntries are the entries' tiles of 8 columns of dbl (NT in
// conv_xproj.cu), and convXProjKernel names an entry.
var convXProjEntries = []int{10, 12}

func convXProjKernel(nt int, dt cuda.DType) string {
	return fmt.Sprintf("conv_xproj%d_%s", nt, dt.Suffix())
}

// dblTiles returns the tiles of 8 columns of dbl that the x_proj kernels'
// entries (conv_xproj.cu, xproj.cu) keep for J columns: 10 for J up to 80
// (the 130m shape's 48 + 2 x 16), 12 up to 96 (370m's); 0 where no entry
// serves J (J not a multiple of 4, or over 96).
func dblTiles(J int) int {
	switch {
	case J <= 0 || J%4 != 0:
		return 0
	case J <= 80:
		return 10
	case J <= 96:
		return 12
	}
	return 0
}

// ConvXProjApplies reports whether the fused kernel serves a layer: a
// 16-bit storage type on sm_80 or newer, a conv of at most 4 taps, E a
// multiple of 8 of at most 2048, and J a multiple of 4 of at most 96 and of
// E / 8 (the partial products then fit in dt's buffer, which dt_proj
// writes after): the 130m and 370m shapes. Larger ones run the conv and
// cuBLAS's GEMM.
func ConvXProjApplies(dev *cuda.Device, dt cuda.DType, E, K, J int) bool {
	return dev.Major >= 8 && dt != cuda.F32 && K >= 1 && K <= 4 && E%8 == 0 && E <= convXProjMaxE &&
		convXProjSlices*J <= E && dblTiles(J) > 0 && convXProjShared(dblTiles(J), E) <= dev.MaxSharedOptIn
}

// convXProjChunks is conv_xproj_chunks(E): a slice's chunks of 64 channels.
func convXProjChunks(E int) int { return ((E+63)/64 + convXProjSlices - 1) / convXProjSlices }

// convXProjShared is conv_xproj_shared(NT, E) in bytes.
func convXProjShared(nt, E int) int {
	const kp, xr = 64 + 8, convXProjTM + 3 // CX_KP, CX_XR
	return convXProjChunks(E)*(xr*64*4+64*5*4+8*nt*kp*2) + 2*convXProjTM*kp*2
}

// Launch queues the fused conv and x_proj, which also update the windows, on
// stream; fn looks kernels up by name.
func (c ConvXProj) Launch(fn func(string) *cuda.Function, stream *cuda.Stream) error {
	nt := dblTiles(c.J)
	if nt == 0 || c.DType == cuda.F32 || c.K > 4 || c.E%8 != 0 || c.E > convXProjMaxE {
		return fmt.Errorf("gpu: conv_xproj serves no %s layer with E=%d, K=%d, J=%d", c.DType, c.E, c.K, c.J)
	}
	grid := cuda.Dim3{X: convXProjSlices * ConvXProjCounters(1, c.T), Y: c.B, Z: 1} // CX_CS blocks a tile
	f, shared := fn(convXProjKernel(nt, c.DType)), convXProjShared(nt, c.E)
	if err := f.SetMaxDynamicShared(shared); err != nil {
		return err
	}
	return f.LaunchMaybePDL(c.PDL, grid, cuda.D1(convXProjThreads), shared, stream,
		c.XZ, c.LDX, c.Window, c.W, c.Bias, c.XProj, c.U, c.DBL, c.Part, c.Count, c.T, c.E, c.K, c.J)
}

// ConvXProjFused reports whether the engine's prefill runs each layer's conv
// and x_proj as one kernel (Engine.FusedConvXProj, where ConvXProjApplies).
func (e *Engine) ConvXProjFused() bool {
	c := e.cfg
	return e.FusedConvXProj && ConvXProjApplies(e.dev, e.dt, c.Inner, c.ConvKernel, c.DTRank+2*c.State)
}
