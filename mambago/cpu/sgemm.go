package cpu

import (
	"runtime"
	"sync"
	"unsafe"
)

// The engine's own SGEMM, for a prefill without a CBLAS library: gonum's
// pure-Go SGEMM has no vector instructions, and ran a 130m T=512 prefill at
// about 140 tok/s on the 2-core build machine, against about 1,300 on
// numpy's OpenBLAS. This one takes the classic blocked form: C's tiles
// (gemmTiles) are spread over the goroutines; within a tile, blocks of
// sgemmKC columns of W are packed into micro-panels [kc][nr], and an
// assembly micro-kernel keeps an mr × nr block of C in registers while it
// walks k, a row of the W panel against each of mr rows of A read in place
// and broadcast: 6 × 16 with AVX2 (12 registers of sums), 12 × 32 with
// AVX-512F (24). Packing A as well, into [kc][mr] panels, had cost 12% of
// the GEMMs' time in a prefill.

// sgemmKC is the columns of A and W packed at a time: a W micro-panel of
// sgemmKC × 32 floats (32 KB) stays in L1 across a tile's rows.
const sgemmKC = 256

// sgemmMC is the most rows of A a W panel meets at a time (240 KB of A at
// sgemmKC, in L2).
const sgemmMC = 240

// sgemmShape is a micro-kernel's block of C, mr rows by nr columns, and the
// kernel itself: sums of k products of mr rows of A at a (lda floats apart)
// and a [k][nr] W micro-panel, stored into (add false) or added to (add
// true) C at c, ldc floats apart.
type sgemmShape struct {
	mr, nr int
	kernel func(k int, a *float32, lda int, w, c *float32, ldc int, add bool)
	name   string // as Engine.Backend gives it
}

// sgemmKernel returns the micro-kernel for this CPU; ok is false without
// AVX2 (gemm then runs gonum's SGEMM).
func sgemmKernel() (s sgemmShape, ok bool) {
	switch {
	case !useLanes: // as on a CPU without AVX2 (tests turn the lanes off)
		return sgemmShape{}, false
	case useWideSgemm:
		return sgemmShape{12, 32, sgemmAVX512, "go sgemm (avx512)"}, true
	default:
		return sgemmShape{6, 16, sgemmAVX2, "go sgemm (avx2)"}, true
	}
}

// useWideSgemm runs sgemm on the AVX-512 micro-kernel where the CPU has
// AVX-512F; tests turn it off to check the AVX2 one.
var useWideSgemm = hasAVX512

// PreferOwnGEMM reports whether the engine's own GEMMs (Engine.BLAS nil)
// are the better choice on this CPU than numpy's OpenBLAS: wherever they
// run in assembly (AVX2, FMA and F16C, or AVX-512F). With AVX-512F a 130m
// prefill ran 1.04-1.10x faster through them on a 2-core build machine and
// 1.16-1.34x on 16 cores, and a float32 decode step of one sequence
// (dotRowsAVX512 against OpenBLAS's SGEMV) 1.07x faster on 2 cores and
// even on 16 (bench/results/2026-12-05-cpu-own-gemm-auto.md). With AVX2
// alone, once the micro-panels were packed through transpose8 beside the
// products (BenchmarkOwnAgainstBLAS, the two taking turns call by call):
// on a 2-core AVX2 build machine prefills at 0.80-1.02x OpenBLAS's time
// and float32 steps of one sequence at 0.99-1.07x; on two 16-core hosts
// with both held to AVX2, prefills at 0.72-0.96x and float32 steps at
// 0.83-0.97x (bench/results/2026-12-06-cpu-own-gemm-avx2.md).
func PreferOwnGEMM() bool { return useLanes }

