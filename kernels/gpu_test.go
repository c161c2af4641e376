package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
	gpuengine "github.com/mambago/mambago/mambago/gpu"
)

// gpu compiles every kernel for GPU 0 and returns a lookup, or skips the test
// with the reason there is no GPU. KERNELS_OPTS, NVRTC options added to every
// source's (e.g. "-DOP_EARLY=1"), runs the tests on a knob's build.
func gpu(t testing.TB) (func(string) *cuda.Function, *cuda.Stream) {
	t.Helper()
	d := gputest.Device(t)
	fns := map[string]*cuda.Function{}
	opts := strings.Fields(os.Getenv("KERNELS_OPTS"))
	for _, name := range kernels.Names() {
		src, _ := kernels.Source(name)
		// Whole files: the engine compiles typed entries in parts (kernels.Unit), to the same SASS (scripts/sass_parts.sh).
		m := loadSourceFor(t, kernels.Target(name, d.Arch()), src, name, opts...)
		for _, k := range kernels.Entries(name) {
			f, err := m.Function(k)
			if err != nil {
				t.Fatal(err)
			}
			fns[k] = f
		}
	}
	s := newStream(t)
	return func(k string) *cuda.Function {
		f, ok := fns[k]
		if !ok {
			t.Fatalf("kernel %s not found", k)
		}
		return f
	}, s
}

func randn(n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rand.NormFloat64() * scale)
	}
	return v
}

