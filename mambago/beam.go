package mambago

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"

	"github.com/mambago/mambago/mambago/engine"
)

// EarlyStopping says when beam search ends, as transformers' early_stopping.
type EarlyStopping int

const (
	// StopHeuristic (transformers' False) ends a prompt's search once its
	// best running beam, scored at the current length, cannot beat the
	// worst of its Width finished ones.
	StopHeuristic EarlyStopping = iota
	// StopWhenFull (True) ends it once Width beams have finished.
	StopWhenFull
	// StopNever ("never") is StopHeuristic with the running beam scored at
	// the longest length it could reach where LengthPenalty > 0.
	StopNever
)

// Beams configures BeamSearch: beam search as transformers' generate runs it
// with num_beams > 1 and do_sample=False.
type Beams struct {
	Width  int // num_beams: the beams kept a prompt, ≥ 1
	Return int // num_return_sequences: the best finished beams returned a prompt, 1..Width
	// LengthPenalty: a finished beam scores its tokens' summed log
	// probability over (new tokens)^LengthPenalty.
	LengthPenalty float64
	EarlyStopping EarlyStopping
	// EOS ends a beam (-1: none), as do MoreEOS; Fill fills a returned row
	// past its end.
	EOS     int64
	MoreEOS []int64
	Fill    int64
	// RepetitionPenalty, MinNew and NoRepeatNGram process each beam's log
	// probabilities before the search, as Sampling's do its logits.
	RepetitionPenalty float64
	MinNew            int
	NoRepeatNGram     int
	// Processors process the log probabilities after them, as Sampling's
	// do its logits. Where the Deadline passes, every beam ends at the
	// step under way, as at maxNew.
	Processors
	// Sample, where its Temperature is above 0, draws each step's
	// candidates rather than ranking them: transformers' beam sampling.
	Sample BeamSampling
	// Renormalize log-softmaxes each beam's processed (and, sampling,
	// warped) log probabilities once more, as transformers'
	// renormalize_logits does last: a beam's continuations then weigh
	// what the processors left of it as 1. A beam with none left keeps
	// its -Inf.
	Renormalize bool
	// Scores keeps each step's processed log probabilities, and Logits its
	// logits ([B·Width, V] each), for BeamOutput.
	Scores, Logits bool
}

// BeamSampling is beam search with do_sample=True, as transformers runs
// it: each beam's processed log probabilities are cut by the warpers
// (Temperature, TopK, TopP, MinP, Warpers, as Sampling's, each keeping at
// least max(2, 1 + the eos ids) tokens), and each prompt's candidates are
// drawn without replacement from all its beams' continuations with
// probability ∝ exp(summed score), then ranked by that score. Seed seeds
// the draws, on a stream of each prompt's own. The draws run on the host;
// with a TopK, from each row's TopK best, which a decoder
// (engine.BeamDecoder) ranks where the logits are.
type BeamSampling struct {
	Temperature float64 // > 0 samples; 0 ranks the candidates (plain beam search)
	TopK        int
	TopP        float64 // 1 (or 0) keeps all
	MinP        float64
	Warpers
	Seed uint64
}

// warping returns the Sampling whose warpers bs's are.
func (bs BeamSampling) warping() Sampling {
	topP := bs.TopP
	if topP == 0 {
		topP = 1
	}
	return Sampling{Temperature: bs.Temperature, TopK: bs.TopK, TopP: topP, MinP: bs.MinP, Warpers: bs.Warpers}
}

// BeamOutput is what BeamSearch returns, as transformers'
// GenerateBeamDecoderOnlyOutput holds it, for B prompts and R = Return.
type BeamOutput struct {
	N       int       // the longest returned row's new tokens
	Tokens  []int64   // [B·R, N]: each prompt's R best finished beams, best first, Fill past each end
	Scores  []float32 // [B·R]: their scores (sequences_scores)
	Indices []int32   // [B·R, N]: the beam (b·Width + j) each token came from, -1 past each end
	Steps   int       // the search's steps (at least N)
	// StepScores and StepLogits are, where asked, each step's processed log
	// probabilities and logits, [B·Width, V].
	StepScores, StepLogits [][]float32
}

