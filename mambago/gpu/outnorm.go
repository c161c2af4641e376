package gpu

import (
	"fmt"

	"github.com/mambago/mambago/mambago/cuda"
)

// OutNorm is a layer's out_proj with the residual add and the next layer's
// RMSNorm in one launch (kernels/out_norm.cu):
//
//	H [M, D] += Y [M, K] · Wᵀ
//	X [M, D]  = RMSNorm(H) · Norm, in DType
//
// so the next layer's RMSNorm needs no node of its own, and the GEMM takes
// programmatic dependent launch (cuBLAS's kernels cannot). A cluster of 8
// blocks owns 128 rows, and each block outNormBN of their columns, so D
// must be 8 · outNormBN (OutNormApplies).
type OutNorm struct {
	Y    cuda.Ptr // [M, K] of DType, rows LDY apart (the scan's output)
	LDY  int
	W    cuda.Ptr // [D, K] of DType (out_proj's weight)
	H    cuda.Ptr // [M, D] f32, added into (the residual stream)
	Norm cuda.Ptr // [D] f32 (the next layer's RMSNorm weight)
	X    cuda.Ptr // [M, D] of DType (the next layer's in_proj input)
	M    int
	D, K int
	Eps  float32
	// DType is bf16 or f16.
	DType cuda.DType
	// PDL launches it with programmatic dependent launch.
	PDL bool
	// Stages is the ring's depth (ON_STAGES) of the build fn returns, which
	// sets the shared memory the launch asks for; 0 is the engine's build
	// (outNormStages). Multicast says the build shares y across the cluster
	// (ON_MULTICAST 1: y's boxes are then 16 rows, not 128). Other builds
	// than the engine's are for benchmarks.
	Stages    int
	Multicast bool
	// Box is the build's ON_BOX (rows a copy of y brings); 0 is the
	// engine's (outNormBox).
	Box int
}

// outNormBN and outNormStages are out_norm.cu's ON_BN and ON_STAGES as the
// engine compiles it.
const (
	outNormBN      = 96
	outNormStages  = 3
	outNormThreads = 288
	outNormCluster = 8
	outNormBox     = 16
)

// outNormShared is out_norm_shared() in bytes, for a ring of stages stages.
func outNormShared(stages int) int {
	return stages*(128+outNormBN)*64*2 + 1024 + 2*stages*8 + 128*4
}

// outNormKernel is the entry of out_norm.cu for dt.
func outNormKernel(dt cuda.DType) string { return "out_norm_" + dt.Suffix() }

// OutNormApplies reports whether OutNorm serves a 16-bit layer of width D
// and inner width K on dev: wgmma and TMA multicast need sm_90a (the H100
// and H200), D must be 8 · 96 (the 130m shape's 768), and K's rows must be
// 16-byte aligned for the tensor map.
func OutNormApplies(dev *cuda.Device, dt cuda.DType, D, K int) bool {
	return dev.Major == 9 && dev.Minor == 0 && (dt == cuda.BF16 || dt == cuda.F16) &&
		D == outNormCluster*outNormBN && K >= 1 && K%8 == 0 && outNormShared(outNormStages) <= dev.MaxSharedOptIn
}

// Launch queues the kernel on stream; fn looks kernels up by name.
func (o OutNorm) Launch(fn func(string) *cuda.Function, stream *cuda.Stream) error {
	if (o.DType != cuda.BF16 && o.DType != cuda.F16) || o.D != outNormCluster*outNormBN || o.M < 1 || o.K < 1 ||
		o.LDY < o.K {
		return fmt.Errorf("gpu: out_norm serves no %s layer with M=%d, D=%d, K=%d (rows of Y %d apart)", o.DType, o.M,
			o.D, o.K, o.LDY)
	}
	// Y in boxes of Box rows (with the multicast, slices of 16: each
	// block's share of the cluster's tile), W in its block's columns, both
	// 64 elements of K (128 bytes) a box.
	box := o.Box
	if box == 0 {
		box = outNormBox
	}
	if o.Multicast {
		box = 128 / outNormCluster
	}
	ym, err := cuda.NewTensorMap2D(o.DType, o.Y, o.M, o.K, o.LDY, box, 64)
	if err != nil {
		return fmt.Errorf("gpu: out_norm's Y: %w", err)
	}
	wm, err := cuda.NewTensorMap2D(o.DType, o.W, o.D, o.K, o.K, outNormBN, 64)
	if err != nil {
		return fmt.Errorf("gpu: out_norm's W: %w", err)
	}
	stages := o.Stages
	if stages == 0 {
		stages = outNormStages
	}
	f, shared := fn(outNormKernel(o.DType)), outNormShared(stages)
	if err := f.SetMaxDynamicShared(shared); err != nil {
		return err
	}
	grid := cuda.Dim3{X: outNormCluster, Y: (o.M + 127) / 128, Z: 1}
	return f.LaunchMaybePDL(o.PDL, grid, cuda.D1(outNormThreads), shared, stream, ym, wm, o.H, o.Norm, o.X,
		o.M, o.K, o.Eps)
}

// OutNormFused reports whether the engine's prefill runs out_proj with the
// next layer's RMSNorm (Engine.FusedOutNorm, where OutNormApplies).
func (e *Engine) OutNormFused() bool {
	c := e.cfg
	return e.FusedOutNorm && OutNormApplies(e.dev, e.dt, c.Hidden, c.Inner)
}

// outNormFused reports whether layer l's out_proj also computes layer l +
// 1's RMSNorm (OutNormFused, and out_proj has no bias).
func (e *Engine) outNormFused(l int) bool {
	c := e.cfg
	return e.FusedOutNorm && l >= 0 && l+1 < len(e.layers) && e.layers[l].outBias == 0 &&
		OutNormApplies(e.dev, e.dt, c.Hidden, c.Inner)
}
