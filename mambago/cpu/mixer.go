package cpu

import (
	"fmt"
	"math"
	"runtime"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/engine"
)

// The Mamba-1 block, stage by stage. For a chunk of B sequences of T
// positions, rows = B·T, row r = b·T + t, E = d_inner, R = dt rank, N = d_state:
//
//	x     = rmsnorm(h) · norm.weight                          [rows, d]
//	xz    = x @ in_proj^T (+ b)          -> xs | z            [rows, 2E]
//	u     = silu(causal_conv1d(xs) (+ b))                      [rows, E]
//	dbl   = u @ x_proj^T                 -> dt | B | C         [rows, R+2N]
//	delta = softplus(dt @ dt_proj^T + dt_proj.b)               [rows, E]
//	s_t   = exp(delta_t·A) ⊙ s_{t-1} + delta_t·B_t·u_t         [E, N] per sequence
//	y_t   = (s_t·C_t + D·u_t) · silu(z_t)                      [rows, E]
//	h     = h + y @ out_proj^T (+ b)                           [rows, d]
//
// FalconMamba puts a weightless RMSNorm on dt, B and C before their use.

// work is the scratch of one chunk.
type work struct {
	B, T  int
	h     []float32 // [rows, d]      residual stream
	x     []float32 // [rows, d]      normed input of the block
	xz    []float32 // [rows, 2E]     in_proj output
	u     []float32 // [rows, E]      conv output
	dbl   []float32 // [rows, R+2N]   x_proj output
	delta []float32 // [rows, E]      dt_proj output, before softplus
	y     []float32 // [rows, E]      gated scan output
	pad   []int     // [B] rows of padding that open each sequence's chunk (engine.Input.Pad), or nil
}

func newWork(c checkpoint.Config, B, T int) *work {
	rows, E := B*T, c.Inner
	return &work{
		B: B, T: T,
		h:     make([]float32, rows*c.Hidden),
		x:     make([]float32, rows*c.Hidden),
		xz:    make([]float32, rows*2*E),
		u:     make([]float32, rows*E),
		dbl:   make([]float32, rows*(c.DTRank+2*c.State)),
		delta: make([]float32, rows*E),
		y:     make([]float32, rows*E),
	}
}

// resize shrinks w's views to a chunk of B·T rows (never above its capacity).
func (w *work) resize(c checkpoint.Config, B, T int) {
	rows, E := B*T, c.Inner
	w.B, w.T = B, T
	w.h, w.x = w.h[:rows*c.Hidden], w.x[:rows*c.Hidden]
	w.xz, w.u, w.delta, w.y = w.xz[:rows*2*E], w.u[:rows*E], w.delta[:rows*E], w.y[:rows*E]
	w.dbl = w.dbl[:rows*(c.DTRank+2*c.State)]
}

// setPad sets the chunk's padding rows for positions t0.. of the input's
// rows (none without in.Pad).
func (w *work) setPad(in engine.Input, t0 int) {
	w.pad = w.pad[:0]
	if in.Pad == nil {
		return
	}
	for b := range w.B {
		w.pad = append(w.pad, min(w.T, max(0, in.Pad[b]-t0)))
	}
}

// tokens returns the first row of sequence b's tokens in the chunk and
// their count: the rows after its padding.
func (w *work) tokens(b int) (r0, n int) {
	p := 0
	if w.pad != nil {
		p = w.pad[b]
	}
	return b*w.T + p, w.T - p
}

// zeroPadding zeroes the first width values of each padding row of the
// chunk in m, rows ld values apart.
func (w *work) zeroPadding(m []float32, ld, width int) {
	for b, p := range w.pad {
		for t := range p {
			r := b*w.T + t
			clear(m[r*ld : r*ld+width])
		}
	}
}

