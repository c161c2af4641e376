package cpu

import (
	"math"
	"runtime"
	"sync"
	"unsafe"
)

// The conv and the scan with eight channels in the eight lanes of an AVX2
// register (lanes_amd64.s). One channel at a time, the conv's loop per
// (position, channel) is scalar Go (a window shift, K products and a silu),
// and scanRow vectorizes over the N states of one channel only, so for each
// (position, channel) it pays a call, a horizontal sum and a scalar
// softplus and silu, which at N = 16 cost more than the 16 updates. Across
// channels every step is a vector operation: softplus of eight time steps,
// the N updates of eight states (each state's decay exp2(dt·a2) is its
// own), the D skip and the silu gate. Both find their windows and states
// already in lane blocks (below), and walk all T positions in one call.
// Where the CPU has AVX-512F, the scan takes sixteen channels a call
// (lanes512_amd64.s), a whole cache line of each row. Both kernels ask for
// the rows a few positions ahead: rows lie a row of the activations apart
// (6 KB at 130m), past the hardware prefetchers' reach, and without it a
// sixteen-channel call waited on memory as long as it computed.

// laneWidth is the number of channels a lane call runs in AVX2, and
// wideLanes the number scanLanesAVX512 runs (where the CPU has AVX-512F),
// the channels of one cache line of delta, u, z and y: 1.7-1.8x the AVX2
// kernel's rate on the build machine, with the same bits.
const (
	laneWidth = 8
	wideLanes = 16
)

// laneScan holds one lane call's operands; lanes_amd64.s reads its fields
// at the offsets TestLaneScanLayout pins.
type laneScan struct {
	delta, u, z, y *float32 // position 0 of channel e0: dt_proj's output, the conv's, in_proj's z half, the output
	bc             *float32 // position 0's B (N values), followed by its C
	a2t            *float32 // A·log2(e) of the channels: value n at a2t + n·rowN bytes
	state          *float32 // their SSM states, laid out as a2t, updated in place
	k              *[laneConsts][8]float32
	T              int
	nBytes         int                // 4·N
	rowE, rowZ     int                // bytes from one position to the next in delta, u and y, and in z
	rowBC          int                // bytes from one position's B to the next one's
	rowN           int                // bytes from one state's values to the next in a2t and state: 64 in a block of sixteen, 32 in one of eight
	rowState       int                // bytes the states move on a position: 0 along one sequence, E·N·4 across a step's sequences
	dtBias, d      [wideLanes]float32 // the first eight, or all sixteen for scanLanesAVX512
}

// laneConsts is the count of laneK's vectors.
const laneConsts = 18

// laneK holds the constants of lanes_amd64.s, each broadcast to eight lanes:
// exp2neg's clamp, 1/2, ln 2, its polynomial from x^6 down to x^2, 1, and
// 127 (as bits); then log2(e), the sign mask, 2, softplus' threshold 20
// and the odd series of its log1p from 1/11 down to 1/3.
var laneK = func() (k [laneConsts][8]float32) {
	vals := [laneConsts]float32{-126, 0.5, math.Ln2, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 1,
		math.Float32frombits(127), math.Log2E, math.Float32frombits(0x7fffffff), 2, 20,
		1.0 / 11, 1.0 / 9, 1.0 / 7, 1.0 / 5, 1.0 / 3}
	for i, v := range vals {
		for j := range k[i] {
			k[i][j] = v
		}
	}
	return k
}()

// Per-channel tables in lane blocks. The scan's a2 and the SSM states
// (State.ssm, each sequence's [E, N] alone) are kept in blocks of sixteen
// channels, [N][16]: value n of the block's channels side by side. Past the
// last whole block of sixteen comes a block of eight where E % 16 >= 8,
// [N][8], and past that each channel's row alone. The conv's weights and
// windows (State.conv) are kept so in blocks of eight, [K][8]. A block
// starts at its first channel's ch·N whatever its width, so the layout is
// a function of (E, N) alone, not of the CPU. The lane kernels then read
// and update states in place: a decode step, which walks one position, had
// spent longer copying eight or sixteen channels' states into lanes and
// back than scanning them.