// upload copies v to a new device buffer poisoned with NaN first.
func upload(t testing.TB, s *cuda.Stream, v []float32) *cuda.Buffer {
	t.Helper()
	b, err := cuda.Alloc(4 * max(1, len(v)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	if err := cuda.Fill32(b.Ptr, 0x7fc00000, max(1, len(v)), s); err != nil {
		t.Fatal(err)
	}
	if err := cuda.CopyIn(b.Ptr, v, s); err != nil {
		t.Fatal(err)
	}
	return b
}

// poisoned returns a device buffer of n NaNs.
func poisoned(t testing.TB, s *cuda.Stream, n int) *cuda.Buffer {
	return upload(t, s, nan(n))
}

func nan(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return v
}

func download(t testing.TB, s *cuda.Stream, b *cuda.Buffer, n int) []float32 {
	t.Helper()
	out := make([]float32, n)
	if err := cuda.CopyOut(out, b.Ptr, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return out
}

// relErr is max|got-want| / max|want|; a NaN in got (an unwritten element) is +Inf.
func relErr(got []float32, want []float64) float64 {
	var md, mr float64
	for i := range got {
		g := float64(got[i])
		if math.IsNaN(g) {
			return math.Inf(1)
		}
		md = math.Max(md, math.Abs(g-want[i]))
		mr = math.Max(mr, math.Abs(want[i]))
	}
	return md / mr
}

// TestRMSNormKernel checks rmsnorm_f32 against float64, over whole rows
// (ldx = ldy = d) and over rows apart (the last position of each sequence,
// read ldx apart and written whole or ldy apart), where the elements
// between the rows written must stay as they were. Each launch also fills
// a span (the folded memset of cuda.MemsetEdit): more words than the grid
// has threads, and not one past the span.
func TestRMSNormKernel(t *testing.T) {
	fn, s := gpu(t)
	// d = 1002 and 3000 take the kernel's two-read path, as do rows 1002 or
	// 66 apart.
	for _, c := range []struct{ d, ldx, ldy int }{{64, 64, 64}, {768, 768, 768}, {2560, 2560, 2560}, {1000, 1000, 1000},
		{1002, 1002, 1002}, {3000, 3000, 3000}, {768, 5 * 768, 5 * 768}, {64, 1002, 1002}, {1000, 3000, 3000},
		{768, 5 * 768, 768}, {64, 1002, 64}, {64, 64, 66}, {1000, 1000, 3000}} {
		d, ldx, ldy, rows := c.d, c.ldx, c.ldy, 37
		x, w := randn(rows*ldx, 3), randn(d, 1)
		bx, bw, by := upload(t, s, x), upload(t, s, w), poisoned(t, s, rows*ldy)
		const fillWord, fillWords = 0x01020304, 3*5*256 + 7 // the grid has 5 blocks of 256 threads
		bfill := poisoned(t, s, fillWords+1)
		if err := fn("rmsnorm_f32").Launch(cuda.D1((rows+7)/8), cuda.D1(256), 0, s, bx.Ptr, bw.Ptr, by.Ptr, rows, d, ldx,
			ldy, float32(1e-5), bfill.Ptr, uint32(fillWord), int64(fillWords)); err != nil {
			t.Fatal(err)
		}
		fill := download(t, s, bfill, fillWords+1)
		for i, v := range fill[:fillWords] {
			if math.Float32bits(v) != fillWord {
				t.Fatalf("d=%d: fill word %d is %#x, want %#x", d, i, math.Float32bits(v), uint32(fillWord))
			}
		}
		if !math.IsNaN(float64(fill[fillWords])) {
			t.Fatalf("d=%d: the word after the fill was written", d)
		}
		all := download(t, s, by, rows*ldy)
		got, want := make([]float32, 0, rows*d), make([]float64, rows*d)
		for r := 0; r < rows; r++ {
			got = append(got, all[r*ldy:r*ldy+d]...)
			for i := d; i < ldy; i++ {
				if !math.IsNaN(float64(all[r*ldy+i])) {
					t.Fatalf("d=%d ldx=%d ldy=%d: element %d after row %d was written", d, ldx, ldy, i-d, r)
				}
			}
			var ss float64
			for i := 0; i < d; i++ {
				ss += float64(x[r*ldx+i]) * float64(x[r*ldx+i])
			}
			sc := 1 / math.Sqrt(ss/float64(d)+1e-5)
			for i := 0; i < d; i++ {
				want[r*d+i] = float64(x[r*ldx+i]) * sc * float64(w[i])
			}
		}
		if e := relErr(got, want); e > 1e-5 {
			t.Errorf("d=%d ldx=%d ldy=%d: rel err %.3g", d, ldx, ldy, e)
		}
	}
}

func TestEmbedKernel(t *testing.T) {
	fn, s := gpu(t)
	V, d, rows := 1000, 96, 50
	E := randn(V*d, 1)
	ids := make([]int64, rows)
	for i := range ids {
		ids[i] = rand.Int64N(int64(V))
	}
	bE, bh := upload(t, s, E), poisoned(t, s, rows*d)
	bids, _ := cuda.Alloc(8 * rows)
	defer bids.Free()
	if err := cuda.CopyIn(bids.Ptr, ids, s); err != nil {
		t.Fatal(err)
	}
	if err := fn("embed_f32").Launch(cuda.D1(rows), cuda.D1(128), 0, s, bids.Ptr, bE.Ptr, bh.Ptr, V, d); err != nil {
		t.Fatal(err)
	}
	got := download(t, s, bh, rows*d)
	for r, id := range ids {
		for i := 0; i < d; i++ {
			if got[r*d+i] != E[int(id)*d+i] {
				t.Fatalf("row %d col %d: %v, want %v", r, i, got[r*d+i], E[int(id)*d+i])
			}
		}
	}
}

// TestRMSNormEmbedKernel checks rmsnorm_embed in every storage type
// against float64: h must hold the table's rows bit for bit (ids outside
// [0, V) clamped), and y must be rmsnorm_<T> of them, at widths that take
// the kernel's one-read path (64, 768, 2560) and its two-read path (1002,
// 3000); h and y are poisoned with NaN first.
func TestRMSNormEmbedKernel(t *testing.T) {
	fn, s := gpu(t)
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16, cuda.F16} {
		for _, d := range []int{64, 768, 2560, 1002, 3000} {
			V, rows := 300, 37
			E, w := randn(V*d, 1), randn(d, 1)
			table := E
			if dt != cuda.F32 {
				E, table = pack16(dt, E)
			}
			ids := make([]int64, rows)
			for i := range ids {
				ids[i] = rand.Int64N(int64(V))
			}
			ids[3], ids[5] = -4, int64(V)+7 // clamped to 0 and V-1
			bE, bw, bh := upload(t, s, table), upload(t, s, w), poisoned(t, s, rows*d)
			by := poisoned(t, s, (rows*d*dt.Size()+3)/4)
			bids, err := cuda.Alloc(8 * rows)
			if err != nil {
				t.Fatal(err)
			}
			defer bids.Free()
			if err := cuda.CopyIn(bids.Ptr, ids, s); err != nil {
				t.Fatal(err)
			}
			name := "rmsnorm_embed_" + dt.Suffix()
			if err := fn(name).Launch(cuda.D1((rows+7)/8), cuda.D1(256), 0, s, bids.Ptr, bE.Ptr, V, bh.Ptr, bw.Ptr,
				by.Ptr, rows, d, float32(1e-5), cuda.Ptr(0), uint32(0), int64(0)); err != nil {
				t.Fatal(err)
			}
			h, y := download(t, s, bh, rows*d), download(t, s, by, (rows*d*dt.Size()+3)/4)
			if dt != cuda.F32 {
				y = unpack16(dt, y)[:rows*d]
			}
			want := make([]float64, rows*d)
			for r, id := range ids {
				id = min(max(id, 0), int64(V)-1)
				row := E[int(id)*d : int(id+1)*d]
				if !sameBits(h[r*d:(r+1)*d], row) {
					t.Fatalf("%s d=%d: h's row %d is not table row %d", name, d, r, id)
				}
				var ss float64
				for _, v := range row {
					ss += float64(v) * float64(v)
				}
				sc := 1 / math.Sqrt(ss/float64(d)+1e-5)
				for i, v := range row {
					want[r*d+i] = float64(v) * sc * float64(w[i])
				}
			}
			tol := 1e-5 // f32; a 16-bit y is rounded once
			if dt == cuda.BF16 {
				tol = 1.0 / 128
			} else if dt == cuda.F16 {
				tol = 1.0 / 1024
			}
			if e := relErr(y, want); e > tol {
				t.Errorf("%s d=%d: y's rel err %.3g, tolerance %.3g", name, d, e, tol)
			}
		}
	}
}

// TestMemsetRowsKernel checks memset_rows, which stands in for a graph's
// memset node (cuda.MemsetEdit), at each element size, over rows with a
// pitch: the rows' elements take the value's low bytes, and the bytes
// between rows and around the span keep their random contents.
func TestMemsetRowsKernel(t *testing.T) {
	fn, s := gpu(t)
	const bufBytes = 4096
	for _, size := range []int{1, 2, 4} {
		for _, sh := range []struct{ pitch, width, height int }{{0, 1000, 1}, {200, 37, 5}, {64, 16, 40}} {
			before := make([]byte, bufBytes)
			for i := range before {
				before[i] = byte(rand.IntN(256))
			}
			buf, err := cuda.Alloc(bufBytes)
			if err != nil {
				t.Fatal(err)
			}
			defer buf.Free()
			if err := cuda.CopyIn(buf.Ptr, before, s); err != nil {
				t.Fatal(err)
			}
			const off, value = 64, uint32(0xa1b2c3d4)
			err = fn("memset_rows").Launch(cuda.D1(3), cuda.D1(64), 0, s, buf.Ptr+off, uint64(sh.pitch), value,
				int32(size), int64(sh.width), int64(sh.height))
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, bufBytes)
			if err := cuda.CopyOut(got, buf.Ptr, s); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			want := append([]byte(nil), before...)
			for r := 0; r < sh.height; r++ {
				for c := 0; c < sh.width; c++ {
					for k := 0; k < size; k++ {
						want[off+r*sh.pitch+c*size+k] = byte(value >> (8 * k))
					}
				}
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("size %d, %+v: byte %d = %#x, want %#x", size, sh, i, got[i], want[i])
				}
			}
		}
	}
}

