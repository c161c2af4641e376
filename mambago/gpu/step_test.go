package gpu

import (
	"testing"

	"github.com/mambago/mambago/mambago/cuda"
)

// TestScanBatchPays checks, without a GPU, where the batched scan step is
// taken on the H200's 132 SMs: not at 130m's 1536 channels (192 blocks,
// measured slower), at 370m's 2048 and up.
func TestScanBatchPays(t *testing.T) {
	for _, c := range []struct {
		E    int
		pays bool
	}{{1536, false}, {1576, false}, {1584, true}, {2048, true}, {4096, true}, {5120, true}} {
		if got := scanBatchPays(c.E, 132); got != c.pays {
			t.Errorf("scanBatchPays(%d, 132) = %v, want %v", c.E, got, c.pays)
		}
	}
}

// TestGEMVPlanTensorCores checks, without a GPU, which decode GEMVs take the
// tensor-core entries: a bf16 batch of two or more sequences with K a
// multiple of 8, GEMVTensorCores set and GEMVTensorCoreRows rows or more,
// in blocks of 16 rows split over GEMVTileWarps warps (the block's); every
// other case keeps the FMA entries, in blocks of 8 warps.
func TestGEMVPlanTensorCores(t *testing.T) {
	for _, c := range []struct {
		dt           cuda.DType
		on           bool
		minRows      int
		tileWarps    int
		B, K         int
		kernel       string
		gridX, block int
		split        int
		comment      string
	}{
		{cuda.BF16, true, 0, 8, 8, 2048, "step_in_tc_bf16", 512, 256, 8, "a batch"},
		{cuda.BF16, true, 0, 8, 2, 2048, "step_in_tc_bf16", 512, 256, 8, "the least batch"},
		{cuda.BF16, true, 0, 16, 8, 2048, "step_in_tc_bf16", 512, 512, 16, "16 warps a tile"},
		{cuda.BF16, true, 8192, 8, 8, 2048, "step_in_tc_bf16", 512, 256, 8, "rows at GEMVTensorCoreRows"},
		{cuda.BF16, true, 8193, 8, 8, 2048, "step_in_r4_bf16", 512, 256, 2, "rows under GEMVTensorCoreRows"},
		{cuda.BF16, true, 0, 16, 1, 2048, "step_in_r4_b1_bf16", 512, 256, 2, "one sequence"},
		{cuda.BF16, true, 0, 16, 8, 2052, "step_in_r4_bf16", 512, 256, 2, "K not a multiple of 8"},
		{cuda.BF16, false, 0, 16, 8, 2048, "step_in_r4_bf16", 512, 256, 2, "setting off"},
		{cuda.F16, true, 0, 8, 8, 2048, "step_in_r4_f16", 512, 256, 2, "f16 weights"},
		{cuda.F32, true, 0, 8, 8, 2048, "step_in_r4_f32", 512, 256, 2, "f32 weights"},
	} {
		e := &Engine{dt: c.dt, GEMVRows: 4, GEMVOneSequence: true, GEMVTensorCores: c.on, GEMVTensorCoreRows: c.minRows,
			GEMVTileWarps: c.tileWarps}
		p := e.gemvPlan("step_in", 8192, c.K, c.B)
		if p.kernel != c.kernel || int(p.grid.X) != c.gridX || int(p.block.X) != c.block || p.split != c.split {
			t.Errorf("%s: plan %s grid %d block %d split %d, want %s grid %d block %d split %d", c.comment, p.kernel,
				p.grid.X, p.block.X, p.split, c.kernel, c.gridX, c.block, c.split)
		}
	}
}
