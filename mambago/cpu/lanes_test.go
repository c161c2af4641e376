package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"testing"

	"github.com/mambago/mambago/internal/blastest"
	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestLaneScanLayout pins the field offsets of laneScan, laneConv and
// rowsGemm, which lanes_amd64.h and lanes_amd64.s use as numbers.
func TestLaneScanLayout(t *testing.T) {
	for _, c := range []struct {
		v    any
		want []uintptr // the offsets lanes_amd64.s #defines, in field order
	}{
		{laneScan{}, []uintptr{0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 184}},
		{laneConv{}, []uintptr{0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80}},
		{rowsGemm{}, []uintptr{0, 8, 16, 24, 32, 40, 48, 56}},
	} {
		typ := reflect.TypeOf(c.v)
		got := make([]uintptr, typ.NumField())
		for i := range got {
			got[i] = typ.Field(i).Offset
		}
		if !slices.Equal(got, c.want) {
			t.Fatalf("%s's offsets are %v; lanes_amd64.s reads %v", typ.Name(), got, c.want)
		}
	}
}

// TestGemmRows checks gemmRows against float64 on fresh random operands,
// for W in each Storage (float64 of the values W holds, widened): 1 to 8
// rows (one row runs on dotRowsAVX512, or on dotRowsAVX2), K with and without columns past a multiple of 8 and of 16 (and under
// 8), padded row strides, beta 0 and 1, with AVX-512F on each kernel set.
// The first rows of M come out the same bits when gemmRows takes them
// alone, from two rows on, on a kernel that groups W's rows otherwise: a
// sequence's step does not depend on the batch it runs in; with AVX-512F,
// the AVX-512 kernels of eight rows give the AVX2 ones' bits.
func TestGemmRows(t *testing.T) {
	if !hasAVX2 {
		t.Skip("this CPU has no AVX2/FMA/F16C")
	}
	defer func() { useWideRows = hasAVX512 }()
	rng := rand.New(rand.NewPCG(rand.Uint64(), 11))
	for _, st := range []Storage{Float32, BFloat16, Float16} {
		for _, K := range []int{3, 8, 24, 29, 768} {
			for M := 1; M <= rowsMax; M++ {
				for _, beta := range []float32{0, 1} {
					N, lda, ldc := 37+rng.IntN(300), K+rng.IntN(3), 0
					ldc = N + rng.IntN(3)
					a, c := randVec(M*lda), randVec(M*ldc)
					if beta == 0 { // C's old values must not reach it, NaN included
						for i := range c {
							c[i] = float32(math.NaN())
						}
					}
					w := newMatrix(randVec(N*K), N, K, st)
					want := make([]float64, len(c))
					for i := range c {
						want[i] = float64(c[i])
					}
					for m := range M {
						for n := range N {
							var s float64
							for k := range K {
								s += float64(a[m*lda+k]) * float64(w.at(n, k))
							}
							if beta != 0 {
								s += float64(beta) * float64(c[m*ldc+n])
							}
							want[m*ldc+n] = s
						}
					}
					c0 := slices.Clone(c)
					check := func(c []float32, kernels string) {
						t.Helper()
						for i := range c {
							if math.Abs(float64(c[i])-want[i]) > 1e-5*(math.Sqrt(float64(K))+math.Abs(want[i])) {
								t.Fatalf("%v K=%d M=%d beta=%v, %s: c[%d] = %v, want %v", st, K, M, beta, kernels, i, c[i], want[i])
							}
						}
					}
					gemmRows(c, ldc, a, lda, w, M, N, K, beta)
					check(c, "default kernels")
					if hasAVX512 { // the AVX2 kernels alone: the same bits from two rows on
						useWideRows = false
						narrow := slices.Clone(c0)
						gemmRows(narrow, ldc, a, lda, w, M, N, K, beta)
						useWideRows = true
						check(narrow, "AVX2 kernels")
						if M > 1 && !sameBits(narrow, c) {
							t.Fatalf("%v K=%d M=%d beta=%v: the AVX-512 kernels' sums differ from AVX2's", st, K, M, beta)
						}
					}
					for _, sub := range []int{2, 4} { // the first 2 and 4 rows alone, where M took a wider kernel
						if sub < M {
							part := slices.Clone(c0[:sub*ldc])
							gemmRows(part, ldc, a, lda, w, sub, N, K, beta)
							if !sameBits(part, c[:sub*ldc]) {
								t.Fatalf("%v K=%d M=%d beta=%v: the first %d rows alone differ from M's", st, K, M, beta, sub)
							}
						}
					}
				}
			}
		}
	}
}

