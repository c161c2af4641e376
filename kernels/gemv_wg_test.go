package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
)

// launchParts runs x_parts_bf16: x [B, K] (row stride ldx), normed with
// normw where it is set, as three bf16 parts into parts [24][K].
func launchParts(fn func(string) *cuda.Function, s *cuda.Stream, x, normw cuda.Ptr, eps float32, ldx, B, K int,
	parts cuda.Ptr) error {
	return fn("x_parts_bf16").Launch(cuda.D1(8), cuda.D1(256), 0, s, x, ldx, normw, eps, B, K, parts, cuda.Ptr(0))
}

// gemvWGShared is gemv_wg_shared() at the source's GW_STAGES (8).
var gemvWGShared = gemvWGSharedFor(8)

// gemvWGSharedFor is gemv_wg_shared() for a ring of stages stages: 12 KB
// stages, 1024 bytes of alignment, two barriers a stage.
func gemvWGSharedFor(stages int) int { return stages*(64*64*2+4096) + 1024 + 2*stages*8 }

// needSM90 skips where d is no sm_90 GPU (wgmma and tensor maps need sm_90a).
func needSM90(tb testing.TB) {
	tb.Helper()
	if d := gputest.Device(tb); d.Major != 9 || d.Minor != 0 {
		tb.Skipf("gemv_wg needs sm_90a (wgmma); this GPU is sm_%d%d", d.Major, d.Minor)
	}
}

// TestGEMVWGKernel checks gemv_wg_bf16 (with x_parts_bf16 before it)
// against float64 sums of the stored bf16 weights times x in f32, or
// rmsnorm(x) * normw where the case norms: within 1e-5 relative error, over
// NaNs where it writes and onto random values where it accumulates.
// Shapes: partial blocks of rows and a K that is not a multiple of 64 (the
// tensor maps' zeros past the edges), B = 1, 3, 5 and 8, the 1.4b in_proj
// size and the 130m LM head's; split along k over 3, 4 and 8 blocks (the
// 1.4b out_proj; 16 steps of k over 8 blocks; 3 steps over 3), writing
// cases run twice (the counters must be back at zero).
func TestGEMVWGKernel(t *testing.T) {
	const eps = 1e-5
	fn, s := gpu(t)
	needSM90(t)
	if err := fn("gemv_wg_bf16").SetMaxDynamicShared(gemvWGShared); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rows, K, B       int
		accu, bias, norm bool
		parts            int // blocks a tile's k is split over
	}{{130, 136, 3, false, true, false, 1}, {64, 64, 8, true, false, true, 1}, {200, 1000, 5, true, true, false, 1},
		{8192, 2048, 8, false, true, true, 1}, {37, 2560, 1, false, false, false, 1},
		{50280, 768, 8, false, false, true, 1}, {2048, 4096, 8, true, true, false, 4}, {200, 1000, 5, true, true, false, 8},
		{130, 136, 3, false, true, false, 3}} {
		name := fmt.Sprintf("gemv_wg_bf16 %+v", tc)
		ldx := tc.K + 4
		x, W, bias, out0 := randn(tc.B*ldx, 1), randn(tc.rows*tc.K, 0.1), randn(tc.rows, 1), randn(tc.B*tc.rows, 1)
		normw := randn(tc.K, 1)
		W, packed := bf16Bits(W)
		bx, bW, bb, bn := upload(t, s, x), upload(t, s, packed), upload(t, s, bias), upload(t, s, normw)
		xs := normed(x, normw, ldx, tc.B, tc.K, eps, tc.norm)
		parts := poisoned(t, s, 24*tc.K/2) // 24 rows of K bf16
		bo, bptr, accu := linearArgs(t, s, out0, tc.accu, bb, tc.bias)
		wmap, xmap := ringMaps(t, bW.Ptr, tc.rows, tc.K, parts.Ptr, 24, 24)
		nptr := cuda.Ptr(0)
		if tc.norm {
			nptr = bn.Ptr
		}
		if err := launchParts(fn, s, bx.Ptr, nptr, eps, ldx, tc.B, tc.K, parts.Ptr); err != nil {
			t.Fatal(err)
		}
		tiles := (tc.rows + 63) / 64
		scratch, count := poisoned(t, s, tiles*tc.parts*512), upload(t, s, make([]float32, tiles))
		grid := cuda.Dim3{X: tiles, Y: tc.parts, Z: 1}
		for run := range 2 { // twice: the counters are back at zero after a launch
			if run == 1 && tc.accu {
				break
			}
			if err := fn("gemv_wg_bf16").Launch(grid, cuda.D1(160), gemvWGShared, s, wmap, xmap, bptr, bo.Ptr, tc.rows,
				accu, tc.B, tc.K, tc.rows, scratch.Ptr, count.Ptr, cuda.Ptr(0), 0, float32(0), cuda.Ptr(0), cuda.Ptr(0),
				cuda.Ptr(0)); err != nil {
				t.Fatal(err)
			}
		}
		want := linearWant(W, xs, tc.B, tc.rows, tc.K, pick(tc.bias, bias), pick(tc.accu, out0))
		nearRel(t, name, download(t, s, bo, tc.B*tc.rows), want, 1e-5)
	}
}

