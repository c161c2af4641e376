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
	// Build is the build of out_norm.cu that fn returns: the zero value is
	// the engine's; others are for benchmarks.
	Build OutNormBuild
}

// OutNormBuild names a build of kernels/out_norm.cu by its macros, which
// the launch must know (shared memory, tensor map boxes). The zero value is
// the build the engine compiles.
type OutNormBuild struct {
	Stages    int  // ON_STAGES, the ring's depth; 0: outNormStages
	Multicast bool // ON_MULTICAST: y shared across the cluster
	HTMA      bool // ON_HTMA: h's tile copied into shared memory by TMA
	Epilogue  int  // ON_EPILOGUE (timing builds take the epilogue apart); 0: 1, the whole epilogue; -1: none
	// InFlight keeps one step's MMAs in flight (ON_WAIT0 0), releasing
	// the step before's stage.
	InFlight bool
}

// Options are the NVRTC options that compile b.
func (b OutNormBuild) Options() []string {
	b = b.resolved()
	return []string{fmt.Sprintf("-DON_STAGES=%d", b.Stages), fmt.Sprintf("-DON_MULTICAST=%d", b2i(b.Multicast)),
		fmt.Sprintf("-DON_HTMA=%d", b2i(b.HTMA)),
		fmt.Sprintf("-DON_EPILOGUE=%d", max(b.Epilogue, 0)), fmt.Sprintf("-DON_WAIT0=%d", 1-b2i(b.InFlight))}
}

// String names b for benchmark logs.
func (b OutNormBuild) String() string {
	b = b.resolved()
	return fmt.Sprintf("%d stages, multicast %v, h by TMA %v, epilogue %d, MMAs in flight %v", b.Stages, b.Multicast,
		b.HTMA, b.Epilogue, b.InFlight)
}

// resolved fills in b's defaults.
func (b OutNormBuild) resolved() OutNormBuild {
	if b.Stages == 0 {
		b.Stages = outNormStages
	}
	if b.Epilogue == 0 {
		b.Epilogue = 1
	}
	return b
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// outNormBN and outNormStages are out_norm.cu's ON_BN and ON_STAGES as the
// engine compiles it.
const (
	outNormBN      = 96
	outNormStages  = 3
	outNormThreads = 288
	outNormCluster = 8
	outNormBox     = 16 // ON_BOX, and ON_BM / ON_CLUSTER (the multicast's slices)
)

// outNormShared is out_norm_shared() in bytes, for build b.
func outNormShared(b OutNormBuild) int {
	b = b.resolved()
	hBytes := 0
	if b.HTMA {
		hBytes = 128 * outNormBN * 4
	}
	return b.Stages*(128+outNormBN)*64*2 + hBytes + 1024 + (2*b.Stages+1)*8 + 128*4
}

// outNormKernel is the entry of out_norm.cu for dt.
func outNormKernel(dt cuda.DType) string { return "out_norm_" + dt.Suffix() }

// OutNormApplies reports whether OutNorm serves a 16-bit layer of width D
// and inner width K on dev: wgmma and TMA multicast need sm_90a (the H100
// and H200), D must be 8 · 96 (the 130m shape's 768), and K's rows must be
// 16-byte aligned for the tensor map.
func OutNormApplies(dev *cuda.Device, dt cuda.DType, D, K int) bool {
	return sm90a(dev) && (dt == cuda.BF16 || dt == cuda.F16) &&
		D == outNormCluster*outNormBN && K >= 1 && K%8 == 0 && outNormShared(OutNormBuild{}) <= dev.MaxSharedOptIn
}

// Launch queues the kernel on stream; fn looks kernels up by name.
func (o OutNorm) Launch(fn func(string) *cuda.Function, stream *cuda.Stream) error {
	if (o.DType != cuda.BF16 && o.DType != cuda.F16) || o.D != outNormCluster*outNormBN || o.M < 1 || o.K < 1 ||
		o.LDY < o.K {
		return fmt.Errorf("gpu: out_norm serves no %s layer with M=%d, D=%d, K=%d (rows of Y %d apart)", o.DType, o.M,
			o.D, o.K, o.LDY)
	}
	b := o.Build.resolved()
	// Y in boxes of outNormBox rows (ON_BOX; with the multicast, the same 16
	// rows are each block's share of the cluster's tile), W in its block's
	// columns, both 64 elements of K (128 bytes) a box; H in the block's
	// whole tile, plain.
	ym, err := cuda.NewTensorMap2D(o.DType, o.Y, o.M, o.K, o.LDY, outNormBox, 64)
	if err != nil {
		return fmt.Errorf("gpu: out_norm's Y: %w", err)
	}
	wm, err := cuda.NewTensorMap2D(o.DType, o.W, o.D, o.K, o.K, outNormBN, 64)
	if err != nil {
		return fmt.Errorf("gpu: out_norm's W: %w", err)
	}
	hm, err := cuda.NewTensorMap2DPlain(cuda.F32, o.H, o.M, o.D, o.D, 128, outNormBN)
	if err != nil {
		return fmt.Errorf("gpu: out_norm's H: %w", err)
	}
	f, shared := fn(outNormKernel(o.DType)), outNormShared(b)
	if err := f.SetMaxDynamicShared(shared); err != nil {
		return err
	}
	grid := cuda.Dim3{X: outNormCluster, Y: (o.M + 127) / 128, Z: 1}
	return f.LaunchMaybePDL(o.PDL, grid, cuda.D1(outNormThreads), shared, stream, ym, wm, hm, o.H, o.Norm, o.X,
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