// TestScanLanesMatchesChannelLoop runs prefills with the conv and the scan
// eight channels at a time (convLanes, scanLanes) and one at a time, from
// the same random carried state, and compares every position's output and
// the final states. The
// shapes leave channels over for the loop (E = 2d not a multiple of 8),
// take N from 1 to 64, K from 2 to 8 (with and without a conv bias) and T
// from 1, and the time-step biases reach past
// softplus' threshold of 20 and far below 0; fresh random draws each run.
func TestScanLanesMatchesChannelLoop(t *testing.T) {
	if !hasAVX2 {
		t.Skip("this CPU has no AVX2/FMA: only the channel loop runs")
	}
	defer func() { useLanes = hasAVX2 }()
	rng := rand.New(rand.NewPCG(rand.Uint64(), 7))
	for _, sh := range []struct {
		d, N, K, B, T int
		convBias      bool
	}{
		{64, 16, 4, 2, 37, true}, {52, 16, 4, 1, 1, true}, {36, 1, 3, 3, 9, false}, {20, 5, 2, 2, 17, true},
		{64, 64, 8, 1, 70, false}, {40, 8, 4, 2, 4, true},
	} {
		t.Run(fmt.Sprintf("d=%d_N=%d_K=%d_B=%d_T=%d", sh.d, sh.N, sh.K, sh.B, sh.T), func(t *testing.T) {
			cfg := fixture.Shape(sh.d, 2, 50)
			cfg.State, cfg.ConvKernel, cfg.UseConvBias = sh.N, sh.K, sh.convBias
			w := fixture.RandomWeights(cfg, rng.Uint64())
			for _, l := range w.Layers {
				for i := range l.DTBias {
					switch i % 7 {
					case 0:
						l.DTBias[i] = 21 + float32(rng.Float64()*10) // past the threshold
					case 1:
						l.DTBias[i] = -40 * float32(rng.Float64()) // e^x far below 1
					case 2:
						l.DTBias[i] = float32(rng.NormFloat64() * 3)
					}
				}
			}
			e := New(w)
			ids := make([]int64, sh.B*sh.T)
			for i := range ids {
				ids[i] = rng.Int64N(50)
			}
			start, window := make([][]float32, cfg.Layers), make([][]float32, cfg.Layers)
			for l := range start {
				start[l], window[l] = randVec(sh.B*cfg.Inner*sh.N), randVec(sh.B*cfg.Inner*sh.K)
			}
			run := func(lanes bool) ([]float32, *State) {
				useLanes = lanes
				st, err := e.NewState(sh.B)
				if err != nil {
					t.Fatal(err)
				}
				s := st.(*State)
				for l := range start {
					if err := s.SetSSMState(l, start[l]); err != nil {
						t.Fatal(err)
					}
					if err := s.SetConvState(l, window[l]); err != nil {
						t.Fatal(err)
					}
				}
				out := make([]float32, sh.B*sh.T*cfg.Hidden)
				for i := range out {
					out[i] = float32(math.NaN())
				}
				if err := e.Prefill(s, engine.Input{B: sh.B, T: sh.T, IDs: ids}, engine.All, out); err != nil {
					t.Fatal(err)
				}
				return out, s
			}
			got, gs := run(true)
			want, ws := run(false)
			check := func(what string, got, want []float32) {
				t.Helper()
				var diff, norm float64
				for i := range want {
					if math.IsNaN(float64(got[i])) {
						t.Fatalf("%s[%d] is NaN", what, i)
					}
					diff = max(diff, math.Abs(float64(got[i])-float64(want[i])))
					norm = max(norm, math.Abs(float64(want[i])))
				}
				if diff > 1e-5*norm {
					t.Errorf("%s: max difference %.3g against max |value| %.3g", what, diff, norm)
				}
			}
			check("hidden states", got, want)
			for l := range cfg.Layers {
				check(fmt.Sprintf("layer %d SSM state", l), gs.ssm[l], ws.ssm[l])
				check(fmt.Sprintf("layer %d conv window", l), gs.conv[l], ws.conv[l])
			}
		})
	}
}