// linearWant is out[r, n] = sum_k W[n, k] x[r, k] + bias[n] + out0[r, n]
// in float64 for r < R and n < rows (W [rows, K], x [R, K]); a nil bias or
// out0 adds nothing.
func linearWant(W []float32, x []float64, R, rows, K int, bias, out0 []float32) []float64 {
	want := make([]float64, R*rows)
	for r := range R {
		for n := range rows {
			var sum float64
			for k := range K {
				sum += float64(W[n*K+k]) * x[r*K+k]
			}
			if bias != nil {
				sum += float64(bias[n])
			}
			if out0 != nil {
				sum += float64(out0[r*rows+n])
			}
			want[r*rows+n] = sum
		}
	}
	return want
}

// ringMaps encodes the tensor maps of a test of gemv_wg.cu's ring: W
// [rows, K] bf16 at w in 64 x 64 boxes, and xRows rows of K bf16 at x in
// boxRows x 64 boxes.
func ringMaps(t *testing.T, w cuda.Ptr, rows, K int, x cuda.Ptr, xRows, boxRows int) (wmap, xmap cuda.TensorMap) {
	t.Helper()
	wmap, err := cuda.NewTensorMap2D(cuda.BF16, w, rows, K, K, 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	if xmap, err = cuda.NewTensorMap2D(cuda.BF16, x, xRows, K, K, boxRows, 64); err != nil {
		t.Fatal(err)
	}
	return wmap, xmap
}

// linearArgs returns a linear kernel's output buffer (out0 where it
// accumulates, else NaNs of out0's length), its bias pointer (bias's, or 0
// without one) and its accumulate flag.
func linearArgs(t *testing.T, s *cuda.Stream, out0 []float32, accumulate bool, bias *cuda.Buffer,
	useBias bool) (out *cuda.Buffer, biasPtr cuda.Ptr, accu int) {
	out = poisoned(t, s, len(out0))
	if accumulate {
		out, accu = upload(t, s, out0), 1
	}
	if useBias {
		biasPtr = bias.Ptr
	}
	return out, biasPtr, accu
}

// pick is v where on holds, else nil.
func pick(on bool, v []float32) []float32 {
	if on {
		return v
	}
	return nil
}

// nearRel fails t where got is further than tol from want in relErr (or
// holds a NaN), and logs the error either way.
func nearRel(t *testing.T, name string, got []float32, want []float64, tol float64) {
	t.Helper()
	if e := relErr(got, want); e > tol || math.IsNaN(e) {
		t.Errorf("%s: rel err %.3g", name, e)
	} else {
		t.Logf("%s: rel err %.3g", name, e)
	}
}

// normed returns x [B, K] (row stride ldx) in float64, packed, and where
// norm is set as rmsnorm(x[b]) * normw with eps inside the square root.
func normed(x, normw []float32, ldx, B, K int, eps float64, norm bool) []float64 {
	out := make([]float64, B*K)
	for b := range B {
		scale := 1.0
		if norm {
			var ss float64
			for k := range K {
				ss += float64(x[b*ldx+k]) * float64(x[b*ldx+k])
			}
			scale = 1 / math.Sqrt(ss/float64(K)+eps)
		}
		for k := range K {
			v := float64(x[b*ldx+k]) * scale
			if norm {
				v *= float64(normw[k])
			}
			out[b*K+k] = v
		}
	}
	return out
}

// TestStepInWGKernel checks step_in_wg_bf16 against float64: in_proj of
// rmsnorm(h) * normw (x_parts_bf16 before it) plus in_bias, z for rows E
// and up, and for a channel the conv step of its window of taps taps
// (shifted by one, the sum in the newest) and silu: xz and the windows
// within 1e-5 relative error, xz over NaNs. Shapes: E = 64 (one block of
// channels, one of z), 200 (blocks that straddle E and end short), d not a
// multiple of 64; taps 4 and 3; with and without the biases; B = 2, 5, 8.
func TestStepInWGKernel(t *testing.T) {
	fn, s := gpu(t)
	needSM90(t)
	if err := fn("step_in_wg_bf16").SetMaxDynamicShared(gemvWGShared); err != nil {
		t.Fatal(err)
	}
	const eps = 1e-5
	for _, tc := range []struct {
		d, E, taps, B int
		bias          bool
	}{{256, 64, 4, 8, true}, {136, 200, 3, 5, false}, {2048, 4096, 4, 2, true}} {
		name := fmt.Sprintf("step_in_wg_bf16 %+v", tc)
		d, E, taps, B := tc.d, tc.E, tc.taps, tc.B
		h, normw, W := randn(B*d, 1), randn(d, 1), randn(2*E*d, 0.1)
		inBias, convW, convB, win := randn(2*E, 1), randn(E*taps, 0.5), randn(E, 1), randn(B*E*taps, 1)
		W, packed := bf16Bits(W)
		bh, bn, bW, bwin := upload(t, s, h), upload(t, s, normw), upload(t, s, packed), upload(t, s, win)
		bib, bcw, bcb := upload(t, s, inBias), upload(t, s, convW), upload(t, s, convB)
		parts, xz := poisoned(t, s, 24*d/2), poisoned(t, s, B*2*E)
		wmap, err := cuda.NewTensorMap2D(cuda.BF16, bW.Ptr, 2*E, d, d, 64, 64)
		if err != nil {
			t.Fatal(err)
		}
		xmap, err := cuda.NewTensorMap2D(cuda.BF16, parts.Ptr, 24, d, d, 24, 64)
		if err != nil {
			t.Fatal(err)
		}
		ib, cb := bib.Ptr, bcb.Ptr
		if !tc.bias {
			ib, cb = 0, 0
		}
		if err := launchParts(fn, s, bh.Ptr, bn.Ptr, eps, d, B, d, parts.Ptr); err != nil {
			t.Fatal(err)
		}
		if err := fn("step_in_wg_bf16").Launch(cuda.D1((2*E+63)/64), cuda.D1(160), gemvWGShared, s, wmap, xmap, ib,
			bcw.Ptr, cb, bwin.Ptr, xz.Ptr, B, d, E, taps, cuda.Ptr(0), 0, float32(0)); err != nil {
			t.Fatal(err)
		}
		x := normed(h, normw, d, B, d, eps, true)
		wantXZ, wantWin := make([]float64, B*2*E), make([]float64, B*E*taps)
		for b := range B {
			for n := range 2 * E {
				v := 0.0
				for k := range d {
					v += float64(W[n*d+k]) * x[b*d+k]
				}
				if tc.bias {
					v += float64(inBias[n])
				}
				if n >= E {
					wantXZ[b*2*E+n] = v
					continue
				}
				sum := 0.0
				if tc.bias {
					sum = float64(convB[n])
				}
				for k := range taps {
					in := v
					if k+1 < taps {
						in = float64(win[(b*E+n)*taps+k+1])
					}
					sum += float64(convW[n*taps+k]) * in
					wantWin[(b*E+n)*taps+k] = in
				}
				wantXZ[b*2*E+n] = sum / (1 + math.Exp(-sum))
			}
		}
		gotXZ, gotWin := download(t, s, xz, B*2*E), download(t, s, bwin, B*E*taps)
		ex, ew := relErr(gotXZ, wantXZ), relErr(gotWin, wantWin)
		if ex > 1e-5 || ew > 1e-5 || math.IsNaN(ex) || math.IsNaN(ew) {
			t.Errorf("%s: rel err xz %.3g, windows %.3g", name, ex, ew)
		} else {
			t.Logf("%s: rel err xz %.3g, windows %.3g", name, ex, ew)
		}
	}
}

// TestGEMVWGNormFold checks the norm folded across two warpgroup GEMVs, as
// out_proj and the next in_proj run it (Engine.GEMVWarpgroupFold): the
// first, out_proj-like (accumulating, with a bias, whole and split along k
// over 4 blocks), also writes its outputs times the next norm weight as
// parts and its blocks' sums of squares, and must match float64 there
// (the parts summing back to out * normw bit for bit, the sums within
// 1e-5); the second reads those parts and sums and must give W2 ·
// (rmsnorm(out) * normw) against float64 within 1e-5. Shapes: d = 2048, E
// = 4096 (1.4b's out_proj), and d = 200, E = 136 (a partial block of rows
// and of k); B = 5 and 8.
func TestGEMVWGNormFold(t *testing.T) {
	fn, s := gpu(t)
	needSM90(t)
	if err := fn("gemv_wg_bf16").SetMaxDynamicShared(gemvWGShared); err != nil {
		t.Fatal(err)
	}
	const eps = 1e-5
	for _, tc := range []struct{ d, E, B, parts, rows2 int }{{2048, 4096, 8, 4, 8192}, {2048, 4096, 5, 1, 300},
		{200, 136, 5, 1, 130}} {
		name := fmt.Sprintf("fold %+v", tc)
		d, E, B := tc.d, tc.E, tc.B
		y, W, bias, h0, normw := randn(B*E, 1), randn(d*E, 0.05), randn(d, 1), randn(B*d, 1), randn(d, 1)
		W2 := randn(tc.rows2*d, 0.1)
		W, packed := bf16Bits(W)
		W2, packed2 := bf16Bits(W2)
		by, bW, bb, bh, bn, bW2 := upload(t, s, y), upload(t, s, packed), upload(t, s, bias), upload(t, s, h0),
			upload(t, s, normw), upload(t, s, packed2)
		yparts, next, out2 := poisoned(t, s, 24*E/2), poisoned(t, s, 24*d/2), poisoned(t, s, B*tc.rows2)
		tiles := (d + 63) / 64
		ss, scratch, count := poisoned(t, s, 8*tiles), poisoned(t, s, tiles*tc.parts*512), upload(t, s, make([]float32, tiles))
		maps := func(p cuda.Ptr, rows, cols, box int) cuda.TensorMap {
			m, err := cuda.NewTensorMap2D(cuda.BF16, p, rows, cols, cols, box, 64)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		wmap, ymap, w2map, nmap := maps(bW.Ptr, d, E, 64), maps(yparts.Ptr, 24, E, 24), maps(bW2.Ptr, tc.rows2, d, 64),
			maps(next.Ptr, 24, d, 24)
		if err := launchParts(fn, s, by.Ptr, 0, 0, E, B, E, yparts.Ptr); err != nil {
			t.Fatal(err)
		}
		if err := fn("gemv_wg_bf16").Launch(cuda.Dim3{X: tiles, Y: tc.parts, Z: 1}, cuda.D1(160), gemvWGShared, s, wmap,
			ymap, bb.Ptr, bh.Ptr, d, 1, B, E, d, scratch.Ptr, count.Ptr, cuda.Ptr(0), 0, float32(0), bn.Ptr, next.Ptr,
			ss.Ptr); err != nil {
			t.Fatal(err)
		}
		if err := fn("gemv_wg_bf16").Launch(cuda.D1((tc.rows2+63)/64), cuda.D1(160), gemvWGShared, s, w2map, nmap,
			cuda.Ptr(0), out2.Ptr, tc.rows2, 0, B, d, tc.rows2, cuda.Ptr(0), cuda.Ptr(0), ss.Ptr, tiles, float32(eps),
			cuda.Ptr(0), cuda.Ptr(0), cuda.Ptr(0)); err != nil {
			t.Fatal(err)
		}
		// The first GEMV: h = h0 + W y + bias, its parts and its sums.
		want := make([]float64, B*d)
		for b := range B {
			for n := range d {
				v := float64(h0[b*d+n]) + float64(bias[n])
				for k := range E {
					v += float64(W[n*E+k]) * float64(y[b*E+k])
				}
				want[b*d+n] = v
			}
		}
		h := download(t, s, bh, B*d)
		if e := relErr(h, want); e > 1e-5 || math.IsNaN(e) {
			t.Errorf("%s: h rel err %.3g", name, e)
		}
		words := download(t, s, next, 24*d/2)
		part := func(p, b, n int) float32 {
			i := (8*p+b)*d + n
			return math.Float32frombits((math.Float32bits(words[i/2]) >> (16 * (i % 2))) << 16)
		}
		for b := range B {
			for n := range d {
				if got, want := (part(0, b, n)+part(1, b, n))+part(2, b, n), h[b*d+n]*normw[n]; got != want {
					t.Fatalf("%s: the next parts at b=%d, n=%d sum to %g, want h * normw = %g", name, b, n, got, want)
				}
			}
		}
		gotSS, wantSS := download(t, s, ss, 8*tiles), make([]float64, 8*tiles)
		for b := range B {
			for n := range d {
				wantSS[8*(n/64)+b] += float64(h[b*d+n]) * float64(h[b*d+n])
			}
		}
		if e := relErr(gotSS, wantSS); e > 1e-5 || math.IsNaN(e) {
			t.Errorf("%s: sums of squares rel err %.3g", name, e)
		}
		// The second: W2 · (rmsnorm(h) * normw), the norm from the sums.
		x := normed(h, normw, d, B, d, eps, true)
		want2 := make([]float64, B*tc.rows2)
		for b := range B {
			for n := range tc.rows2 {
				for k := range d {
					want2[b*tc.rows2+n] += float64(W2[n*d+k]) * x[b*d+k]
				}
			}
		}
		e2 := relErr(download(t, s, out2, B*tc.rows2), want2)
		if e2 > 1e-5 || math.IsNaN(e2) {
			t.Errorf("%s: the next GEMV's rel err %.3g", name, e2)
		} else {
			t.Logf("%s: next GEMV rel err %.3g", name, e2)
		}
	}
}

// gemmSkinnyShared is gemv_wg_shared(128): 8 stages of W's 64 x 64 box and
// x's 128 x 64, 1024 bytes of alignment, two barriers a stage.
const gemmSkinnyShared = 8*(64*64*2+128*64*2) + 1024 + 2*8*8

// TestGemmSkinnyKernel checks gemm_skinny_bf16_f32 against float64 (of the
// bf16-rounded operands): out[t, n] (+)= sum_k W[n, k] x[t, k] + bias[n],
// over NaNs where it writes, within 1e-5 relative error. Shapes: rows and
// K not multiples of 64 (boxes past both ends), T = 1, 3, 77 and 128 (x's
// box past T reads zeros), 1.4b's in_proj (8192 x 2048) and out_proj (2048
// x 4096, accumulating, k split over 4 blocks), k split over 2 and 3 with
// uneven steps; twice where nothing accumulates, since the split's
// counters must be back at zero after a launch.
func TestGemmSkinnyKernel(t *testing.T) {
	fn, s := gpu(t)
	needSM90(t)
	if err := fn("gemm_skinny_bf16_f32").SetMaxDynamicShared(gemmSkinnyShared); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rows, K, T int
		accu, bias bool
		parts      int
	}{{130, 136, 3, false, true, 1}, {64, 64, 1, false, false, 1}, {200, 1000, 77, true, true, 3},
		{8192, 2048, 128, false, true, 1}, {2048, 4096, 128, true, false, 4}, {37, 2560, 128, true, true, 2},
		{130, 136, 128, false, false, 3}} {
		name := fmt.Sprintf("gemm_skinny_bf16_f32 %+v", tc)
		x, xPacked := bf16Bits(randn(tc.T*tc.K, 1))
		W, wPacked := bf16Bits(randn(tc.rows*tc.K, 0.1))
		bias, out0 := randn(tc.rows, 1), randn(tc.T*tc.rows, 1)
		bx, bW, bb := upload(t, s, xPacked), upload(t, s, wPacked), upload(t, s, bias)
		bo, bptr, accu := linearArgs(t, s, out0, tc.accu, bb, tc.bias)
		wmap, xmap := ringMaps(t, bW.Ptr, tc.rows, tc.K, bx.Ptr, tc.T, 128)
		tiles := (tc.rows + 63) / 64
		scratch, count := poisoned(t, s, tiles*tc.parts*64*128), upload(t, s, make([]float32, tiles))
		for run := range 2 {
			if run == 1 && tc.accu {
				break
			}
			if err := fn("gemm_skinny_bf16_f32").Launch(cuda.Dim3{X: tiles, Y: tc.parts, Z: 1}, cuda.D1(160),
				gemmSkinnyShared, s, wmap, xmap, bptr, bo.Ptr, tc.rows, accu, tc.T, tc.K, tc.rows, scratch.Ptr,
				count.Ptr); err != nil {
				t.Fatal(err)
			}
		}
		x64 := make([]float64, len(x))
		for i, v := range x {
			x64[i] = float64(v)
		}
		want := linearWant(W, x64, tc.T, tc.rows, tc.K, pick(tc.bias, bias), pick(tc.accu, out0))
		nearRel(t, name, download(t, s, bo, tc.T*tc.rows), want, 1e-5)
	}
}

// lmHeadPick is lm_head_wg_bf16's keys [8] (uint64) and the picks [8]
// (int64) head_picks_i64 reads from them.
type lmHeadPick struct {
	keys, picks *cuda.Buffer
}

// newLMHeadPick allocates an lmHeadPick, its keys poisoned (x_parts_bf16
// must zero them), freed by the test's cleanup.
func newLMHeadPick(t *testing.T, s *cuda.Stream) lmHeadPick {
	t.Helper()
	p := lmHeadPick{keys: poisoned(t, s, 16)}
	var err error
	if p.picks, err = cuda.Alloc(64); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.picks.Free() })
	return p
}

