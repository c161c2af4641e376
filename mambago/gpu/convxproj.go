package gpu

import (
	"fmt"

	"github.com/mambago/mambago/mambago/cuda"
)

// ConvXProj is one layer's conv (Conv's math) and x_proj in one launch over
// a chunk of B sequences of T positions, for the 16-bit storage types on
// sm_90 and newer (kernels/conv_xproj.cu has the math, the layouts and the
// cluster scheme). It writes u as Conv does, and dbl = u Wᵀ in f32.
type ConvXProj struct {
	Conv           // the conv's inputs and u; DType is BF16 or F16
	XProj cuda.Ptr // x_proj's weight [J, E], of type DType
	DBL   cuda.Ptr // [B, T, J] out, f32
	J     int      // dt_rank + 2 state sizes
}

// Kernel constants, as in conv_xproj.cu.
const (
	convXProjTM      = 64  // CX_TM: positions a cluster
	convXProjCluster = 8   // CX_CS: blocks a cluster
	convXProjThreads = 256 // CX_THREADS
)

// convXProjTiles returns the entry's tiles of 8 columns of dbl for J
// columns, or 0 where no entry serves J.
func convXProjTiles(J int) int {
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
// 16-bit storage type on sm_90 or newer, a conv of at most 4 taps, E a
// multiple of 8 and J a multiple of 4 of at most 96 (the 130m and 370m
// shapes; larger ones run the conv and cuBLAS's GEMM).
func ConvXProjApplies(dev *cuda.Device, dt cuda.DType, E, K, J int) bool {
	return dev.Major >= 9 && dt != cuda.F32 && K >= 1 && K <= 4 && E%8 == 0 && convXProjTiles(J) > 0
}

// convXProjShared is conv_xproj_shared(NT) in bytes.
func convXProjShared(nt int) int {
	const kp = 64 + 8 // CX_KP
	tiles, part := 2*(convXProjTM+8*nt)*kp*2, convXProjTM*(8*nt+4)*4
	return max(tiles, part)
}

// Launch queues the fused conv and x_proj, which also update the windows, on
// stream; fn looks kernels up by name.
func (c ConvXProj) Launch(fn func(string) *cuda.Function, stream *cuda.Stream) error {
	nt := convXProjTiles(c.J)
	if nt == 0 || c.DType == cuda.F32 || c.K > 4 || c.E%8 != 0 {
		return fmt.Errorf("gpu: conv_xproj serves no %s layer with E=%d, K=%d, J=%d", c.DType, c.E, c.K, c.J)
	}
	grid := cuda.Dim3{X: convXProjCluster * ((c.T + convXProjTM - 1) / convXProjTM), Y: c.B, Z: 1}
	return fn(fmt.Sprintf("conv_xproj%d_%s", nt, c.DType.Suffix())).LaunchMaybePDL(c.PDL, grid,
		cuda.D1(convXProjThreads), convXProjShared(nt), stream,
		c.XZ, c.LDX, c.Window, c.W, c.Bias, c.XProj, c.U, c.DBL, c.T, c.E, c.K, c.J)
}

// ConvXProjFused reports whether the engine's prefill runs each layer's conv
// and x_proj as one kernel (Engine.FusedConvXProj, where ConvXProjApplies).
func (e *Engine) ConvXProjFused() bool {
	c := e.cfg
	return e.FusedConvXProj && ConvXProjApplies(e.dev, e.dt, c.Inner, c.ConvKernel, c.DTRank+2*c.State)
}