// laneBlock returns where channel ch's n values sit in a table of E
// channels in lane blocks of width (16 or 8) channels: the index of its
// value 0 and the distance between its values (1 for a row alone).
func laneBlock(ch, E, n, width int) (at, step int) {
	for ; width >= laneWidth; width /= 2 {
		if blk := ch / width * width; blk+width <= E {
			return blk*n + ch - blk, width
		}
	}
	return ch * n, 1
}

// rowsToBlocks copies rows [e1-e0][n], channels e0..e1-1 of a table of E
// channels, into the table's lane blocks of width channels (blocks, E·n
// values); blocksToRows copies them back.
func rowsToBlocks(blocks, rows []float32, e0, e1, E, n, width int) {
	for ch := e0; ch < e1; ch++ {
		at, step := laneBlock(ch, E, n, width)
		for i, v := range rows[(ch-e0)*n : (ch-e0+1)*n] {
			blocks[at+i*step] = v
		}
	}
}

// blocksToRows is rowsToBlocks the other way: channels e0..e1-1 of a table
// in lane blocks into rows [e1-e0][n].
func blocksToRows(rows, blocks []float32, e0, e1, E, n, width int) {
	for ch := e0; ch < e1; ch++ {
		at, step := laneBlock(ch, E, n, width)
		row := rows[(ch-e0)*n : (ch-e0+1)*n]
		for i := range row {
			row[i] = blocks[at+i*step]
		}
	}
}

// transposeLanes returns v [E, n] (a2, or the conv weights [E, K]) in lane
// blocks of width channels.
func transposeLanes(v []float32, E, n, width int) []float32 {
	t := make([]float32, E*n)
	rowsToBlocks(t, v, 0, E, E, n, width)
	return t
}

// laneScratch is the floats of the channel loops' gathered rows (a task's
// windows or states past its lane calls) that a task keeps on its stack:
// eight channels of up to 64, every d_state and conv width of the
// checkpoints we know. A step of 8 sequences at 130m made about 18,000
// tasks, each of which had allocated its scratch on the heap: 11 MB a step.
const laneScratch = 64 * laneWidth

// laneBuffer returns buf[:n], or a new slice where n is more than buf holds.
func laneBuffer(buf []float32, n int) []float32 {
	if n > len(buf) {
		return make([]float32, n)
	}
	return buf[:n]
}

// seqs says which sequences' tokens a lane call walks: all of sequence b's
// in the chunk (n = 1), or the one token of each of sequences b..b+n-1 in
// a step of several (rows b..b+n-1), the kernel moving to each one's
// windows or states in turn: one call for all of a step's sequences, not a
// call each, whose set-up cost more than its work.
type seqs struct{ b, n int }

// rows returns the first row a call over q walks, how many it walks, and
// how many elements apart two positions' states (or windows) lie: none
// along one sequence, per (one sequence's table) across a step's.
func (q seqs) rows(w *work, per int) (r0, n, next int) {
	if q.n == 1 {
		r0, n = w.tokens(q.b)
		return r0, n, 0
	}
	return q.b, q.n, per
}

