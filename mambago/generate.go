package mambago

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"

	"github.com/mambago/mambago/mambago/engine"
)

// Sampling chooses the next token from logits. Tokens rank by logit, the
// lower id first among equals. Greedy takes the best; otherwise a token is
// drawn with probability ∝ exp(logit / Temperature) from the TopK best, cut
// to the shortest best-first run of them whose probability reaches TopP,
// then to those of the run at least MinP times as likely as the best.
// Logits that hold NaN make the generation fail rather than draw a token.
type Sampling struct {
	Temperature float64 // 0 picks the most likely token (greedy); else finite and at least 1/MaxFloat32 (2.9e-39)
	TopK        int     // keep the k most likely tokens; 0 keeps all
	TopP        float64 // keep the smallest set whose probability reaches p; 1 keeps all
	Seed        uint64  // seeds the sampler; the same seed gives the same tokens
	EOS         int64   // a row stops after emitting EOS and is padded with it; -1 for none
	// MoreEOS are further ids that end a row as EOS does (transformers'
	// list of end-of-sequence ids past its first); the row is padded with
	// EOS all the same, so they need EOS ≥ 0.
	MoreEOS []int64
	// RepetitionPenalty, as transformers' repetition_penalty, scales the
	// logit of each token already in the row before the draw: a positive
	// logit is divided by it, a negative one multiplied, so values above 1
	// make a token less likely to come again. A row's tokens are its
	// prompt's (its span's, without the padding, as transformers 5.25 leaves
	// out left padding) and those it has generated. 0 and 1 leave the logits as
	// they are; otherwise it must be finite and > 0. On the CUDA engine the
	// decoder's steps apply it where the logits are
	// (engine.ProcessingDecoder), unless whole rows come to the host (the
	// Warpers without a TopK).
	RepetitionPenalty float64
	// MinP, as transformers' min_p, keeps, of the tokens TopK and TopP
	// leave, those at least MinP times as likely as the best, when
	// sampling; 0 keeps them all. In [0, 1]; on the CUDA engine it cuts
	// the draw made on the device, from the k best or from the nucleus.
	MinP float64
	// NoRepeatNGram, as transformers' no_repeat_ngram_size, keeps a row
	// from repeating any n-gram of its tokens (its prompt's span and those
	// generated) of this size: the logits of the tokens that would close
	// one are -Inf. 0 for none; on the CUDA engine the decoder's queued
	// steps apply it where the logits are, as RepetitionPenalty.
	NoRepeatNGram int
	// MinNew, as transformers' min_new_tokens, keeps a row from ending
	// before its MinNew-th new token: until then the logits of EOS and
	// MoreEOS are -Inf; on the CUDA engine, as RepetitionPenalty is.
	MinNew int
	// Warpers are the further sampling warpers (typical_p,
	// epsilon_cutoff, eta_cutoff); a draw under any is made on the host,
	// on the CUDA engine from the TopK best ranked on the device (after
	// the logits processors there) where a TopK cuts the row, else from
	// whole rows.
	Warpers
	// Processors are the further logits processors (sequence biases,
	// banned sequences, suppressed and forced ids, the length decay) and
	// the deadline.
	Processors
}

// endIDs returns the ids that end a row: EOS and MoreEOS, or none.
func (s Sampling) endIDs() []int64 {
	if s.EOS < 0 {
		return nil
	}
	return append([]int64{s.EOS}, s.MoreEOS...)
}

// ends reports whether a row that emits id stops there.
func (s Sampling) ends(id int64) bool {
	return s.EOS >= 0 && (id == s.EOS || slices.Contains(s.MoreEOS, id))
}

// minTemperature is the least temperature above 0 whose reciprocal is a
// float32, as the device's draws take it.
const minTemperature = 1 / math.MaxFloat32