// BenchmarkLanes times 130m-shaped prefills (B=1, T=512) and decode steps
// (B=1 and 8) with the conv and the scan one channel at a time, in lanes
// of eight, and (with AVX-512) the scan in lanes of sixteen, the three
// taking turns; $MAMBAGO_TEST_BLAS names the CBLAS library for the GEMMs
// (gonum's otherwise).
func BenchmarkLanes(b *testing.B) {
	if !hasAVX2 {
		b.Skip("this CPU has no AVX2/FMA")
	}
	defer func() { useLanes, useWideLanes = hasAVX2, hasAVX512 }()
	e := New(fixture.RandomWeights(fixture.Shape(768, 24, 50280), 1))
	e.BLAS = blastest.Maybe(b)
	for _, c := range []struct {
		name string
		B, T int // T = 0: one step
	}{{"prefill_B1_T512", 1, 512}, {"step_B1", 1, 0}, {"step_B8", 8, 0}} {
		for _, width := range []int{1, laneWidth, wideLanes} {
			if width == wideLanes && !hasAVX512 {
				continue
			}
			b.Run(fmt.Sprintf("%s/lanes=%d", c.name, width), func(b *testing.B) {
				useLanes, useWideLanes = width > 1, width == wideLanes
				st, err := e.NewState(c.B)
				if err != nil {
					b.Fatal(err)
				}
				ids := make([]int64, c.B*max(c.T, 1))
				for i := range ids {
					ids[i] = rand.Int64N(50280)
				}
				out := make([]float32, c.B*50280)
				e.Timer = &StageTimer{}
				for b.Loop() {
					if c.T == 0 {
						err = e.Step(st, ids, out)
					} else {
						err = e.Prefill(st, engine.Input{B: c.B, T: c.T, IDs: ids}, engine.Last, out[:c.B*768])
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				if c.T > 0 {
					b.ReportMetric(e.Timer.d["scan"].Seconds()*1e3/float64(b.N), "scan_ms/op")
					b.ReportMetric(float64(c.B*c.T*b.N)/b.Elapsed().Seconds(), "tok/s")
				}
			})
		}
	}
}

// sameBits reports whether a and b hold the same float32 bit patterns.
func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// BenchmarkGemmRows times gemmRows on 1, 2, 4 and 8 rows (8 on each kernel
// where the CPU has AVX-512F) against forty weight
// matrices of the 130m in_proj's shape [3072, 768] in each Storage (W
// streams from memory, as in a decode step); GB/s counts W's bytes
// (BenchmarkSgemmRows in mambago/blas times OpenBLAS on the same).
func BenchmarkGemmRows(b *testing.B) {
	if !hasAVX2 {
		b.Skip("this CPU has no AVX2/FMA/F16C")
	}
	const n, k, count = 3072, 768, 40
	for _, st := range []Storage{Float32, BFloat16, Float16} {
		ws := make([]matrix, count)
		for i := range ws {
			ws[i] = newMatrix(randVec(n*k), n, k, st)
		}
		bytes := 4
		if st != Float32 {
			bytes = 2
		}
		for _, m := range []int{1, 2, 4, 8} {
			for _, wide := range []bool{false, true} {
				if wide && (m != 1 && m != rowsMax || !hasAVX512) {
					continue
				}
				b.Run(fmt.Sprintf("%v/m=%d/avx512=%v", st, m, wide), func(b *testing.B) {
					defer func() { useWideRows = hasAVX512 }()
					useWideRows = wide
					a, c := make([]float32, m*k), make([]float32, m*n)
					for b.Loop() {
						for _, w := range ws {
							gemmRows(c, n, a, k, w, m, n, k, 0)
						}
					}
					b.ReportMetric(float64(count*n*k*bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
				})
			}
		}
	}
}

// BenchmarkSmallGemms times Engine.gemm on a decode step's small matrices
// (130m's x_proj [80, 1536] and dt_proj [1536, 48], and smaller ones that
// stay serial, serialGemm) against one and four rows of A, forty matrices
// of each in float32 and bfloat16: µs a GEMM.
func BenchmarkSmallGemms(b *testing.B) {
	const count = 40
	for _, st := range []Storage{Float32, BFloat16} {
		for _, sh := range [][2]int{{80, 1536}, {1536, 48}, {48, 768}, {768, 24}} {
			n, k := sh[0], sh[1]
			ws := make([]matrix, count)
			for i := range ws {
				ws[i] = newMatrix(randVec(n*k), n, k, st)
			}
			for _, m := range []int{1, 4} {
				b.Run(fmt.Sprintf("%v/%dx%d/m=%d", st, n, k, m), func(b *testing.B) {
					e := &Engine{}
					a, c := randVec(m*k), make([]float32, m*n)
					for b.Loop() {
						for _, w := range ws {
							e.gemm(c, n, a, k, w, m, n, k, 0)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*count)/1e3, "µs/gemm")
				})
			}
		}
	}
}

// BenchmarkChunkedRows times Engine.gemm on 9 to 48 rows (a decode step of
// that many sequences, or a prompt that short) against forty weight
// matrices of the 130m in_proj's shape [3072, 768], as chunks of gemmRows
// and in the SGEMM (the engine's own, or MAMBAGO_TEST_BLAS's library's)
// taking turns, whatever the workers: ms for the forty, where
// chunkedRowsMax and chunkedWorkersMax say which is faster.
func BenchmarkChunkedRows(b *testing.B) {
	if !hasAVX2 {
		b.Skip("this CPU has no AVX2/FMA/F16C")
	}
	defer func(rows, workers int) { chunkedRowsMax, chunkedWorkersMax = rows, workers }(chunkedRowsMax, chunkedWorkersMax)
	const n, k, count = 3072, 768, 40
	for _, st := range []Storage{Float32, BFloat16} {
		ws := make([]matrix, count)
		for i := range ws {
			ws[i] = newMatrix(randVec(n*k), n, k, st)
		}
		e := &Engine{BLAS: blastest.Maybe(b)}
		for _, m := range []int{9, 16, 24, 32, 48} {
			for _, chunked := range []bool{true, false} {
				b.Run(fmt.Sprintf("%v/m=%d/chunked=%v", st, m, chunked), func(b *testing.B) {
					chunkedRowsMax, chunkedWorkersMax = 0, 0
					if chunked {
						chunkedRowsMax, chunkedWorkersMax = m, runtime.GOMAXPROCS(0)
					}
					a, c := randVec(m*k), make([]float32, m*n)
					for b.Loop() {
						for _, w := range ws {
							e.gemm(c, n, a, k, w, m, n, k, 0)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/40")
				})
			}
		}
	}
}

// TestWidenAllValues widens every 16-bit pattern of bfloat16 and float16
// with widenAVX2 (through widenInto, lengths past a multiple of 8 included)
// and checks each against the scalar widen, NaNs as NaNs.
func TestWidenAllValues(t *testing.T) {
	for _, st := range []Storage{BFloat16, Float16} {
		for _, lanes := range []bool{true, false} {
			func() {
				defer SetLanes(lanes)()
				src := make([]uint16, 1<<16+5)
				for i := range src {
					src[i] = uint16(i)
				}
				dst := make([]float32, len(src))
				widenInto(dst, src, st)
				for i, b := range src {
					want := widen(b, st)
					if got := dst[i]; math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
						t.Fatalf("%v lanes=%v: %#04x widened to %v (%#08x), want %v (%#08x)", st, lanes, b, got,
							math.Float32bits(got), want, math.Float32bits(want))
					}
				}
			}()
		}
	}
	if got := widen(0x3f80, BFloat16); got != 1 {
		t.Fatalf("bfloat16 0x3f80 is %v, want 1", got)
	}
	if got := widen(0x3c00, Float16); got != 1 {
		t.Fatalf("float16 0x3c00 is %v, want 1", got)
	}
}

// TestStoredEngineDropsFloat32 checks that an engine keeping 16-bit
// matrices holds no reference to the float32 ones it was given, so their
// memory goes once the caller drops them, and that float32 storage keeps
// them without a copy.
func TestStoredEngineDropsFloat32(t *testing.T) {
	cfg := checkpoint.Config{ModelType: "mamba", Hidden: 16, Layers: 2, Inner: 32, State: 4, ConvKernel: 4,
		DTRank: 2, Vocab: 11, Eps: 1e-5, TieEmbeddings: true, EOSTokenID: -1, PadTokenID: -1}
	w := &checkpoint.Weights{Config: cfg, Embeddings: randVec(11 * 16), NormF: randVec(16)}
	w.LMHead = w.Embeddings
	for range cfg.Layers {
		w.Layers = append(w.Layers, checkpoint.Layer{Norm: randVec(16), InProj: randVec(64 * 16), Conv: randVec(32 * 4),
			XProj: randVec(10 * 32), DTProj: randVec(32 * 2), DTBias: randVec(32), A: randVec(32 * 4), D: randVec(32),
			OutProj: randVec(16 * 32)})
	}
	e := NewStored(w, BFloat16)
	if e.w.Embeddings != nil || e.w.LMHead != nil || e.emb.f32 != nil || e.head.f32 != nil {
		t.Fatal("a bf16 engine keeps the float32 embeddings")
	}
	for l, lw := range e.w.Layers {
		m := e.mats[l]
		if lw.InProj != nil || lw.XProj != nil || lw.DTProj != nil || lw.OutProj != nil ||
			m.inProj.f32 != nil || m.xProj.f32 != nil || m.dtProj.f32 != nil || m.outProj.f32 != nil {
			t.Fatalf("a bf16 engine keeps layer %d's float32 matrices", l)
		}
	}
	if w.Layers[0].InProj == nil || w.Embeddings == nil {
		t.Fatal("NewStored changed the caller's weights")
	}
	f := New(w)
	if &f.mats[1].outProj.f32[0] != &w.Layers[1].OutProj[0] || &f.head.f32[0] != &w.Embeddings[0] {
		t.Fatal("a float32 engine copied its matrices")
	}
}

// TestLaneBlocksArePermutations checks that laneBlock places every value of
// a table of E channels × n values at its own index, in blocks of sixteen
// (with and without a block of eight and single channels past them) and of
// eight, and that a State's SSM state and conv windows read back as they
// were set, [B, E, N] and [B, E, K].
func TestLaneBlocksArePermutations(t *testing.T) {
	for _, E := range []int{2, 6, 8, 12, 16, 24, 28, 32, 40, 100, 104, 120, 1536} {
		for _, n := range []int{1, 3, 16} {
			for _, width := range []int{wideLanes, laneWidth} {
				seen := make([]bool, E*n)
				for ch := range E {
					at, step := laneBlock(ch, E, n, width)
					for i := range n {
						if j := at + i*step; j < 0 || j >= E*n || seen[j] {
							t.Fatalf("E=%d n=%d width %d: channel %d value %d lands at %d, outside or taken", E, n, width, ch, i, j)
						} else {
							seen[j] = true
						}
					}
				}
			}
		}
	}
	for _, d := range []int{3, 6, 50, 52, 60} { // E = 6, 12, 100, 104, 120
		cfg := fixture.Shape(d, 2, 50)
		e := New(fixture.RandomWeights(cfg, rand.Uint64()))
		st, err := e.NewState(3)
		if err != nil {
			t.Fatal(err)
		}
		v := randVec(3 * cfg.Inner * cfg.State)
		if err := st.SetSSMState(1, v); err != nil {
			t.Fatal(err)
		}
		got, err := st.SSMState(1)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, v) {
			t.Fatalf("d=%d: the SSM state read back differs from the one set", d)
		}
		v = randVec(3 * cfg.Inner * cfg.ConvKernel)
		if err := st.SetConvState(0, v); err != nil {
			t.Fatal(err)
		}
		if got, err = st.ConvState(0); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, v) {
			t.Fatalf("d=%d: the conv windows read back differ from those set", d)
		}
	}
}