// scanLanes runs the scan of channels ch..ch+width-1 (width 8 within a
// lane block, or 16 for a whole block with AVX-512) over the tokens of q,
// as scan's scalar loop does for each channel, updating their states
// (state: the layer's, each sequence's in lane blocks) in place.
func (e *Engine) scanLanes(w *work, l int, q seqs, ch, width int, state []float32) {
	E, R, N := e.cfg.Inner, e.cfg.DTRank, e.cfg.State
	lw := &e.w.Layers[l]
	stride := R + 2*N
	r0, T, next := q.rows(w, E*N)
	if T == 0 {
		return // all padding
	}
	// a2t and the states share their layout: ch's column of its block.
	at, step := laneBlock(ch, E, N, wideLanes)
	states := state[q.b*E*N:]
	last := r0 + T - 1
	// The kernel reads and writes through raw pointers: make sure every
	// row it touches is in its slice.
	top := ch + width - 1
	_, _, _, _ = w.delta[last*E+top], w.u[last*E+top], w.y[last*E+top], w.xz[last*2*E+E+top]
	_, _ = e.a2t[l][at+(N-1)*step+width-1], states[(T-1)*next+at+(N-1)*step+width-1]
	_ = w.dbl[last*stride+stride-1]
	a := laneScan{
		delta: &w.delta[r0*E+ch], u: &w.u[r0*E+ch], y: &w.y[r0*E+ch], z: &w.xz[r0*2*E+E+ch],
		bc: &w.dbl[r0*stride+R], a2t: &e.a2t[l][at], state: &states[at], k: &laneK,
		T: T, nBytes: 4 * N, rowE: 4 * E, rowZ: 8 * E, rowBC: 4 * stride, rowN: 4 * step, rowState: 4 * next,
	}
	copy(a.dtBias[:], lw.DTBias[ch:ch+width])
	copy(a.d[:], lw.D[ch:ch+width])
	if width == wideLanes {
		scanLanesAVX512(&a)
	} else {
		scanLanesAVX2(&a)
	}
}

// laneConv holds one lane call's operands for the conv; lanes_amd64.s reads
// its fields at the offsets TestLaneScanLayout pins.
type laneConv struct {
	xs, u    *float32 // position 0 of channel ch: in_proj's x half, the output
	win      *float32 // the eight channels' windows, a lane block [K][8], oldest first, updated in place
	w        *float32 // their conv weights, [K][8]
	k        *[laneConsts][8]float32
	T        int
	km1Bytes int // 32·(K-1): the window's bytes before its newest input
	rowX     int // bytes from one position to the next in xs
	rowU     int // and in u
	rowWin   int // bytes the windows move on a position: 0 along one sequence, E·K·4 across a step's sequences
	bias     [laneWidth]float32
}

// convLanes runs layer l's conv of channels ch..ch+7 over the tokens of q,
// as conv's scalar loop does for each channel, updating their windows
// (state: the layer's, each sequence's in lane blocks of eight) in place.
func (e *Engine) convLanes(w *work, l int, q seqs, ch int, state []float32) {
	E, K := e.cfg.Inner, e.cfg.ConvKernel
	lw, wt := &e.w.Layers[l], e.convT[l][ch*K:]
	r0, T, next := q.rows(w, E*K)
	if T == 0 {
		return // all padding
	}
	last := r0 + T - 1
	windows := state[(q.b*E+ch)*K:]
	_, _, _, _ = w.xz[last*2*E+ch+7], w.u[last*E+ch+7], windows[(T-1)*next+K*laneWidth-1], wt[K*laneWidth-1]
	a := laneConv{
		xs: &w.xz[r0*2*E+ch], u: &w.u[r0*E+ch], win: &windows[0], w: &wt[0], k: &laneK,
		T: T, km1Bytes: 4 * laneWidth * (K - 1), rowX: 8 * E, rowU: 4 * E, rowWin: 4 * next,
	}
	if lw.ConvBias != nil {
		copy(a.bias[:], lw.ConvBias[ch:ch+laneWidth])
	}
	convLanesAVX2(&a)
}

// A GEMM of a few rows against a weight matrix (a decode step of up to
// eight sequences). SGEMM packs W before it multiplies, which at two to
// eight rows leaves it reading W at about a third of the memory's rate
// (results/2026-12-02-cpu-sgemv.md); gemmRowsAVX2 streams each row of W
// once and multiplies it by all the rows of A, whose K8 columns sit in L1,
// interleaved [K8/8][rows][8]: four or eight rows, the fewest that hold M,
// so that up to four rows take half of eight rows' FMAs.

