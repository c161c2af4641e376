package gpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cuda"
)

// TestScanBatchPays checks, without a GPU, where the batched scan step is
// taken on the H200's 132 SMs: not at 130m's 1536 channels (192 blocks)
// or 370m's 2048 (256), both measured slower, but at 1.4b's 4096 and up.
func TestScanBatchPays(t *testing.T) {
	for _, c := range []struct {
		E    int
		pays bool
	}{{1536, false}, {2048, false}, {3160, false}, {3161, true}, {4096, true}, {5120, true}} {
		if got := scanBatchPays(c.E, 132); got != c.pays {
			t.Errorf("scanBatchPays(%d, 132) = %v, want %v", c.E, got, c.pays)
		}
	}
}

// TestDefaultTileParts checks New's split of x_proj's tiles along k, by
// the model's channels: none at 130m's 1536 and 370m's 2048 (measured
// slower), 8 from 1.4b's 4096 up.
func TestDefaultTileParts(t *testing.T) {
	for _, c := range []struct{ E, want int }{{1536, 1}, {2048, 1}, {4095, 1}, {4096, 8}, {5120, 8}} {
		if got := defaultTileParts(c.E); got != c.want {
			t.Errorf("defaultTileParts(%d) = %d, want %d", c.E, got, c.want)
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

// TestGEMVPlanStream checks, without a GPU, where a one-sequence GEMV
// takes the streaming entry under GEMVStream: gemv (not step_in, in_proj)
// of 1024 rows or more, K a multiple of 16 bytes of weights and at most
// 6144, at the split the one-sequence entries would take (4 from K =
// 4096); a grid of streamBlocks blocks an SM; elsewhere the one-sequence
// entries.
func TestGEMVPlanStream(t *testing.T) {
	for _, c := range []struct {
		dt                  cuda.DType
		on                  bool
		kernel              string
		rows, K, B          int
		gridX, split, bytes int
		comment             string
	}{
		{cuda.BF16, true, "gemv_sb1_bf16", 2560, 5120, 1, 3 * 132, 4, 8 * 5120, "2.8b out_proj"},
		{cuda.BF16, true, "gemv_sb1_bf16", 50280, 2560, 1, 3 * 132, 2, 8 * 2560, "2.8b LM head"},
		{cuda.BF16, true, "step_in_r4_b1_bf16", 10240, 2560, 1, 10240 / 16, 2, 0, "2.8b in_proj"},
		{cuda.F32, true, "gemv_sb1_f32", 50280, 2564, 1, 3 * 132, 2, 8 * 2564, "f32, K a multiple of 4"},
		{cuda.BF16, true, "gemv_r4_b1_bf16", 50280, 2564, 1, (50280 + 15) / 16, 2, 0, "bf16, K not a multiple of 8"},
		{cuda.BF16, true, "gemv_r4_b1_bf16", 4096, 8192, 1, 4096 / 8, 4, 0, "K past 6144"},
		{cuda.BF16, true, "gemv_b1_bf16", 192, 5120, 1, 192, 8, 0, "x_proj's few rows"},
		{cuda.BF16, true, "gemv_r4_bf16", 2560, 5120, 2, 2560 / 16, 2, 0, "two sequences"},
		{cuda.BF16, false, "gemv_r4_b1_bf16", 2560, 5120, 1, 2560 / 8, 4, 0, "setting off"},
	} {
		e := &Engine{dt: c.dt, dev: &cuda.Device{SMs: 132}, GEMVRows: 4, GEMVOneSequence: true, GEMVStream: c.on}
		kernel := "gemv"
		if strings.HasPrefix(c.kernel, "step_in") {
			kernel = "step_in"
		}
		p := e.gemvPlan(kernel, c.rows, c.K, c.B)
		if p.kernel != c.kernel || int(p.grid.X) != c.gridX || p.split != c.split || p.shared != c.bytes {
			t.Errorf("%s: plan %s grid %d split %d shared %d, want %s grid %d split %d shared %d", c.comment, p.kernel,
				p.grid.X, p.split, p.shared, c.kernel, c.gridX, c.split, c.bytes)
		}
	}
}

// TestGEMVPlanStreamPrefetch checks, without a GPU, that GEMVStreamPrefetch
// has the streaming entry prefetch for GEMVs of up to streamPrefetchMost
// bytes of weights only.
func TestGEMVPlanStreamPrefetch(t *testing.T) {
	for _, c := range []struct {
		rows, K          int
		setting          bool
		kernel           string
		stream, prefetch bool
	}{
		{1024, 2048, true, "gemv_sb1_bf16", true, true},     // 370m out_proj, 4 MB
		{2560, 5120, true, "gemv_sb1_bf16", true, false},    // 2.8b out_proj, 26 MB
		{50280, 1024, true, "gemv_sb1_bf16", true, false},   // 370m LM head, 103 MB
		{1024, 2048, false, "gemv_sb1_bf16", true, false},   // setting off
		{1024, 2052, true, "gemv_r4_b1_bf16", false, false}, // K not a multiple of 8: no stream
	} {
		e := &Engine{dt: cuda.BF16, dev: &cuda.Device{SMs: 132}, GEMVRows: 4, GEMVOneSequence: true, GEMVStream: true,
			GEMVStreamPrefetch: c.setting}
		p := e.gemvPlan("gemv", c.rows, c.K, 1)
		if p.kernel != c.kernel || p.stream != c.stream || p.prefetch != c.prefetch {
			t.Errorf("%d x %d, setting %v: plan %s stream %v prefetch %v, want %s %v %v", c.rows, c.K, c.setting,
				p.kernel, p.stream, p.prefetch, c.kernel, c.stream, c.prefetch)
		}
	}
}

// TestStreamLaunchIsTheKernels checks that streamBlocks and streamThreads
// are what kernels/step.cu's streaming entries are built for.
func TestStreamLaunchIsTheKernels(t *testing.T) {
	src, err := kernels.Source("step.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{fmt.Sprintf("#define STREAM_BLOCKS %d\n", streamBlocks),
		fmt.Sprintf("#define STREAM_THREADS %d\n", streamThreads)} {
		if !strings.Contains(src, want) {
			t.Errorf("kernels/step.cu does not hold %q", want)
		}
	}
}

// TestTileParts checks, without a GPU, how many blocks the tensor-core
// GEMVs split each tile's k over on the H200's 132 SMs at 16 warps a tile,
// with up to 8: none where the tiles are a quarter of the SMs or more
// (in_proj's, out_proj's, the LM head's); x_proj's few tiles until they
// give every SM two blocks, but never so many that a block's warps lack a
// slice of 32 apiece (130m: K 1536 stops at 2); and the plan's grid and
// scratch follow.
func TestTileParts(t *testing.T) {
	for _, c := range []struct {
		tiles, K, most, want int
		comment              string
	}{
		{512, 2048, 8, 1, "1.4b in_proj"},
		{128, 4096, 8, 1, "1.4b out_proj"},
		{33, 4096, 8, 1, "a quarter of the SMs"},
		{32, 4096, 8, 8, "fewer"},
		{10, 4096, 8, 8, "1.4b x_proj"},
		{10, 4096, 4, 4, "1.4b x_proj, at most 4"},
		{6, 1536, 8, 2, "130m x_proj: K bounds it"},
		{3143, 2048, 8, 1, "LM head"},
		{10, 4096, 1, 1, "no split"},
	} {
		if got := tileParts(c.tiles, c.K, 16, 132, c.most); got != c.want {
			t.Errorf("%s: %d tiles of K %d split over %d blocks, want %d", c.comment, c.tiles, c.K, got, c.want)
		}
	}
	e := &Engine{dt: cuda.BF16, dev: &cuda.Device{SMs: 132}, GEMVTensorCores: true, GEMVTileWarps: 16, GEMVTileParts: 8}
	p := e.gemvPlan("gemv", 160, 4096, 8)
	if p.kernel != "gemv_tc_split_bf16" || p.grid.X != 10 || p.grid.Y != 8 || p.scratch() != 10*8*tilePartFloats {
		t.Errorf("1.4b x_proj: %s, grid %v, scratch %d floats; want gemv_tc_split_bf16, (10, 8), %d", p.kernel, p.grid,
			p.scratch(), 10*8*tilePartFloats)
	}
	if p := e.gemvPlan("gemv", 2048, 4096, 8); p.kernel != "gemv_tc_bf16" || p.grid.Y != 1 || p.scratch() != 0 {
		t.Errorf("1.4b out_proj: %s, grid %v, scratch %d floats; want gemv_tc_bf16 unsplit", p.kernel, p.grid, p.scratch())
	}
	if p := e.gemvPlan("gemv", 2048, 4096, 1); p.splitK || p.scratch() != 0 {
		t.Errorf("one sequence: %+v, scratch %d; want the FMA entry and none", p, p.scratch())
	}
}

// TestWarpgroupApplies checks when a decode step takes the warpgroup GEMVs:
// GEMVWarpgroup set, bf16 on an sm_90 device, 2 to 8 sequences, widths a
// multiple of 8 and a conv of at most 4 taps.
func TestWarpgroupApplies(t *testing.T) {
	h200 := &cuda.Device{Major: 9, Minor: 0, SMs: 132}
	cfg := checkpoint.Config{Hidden: 2048, Inner: 4096, ConvKernel: 4}
	for _, c := range []struct {
		on   bool
		dt   cuda.DType
		dev  *cuda.Device
		cfg  checkpoint.Config
		B    int
		want bool
		why  string
	}{
		{true, cuda.BF16, h200, cfg, 8, true, "a bf16 batch on sm_90"},
		{true, cuda.BF16, h200, cfg, 2, true, "the least batch"},
		{false, cuda.BF16, h200, cfg, 8, false, "off"},
		{true, cuda.BF16, h200, cfg, 1, false, "one sequence"},
		{true, cuda.BF16, h200, cfg, 9, false, "past the decode kernels' batch"},
		{true, cuda.F16, h200, cfg, 8, false, "f16"},
		{true, cuda.BF16, &cuda.Device{Major: 10, Minor: 0}, cfg, 8, false, "not sm_90"},
		{true, cuda.BF16, &cuda.Device{Major: 8, Minor: 0}, cfg, 8, false, "sm_80"},
		{true, cuda.BF16, h200, checkpoint.Config{Hidden: 2044, Inner: 4088, ConvKernel: 4}, 8, false, "d not a multiple of 8"},
		{true, cuda.BF16, h200, checkpoint.Config{Hidden: 2048, Inner: 4096, ConvKernel: 5}, 8, false, "a conv of 5 taps"},
	} {
		e := &Engine{cfg: c.cfg, dt: c.dt, dev: c.dev, GEMVWarpgroup: c.on}
		if got := e.warpgroupApplies(c.B); got != c.want {
			t.Errorf("%s: warpgroupApplies(%d) = %v, want %v", c.why, c.B, got, c.want)
		}
		e.GEMVWarpgroupOneSequence = true // B=1 joins; nothing else changes
		if got, want := e.warpgroupApplies(c.B), c.want || (c.B == 1 && c.on && c.dt == cuda.BF16); got != want {
			t.Errorf("%s, one sequence too: warpgroupApplies(%d) = %v, want %v", c.why, c.B, got, want)
		}
	}
}

// TestWGOutParts checks how many blocks out_proj's tiles split k over on
// the warpgroup GEMV on the H200's 132 SMs: the most up to
// GEMVWarpgroupParts within two blocks an SM, two steps of k a part or more.
func TestWGOutParts(t *testing.T) {
	for _, c := range []struct {
		d, E, most, want int
		shape            string
	}{
		{2048, 4096, 8, 8, "1.4b: 32 tiles, 256 blocks"},
		{2048, 4096, 4, 4, "1.4b at most 4"},
		{2560, 5120, 8, 6, "2.8b: 40 tiles, 7 parts would be 280 blocks"},
		{2560, 5120, 3, 3, "2.8b at most 3"},
		{768, 1536, 16, 12, "130m: 24 steps of k, 13 parts would leave fewer than 2 each"},
		{2048, 4096, 0, 1, "unset"},
	} {
		e := &Engine{cfg: checkpoint.Config{Hidden: c.d, Inner: c.E}, dev: &cuda.Device{SMs: 132}, GEMVWarpgroupParts: c.most}
		if got := e.wgOutParts(); got != c.want {
			t.Errorf("%s: %d parts, want %d", c.shape, got, c.want)
		}
	}
}

// TestWGOutPays checks where New puts out_proj on the warpgroup GEMV: at
// 1.4b's and 2.8b's widths, not 130m's or 370m's (both measured slower).
func TestWGOutPays(t *testing.T) {
	for d, want := range map[int]bool{768: false, 1024: false, 2048: true, 2560: true} {
		if got := wgOutPays(d); got != want {
			t.Errorf("wgOutPays(%d) = %v, want %v", d, got, want)
		}
	}
}

// TestWGOneSequencePays checks where New puts a step of one sequence on
// the warpgroup GEMVs: up to 1.4b's width, not 2.8b's (measured slower).
func TestWGOneSequencePays(t *testing.T) {
	for d, want := range map[int]bool{768: true, 1024: false, 2048: true, 2560: false} {
		if got := wgOneSequencePays(d); got != want {
			t.Errorf("wgOneSequencePays(%d) = %v, want %v", d, got, want)
		}
	}
}