// TestConvAndScanKernels checks conv+silu and the scan, each continuing from
// a random carried state, against float64 references, for several N and T.
func TestConvAndScanKernels(t *testing.T) {
	fn, s := gpu(t)
	sm90 := gputest.Device(t).Major >= 9 // the scan's warps that specialize need mbarriers
	for _, tc := range []struct{ B, T, E, N, K, R int }{
		{1, 1, 64, 16, 4, 4}, {2, 37, 96, 8, 3, 5}, {3, 300, 128, 64, 4, 8}, {1, 257, 32, 256, 2, 2}, {2, 19, 48, 33, 4, 3},
		{2, 45, 40, 16, 6, 4},                          // K > 4: the conv computes with MAX_K taps
		{2, 200, 64, 12, 4, 4}, {1, 700, 32, 16, 4, 8}, // the one-pass scan with idle states, and a long prompt
		{1, 300, 96, 16, 4, 48}, {2, 130, 40, 16, 4, 16}, // dt_rank 48 (the 130m shape's), channels past E in a block
		{1, 77, 40, 16, 4, 8}, // the copy engine's boxes (Scan.TMA) with channels past E, and rows past T
	} {
		B, T, E, N, K, R := tc.B, tc.T, tc.E, tc.N, tc.K, tc.R
		rows := B * T
		// conv
		xz := randn(rows*2*E, 1)
		win, w, bias := randn(B*E*K, 1), randn(E*K, 0.5), randn(E, 0.1)
		bxz, bwin, bw, bb, bu := upload(t, s, xz), upload(t, s, win), upload(t, s, w), upload(t, s, bias), poisoned(t, s, rows*E)
		conv := gpuengine.Conv{XZ: bxz.Ptr, LDX: 2 * E, Window: bwin.Ptr, W: bw.Ptr, Bias: bb.Ptr, U: bu.Ptr,
			B: B, T: T, E: E, K: K}
		if err := conv.Launch(fn, s); err != nil {
			t.Fatal(err)
		}
		gotU := download(t, s, bu, rows*E)
		gotWin := download(t, s, bwin, B*E*K)
		wantU, wantWin := make([]float64, rows*E), make([]float64, B*E*K)
		for b := 0; b < B; b++ {
			for c := 0; c < E; c++ {
				hist := make([]float64, 0, K+T)
				for k := 0; k < K; k++ {
					hist = append(hist, float64(win[(b*E+c)*K+k]))
				}
				for tt := 0; tt < T; tt++ {
					hist = append(hist, float64(xz[(b*T+tt)*2*E+c]))
					acc := float64(bias[c])
					for k := 0; k < K; k++ {
						acc += float64(w[c*K+k]) * hist[len(hist)-K+k]
					}
					wantU[(b*T+tt)*E+c] = acc / (1 + math.Exp(-acc))
				}
				for k := 0; k < K; k++ {
					wantWin[(b*E+c)*K+k] = hist[len(hist)-K+k]
				}
			}
		}
		if e := relErr(gotU, wantU); e > 1e-5 {
			t.Errorf("conv %+v: u rel err %.3g", tc, e)
		}
		if e := relErr(gotWin, wantWin); e > 0 {
			t.Errorf("conv %+v: window rel err %.3g", tc, e)
		}
		// scan
		ld := R + 2*N
		// The time step as dt_proj_f32 leaves it: softplus(delta + bias).
		delta, dtb, dbl := randn(rows*E, 1), randn(E, 0.5), randn(rows*ld, 1)
		dt := make([]float32, rows*E)
		for i := range dt {
			dt[i] = float32(softplus(float64(delta[i]) + float64(dtb[i%E])))
		}
		A2 := make([]float32, E*N)
		for i := range A2 {
			A2[i] = -float32(math.Exp(rand.NormFloat64()*0.5)) * math.Log2E
		}
		Dk, st0 := randn(E, 1), randn(B*E*N, 1)
		bA2, bdbl := upload(t, s, A2), upload(t, s, dbl)
		bD := upload(t, s, Dk)
		wantY, wantS := scanRef(dt, dbl, A2, Dk, st0, xz, gotU, B, T, E, N, R)
		// The default chunk, many chunks, chunks of many stages; the plain
		// kernels and the staged ones (every E here is a multiple of 8); and
		// the one-pass scan at 2 and 4 states a thread where it applies,
		// walked once and in segments (the last one short where T is not a
		// multiple of the segments' length).
		// With sms set, scan_fixup splits the positions over more blocks;
		// with aligned, the walk's sums go to rows of E (the engine's rows
		// of 2E are as aligned), which scan_fixup copies in 16-byte pieces
		// where N = 16 and dbl's rows allow, else rows of E + 3. With
		// helpers, the entry whose warps specialize (sm_90 and newer) must
		// give the plain walk's bits.
		type variant struct {
			chunk, onePass, segments, sms int
			staged, aligned, helpers      bool
		}
		variants := []variant{{onePass: 2}, {onePass: 2, helpers: true}, {onePass: 4}, {onePass: 2, segments: 2}, {onePass: 2, segments: 3},
			{onePass: 2, segments: 8}, {onePass: 2, segments: 3, sms: 132}, {onePass: 2, segments: 3, aligned: true},
			{onePass: 2, segments: 8, sms: 132, aligned: true}}
		for _, chunk := range []int{0, 8, 24, 136} {
			variants = append(variants, variant{chunk: chunk}, variant{chunk: chunk, staged: true})
		}
		var walkY, walkS []float32 // the plain walk's (onePass 2, walked once)
		for _, v := range variants {
			if v.helpers && !sm90 {
				continue
			}
			// A fresh dt each time: the walk in segments overwrites it.
			ldv := E + 3
			if v.aligned {
				ldv = E
			}
			bdt, bst, by, bv := upload(t, s, dt), upload(t, s, st0), poisoned(t, s, rows*E), poisoned(t, s, rows*ldv)
			sc := gpuengine.Scan{DT: bdt.Ptr, A2: bA2.Ptr, DBL: bdbl.Ptr, LDD: ld, R: R,
				U: bu.Ptr, D: bD.Ptr, Z: bxz.Offset(4 * E), LDZ: 2 * E, State: bst.Ptr, Y: by.Ptr,
				B: B, T: T, E: E, N: N, Chunk: v.chunk, Staged: v.staged, OnePass: v.onePass,
				Segments: v.segments, V: bv.Ptr, LDV: ldv, SMs: v.sms, Helpers: v.helpers,
				Prefetch: gpuengine.L2Span{P: bxz.Ptr, Bytes: 4 * rows * 2 * E}, PrefetchLead: 2} // a span it reads anyway, for memcheck
			if v.onePass > 0 && !sc.OnePassApplies() {
				continue
			}
			scratch := poisoned(t, s, max(1, sc.ScratchFloats()))
			sc.Scratch = scratch.Ptr
			if err := sc.Launch(fn, s); err != nil {
				t.Fatal(err)
			}
			gotY, gotS := download(t, s, by, rows*E), download(t, s, bst, B*E*N)
			checkScan(t, fmt.Sprintf("%+v %+v", tc, v), gotY, gotS, wantY, wantS)
			switch {
			case v == variant{onePass: 2}:
				walkY, walkS = gotY, gotS
			case v.helpers && (!slices.Equal(gotY, walkY) || !slices.Equal(gotS, walkS)):
				t.Errorf("%+v %+v: y or the state differs from the plain walk's bits", tc, v)
			}
		}
		if sm90 {
			checkScanDT(t, fn, s, scanDTCase{B: B, T: T, E: E, N: N, R: R, dbl: dbl, xz: xz, u: gotU, A2: A2, D: Dk,
				st0: st0, bdbl: bdbl, bu: bu, bxz: bxz, bA2: bA2, bD: bD})
		}
		t.Logf("%+v ok", tc)
	}
}

