package gpu

import (
	"fmt"

	"github.com/mambago/mambago/mambago/cuda"
)

// The skinny GEMM of kernels/gemv_wg.cu (gemm_skinny_bf16_f32,
// Engine.SkinnyGEMM): in_proj and out_proj of a prefill chunk of at most
// skinnyMaxRows rows, on the warpgroup GEMVs' ring with the chunk's rows
// as the products' columns: 64 weight rows a block of wgThreads threads, in
// wgStages stages of 64 of k, each a 64 x 64 box of weights and a
// skinnyMaxRows x 64 box of the chunk's rows.
const (
	skinnyMaxRows  = 128 // GS_COLS
	skinnyMaxParts = 4   // the most blocks a tile splits k over
)

// skinnyShared is the skinny GEMM's shared memory: the ring with x's
// boxes of skinnyMaxRows rows.
func skinnyShared() int { return wgRingShared(skinnyMaxRows) }

// skinnyParts is how many blocks each tile of 64 of N output rows splits K
// over on sms SMs: enough for a block an SM, at most skinnyMaxParts, and
// two steps of k a part or more.
func skinnyParts(N, K, sms int) int {
	return max(1, min(skinnyMaxParts, sms/wgTiles(N), (K+wgBK-1)/wgBK/2))
}

// skinnyApplies reports whether a prefill chunk of rows rows runs in_proj
// and out_proj on the skinny GEMM: SkinnyGEMM set, bf16 on an sm_90 device
// (the kernel needs sm_90a), at most skinnyMaxRows rows, and the widths a
// multiple of 8 (16-byte rows for the tensor maps).
func (e *Engine) skinnyApplies(rows int) bool {
	c := e.cfg
	return e.SkinnyGEMM && e.dt == cuda.BF16 && sm90a(e.dev) && rows <= skinnyMaxRows && c.Hidden%8 == 0 &&
		c.Inner%8 == 0
}

// skinnyScratch is the f32 scratch and the counters that the skinny GEMM's
// parts along k take at in_proj and out_proj (none where SkinnyGEMM is
// off): it shares the decode step's (workspace.tiles, tileCounts).
func (e *Engine) skinnyScratch() (floats, counters int) {
	c := e.cfg
	if !e.SkinnyGEMM || e.dev == nil {
		return 0, 0
	}
	for _, g := range []struct{ N, K int }{{2 * c.Inner, c.Hidden}, {c.Hidden, c.Inner}} {
		if parts := skinnyParts(g.N, g.K, e.dev.SMs); parts > 1 {
			tiles := wgTiles(g.N)
			floats, counters = max(floats, tiles*parts*skinnyMaxRows/2*128), max(counters, tiles)
		}
	}
	return floats, counters
}

// launchSkinny queues the skinny GEMM out [T, N] (row stride ldo, f32)
// (+)= x [T, K] (row stride ldx, bf16) · Wᵀ + bias (may be 0), W [N, K]
// through wmap (warpgroupMaps' 64 x 64 boxes), k split as skinnyParts says
// through the workspace's tile scratch.
func (e *Engine) launchSkinny(wmap cuda.TensorMap, x cuda.Ptr, ldx int, bias, out cuda.Ptr, ldo int, accumulate bool,
	T, N, K int) error {
	xmap, err := cuda.NewTensorMap2D(cuda.BF16, x, T, K, ldx, skinnyMaxRows, wgBK)
	if err != nil {
		return fmt.Errorf("gpu: the skinny GEMM's tensor map of %d rows: %w", T, err)
	}
	accu := 0
	if accumulate {
		accu = 1
	}
	grid := cuda.Dim3{X: wgTiles(N), Y: skinnyParts(N, K, e.dev.SMs), Z: 1}
	return e.fn["gemm_skinny_bf16_f32"].LaunchMaybePDL(e.PrefillPDL, grid, cuda.D1(wgThreads), skinnyShared(), e.stream,
		wmap, xmap, bias, out, ldo, accu, T, K, N, e.ws.tiles.Ptr, e.ws.tileCounts.Ptr)
}
