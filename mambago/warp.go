package mambago

import (
	"math"
	"slices"

	"github.com/mambago/mambago/mambago/engine"
)

// Warpers are transformers' sampling warpers past top_k, top_p and min_p.
// The zero value has none. Where any is set, a sampled draw is made on the
// host from a row that every warper of the Sampling (its TopK, TopP and
// MinP too) has cut in transformers' order and arithmetic (warp): a whole
// row, or the TopK best a decoder ranked (sampler.fromCandidates).
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
	top     ranked    // the best few tokens (top_k, and the minKeep best)
	keys    []uint64  // sort keys, the id in the low 32 bits
	spare   []uint64  // sortKeys' scratch
	order   []int     // the finite tokens, sorted as a warper needs
	p, logp []float64 // the row's probabilities and log probabilities
}

// newWarper returns a warper for s that always keeps at least minKeep
// tokens.
func newWarper(s Sampling, minKeep int) *warper {
	return &warper{s: s, minKeep: minKeep}
}

// warp cuts row z of logits in place: divided by the temperature (> 0;
// unless 1), then every warper of s in transformers' order (top_k, top_p, min_p,
// typical_p, epsilon_cutoff, eta_cutoff) sets the logits of the tokens it
// removes to -Inf. z holds no NaN. Only top_p and typical_p sort, and
// only the tokens the warpers before them left.
func (w *warper) warp(z []float32) {
	s, V := w.s, len(z)
	inf := float32(math.Inf(-1))
	// An infinite best logit, or one that the temperature takes past
	// float32's range, takes all the mass with those equal to it (or none
	// has any), as in a draw without the warpers: their probabilities
	// would be NaN. A finite one stays finite (0), so that the tokens tied
	// with it share the mass.
	t := float32(s.Temperature)
	if top := slices.Max(z); math.IsInf(float64(top/t), 0) {
		keep := top
		if !math.IsInf(float64(top), 0) {
			keep = 0
		}
		for i, v := range z {
			if v == top {
				z[i] = keep
			} else {
				z[i] = inf
			}
		}
		return
	}
	if t != 1 {
		for i := range z {
			z[i] /= t
		}
	}
	if k := max(s.TopK, w.minKeep); s.TopK > 0 && k < V {
		cut := w.kth(z, k)
		for i, v := range z {
			if v < cut {
				z[i] = inf
			}
		}
	}
	if s.TopP < 1 {
		// Rank order is best first: walked backwards, ascending.
		down := w.finiteSorted(z, func(i int) uint64 { return rankKey(int32(i), z[i]) })
		w.softmax(z)
		cum := 0.0
		for n := len(down) - 1; n >= min(w.minKeep, len(down)); n-- {
			if cum += w.p[down[n]]; cum <= 1-s.TopP {
				z[down[n]] = inf
			}
		}
	}
	if s.MinP > 0 {
		w.softmax(z)
		best := slices.Max(w.p)
		w.removeBelow(z, func(i int) bool { return w.p[i] < s.MinP*best })
	}
	if m := s.TypicalP; m != 0 && m != 1 {
		w.typical(z, m)
	}
	if e := s.EpsilonCutoff; e > 0 {
		w.softmax(z)
		w.removeBelow(z, func(i int) bool { return w.p[i] < e })
	}
	if e := s.EtaCutoff; e > 0 {
		w.softmax(z)
		eta := min(e, math.Sqrt(e)*math.Exp(-w.entropy()))
		w.removeBelow(z, func(i int) bool { return w.p[i] < eta })
	}
}