// Check reports an out-of-range setting.
func (bm Beams) Check() error {
	switch {
	case bm.Width < 1:
		return engine.Invalid("num_beams = %d, want ≥ 1", bm.Width)
	case bm.Return < 1 || bm.Return > bm.Width:
		return engine.Invalid("num_return_sequences = %d, want 1..num_beams (%d)", bm.Return, bm.Width)
	case math.IsNaN(bm.LengthPenalty) || math.IsInf(bm.LengthPenalty, 0):
		return engine.Invalid("length_penalty = %v, want finite", bm.LengthPenalty)
	case bm.EarlyStopping < StopHeuristic || bm.EarlyStopping > StopNever:
		return engine.Invalid("early_stopping = %d, want StopHeuristic, StopWhenFull or StopNever", bm.EarlyStopping)
	}
	if err := bm.Sample.warping().Check(); err != nil {
		return fmt.Errorf("beam sampling: %w", err)
	}
	return bm.sampling().Check()
}

// sampling returns the Sampling whose processors bm's are, greedy.
func (bm Beams) sampling() Sampling {
	return Sampling{TopP: 1, EOS: bm.EOS, MoreEOS: bm.MoreEOS, RepetitionPenalty: bm.RepetitionPenalty,
		MinNew: bm.MinNew, NoRepeatNGram: bm.NoRepeatNGram, Processors: bm.Processors}
}

// beamRow is one beam: its new tokens, the beam each came from, its score.
type beamRow struct {
	tokens []int64
	from   []int32
	score  float32
	done   bool // a finished beam's slot holds one (is_sent_finished)
}

// extend returns r with one more token, from beam parent.
func (r beamRow) extend(token int64, parent int32, score float32) beamRow {
	return beamRow{tokens: append(slices.Clip(r.tokens), token), from: append(slices.Clip(r.from), parent), score: score}
}

// no is transformers' stand-in score for a beam that may not be taken.
const no = float32(-1e9)

