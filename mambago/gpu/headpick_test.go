package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestHeadPicksMatch checks Engine.HeadPicks: a decoder's greedy steps with
// the picks taken in the LM head (lm_head_wg_bf16) give the ids of the same
// steps with argmax_rows_f32 over the logits, and both the host's argmax of
// a third twin's logits (Decoder.Logits), for 24 steps from a random
// prompt, eager and through a step graph, at B = 1, 3 and 8, queued one
// ahead as Generate queues them. In bf16 on sm_90 the head must pick (the
// path under test runs); in f32 it never does.
func TestHeadPicksMatch(t *testing.T) {
	gputest.Need(t)
	w := fixtureWeights(t, "base")
	V, T, steps := w.Config.Vocab, 5, 24
	sm90 := gputest.Device(t).Major == 9
	for _, dt := range []cuda.DType{cuda.BF16, cuda.F32} {
		e := newEngine(t, w, dt)
		for _, B := range []int{1, 3, 8} {
			for _, graphSteps := range []int{0, steps} {
				prompt := make([]int64, B*T)
				for i := range prompt {
					prompt[i] = rand.Int64N(int64(V))
				}
				decoders := make([]*gpu.Decoder, 3) // head picks, argmax_rows_f32, logits to the host
				for i := range decoders {
					st, err := e.NewState(B)
					if err != nil {
						t.Fatal(err)
					}
					defer st.(*gpu.State).Free()
					if err := e.Prefill(st, engine.Input{B: B, T: T, IDs: prompt}, engine.Last, make([]float32, B*w.Config.Hidden)); err != nil {
						t.Fatal(err)
					}
					e.DecoderGraphSteps, e.HeadPicks = graphSteps, i != 1
					d, err := e.NewDecoder(st, steps)
					if err != nil {
						t.Fatal(err)
					}
					defer d.Close()
					decoders[i] = d.(*gpu.Decoder)
					if i < 2 { // (an eager decoder asks Engine.HeadPicks at each step)
						if want := i == 0 && dt == cuda.BF16 && sm90; gpu.HeadPicked(decoders[i]) != want {
							t.Fatalf("%v B=%d graph steps %d: decoder %d's LM head picks: %v, want %v", dt, B, graphSteps, i,
								!want, want)
						}
					}
				}
				name := fmt.Sprintf("%v B=%d graph steps %d", dt, B, graphSteps)
				ids := make([]int64, B)
				for b := range B {
					ids[b] = prompt[b*T+T-1]
				}
				picks := [][]int64{make([]int64, B), make([]int64, B)}
				for i := range 2 { // the first step fed ids, then one queued ahead
					e.HeadPicks = i == 0 // an eager decoder reads it at each step
					if err := decoders[i].QueueGreedy(ids); err != nil {
						t.Fatal(err)
					}
				}
				for step := range steps {
					for i := range 2 {
						e.HeadPicks = i == 0
						if step+1 < steps {
							if err := decoders[i].QueueGreedy(nil); err != nil {
								t.Fatal(err)
							}
						}
						if err := decoders[i].Picks(picks[i]); err != nil {
							t.Fatal(err)
						}
					}
					logits, err := decoders[2].Logits(ids)
					if err != nil {
						t.Fatal(err)
					}
					want := make([]int64, B)
					for b := range B {
						want[b] = fixture.Argmax(logits[b*V : (b+1)*V])
					}
					if !slices.Equal(picks[0], want) || !slices.Equal(picks[1], want) {
						t.Fatalf("%s step %d: head picks %v, argmax_rows_f32 %v, the host's argmax %v", name, step, picks[0], picks[1], want)
					}
					copy(ids, want)
				}
			}
		}
	}
}
