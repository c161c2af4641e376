package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/mambago/mambago/internal/blastest"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestLaneScanLayout pins the field offsets of laneScan, laneConv and
// rowsGemm, which lanes_amd64.s uses as numbers.
func TestLaneScanLayout(t *testing.T) {
	for _, c := range []struct {
		v    any
		want []uintptr // the offsets lanes_amd64.s #defines, in field order
	}{
		{laneScan{}, []uintptr{0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 136}},
		{laneConv{}, []uintptr{0, 8, 16, 24, 32, 40, 48, 56, 64, 72}},
		{rowsGemm{}, []uintptr{0, 8, 16, 24, 32, 40}},
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

// TestGemmRows checks gemmRows against float64 on fresh random operands:
// 1 to 8 rows, K with and without columns past a multiple of 8 (and under
// 8), padded row strides, beta 0 and 1.
func TestGemmRows(t *testing.T) {
	if !hasAVX2 {
		t.Skip("this CPU has no AVX2/FMA")
	}
	rng := rand.New(rand.NewPCG(rand.Uint64(), 11))
	for _, K := range []int{3, 8, 29, 768} {
		for M := 1; M <= rowsMax; M++ {
			for _, beta := range []float32{0, 1} {
				N, lda, ldc := 37+rng.IntN(300), K+rng.IntN(3), 0
				ldc = N + rng.IntN(3)
				a, w, c := randVec(M*lda), randVec(N*K), randVec(M*ldc)
				want := make([]float64, len(c))
				for i := range c {
					want[i] = float64(c[i])
				}
				for m := range M {
					for n := range N {
						var s float64
						for k := range K {
							s += float64(a[m*lda+k]) * float64(w[n*K+k])
						}
						want[m*ldc+n] = s + float64(beta)*float64(c[m*ldc+n])
					}
				}
				gemmRows(c, ldc, a, lda, w, M, N, K, beta)
				for i := range c {
					if math.Abs(float64(c[i])-want[i]) > 1e-5*(math.Sqrt(float64(K))+math.Abs(want[i])) {
						t.Fatalf("K=%d M=%d beta=%v: c[%d] = %v, want %v", K, M, beta, i, c[i], want[i])
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
// (B=1 and 8) with the conv and the scan in lanes and one channel at a time,
// the two taking turns; $MAMBAGO_TEST_BLAS names the CBLAS library for the
// GEMMs (gonum's otherwise).
func BenchmarkLanes(b *testing.B) {
	if !hasAVX2 {
		b.Skip("this CPU has no AVX2/FMA")
	}
	defer func() { useLanes = hasAVX2 }()
	e := New(fixture.RandomWeights(fixture.Shape(768, 24, 50280), 1))
	e.BLAS = blastest.Maybe(b)
	for _, c := range []struct {
		name string
		B, T int // T = 0: one step
	}{{"prefill_B1_T512", 1, 512}, {"step_B1", 1, 0}, {"step_B8", 8, 0}} {
		for _, lanes := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/lanes=%v", c.name, lanes), func(b *testing.B) {
				useLanes = lanes
				st, err := e.NewState(c.B)
				if err != nil {
					b.Fatal(err)
				}
				ids := make([]int64, c.B*max(c.T, 1))
				for i := range ids {
					ids[i] = rand.Int64N(50280)
				}
				out := make([]float32, c.B*50280)
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
			})
		}
	}
}

// BenchmarkGemmRows times gemmRows on 1, 2 and 8 rows against forty weight
// matrices of the 130m in_proj's shape [3072, 768] (W streams from memory,
// as in a decode step); GB/s counts W's bytes (BenchmarkSgemmRows in
// mambago/blas times OpenBLAS on the same).
func BenchmarkGemmRows(b *testing.B) {
	if !hasAVX2 {
		b.Skip("this CPU has no AVX2/FMA")
	}
	const n, k, count = 3072, 768, 40
	ws := make([][]float32, count)
	for i := range ws {
		ws[i] = make([]float32, n*k)
		for j := range ws[i] {
			ws[i][j] = rand.Float32()
		}
	}
	for _, m := range []int{1, 2, 8} {
		b.Run(fmt.Sprintf("m=%d", m), func(b *testing.B) {
			a, c := make([]float32, m*k), make([]float32, m*n)
			for b.Loop() {
				for _, w := range ws {
					gemmRows(c, n, a, k, w, m, n, k, 0)
				}
			}
			b.ReportMetric(float64(count*n*k*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}
