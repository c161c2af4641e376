package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cpu"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/internal/enginetest"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// oddTol bounds the relative error of each engine dtype against the CPU
// engine in TestOddShapesMatchCPU. f32 is the reference bar. The mixed
// bounds are about five times the errors measured on the H200 (bf16 5.9e-3,
// f16 8.9e-4) and catch a shape handled wrongly, which gives errors near 1;
// their precision bars are TestMixedPrecisionFixtures'.
var oddTol = map[cuda.DType]float64{cuda.F32: enginetest.RefTol, cuda.F16: 5e-3, cuda.BF16: 3e-2}

// TestOddShapesMatchCPU runs model widths that are no multiple of 8 or 16
// (hidden 36 and 100, inner 72 and 200, d_state 5 and 12, conv kernels 2
// and 3, dt rank 3 and 7, odd vocab and feature widths, biases on) through
// every dtype: the hidden state at every position and the carried states
// after a prefill, a pooled mean from raw features, a decode step's logits
// and a captured prefill's replay, each against the CPU engine on fresh
// random weights and inputs.
func TestOddShapesMatchCPU(t *testing.T) {
	gputest.Need(t)
	shapes := []struct{ d, N, K, V, F int }{{36, 5, 2, 101, 7}, {100, 12, 3, 257, 13}}
	for _, s := range shapes {
		cfg := fixture.Shape(s.d, 2, s.V)
		cfg.State, cfg.ConvKernel, cfg.UseBias, cfg.InputDim = s.N, s.K, true, s.F
		w := fixture.RandomWeights(cfg, rand.Uint64())
		ref := cpu.New(w)
		for _, dt := range []cuda.DType{cuda.F32, cuda.BF16, cuda.F16} {
			g, tol, worst := newEngine(t, w, dt), oddTol[dt], 0.0
			for _, bt := range [][2]int{{1, 1}, {3, 37}, {2, 300}} {
				B, T := bt[0], bt[1]
				name := fmt.Sprintf("d=%d N=%d K=%d %v B=%d T=%d", s.d, s.N, s.K, dt, B, T)
				worst = max(worst, checkOddShape(t, name, g, ref, cfg, B, T, tol))
			}
			t.Logf("d=%d N=%d K=%d %v: worst rel err %.3g (bound %g)", s.d, s.N, s.K, dt, worst, tol)
		}
	}
}

// checkOddShape compares engine g with ref at one (B, T) and returns the
// worst relative error; see TestOddShapesMatchCPU.
func checkOddShape(t *testing.T, name string, g *gpu.Engine, ref engine.Engine, cfg checkpoint.Config, B, T int, tol float64) float64 {
	t.Helper()
	ids := make([]int64, B*T)
	for i := range ids {
		ids[i] = rand.Int64N(int64(cfg.Vocab))
	}
	features := make([]float32, B*T*cfg.InputDim)
	for i := range features {
		features[i] = float32(rand.NormFloat64())
	}
	next := make([]int64, B)
	for i := range next {
		next[i] = rand.Int64N(int64(cfg.Vocab))
	}
	type result struct{ hidden, mean, logits, replay []float32 }
	var got [2]result
	var states [2][][]float32
	for i, e := range []engine.Engine{g, ref} {
		st, err := e.NewState(B)
		if err != nil {
			t.Fatal(err)
		}
		r := &got[i]
		r.hidden = fixture.NaNs(B * T * cfg.Hidden)
		if err := e.Prefill(st, engine.Input{B: B, T: T, IDs: ids}, engine.All, r.hidden); err != nil {
			t.Fatalf("%s: prefill: %v", name, err)
		}
		for l := range cfg.Layers {
			cs, _ := st.ConvState(l)
			ss, _ := st.SSMState(l)
			states[i] = append(states[i], cs, ss)
		}
		r.logits = fixture.NaNs(B * cfg.Vocab)
		if err := e.Step(st, next, r.logits); err != nil {
			t.Fatalf("%s: step: %v", name, err)
		}
		fresh, _ := e.NewState(B)
		r.mean = fixture.NaNs(B * cfg.Hidden)
		if err := e.Prefill(fresh, engine.Input{B: B, T: T, Features: features}, engine.Mean, r.mean); err != nil {
			t.Fatalf("%s: features: %v", name, err)
		}
	}
	// The GPU's captured prefill, replayed, against the CPU's eager one.
	st, _ := g.NewState(B)
	graph, err := g.CapturePrefill(st, "ids", T, engine.All)
	if err != nil {
		t.Fatalf("%s: capture: %v", name, err)
	}
	defer graph.Destroy()
	got[0].replay = fixture.NaNs(B * T * cfg.Hidden)
	if err := graph.Prefill(engine.Input{B: B, T: T, IDs: ids}, got[0].replay); err != nil {
		t.Fatalf("%s: replay: %v", name, err)
	}
	got[1].replay = got[1].hidden
	type pair struct {
		what      string
		gpu, want []float32
	}
	pairs := []pair{
		{"hidden", got[0].hidden, got[1].hidden}, {"step logits", got[0].logits, got[1].logits},
		{"features mean", got[0].mean, got[1].mean}, {"graph replay", got[0].replay, got[1].replay},
	}
	for k := range states[0] {
		pairs = append(pairs, pair{fmt.Sprintf("state %d", k), states[0][k], states[1][k]})
	}
	worst := 0.0
	for _, p := range pairs {
		e := fixture.RelErr(p.gpu, p.want)
		if !(e <= tol) {
			t.Errorf("%s: %s rel err %.3g, bound %g", name, p.what, e, tol)
		}
		worst = max(worst, e)
	}
	return worst
}