// BeamSearch continues each of the B prompts ids [B, T] (row b's at
// spans[b]; nil spans take every row whole) by beam search of up to maxNew
// tokens, as transformers' generate does with num_beams = bm.Width and
// do_sample=False: every step scores each beam's continuations by their
// summed log probabilities, keeps the Width best that have not ended, and
// ranks those that end (at an eos id or at maxNew tokens) by their
// length-penalized score. The model runs B·Width sequences a step, their
// states reordered as the beams are (engine.State.CopyRows). Once ctx is
// done it stops before its next step.
func (m *Model) BeamSearch(ctx context.Context, ids []int64, B, T int, spans []Span, maxNew int, bm Beams) (
	_ *BeamOutput, err error) {
	if err := bm.Check(); err != nil {
		return nil, err
	}
	if maxNew < 0 {
		return nil, engine.Invalid("max_new_tokens = %d, want ≥ 0", maxNew)
	}
	cfg := m.Config()
	V, K := cfg.Vocab, bm.Width
	s := bm.sampling()
	ends := s.endIDs()
	for _, id := range ends {
		if id >= int64(V) {
			return nil, engine.Invalid("eos id %d is outside the vocabulary [0, %d)", id, V)
		}
	}
	if err := s.checkFor(V, maxNew); err != nil {
		return nil, err
	}
	keep := max(2, 1+len(ends)) * K // candidates a prompt and step (beams_to_keep)
	if keep > K*V {
		return nil, engine.Invalid("num_beams = %d needs a vocabulary of at least %d tokens, the model has %d",
			K, keep/K, V)
	}
	out := &BeamOutput{}
	if maxNew == 0 {
		out.Tokens, out.Indices, out.Scores = []int64{}, []int32{}, make([]float32, B*bm.Return)
		return out, nil
	}

	// The prompts' prefill, then its state copied to each prompt's K beams.
	prompts, err := m.NewState(B)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, freeState(prompts)) }()
	hidden := make([]float32, B*cfg.Hidden)
	in := engine.Input{B: B, T: T, IDs: ids}
	if spans == nil {
		err = m.prefill(ctx, prompts, in, outputs{pool: engine.Last, out: hidden})
	} else {
		err = m.prefillSpans(ctx, prompts, in, spans, outputs{pool: engine.Last, out: hidden}, true)
	}
	if err != nil {
		return nil, err
	}
	first := make([]float32, B*V)
	if err := m.Logits(hidden, B, first); err != nil {
		return nil, err
	}
	st, err := m.gen.take(m, B*K)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, m.gen.put(st)) }()
	rows := make([]int, B*K)
	for i := range rows {
		rows[i] = i / K
	}
	if err := st.CopyRows(prompts, rows); err != nil {
		return nil, err
	}
	logits := make([]float32, B*K*V)
	for i := range B * K {
		copy(logits[i*V:(i+1)*V], first[(i/K)*V:])
	}
	var dec engine.Decoder
	if de, ok := m.Engine.(decoderEngine); ok && maxNew > 1 {
		if dec, err = de.NewDecoder(st, maxNew-1); err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, dec.Close()) }()
	}

	// Each beam's tokens for the logits processors: its prompt's, then its own.
	beamIDs := make([]int64, B*K*T)
	var beamSpans []Span
	for i := range B * K {
		copy(beamIDs[i*T:(i+1)*T], ids[(i/K)*T:])
		if spans != nil {
			beamSpans = append(beamSpans, spans[i/K])
		}
	}
	procs := newProcessing(s, beamIDs, B*K, T, beamSpans, V, maxNew)
	steps := newBeamSteps(m, st, dec, bm, procs, keep, V, logits)
	rngs := make([]*rand.Rand, B) // each prompt's draws
	if steps.warpers != nil {
		for b := range rngs {
			rngs[b] = rand.New(rand.NewPCG(bm.Sample.Seed, 0x6265616d73+uint64(b)))
		}
	}

	set := newBeamSet(bm, B, keep)
	next := make([]int64, B*K)
	var moves []int // the beam each row continues, from the last step; nil where each stays
	for step := 0; ; step++ {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("beam search: stopped before step %d: %w", step, context.Cause(ctx))
		}
		cands, err := steps.at(step, next, moves, out)
		if err != nil {
			return nil, fmt.Errorf("beam search: step %d: %w", step, err)
		}
		last := step+1 == maxNew || bm.late() // every candidate ends here
		ended := func(row int, tok int64) bool { return last || s.ends(tok) || steps.procs.ends(row, tok) }
		parents := make([]int, B*K)
		allHit := true
		for b := range B {
			// The keep best continuations of the prompt's K beams.
			var best []scored
			if steps.warpers != nil {
				best, err = cands.drawn(b, set.running[b*K:(b+1)*K], keep, V, rngs[b])
			} else {
				best, err = cands.best(b, set.running[b*K:(b+1)*K], keep, V)
			}
			if err != nil {
				return nil, fmt.Errorf("beam search: step %d, prompt %d: %w", step, b, err)
			}
			allHit = set.advance(b, best, V, step, ended, parents) && allHit
		}
		moves = parents
		if isIdentity(parents) {
			moves = nil
		}
		if moves != nil {
			if err := st.CopyRows(st, parents); err != nil {
				return nil, fmt.Errorf("beam search: step %d: %w", step, err)
			}
		}
		if err := steps.handOver(step); err != nil {
			return nil, err
		}
		steps.procs.reorder(parents)
		for i, r := range set.running {
			next[i] = r.tokens[len(r.tokens)-1]
			steps.procs.add(i, next[i])
		}
		out.Steps = step + 1
		if !set.goesOn(step, maxNew) || allHit {
			break
		}
	}
	set.output(out)
	return out, nil
}

// beamSteps gives each step of a beam search its candidates: each row's
// best, ranked by the decoder (after it processes the rows where the
// search has logits processors), or whole rows of log probabilities,
// processed, warped and renormalized on the host.
type beamSteps struct {
	m         *Model
	st        engine.State
	dec       engine.Decoder               // or nil: the model's steps
	beams     engine.BeamDecoder           // or nil: not ranked by the decoder without processors
	procBeams engine.BeamProcessingDecoder // or nil: not processed and ranked by the decoder
	bm        Beams
	V         int
	ranked    int         // each row's candidates from the decoder
	sampling  bool        // beam sampling from the ranked rows: warped on the host
	procs     *processing // the logits processors' host side
	warpers   []*warper   // beam sampling's, one a goroutine of warpRows, kept across steps
	logits    []float32   // the whole rows, [B·K, V]: step 0's, then each step's on the host
	logp      []float32   // their log probabilities, a step at a time
	none      []bool      // no row is done (processing.apply)
}