// Check reports an out-of-range sampling parameter.
func (s Sampling) Check() error {
	switch {
	case math.IsNaN(s.Temperature) || s.Temperature < 0 || math.IsInf(s.Temperature, 1):
		return engine.Invalid("temperature = %v, want finite and ≥ 0", s.Temperature)
	case s.Temperature > 0 && s.Temperature < minTemperature:
		return engine.Invalid("temperature = %v, want 0 (greedy) or at least %.3g: the draws divide by it in float32",
			s.Temperature, minTemperature)
	case s.TopK < 0:
		return engine.Invalid("top_k = %d, want ≥ 0", s.TopK)
	case math.IsNaN(s.TopP) || s.TopP <= 0 || s.TopP > 1:
		return engine.Invalid("top_p = %v, want in (0, 1]", s.TopP)
	case math.IsNaN(s.RepetitionPenalty) || s.RepetitionPenalty < 0 || math.IsInf(s.RepetitionPenalty, 1):
		return engine.Invalid("repetition_penalty = %v, want finite and > 0 (0 or 1 for none)", s.RepetitionPenalty)
	case !(s.MinP >= 0 && s.MinP <= 1):
		return engine.Invalid("min_p = %v, want in [0, 1]", s.MinP)
	case s.NoRepeatNGram < 0:
		return engine.Invalid("no_repeat_ngram_size = %d, want ≥ 0", s.NoRepeatNGram)
	case s.MinNew < 0:
		return engine.Invalid("min_new_tokens = %d, want ≥ 0", s.MinNew)
	case len(s.MoreEOS) > 0 && s.EOS < 0:
		return engine.Invalid("further eos ids %v without a first one (EOS = %d)", s.MoreEOS, s.EOS)
	}
	for _, id := range s.MoreEOS {
		if id < 0 {
			return engine.Invalid("eos id %d, want ≥ 0", id)
		}
	}
	if err := s.Warpers.check(); err != nil {
		return err
	}
	return s.Processors.check()
}

// Generate continues each of the B prompts ids [B, T] by up to maxNew tokens
// and returns them as [B, n] (row-major) with n ≤ maxNew: generation ends
// early once every row has emitted EOS.
func (m *Model) Generate(ids []int64, B, T, maxNew int, s Sampling) ([]int64, int, error) {
	return m.GenerateSpans(context.Background(), ids, B, T, nil, maxNew, s)
}

// decoderEngine is an engine with an engine.Decoder (the CUDA engine):
// NewDecoder returns one for st for about steps steps.
type decoderEngine interface {
	NewDecoder(st engine.State, steps int) (engine.Decoder, error)
}

// GenerateSpans is Generate for a padded batch: row b of ids holds its
// prompt at spans[b] (PrefillSpans), and each row continues from its last
// token. nil spans take every row whole. Once ctx is done it stops before
// its next token, or within the prompt's prefill where the engine can
// (engine.Stopper), and returns an error that wraps ctx's cause.
//
// Generate keeps the state of its last call (and, on the CUDA engine, the
// step graph captured for it) for its next call of the same batch size,
// which zeroes and reuses it rather than capturing again; Close frees it.
func (m *Model) GenerateSpans(ctx context.Context, ids []int64, B, T int, spans []Span, maxNew int, s Sampling) ([]int64, int, error) {
	return m.GenerateEach(ctx, ids, B, T, spans, maxNew, s, nil)
}

