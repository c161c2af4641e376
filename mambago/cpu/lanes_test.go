package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

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
}

// TestScanLanesMatchesChannelLoop runs prefills with the scan eight channels
// at a time (scanLanes) and one at a time, from the same random carried
// state, and compares every position's output and the final states. The
// shapes leave channels over for the loop (E = 2d not a multiple of 8),
// take N from 1 to 64 and T from 1, and the time-step biases reach past
// softplus' threshold of 20 and far below 0; fresh random draws each run.
func TestScanLanesMatchesChannelLoop(t *testing.T) {
	if !hasAVX2 {
		t.Skip("this CPU has no AVX2/FMA: only the channel loop runs")
	}
	defer func() { useLanes = hasAVX2 }()
	rng := rand.New(rand.NewPCG(rand.Uint64(), 7))
	for _, sh := range []struct{ d, N, B, T int }{
		{64, 16, 2, 37}, {52, 16, 1, 1}, {36, 1, 3, 9}, {20, 5, 2, 17}, {64, 64, 1, 70}, {40, 8, 2, 4},
	} {
		t.Run(fmt.Sprintf("d=%d_N=%d_B=%d_T=%d", sh.d, sh.N, sh.B, sh.T), func(t *testing.T) {
			cfg := fixture.Shape(sh.d, 2, 50)
			cfg.State = sh.N
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
			start := make([][]float32, cfg.Layers)
			for l := range start {
				start[l] = make([]float32, sh.B*cfg.Inner*sh.N)
				for i := range start[l] {
					start[l][i] = float32(rng.NormFloat64())
				}
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
