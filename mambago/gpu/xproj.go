package gpu

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/mambago/mambago/mambago/cuda"
)

// XProj is one layer's x_proj on our own kernel (kernels/xproj.cu has the
// math and the scheme), for the 16-bit storage types on sm_90:
//
//	DBL [M, J] = U [M, E] · Wᵀ, f32 out
//
// Unlike cuBLAS's GEMM it takes programmatic dependent launch: it copies its
// slice of W before it waits for the conv, and lets the scan launch while it
// runs.
type XProj struct {
	U     cuda.Ptr // [M, E] of DType (the conv's output)
	W     cuda.Ptr // [J, E] of DType (x_proj's weight)
	DBL   cuda.Ptr // [M, J] out, f32
	M     int      // rows: B·T
	E, J  int      // channels; dt_rank + 2 state sizes
	DType cuda.DType
	PDL   bool // launch with programmatic dependent launch
	// TMA copies u and W as tiles through tensor maps, a copy a 64-channel
	// chunk of the block's slice, instead of a copy a row, and multiplies
	// them on wgmma (xproj_tma; E a multiple of 256 of at most 2048;
	// Engine.XProjTMA).
	TMA bool
	// Slices is the tensor-map entry's blocks a tile of rows, each a slice
	// of E, which a cluster's blocks: 4 (0 means 4) or 3 (E a multiple of
	// 192; Engine.XProjSlices).
	Slices int
}

// Kernel constants, as in xproj.cu.
const (
	xprojThreads = 256 // XP_THREADS
	xprojTM      = 64  // XP_TM: rows a cluster
	xprojSlices  = 4   // XP_KS: blocks a cluster, each a slice of E
	xprojChunks  = 4   // XP_CHUNKS: groups of u's copies
)

// xprojEntries are the NT of xproj.cu's entries.
var xprojEntries = []int{10, 12}

func xprojKernel(nt int, dt cuda.DType) string { return fmt.Sprintf("xproj%d_%s", nt, dt.Suffix()) }

// xprojShared is xproj_shared(NT, E) in bytes: W's slice and u's tile, rows
// E / 4 + 8 elements long.
func xprojShared(nt, E int) int { return (8*nt + xprojTM) * (E/xprojSlices + 8) * 2 }

// xprojTMAChunks is xproj_tma_chunks(E, KS) for ks slices of E: the
// 64-channel chunks of a block's slice, each a box of W and one of u;
// xprojTMAShared is xproj_tma_shared(NT, E, KS) in bytes: the boxes
// (128-byte rows) and 1024 bytes to align them.
func xprojTMAChunks(E, ks int) int     { return E / ks / 64 }
func xprojTMAShared(nt, E, ks int) int { return xprojTMAChunks(E, ks)*(8*nt+xprojTM)*128 + 1024 }

// xprojTMAWidth reports whether the tensor-map entry with ks slices takes E
// channels: whole 64-channel chunks in each block's slice, at most 8 of
// them (E <= 2048 with 4 slices, 1536 with 3), and an entry for ks.
func xprojTMAWidth(E, ks int) bool {
	return slices.Contains(xprojTMASliceCounts, ks) && E%(ks*64) == 0 && xprojTMAChunks(E, ks) <= 8
}

// xprojTMASliceCounts are the tensor-map entry's clusters (slices of E),
// and xprojTMAKernel names its entry for NT nt, ks slices and storage type
// dt: xproj_tma<NT>_* for 4, xproj_tma<NT>s<ks>_* otherwise.
var xprojTMASliceCounts = []int{xprojSlices, 3}

func xprojTMAKernel(nt, ks int, dt cuda.DType) string {
	if ks == xprojSlices {
		return fmt.Sprintf("xproj_tma%d_%s", nt, dt.Suffix())
	}
	return fmt.Sprintf("xproj_tma%ds%d_%s", nt, ks, dt.Suffix())
}

// ks is the tensor-map entry's slices of E: Slices or its default.
func (x XProj) ks() int { return cmp.Or(x.Slices, xprojSlices) }

