package gpu

import (
	"strings"

	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
)

const (
	// decodeMaxB is the largest batch the single-token decode kernels take
	// (STEP_MAXB in kernels/step.cu); a larger batch steps through the
	// prefill path with T = 1.
	decodeMaxB = 8
	stepWarps  = 8 // STEP_WARPS in kernels/step.cu: output rows per block
	// tileRows is the rows of a block of the tensor-core GEMVs (group_tile
	// in kernels/step.cu), whose K must be a multiple of tileKAlign;
	// tileMaxWarps is the most warps such a block may have
	// (STEP_TILE_MAXW).
	tileRows, tileKAlign, tileMaxWarps = 16, 8, 16
	// tilePartFloats is the f32 scratch of one part of a tile split along
	// k (STEP_TILE_PART); tileMaxParts the most parts a tile may take.
	tilePartFloats, tileMaxParts = 144, 8
)

// stepDevice queues one decode step for the B sequences of s: token ids from
// src (T = 1), next-token logits [B, V] f32 to logits. The prefill path,
// taken for batches over the decode kernels' limit, leaves the hidden states
// in hidden [B, d].
func (e *Engine) stepDevice(s *State, src source, hidden, logits cuda.Ptr) error {
	if src.in.B > e.decodeKernelMaxB() {
		if err := e.run(s, src, engine.Last, hidden, 0); err != nil {
			return err
		}
		return e.logitsDevice(hidden, src.in.B, logits)
	}
	return e.decode(s, src, logits)
}

// decodeKernelMaxB resolves DecodeKernelMaxB.
func (e *Engine) decodeKernelMaxB() int {
	switch {
	case e.DecodeKernelMaxB == 0:
		return decodeMaxB
	case e.DecodeKernelMaxB < 0:
		return 0
	}
	return min(e.DecodeKernelMaxB, decodeMaxB)
}

