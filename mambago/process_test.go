package mambago_test

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/mambago/mambago/mambago"
	"github.com/mambago/mambago/mambago/engine"
)

// contains reports whether seq occurs in row.
func contains(row, seq []int64) bool {
	for i := 0; i+len(seq) <= len(row); i++ {
		if slices.Equal(row[i:i+len(seq)], seq) {
			return true
		}
	}
	return false
}

// TestProcessorsShapeTheTokens generates greedily, sampled and by beam
// search under each processor, on each engine, and checks what it must
// do to the tokens: a banned sequence never completes after the prompt (one
// that greedy decoding completes is chosen), suppressed ids never come and
// begin-suppressed ones not first, the last token is a forced eos id, a
// large bias on a sequence makes its last token follow its first, and a
// deadline already past ends the call after one token.
func TestProcessorsShapeTheTokens(t *testing.T) {
	onEachEngine(t, func(t *testing.T, m *mambago.Model) {
		const B, T, n = 3, 5, 10
		ids := randomIDs(m, B*T)
		row := func(ids []int64, b int, got []int64, n int) []int64 {
			return append(slices.Clone(ids[b*T:(b+1)*T]), got[b*n:(b+1)*n]...)
		}
		free, _, err := m.Generate(ids, B, T, n, mambago.Sampling{TopP: 1, EOS: -1})
		if err != nil {
			t.Fatal(err)
		}
		pair := free[3:5] // greedy's row 0 completes this pair
		settings := map[string]mambago.Sampling{
			"greedy":  {TopP: 1, EOS: -1},
			"sampled": {Temperature: 1.5, TopK: 50, TopP: 0.95, Seed: 9, EOS: -1},
		}
		for name, s := range settings {
			generate := func(p mambago.Processors) ([]int64, int) {
				t.Helper()
				s.Processors = p
				got, k, err := m.Generate(ids, B, T, n, s)
				if err != nil {
					t.Fatalf("%s, %+v: %v", name, p, err)
				}
				return got, k
			}
			banned := [][]int64{{free[0]}, slices.Clone(pair)}
			got, k := generate(mambago.Processors{Banned: banned})
			for b := range B {
				r := row(ids, b, got, k)
				for _, seq := range banned {
					if contains(r[T-len(seq)+1:], seq) {
						t.Errorf("%s, row %d: banned %v in %v", name, b, seq, r)
					}
				}
			}
			suppress, begin := []int64{free[0], free[n]}, []int64{free[1], free[2*n]}
			got, k = generate(mambago.Processors{Suppress: suppress, BeginSuppress: begin})
			for b := range B {
				for i, id := range got[b*k : (b+1)*k] {
					if slices.Contains(suppress, id) || i == 0 && slices.Contains(begin, id) {
						t.Errorf("%s, row %d: token %d is %d, suppressed (%v, at first %v)", name, b, i, id, suppress, begin)
					}
				}
			}
			forced := []int64{7, 11}
			got, k = generate(mambago.Processors{ForcedEOS: forced})
			for b := range B {
				if k != n || !slices.Contains(forced, got[b*k+k-1]) {
					t.Errorf("%s, row %d: %d tokens, the last %d, want %d ending in one of %v", name, b, k, got[b*k+k-1], n, forced)
				}
			}
			lead, follow := ids[T-1], int64(13) // row 0's last prompt token, then 13 after it
			got, k = generate(mambago.Processors{Biases: []mambago.SequenceBias{{Tokens: []int64{lead, follow}, Bias: 1e4}}})
			r := row(ids, 0, got, k)
			for i := T - 1; i+1 < len(r); i++ {
				if r[i] == lead && r[i+1] != follow {
					t.Errorf("%s: %d follows %d at %d despite the bias toward %d: %v", name, r[i+1], lead, i, follow, r)
				}
			}
			if _, k = generate(mambago.Processors{Deadline: time.Now()}); k != 1 {
				t.Errorf("%s: %d tokens past the deadline, want 1", name, k)
			}
			// A forced bos opens a one-token prompt's continuation, not a longer one's.
			one := []int64{ids[0], ids[T]}
			s.Processors = mambago.Processors{ForcedBOS: []int64{21}}
			if got, _, err := m.Generate(one, 2, 1, 3, s); err != nil || got[0] != 21 || got[3] != 21 {
				t.Errorf("%s: one-token prompts continue %v (err %v), want 21 first", name, got, err)
			}
			if got, _ = generate(mambago.Processors{ForcedBOS: []int64{21}}); name == "greedy" && !slices.Equal(got, free) {
				t.Errorf("greedy: a forced bos changed five-token prompts' tokens: %v, free %v", got, free)
			}
			// A steep length decay makes the eos id come right after its start.
			s.EOS, s.Processors = free[5], mambago.Processors{Decay: mambago.LengthDecay{Start: 2, Factor: 1e6}}
			got, k = generate(s.Processors)
			for b := range B {
				if e := slices.Index(got[b*k:(b+1)*k], s.EOS); e < 0 || e > 3 {
					t.Errorf("%s, row %d: eos %d at %d under the decay, want by token 3: %v", name, b, s.EOS, e, got[b*k:(b+1)*k])
				}
			}
			s.EOS = -1
		}

		bm := mambago.Beams{Width: 3, Return: 2, LengthPenalty: 1, EOS: -1, Fill: -1}
		bm.Banned = [][]int64{slices.Clone(pair)}
		bm.Suppress = []int64{free[0]}
		out, err := m.BeamSearch(context.Background(), ids, B, T, nil, n, bm)
		if err != nil {
			t.Fatal(err)
		}
		for i := range B * bm.Return {
			r := append(slices.Clone(ids[(i/bm.Return)*T:(i/bm.Return+1)*T]), out.Tokens[i*out.N:(i+1)*out.N]...)
			if contains(r[T-1:], pair) || slices.Contains(r[T:], free[0]) {
				t.Errorf("beam %d: %v holds banned %v or suppressed %d", i, r, pair, free[0])
			}
		}
		bm.Deadline = time.Now()
		if out, err = m.BeamSearch(context.Background(), ids, B, T, nil, n, bm); err != nil || out.Steps != 1 || out.N != 1 {
			t.Errorf("beam search past its deadline: %d steps, %d tokens, err %v; want 1, 1", out.Steps, out.N, err)
		}
	})
}