// XProjApplies reports whether the kernel serves a layer: a 16-bit storage
// type on sm_90 (it is compiled for sm_90a: clusters), E a multiple of 256
// (each block's slice in 4 chunks of whole k-steps of 16) and at least 512
// (the partial products fit over W's slice), and J a multiple of 4 of at
// most 96: the 130m and 370m shapes.
func XProjApplies(dev *cuda.Device, dt cuda.DType, E, J int) bool {
	nt := dblTiles(J)
	return sm90a(dev) && dt != cuda.F32 && E%(xprojSlices*xprojChunks*16) == 0 && E >= 512 &&
		nt > 0 && xprojShared(nt, E) <= dev.MaxSharedOptIn
}

// Launch queues x_proj on stream; fn looks kernels up by name.
func (x XProj) Launch(fn func(string) *cuda.Function, stream *cuda.Stream) error {
	nt := dblTiles(x.J)
	if nt == 0 || x.DType == cuda.F32 || x.E < 512 || x.M < 1 {
		return fmt.Errorf("gpu: xproj serves no %s layer with M=%d, E=%d, J=%d", x.DType, x.M, x.E, x.J)
	}
	tiles := (x.M + xprojTM - 1) / xprojTM
	if x.TMA {
		return x.launchTMA(fn, nt, cuda.D1(x.ks()*tiles), stream) // a cluster of Slices blocks a tile
	}
	if x.E%(xprojSlices*xprojChunks*16) != 0 || x.ks() != xprojSlices {
		return fmt.Errorf("gpu: xproj's row-copy entry takes E a multiple of %d in %d slices, not E=%d in %d",
			xprojSlices*xprojChunks*16, xprojSlices, x.E, x.ks())
	}
	grid := cuda.D1(xprojSlices * tiles) // a cluster of 4 blocks a tile of rows
	f, shared := fn(xprojKernel(nt, x.DType)), xprojShared(nt, x.E)
	if err := f.SetMaxDynamicShared(shared); err != nil {
		return err
	}
	return f.LaunchMaybePDL(x.PDL, grid, cuda.D1(xprojThreads), shared, stream, x.U, x.W, x.DBL, x.M, x.E, x.J)
}

// launchTMA launches xproj_tma: the tensor maps of u (boxes of 64 rows) and
// W (boxes of 8 nt rows), 64 channels wide.
func (x XProj) launchTMA(fn func(string) *cuda.Function, nt int, grid cuda.Dim3, stream *cuda.Stream) error {
	ks := x.ks()
	if !xprojTMAWidth(x.E, ks) {
		return fmt.Errorf("gpu: xproj_tma in %d slices serves E a multiple of %d of at most %d, not %d", ks, ks*64, ks*512, x.E)
	}
	umap, err := cuda.NewTensorMap2D(x.DType, x.U, x.M, x.E, x.E, xprojTM, 64)
	if err != nil {
		return fmt.Errorf("gpu: xproj_tma's map of u: %w", err)
	}
	wmap, err := cuda.NewTensorMap2D(x.DType, x.W, x.J, x.E, x.E, 8*nt, 64)
	if err != nil {
		return fmt.Errorf("gpu: xproj_tma's map of W: %w", err)
	}
	f, shared := fn(xprojTMAKernel(nt, ks, x.DType)), xprojTMAShared(nt, x.E, ks)
	if err := f.SetMaxDynamicShared(shared); err != nil {
		return err
	}
	return f.LaunchMaybePDL(x.PDL, grid, cuda.D1(xprojThreads), shared, stream, umap, wmap, x.DBL, x.M, x.E, x.J)
}

// OwnXProjOn reports whether the engine's prefill runs x_proj on XProj at
// every length (Engine.OwnXProj, where XProjApplies, the conv does not
// compute it and, with Engine.XProjTMA, the tensor-map entry serves E).
func (e *Engine) OwnXProjOn() bool {
	E, J := e.xprojDims()
	return e.OwnXProj && !e.ConvXProjFused() && XProjApplies(e.dev, e.dt, E, J) && (!e.XProjTMA || e.xprojTMAServes())
}