// launch runs x_parts_bf16 on x [B, K] (normed with normw where it is set),
// zeroing the keys, then lm_head_wg_bf16 over rows rows of K (maps as
// ringMaps encodes them, x's through parts) for B sequences into out [B,
// rows], then head_picks_i64, and returns the picks.
func (p lmHeadPick) launch(t *testing.T, fn func(string) *cuda.Function, s *cuda.Stream, wmap, xmap cuda.TensorMap,
	x []float32, normw, parts, out cuda.Ptr, B, K, rows int) []int64 {
	t.Helper()
	if err := cuda.CopyIn(p.picks.Ptr, slices.Repeat([]int64{-7}, 8), s); err != nil {
		t.Fatal(err)
	}
	if err := fn("x_parts_bf16").Launch(cuda.D1(8), cuda.D1(256), 0, s, upload(t, s, x).Ptr, K, normw, float32(1e-5), B,
		K, parts, p.keys.Ptr); err != nil {
		t.Fatal(err)
	}
	if err := fn("lm_head_wg_bf16").Launch(cuda.D1((rows+63)/64), cuda.D1(160), gemvWGShared, s, wmap, xmap, out, rows,
		B, K, rows, cuda.Ptr(0), 0, float32(0), p.keys.Ptr); err != nil {
		t.Fatal(err)
	}
	if err := fn("head_picks_i64").Launch(cuda.D1(1), cuda.D1(32), 0, s, p.keys.Ptr, p.picks.Ptr, B, cuda.Ptr(0)); err != nil {
		t.Fatal(err)
	}
	got := make([]int64, 8)
	if err := cuda.CopyOut(got, p.picks.Ptr, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return got[:B]
}

// TestLMHeadWGKernel checks lm_head_wg_bf16: its logits against float64 as
// TestGEMVWGKernel checks gemv_wg_bf16's (over NaNs, normed or not, B = 1
// to 8, the 130m and 1.4b LM heads' sizes and partial blocks), and its
// picks against the host's rule (hostArgmax: the lowest index of the
// largest value, -1 for a row with NaN) over the logits it wrote, read
// from its keys by head_picks_i64. The keys start as NaN's bits and every
// launch follows x_parts_bf16, which must zero them; each shape runs twice
// on fresh x, on the keys the first run left. Then planted rows: with
// x[b] = 2 e_b, row b of the logits is twice column b of W exactly, so the
// rows argmax_rows_f32's test
// ranks (the largest in up to 5 places, signed zeros, and, one sequence a
// launch, -inf in two places of three, one +inf and one NaN, as ±bf16's
// largest times 2 and a NaN weight) come out as logits, one launch after
// another on the same keys. With -test.short (under the sanitizers) the
// same checks run at small sizes.
func TestLMHeadWGKernel(t *testing.T) {
	const eps = 1e-5
	fn, s := gpu(t)
	needSM90(t)
	if err := fn("lm_head_wg_bf16").SetMaxDynamicShared(gemvWGShared); err != nil {
		t.Fatal(err)
	}
	p := newLMHeadPick(t, s)
	type shape struct {
		rows, K, B int
		norm       bool
	}
	shapes, widths := []shape{{50280, 768, 1, true}, {50280, 768, 8, true}, {50280, 2048, 3, false}, {130, 136, 5, false},
		{37, 64, 8, true}}, []int{7, 1000, 50280}
	if testing.Short() { // under the sanitizers: the same checks at small sizes
		shapes, widths = []shape{{1000, 136, 8, true}, {130, 136, 5, false}, {37, 64, 3, true}}, []int{7, 1000}
	}
	for _, tc := range shapes {
		name := fmt.Sprintf("lm_head_wg_bf16 %+v", tc)
		W, packed := bf16Bits(randn(tc.rows*tc.K, 0.1))
		bW, normw := upload(t, s, packed), randn(tc.K, 1)
		bn := upload(t, s, normw)
		parts := poisoned(t, s, 24*tc.K/2)
		wmap, xmap := ringMaps(t, bW.Ptr, tc.rows, tc.K, parts.Ptr, 24, 24)
		nptr := cuda.Ptr(0)
		if tc.norm {
			nptr = bn.Ptr
		}
		for run := range 2 {
			x := randn(tc.B*tc.K, 1)
			out := poisoned(t, s, tc.B*tc.rows)
			got := p.launch(t, fn, s, wmap, xmap, x, nptr, parts.Ptr, out.Ptr, tc.B, tc.K, tc.rows)
			logits := download(t, s, out, tc.B*tc.rows)
			nearRel(t, fmt.Sprintf("%s run %d", name, run), logits,
				linearWant(W, normed(x, normw, tc.K, tc.B, tc.K, eps, tc.norm), tc.B, tc.rows, tc.K, nil, nil), 1e-5)
			for b := range tc.B {
				if want := hostArgmax(logits[b*tc.rows : (b+1)*tc.rows]); got[b] != want {
					t.Errorf("%s run %d: sequence %d picked %d, want %d", name, run, b, got[b], want)
				}
			}
		}
	}
	const K = 64
	for _, V := range widths {
		rows := [][]float32{randn(V, 3), randn(V, 0)} // the largest repeated, then zeros of both signs
		for range 5 {
			rows[0][rand.IntN(V)] = 20
		}
		special := specialRows(V)
		rows = append(rows, special[0])
		lone := special[1:] // infinities and NaN would make NaN of the other sequences' sums (inf·0)
		// planted runs the rows as B sequences, row b through column b of W.
		planted := func(rows [][]float32) {
			B := len(rows)
			W := randn(V*K, 1)
			for b, r := range rows {
				for n, v := range r {
					switch {
					case math.IsInf(float64(v), 0):
						v = float32(math.Copysign(float64(math.Float32frombits(0x7f7f0000)), float64(v))) // bf16's largest
					case v == v:
						v /= 2
					}
					W[n*K+b] = v
				}
			}
			W, packed := bf16Bits(W)
			x := make([]float32, B*K)
			for b := range B {
				x[b*K+b] = 2
			}
			bW, parts := upload(t, s, packed), poisoned(t, s, 24*K/2)
			wmap, xmap := ringMaps(t, bW.Ptr, V, K, parts.Ptr, 24, 24)
			out := poisoned(t, s, B*V)
			got := p.launch(t, fn, s, wmap, xmap, x, cuda.Ptr(0), parts.Ptr, out.Ptr, B, K, V)
			logits := download(t, s, out, B*V)
			for b := range B {
				row := logits[b*V : (b+1)*V]
				for n, v := range row {
					if want := float64(2 * W[n*K+b]); float64(v) != want && !(v != v && want != want) { // ±Inf past f32's range
						t.Fatalf("V=%d planted row %d: logit %d = %v, want %v", V, b, n, v, want)
					}
				}
				if want := hostArgmax(row); got[b] != want {
					t.Errorf("V=%d planted row %d of %d: picked %d, want %d", V, b, B, got[b], want)
				}
			}
		}
		planted(rows)
		for _, r := range lone {
			planted([][]float32{r})
		}
	}
}