// scanDTCase is a scan's inputs for checkScanDT, on the host and on the
// device.
type scanDTCase struct {
	B, T, E, N, R          int
	dbl, xz, u, A2, D, st0 []float32
	bdbl, bu, bxz, bA2, bD *cuda.Buffer
}

// checkScanDT checks the scan that computes the time step in its tiles
// from dt_low (gpu.Scan.DTProducts), where it applies: with 3 TF32
// products against float64 (the time step from the same dt_low, weights
// and bias), and with 1 and 3 bit for bit against dt_proj's tensor-core
// entry followed by the scan; and, where Scan.TMAApplies, with its tiles
// through the copy engine bit for bit against its cp.async pieces.
func checkScanDT(t *testing.T, fn func(string) *cuda.Function, s *cuda.Stream, c scanDTCase) {
	t.Helper()
	B, T, E, N, R, rows, ld := c.B, c.T, c.E, c.N, c.R, c.B*c.T, c.R+2*c.N
	probe := gpuengine.Scan{DBL: c.bdbl.Ptr, LDD: ld, R: R, LDZ: 2 * E, B: B, T: T, E: E, N: N, OnePass: 2, Helpers: true,
		DTProducts: 3}
	if !probe.FusedDTApplies() {
		return // dt_rank not a multiple of 8, or the one-pass scan does not apply
	}
	W, bias := randn(E*R, 1/math.Sqrt(float64(R))), randn(E, 0.5)
	bW, bbias := upload(t, s, W), upload(t, s, bias)
	dt := make([]float32, rows*E)
	for i, v := range dtProj64(c.dbl, ld, W, bias, rows, E, R) {
		dt[i] = float32(v)
	}
	wantY, wantS := scanRef(dt, c.dbl, c.A2, c.D, c.st0, c.xz, c.u, B, T, E, N, R)
	for _, products := range []int{3, 1} {
		run := func(fused, tma bool) (y, st []float32) {
			bdt, bst, by := poisoned(t, s, rows*E), upload(t, s, c.st0), poisoned(t, s, rows*E)
			sc := gpuengine.Scan{DT: bdt.Ptr, A2: c.bA2.Ptr, DBL: c.bdbl.Ptr, LDD: ld, R: R, U: c.bu.Ptr, D: c.bD.Ptr,
				Z: c.bxz.Offset(4 * E), LDZ: 2 * E, State: bst.Ptr, Y: by.Ptr, B: B, T: T, E: E, N: N, OnePass: 2,
				Helpers: true, TMA: tma}
			if fused {
				sc.DTProducts, sc.DTW, sc.DTBias = products, bW.Ptr, bbias.Ptr
				if !sc.FusedDTApplies() {
					t.Fatalf("%d products: the scan does not compute the time step here", products)
				}
			} else if err := (gpuengine.DTProj{DBL: c.bdbl.Ptr, LDD: ld, R: R, W: bW.Ptr, Bias: bbias.Ptr, DT: bdt.Ptr,
				Rows: rows, E: E, TensorCores: true, OneTF32Product: products == 1}).Launch(fn, s); err != nil {
				t.Fatal(err)
			}
			if err := sc.Launch(fn, s); err != nil {
				t.Fatal(err)
			}
			return download(t, s, by, rows*E), download(t, s, bst, B*E*N)
		}
		gotY, gotS := run(true, false)
		name := fmt.Sprintf("B%d T%d E%d R%d, the time step in the tiles, %d products", B, T, E, R, products)
		if products == 3 {
			checkScan(t, name, gotY, gotS, wantY, wantS)
		}
		if wy, ws := run(false, false); !slices.Equal(gotY, wy) || !slices.Equal(gotS, ws) {
			t.Errorf("%s: y or the state differs from dt_proj then the scan", name)
		}
		probe.DTProducts, probe.U, probe.Z, probe.TMA = products, c.bu.Ptr, c.bxz.Offset(4*E), true
		if probe.TMAApplies() {
			if ty, ts := run(true, true); !slices.Equal(gotY, ty) || !slices.Equal(gotS, ts) {
				t.Errorf("%s: y or the state differs with the tiles through the copy engine", name)
			}
		}
	}
}