// newBeamSteps returns the steps of a search of bm on st (through dec
// where not nil; procs the processors' host side) for keep candidates a
// prompt, from step 0's logits.
// The decoder ranks each row's candidates where nothing needs the whole
// rows: no step scores or logits kept, and, sampling, a top_k and no
// warper past min_p (then each row's top_k best are all a draw can reach).
// Under logits processors it processes the rows' log probabilities first,
// where it can (engine.BeamProcessingDecoder); else the rows come to the
// host.
func newBeamSteps(m *Model, st engine.State, dec engine.Decoder, bm Beams, procs *processing, keep, V int,
	logits []float32) *beamSteps {
	K := bm.Width
	rows := len(logits) / V
	s := &beamSteps{m: m, st: st, dec: dec, bm: bm, V: V, ranked: keep, procs: procs, logits: logits,
		none: make([]bool, rows)}
	s.beams, _ = dec.(engine.BeamDecoder)
	s.procBeams, _ = dec.(engine.BeamProcessingDecoder)
	ws := bm.Sample
	if ws.Temperature > 0 {
		for range min(rows, runtime.GOMAXPROCS(0)) {
			s.warpers = append(s.warpers, newWarper(ws.warping(), keep/K))
		}
		if ws.TopK > 0 {
			s.ranked, s.sampling = min(max(ws.TopK, keep/K), V), true
		}
	}
	if ws.Temperature > 0 && !s.sampling || bm.Scores || bm.Logits || keep > V {
		s.beams, s.procBeams = nil, nil
	}
	if bm.RepetitionPenalty != 0 && bm.RepetitionPenalty != 1 || bm.NoRepeatNGram > 0 || bm.MinNew > 0 ||
		bm.processes() {
		s.beams = nil
	} else {
		s.procBeams = nil
	}
	return s
}

// at feeds step's ids next (after step 0, whose logits the search began
// with), the rows reordered by moves, and returns the step's candidates,
// keeping its logits and scores in out where the search asks.
func (s *beamSteps) at(step int, next []int64, moves []int, out *BeamOutput) (candidates, error) {
	var c candidates
	var err error
	switch {
	case step > 0 && s.procBeams != nil:
		// Sampling renormalizes after the warpers, on the host.
		c.tokens, c.logits, err = s.procBeams.TopKLogProbs(next, moves, s.ranked, s.bm.Renormalize && !s.sampling)
	case step > 0 && s.beams != nil:
		c.tokens, c.logits, c.norms, err = s.beams.TopKNorms(next, s.ranked)
	case step > 0 && s.dec != nil:
		s.logits, err = s.dec.Logits(next)
	case step > 0:
		err = s.m.Step(s.st, next, s.logits)
	}
	if err != nil {
		return c, err
	}
	if c.tokens != nil {
		if s.sampling {
			err = c.warp(s.ranked, s.warpers[0], s.bm.Renormalize)
		}
		return c, err
	}
	if s.bm.Logits {
		out.StepLogits = append(out.StepLogits, slices.Clone(s.logits))
	}
	if s.bm.Scores || s.logp == nil { // a kept step's scores are its own
		s.logp = make([]float32, len(s.logits))
	}
	c.logp = s.logp
	if err := logSoftmaxRows(c.logp, s.logits, s.V); err != nil {
		return c, err
	}
	s.procs.apply(c.logp, s.V, s.none, step)
	if s.warpers != nil {
		warpRows(c.logp, s.V, s.warpers)
	}
	if s.bm.Renormalize {
		if err := renormalizeRows(c.logp, s.V); err != nil {
			return c, err
		}
	}
	if s.bm.Scores {
		out.StepScores = append(out.StepScores, c.logp)
	}
	return c, nil
}

// handOver, after step 0, hands the logits processors to the decoder where
// it processes the rest: from the rows' tokens before the step's reorder,
// as each step reorders them, then adds the ids fed.
func (s *beamSteps) handOver(step int) error {
	if step > 0 || s.procBeams == nil {
		return nil
	}
	return s.procBeams.Process(s.procs.handOver(len(s.none)))
}