// tap copies the chunk's residual stream (rows of d) into dst, [B, T, d] for rows of T
// positions of which the chunk holds t0.., zero at the padding.
func (w *work) tap(dst []float32, d, T, t0 int) {
	for b := range w.B {
		at := (b*T + t0) * d
		copy(dst[at:at+w.T*d], w.h[b*w.T*d:(b+1)*w.T*d])
		if len(w.pad) > 0 {
			clear(dst[at : at+w.pad[b]*d])
		}
	}
}

// block runs layer l of the model over the chunk in w, continuing from and
// updating the carried conv window and SSM state of that layer.
func (e *Engine) block(l int, w *work, conv, ssm []float32) {
	c, lw, lm := &e.cfg, &e.w.Layers[l], &e.mats[l]
	rows, d, E := w.B*w.T, c.Hidden, c.Inner
	R, N := c.DTRank, c.State

	t := e.Timer.start()
	rmsnorm(w.x, w.h, lw.Norm, d, c.Eps)
	t = e.Timer.lap(t, "rmsnorm")
	e.gemm(w.xz, 2*E, w.x, d, lm.inProj, rows, 2*E, d, 0)
	addBias(w.xz, lw.InBias)
	t = e.Timer.lap(t, "in_proj")
	// The conv and the scan run over each sequence's tokens (w.tokens), so
	// the padding reaches neither a window nor a state; its rows of their
	// outputs are zero.
	e.conv(w, l, conv)
	w.zeroPadding(w.u, E, E)
	t = e.Timer.lap(t, "conv")
	e.gemm(w.dbl, R+2*N, w.u, E, lm.xProj, rows, R+2*N, E, 0)
	if c.Falcon {
		normDBC(w.dbl, rows, R, N, c.MixerEps)
	}
	t = e.Timer.lap(t, "x_proj")
	e.gemm(w.delta, E, w.dbl, R+2*N, lm.dtProj, rows, E, R, 0) // its bias goes into the scan
	t = e.Timer.lap(t, "dt_proj")
	e.scan(w, l, ssm)
	w.zeroPadding(w.y, E, E)
	t = e.Timer.lap(t, "scan")
	e.gemm(w.h, d, w.y, E, lm.outProj, rows, d, E, 1) // onto the residual stream
	addBias(w.h, lw.OutBias)
	e.Timer.lap(t, "out_proj+residual")
}

// rmsnorm writes x = v / rms(v) · weight for every row v of h; weight may be
// nil. The rows go a block a worker, of at least 8: blocks of 64 had left
// 14 of 16 workers idle at T=128, where the stage took 4% of a prefill.
func rmsnorm(x, h, weight []float32, d int, eps float64) {
	parallelSplit(len(h)/d, 8, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			src, dst := h[r*d:(r+1)*d], x[r*d:(r+1)*d]
			dst = dst[:len(src)]
			s := rmsScale(src, eps)
			if weight == nil {
				for i, v := range src {
					dst[i] = v * s
				}
				continue
			}
			weight := weight[:len(src)]
			for i, v := range src {
				dst[i] = weight[i] * (v * s)
			}
		}
	})
}

// normDBC applies FalconMamba's weightless RMSNorm to dt, B and C of each row.
func normDBC(dbl []float32, rows, R, N int, eps float64) {
	stride := R + 2*N
	parallelRows(rows, 256, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := dbl[r*stride : (r+1)*stride]
			for _, part := range [][]float32{row[:R], row[R : R+N], row[R+N:]} {
				s := rmsScale(part, eps)
				for i := range part {
					part[i] *= s
				}
			}
		}
	})
}