// rowsMax is the most rows gemmRows takes: one AVX2 register of sums each.
const rowsMax = 8

// wideRowsW is how many rows of a 16-bit W gemmRowsAVX512 takes a group,
// against eight rows of A: two in each 512-bit register, sixteen registers
// of sums.
const wideRowsW = 4

// useWideRows runs gemmRows' eight-row groups on gemmRowsAVX512, and its
// one-row dot products on dotRowsAVX512, where the CPU has AVX-512F; tests
// turn it off to check the AVX2 kernels (the eight-row ones bit for bit).
var useWideRows = hasAVX512

// rowsGemm holds one gemmRowsAVX2 (or dotRowsAVX2) call's operands;
// lanes_amd64.s reads its fields at the offsets TestLaneScanLayout pins.
type rowsGemm struct {
	a      *float32       // A's first K8 columns, interleaved [K8/8][rows][8], rows past M zero (dotRowsAVX2: A's one row)
	w      unsafe.Pointer // the first of W's rows to multiply
	out    *float32       // the dot products, eight a group (dotRowsAVX2: one a row of W)
	N      int            // groups of 8/rows rows of W (dotRowsAVX2: rows of W)
	kBytes int            // 4·K8, K8 a positive multiple of 8
	ldw    int            // bytes from one row of W to the next
	wkind  int            // W's type: its Storage (Float32, BFloat16, Float16)
	rows   int            // rows of A: 4 or 8 (gemmRowsAVX2 only)
}

// gemmRows computes C = A·Wᵀ + beta·C for A [M, K] (row stride lda), M ≤
// rowsMax, W [N, K] and C [M, N] (row stride ldc), with the rows of W split
// across goroutines. One row runs on dotRowsAVX512 with AVX-512F, else on
// dotRowsAVX2: one sum a row of W, the rows read in order. Two to four
// rows take two rows of W at a time on gemmRowsAVX2, and more one. The rows
// of W left over from the last group take the one-row-of-W loop, and every
// goroutine's block holds whole groups. Each sum adds its lanes in the same
// order in every loop, so a row of C does not depend on M (from 2 rows
// on): a sequence's decode step gives the same bits in a batch of 2 as of
// 8.
func gemmRows(c []float32, ldc int, a []float32, lda int, w matrix, M, N, K int, beta float32) {
	K8 := K &^ 7
	rows := rowsMax
	switch {
	case M == 1:
		rows = 1 // dotRowsAVX512, or dotRowsAVX2 without AVX-512F
	case M <= 4:
		rows = 4
	}
	wide := rows == rowsMax && w.h != nil && useWideRows // eight rows on gemmRowsAVX512
	per := 1                                             // rows of W a group
	ai, a8 := a, []float32(nil)                          // A as the kernels read it; a8 interleaved by 8 for the rows left over
	if rows > 1 {
		per = rowsMax / rows
		if wide {
			per = wideRowsW
		}
		p := interleaveRows(a, lda, M, K8, rows)
		defer rowsPool.Put(p)
		ai = *p
		if rows == rowsMax {
			a8 = ai
		} else if N%per != 0 {
			p8 := interleaveRows(a, lda, M, K8, rowsMax)
			defer rowsPool.Put(p8)
			a8 = *p8
		}
	}
	base, size := w.raw()
	workers := runtime.GOMAXPROCS(0)
	// whole groups a goroutine, of at least 16 rows (x_proj's 80 rows go 40
	// and 40 on two cores, not 64 and 16)
	block := (max(16, (N+workers-1)/workers) + rowsMax - 1) &^ (rowsMax - 1)
	if N*K <= serialGemm {
		block = N
	}
	parallelRows(N, block, func(lo, hi int) {
		var out [rowsStep * rowsMax]float32 // the sums of rowsStep rows of W at a time, in L1
		for n0 := lo; n0 < hi; n0 += rowsStep {
			n1 := min(hi, n0+rowsStep)
			grouped := n0 + (n1-n0)/per*per // rows n0..grouped go in groups, the rest one at a time
			if K8 > 0 {
				g := rowsGemm{a: &ai[0], w: unsafe.Add(base, n0*K*size), out: &out[0], N: (grouped - n0) / per,
					kBytes: 4 * K8, ldw: size * K, wkind: int(w.st), rows: rows}
				switch {
				case rows == 1 && useWideRows:
					dotRowsAVX512(&g)
				case rows == 1:
					dotRowsAVX2(&g)
				case g.N > 0 && wide:
					gemmRowsAVX512(&g)
				case g.N > 0:
					gemmRowsAVX2(&g)
				}
				if grouped < n1 {
					g.a, g.w, g.out = &a8[0], unsafe.Add(base, grouped*K*size), &out[(grouped-n0)*rows]
					g.N, g.rows = n1-grouped, rowsMax
					gemmRowsAVX2(&g)
				}
			}
			// C's rows one after another: row m's sums from the groups lie
			// every rows floats in out, from the rows left over every
			// rowsMax. Each element adds its sum, then its columns past K8,
			// then beta·C, in that order.
			ng := grouped - n0 // rows of this step's W in groups
			for m := range M {
				row := c[m*ldc+n0 : m*ldc+n1]
				if K8 == K {
					addSums(row[:ng], out[m:], rows, beta)
					if ng < len(row) {
						addSums(row[ng:], out[ng*rows+m:], rowsMax, beta)
					}
					continue
				}
				for i := range row {
					var s float32
					if K8 > 0 {
						at := i*rows + m
						if i >= ng {
							at = ng*rows + (i-ng)*rowsMax + m
						}
						s = out[at]
					}
					for k := K8; k < K; k++ { // the columns past the last multiple of 8
						s += a[m*lda+k] * w.at(n0+i, k)
					}
					if beta != 0 {
						s += beta * row[i]
					}
					row[i] = s
				}
			}
		}
	})
}