// beamSet is a search's beams: each prompt's K running beams and its K
// best finished ones (or stand-ins), best first, and whether it can still
// improve.
type beamSet struct {
	bm                Beams
	K, keep           int
	running, finished []beamRow
	improvable        []bool    // is_early_stop_heuristic_unsatisfied
	cand              []beamRow // a prompt's keep continuations, scratch
	hits              []bool    // and whether each ends
}

// newBeamSet returns the beams of B prompts before the first step: only
// beam 0's continuations count at first (the beams are alike), and none
// has finished.
func newBeamSet(bm Beams, B, keep int) *beamSet {
	K := bm.Width
	set := &beamSet{bm: bm, K: K, keep: keep, running: make([]beamRow, B*K), finished: make([]beamRow, B*K),
		improvable: make([]bool, B), cand: make([]beamRow, keep), hits: make([]bool, keep)}
	for i := range set.running {
		if i%K > 0 {
			set.running[i].score = no
		}
		set.finished[i].score = no
	}
	for b := range set.improvable {
		set.improvable[b] = true
	}
	return set
}

// advance moves prompt b's beams on by its keep best continuations (at
// j·V + v, best first) of step, those that ended (ended: the beam's row
// and the token) ranked among the finished, and sets parents[b·K + j] to
// the row running beam j continues; it reports whether every continuation
// ended.
func (set *beamSet) advance(b int, best []scored, V, step int, ended func(row int, tok int64) bool, parents []int) bool {
	K, keep, cand, hits := set.K, set.keep, set.cand, set.hits
	allHit := true
	for c, at := range best {
		j, tok := at.at/V, int64(at.at%V)
		cand[c] = set.running[b*K+j].extend(tok, int32(b*K+j), at.score)
		hits[c] = ended(b*K+j, tok)
		allHit = allHit && hits[c]
	}
	// The K best that go on: a continuation that ends scores no.
	order := ranks(keep, func(c int) float32 { return cand[c].score + cond(hits[c], no) })
	for j, c := range order[:K] {
		r := cand[c]
		r.score += cond(hits[c], no)
		set.running[b*K+j] = r
		parents[b*K+j] = int(r.from[len(r.from)-1])
	}
	// The K best finished: the ones before, and the continuations among the
	// K best that end here, length-penalized.
	full := true
	for _, f := range set.finished[b*K : (b+1)*K] {
		full = full && f.done
	}
	newLen := float32(math.Pow(float64(step+1), set.bm.LengthPenalty))
	merged := slices.Clone(set.finished[b*K : (b+1)*K])
	for c := range keep {
		r := cand[c]
		r.score /= newLen
		r.score += cond(full && set.bm.EarlyStopping == StopWhenFull, no)
		r.score += cond(!set.improvable[b], no)
		r.done = hits[c] && c < K
		r.score += cond(!r.done, no)
		merged = append(merged, r)
	}
	order = ranks(len(merged), func(i int) float32 { return merged[i].score })
	for j, i := range order[:K] {
		set.finished[b*K+j] = merged[i]
	}
	return allHit
}

// goesOn reports, after step of up to maxNew, whether any prompt's search
// goes on (transformers' _check_early_stop_heuristic and
// _beam_search_has_unfinished_sequences), marking those that cannot
// improve.
func (set *beamSet) goesOn(step, maxNew int) bool {
	bm, K := set.bm, set.K
	length := float64(step + 1)
	if bm.EarlyStopping == StopNever && bm.LengthPenalty > 0 {
		length = float64(maxNew)
	}
	bestScale := float32(math.Pow(length, bm.LengthPenalty))
	anyImprovable, allFull := false, true
	for b := range set.improvable {
		fin := set.finished[b*K : (b+1)*K]
		worst := slices.MinFunc(fin, func(x, y beamRow) int { return cmp.Compare(x.score, y.score) }).score
		bestRunning := set.running[b*K].score / bestScale
		beats := false
		for _, f := range fin {
			beats = beats || bestRunning > cond(f.done, worst)+cond(!f.done, no)
			allFull = allFull && f.done
		}
		set.improvable[b] = set.improvable[b] && beats
		anyImprovable = anyImprovable || set.improvable[b]
	}
	return anyImprovable && !(allFull && bm.EarlyStopping == StopWhenFull)
}

