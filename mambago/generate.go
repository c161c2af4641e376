package mambago

import (
	"errors"
	"fmt"
	"math"

	"github.com/mambago/mambago/mambago/engine"
)

// Sampling chooses the next token from logits. Tokens rank by logit, the
// lower id first among equals. Greedy takes the best; otherwise a token is
// drawn with probability ∝ exp(logit / Temperature) from the TopK best, cut
// to the shortest best-first run of them whose probability reaches TopP.
// Logits that hold NaN make the generation fail rather than draw a token.
type Sampling struct {
	Temperature float64 // 0 picks the most likely token (greedy)
	TopK        int     // keep the k most likely tokens; 0 keeps all
	TopP        float64 // keep the smallest set whose probability reaches p; 1 keeps all
	Seed        uint64  // seeds the sampler; the same seed gives the same tokens
	EOS         int64   // a row stops after emitting EOS and is padded with it; -1 for none
}

// Check reports an out-of-range sampling parameter.
func (s Sampling) Check() error {
	switch {
	case math.IsNaN(s.Temperature) || s.Temperature < 0:
		return engine.Invalid("temperature = %v, want ≥ 0", s.Temperature)
	case s.TopK < 0:
		return engine.Invalid("top_k = %d, want ≥ 0", s.TopK)
	case math.IsNaN(s.TopP) || s.TopP <= 0 || s.TopP > 1:
		return engine.Invalid("top_p = %v, want in (0, 1]", s.TopP)
	}
	return nil
}

// Generate continues each of the B prompts ids [B, T] by up to maxNew tokens
// and returns them as [B, n] (row-major) with n ≤ maxNew: generation ends
// early once every row has emitted EOS.
func (m *Model) Generate(ids []int64, B, T, maxNew int, s Sampling) ([]int64, int, error) {
	return m.GenerateSpans(ids, B, T, nil, maxNew, s)
}

// greedyEngine is an engine that decodes greedily where its logits are
// (the CUDA engine): NewGreedy returns a decoder for st for about steps
// steps.
type greedyEngine interface {
	NewGreedy(st engine.State, steps int) (engine.Greedy, error)
}

// GenerateSpans is Generate for a padded batch: row b of ids holds its
// prompt at spans[b] (PrefillSpans), and each row continues from its last
// token. nil spans take every row whole.
func (m *Model) GenerateSpans(ids []int64, B, T int, spans []Span, maxNew int, s Sampling) (_ []int64, _ int, err error) {
	if err := s.Check(); err != nil {
		return nil, 0, err
	}
	if maxNew < 0 {
		return nil, 0, engine.Invalid("max_new_tokens = %d, want ≥ 0", maxNew)
	}
	cfg := m.Config()
	st, err := m.NewState(B)
	if err != nil {
		return nil, 0, err
	}
	defer func() { err = errors.Join(err, freeState(st)) }()
	hidden := make([]float32, B*cfg.Hidden)
	in := engine.Input{B: B, T: T, IDs: ids}
	if spans == nil {
		err = m.Prefill(st, in, engine.Last, hidden)
	} else {
		err = m.StartSpans(st, in, spans, engine.Last, hidden)
	}
	if err != nil {
		return nil, 0, err
	}
	logits := make([]float32, B*cfg.Vocab)
	if err := m.Logits(hidden, B, logits); err != nil {
		return nil, 0, err
	}
	// Greedy steps on an engine that picks tokens where the logits are
	// return the picks (in picked) and leave the logits there.
	var greedy engine.Greedy
	if g, ok := m.Engine.(greedyEngine); ok && s.Temperature == 0 && maxNew > 1 {
		if greedy, err = g.NewGreedy(st, maxNew-1); err != nil {
			return nil, 0, err
		}
		defer func() { err = errors.Join(err, greedy.Close()) }()
	}
	sp := newSampler(s)
	done := make([]bool, B)
	next, picked := make([]int64, B), make([]int64, B)
	out := make([][]int64, B)
	n := 0
	for n < maxNew {
		alive := false
		for b := 0; b < B; b++ {
			switch {
			case done[b]:
				next[b] = s.EOS
			case greedy != nil && n > 0:
				next[b] = picked[b]
			default:
				if next[b], err = sp.next(logits[b*cfg.Vocab : (b+1)*cfg.Vocab]); err != nil {
					return nil, 0, fmt.Errorf("generate: sequence %d, new token %d: %w", b, n, err)
				}
			}
			if !done[b] {
				done[b] = s.EOS >= 0 && next[b] == s.EOS
				alive = alive || !done[b]
			}
			out[b] = append(out[b], next[b])
		}
		n++
		if !alive || n == maxNew {
			break
		}
		for b := range next { // a padded row still steps; feed it a valid id
			if next[b] < 0 {
				next[b] = 0
			}
		}
		if greedy != nil {
			err = greedy.Next(next, picked)
		} else {
			err = m.Step(st, next, logits)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("generate: new token %d: %w", n, err)
		}
	}
	flat := make([]int64, 0, B*n)
	for _, row := range out {
		flat = append(flat, row...)
	}
	return flat, n, nil
}
