package mambago

import (
	"cmp"
	"math"
	"slices"

	"github.com/mambago/mambago/mambago/engine"
)

// Warpers are transformers' sampling warpers past top_k, top_p and min_p.
// The zero value has none. Where any is set, a sampled draw is made on the
// host from a row that every warper of the Sampling (its TopK, TopP and
// MinP too) has cut in transformers' order and arithmetic (warp).
type Warpers struct {
	// TypicalP, as transformers' typical_p, keeps the tokens whose
	// surprise (-log p) is closest to the row's entropy, up to this much
	// probability (the token that reaches it kept). 0 or 1 for none; else
	// in (0, 1).
	TypicalP float64
	// EpsilonCutoff, as transformers' epsilon_cutoff, keeps the tokens of
	// probability at least this. 0 for none; else in (0, 1).
	EpsilonCutoff float64
	// EtaCutoff, as transformers' eta_cutoff ε, keeps the tokens of
	// probability at least min(ε, √ε·e^-H), H the row's entropy. 0 for
	// none; else in (0, 1).
	EtaCutoff float64
}

// on reports whether any warper is set.
func (w Warpers) on() bool {
	return w.TypicalP != 0 && w.TypicalP != 1 || w.EpsilonCutoff != 0 || w.EtaCutoff != 0
}

// check reports a setting out of its range.
func (w Warpers) check() error {
	for _, c := range []struct {
		name string
		v    float64
		off  bool
	}{{"typical_p", w.TypicalP, w.TypicalP == 0 || w.TypicalP == 1}, {"epsilon_cutoff", w.EpsilonCutoff, w.EpsilonCutoff == 0},
		{"eta_cutoff", w.EtaCutoff, w.EtaCutoff == 0}} {
		if !c.off && !(c.v > 0 && c.v < 1) {
			return engine.Invalid("%s = %v, want in (0, 1) (0 for none)", c.name, c.v)
		}
	}
	return nil
}

// warper cuts rows of logits as transformers' warpers do, keeping its
// scratch between rows.
type warper struct {
	s       Sampling
	minKeep int       // transformers' min_tokens_to_keep
	order   []int     // token ids, sorted as a warper needs
	p, logp []float64 // the row's probabilities and log probabilities
	key     []float64 // typical_p's distance of each token from the entropy
}

// newWarper returns a warper for s that always keeps at least minKeep
// tokens.
func newWarper(s Sampling, minKeep int) *warper {
	return &warper{s: s, minKeep: minKeep}
}

// warp cuts row z of logits in place: divided by the temperature (unless
// 1), then every warper of s in transformers' order (top_k, top_p, min_p,
// typical_p, epsilon_cutoff, eta_cutoff) sets the logits of the tokens it
// removes to -Inf. z holds no NaN.
func (w *warper) warp(z []float32) {
	s, V := w.s, len(z)
	if t := float32(s.Temperature); t != 1 {
		for i := range z {
			z[i] /= t
		}
	}
	inf := float32(math.Inf(-1))
	if k := max(s.TopK, w.minKeep); s.TopK > 0 && k < V {
		kth := w.sorted(z, func(a, b int) int { return cmp.Compare(z[b], z[a]) })[k-1]
		cut := z[kth]
		for i, v := range z {
			if v < cut {
				z[i] = inf
			}
		}
	}
	if s.TopP < 1 {
		up := w.sorted(z, func(a, b int) int { return cmp.Compare(z[a], z[b]) }) // ascending
		w.softmax(z)
		cum := 0.0
		for n, i := range up[:V-min(w.minKeep, V)] {
			cum += w.p[i]
			if cum <= 1-s.TopP {
				z[up[n]] = inf
			}
		}
	}
	if s.MinP > 0 {
		w.softmax(z)
		best := slices.Max(w.p)
		w.removeBelow(z, func(i int) bool { return w.p[i] < s.MinP*best })
	}
	if m := s.TypicalP; m != 0 && m != 1 {
		w.softmax(z)
		ent := 0.0
		for i := range z {
			if w.p[i] > 0 {
				ent -= w.logp[i] * w.p[i]
			}
		}
		w.key = slices.Grow(w.key[:0], V)[:V]
		for i := range z {
			w.key[i] = math.Abs(-w.logp[i] - ent)
		}
		order := w.sorted(z, func(a, b int) int { return cmp.Compare(w.key[a], w.key[b]) })
		cum, last := 0.0, 0
		for _, i := range order {
			if cum += w.p[i]; cum < m {
				last++
			}
		}
		last = min(last, V-1)
		cut := w.key[order[last]]
		for n, i := range order {
			if n >= w.minKeep && w.key[i] > cut {
				z[i] = inf
			}
		}
	}
	if e := s.EpsilonCutoff; e > 0 {
		w.softmax(z)
		w.removeBelow(z, func(i int) bool { return w.p[i] < e })
	}
	if e := s.EtaCutoff; e > 0 {
		w.softmax(z)
		ent := 0.0
		for i := range z {
			if w.p[i] > 0 {
				ent -= w.logp[i] * w.p[i]
			}
		}
		eta := min(e, math.Sqrt(e)*math.Exp(-ent))
		w.removeBelow(z, func(i int) bool { return w.p[i] < eta })
	}
}

// sorted returns the ids of z ordered by compare (stable: the lower id
// first among equals), in the warper's scratch.
func (w *warper) sorted(z []float32, compare func(a, b int) int) []int {
	w.order = slices.Grow(w.order[:0], len(z))[:len(z)]
	for i := range w.order {
		w.order[i] = i
	}
	slices.SortStableFunc(w.order, compare)
	return w.order
}

// softmax sets the warper's p and logp to the softmax of z and its log.
func (w *warper) softmax(z []float32) {
	V := len(z)
	w.p, w.logp = slices.Grow(w.p[:0], V)[:V], slices.Grow(w.logp[:0], V)[:V]
	top := float64(slices.Max(z))
	total := 0.0
	for i, v := range z {
		w.p[i] = math.Exp(float64(v) - top)
		total += w.p[i]
	}
	lt := math.Log(total)
	for i, v := range z {
		w.p[i] /= total
		w.logp[i] = float64(v) - top - lt
	}
}

// removeBelow sets to -Inf the logits of the tokens that drop says go,
// except the minKeep best (transformers' epsilon and eta cutoffs keep
// those whose logit reaches the minKeep-th best's).
func (w *warper) removeBelow(z []float32, drop func(i int) bool) {
	down := w.sorted(z, func(a, b int) int { return cmp.Compare(z[b], z[a]) })
	floor := z[down[min(w.minKeep, len(z))-1]]
	for i, v := range z {
		if drop(i) && v < floor {
			z[i] = float32(math.Inf(-1))
		}
	}
}