// output fills out's tokens, beam indices and scores from each prompt's
// bm.Return best finished beams, bm.Fill past each one's end.
func (set *beamSet) output(out *BeamOutput) {
	R, K, B := set.bm.Return, set.K, len(set.improvable)
	for b := range B {
		for _, f := range set.finished[b*K : b*K+R] {
			out.N = max(out.N, len(f.tokens))
		}
	}
	out.Tokens, out.Indices, out.Scores = make([]int64, B*R*out.N), make([]int32, B*R*out.N), make([]float32, B*R)
	for b := range B {
		for j, f := range set.finished[b*K : b*K+R] {
			i := b*R + j
			out.Scores[i] = f.score
			for t := range out.N {
				out.Tokens[i*out.N+t], out.Indices[i*out.N+t] = set.bm.Fill, -1
				if t < len(f.tokens) {
					out.Tokens[i*out.N+t], out.Indices[i*out.N+t] = f.tokens[t], f.from[t]
				}
			}
		}
	}
}

// isIdentity reports whether rows[i] = i for every i: the beams stay put.
func isIdentity(rows []int) bool {
	for i, r := range rows {
		if r != i {
			return false
		}
	}
	return true
}

// cond is v where ok holds, else 0: transformers' mask × value.
func cond(ok bool, v float32) float32 {
	if ok {
		return v
	}
	return 0
}