// scanRef is the scan in float64: y [B, T, E] and the final state [B, E, N].
func scanRef(dtv, dbl, A2, Dk, st0, xz, u []float32, B, T, E, N, R int) (wantY, wantS []float64) {
	ld, rows := R+2*N, B*T
	wantY, wantS = make([]float64, rows*E), make([]float64, B*E*N)
	for b := 0; b < B; b++ {
		for c := 0; c < E; c++ {
			st := make([]float64, N)
			for n := range st {
				st[n] = float64(st0[(b*E+c)*N+n])
			}
			for tt := 0; tt < T; tt++ {
				r := b*T + tt
				dt := float64(dtv[r*E+c])
				uv := float64(u[r*E+c])
				acc := 0.0
				for n := 0; n < N; n++ {
					st[n] = math.Exp2(dt*float64(A2[c*N+n]))*st[n] + dt*float64(dbl[r*ld+R+n])*uv
					acc += st[n] * float64(dbl[r*ld+R+N+n])
				}
				z := float64(xz[r*2*E+E+c])
				wantY[r*E+c] = (acc + float64(Dk[c])*uv) * z / (1 + math.Exp(-z))
			}
			for n := range st {
				wantS[(b*E+c)*N+n] = st[n]
			}
		}
	}
	return wantY, wantS
}