// decode is the decode step on the kernels of kernels/step.cu: four launches
// a layer, every activation f32, the weights read once for all sequences.
// Where GEMVWarpgroup applies (warpgroupApplies), in_proj and the LM head
// run on kernels/gemv_wg.cu instead, each after x_parts_bf16 (the norm into
// x's parts: five launches a layer), and with GEMVWarpgroupOut so does
// out_proj, its x's parts written by the scan step. With GEMVWarpgroupFold
// (New's default there) out_proj runs there at every width and writes the
// next layer's parts and norm sums itself, and only layer 0 runs
// x_parts_bf16: four launches a layer again. With HeadPicks there, the LM
// head also ranks each sequence's greedy pick (headPicks), in keys that
// layer 0's x_parts_bf16 zeroes.
func (e *Engine) decode(s *State, src source, logits cuda.Ptr) error {
	c, ws := e.cfg, &e.ws
	B, d, E, R, N, K, V := src.in.B, c.Hidden, c.Inner, c.DTRank, c.State, c.ConvKernel, c.Vocab
	if err := e.ensure(B); err != nil {
		return err
	}
	if err := e.poison(logits, B*V); err != nil {
		return err
	}
	if _, err := e.embed(src, 0, 1, false); err != nil {
		return err
	}
	eps, dbl := float32(c.Eps), R+2*N
	in, x, out := e.gemvPlan("step_in", 2*E, d, B), e.gemvPlan("gemv", dbl, E, B), e.gemvPlan("gemv", d, E, B)
	var wg *wgMaps
	if e.warpgroupApplies(B) {
		var err error
		if wg, err = e.warpgroupMaps(); err != nil {
			return err
		}
	}
	fold := wg != nil && e.GEMVWarpgroupFold
	wgOut, outParts := wg != nil && e.wgOutOn(), e.wgOutParts()
	// norm is where in_proj and the LM head find their norm: in the sums of
	// squares out_proj left (a fold), or none (x's parts are normed).
	type norm struct {
		ss    cuda.Ptr
		tiles int
	}
	folded := norm{ws.normSS.Ptr, wgTiles(d)}
	headKeys := cuda.Ptr(0) // zeroed by the step's first x_parts_bf16 for the LM head's picks
	if e.headPicks(B) {     // (where the warpgroup GEMVs apply: wg is set)
		headKeys = ws.headPick.Ptr
	}
	for l, g := range e.layers {
		if wg != nil {
			inNorm := folded
			if !fold || l == 0 {
				keys := cuda.Ptr(0)
				if l == 0 {
					keys = headKeys
				}
				if err := e.launchParts(ws.h.Ptr, d, g.norm, eps, B, d, ws.parts.Ptr, keys); err != nil {
					return err
				}
				inNorm = norm{}
			}
			if err := e.launchWG("step_in_wg_bf16", 2*E, 1, wg.in[l], wg.dParts, g.inBias, g.conv, g.convBias,
				s.conv(l), ws.xz.Ptr, B, d, E, K, inNorm.ss, inNorm.tiles, eps); err != nil {
				return err
			}
		} else if err := e.launchGEMV(in, ws.h.Ptr, g.norm, eps, g.inProj, g.inBias,
			g.conv, g.convBias, s.conv(l), ws.xz.Ptr, B, d, E, K, in.split); err != nil {
			return err
		}
		if err := e.launchGEMV(x, ws.xz.Ptr, 2*E, cuda.Ptr(0), float32(0), g.xProj,
			cuda.Ptr(0), ws.dbl.Ptr, dbl, 0, B, E, dbl, x.split); err != nil {
			return err
		}
		if c.Falcon {
			if err := e.launch("rmsnorm_dbc_f32", cuda.D1(B), cuda.D1(128), 0, ws.dbl.Ptr, R, N, float32(c.MixerEps)); err != nil {
				return err
			}
		}
		parts := cuda.Ptr(0)
		if wgOut {
			parts = ws.eParts(d)
		}
		if err := e.scanStep(B, l, &g, s, parts); err != nil {
			return err
		}
		if wgOut {
			nextNorm, nextParts, nextSS := cuda.Ptr(0), cuda.Ptr(0), cuda.Ptr(0)
			if fold {
				nextNorm, nextParts, nextSS = e.normF, ws.parts.Ptr, ws.normSS.Ptr
				if l+1 < len(e.layers) {
					nextNorm = e.layers[l+1].norm
				}
			}
			if err := e.launchWG("gemv_wg_bf16", d, outParts, wg.out[l], wg.eParts, g.outBias, ws.h.Ptr, d, 1, B, E, d,
				ws.tiles.Ptr, ws.tileCounts.Ptr, cuda.Ptr(0), 0, eps, nextNorm, nextParts, nextSS); err != nil {
				return err
			}
		} else if err := e.launchGEMV(out, ws.delta.Ptr, E, cuda.Ptr(0), float32(0), g.outProj,
			g.outBias, ws.h.Ptr, d, 1, B, E, d, out.split); err != nil {
			return err
		}
	}
	if wg != nil {
		head := folded
		if !fold {
			if err := e.launchParts(ws.h.Ptr, d, e.normF, eps, B, d, ws.parts.Ptr, cuda.Ptr(0)); err != nil {
				return err
			}
			head = norm{}
		}
		if headKeys != 0 {
			return e.launchWG("lm_head_wg_bf16", V, 1, wg.head, wg.dParts, logits, V, B, d, V, head.ss, head.tiles, eps,
				headKeys)
		}
		return e.launchWG("gemv_wg_bf16", V, 1, wg.head, wg.dParts, cuda.Ptr(0), logits, V, 0, B, d, V, cuda.Ptr(0),
			cuda.Ptr(0), head.ss, head.tiles, eps, cuda.Ptr(0), cuda.Ptr(0), cuda.Ptr(0))
	}
	head := e.gemvPlan("gemv", V, d, B)
	return e.launchGEMV(head, ws.h.Ptr, d, e.normF, eps, e.lmHead, cuda.Ptr(0), logits, V, 0, B, d, V, head.split)
}

// headPickBytes is the workspace's headPick: lm_head_wg_bf16's keys, uint64
// [decodeMaxB].
const headPickBytes = 8 * decodeMaxB

// headPicks reports whether a decode step of B sequences ranks their greedy
// picks in the LM head (HeadPicks where the warpgroup GEMVs apply), into
// the workspace's headPick keys for head_picks_i64.
func (e *Engine) headPicks(B int) bool {
	return e.HeadPicks && B <= e.decodeKernelMaxB() && e.warpgroupApplies(B)
}

