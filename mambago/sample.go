package mambago

import (
	"cmp"
	"container/heap"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
)

// errNaN reports logits that hold NaN, from which no token can be drawn.
var errNaN = errors.New("the logits hold NaN")

// sampler draws tokens from rows of logits under one Sampling. It keeps its
// scratch between draws, since a generation asks it for B tokens a step
// from rows of a whole vocabulary.
//
// Tokens are ranked by logit, the lower id first among equal logits. A
// draw takes the TopK best (all when TopK is 0), then the shortest run of
// those, best first, whose probability reaches TopP of theirs, then of
// those the ones at least MinP times as likely as the best, and draws
// from that run with probability ∝ exp(logit / Temperature). A draw over
// 50k tokens costs a few passes over the row and a sort of at most the
// TopK best or one bin of a nucleus (fromAll), not a sort of the row.
type sampler struct {
	s     Sampling
	rng   *rand.Rand
	inv   float64   // 1 / Temperature
	w     []float64 // exp((logit - max) / Temperature): of the TopK best, or of every token
	sure  []int     // the nucleus's tokens before its last bin (fromAll)
	top   ranked    // candidates, best first
	vals  []float32 // the logits of top.ids (fromBest)
	keys  []uint64  // candidates ranked on the device, as rankKey packs them, or sortByID's scratch (fromCandidates)
	spare []uint64  // sortKeys' scratch
	warp  *warper   // where s has Warpers: every warper in transformers' order (fromWarped)
	z     []float32 // the row that warp cuts: a whole row, or the candidates in order of id
}

// newSampler returns a sampler for s and sequence row of a batch, seeded
// from s.Seed on a random stream of the row's own.
func newSampler(s Sampling, row int) *sampler {
	sp := &sampler{s: s, rng: rand.New(rand.NewPCG(s.Seed, 0x6d616d6261676f+uint64(row))), inv: 1 / s.Temperature}
	if s.Warpers.on() {
		sp.warp = newWarper(s, 1)
	}
	return sp
}

// next draws a token from one row of logits: the best-ranked one when
// Temperature is 0.
func (sp *sampler) next(logits []float32) (int64, error) {
	if sp.warp != nil && sp.s.Temperature > 0 {
		return sp.fromWarped(logits)
	}
	if k := sp.s.TopK; sp.s.Temperature > 0 && k > 0 && k < len(logits) {
		// The ranking finds the best too: one pass over the row.
		if err := sp.top.best(logits, k); err != nil {
			return 0, err
		}
		sp.vals = sp.vals[:0]
		for _, i := range sp.top.ids {
			sp.vals = append(sp.vals, logits[i])
		}
		return int64(sp.fromBest(sp.top.ids, sp.vals)), nil
	}
	best, err := argmax(logits)
	if err != nil || sp.s.Temperature == 0 {
		return int64(best), err
	}
	top := float64(logits[best])
	if math.IsInf(top, 0) { // an infinite best logit takes all the mass (or none has any)
		return int64(best), nil
	}
	return int64(sp.fromAll(logits, top)), nil
}

// fromWarped draws from one row of logits cut by every warper (warp), with
// probability ∝ exp of the cut logits.
func (sp *sampler) fromWarped(logits []float32) (int64, error) {
	if _, err := argmax(logits); err != nil {
		return 0, err
	}
	sp.z = append(sp.z[:0], logits...)
	return int64(sp.drawWarped()), nil
}

// drawWarped cuts sp.z (no NaN) by every warper and returns the index of
// a token drawn from it with probability ∝ exp of the cut logits.
func (sp *sampler) drawWarped() int {
	sp.warp.warp(sp.z)
	best, _ := argmax(sp.z)
	top := float64(sp.z[best])
	if math.IsInf(top, 0) { // an infinite best logit takes all the mass (or none has any)
		return best
	}
	sp.w = slices.Grow(sp.w[:0], len(sp.z))[:len(sp.z)]
	total := 0.0
	for i, v := range sp.z {
		sp.w[i] = math.Exp(float64(v) - top)
		total += sp.w[i]
	}
	return pick(sp.rng.Float64()*total, sp.w)
}