// GenerateEach is GenerateSpans that hands each new column of tokens to
// emit as it is taken: emit(n, tokens) gets token n of every row, [B]
// (EOS for a row that has stopped, or StopStrings.Fill after a stop
// string), to read before it returns, on the
// generating goroutine, before the next token is taken. It streams the
// tokens to a reader; nil emit is GenerateSpans.
func (m *Model) GenerateEach(ctx context.Context, ids []int64, B, T int, spans []Span, maxNew int, s Sampling,
	emit func(n int, tokens []int64)) (_ []int64, _ int, err error) {
	if err := s.Check(); err != nil {
		return nil, 0, err
	}
	if maxNew < 0 {
		return nil, 0, engine.Invalid("max_new_tokens = %d, want ≥ 0", maxNew)
	}
	cfg := m.Config()
	ends := s.endIDs()
	for _, id := range ends {
		if id >= int64(cfg.Vocab) {
			return nil, 0, engine.Invalid("eos id %d is outside the vocabulary [0, %d)", id, cfg.Vocab)
		}
	}
	if err := s.checkFor(cfg.Vocab, maxNew); err != nil {
		return nil, 0, err
	}
	st, err := m.gen.take(m, B)
	if err != nil {
		return nil, 0, err
	}
	defer func() { err = errors.Join(err, m.gen.put(st)) }()
	hidden := make([]float32, B*cfg.Hidden)
	in := engine.Input{B: B, T: T, IDs: ids}
	if spans == nil {
		err = m.prefill(ctx, st, in, outputs{pool: engine.Last, out: hidden}) // st is zero (take)
	} else {
		err = m.prefillSpans(ctx, st, in, spans, outputs{pool: engine.Last, out: hidden}, true)
	}
	if err != nil {
		return nil, 0, err
	}
	logits := make([]float32, B*cfg.Vocab)
	if err := m.Logits(hidden, B, logits); err != nil {
		return nil, 0, err
	}
	var dec engine.Decoder
	if de, ok := m.Engine.(decoderEngine); ok && maxNew > 1 {
		if dec, err = de.NewDecoder(st, maxNew-1); err != nil {
			return nil, 0, err
		}
		defer func() { err = errors.Join(err, dec.Close()) }()
	}
	procs := newProcessing(s, ids, B, T, spans, cfg.Vocab, maxNew)
	processes := procs.pen != nil || procs.grams != nil || s.MinNew > 0 && s.EOS >= 0 || s.processes()
	r := routeFor(dec, s, cfg.Vocab, processes, maxNew)
	if r.proc != nil {
		if err := r.proc.Process(procs.onDevice(B)); err != nil {
			return nil, 0, err
		}
	}
	var candIDs []int32
	var candLogits []float32
	uniforms := make([]float64, B)
	samplers := make([]*sampler, B)
	for b := range samplers {
		samplers[b] = newSampler(s, b)
	}
	done := make([]bool, B)
	ended := make([]bool, B) // done, or past a stop string without EOS
	fill := make([]int64, B) // what a row holds once done
	for b := range fill {
		fill[b] = s.EOS
	}
	// drawUniforms sets each running row's next draw for a nucleus step.
	drawUniforms := func() {
		for b, sp := range samplers {
			if !done[b] {
				uniforms[b] = sp.rng.Float64()
			}
		}
	}
	next, picked := make([]int64, B), make([]int64, B)
	out := make([][]int64, B)
	n, ahead := 0, 0 // tokens taken, and steps queued ahead of them
	for n < maxNew {
		if ctx.Err() != nil {
			return nil, 0, fmt.Errorf("generate: stopped before new token %d: %w", n, context.Cause(ctx))
		}
		switch {
		case r.queue != nil && n > 0:
			if err = r.queue.Picks(picked); err == nil {
				ahead--
				err = takeDrawn(picked, done, next)
			}
		case r.greedy && n > 0:
			copy(next, picked)
		case r.topP != nil && n > 0:
			err = takeDrawn(picked, done, next)
		case r.topK != nil && n > 0:
			err = drawCandidates(samplers, candIDs, candLogits, done, next)
		default:
			procs.apply(logits, cfg.Vocab, done, n)
			err = drawRows(samplers, logits, done, next)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("generate: new token %d: %w", n, err)
		}
		alive := false
		for b := range B {
			if done[b] {
				next[b] = fill[b]
			} else {
				// A stop string ends a row as EOS does; without EOS the
				// row goes on (transformers pads only under eos ids).
				eos, hit := s.ends(next[b]), procs.ends(b, next[b])
				done[b] = eos || hit && s.EOS >= 0
				if done[b] && !eos && s.Stop.Fill != nil {
					fill[b] = *s.Stop.Fill
				}
				ended[b] = ended[b] || done[b] || hit
				alive = alive || !ended[b]
				procs.add(b, next[b])
			}
			out[b] = append(out[b], next[b])
		}
		if emit != nil {
			emit(n, next)
		}
		n++
		if !alive || n == maxNew || s.late() {
			break
		}
		for b := range next { // a padded row still steps; feed it a valid id
			if next[b] < 0 {
				next[b] = 0
			}
		}
		switch {
		case r.queue != nil:
			// Token n comes from the first step queued, the tokens after it
			// from the steps queued ahead, fed on the device.
			for ; err == nil && ahead < r.queue.QueueDepth() && n+ahead < maxNew; ahead++ {
				fed := next
				if ahead > 0 {
					fed = nil
				}
				switch {
				case r.greedy:
					err = r.queue.QueueGreedy(fed)
				case r.topKQueue != nil:
					drawUniforms()
					err = r.topKQueue.QueueTopK(fed, s.TopK, s.Temperature, s.TopP, s.MinP, uniforms)
				default:
					drawUniforms()
					err = r.queue.QueueTopP(fed, s.Temperature, s.TopP, s.MinP, uniforms)
				}
			}
		case r.greedy:
			err = dec.Greedy(next, picked)
		case r.topK != nil:
			candIDs, candLogits, err = r.topK.TopK(next, s.TopK)
		case r.topP != nil:
			drawUniforms()
			err = r.topP.TopP(next, s.Temperature, s.TopP, s.MinP, uniforms, picked)
		case dec != nil:
			logits, err = dec.Logits(next)
		default:
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

// decodeRoute is how Generate takes the tokens after the first on a
// decoder: the entries it calls, nil (false) where it does not. Where
// none draws, each step returns its logits in the decoder's own
// (page-locked) memory, and the host processes them and draws.
type decodeRoute struct {
	greedy    bool                     // picks greedy tokens there (Greedy, or queued)
	topKQueue engine.TopKQueueDecoder  // queues draws from the k best there, the host's rule token for token
	topK      engine.TopKDecoder       // ranks the TopK best there for the host's draw
	topP      engine.TopPDecoder       // draws from the nucleus there
	queue     engine.QueueDecoder      // queues the greedy, top-k and nucleus steps ahead of the host
	proc      engine.ProcessingDecoder // processes the logits there (Process); nil: the host does
}

// routeFor picks dec's entries for s over a vocabulary of V, where
// processes says a logits processor is set, for maxNew new tokens (nil dec:
// none).
//
// A greedy step on the decoder leaves the logits where they are and
// returns its picks. A sampled step, where the decoder can, returns the
// tokens drawn from the k best there with each row's next uniform
// (TopKQueueDecoder, for k up to its TopKQueueMax), or the TopK best
// ranked there for the host to draw from (TopKDecoder), or without a
// top-k the tokens drawn from the nucleus there (TopPDecoder).
//
// The logits processors (the repetition penalty, the n-gram ban, a
// minimum length, the biases, bans and the rest of Processors) change the
// logits before the draw: on the host for the first token, and for the
// rest on the device where the decoder processes its queued steps' logits,
// or its TopK steps', before the draw or ranking asked for
// (ProcessingDecoder); else every step returns its logits and the host
// draws. The further warpers (typical, epsilon, eta), which the device's
// draws do not have, cut the TopK best ranked there (TopKDecoder) on the
// host, or without a TopK whole rows; min_p goes with each draw, the
// host's and the device's.
//
// Where the decoder queues its greedy, top-k and nucleus steps
// (QueueDecoder), steps wait queued ahead of the host: each is fed the
// picks of the one before on the device and runs while the host reads
// them. A row that has stopped is then fed its own picks, not EOS; its
// tokens are EOS all the same, and the state is dropped with the steps
// still queued once every row has stopped.
func routeFor(dec engine.Decoder, s Sampling, V int, processes bool, maxNew int) decodeRoute {
	var r decodeRoute
	if dec == nil {
		return r
	}
	queueK := 0 // the most candidates of a draw from the k best on the device
	if q, ok := dec.(engine.TopKQueueDecoder); ok {
		queueK = q.TopKQueueMax()
	}
	cutsTopK := s.TopK > 0 && s.TopK < V
	kBestOnDevice := cutsTopK && s.TopK <= queueK && !s.Warpers.on()
	// The further warpers draw on the host: from the top-k candidates
	// (TopKDecoder), else from whole rows.
	hostDraws := s.Warpers.on() && s.Temperature > 0 && !cutsTopK
	proc, _ := dec.(engine.ProcessingDecoder)
	if _, ranks := dec.(engine.TopKDecoder); cutsTopK && !kBestOnDevice && s.Temperature > 0 && !ranks {
		proc = nil // its logits come back unprocessed (Decoder.Logits)
	}
	if processes && proc != nil && maxNew > 1 && !hostDraws {
		r.proc = proc
	}
	onHost := hostDraws || processes && r.proc == nil
	r.greedy = s.Temperature == 0 && !onHost
	switch {
	case s.Temperature == 0 || onHost:
	case cutsTopK:
		r.topK, _ = dec.(engine.TopKDecoder)
		if kBestOnDevice {
			r.topKQueue = dec.(engine.TopKQueueDecoder)
		}
	default:
		r.topP, _ = dec.(engine.TopPDecoder)
	}
	if r.greedy || r.topP != nil || r.topKQueue != nil {
		r.queue, _ = dec.(engine.QueueDecoder)
	}
	return r
}

// takeDrawn copies the tokens a decoder picked or drew on the device into
// next, for every row not done; -1 marks a row whose logits held NaN.
func takeDrawn(drawn []int64, done []bool, next []int64) error {
	var errs []error
	for b, id := range drawn {
		if done[b] {
			continue
		}
		if id < 0 {
			errs = append(errs, fmt.Errorf("sequence %d: %w", b, errNaN))
		}
		next[b] = id
	}
	return errors.Join(errs...)
}

// drawCandidates draws next[b] from row b of the candidates a TopKDecoder
// ranked, ids and logits [B, k], with samplers[b], for every row not done;
// rows of many candidates (each a sort of k) draw at once.
func drawCandidates(samplers []*sampler, ids []int32, logits []float32, done []bool, next []int64) error {
	k := len(ids) / len(samplers)
	parts := 1
	if k >= parallelCandidates {
		parts = len(samplers)
	}
	return inParts(len(samplers), parts, "sequence", func(_, b int) (err error) {
		if !done[b] {
			next[b], err = samplers[b].fromCandidates(ids[b*k:(b+1)*k], logits[b*k:(b+1)*k])
		}
		return err
	})
}

// parallelCandidates is the fewest candidates a row for which
// drawCandidates gives each row a goroutine: a row of k costs its sampler
// a sort of k (a draw took about 0.9 µs at 50 and 56 at 2,000 on the
// 2-core build machine, BenchmarkDrawCandidates), a goroutine about 1 µs.
const parallelCandidates = 256

// drawRows draws next[b] from row b of logits [B, V] with samplers[b], for
// every row not done, each row on a goroutine of its own.
func drawRows(samplers []*sampler, logits []float32, done []bool, next []int64) error {
	V := len(logits) / len(samplers)
	return inParts(len(samplers), len(samplers), "sequence", func(_, b int) (err error) {
		if !done[b] {
			next[b], err = samplers[b].next(logits[b*V : (b+1)*V])
		}
		return err
	})
}

// recovered returns fn's error, or a panic in it as an error. Work spread
// over goroutines runs through it: a panic there would end the process
// (and the Python interpreter that called it), where the bindings turn a
// panic in the calling goroutine into an exception.
func recovered(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("mambago internal error: %v\n%s", r, debug.Stack())
		}
	}()
	return fn()
}

// banIDs sets the logits of ids to -Inf in every row of logits [B, V]
// (MinNew's ban on the ids that end a row).
func banIDs(logits []float32, V int, ids []int64) {
	for row := range len(logits) / V {
		for _, id := range ids {
			logits[row*V+int(id)] = float32(math.Inf(-1))
		}
	}
}

// penalty applies Sampling.RepetitionPenalty: it keeps the distinct ids of
// each row, and scales their logits before each draw.
type penalty struct {
	by   float32
	V    int
	seen []bool    // [B, V]: whether row b holds id v
	ids  [][]int32 // each row's distinct ids, in the order first seen
}

// newPenalty returns the penalty by over the prompts in ids [B, T] (row b's
// at spans[b]; nil spans take every row whole) and a vocabulary of V, or
// nil where by is 0 or 1 and leaves the logits as they are.
func newPenalty(by float64, ids []int64, B, T int, spans []Span, V int) *penalty {
	if by == 0 || by == 1 {
		return nil
	}
	pn := &penalty{by: float32(by), V: V, seen: make([]bool, B*V), ids: make([][]int32, B)}
	for b := range B {
		for _, id := range prompt(ids, T, spans, b) {
			pn.add(b, id)
		}
	}
	return pn
}

// prompt returns row b's tokens of ids [B, T]: those at spans[b], or the
// whole row where spans is nil.
func prompt(ids []int64, T int, spans []Span, b int) []int64 {
	row := ids[b*T : (b+1)*T]
	if spans != nil {
		row = row[spans[b].Start : spans[b].Start+spans[b].Len]
	}
	return row
}

// factor is the penalty's factor: 1 for nil, which has none.
func (pn *penalty) factor() float32 {
	if pn == nil {
		return 1
	}
	return pn.by
}

// rows returns each of B rows' distinct ids so far (none for nil).
func (pn *penalty) rows(B int) [][]int32 {
	if pn == nil {
		return make([][]int32, B)
	}
	return pn.ids
}

// add counts id (checked, in [0, V)) in row b.
func (pn *penalty) add(b int, id int64) {
	if pn == nil || id < 0 || pn.seen[b*pn.V+int(id)] { // < 0: a pick from NaN logits, which fails the call
		return
	}
	pn.seen[b*pn.V+int(id)] = true
	pn.ids[b] = append(pn.ids[b], int32(id))
}

// reorder makes row i hold what row rows[i] held (beam search's beams).
func (pn *penalty) reorder(rows []int) {
	if pn == nil {
		return
	}
	seen, ids := make([]bool, len(pn.seen)), make([][]int32, len(rows))
	for i, r := range rows {
		copy(seen[i*pn.V:(i+1)*pn.V], pn.seen[r*pn.V:])
		ids[i] = slices.Clone(pn.ids[r])
	}
	pn.seen, pn.ids = seen, ids
}

// apply scales, in logits [B, V], the logit of each id in each row not
// done, in float32 as transformers does: divided by the penalty where it
// is ≥ 0, multiplied where it is below.
func (pn *penalty) apply(logits []float32, done []bool) {
	if pn == nil {
		return
	}
	for b, ids := range pn.ids {
		if done[b] {
			continue
		}
		row := logits[b*pn.V : (b+1)*pn.V]
		for _, id := range ids {
			if row[id] < 0 {
				row[id] *= pn.by
			} else {
				row[id] /= pn.by
			}
		}
	}
}

// nGrams applies Sampling.NoRepeatNGram: each row's tokens, and for each
// run of n-1 of them the tokens that have followed it.
type nGrams struct {
	n      int
	tokens [][]int64
	next   []map[string][]int64 // row b: the key of n-1 tokens → the tokens after them
}

// newNGrams returns the n-gram ban over the prompts in ids [B, T] (row b's
// at spans[b]; nil spans take every row whole), or nil for n = 0.
func newNGrams(n int, ids []int64, B, T int, spans []Span) *nGrams {
	if n == 0 {
		return nil
	}
	g := &nGrams{n: n, tokens: make([][]int64, B), next: make([]map[string][]int64, B)}
	for b := range B {
		g.next[b] = map[string][]int64{}
		for _, id := range prompt(ids, T, spans, b) {
			g.add(b, id)
		}
	}
	return g
}

// key names a run of tokens.
func key(run []int64) string { return fmt.Sprint(run) }

// add appends id to row b, and the n-gram it closes.
func (g *nGrams) add(b int, id int64) {
	if g == nil {
		return
	}
	g.tokens[b] = append(g.tokens[b], id)
	if t := g.tokens[b]; len(t) >= g.n {
		k := key(t[len(t)-g.n : len(t)-1])
		g.next[b][k] = append(g.next[b][k], id)
	}
}

// reorder makes row i hold what row rows[i] held (beam search's beams).
func (g *nGrams) reorder(rows []int) {
	if g == nil {
		return
	}
	tokens, next := make([][]int64, len(rows)), make([]map[string][]int64, len(rows))
	for i, r := range rows {
		tokens[i] = slices.Clone(g.tokens[r])
		next[i] = make(map[string][]int64, len(g.next[r]))
		for k, v := range g.next[r] {
			next[i][k] = slices.Clone(v)
		}
	}
	g.tokens, g.next = tokens, next
}

// ban sets, in logits [B, V], the logit of each token that would close an
// n-gram its row already holds to -Inf, in every row not done.
func (g *nGrams) ban(logits []float32, done []bool) {
	if g == nil {
		return
	}
	V := len(logits) / len(g.tokens)
	for b, t := range g.tokens {
		if done[b] || len(t) < g.n-1 {
			continue
		}
		for _, id := range g.next[b][key(t[len(t)-g.n+1:])] {
			logits[b*V+int(id)] = float32(math.Inf(-1))
		}
	}
}