// scanStep launches layer l's scan step for the B sequences of s: a warp a
// channel for every sequence (step_scan_batch_f32) where DecodeScanBatch
// asks for it, the state fits its lanes (N <= 32) and dbl's B rows fit a
// block's default 48 KB of shared memory; else a warp a channel and
// sequence (step_scan_f32). Where parts is set the scan also writes y
// there as out_proj's parts (store_parts in kernels/math.cuh).
func (e *Engine) scanStep(B, l int, g *layer, s *State, parts cuda.Ptr) error {
	c, ws := e.cfg, &e.ws
	R, N, E := c.DTRank, c.State, c.Inner
	dbl, blocks := R+2*N, (E+stepWarps-1)/stepWarps
	block, shared := cuda.D1(32*stepWarps), 4*B*dbl
	if B > 1 && e.DecodeScanBatch && N <= 32 && shared <= 48<<10 {
		return e.launchStep("step_scan_batch_f32", cuda.D1(blocks), block, shared, ws.dbl.Ptr, dbl, R, g.dtProj,
			g.dtBias, g.a2, g.d, ws.xz.Ptr, s.ssm(l), ws.delta.Ptr, E, N, B, parts)
	}
	return e.launchStep("step_scan_f32", cuda.Dim3{X: blocks, Y: B, Z: 1}, block, 0, ws.dbl.Ptr, dbl, R, g.dtProj,
		g.dtBias, g.a2, g.d, ws.xz.Ptr, s.ssm(l), ws.delta.Ptr, E, N, parts)
}

// scanBatchPays reports whether the batched scan step (a warp a channel,
// every sequence in turn) beats a warp a channel and sequence for E
// channels on SMs multiprocessors: where its E / stepWarps blocks give the
// SMs at least 3 each. With fewer, each SM's few warps walk their
// sequences' chains with too little beside them. Measured on the H200 (132
// SMs; BenchmarkDecodeBatchSettings, bf16 steps of 8 sequences with the
// tensor-core GEMVs at 16 warps a tile, 2026-12-03), without it and with
// it: 130m (192 blocks) 599.8 and 648.7 µs a step, 370m (256) 1246.2 and
// 1294.2, 1.4b (512) 2721.0 and 2513.5, 2.8b (640) 5003.2 and 4690.2.
// (Beside the slower tensor-core GEMVs before 8e40672 it paid at 370m.)
func scanBatchPays(E, SMs int) bool {
	return (E+stepWarps-1)/stepWarps >= 3*SMs
}

// gemvLaunch is how one GEMV of kernels/step.cu runs: the entry (gemv or
// step_in, with one or four rows to a warp group, or on the tensor cores),
// its grid and block, and its split (for the tensor-core entries, the
// block's warps). A _tc_split entry's grid is (tiles, parts): each tile's
// k split over parts blocks.
type gemvLaunch struct {
	kernel      string
	grid, block cuda.Dim3
	split       int
	splitK      bool // a _tc_split entry: it takes the scratch of its parts
	shared      int  // dynamic shared memory (the streaming entries')
	// stream marks the streaming entry, which takes prefetch last: whether
	// it asks L2 for its rows before its PDL wait.
	stream, prefetch bool
}

// smCount is the device's multiprocessors, or 0 for an engine without one
// (the plans' CPU tests).
func (e *Engine) smCount() int {
	if e.dev == nil {
		return 0
	}
	return e.dev.SMs
}

// The streaming one-sequence entries' launch (kernels/step.cu's
// STREAM_BLOCKS and STREAM_THREADS): blocks an SM and threads a block.
const streamBlocks, streamThreads = 3, 256

// streamPrefetchMost is the most bytes of weights GEMVStreamPrefetch asks
// L2 for. Measured on the H200 (BenchmarkDecodeStream, bf16 B=1 step
// graphs, 2026-12-04): 370m's out_proj (4 MB) gained, 370m 662.8 -> 644.3
// µs a step; 1.4b's (16.8 MB) lost 0.5% and 2.8b's (26 MB) 3.8%, and with
// the LM heads (77-257 MB) too 2.8b lost 5%: a prefetch that the reads of
// the same step (in_proj's 34-52 MB) evict before use is read twice.
const streamPrefetchMost = 8 << 20

