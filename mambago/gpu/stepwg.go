package gpu

import (
	"fmt"

	"github.com/mambago/mambago/mambago/cuda"
)

// The warpgroup GEMVs of kernels/gemv_wg.cu (Engine.GEMVWarpgroup): 64 rows
// a block of wgThreads threads, in wgStages stages of 64 of k, each a 64 x
// 64 box of weights and a 24 x 64 box of x's parts (padded to 4 KB).
const (
	wgRows, wgThreads, wgStages, wgBK = 64, 160, 8, 64
	wgTaps                            = 4 // GW_TAPS: the longest conv step_in_wg_bf16 takes
)

// wgRingShared is gemv_wg_shared(cols) in kernels/gemv_wg.cu: the ring of
// wgStages stages, each a 64 x 64 box of weights and x's box of cols rows
// (room for at least 4 KB), 1024 bytes to align it, and two barriers a
// stage.
func wgRingShared(cols int) int {
	return wgStages*(wgRows*wgBK*2+max(cols*wgBK*2, 4096)) + 1024 + 2*wgStages*8
}

// wgShared is the warpgroup GEMVs' shared memory: their x is 24 rows of
// parts.
func wgShared() int { return wgRingShared(24) }

// wgTiles is the blocks of 64 rows a warpgroup GEMV of rows rows takes.
func wgTiles(rows int) int { return (rows + wgRows - 1) / wgRows }

// wgPartsBytes is the parts workspace of the warpgroup GEMVs: x's three
// bf16 parts for 8 sequences, rows of d (in_proj's and the LM head's x),
// then rows of E (out_proj's, which the scan step writes).
func wgPartsBytes(d, E int) int { return 2 * 24 * (d + E) }

// wgMaps are the tensor maps the warpgroup GEMVs copy through: each layer's
// in_proj and out_proj weights and the LM head's (encoded once: weights
// never move), and the two parts' rows in the workspace (encoded again
// when the workspace is reallocated: generation).
type wgMaps struct {
	generation     int
	in, out        []cuda.TensorMap
	head           cuda.TensorMap
	dParts, eParts cuda.TensorMap
}

// warpgroupApplies reports whether a decode step of B sequences runs
// in_proj and the LM head (and, with GEMVWarpgroupOut or
// GEMVWarpgroupFold, out_proj) on the warpgroup GEMVs: GEMVWarpgroup set,
// bf16 weights on an sm_90 device (the kernels need sm_90a), 2 <= B <= 8
// (or B = 1 with GEMVWarpgroupOneSequence), the widths a multiple of 8
// (16-byte rows for the tensor maps) and a conv of at most wgTaps taps.
func (e *Engine) warpgroupApplies(B int) bool {
	c, least := e.cfg, 2
	if e.GEMVWarpgroupOneSequence {
		least = 1
	}
	return e.GEMVWarpgroup && e.dt == cuda.BF16 && sm90a(e.dev) &&
		B >= least && B <= decodeMaxB && c.Hidden%8 == 0 && c.Inner%8 == 0 && c.ConvKernel <= wgTaps
}

// warpgroupMaps returns the tensor maps for the current workspace, encoding
// what is missing or stale.
func (e *Engine) warpgroupMaps() (*wgMaps, error) {
	c, ws := e.cfg, &e.ws
	m := e.wg
	if m == nil {
		m = &wgMaps{generation: -1}
		box := func(p cuda.Ptr, rows, K int) (cuda.TensorMap, error) {
			return cuda.NewTensorMap2D(cuda.BF16, p, rows, K, K, wgRows, wgBK)
		}
		var err error
		if m.head, err = box(e.lmHead, c.Vocab, c.Hidden); err != nil {
			return nil, fmt.Errorf("gpu: the LM head's tensor map: %w", err)
		}
		for l, g := range e.layers {
			in, err := box(g.inProj, 2*c.Inner, c.Hidden)
			if err != nil {
				return nil, fmt.Errorf("gpu: layer %d in_proj's tensor map: %w", l, err)
			}
			out, err := box(g.outProj, c.Hidden, c.Inner)
			if err != nil {
				return nil, fmt.Errorf("gpu: layer %d out_proj's tensor map: %w", l, err)
			}
			m.in, m.out = append(m.in, in), append(m.out, out)
		}
		e.wg = m
	}
	if m.generation != ws.generation {
		var err error
		if m.dParts, err = cuda.NewTensorMap2D(cuda.BF16, ws.parts.Ptr, 24, c.Hidden, c.Hidden, 24, wgBK); err != nil {
			return nil, fmt.Errorf("gpu: the parts' tensor map: %w", err)
		}
		if m.eParts, err = cuda.NewTensorMap2D(cuda.BF16, ws.eParts(c.Hidden), 24, c.Inner, c.Inner, 24, wgBK); err != nil {
			return nil, fmt.Errorf("gpu: the scan's parts' tensor map: %w", err)
		}
		m.generation = ws.generation
	}
	return m, nil
}

// eParts is where the parts of rows of E start in the parts workspace,
// after those of rows of d.
func (w *workspace) eParts(d int) cuda.Ptr { return w.parts.Ptr + cuda.Ptr(2*24*d) }

