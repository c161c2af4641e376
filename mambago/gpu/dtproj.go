package gpu

import (
	"strings"

	"github.com/mambago/mambago/mambago/cuda"
)

// DTProj is one layer's time step over rows positions: dt_proj on dt_low,
// the first R columns of x_proj's output, then the bias and softplus
// (kernels/dtproj.cu has the math and the layouts). Everything is f32.
type DTProj struct {
	DBL     cuda.Ptr // x_proj's output [rows, LDD]
	LDD, R  int
	W, Bias cuda.Ptr // [E, R] and [E]
	DT      cuda.Ptr // [rows, E] out
	Rows, E int
	// TensorCores runs the product on the tensor cores as 3xTF32
	// (dt_proj_tc_f32; f32 accuracy) where the 16-byte reads allow it.
	// Only for devices of compute capability 8.0 and newer.
	TensorCores bool
	// OneTF32Product, with TensorCores, takes one product of the operands
	// rounded to TF32 (dt_proj_tc1_f32) instead of three: for the bf16
	// engine, whose rounding error is its bf16 weights' (kernels/dtproj.cu).
	OneTF32Product bool
	// SMs is the device's SM count; with TensorCores, where blocks of
	// dtProjTallRows rows still make three blocks an SM, the tall entries
	// run (dt_proj_tc_tall_f32, dt_proj_tc1_tall_f32). 0 never picks them.
	SMs int
	// Warpgroup, with TensorCores and OneTF32Product, runs that product on
	// Hopper's warpgroup products (dt_proj_wg_f32) where R is at most
	// dtProjWGMaxR and the 16-byte reads allow it: the bf16 engine on
	// sm_90 devices (the kernel needs sm_90a).
	Warpgroup bool
	// Short, with TensorCores, runs the short entries where R is at most
	// dtProjShortMaxR and the 16-byte reads allow it
	// (dt_proj_tc_short_f32, dt_proj_tc1_short_f32): blocks of
	// dtProjShortRows rows that stage all of R at once, for prompts too
	// short to give every SM blocks of the other entries. The same bits.
	// It takes precedence over Warpgroup and the tall entries.
	Short bool
	// PDL launches with programmatic dependent launch (Engine.PrefillPDL).
	PDL bool
}

// dt_proj's tiles, the same for every entry (DT_CH, DT_ROWS and DT_THREADS,
// and TC_BN, TC_BM and TC_THREADS in kernels/dtproj.cu): channels and rows
// per block, and threads per block.
const (
	dtProjChannels = 128
	dtProjRows     = 64
	dtProjThreads  = 256
	dtProjTallRows = 128 // rows per block of the tall entries
)

// The warpgroup entry's tiles (DW_BN, DW_WGS and DW_SLABS in
// kernels/dtproj.cu): channels a block, warpgroups a block (each its own
// tiles of 64 rows), and the largest R.
const (
	dtProjWGChannels = 128
	dtProjWGGroups   = 2
	dtProjWGMaxR     = 160
)

// The short entries' tiles (MT = 1 in kernels/dtproj.cu's short entries):
// rows a block, and the largest R, whose stages (R/16 of 10 KB) leave room
// for two blocks on an H200's SM.
const (
	dtProjShortRows = 32
	dtProjShortMaxR = 160
)

// dtProjShortShared is dt_proj_short_shared(R, 1) in kernels/dtproj.cu:
// every stage of R, each the block's dt_low rows and its channels' weight
// rows by 16 columns of f32.
func dtProjShortShared(R int) int { return (R + 15) / 16 * (dtProjShortRows + dtProjChannels) * 16 * 4 }

// dtProjShortPays reports whether dt_proj over rows positions of rank R
// and E channels is faster on the short entries than on the others, on a
// device of sms SMs whose blocks may opt in to sharedOptIn bytes of shared
// memory: from R = 128 (where dt_proj is its own kernel at B=1), above 128
// rows, and where two short blocks fit an SM and the grid runs in one wave
// of them. On the H200 (bf16 prefills, BenchmarkDTProjShort,
// bench/results/2026-12-03-dtshort.md, 2026-12-04-dtrules.md): 1.4b at
// 160 rows 1.027x, 192 rows 1.031x, 256 rows 1.068-1.083x (B=1 T=256 and
// B=2 T=128), 2.8b at 160 and 192 rows 1.028x; outside the rule 1.4b T=128
// 0.985-0.992x, T=384 1.007x, T=512 0.981x, and 2.8b T=128 0.985x, T=256
// 1.004-1.006x (two waves), T=512 0.946x.
func dtProjShortPays(R, rows, E, sms, sharedOptIn int) bool {
	blocks := (E + dtProjChannels - 1) / dtProjChannels * ((rows + dtProjShortRows - 1) / dtProjShortRows)
	return R >= 128 && R <= dtProjShortMaxR && rows > 128 && 2*dtProjShortShared(R) <= sharedOptIn && blocks <= 2*sms
}

