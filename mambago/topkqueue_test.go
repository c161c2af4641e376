package mambago

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestQueueTopKMatchesHost checks the CUDA decoder's queued draw from the k
// best (QueueTopK, topk_draw_f32) against the host's sampler on the same
// logits and the same uniform: the same token, row by row, for k from 1 to
// TopKQueueMax (ranked in one block, the candidates sorted by a bitonic
// sort of k rounded up to a power of two), temperatures that leave most of
// the weight on one token or spread it, and nuclei from one token to all
// k. The logits come from a twin state stepped by Engine.Step, which gives
// the decoder's bits; each step's uniforms are drawn fresh. The steps are
// queued one at a time and two deep (the second fed the first's picks).
func TestQueueTopKMatchesHost(t *testing.T) {
	gputest.Need(t)
	const B, V = 4, 3000
	for _, dtype := range []string{"float32", "bfloat16"} {
		m, err := OpenWeights(fixture.RandomWeights(fixture.Shape(64, 2, V), 3), Options{Device: "cuda", DType: dtype})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		st, err := m.NewState(B)
		if err != nil {
			t.Fatal(err)
		}
		twin, err := m.NewState(B)
		if err != nil {
			t.Fatal(err)
		}
		dec, err := m.Engine.(*gpu.Engine).NewDecoder(st, 64)
		if err != nil {
			t.Fatal(err)
		}
		defer dec.Close()
		q := dec.(engine.TopKQueueDecoder)
		if q.TopKQueueMax() != 1024 {
			t.Fatalf("TopKQueueMax = %d, want kernels/topk.cu's TOPK_DRAW_MAX, 1024", q.TopKQueueMax())
		}
		logits, picks := make([]float32, B*V), make([]int64, B)
		fed := make([]int64, B)
		for i := range fed {
			fed[i] = rand.Int64N(V)
		}
		draws := 0
		for _, c := range []struct {
			k       int
			temp, p float64
			minP    float64
		}{
			{1, 1, 1, 0}, {2, 0.7, 1, 0}, {50, 0.8, 1, 0}, {50, 1.3, 0.9, 0}, {50, 0.05, 0.5, 0}, {37, 4, 0.2, 0},
			{128, 1, 0.95, 0}, {513, 2, 0.8, 0}, {1000, 1, 1, 0}, {1024, 3, 0.99, 0}, {1024, 0.3, 0.6, 0},
			{50, 1, 1, 0.05}, {50, 2, 0.9, 0.2}, {300, 1.5, 1, 0.01}, {1024, 4, 0.99, 0.5}, {20, 0.7, 1, 1},
		} {
			// Two steps queued: the first fed ids, the second the first's picks.
			ms := [2][B]uint64{}
			for step := range 2 {
				uniforms := make([]float64, B)
				for b := range B {
					ms[step][b] = rand.Uint64N(1 << 53)
					uniforms[b] = float64(ms[step][b]) / (1 << 53)
				}
				var ids []int64
				if step == 0 {
					ids = fed
				}
				if err := q.QueueTopK(ids, c.k, c.temp, c.p, c.minP, uniforms); err != nil {
					t.Fatal(err)
				}
			}
			for step := range 2 {
				if err := q.Picks(picks); err != nil {
					t.Fatal(err)
				}
				if err := m.Step(twin, fed, logits); err != nil {
					t.Fatal(err)
				}
				for b := range B {
					s := Sampling{Temperature: c.temp, TopK: c.k, TopP: c.p, MinP: c.minP, EOS: -1}
					if want := DrawTopK(logits[b*V:(b+1)*V], s, float64(ms[step][b])/(1<<53)); picks[b] != want {
						t.Errorf("%s, k=%d T=%v p=%v min_p=%v, step %d, row %d, u=%v: device drew %d, host %d", dtype, c.k,
							c.temp, c.p, c.minP, step, b, float64(ms[step][b])/(1<<53), picks[b], want)
					}
					draws++
				}
				copy(fed, picks)
			}
		}
		t.Logf("%s: %d draws, the host's tokens", dtype, draws)
		// Bad arguments are input errors, and a k past TopKQueueMax is refused.
		u := make([]float64, B)
		for _, bad := range []struct {
			k             int
			temp, p, minP float64
			u             []float64
		}{{0, 1, 1, 0, u}, {1025, 1, 1, 0, u}, {5, 0, 1, 0, u}, {5, 1, 0, 0, u}, {5, 1, 1, 0, u[:2]},
			{5, 1, 1, 0, []float64{0, 0, 1, 0}}, {5, 1, 1, -0.1, u}, {5, 1, 1, 1.5, u}, {5, 1, 1, math.NaN(), u}} {
			if err := q.QueueTopK(fed, bad.k, bad.temp, bad.p, bad.minP, bad.u); !engine.IsInvalid(err) {
				t.Errorf("%s: QueueTopK(k=%d, T=%v, p=%v, %d uniforms) = %v, want an input error", dtype, bad.k, bad.temp,
					bad.p, len(bad.u), err)
			}
		}
	}
}