func checkScan(t *testing.T, name string, gotY, gotS []float32, wantY, wantS []float64) {
	t.Helper()
	if e := relErr(gotY, wantY); e > 1e-4 {
		t.Errorf("scan %s: y rel err %.3g", name, e)
	}
	if e := relErr(gotS, wantS); e > 1e-4 {
		t.Errorf("scan %s: state rel err %.3g", name, e)
	}
}

// dtProj64 is dt_proj in float64: softplus(dbl[r, :R] · W[c, :] + bias[c])
// for rows r of dbl (ldd apart) and channels c < E, W [E, R].
func dtProj64(dbl []float32, ldd int, W, bias []float32, rows, E, R int) []float64 {
	out := gemmNT64(dbl, ldd, W, rows, E, R)
	for i, v := range out {
		out[i] = softplus(v + float64(bias[i%E]))
	}
	return out
}

// softplus is PyTorch's, threshold 20.
func softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// TestDTProjKernel checks dt_proj (and the softplus after it) against float64, for tile-sized and ragged
// shapes (odd channel counts, rows past the last full tile) and dt ranks below, at and above one stage
// of columns, on CUDA cores and, where the device has them, on the tensor cores: 3xTF32, held to the
// same bound as f32, and one TF32 product, held to TF32's rounding. The short entries
// (DTProj.Short) and the warpgroup entry must also give the bits of the entry they stand in for.
func TestDTProjKernel(t *testing.T) {
	fn, s := gpu(t)
	// sms = 1 picks the tall tensor-core entries wherever they make three
	// blocks.
	type variant struct {
		tensorCores, oneProduct bool
		sms                     int
		warpgroup, short        bool
	}
	variants := []variant{{}}
	dev := gputest.Device(t)
	if dev.Major >= 8 {
		variants = append(variants, variant{true, false, 0, false, false}, variant{true, true, 0, false, false},
			variant{true, false, 1, false, false}, variant{true, true, 1, false, false},
			variant{true, false, 0, false, true}, variant{true, true, 0, false, true})
	}
	if dev.Major == 9 && dev.Minor == 0 { // dt_proj_wg_f32, on a grid of one wave and of one block a channel tile
		variants = append(variants, variant{true, true, dev.SMs, true, false}, variant{true, true, 1, true, false})
	}
	for _, tc := range []struct{ rows, E, R, N int }{{37, 100, 5, 16}, {37, 101, 5, 16}, {37, 101, 8, 16}, {2048, 1536, 48, 16},
		{300, 5120, 160, 16}, {64, 256, 16, 64}, {100, 200, 20, 16}, {130, 4096, 128, 16}} {
		ldd := tc.R + 2*tc.N
		dbl, W, bias := randn(tc.rows*ldd, 1), randn(tc.E*tc.R, 0.5), randn(tc.E, 2)
		want := dtProj64(dbl, ldd, W, bias, tc.rows, tc.E, tc.R)
		bdbl, bW, bb := upload(t, s, dbl), upload(t, s, W), upload(t, s, bias)
		for _, v := range variants {
			bd := poisoned(t, s, tc.rows*tc.E)
			p := gpuengine.DTProj{DBL: bdbl.Ptr, LDD: ldd, R: tc.R, W: bW.Ptr, Bias: bb.Ptr, DT: bd.Ptr, Rows: tc.rows,
				E: tc.E, TensorCores: v.tensorCores, OneTF32Product: v.oneProduct, SMs: v.sms, Warpgroup: v.warpgroup,
				Short: v.short}
			if err := p.Launch(fn, s); err != nil {
				t.Fatal(err)
			}
			got := download(t, s, bd, tc.rows*tc.E)
			bound := 1e-5
			if p.OneTF32Product { // operands rounded to TF32, 2^-11 each
				bound = 2e-3
			}
			name := fmt.Sprintf("%+v %s (SMs %d)", tc, p.Kernel(), v.sms)
			if e := relErr(got, want); e > bound {
				t.Errorf("%s: rel err %.3g", name, e)
			} else {
				t.Logf("%s: rel err %.3g", name, e)
			}
			if k := p.Kernel(); k == "dt_proj_wg_f32" || strings.Contains(k, "_short_") {
				// The same rounded operands as dt_proj_tc1_f32 (dt_proj_tc_f32 for
				// the short entry of three products): its bits? The short entries
				// run the same products in the same order, so they must.
				q, bq := p, poisoned(t, s, tc.rows*tc.E)
				q.Warpgroup, q.Short, q.SMs, q.DT = false, false, 0, bq.Ptr
				if err := q.Launch(fn, s); err != nil {
					t.Fatal(err)
				}
				same, ref := 0, download(t, s, bq, tc.rows*tc.E)
				for i := range got {
					if math.Float32bits(got[i]) == math.Float32bits(ref[i]) {
						same++
					}
				}
				t.Logf("%s: %d of %d values with %s's bits", name, same, len(got), q.Kernel())
				if v.short && same != len(got) {
					t.Errorf("%s: %d of %d values differ from %s's", name, len(got)-same, len(got), q.Kernel())
				}
			}
		}
	}
}