// fromCandidates draws from a row's TopK best tokens ranked on the device:
// ids and their logits in no particular order, or every id -1 for a row
// that holds NaN. It ranks them, then draws as next does from the same
// row, token for token. Under Warpers it reorders ids by id, in place,
// and cuts the candidates in that order, as
// fromWarped cuts the whole row, where the TopK cut leaves the others at
// -Inf: every sum over the row runs in order of id, the -Inf adding
// nothing, so it draws fromWarped's tokens. (Only a tie at the k-th
// logit differs: warper.warp keeps every token tied with it, the ranking
// TopK of them.)
func (sp *sampler) fromCandidates(ids []int32, logits []float32) (int64, error) {
	if len(ids) == 0 || ids[0] < 0 {
		return 0, errNaN
	}
	if sp.warp != nil && sp.s.Temperature > 0 {
		sp.z = append(sp.z[:0], logits...)
		sp.keys, sp.spare = sortByID(ids, sp.z, sp.keys, sp.spare)
		return int64(ids[sp.drawWarped()]), nil
	}
	sp.keys = sp.keys[:0]
	for n, id := range ids {
		sp.keys = append(sp.keys, rankKey(id, logits[n]))
	}
	sp.spare = sortKeys(sp.keys, sp.spare)
	sp.top.ids, sp.vals = sp.top.ids[:0], sp.vals[:0]
	for _, key := range sp.keys {
		id, logit := unpackRankKey(key)
		sp.top.ids, sp.vals = append(sp.top.ids, id), append(sp.vals, logit)
	}
	return int64(sp.fromBest(sp.top.ids, sp.vals)), nil
}

// sortByID orders candidates ids (distinct, ≥ 0) and their values vals by
// id, in place, with keys and spare as scratch, which it returns for the
// next call. The ids alone decide the order, so the sort reads the keys'
// id bits only.
func sortByID(ids []int32, vals []float32, keys, spare []uint64) ([]uint64, []uint64) {
	keys = keys[:0]
	for n, id := range ids {
		keys = append(keys, uint64(id)<<32|uint64(math.Float32bits(vals[n])))
	}
	spare = sortKeysAbove(keys, spare, 32)
	for n, key := range keys {
		ids[n], vals[n] = int32(key>>32), math.Float32frombits(uint32(key))
	}
	return keys, spare
}

// rankKey packs token id and its logit (not NaN) into a key whose unsigned
// order is rank order: the logit's bits, mapped so that a larger logit
// gives a smaller key (-0 the same as +0), above the id, so that the lower
// id comes first among equal logits. A sort of plain integers is about
// three times as fast as one through a comparison function.
func rankKey(id int32, logit float32) uint64 {
	u := math.Float32bits(logit)
	if u == 1<<31 { // -0
		u = 0
	}
	if u&(1<<31) != 0 { // negative: a larger logit has smaller bits
		u = ^u
	} else {
		u |= 1 << 31
	}
	return uint64(^u)<<32 | uint64(uint32(id)) // ^u: the larger logit first
}

// unpackRankKey returns the id and logit that rankKey packed (-0 as +0,
// which weighs the same in every use here).
func unpackRankKey(key uint64) (id int, logit float32) {
	u := ^uint32(key >> 32)
	if u&(1<<31) != 0 {
		u &^= 1 << 31
	} else {
		u = ^u
	}
	return int(uint32(key)), math.Float32frombits(u)
}