// addSums sets row[i] = sums[i·stride] + beta·row[i], or the sum alone
// where beta is 0 (whatever row held, NaN included).
func addSums(row, sums []float32, stride int, beta float32) {
	if beta == 0 {
		for i := range row {
			row[i] = sums[i*stride]
		}
		return
	}
	for i := range row {
		row[i] = sums[i*stride] + beta*row[i]
	}
}

// interleaveRows lays out A's M rows' first K8 columns as gemmRowsAVX2
// reads them, [K8/8][rows][8], the rows past M zero, in a buffer from
// rowsPool; put it back when done.
func interleaveRows(a []float32, lda, M, K8, rows int) *[]float32 {
	p := takeFloats(K8 * rows)
	ai := *p
	for m := range M {
		for k := range K8 {
			ai[k/8*8*rows+m*8+k%8] = a[m*lda+k]
		}
	}
	return p
}

// rowsPool keeps interleaveRows' buffers from one gemmRows call to the
// next: a decode step of 8 sequences made about a hundred, 2.8 MB at 130m.
var rowsPool sync.Pool

// takeFloats returns n zeroed floats from rowsPool, or new ones.
func takeFloats(n int) *[]float32 {
	if p, _ := rowsPool.Get().(*[]float32); p != nil && cap(*p) >= n {
		*p = (*p)[:n]
		clear(*p)
		return p
	}
	s := make([]float32, n)
	return &s
}

// serialGemm is the most N·K that gemmRows runs on the calling goroutine,
// not in parallel: a few µs of work, about what a fork-join costs. It was
// 1<<17, which kept 130m's x_proj [80, 1536] and dt_proj [1536, 48] serial
// when a fork-join cost tens of µs; on the team of spinning workers
// (parallel.go) splitting them ran a one-sequence GEMV of each 1.4-1.6x
// faster on 2 cores (BenchmarkSmallGemms), while [48, 768] stayed as fast
// serial.
var serialGemm = 1 << 16

// rowsStep is the count of W's rows a gemmRowsAVX2 call takes.
const rowsStep = 256