// testStreamBits checks that the streaming entry (gemv_sb1_) gives want's
// bits, the other entries' at B = 1, where it applies (the vector path,
// splits 1, 2 and 4): on a grid of 3 blocks an SM, where most warps have
// no row or one, and on one block, whose warps walk several rows each, so
// that their loads cross rows (asking L2 for the rows first on the grid,
// not on the one block). xwb holds x, W and the bias on the device.
func testStreamBits(t *testing.T, fn func(string) *cuda.Function, s *cuda.Stream, name, sfx string, K, split, rows int,
	accu bool, out0 []float32, xwb []*cuda.Buffer, normw cuda.Ptr, want []float32) {
	t.Helper()
	size := map[string]int{"f32": 4, "bf16": 2, "f16": 2}[sfx]
	if K%(16/size) != 0 || split > 4 {
		return
	}
	accumulate := 0
	if accu {
		accumulate = 1
	}
	for i, blocks := range []int{3 * gputest.Device(t).SMs, 1} {
		prefetch := 1 - i // asking L2 first on the grid, not on the one block
		bo := poisoned(t, s, rows)
		if accu {
			bo = upload(t, s, out0[:rows])
		}
		if err := fn("gemv_sb1_"+sfx).Launch(cuda.D1(blocks), cuda.D1(256), 8*K, s, xwb[0].Ptr, K+4, normw, float32(1e-5),
			xwb[1].Ptr, xwb[2].Ptr, bo.Ptr, rows, accumulate, 1, K, rows, split, prefetch); err != nil {
			t.Fatal(err)
		}
		for i, v := range download(t, s, bo, rows) {
			if math.Float32bits(v) != math.Float32bits(want[i]) {
				t.Fatalf("%s: gemv_sb1_%s on %d blocks gives %v at %d, the other entries %v", name, sfx, blocks, v, i, want[i])
			}
		}
	}
}

// bf16Bits rounds v to bfloat16 (to nearest, ties to even), returning the
// rounded values and their bits packed two to a float32 slot, ready to
// upload as a bf16 array.
func bf16Bits(v []float32) (rounded []float32, packed []float32) {
	rounded, packed = make([]float32, len(v)), make([]float32, (len(v)+1)/2)
	words := make([]uint32, len(packed))
	for i, x := range v {
		b := math.Float32bits(x)
		b += 0x7fff + (b>>16)&1
		rounded[i] = math.Float32frombits(b &^ 0xffff)
		words[i/2] |= (b >> 16) << (16 * (i % 2))
	}
	for i, w := range words {
		packed[i] = math.Float32frombits(w)
	}
	return rounded, packed
}

// TestGEMVKernel checks the decode GEMV (kernels/step.cu) against float64
// for every split, with one and four rows to a warp group (gemv_, gemv_r4_;
// the rows counts leave partial groups; at B=1 the one-sequence entries
// too, and the streaming ones where they apply, which must give the same
// bits), with and without the RMSNorm folded in, writing and
// accumulating, on the vector path (K a multiple of 16 bytes' worth of
// weights) and the scalar one, in f32, bf16 and f16 weights; and the tensor-core
// entry (gemv_tc_bf16) where K is a multiple of 8 (136 is not one of 32,
// so some of a warp's lanes load past K while the warp's products run on),
// at 8 and 16 warps, whole (gemv_tc_bf16) and with each tile's k split
// over 1, 2 and 4 blocks (gemv_tc_split_bf16).
func TestGEMVKernel(t *testing.T) {
	fn, s := gpu(t)
	for _, sfx := range []string{"f32", "bf16", "f16"} {
		for _, K := range []int{64, 136, 770, 1280, 2048, 2560} {
			testGEMVKernel(t, fn, s, sfx, K) // not a subtest: the context is this goroutine's thread's
		}
	}
}