// sgemm computes C = A·Wᵀ + beta·C for A [M, K] (row stride lda), W [N, K]
// in any Storage (widened as it is packed) and C [M, N] (row stride ldc),
// on the micro-kernel s, C's tiles spread over GOMAXPROCS goroutines.
func sgemm(s sgemmShape, c []float32, ldc int, a []float32, lda int, w matrix, M, N, K int, beta float32) {
	if K == 0 || (beta != 0 && beta != 1) { // C = beta·C first (beta 0 not reading C, as BLAS)
		for m := range M {
			row := c[m*ldc : m*ldc+N]
			for i := range row {
				if beta == 0 {
					row[i] = 0
				} else {
					row[i] *= beta
				}
			}
		}
		if K == 0 {
			return
		}
		beta = 1
	}
	tm, tn := gemmTiles(M, N, runtime.GOMAXPROCS(0))
	nb := (N + tn - 1) / tn
	parallelFor((M+tm-1)/tm*nb, func(i int) {
		m0, n0 := i/nb*tm, i%nb*tn
		sgemmTile(s, c[m0*ldc+n0:], ldc, a[m0*lda:], lda, w, n0, min(tm, M-m0), min(tn, N-n0), K, beta != 0)
	})
}

// sgemmBuffers are one tile's packed W micro-panels, its last rows of A
// padded to a whole block, and its edge block of C, kept in sgemmPool
// between tiles.
type sgemmBuffers struct {
	w, a, edge []float32
}

// sgemmPool keeps sgemmTile's buffers from one tile to the next: a prefill
// runs four GEMMs a layer, each in several tiles.
var sgemmPool sync.Pool

// sgemmTile computes the M × N tile of C at c from A's rows at a and W's
// rows n0.., adding to C where add.
func sgemmTile(s sgemmShape, c []float32, ldc int, a []float32, lda int, w matrix, n0, M, N, K int, add bool) {
	mr, nr := s.mr, s.nr
	np := (N + nr - 1) / nr // W micro-panels
	buf, _ := sgemmPool.Get().(*sgemmBuffers)
	if buf == nil {
		buf = &sgemmBuffers{}
	}
	defer sgemmPool.Put(buf)
	buf.w = grow(buf.w, np*nr*sgemmKC)
	buf.a = grow(buf.a, mr*sgemmKC)
	buf.edge = grow(buf.edge, mr*nr)
	for k0 := 0; k0 < K; k0 += sgemmKC {
		kc := min(sgemmKC, K-k0)
		addK := add || k0 > 0 // later blocks of k add to the first's sums
		for m0 := 0; m0 < M; m0 += sgemmMC {
			mc := min(sgemmMC, M-m0)
			full := mc / mr * mr // rows read in place; the rest padded into buf.a
			if full < mc {
				padRows(buf.a, a[(m0+full)*lda+k0:], lda, mc-full, kc, mr)
			}
			calls := (mc + mr - 1) / mr
			for p := range np {
				wp := &buf.w[p*nr*kc]
				var ahead panelAhead
				if m0 == 0 { // the first rows pack each panel; later rows reuse it
					packPanel(buf.w[p*nr*kc:(p+1)*nr*kc], w, n0, N, p, k0, kc, nr)
					ahead = nextPanel(w, n0, N, p, k0, K, nr, calls)
				}
				cols := min(nr, N-p*nr)
				for q := 0; q < mc; q += mr {
					ahead.step()
					rows := min(mr, mc-q)
					ap, ldA := &a[(m0+q)*lda+k0], lda
					if rows < mr {
						ap, ldA = &buf.a[0], kc
					}
					at := (m0+q)*ldc + p*nr
					if rows == mr && cols == nr {
						s.kernel(kc, ap, ldA, wp, &c[at], ldc, addK)
						continue
					}
					// An edge block: through a full block of sums.
					s.kernel(kc, ap, ldA, wp, &buf.edge[0], nr, false)
					for i := range rows {
						dst, src := c[at+i*ldc:at+i*ldc+cols], buf.edge[i*nr:i*nr+cols]
						if addK {
							for j, v := range src {
								dst[j] += v
							}
						} else {
							copy(dst, src)
						}
					}
				}
			}
		}
	}
}

// panelAhead asks L2 for the rows of W that the next micro-panel packs,
// a few rows before each micro-kernel call on this one, so that the pack
// reads L2: the products leave the memory idle long enough to fetch them.
// Packed straight from memory, all of a k block before its products, W's
// values came in at about 3 GB/s a core on the AVX2 build machine.
type panelAhead struct {
	base                unsafe.Pointer // W's first value
	off                 int            // the next row's first byte, from base
	stride, lines, left int            // bytes between rows, lines a row, rows left
	each                int            // rows a step
}