// fromBest draws from tokens ids, best first, whose logits are vals. It
// takes one uniform whatever the row, as a queued draw on the device does.
func (sp *sampler) fromBest(ids []int, vals []float32) int {
	u := sp.rng.Float64()
	top := float64(vals[0])
	if math.IsInf(top, 0) { // an infinite best logit takes all the mass (or none has any)
		return ids[0]
	}
	sp.w = sp.w[:0]
	var total float64
	for _, v := range vals {
		sp.w = append(sp.w, expNeg(float64((top-float64(v))*sp.inv)))
		total += sp.w[len(sp.w)-1]
	}
	// Products rounded on their own, as in expNeg: kernels/topk.cu's
	// topk_draw_f32 draws the same token from the same uniform.
	keep, mass := nucleus(sp.w, float64(sp.s.TopP*total))
	if m := sp.s.MinP; m > 0 { // w is best first, and w[0] is 1
		for keep > 1 && sp.w[keep-1] < m {
			keep--
		}
		mass = 0
		for _, x := range sp.w[:keep] {
			mass += x
		}
	}
	return ids[pick(float64(u*mass), sp.w[:keep])]
}

// fromAll draws from every token of logits, whose largest is top. It weighs
// them all; for a nucleus it then sums their weight in nbins bins of equal
// width over the range of the logits that carry weight. The nucleus holds
// every token of the bins before the one where that sum reaches TopP, and
// the best-ranked tokens of that bin up to it: only that bin is sorted, and
// the draw walks the others in id order, which gives each the same odds.
func (sp *sampler) fromAll(logits []float32, top float64) int {
	sp.w = slices.Grow(sp.w[:0], len(logits))[:len(logits)]
	var total float64
	low := top
	for i, v := range logits {
		sp.w[i] = expNeg((top - float64(v)) * sp.inv)
		total += sp.w[i]
		if sp.w[i] > 0 {
			low = min(low, float64(v))
		}
	}
	if sp.s.TopP == 1 {
		if m := sp.s.MinP; m > 0 { // the best's weight is 1
			total = 0
			for i, x := range sp.w {
				if x < m {
					sp.w[i] = 0
				}
				total += sp.w[i]
			}
		}
		return pick(sp.rng.Float64()*total, sp.w)
	}
	scale := 0.0 // bins a unit of logit
	if top > low {
		scale = (nbins - 1) / (top - low)
	}
	var bins [nbins]float64
	for i, v := range logits {
		if sp.w[i] > 0 {
			bins[int((top-float64(v))*scale)] += sp.w[i]
		}
	}
	target := sp.s.TopP * total
	last, mass := nbins-1, 0.0 // the bin that reaches target; the weight before it
	for b, m := range bins {
		if mass+m >= target {
			last = b
			break
		}
		mass += m
	}
	sure, edge := sp.sure[:0], sp.top.ids[:0]
	for i, v := range logits {
		if sp.w[i] == 0 {
			continue
		}
		if b := int((top - float64(v)) * scale); b < last {
			sure = append(sure, i)
		} else if b == last {
			edge = append(edge, i)
		}
	}
	sp.sure, sp.top.ids = sure, edge
	sp.top.sort(logits)
	keep := len(edge)
	for n, i := range edge {
		if mass += sp.w[i]; mass >= target {
			keep = n + 1
			break
		}
	}
	edge = edge[:keep]
	if m := sp.s.MinP; m > 0 { // after the nucleus, those of at least m times the best's weight (1)
		sure, edge = atLeast(sure, sp.w, m), atLeast(edge, sp.w, m)
		mass = 0
		for _, run := range [][]int{sure, edge} {
			for _, i := range run {
				mass += sp.w[i]
			}
		}
	}
	r, drawn := sp.rng.Float64()*mass, -1
	for _, run := range [][]int{sure, edge} {
		for _, i := range run {
			if drawn = i; r < sp.w[i] {
				return i
			}
			r -= sp.w[i]
		}
	}
	return drawn // rounding left r past the last
}

// atLeast keeps, in place, the ids whose weight w[id] is at least m.
func atLeast(ids []int, w []float64, m float64) []int {
	return slices.DeleteFunc(ids, func(i int) bool { return w[i] < m })
}

// nbins is how many bins fromAll sums a nucleus's weight in.
const nbins = 1024

