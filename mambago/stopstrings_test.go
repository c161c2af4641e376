package mambago_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mambago/mambago/mambago"
	"github.com/mambago/mambago/mambago/engine"
)

// TestStopStringsMatchWhereTransformersDoes checks the stop-string match on
// the cases transformers' StopStringCriteria documents: a string that ends
// within the last token, from whichever tokens before it, ends the row; one
// the last token does not reach does not.
func TestStopStringsMatchWhereTransformersDoes(t *testing.T) {
	words := []string{"st", "op", "stop", "opera", "sto", "pper", "las", "topper", "s", "to", "pped", "at", "tion", "", "x"}
	texts := make([][]byte, len(words)+1) // the last id has no text
	for i, w := range words {
		texts[i] = []byte(w)
	}
	seq := func(ws ...string) []int64 {
		var ids []int64
		for _, w := range ws {
			if w == "?" {
				ids = append(ids, int64(len(words)))
				continue
			}
			ids = append(ids, int64(slices.Index(words, w)))
		}
		return ids
	}
	ss := mambago.StopStrings{Strings: []string{"stop"}, Texts: texts}
	for _, c := range []struct {
		tokens []string
		want   bool
	}{
		{[]string{"st", "op"}, true},
		{[]string{"stop"}, true},
		{[]string{"st", "opera"}, true},
		{[]string{"sto", "pper"}, true},
		{[]string{"las", "topper"}, true},
		{[]string{"s", "to", "pped"}, true},
		{[]string{"x", "s", "", "to", "pped"}, true}, // an empty text in between
		{[]string{"stop", "at"}, false},
		{[]string{"st", "op", "at"}, false},
		{[]string{"st", "opera", "tion"}, false},
		{[]string{"st", "?", "op"}, false},     // no string runs through a token without text
		{[]string{"?", "st", "op"}, true},      // one before it is no matter
		{[]string{"stop", ""}, false},          // an empty last token ends nothing
		{[]string{"x", "s", "t", "op"}, false}, // "t" is not a word here: -1, no text
	} {
		if got := mambago.StopHits(ss, seq(c.tokens...)); got != c.want {
			t.Errorf("%q: hit %v, want %v", c.tokens, got, c.want)
		}
	}
	// The look-back is the longest string's length in tokens: four here,
	// so "s", "", "", "to", "pped" is one too many.
	if !mambago.StopHits(ss, seq("s", "", "to", "pped")) || mambago.StopHits(ss, seq("s", "", "", "to", "pped")) {
		t.Errorf(`"s" ("", "") "to" "pped": want a hit within the look-back of 4 tokens and none past it`)
	}
}

// stopAt returns the first new token (of those after the prompt's T) at
// which row r's text holds one of ss's strings ending within that token,
// or -1: a plain search of the row's text, as a reference.
func stopAt(ss mambago.StopStrings, r []int64, T int) int {
	for i := T; i < len(r); i++ {
		var before, last []byte
		for _, id := range r[max(0, i+1-longest(ss)):i] {
			before = append(before, ss.Texts[id]...)
		}
		last = ss.Texts[r[i]]
		text := string(before) + string(last)
		for _, s := range ss.Strings {
			for end := len(before) + 1; end <= len(text); end++ {
				if strings.HasSuffix(text[:end], s) {
					return i - T
				}
			}
		}
	}
	return -1
}

// longest returns the longest of ss's strings' lengths.
func longest(ss mambago.StopStrings) int {
	n := 0
	for _, s := range ss.Strings {
		n = max(n, len(s))
	}
	return n
}