// nextPanel returns the panelAhead for the micro-panel after panel p of
// the k block at k0 (the next block's first panel after the last one),
// spread over calls steps; none past W's last.
func nextPanel(w matrix, n0, N, p, k0, K, nr, calls int) panelAhead {
	first := (p + 1) * nr
	if first >= N {
		first, k0 = 0, k0+sgemmKC
	}
	if k0 >= K {
		return panelAhead{}
	}
	rows := min(nr, N-first)
	base, size := w.raw()
	off := ((n0+first)*w.cols + k0) * size
	skew := int((uintptr(base) + uintptr(off)) & 63) // the row's bytes in its first line before it
	return panelAhead{
		base:   base,
		off:    off,
		stride: w.cols * size,
		lines:  (skew + min(sgemmKC, K-k0)*size + 63) / 64,
		left:   rows,
		each:   (rows + calls - 1) / calls,
	}
}

// step asks for the next few rows.
func (h *panelAhead) step() {
	if h.left <= 0 {
		return
	}
	n := min(h.each, h.left)
	prefetchRows(unsafe.Add(h.base, h.off), h.stride, n, h.lines)
	h.off += n * h.stride
	h.left -= n
}

// grow returns b with length n, reallocated where its capacity is short.
func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// packPanel lays out micro-panel p of W's rows n0..n0+N, columns
// k0..k0+kc: its nr rows from n0+p·nr as [kc][nr], rows past N zero. Whole
// square blocks go through transpose16 (AVX-512 kernel) or transpose8
// (AVX2): a scalar transpose had taken as long as the products at T=128 on
// AVX-512, and on the AVX2 build machine packed 1.2 G values a second, a
// quarter of a T=128 in_proj's time. The rest goes through packRows.
func packPanel(panel []float32, w matrix, n0, N, p, k0, kc, nr int) {
	side, transpose := 8, transpose8
	if useWideSgemm {
		side, transpose = 16, transpose16
	}
	kb := kc / side * side
	base, size := w.raw()
	for h := 0; h < nr; h += side {
		first := p*nr + h // the block's first row, of W's N
		if first+side > N {
			packRows(panel, w, n0, N, p*nr, h, min(nr, h+side), k0, 0, kc, nr)
			continue
		}
		for k := 0; k < kb; k += side {
			src := unsafe.Add(base, ((n0+first)*w.cols+k0+k)*size)
			transpose(src, w.cols*size, int(w.st), &panel[k*nr+h], nr*4)
		}
		packRows(panel, w, n0, N, p*nr, h, h+side, k0, kb, kc, nr)
	}
}

// packRows fills rows j0..j1 of the panel of W's rows from row0 (of N,
// from n0), columns k0+from..k0+kc, one value at a time, rows past N zero.
func packRows(panel []float32, w matrix, n0, N, row0, j0, j1, k0, from, kc, nr int) {
	var row [sgemmKC]float32
	for j := j0; j < j1; j++ {
		n := row0 + j
		if n >= N {
			for k := from; k < kc; k++ {
				panel[k*nr+j] = 0
			}
			continue
		}
		r := n0 + n
		src := row[from:kc]
		if w.f32 != nil {
			src = w.f32[r*w.cols+k0+from : r*w.cols+k0+kc]
		} else {
			widenInto(src, w.h[r*w.cols+k0+from:r*w.cols+k0+kc], w.st)
		}
		for k, v := range src {
			panel[(from+k)*nr+j] = v
		}
	}
}

// padRows copies rows (fewer than mr) of A's columns k0..k0+kc, at a (lda
// floats apart), into dst as mr rows of kc, the rows past them zero: the
// micro-kernel's last block of a tile's rows.
func padRows(dst, a []float32, lda, rows, kc, mr int) {
	for i := range mr {
		row := dst[i*kc : (i+1)*kc]
		if i < rows {
			copy(row, a[i*lda:i*lda+kc])
		} else {
			clear(row)
		}
	}
}