// gemm computes C = A @ W^T + beta·C, with A [M, K] (row stride lda), W [N, K]
// and C [M, N] (row stride ldc). With AVX2, up to rowsMax rows run in
// gemmRows, except one row against a float32 W where a CBLAS library in
// e.BLAS has an SGEMV, and up to chunkedRows() in chunks of gemmRows.
// More rows run in that library's SGEMM when one is loaded (a 16-bit W
// widened to float32 for it), else in our own SGEMM (sgemm.go) where the
// CPU has AVX2, else in gonum's.
func (e *Engine) gemm(c []float32, ldc int, a []float32, lda int, w matrix, M, N, K int, beta float32) {
	if w.rows != N || w.cols != K {
		panic(fmt.Sprintf("cpu: gemm of a [%d, %d] matrix as [%d, %d]", w.rows, w.cols, N, K))
	}
	a, c = a[:(M-1)*lda+K], c[:(M-1)*ldc+N]
	switch {
	case M == 1 && w.f32 != nil && e.BLAS != nil && e.BLAS.HasSgemv():
		// One row (a decode step of one sequence): SGEMV streams W once,
		// where SGEMM packs it first, at about a third of the speed.
		if !e.BLAS.SingleThreaded {
			e.BLAS.Sgemv(N, K, 1, w.f32, K, a, beta, c)
			return
		}
		const minBlock = 256
		parallelSplit(N, minBlock, func(lo, hi int) {
			e.BLAS.Sgemv(hi-lo, K, 1, w.f32[lo*K:], K, a, beta, c[lo:hi])
		})
		return
	case M <= rowsMax && useLanes:
		// A few rows (a decode step of up to eight sequences): our kernel
		// streams W once for all of them.
		gemmRows(c, ldc, a, lda, w, M, N, K, beta)
		return
	case M <= chunkedRows() && useLanes:
		// Up to chunkedRows() rows: gemmRows on chunks of at most rowsMax,
		// as even as they come (each of two rows or more, so a row's bits
		// are those of any batch of 2 to 8), W streamed once a chunk.
		chunks := (M + rowsMax - 1) / rowsMax
		for i, m0 := 0, 0; i < chunks; i++ {
			m := (M - m0) / (chunks - i)
			gemmRows(c[m0*ldc:], ldc, a[m0*lda:], lda, w, m, N, K, beta)
			m0 += m
		}
		return
	}
	if s, ok := sgemmKernel(); ok && e.BLAS == nil {
		// No CBLAS library: our SGEMM, which widens a 16-bit W as it packs it.
		sgemm(s, c, ldc, a, lda, w, M, N, K, beta)
		return
	}
	wf, release := w.widened()
	defer release()
	if e.BLAS != nil && !e.BLAS.SingleThreaded {
		e.BLAS.Sgemm(true, M, N, K, 1, a, lda, wf, K, beta, c, ldc)
		return
	}
	if e.BLAS != nil {
		// Single-threaded SGEMMs on tiles of C, one goroutine each at a
		// time: no library thread pool spins against the engine's goroutines.
		e.gemmTiled(c, ldc, a, lda, wf, M, N, K, beta, runtime.GOMAXPROCS(0))
		return
	}
	A := blas32.General{Rows: M, Cols: K, Stride: lda, Data: a}
	W := blas32.General{Rows: N, Cols: K, Stride: K, Data: wf}
	C := blas32.General{Rows: M, Cols: N, Stride: ldc, Data: c}
	blas32.Gemm(gblas.NoTrans, gblas.Trans, 1, A, W, beta, C)
}

// chunkedRowsMax is the most rows that gemm runs as chunks of gemmRows on
// up to chunkedWorkersMax workers: the chunks stream W once each (up to
// rowsMax rows), where an SGEMM packs W (and widens a 16-bit one) first.
// On the 2-core build machine (BenchmarkChunkedRows, in_proj's shape
// alone) the chunks ran a bf16 W 1.2-3.5x faster than the own SGEMM or
// OpenBLAS's up to 48 rows; a float32 W from 1.3x faster (OpenBLAS at 16
// rows) to 1.2x slower (the own SGEMM at 24 and 32). Through Python, a
// 130m step of 9 / 16 / 32 sequences went 2.3 / 2.15 / 1.43x faster in
// bf16 and 1.4 / 1.44 / 0.97x in float32, and a float32 prefill of 32
// tokens 1.2x slower. One limit serves every Storage, so that a 16-bit W
// gives the bits of its float32 widening at every M
// (TestStorageMatchesFloat32): 16, where float32 still gains
// (results/2026-12-06-cpu-chunked-rows.md). With more workers the SGEMM
// wins (chunkedWorkersMax).
var chunkedRowsMax = 16