// typical applies typical_p m: the tokens in order of their key, the
// distance of their surprise from the row's entropy, are kept up to the
// one whose probability, added in that order, reaches m (the minKeep
// first kept too). It bins the keys' mass, as sampler.fromAll does a
// nucleus's, and sorts only the bin the mass reaches m in (where the
// minKeep first might lie past it, every token).
func (w *warper) typical(z []float32, m float64) {
	w.softmax(z)
	ent := w.entropy()
	key := func(i int) float64 { return math.Abs(-w.logp[i] - ent) }
	// A key ≥ 0 rounded to float32 keeps its order in its bits.
	packed := func(i int) uint64 { return uint64(math.Float32bits(float32(key(i))))<<32 | uint64(i) }
	lo, hi, finite := math.Inf(1), 0.0, 0
	for i, v := range z {
		if !math.IsInf(float64(v), -1) {
			lo, hi, finite = min(lo, key(i)), max(hi, key(i)), finite+1
		}
	}
	scale := 0.0 // bins a unit of key
	if hi > lo {
		scale = (nbins - 1) / (hi - lo)
	}
	bin := func(i int) int { return int((key(i) - lo) * scale) }
	var mass [nbins]float64
	var count [nbins]int
	for i, v := range z {
		if !math.IsInf(float64(v), -1) {
			mass[bin(i)] += w.p[i]
			count[bin(i)]++
		}
	}
	// The bin where the mass in key order reaches m, the mass and tokens
	// before it.
	last, cum, before := nbins-1, 0.0, 0
	for b := range nbins {
		if cum+mass[b] >= m {
			last = b
			break
		}
		cum, before = cum+mass[b], before+count[b]
	}
	bySort := func() {
		order := w.finiteSorted(z, packed)
		cum, at := 0.0, 0
		for _, i := range order {
			if cum += w.p[i]; cum < m {
				at++
			}
		}
		if at >= len(order) { // the cut is at a removed token's key, +Inf: none goes
			return
		}
		cut := key(order[at])
		for n, i := range order {
			if n >= w.minKeep && key(i) > cut {
				z[i] = float32(math.Inf(-1))
			}
		}
	}
	if before+count[last] <= w.minKeep || cum+mass[last] < m {
		// Few tokens before the cut, or rounding left the mass short of m:
		// every token in key order.
		bySort()
		return
	}
	w.keys = w.keys[:0] // the bin's tokens, in key order
	for i, v := range z {
		if !math.IsInf(float64(v), -1) && bin(i) == last {
			w.keys = append(w.keys, packed(i))
		}
	}
	w.spare = sortKeys(w.keys, w.spare)
	cut := key(int(uint32(w.keys[len(w.keys)-1])))
	for n, k := range w.keys {
		i := int(uint32(k))
		if cum += w.p[i]; cum >= m {
			if before+n+1 < w.minKeep { // the cut keeps fewer than minKeep: they are kept in key order
				bySort()
				return
			}
			cut = key(i)
			break
		}
	}
	for i, v := range z {
		if !math.IsInf(float64(v), -1) && key(i) > cut {
			z[i] = float32(math.Inf(-1))
		}
	}
}

// kth returns the k-th largest logit of z.
func (w *warper) kth(z []float32, k int) float32 {
	_ = w.top.best(z, k) // no NaN here
	return z[w.top.ids[k-1]]
}

// finiteSorted returns the ids of z's finite logits ordered by their keys
// (each holding its id in its low 32 bits), in the warper's scratch.
func (w *warper) finiteSorted(z []float32, key func(i int) uint64) []int {
	w.keys = w.keys[:0]
	for i, v := range z {
		if !math.IsInf(float64(v), -1) {
			w.keys = append(w.keys, key(i))
		}
	}
	w.spare = sortKeys(w.keys, w.spare)
	w.order = w.order[:0]
	for _, k := range w.keys {
		w.order = append(w.order, int(uint32(k)))
	}
	return w.order
}

// softmax sets the warper's p and logp to the softmax of z and its log.
func (w *warper) softmax(z []float32) {
	V := len(z)
	w.p, w.logp = slices.Grow(w.p[:0], V)[:V], slices.Grow(w.logp[:0], V)[:V]
	top := float64(slices.Max(z))
	total := 0.0
	for i, v := range z {
		w.p[i] = expNeg(top - float64(v))
		total += w.p[i]
	}
	lt := math.Log(total)
	for i, v := range z {
		w.p[i] /= total
		w.logp[i] = float64(v) - top - lt
	}
}

// entropy returns the entropy of the warper's p.
func (w *warper) entropy() float64 {
	h := 0.0
	for i, p := range w.p {
		if p > 0 {
			h -= w.logp[i] * p
		}
	}
	return h
}

// removeBelow sets to -Inf the logits of the tokens that drop says go,
// except the minKeep best (transformers' epsilon and eta cutoffs keep
// those whose logit reaches the minKeep-th best's).
func (w *warper) removeBelow(z []float32, drop func(i int) bool) {
	floor := w.kth(z, min(w.minKeep, len(z)))
	for i, v := range z {
		if drop(i) && v < floor {
			z[i] = float32(math.Inf(-1))
		}
	}
}