// streamShared is a streaming entry's dynamic shared memory for rows of K:
// x' and the norm weight, K floats each.
func streamShared(K int) int { return 8 * K }

// streamApplies reports whether the streaming entries take a GEMV of rows
// of K weights of size bytes at split: their vector path only (K a
// multiple of 16 bytes of weights), splits of 1, 2 or 4, and x' and the
// norm weight within a block's default 48 KB of shared memory (K up to
// 6144).
func streamApplies(K, size, split int) bool {
	return K%(16/size) == 0 && (split == 1 || split == 2 || split == 4) && streamShared(K) <= 48<<10
}

// tileScratch is what the decode step's GEMVs split along k need under the
// engine's settings (the same at every batch they run), the tensor-core
// entries' and the warpgroup out_proj's (wgScratch), and the prefill's
// skinny GEMM's (skinnyScratch): scratch floats and counters, zeros where
// none splits.
func (e *Engine) tileScratch() (floats, counters int) {
	c := e.cfg
	dbl := c.DTRank + 2*c.State
	for _, p := range []gemvLaunch{e.gemvPlan("step_in", 2*c.Inner, c.Hidden, 2), e.gemvPlan("gemv", dbl, c.Inner, 2),
		e.gemvPlan("gemv", c.Hidden, c.Inner, 2), e.gemvPlan("gemv", c.Vocab, c.Hidden, 2)} {
		if n := p.scratch(); n > 0 {
			floats, counters = max(floats, n), max(counters, p.grid.X)
		}
	}
	wf, wc := e.wgScratch()
	sf, sc := e.skinnyScratch()
	return max(floats, wf, sf), max(counters, wc, sc)
}

// scratch is the f32 scratch of p's parts along k, in floats (0 unsplit).
func (p gemvLaunch) scratch() int {
	if !p.splitK {
		return 0
	}
	return p.grid.X * p.grid.Y * tilePartFloats
}

// launchGEMV launches p's entry with args, and, for a _tc_split entry,
// the workspace's scratch and counters for its parts along k, or, for the
// streaming entry, whether it prefetches.
func (e *Engine) launchGEMV(p gemvLaunch, args ...any) error {
	if p.splitK {
		args = append(args, e.ws.tiles.Ptr, e.ws.tileCounts.Ptr)
	}
	if p.stream {
		args = append(args, b2i(p.prefetch))
	}
	return e.launchStep(p.kernel, p.grid, p.block, p.shared, args...)
}

// tileParts picks the blocks a tensor-core GEMV's tiles split k over: none
// unless the tiles are fewer than a quarter of the SMs (x_proj's 6-12);
// then the most, a power of two up to most (which keeps tiles x parts
// under 2 SMs), while each block's warps keep a 32-wide slice of k or more
// apiece.
// Measured on the H200 at 1.4b sizes, B=8 (BenchmarkGEMVBatch, 16 warps):
// x_proj's 10 tiles 14.56 µs whole, 12.70 in 4 parts; out_proj's 128 tiles
// 17.57 whole, 17.89 and 19.26 in 2 and 4 parts; in_proj and the LM head
// slower in every split.
func tileParts(tiles, K, warps, SMs, most int) int {
	parts := 1
	for 4*tiles < SMs && 2*parts <= most && 2*parts*warps*32 <= K {
		parts *= 2
	}
	return parts
}

// defaultTileParts is New's Engine.GEMVTileParts for E channels (x_proj's
// K): 8 from 4096 up, else 1. Measured on the H200 (BenchmarkDecodeBatchSettings,
// bf16 steps of 8 sequences, 2026-12-03, at New's other settings), x_proj's
// tiles whole and split: 130m (K 1536, 2 parts) 584.0 and 594.9 µs a step,
// 370m (2048, 4 parts) 1227.9 and 1249.7, 1.4b (4096, 8 parts) 2340.1 and
// 2302.7, 2.8b (5120, 8 parts) 4683.9 and 4577.9.
func defaultTileParts(E int) int {
	if E >= 4096 {
		return tileMaxParts
	}
	return 1
}