// chunkedWorkersMax is the most workers (GOMAXPROCS) for which gemm runs
// chunks of gemmRows. On the GPU host's cores limited to 2 and 3 workers,
// the chunks ran a bf16 W 1.3-1.8x faster than the own SGEMM at 9 and 16
// rows and a float32 one 1.1-1.3x slower; at 4 and 8 workers bf16 was
// about even and float32 1.2-1.9x slower (BenchmarkChunkedRows,
// results/2026-12-06-cpu-runs.md). The path cannot depend on the storage
// (see chunkedRowsMax), so chunks run up to 3 workers, where the 16-bit W
// gains most.
var chunkedWorkersMax = 3

// chunkedRows returns the most rows gemm runs in gemmRows, whole or in
// chunks, with this process's workers.
func chunkedRows() int {
	if runtime.GOMAXPROCS(0) > chunkedWorkersMax {
		return rowsMax
	}
	return chunkedRowsMax
}

// gemmTiled runs gemm's C = A @ W^T + beta·C as single-threaded SGEMMs of
// e.BLAS on the tiles gemmTiles cuts for workers, a run of neighbouring
// tiles a goroutine (parallelFor).
func (e *Engine) gemmTiled(c []float32, ldc int, a []float32, lda int, w []float32, M, N, K int, beta float32, workers int) {
	tm, tn := gemmTiles(M, N, workers)
	nb := (N + tn - 1) / tn
	parallelFor((M+tm-1)/tm*nb, func(i int) {
		m0, n0 := i/nb*tm, i%nb*tn
		m, n := min(tm, M-m0), min(tn, N-n0)
		e.BLAS.Sgemm(true, m, n, K, 1, a[m0*lda:], lda, w[n0*K:], K, beta, c[m0*ldc+n0:], ldc)
	})
}

// gemmTileWorkers is the fewest workers for which gemmTiles cuts C into
// several tiles a worker.
const gemmTileWorkers = 8

// gemmTiles returns the tile of C [M, N] that one single-threaded SGEMM
// computes, tm rows by tn columns, for workers goroutines.
//
// Each SGEMM packs its rows of A and of W before it multiplies, so tiles
// cost packing: a strip of all M rows packs A once a call. Below
// gemmTileWorkers, C is cut into one strip a worker, along the longer side
// of C. With more workers some finish late (BenchmarkGemmSplits on the GPU
// machine's 16 cores: the slowest of 16 strips took 1.4-1.9x the fastest),
// so C is cut into about four near-square tiles a worker, taken as they
// come. There that ran in_proj 1.08-1.17x and out_proj 1.26-1.28x faster at
// T=2048, x_proj 2.3x and in_proj at T=128 2.9x, and even with the strips
// at T=512 (bench/results/2026-12-02-cpu-gemm-tiles.md). On 2 cores the
// strips stay: tiles lost up to 10% there to the packing of smaller blocks.
func gemmTiles(M, N, workers int) (tm, tn int) {
	const strip, minM, minN = 64, 32, 64 // the smallest sides cut
	if workers < gemmTileWorkers {
		if N >= M {
			return M, max(strip, (N+workers-1)/workers)
		}
		return max(strip, (M+workers-1)/workers), N
	}
	want := 4 * workers
	mb := int(math.Round(math.Sqrt(float64(want) * float64(M) / float64(N))))
	mb = min(max(mb, 1), max(M/minM, 1))
	nb := min(max((want+mb-1)/mb, 1), max(N/minN, 1))
	return (M + mb - 1) / mb, (N + nb - 1) / nb
}