// expNeg returns e^-z for z ≥ 0 within 1e-8 relative, about three times as
// fast as math.Exp: e^-z = 2^k e^r with k the integer nearest -z·log2(e)
// and |r| ≤ ln(2)/2, where seven terms of e^r's series leave 7e-9. Weights
// under e^-708 flush to 0. Each product is rounded on its own (an explicit
// float64 conversion keeps the compiler from fusing it into an FMA), so the
// bits are the same on every machine and build, and kernels/topk.cu's
// exp_neg, operation for operation the same, gives them too.
func expNeg(z float64) float64 {
	if !(z <= 708) { // NaN cannot reach here: the sampler has refused it
		return 0
	}
	k := math.Floor(0.5 - float64(z*math.Log2E))
	r := (-z - float64(k*ln2Hi)) - float64(k*ln2Lo)
	t := float64(r * (1. / 5040))
	for _, c := range [...]float64{1. / 720, 1. / 120, 1. / 24, 1. / 6, 1. / 2, 1} {
		t = float64(r * (c + t))
	}
	return float64((1 + t) * math.Float64frombits(uint64(int64(k)+1023)<<52))
}

// ln2Hi + ln2Lo is ln 2, split so that k·ln2Hi is exact for |k| < 2^11.
const (
	ln2Hi = 6.93147180369123816490e-01
	ln2Lo = 1.90821492927058770002e-10
)

// nucleus returns the length of the shortest prefix of the weights w
// (best first) whose sum reaches target, and that sum; all of w when
// rounding leaves it short.
func nucleus(w []float64, target float64) (keep int, mass float64) {
	for n, x := range w {
		if mass += x; mass >= target {
			return n + 1, mass
		}
	}
	return len(w), mass
}

// pick returns the first n where the running sum of w[:n+1] passes r, or
// the last when rounding leaves r past it.
func pick(r float64, w []float64) int {
	for n, x := range w {
		if r -= x; r < 0 {
			return n
		}
	}
	return len(w) - 1
}

// argmax returns the index of the largest logit, the lowest among equals,
// or errNaN.
func argmax(logits []float32) (int, error) {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		} else if v != v {
			return 0, errNaN
		}
	}
	if v := logits[best]; v != v {
		return 0, errNaN
	}
	return best, nil
}

// ranked holds the ids of a row's k best-ranked tokens. While it collects
// them it is a heap whose root is the worst one kept.
type ranked struct {
	ids    []int
	logits []float32
}

// best sets r.ids to the k best-ranked tokens of logits, best first, or
// returns errNaN.
func (r *ranked) best(logits []float32, k int) error {
	r.ids = r.ids[:0]
	for i := range k {
		if logits[i] != logits[i] {
			return errNaN
		}
		r.ids = append(r.ids, i)
	}
	r.logits = logits
	heap.Init(r)
	worst := logits[r.ids[0]]
	for i := k; i < len(logits); i++ {
		if v := logits[i]; v > worst { // an equal logit ranks below: its id is higher
			r.ids[0] = i
			heap.Fix(r, 0)
			worst = logits[r.ids[0]]
		} else if v != v {
			return errNaN
		}
	}
	r.sort(logits)
	return nil
}

// sort puts r.ids in rank order by logits.
func (r *ranked) sort(logits []float32) {
	r.logits = logits
	slices.SortFunc(r.ids, r.compare)
}

// compare ranks token i before token j when its logit is larger, or equal
// with a lower id.
func (r *ranked) compare(i, j int) int {
	if c := cmp.Compare(r.logits[j], r.logits[i]); c != 0 {
		return c
	}
	return cmp.Compare(i, j)
}

// The heap's methods (container/heap): the root is the worst-ranked id.

func (r *ranked) Len() int           { return len(r.ids) }
func (r *ranked) Less(a, b int) bool { return r.compare(r.ids[a], r.ids[b]) > 0 }
func (r *ranked) Swap(a, b int)      { r.ids[a], r.ids[b] = r.ids[b], r.ids[a] }
func (r *ranked) Push(any)           { panic("ranked holds k ids") }
func (r *ranked) Pop() any           { panic("ranked holds k ids") }