// dtProjWGPays reports whether dt_proj over rows positions of rank R and
// E channels is faster on the warpgroup entry than on dt_proj_tc1's, on a
// device of sms SMs: from R = 128 and 512 rows, where the entry's one wave
// of blocks walks its row groups in rounds at least 85% full
// (dtProjWGGrid). On the H200 (bf16 prefills, BenchmarkDTProjWarpgroup,
// bench/results/2026-12-04-dtrules.md): 1.4b T=512 1.035x, T=1024 1.013x,
// T=1536 1.022x, B=2 T=512 1.012x, 2.8b T=1024 1.012x, T=2048 and up
// 1.012-1.015x; but 2.8b T=512 0.994x, where 4 row groups fall to 3 blocks
// a channel tile (two rounds, 67% full). Below 512 rows the short entries
// or tc1 take it (BenchmarkDTProj alone: 1.4b T=128 12.90 µs on tc1
// against 14.05 here).
func dtProjWGPays(R, rows, E, sms int) bool {
	if R < 128 || rows < 512 {
		return false
	}
	_, perTile, groups := dtProjWGGrid(rows, E, sms)
	rounds := (groups + perTile - 1) / perTile
	return 20*groups >= 17*rounds*perTile
}

// dtProjWGGrid is the warpgroup entry's grid over rows positions and E
// channels on sms SMs (none: no cap): a block a channel tile (x of them) and
// group of row tiles, perTile blocks a channel tile in one wave, each
// walking every perTile-th of the groups (a tile a warpgroup), so that its
// weights stay in shared memory over them.
func dtProjWGGrid(rows, E, sms int) (x, perTile, groups int) {
	x = (E + dtProjWGChannels - 1) / dtProjWGChannels
	groups = (rows + 64*dtProjWGGroups - 1) / (64 * dtProjWGGroups)
	perTile = groups
	if sms > 0 {
		perTile = max(1, min(groups, sms/x))
	}
	return x, perTile, groups
}

// dtProjWGTakes is the rule the engine asks before it runs the warpgroup
// entry (dtProjWGPays): a variable so that BenchmarkDTProjWarpgroup can time
// the entry where the rule leaves it out (SetDTProjWGFrom in
// export_test.go).
var dtProjWGTakes = dtProjWGPays

// dtProjWGShared is dt_proj_wg_shared(R) in kernels/dtproj.cu: the block's
// weights and each warpgroup's tile of dt_low, in slabs of 32 columns, and
// 1024 bytes to align them.
func dtProjWGShared(R int) int { return (R+31)/32*128*(dtProjWGChannels+64*dtProjWGGroups) + 1024 }

// tall reports whether p runs a tall tensor-core entry: enough blocks of
// dtProjTallRows rows to give every SM three.
func (p DTProj) tall() bool {
	blocks := (p.E + dtProjChannels - 1) / dtProjChannels * ((p.Rows + dtProjTallRows - 1) / dtProjTallRows)
	return p.TensorCores && p.SMs > 0 && blocks >= 3*p.SMs
}

// Kernel names the entry that runs p. Where R and LDD are multiples of 4 and
// DBL and W are 16-byte aligned, its reads are 16-byte pieces of rows:
// dt_proj_tc_f32 with TensorCores (dt_proj_tc1_f32 with OneTF32Product
// too, and _tall_ in the name where tall blocks apply; dt_proj_wg_f32 in
// their place with Warpgroup as well, up to R = dtProjWGMaxR), else
// dt_proj_f32. With Short, the short entries take the place of the tensor
// cores' others up to R = dtProjShortMaxR. Otherwise dt_proj_narrow_f32.
func (p DTProj) Kernel() string {
	k, _ := p.entry()
	return k
}

// entry is Kernel and its rows per block.
func (p DTProj) entry() (kernel string, rows int) {
	switch {
	case p.R%4 != 0 || p.LDD%4 != 0 || p.DBL%16 != 0 || p.W%16 != 0:
		return "dt_proj_narrow_f32", dtProjRows
	case !p.TensorCores:
		return "dt_proj_f32", dtProjRows
	case p.Short && p.R <= dtProjShortMaxR:
		if p.OneTF32Product {
			return "dt_proj_tc1_short_f32", dtProjShortRows
		}
		return "dt_proj_tc_short_f32", dtProjShortRows
	case p.Warpgroup && p.OneTF32Product && p.R <= dtProjWGMaxR:
		return "dt_proj_wg_f32", 64
	}
	kernel, rows = "dt_proj_tc", dtProjRows
	if p.OneTF32Product {
		kernel += "1"
	}
	if p.tall() {
		kernel, rows = kernel+"_tall", dtProjTallRows
	}
	return kernel + "_f32", rows
}

// Launch queues p on stream; fn looks kernels up by name.
func (p DTProj) Launch(fn func(string) *cuda.Function, stream *cuda.Stream) error {
	k, rows := p.entry()
	f, shared, threads := fn(k), 0, dtProjThreads
	grid := cuda.Dim3{X: (p.E + dtProjChannels - 1) / dtProjChannels, Y: (p.Rows + rows - 1) / rows, Z: 1}
	if k == "dt_proj_wg_f32" {
		x, perTile, _ := dtProjWGGrid(p.Rows, p.E, p.SMs)
		grid.X, grid.Y = x, perTile
		shared, threads = dtProjWGShared(p.R), 128*dtProjWGGroups
	}
	if strings.Contains(k, "_short_") {
		shared = dtProjShortShared(p.R)
	}
	if shared > 0 {
		if err := f.SetMaxDynamicShared(shared); err != nil {
			return err
		}
	}
	return f.LaunchMaybePDL(p.PDL, grid, cuda.D1(threads), shared, stream,
		p.DBL, p.LDD, p.R, p.W, p.Bias, p.DT, p.Rows, p.E)
}