// TestStopStrings generates greedily, sampled and by beam search under stop
// strings taken from a free run's text, on each engine: each row is the
// free run's up to the token that completes a string (a plain search of
// its text says where), then EOS; without EOS every row goes on until all
// have ended; each finished beam ends where a string is completed.
func TestStopStrings(t *testing.T) {
	onEachEngine(t, func(t *testing.T, m *mambago.Model) {
		const B, T, n = 3, 4, 12
		V := m.Config().Vocab
		rng := rand.New(rand.NewPCG(rand.Uint64(), 5))
		texts := make([][]byte, V)
		for i := range texts {
			texts[i] = make([]byte, rng.IntN(4))
			for j := range texts[i] {
				texts[i][j] = "abc"[rng.IntN(3)]
			}
		}
		ids := randomIDs(m, B*T)
		row := func(got []int64, b, k int) []int64 {
			return append(slices.Clone(ids[b*T:(b+1)*T]), got[b*k:(b+1)*k]...)
		}
		for name, s := range map[string]mambago.Sampling{
			"greedy":  {TopP: 1, EOS: -1},
			"sampled": {Temperature: 1.2, TopK: 40, TopP: 0.95, Seed: rng.Uint64(), EOS: -1},
		} {
			free, k, err := m.Generate(ids, B, T, n, s)
			if err != nil || k != n {
				t.Fatalf("%s: free run: %d tokens, %v", name, k, err)
			}
			// Row 0's text from its 3rd new token to its 5th (or on, to
			// the first token with text).
			var str []byte
			j := 2
			for ; j < 5 || len(str) == 0 && j < n; j++ {
				str = append(str, texts[free[j]]...)
			}
			s.Stop = mambago.StopStrings{Strings: []string{string(str), "cab"}, Texts: texts}
			ends := make([]int, B)
			for b := range B {
				ends[b] = stopAt(s.Stop, row(free, b, n), T)
			}
			if ends[0] < 0 || ends[0] >= j {
				t.Fatalf("%s: the reference puts row 0's stop at %d, want before %d (%q)", name, ends[0], j, str)
			}
			// With EOS: each row stops at its string, then EOS, or the
			// fill where one is set (not after an eos id).
			s.EOS = free[n+1] // row 1's second token
			for _, fill := range []*int64{nil, new(int64(V - 2))} {
				s.Stop.Fill = fill
				got, k, err := m.Generate(ids, B, T, n, s)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for b := range B {
					want, pad := slices.Clone(free[b*n:(b+1)*n]), s.EOS
					if e := slices.Index(want, s.EOS); e >= 0 && (ends[b] < 0 || e <= ends[b]) {
						want = want[:e+1] // the free run's own eos comes first
					} else if ends[b] >= 0 {
						want = want[:ends[b]+1]
						if fill != nil {
							pad = *fill
						}
					}
					for len(want) < k {
						want = append(want, pad)
					}
					if r := got[b*k : (b+1)*k]; !slices.Equal(r, want[:k]) {
						t.Errorf("%s, fill %v, row %d: %v, want %v (stop at %d; %q)", name, fill, b, r, want, ends[b], s.Stop.Strings)
					}
				}
			}
			s.Stop.Fill = nil
			// Without EOS: the free run's tokens, until every row has ended.
			s.EOS = -1
			got, k, err := m.Generate(ids, B, T, n, s)
			last := slices.Max(ends)
			if slices.Min(ends) < 0 {
				last = n - 1
			}
			if err != nil || k != last+1 || !slices.Equal(got, firstColumns(free, B, n, k)) {
				t.Errorf("%s without eos: %d tokens %v (err %v), want %d of %v", name, k, got, err, last+1, free)
			}
		}

		bm := mambago.Beams{Width: 3, Return: 3, LengthPenalty: 1, EOS: -1, Fill: -1}
		bm.Stop = mambago.StopStrings{Strings: []string{"ab", "ca"}, Texts: texts}
		out, err := m.BeamSearch(context.Background(), ids, B, T, nil, n, bm)
		if err != nil {
			t.Fatal(err)
		}
		for i := range B * bm.Return {
			r := append(slices.Clone(ids[(i/bm.Return)*T:(i/bm.Return+1)*T]), out.Tokens[i*out.N:(i+1)*out.N]...)
			if e := slices.Index(r, -1); e >= 0 {
				r = r[:e]
			}
			// A finished beam ends at its first string, or at the last step.
			if at := stopAt(bm.Stop, r, T); at != len(r)-T-1 && !(at < 0 && len(r)-T == out.Steps) {
				t.Errorf("beam %d: %v ends after %d new tokens; its first stop string ends at %d", i, r, len(r)-T, at)
			}
		}
	})
}

// firstColumns returns the first k of each row's n tokens [B, n].
func firstColumns(tokens []int64, B, n, k int) []int64 {
	var out []int64
	for b := range B {
		out = append(out, tokens[b*n:b*n+k]...)
	}
	return out
}

// TestStopStringsRefused: an empty stop string, or stop strings without
// the tokens' texts, are input errors.
func TestStopStringsRefused(t *testing.T) {
	m := openBase(t)
	ids := randomIDs(m, 4)
	for name, ss := range map[string]mambago.StopStrings{
		"empty":    {Strings: []string{"a", ""}, Texts: [][]byte{[]byte("a")}},
		"no texts": {Strings: []string{"a"}},
		"fill":     {Strings: []string{"a"}, Texts: [][]byte{[]byte("a")}, Fill: new(int64(-1))},
	} {
		s := mambago.Sampling{TopP: 1, EOS: -1}
		s.Stop = ss
		if _, _, err := m.Generate(ids, 1, 4, 3, s); !engine.IsInvalid(err) {
			t.Errorf("%s: Generate's err = %v, want an input error", name, err)
		}
		bm := mambago.Beams{Width: 2, Return: 1, EOS: -1, Fill: -1}
		bm.Stop = ss
		if _, err := m.BeamSearch(context.Background(), ids, 1, 4, nil, 3, bm); !engine.IsInvalid(err) {
			t.Errorf("%s: BeamSearch's err = %v, want an input error", name, err)
		}
	}
}