// testGEMVKernel is TestGEMVKernel's cases for one weight type and K.
func testGEMVKernel(t *testing.T, fn func(string) *cuda.Function, s *cuda.Stream, sfx string, K int) {
	const eps = 1e-5
	for _, sp := range []struct{ split, rows int }{{1, 1}, {2, 1}, {4, 1}, {8, 1}, {1, 4}, {2, 4}, {4, 4}, {8, 4}} {
		split, kernel := sp.split, "gemv_"
		if sp.rows == 4 {
			kernel = "gemv_r4_"
		}
		for _, tc := range []struct {
			B, rows    int
			norm, accu bool
		}{{1, 37, true, false}, {1, 300, false, true}, {3, 5, false, true}, {8, 130, true, true}, {8, 9, false, false}} {
			name := fmt.Sprintf("%s%s K=%d split=%d %+v", kernel, sfx, K, split, tc)
			ldx := K + 4
			x, W, bias, normw := randn(tc.B*ldx, 1), randn(tc.rows*K, 0.1), randn(tc.rows, 1), randn(K, 1)
			wdev := W
			switch sfx {
			case "bf16":
				W, wdev = pack16(cuda.BF16, W)
			case "f16":
				W, wdev = pack16(cuda.F16, W)
			}
			out0 := randn(tc.B*tc.rows, 1)
			bx, bW, bb, bn := upload(t, s, x), upload(t, s, wdev), upload(t, s, bias), upload(t, s, normw)
			bo := poisoned(t, s, tc.B*tc.rows)
			if tc.accu {
				bo = upload(t, s, out0)
			}
			nptr, accu := cuda.Ptr(0), 0
			if tc.norm {
				nptr = bn.Ptr
			}
			if tc.accu {
				accu = 1
			}
			per := 8 / split * sp.rows
			grid := cuda.D1((tc.rows + per - 1) / per)
			if err := fn(kernel+sfx).Launch(grid, cuda.D1(256), 0, s, bx.Ptr, ldx, nptr, float32(eps), bW.Ptr,
				bb.Ptr, bo.Ptr, tc.rows, accu, tc.B, K, tc.rows, split); err != nil {
				t.Fatal(err)
			}
			got := download(t, s, bo, tc.B*tc.rows)
			if tc.B == 1 { // the one-sequence entry: the same bits
				b1 := poisoned(t, s, tc.rows)
				if tc.accu {
					b1 = upload(t, s, out0)
				}
				if err := fn(kernel+"b1_"+sfx).Launch(grid, cuda.D1(256), 0, s, bx.Ptr, ldx, nptr, float32(eps), bW.Ptr,
					bb.Ptr, b1.Ptr, tc.rows, accu, tc.B, K, tc.rows, split); err != nil {
					t.Fatal(err)
				}
				for i, v := range download(t, s, b1, tc.rows) {
					if math.Float32bits(v) != math.Float32bits(got[i]) {
						t.Fatalf("%s: %sb1_%s gives %v at %d, %s%s %v", name, kernel, sfx, v, i, kernel, sfx, got[i])
					}
				}
				testStreamBits(t, fn, s, name, sfx, K, split, tc.rows, tc.accu, out0, []*cuda.Buffer{bx, bW, bb}, nptr, got)
			}
			want := make([]float64, tc.B*tc.rows)
			for b := 0; b < tc.B; b++ {
				scale := 1.0
				if tc.norm {
					var ss float64
					for k := 0; k < K; k++ {
						ss += float64(x[b*ldx+k]) * float64(x[b*ldx+k])
					}
					scale = 1 / math.Sqrt(ss/float64(K)+eps)
				}
				for n := 0; n < tc.rows; n++ {
					var sum float64
					for k := 0; k < K; k++ {
						xv := float64(x[b*ldx+k]) * scale
						if tc.norm {
							xv *= float64(normw[k])
						}
						sum += float64(W[n*K+k]) * xv
					}
					want[b*tc.rows+n] = sum + float64(bias[n])
					if tc.accu {
						want[b*tc.rows+n] += float64(out0[b*tc.rows+n])
					}
				}
			}
			if e := relErr(got, want); e > 1e-5 {
				t.Errorf("%s: rel err %.3g", name, e)
			}
			// The tensor-core entries (bf16, K a multiple of 8), once
			// for each K and case and block of 8 or 16 warps:
			// gemv_tc_bf16, and gemv_tc_split_bf16 with each tile's k
			// split over 1, 2 or 4 blocks (at K = 64 some of them get
			// none), whose counters must be zero again after.
			if sfx != "bf16" || K%8 != 0 || sp.split != 8 || sp.rows != 1 {
				continue
			}
			tiles := (tc.rows + 15) / 16
			for _, warps := range []int{8, 16} {
				for _, parts := range []int{0, 1, 2, 4} { // 0: gemv_tc_bf16, else gemv_tc_split_bf16
					bt := poisoned(t, s, tc.B*tc.rows)
					if tc.accu {
						bt = upload(t, s, out0)
					}
					kernel, grid := "gemv_tc_bf16", cuda.D1(tiles)
					args := []any{bx.Ptr, ldx, nptr, float32(eps), bW.Ptr, bb.Ptr, bt.Ptr, tc.rows, accu, tc.B, K, tc.rows, warps}
					count := upload(t, s, make([]float32, tiles))
					if parts > 0 {
						scratch := poisoned(t, s, tiles*parts*144)
						kernel, grid.Y, args = "gemv_tc_split_bf16", parts, append(args, scratch.Ptr, count.Ptr)
					}
					if err := fn(kernel).Launch(grid, cuda.D1(32*warps), 0, s, args...); err != nil {
						t.Fatal(err)
					}
					name := fmt.Sprintf("%s K=%d %d warps %d parts %+v", kernel, K, warps, grid.Y, tc)
					if e := relErr(download(t, s, bt, tc.B*tc.rows), want); e > 1e-5 {
						t.Errorf("%s: rel err %.3g", name, e)
					} else {
						t.Logf("%s: rel err %.3g", name, e)
					}
					for i, v := range download(t, s, count, tiles) {
						if math.Float32bits(v) != 0 {
							t.Errorf("%s: tile %d's counter left at %d", name, i, math.Float32bits(v))
						}
					}
				}
			}
		}
	}
}