// gemvPlan lays out a GEMV of rows rows of K weights for kernel ("gemv" or
// "step_in") over B sequences: the tensor-core entry for a bf16 batch where
// GEMVTensorCores asks for it, K is a multiple of 8 and the rows are
// GEMVTensorCoreRows or more, with blocks of GEMVTileWarps warps, each
// tile's k split over up to GEMVTileParts blocks (tileParts: the
// _tc_split entries where it splits); else the
// split by gemvSplit unless GEMVSplit fixes it, GEMVRows rows to a group
// for GEMVs of 1024 rows or more, and the one-sequence entry at B=1 where
// GEMVOneSequence asks for it.
func (e *Engine) gemvPlan(kernel string, rows, K, B int) gemvLaunch {
	if B > 1 && e.GEMVTensorCores && e.dt == cuda.BF16 && K%tileKAlign == 0 && rows >= e.GEMVTensorCoreRows {
		tiles := (rows + tileRows - 1) / tileRows
		warps := min(max(e.GEMVTileWarps, 1), tileMaxWarps)
		sms := e.smCount()
		p := gemvLaunch{kernel: e.typed(kernel + "_tc"), grid: cuda.D1(min(tiles, 65535)), block: cuda.D1(32 * warps),
			split: warps}
		if parts := tileParts(tiles, K, warps, sms, min(max(e.GEMVTileParts, 1), tileMaxParts)); parts > 1 {
			p.kernel, p.grid.Y, p.splitK = e.typed(kernel+"_tc_split"), parts, true
		}
		return p
	}
	split := gemvSplit(rows, K, e.dt.Size())
	if e.GEMVSplit > 0 {
		split = e.GEMVSplit
	}
	group := 1
	if e.GEMVRows == 4 && rows >= 1024 {
		group, kernel = 4, kernel+"_r4"
	}
	if B == 1 && e.GEMVOneSequence {
		// With one sequence's sums a warp has registers to spare, and rows
		// of 4096 weights or more (out_proj's E-long rows from the 1.4b
		// shape up; in_proj's and the LM head's rows are d long) go faster
		// split four ways: bf16 2.8b out_proj 16.61 -> 15.01 µs
		// (BenchmarkGEMVOneSequence on the H200), while in_proj's and the
		// LM head's 2560-long rows were slower (23.30 -> 27.20, 79.5 -> 94.6).
		if e.GEMVSplit == 0 && rows >= 1024 && K >= 4096 {
			split = 4
		}
		if e.GEMVStream && rows >= 1024 && strings.HasPrefix(kernel, "gemv") && streamApplies(K, e.dt.Size(), split) {
			return gemvLaunch{kernel: e.typed("gemv_sb1"), grid: cuda.D1(streamBlocks * max(1, e.smCount())),
				block: cuda.D1(streamThreads), split: split, shared: streamShared(K), stream: true,
				prefetch: e.GEMVStreamPrefetch && rows*K*e.dt.Size() <= streamPrefetchMost}
		}
		kernel += "_b1"
	}
	per := stepWarps / split * group // rows per block
	return gemvLaunch{kernel: e.typed(kernel), grid: cuda.D1(min((rows+per-1)/per, 65535)), block: cuda.D1(32 * stepWarps),
		split: split}
}

// gemvSplit picks how many warps share a GEMV row of K weights of size
// bytes (the split of kernels/step.cu). Measured on the H200 (bf16 decode
// step, B=1, BenchmarkBigShapes): two warps a row beat one and beat four
// or eight for the big GEMVs (1.4b: 2.05 ms a step against 2.34 with one
// and 3.0 with eight). A GEMV of under 1024 rows (x_proj, whose rows are E
// long) has too few warps to fill the GPU, so it splits until no warp walks
// more than one of the row's 512-byte slices.
func gemvSplit(rows, K, size int) int {
	slices := (K*size + 511) / 512
	if rows >= 1024 {
		return min(2, slices)
	}
	split := 1
	for split < stepWarps && split < slices {
		split *= 2
	}
	return split
}

// launchStep launches one of kernels/step.cu's kernels, with programmatic
// dependent launch when e.DecodePDL is set (they all wait for the previous
// kernel before reading its results).
func (e *Engine) launchStep(name string, grid, block cuda.Dim3, shared int, args ...any) error {
	return e.fn[name].LaunchMaybePDL(e.DecodePDL, grid, block, shared, e.stream, args...)
}