// TestProcessorsRefuseBadSettings: each out-of-range setting is an input
// error, from Generate and BeamSearch alike.
func TestProcessorsRefuseBadSettings(t *testing.T) {
	m := openBase(t)
	V := int64(m.Config().Vocab)
	ids := randomIDs(m, 4)
	for name, p := range map[string]mambago.Processors{
		"empty banned":      {Banned: [][]int64{{}}},
		"negative banned":   {Banned: [][]int64{{3, -1}}},
		"banned past vocab": {Banned: [][]int64{{V}}},
		"NaN bias":          {Biases: []mambago.SequenceBias{{Tokens: []int64{1}, Bias: float32(math.NaN())}}},
		"infinite bias":     {Biases: []mambago.SequenceBias{{Tokens: []int64{1, 2}, Bias: float32(math.Inf(-1))}}},
		"empty bias":        {Biases: []mambago.SequenceBias{{Bias: 1}}},
		"suppress past":     {Suppress: []int64{V + 3}},
		"begin negative":    {BeginSuppress: []int64{-2}},
		"forced past":       {ForcedEOS: []int64{V}},
		"forced suppressed": {ForcedEOS: []int64{4, 9}, Suppress: []int64{9, 2, 4}},
		"forced suppressed at the first and last": {ForcedEOS: []int64{4}, BeginSuppress: []int64{4}},
	} {
		n := 3
		if p.BeginSuppress != nil {
			n = 1
		}
		if _, _, err := m.Generate(ids, 1, 4, n, mambago.Sampling{TopP: 1, EOS: -1, Processors: p}); !engine.IsInvalid(err) {
			t.Errorf("%s: Generate's err = %v, want an input error", name, err)
		}
		bm := mambago.Beams{Width: 2, Return: 1, EOS: -1, Fill: -1, Processors: p}
		if _, err := m.BeamSearch(context.Background(), ids, 1, 4, nil, n, bm); !engine.IsInvalid(err) {
			t.Errorf("%s: BeamSearch's err = %v, want an input error", name, err)
		}
	}
}