// inParts runs fn(p, i) for each row i of rows, the rows split into parts
// runs of consecutive rows, a goroutine each (a single part runs on the
// caller's); a run stops at its first error (a panic in fn is one), and
// the errors come back joined, each naming its row as "<noun> i".
func inParts(rows, parts int, noun string, fn func(p, i int) error) error {
	parts = max(1, min(rows, parts))
	errs := make([]error, parts)
	run := func(p int) {
		for i := p * rows / parts; i < (p+1)*rows/parts && errs[p] == nil; i++ {
			if err := recovered(func() error { return fn(p, i) }); err != nil {
				errs[p] = fmt.Errorf("%s %d: %w", noun, i, err)
			}
		}
	}
	if parts == 1 {
		run(0)
		return errs[0]
	}
	var wg sync.WaitGroup
	for p := range parts {
		wg.Go(func() { run(p) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// warpRows cuts each row of V of logits with its warpers, the rows split
// among them, a goroutine each.
func warpRows(logits []float32, V int, warpers []*warper) {
	_ = inParts(len(logits)/V, len(warpers), "row", func(p, i int) error {
		warpers[p].warp(logits[i*V : (i+1)*V])
		return nil
	})
}

// logSoftmaxRows is logSoftmax over each row of V of logits, the rows
// split among up to GOMAXPROCS goroutines.
func logSoftmaxRows(dst, logits []float32, V int) error {
	return inParts(len(logits)/V, runtime.GOMAXPROCS(0), "row", func(_, i int) error {
		return logSoftmax(dst[i*V:(i+1)*V], logits[i*V:(i+1)*V])
	})
}

// renormalizeRows log-softmaxes each row of logp [rows, V] in place, but
// rows that are all -Inf, as logSoftmaxRows splits them.
func renormalizeRows(logp []float32, V int) error {
	return inParts(len(logp)/V, runtime.GOMAXPROCS(0), "row", func(_, i int) error {
		row := logp[i*V : (i+1)*V]
		if !slices.ContainsFunc(row, func(z float32) bool { return !math.IsInf(float64(z), -1) }) {
			return nil
		}
		return logSoftmax(row, row)
	})
}

// logSoftmax writes logits' log probabilities to dst, in float32 as torch
// does (the sum of exponentials in float64, each within 1e-8: expNeg). A
// row holding NaN is an error.
func logSoftmax(dst, logits []float32) error {
	top := float32(math.Inf(-1))
	for _, z := range logits {
		if z != z {
			return errNaN
		}
		top = max(top, z)
	}
	if math.IsInf(float64(top), -1) {
		return errors.New("every logit is -Inf")
	}
	var sum float64
	for _, z := range logits {
		sum += expNeg(float64(top - z))
	}
	lse := float32(math.Log(sum))
	for i, z := range logits {
		dst[i] = z - top - lse
	}
	return nil
}

// candidates are a step's continuations of B·K beams: the whole rows of
// log probabilities logp [B·K, V], or each row's k best tokens and logits
// [B·K, k] and its normalizers norms [B·K, 2]
// (engine.BeamDecoder.TopKNorms), or without norms their processed log
// probabilities (engine.BeamProcessingDecoder.TopKLogProbs). Beam
// sampling's ranked candidates are warped (warp): then warped is k, each
// row's tokens are in order of id, logits their warped log probabilities,
// and every other token of the row is -Inf.
type candidates struct {
	logp          []float32
	tokens        []int32
	logits, norms []float32
	warped        int
}

// warp turns ranked candidates, k a row, into beam sampling's rows: each
// row's tokens in order of id, their log probabilities divided by the
// temperature and cut as w's warpers cut a whole row (w's top_k being the
// k ranked: every other token is -Inf), then log-softmaxed again where
// renormalize is set. Where the rows were ranked by the top_k of their
// processed log probabilities, as warper.warp's top_k cuts them, these
// rows draw as the whole rows do (candidates.drawn), in the same
// arithmetic: each sum over a row runs in order of id, the -Inf adding
// nothing. (Only a tie at the k-th value differs: warp keeps every token
// tied with it, the ranking k.)
func (c *candidates) warp(k int, w *warper, renormalize bool) error {
	rows := len(c.tokens) / k
	z := make([]float32, k)
	var keys, spare []uint64
	for r := range rows {
		if err := c.rowLogProbs(r, k, z); err != nil {
			return err
		}
		if slices.ContainsFunc(z, func(lp float32) bool { return lp != lp }) {
			return fmt.Errorf("beam %d: logits hold NaN or are all -Inf", r)
		}
		keys, spare = sortByID(c.tokens[r*k:(r+1)*k], z, keys, spare)
		w.warp(z)
		if renormalize && slices.ContainsFunc(z, func(x float32) bool { return !math.IsInf(float64(x), -1) }) {
			if err := logSoftmax(z, z); err != nil {
				return fmt.Errorf("beam %d: %w", r, err)
			}
		}
		copy(c.logits[r*k:], z)
	}
	c.norms, c.warped = nil, k
	return nil
}

// rowLogProbs writes ranked row r's k log probabilities to dst: its
// logits less the row's normalizers where c has them (TopKNorms), else
// its log probabilities as they came (TopKLogProbs). A row the decoder
// marked (a token -1: NaN logits) or whose normalizers say all -Inf is an
// error.
func (c *candidates) rowLogProbs(r, k int, dst []float32) error {
	var top, lse float32
	if c.norms != nil {
		top, lse = c.norms[2*r], c.norms[2*r+1]
		if top != top || math.IsInf(float64(top), -1) {
			return fmt.Errorf("beam %d: logits hold NaN or are all -Inf", r)
		}
	}
	for i := range k {
		if c.tokens[r*k+i] < 0 {
			return fmt.Errorf("beam %d: logits hold NaN or are all -Inf", r)
		}
		dst[i] = c.logits[r*k+i]
		if c.norms != nil {
			dst[i] = c.logits[r*k+i] - top - lse
		}
	}
	return nil
}

// sampledRow returns row r of beam sampling's warped rows: its tokens and
// their log probabilities, or, for whole rows, nil tokens and the row's V.
func (c *candidates) sampledRow(r, V int) ([]int32, []float32) {
	if k := c.warped; k > 0 {
		return c.tokens[r*k : (r+1)*k], c.logits[r*k : (r+1)*k]
	}
	return nil, c.logp[r*V : (r+1)*V]
}

// scored is a continuation: j·V + v for token v after beam j, and its score.
type scored struct {
	at    int
	score float32
}

// best returns, best first, prompt b's keep best continuations of its
// beams: beam j's score plus the log probability of token v, in float32.
// Equal scores rank the lower j·V + v first.
func (c *candidates) best(b int, beams []beamRow, keep, V int) ([]scored, error) {
	K := len(beams)
	if c.tokens == nil {
		scores := make([]float32, K*V) // at j·V + v, the place ranked breaks ties by
		for j, beam := range beams {
			for v, lp := range c.logp[(b*K+j)*V : (b*K+j+1)*V] {
				scores[j*V+v] = beam.score + lp
			}
		}
		r := &ranked{ids: make([]int, 0, keep)}
		if err := r.best(scores, keep); err != nil {
			return nil, err
		}
		out := make([]scored, keep)
		for i, at := range r.ids {
			out[i] = scored{at, scores[at]}
		}
		return out, nil
	}
	all := make([]scored, 0, K*keep) // a few: sorted
	lp := make([]float32, keep)
	for j, beam := range beams {
		row := b*K + j
		if err := c.rowLogProbs(row, keep, lp); err != nil {
			return nil, err
		}
		for i, tok := range c.tokens[row*keep : (row+1)*keep] {
			x := scored{j*V + int(tok), beam.score + lp[i]}
			if x.score != x.score {
				return nil, errNaN
			}
			all = append(all, x)
		}
	}
	slices.SortFunc(all, func(x, y scored) int {
		if c := cmp.Compare(y.score, x.score); c != 0 {
			return c
		}
		return cmp.Compare(x.at, y.at)
	})
	return all[:keep], nil
}

// drawn returns prompt b's keep continuations of its beams (scored as
// best scores them) drawn without replacement with probability ∝
// exp(score) from its beams' rows of log probabilities (whole, or warped:
// sampledRow), best first: beam sampling's candidates. Where fewer than
// keep can be drawn (the warpers left too few tokens), the best of the
// others fill the rest, as torch's multinomial fills them with ones of
// probability 0: those of finite score by score, then the -Inf ones by
// place (j·V + v), lowest first.
func (c *candidates) drawn(b int, beams []beamRow, keep, V int, rng *rand.Rand) ([]scored, error) {
	K := len(beams)
	var fin []scored // the continuations of finite score, in order of place
	top := math.Inf(-1)
	for j, beam := range beams {
		ids, lp := c.sampledRow(b*K+j, V)
		for i, x := range lp {
			v := i
			if ids != nil {
				v = int(ids[i])
			}
			if x := beam.score + x; !math.IsInf(float64(x), -1) {
				fin = append(fin, scored{j*V + v, x})
				top = max(top, float64(x))
			}
		}
	}
	if len(fin) == 0 {
		return nil, errors.New("every continuation scores -Inf")
	}
	// The continuations that can be drawn (of weight above 0), and their
	// weights: after a top_k, a few a beam.
	var can []int // at fin's
	var w []float64
	total := 0.0
	for i, x := range fin {
		if e := expNeg(top - float64(x.score)); e > 0 {
			can, w = append(can, i), append(w, e)
			total += e
		}
	}
	out := make([]scored, 0, keep)
	for range min(len(can), keep) {
		// total, after the draws taken from it, can round below 0; and
		// rounding can run pick past the last weight: then the last left.
		d := pick(max(0, rng.Float64()*total), w)
		for w[d] == 0 {
			d--
		}
		out = append(out, fin[can[d]])
		total -= w[d]
		w[d] = 0
	}
	if len(out) < keep {
		var rest []scored // of finite score, too far below the best to be drawn
		for i, x := range fin {
			if len(can) == 0 || can[0] != i {
				rest = append(rest, x)
			} else {
				can = can[1:]
			}
		}
		slices.SortStableFunc(rest, func(x, y scored) int { return cmp.Compare(y.score, x.score) })
		out = append(out, rest[:min(len(rest), keep-len(out))]...)
		inf := float32(math.Inf(-1))
		for at := 0; len(out) < keep; at++ { // then the -Inf, past the finite
			if len(fin) > 0 && fin[0].at == at {
				fin = fin[1:]
				continue
			}
			out = append(out, scored{at, inf})
		}
	}
	slices.SortStableFunc(out, func(x, y scored) int { return cmp.Compare(y.score, x.score) })
	return out, nil
}

// ranks returns 0..n-1 ordered by score, best first, the lower index first
// among equals.
func ranks(n int, score func(int) float32) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(score(b), score(a)) })
	return order
}