// addBias adds bias to every row of m; a nil bias adds nothing.
func addBias(m, bias []float32) {
	if bias == nil {
		return
	}
	n := len(bias)
	parallelRows(len(m)/n, 256, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := m[r*n : (r+1)*n]
			for i, b := range bias {
				row[i] += b
			}
		}
	})
}

// chanBlock is the number of channels one conv or scan task handles: 96
// tasks a sequence at 130m, six a worker on 16 cores, so that a late core
// holds up a stage by a sixth of it. BenchmarkConvScanJobs (130m, B=1,
// T=512) on the GPU machine's 16 cores, rounds 2-3 of three runs: 16
// channels ran the scan 6% faster than 32 (26.6-27.3 ms against 28.2-29.2)
// and the prefill 2.5% faster (median ratio of six rounds), the conv even;
// on 2 cores the two were even. Tasks of 8 write half a cache line of each
// row of u and y, which two workers then share: slower on both machines.
var chanBlock = 16

// serialChannels is the most B·T·E (sequences, positions, channels) that
// a conv or scan runs on the calling goroutine, not in parallel: a decode
// step's, whose work takes about as long as the fork-join would (tens of
// µs). From 130m (E = 1536) at B ≤ 5 up to a 7B model's E = 8192 at B = 1.
// With the small GEMMs (serialGemm), that took a 130m bf16 step from 22.6
// to 18.3 ms on 2 cores (results/2026-12-05-cpu-rows.md).
var serialChannels = 1 << 13

// channelTasks runs fn on every sequence's channels in tasks of chanBlock,
// in parallel: fn(b, e0, e1) for channels [e0, e1) of sequence b, one of B,
// E channels each.
func channelTasks(B, T, E int, fn func(b, e0, e1 int)) {
	blocks := (E + chanBlock - 1) / chanBlock
	task := func(job int) {
		b, e0 := job/blocks, (job%blocks)*chanBlock
		fn(b, e0, min(E, e0+chanBlock))
	}
	if B*T*E <= serialChannels {
		for job := range B * blocks {
			task(job)
		}
		return
	}
	parallelFor(B*blocks, task)
}

// laneTasks runs a conv or scan stage in tasks over channel blocks
// (channelTasks): lanes(q, e0, e1) runs lane calls over the tokens of q
// from channel e0 (none without AVX2) and returns the first channel it
// left, and channels(b, e0, e1) runs those left of sequence b one at a
// time. A decode step of several sequences (one token each, no padding)
// gives each task all of them, so that one lane call walks them all.
func laneTasks(w *work, E int, lanes func(q seqs, e0, e1 int) int, channels func(b, e0, e1 int)) {
	run := func(q seqs, e0, e1 int) {
		if useLanes {
			e0 = lanes(q, e0, e1)
		}
		if e0 < e1 {
			for b := q.b; b < q.b+q.n; b++ {
				channels(b, e0, e1)
			}
		}
	}
	if w.T == 1 && w.pad == nil && w.B > 1 {
		channelTasks(1, w.B, E, func(_, e0, e1 int) { run(seqs{0, w.B}, e0, e1) })
		return
	}
	channelTasks(w.B, w.T, E, func(b, e0, e1 int) { run(seqs{b, 1}, e0, e1) })
}