// launchParts queues x_parts_bf16: x [B, K] (row stride ldx), with the norm
// weight normw (or none), as parts into dst; where headKeys is set, it
// also zeroes the LM head's keys there (lm_head_wg_bf16).
func (e *Engine) launchParts(x cuda.Ptr, ldx int, normw cuda.Ptr, eps float32, B, K int, dst, headKeys cuda.Ptr) error {
	return e.launchStep("x_parts_bf16", cuda.D1(decodeMaxB), cuda.D1(256), 0, x, ldx, normw, eps, B, K, dst, headKeys)
}

// launchWG queues one of the warpgroup GEMVs over rows rows, each tile's k
// split over parts blocks (grid (tiles, parts)).
func (e *Engine) launchWG(kernel string, rows, parts int, args ...any) error {
	grid := cuda.Dim3{X: wgTiles(rows), Y: parts, Z: 1}
	return e.launchStep(kernel, grid, cuda.D1(wgThreads), wgShared(), args...)
}

// wgOutParts is how many blocks out_proj's tiles (d rows, rows of E) split
// k over on the warpgroup GEMV: the most up to GEMVWarpgroupParts that
// keeps the blocks within two an SM and each part two steps of k or more.
func (e *Engine) wgOutParts() int {
	c, sms := e.cfg, e.smCount()
	tiles, steps := wgTiles(c.Hidden), (c.Inner+wgBK-1)/wgBK
	return max(1, min(e.GEMVWarpgroupParts, 2*sms/tiles, steps/2))
}

// wgPartsMost is the GEMVWarpgroupParts New sets at hidden width d: 6 at
// 2048 (1.4b), 4 elsewhere. Measured on the H200 (BenchmarkDecodeOutParts,
// bf16 steps on the fold, 2026-12-03, two processes), µs a step in 4 parts
// against the best other count: 1.4b B=1 1252.0 and 1204.8 in 6 (1257.5
// and 1207.1 again; 8 parts 1344.6), B=8 1682.5 and 1630.0 in 6 (1636.4 in
// 5, 1637.7 in 6 in the second); 130m, 370m and 2.8b were fastest in 4
// (2.8b B=8 2894.7 against 2869.7 in 3 once, then 4 again against 5 and
// 6), and 130m in 12 parts 0.92x at B=1. The counts between are not
// monotone (1.4b B=1: 3 parts 0.925x, 8 parts 0.931x), so each width is
// its own measurement.
func wgPartsMost(d int) int {
	if d == 2048 {
		return 6
	}
	return 4
}

// wgOutPays reports whether out_proj pays on the warpgroup GEMV at hidden
// width d: from 2048 up. Its d / 64 tiles are few at 130m and 370m.
// Measured on the H200 (BenchmarkDecodeWarpgroup, bf16 steps of 8
// sequences, 2026-12-03), in_proj and the LM head on it, out_proj off and
// on (in 4 parts): 130m 500.1 and 508.4 µs a step, 370m 1146.9 and
// 1177.9, 1.4b 2024.4 and 1891.9, 2.8b 4066.9 and 3213.4.
func wgOutPays(d int) bool { return d >= 2048 }

// wgOneSequencePays reports whether a step of one sequence is faster on
// the warpgroup GEMVs with the norm folded (GEMVWarpgroupOneSequence and
// GEMVWarpgroupFold) than on the one-sequence entries, at width d: up to
// 2048, but not at 1024. On the H200 (BenchmarkDecodeWarpgroup at B=1,
// bf16, 2026-12-03, b00ebf7), µs a step, one-sequence entries against the
// fold: 130m 353.1 and 312.9, 370m 783.2 and 713.0, 1.4b 1322.2 and
// 1252.0, 2.8b 2175.8 and 2220.9. With out_proj and the LM head on the
// streaming entry (GEMVStream; BenchmarkDecodeStream, 2026-12-04, 14cb1a4),
// one-sequence entries against the fold: 130m 344.3 and 318.7, 370m 669.6
// and 714.4, 1.4b 1280.3 and 1213.0. The exception at 1024 is that
// measurement, not a model: 370m's 48 layers gain 2.5 µs each from the
// streaming out_proj, which the fold's out_proj (16 tiles) does not take.
func wgOneSequencePays(d int) bool { return d <= 2048 && d != 1024 }

// wgOutOn reports whether out_proj takes the warpgroup GEMV where the
// warpgroup GEMVs apply: with GEMVWarpgroupOut, or with GEMVWarpgroupFold,
// whose out_proj writes the next layer's parts.
func (e *Engine) wgOutOn() bool { return e.GEMVWarpgroupOut || e.GEMVWarpgroupFold }

// wgScratch is what out_proj split along k on the warpgroup GEMV needs
// (floats and counters), zeros where it does not split.
func (e *Engine) wgScratch() (floats, counters int) {
	parts := e.wgOutParts()
	if !e.GEMVWarpgroup || !e.wgOutOn() || parts == 1 {
		return 0, 0
	}
	tiles := wgTiles(e.cfg.Hidden)
	return tiles * parts * 4 * 128, tiles
}
