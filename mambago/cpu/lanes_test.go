package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/mambago/mambago/mambago/blas"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestLaneScanLayout pins laneScan's field offsets, which lanes_amd64.s
// uses as numbers.
func TestLaneScanLayout(t *testing.T) {
	want := [...]uintptr{0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 136}
	if laneScanOffsets != want {
		t.Fatalf("laneScan's offsets are %v; lanes_amd64.s reads %v", laneScanOffsets, want)
	}
	if want := [...]uintptr{0, 8, 16, 24, 32, 40, 48, 56, 64, 72}; laneConvOffsets != want {
		t.Fatalf("laneConv's offsets are %v; lanes_amd64.s reads %v", laneConvOffsets, want)
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
			random := func(n int) []float32 {
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(rng.NormFloat64())
				}
				return v
			}
			start, window := make([][]float32, cfg.Layers), make([][]float32, cfg.Layers)
			for l := range start {
				start[l], window[l] = random(sh.B*cfg.Inner*sh.N), random(sh.B*cfg.Inner*sh.K)
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
	if path := os.Getenv("MAMBAGO_TEST_BLAS"); path != "" {
		lib, err := blas.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		e.BLAS = lib
	}
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