// conv computes u = silu(causal depthwise conv1d(xs) + bias) over each
// sequence's tokens in the chunk (work.tokens), reading the K-1 inputs
// before them from the carried window [B, E, K] and leaving the last K
// inputs in it (each sequence's windows [E, K] in lane blocks of eight).
// With AVX2, eight channels at a time run in the lanes of one register
// (convLanes); the channels left over, or all of them without AVX2, run one
// at a time below, their windows gathered into rows for the call.
func (e *Engine) conv(w *work, l int, state []float32) {
	E, K := e.cfg.Inner, e.cfg.ConvKernel
	lw := &e.w.Layers[l]
	laneTasks(w, E, func(q seqs, e0, e1 int) int {
		for ; e0%laneWidth == 0 && e0+laneWidth <= e1; e0 += laneWidth {
			e.convLanes(w, l, q, e0, state)
		}
		return e0
	}, func(b, e0, e1 int) {
		// The channels left over, with their windows gathered into rows.
		windows := state[b*E*K : (b+1)*E*K]
		var buf [laneScratch]float32
		win := laneBuffer(buf[:], (e1-e0)*K) // window of each channel, oldest first
		blocksToRows(win, windows, e0, e1, E, K, laneWidth)
		r0, n := w.tokens(b)
		for r := r0; r < r0+n; r++ {
			xs, u := w.xz[r*2*E:r*2*E+E], w.u[r*E:(r+1)*E]
			for ch := e0; ch < e1; ch++ {
				wd := win[(ch-e0)*K : (ch-e0+1)*K]
				wk := lw.Conv[ch*K : (ch+1)*K]
				wk = wk[:len(wd)]
				acc := float32(0)
				if lw.ConvBias != nil {
					acc = lw.ConvBias[ch]
				}
				for k := 0; k < K-1; k++ { // slide the window and convolve in one pass
					wd[k] = wd[k+1]
					acc += wk[k] * wd[k]
				}
				wd[K-1] = xs[ch]
				acc += wk[K-1] * wd[K-1]
				u[ch] = silu(acc)
			}
		}
		rowsToBlocks(windows, win, e0, e1, E, K, laneWidth)
	})
}

// scan runs layer l's selective scan (exp(delta·A) computed as
// exp2(delta·A·log2 e), with a2 = A·log2 e) with softplus(delta + dt bias),
// the D skip and the silu(z) gate fused in, from and into the carried SSM
// state (each sequence's [E, N] in lane blocks: laneBlock), over each
// sequence's tokens in the chunk (work.tokens). With AVX2, eight channels
// at a time run in the lanes of one register (scanLanes), or sixteen with
// AVX-512; the channels left over, or all of them without AVX2, run one at
// a time below, their states gathered into rows for the call.
func (e *Engine) scan(w *work, l int, state []float32) {
	E, R, N := e.cfg.Inner, e.cfg.DTRank, e.cfg.State
	lw, a2 := &e.w.Layers[l], e.a2[l]
	stride := R + 2*N
	laneTasks(w, E, func(q seqs, e0, e1 int) int {
		for e0%laneWidth == 0 && e0+laneWidth <= e1 {
			width := laneWidth
			if useWideLanes && e0%wideLanes == 0 && e0+wideLanes <= e1 {
				width = wideLanes
			}
			e.scanLanes(w, l, q, e0, width, state)
			e0 += width
		}
		return e0
	}, func(b, e0, e1 int) {
		// The channels left over, with their states gathered into rows.
		states := state[b*E*N : (b+1)*E*N]
		var buf [laneScratch]float32
		rows := laneBuffer(buf[:], (e1-e0)*N)
		blocksToRows(rows, states, e0, e1, E, N, wideLanes)
		r0, n := w.tokens(b)
		for r := r0; r < r0+n; r++ {
			Bt := w.dbl[r*stride+R : r*stride+R+N]
			Ct := w.dbl[r*stride+R+N : (r+1)*stride]
			for ch := e0; ch < e1; ch++ {
				dt := softplus(w.delta[r*E+ch] + lw.DTBias[ch])
				u := w.u[r*E+ch]
				acc := scanRow(rows[(ch-e0)*N:(ch-e0+1)*N], a2[ch*N:(ch+1)*N], Bt, Ct, dt, dt*u)
				y := acc + lw.D[ch]*u
				w.y[r*E+ch] = y * silu(w.xz[r*2*E+E+ch])
			}
		}
		rowsToBlocks(states, rows, e0, e1, E, N, wideLanes)
	})
}