// XProjOwnAt reports whether a prefill of rows rows (B·T, or a chunk's)
// runs x_proj on XProj rather than cuBLAS's GEMM: Engine.OwnXProj, or
// Engine.AutoXProj where it pays.
func (e *Engine) XProjOwnAt(rows int) bool {
	own, _, _ := e.xprojRoute(rows)
	return own
}

// xprojRoute says how a prefill of rows rows runs x_proj: on XProj (own)
// or cuBLAS's GEMM, and on XProj's tensor-map entry (tma) in clusters of
// slices (XProjTMASlices; 0, the row-copy entry's, without tma). OwnXProj, with
// XProjTMA's choice of entry, comes first; then AutoXProj, which takes the
// tensor-map entry where it was measured faster than cuBLAS's GEMM in bf16
// prefills on the H200 (bench/results/2026-12-01-xproj-timeline.md, run 3:
// 1.069x at 130m T=512, 1.001x at T=2048; 0.975x at T=8192, 0.976x at B=8
// T=2048, 0.985x at 370m T=2048). Those are the launches where each block
// has an SM to itself (4 ⌈rows / 64⌉ blocks at most the SMs) and W's slice,
// which every block copies, is at most 64 KB (61 KB at the 130m width,
// 98 KB at 370m's).
func (e *Engine) xprojRoute(rows int) (own, tma bool, slices int) {
	if e.OwnXProjOn() {
		own, tma = true, e.XProjTMA
	} else {
		E, J := e.xprojDims()
		blocks := xprojSlices * ((rows + xprojTM - 1) / xprojTM)
		wSlice := 8 * dblTiles(J) * (E / xprojSlices) * 2
		own = e.AutoXProj && !e.ConvXProjFused() && XProjApplies(e.dev, e.dt, E, J) && e.xprojTMAServes() &&
			blocks <= e.dev.SMs && wSlice <= 64<<10
		tma = own
	}
	if tma {
		slices = e.XProjTMASlices(rows)
	}
	return own, tma, slices
}

// xprojTMAServes reports whether XProj's tensor-map entry serves the
// model's width on this device (its shared memory included).
func (e *Engine) xprojTMAServes() bool {
	E, J := e.xprojDims()
	return xprojTMAWidth(E, xprojSlices) && xprojTMAShared(dblTiles(J), E, xprojSlices) <= e.dev.MaxSharedOptIn
}

// XProjTMASlices reports the tensor-map entry's slices of E in a prefill
// of rows rows: Engine.XProjSlices where the width and the shared memory
// take it; by default (0) 3 where they do and the 3 ⌈rows / 64⌉ blocks fit
// one an SM, else 4. At 32 tiles of rows clusters of 3 find their SMs where
// clusters of 4 left 8 SMs running two blocks (130m B=1 T=2048 bf16
// prefills 1.013x, T=1024 1.026x, T=512 1.031x on the H200;
// bench/results/2026-12-01-xproj-clusters.md, run 10); at 8192 rows, in
// waves, they were slower alone (15.4 against 13.1 µs).
func (e *Engine) XProjTMASlices(rows int) int {
	E, J := e.xprojDims()
	fits := func(ks int) bool {
		return xprojTMAWidth(E, ks) && xprojTMAShared(dblTiles(J), E, ks) <= e.dev.MaxSharedOptIn
	}
	switch ks := e.XProjSlices; {
	case ks != 0 && fits(ks):
		return ks
	case ks == 0 && fits(3) && 3*((rows+xprojTM-1)/xprojTM) <= e.dev.SMs:
		return 3
	}
	return xprojSlices
}

// xprojDims are x_proj's channels E and output columns J.
func (e *Engine) xprojDims() (E, J int) { return e.cfg.Inner, e.cfg.DTRank + 2*e.cfg.State }
