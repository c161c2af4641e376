package mambago

import (
	"math"
	"slices"
	"time"

	"github.com/mambago/mambago/mambago/engine"
)

// SequenceBias is one of transformers' sequence_bias entries: Bias is added
// to the logit of the last of Tokens wherever a row's tokens end with the
// others (always, for one token). Bias must be finite here (Banned bans).
type SequenceBias = engine.SequenceBias

// Processors are transformers' logits processors past the repetition
// penalty, the n-gram ban and the minimum length, for Sampling and Beams.
// The zero value has none. A row's tokens, for Biases and Banned, are its
// prompt's (its span's, as for the repetition penalty) and its new ones.
// Generate applies them to the first new token on the host and, on the
// CUDA engine, to the rest on the device (engine.Processing), where the
// draw is made there too; so does beam search (beam sampling too where
// only each row's top_k come back: BeamSearch).
type Processors struct {
	// Biases are transformers' sequence_bias: each entry whose sequence
	// the next token would complete adds its bias to that token's logit
	// (entries ending in the same token add up).
	Biases []SequenceBias
	// Banned are transformers' bad_words_ids: sequences a row may not
	// complete. The next token's logit is -Inf wherever it would.
	Banned [][]int64
	// Suppress ids have logits of -Inf at every step (suppress_tokens),
	// BeginSuppress ids at the first new token (begin_suppress_tokens).
	Suppress, BeginSuppress []int64
	// ForcedBOS, as transformers' forced_bos_token_id, does the same at
	// the first new token of a one-token prompt (T = 1); the
	// begin-suppressed ids then wait for the second.
	ForcedBOS []int64
	// ForcedEOS, as transformers' forced_eos_token_id: at the last new
	// token a call may take (its maxNew-th), every logit is -Inf but
	// these ids', which are 0.
	ForcedEOS []int64
	// Decay, as transformers' exponential_decay_length_penalty, raises
	// the eos ids' logits once Decay.Start tokens are new.
	Decay LengthDecay
	// Deadline, where not zero, ends the generation once a token is taken
	// after it (transformers' max_time, from the call's start): the tokens
	// so far are returned, without an error. At least one is taken.
	Deadline time.Time
	// Stop are transformers' stop_strings: a row ends with the token that
	// completes one in its text. They change no logits.
	Stop StopStrings
}

// LengthDecay is transformers' exponential_decay_length_penalty: at new
// token n past Start, each eos id's finite logit s becomes
// s + |s|·(Factor^(n-Start) - 1). The zero value (Factor 0) has none.
type LengthDecay struct {
	Start  int
	Factor float64 // > 0; 0 for none
}

// processes reports whether p changes any logits.
func (p Processors) processes() bool {
	return len(p.Biases)+len(p.Banned)+len(p.Suppress)+len(p.BeginSuppress)+len(p.ForcedBOS)+len(p.ForcedEOS) > 0 ||
		p.Decay.Factor != 0
}

// late reports whether the deadline, if any, has passed.
func (p Processors) late() bool {
	return !p.Deadline.IsZero() && time.Now().After(p.Deadline)
}

// check reports an empty sequence, a negative id or a bias that is not
// finite.
func (p Processors) check() error {
	if d := p.Decay; d.Factor != 0 && !(d.Factor > 0 && d.Factor < math.Inf(1) && d.Start >= 0) {
		return engine.Invalid("exponential decay length penalty (%d, %v): want a start ≥ 0 and a finite factor > 0",
			d.Start, d.Factor)
	}
	if err := p.Stop.check(); err != nil {
		return err
	}
	for _, b := range p.Biases {
		if math.IsNaN(float64(b.Bias)) || math.IsInf(float64(b.Bias), 0) {
			return engine.Invalid("sequence bias %v for %v, want finite (ban a sequence with bad words)", b.Bias, b.Tokens)
		}
	}
	for _, seq := range p.sequences() {
		if len(seq.ids) == 0 {
			return engine.Invalid("%s: an empty sequence", seq.what)
		}
		for _, id := range seq.ids {
			if id < 0 {
				return engine.Invalid("%s %v: id %d, want ≥ 0", seq.what, seq.ids, id)
			}
		}
	}
	return nil
}

// checkFor reports an id outside a vocabulary of V, and forced eos ids that
// are all suppressed at the last of maxNew new tokens, which would leave
// no token to take there (transformers refuses them too).
func (p Processors) checkFor(V, maxNew int) error {
	for _, seq := range p.sequences() {
		for _, id := range seq.ids {
			if id >= int64(V) {
				return engine.Invalid("%s %v: id %d is outside the vocabulary [0, %d)", seq.what, seq.ids, id, V)
			}
		}
	}
	// At the last new token the suppressed ids are -Inf, and the
	// begin-suppressed ones where it is the first; a forced bos comes
	// before the begin-suppressed ids.
	atLast := slices.Clone(p.Suppress)
	if maxNew == 1 {
		atLast = append(atLast, p.BeginSuppress...)
	}
	for _, forced := range []struct {
		what            string
		ids, suppressed []int64
	}{{"bos", p.ForcedBOS, p.Suppress}, {"eos", p.ForcedEOS, atLast}} {
		if len(forced.ids) > 0 && !slices.ContainsFunc(forced.ids, func(id int64) bool { return !slices.Contains(forced.suppressed, id) }) {
			return engine.Invalid("every forced %s id %v is suppressed where it is forced, which leaves no token to take",
				forced.what, forced.ids)
		}
	}
	return nil
}

// named is a sequence of ids and the setting it comes from.
type named struct {
	what string
	ids  []int64
}

// sequences returns every id sequence p holds, named for errors.
func (p Processors) sequences() []named {
	var all []named
	for _, b := range p.Biases {
		all = append(all, named{"sequence bias", b.Tokens})
	}
	for _, ids := range p.Banned {
		all = append(all, named{"bad words", ids})
	}
	for _, set := range []named{{"suppress_tokens", p.Suppress}, {"begin_suppress_tokens", p.BeginSuppress},
		{"forced bos ids", p.ForcedBOS}, {"forced eos ids", p.ForcedEOS}} {
		for _, id := range set.ids {
			all = append(all, named{set.what, []int64{id}})
		}
	}
	return all
}

// processing is a generation's logits processors over its rows' tokens,
// applied in transformers' order: the sequence biases, the repetition
// penalty, the n-gram ban, the banned sequences, the minimum length, the
// forced bos and eos, the length decay, the suppressed ids. The banned
// sequences go with the biases, as biases of -Inf: a -Inf stays one
// through the penalty, the n-gram ban and the minimum length, so the
// logits are those of transformers' order.
type processing struct {
	pen    *penalty
	grams  *nGrams
	biases *sequenceBias // Biases, then Banned as biases of -Inf
	stop   *stopTexts    // Stop
	p      Processors
	eos    []int64 // the ids that end a row
	minNew int
	first  bool // ForcedBOS applies at step 0: the prompt is one token
	begin  int  // the step BeginSuppress applies at: 1 after a forced bos, else 0
	last   int  // the step ForcedEOS applies at
}

// newProcessing returns the processors of s over the prompts in ids [B, T]
// (row b's at spans[b]; nil spans take every row whole) for up to maxNew
// new tokens of a vocabulary of V.
func newProcessing(s Sampling, ids []int64, B, T int, spans []Span, V, maxNew int) *processing {
	biases := slices.Clone(s.Biases)
	for _, seq := range s.Banned {
		biases = append(biases, SequenceBias{Tokens: seq, Bias: float32(math.Inf(-1))})
	}
	pr := &processing{
		pen:    newPenalty(s.RepetitionPenalty, ids, B, T, spans, V),
		grams:  newNGrams(s.NoRepeatNGram, ids, B, T, spans),
		biases: newSequenceBias(biases, ids, B, T, spans),
		stop:   newStopTexts(s.Stop, ids, B, T, spans),
		p:      s.Processors,
		eos:    s.endIDs(),
		minNew: s.MinNew,
		first:  T == 1,
		last:   maxNew - 1,
	}
	if pr.first && len(s.ForcedBOS) > 0 {
		pr.begin = 1
	}
	return pr
}

// apply processes the logits [B, V] of new token step, in every row not
// done.
func (pr *processing) apply(logits []float32, V int, done []bool, step int) {
	pr.biases.apply(logits, V, done)
	pr.pen.apply(logits, done)
	pr.grams.ban(logits, done)
	if step < pr.minNew {
		banIDs(logits, V, pr.eos)
	}
	if step == 0 && pr.first {
		force(logits, V, done, pr.p.ForcedBOS)
	}
	if step == pr.last {
		force(logits, V, done, pr.p.ForcedEOS)
	}
	if d := pr.p.Decay; d.Factor != 0 && step > d.Start {
		by := float32(math.Pow(d.Factor, float64(step-d.Start)) - 1)
		for b := range len(logits) / V {
			for _, id := range pr.eos {
				if s := logits[b*V+int(id)]; !done[b] && !math.IsInf(float64(s), 0) {
					logits[b*V+int(id)] = s + float32(float32(math.Abs(float64(s)))*by) // rounded, not fused: the kernel's bits
				}
			}
		}
	}
	banIDs(logits, V, pr.p.Suppress)
	if step == pr.begin {
		banIDs(logits, V, pr.p.BeginSuppress)
	}
}

// onDevice returns what pr does to the logits of B rows after the first
// new token, for a ProcessingDecoder's queued steps: its step j draws new
// token j + 1 of the rows whose tokens pr holds now.
func (pr *processing) onDevice(B int) engine.Processing {
	p := engine.Processing{Penalty: pr.pen.factor(), Seen: pr.pen.rows(B), EOS: pr.eos, BanEOS: max(pr.minNew-1, 0),
		ForcedAt: -1, Suppress: pr.p.Suppress, BeginSuppress: pr.p.BeginSuppress, BeginAt: pr.begin - 1}
	if sb := pr.biases; sb != nil {
		p.Biases, p.Tails = slices.Concat(sb.single, sb.multi), sb.rows
	}
	if g := pr.grams; g != nil {
		p.NGram, p.History, p.Steps = g.n, g.tokens, max(pr.last, 0)
	}
	if len(pr.p.ForcedEOS) > 0 {
		p.Forced, p.ForcedAt = pr.p.ForcedEOS, pr.last-1
	}
	if d := pr.p.Decay; d.Factor != 0 {
		p.Decay = make([]float32, max(pr.last, 0))
		for j := range p.Decay {
			if n := j + 1; n > d.Start { // as apply computes it at step n
				p.Decay[j] = float32(math.Pow(d.Factor, float64(n-d.Start)) - 1)
			}
		}
	}
	return p
}

// handOver returns onDevice(B) for a decoder that keeps the rows' tokens
// from here on, and drops pr's own copies of them: pr then ends rows
// (ends) but processes no more logits.
func (pr *processing) handOver(B int) engine.Processing {
	p := pr.onDevice(B)
	pr.pen, pr.grams, pr.biases = nil, nil, nil
	return p
}

// force sets, in each row of logits [B, V] not done, every logit to -Inf
// but those of ids, which are 0 (none for no ids).
func force(logits []float32, V int, done []bool, ids []int64) {
	if len(ids) == 0 {
		return
	}
	for b := range len(logits) / V {
		if !done[b] {
			row := logits[b*V : (b+1)*V]
			for v := range row {
				row[v] = float32(math.Inf(-1))
			}
			for _, id := range ids {
				row[id] = 0
			}
		}
	}
}

// add appends id to row b.
func (pr *processing) add(b int, id int64) {
	pr.pen.add(b, id)
	pr.grams.add(b, id)
	pr.biases.add(b, id)
	pr.stop.add(b, id)
}

// ends reports whether row b ends on taking id under the stop strings.
func (pr *processing) ends(b int, id int64) bool { return pr.stop.hits(b, id) }

// reorder makes row i hold what row rows[i] held (beam search's beams).
func (pr *processing) reorder(rows []int) {
	pr.pen.reorder(rows)
	pr.grams.reorder(rows)
	pr.biases.reorder(rows)
	pr.stop.reorder(rows)
}

// tails keeps each row's last keep tokens (fewer at first), for the
// processors that read only a row's last tokens.
type tails struct {
	keep int
	rows [][]int64
}

// newTails returns the last keep tokens of each of rows.
func newTails(keep int, rows [][]int64) tails {
	t := tails{keep: keep, rows: make([][]int64, len(rows))}
	for b, row := range rows {
		t.rows[b] = slices.Clone(row[max(0, len(row)-keep):])
	}
	return t
}

// add appends id to row b.
func (t *tails) add(b int, id int64) {
	if t.keep == 0 {
		return
	}
	r := append(t.rows[b], id)
	if len(r) > t.keep {
		r = append(r[:0], r[len(r)-t.keep:]...)
	}
	t.rows[b] = r
}

// reorder makes row i hold what row rows[i] held.
func (t *tails) reorder(rows []int) {
	kept := make([][]int64, len(rows))
	for i, r := range rows {
		kept[i] = slices.Clone(t.rows[r])
	}
	t.rows = kept
}

// sequenceBias applies sequence biases: the one-token ones to every row,
// the longer ones where a row's last tokens match all but their last.
type sequenceBias struct {
	single []SequenceBias
	multi  []SequenceBias
	tails  // each row's last tokens: as many as the longest prefix
}

// newSequenceBias returns the biases over the prompts in ids [B, T] (row
// b's at spans[b]), or nil for none.
func newSequenceBias(biases []SequenceBias, ids []int64, B, T int, spans []Span) *sequenceBias {
	if len(biases) == 0 {
		return nil
	}
	sb := &sequenceBias{}
	keep := 0
	for _, b := range biases {
		if len(b.Tokens) == 1 {
			sb.single = append(sb.single, b)
		} else {
			sb.multi = append(sb.multi, b)
			keep = max(keep, len(b.Tokens)-1)
		}
	}
	rows := make([][]int64, B)
	for b := range B {
		rows[b] = prompt(ids, T, spans, b)
	}
	sb.tails = newTails(keep, rows)
	return sb
}

// add appends id to row b.
func (sb *sequenceBias) add(b int, id int64) {
	if sb != nil {
		sb.tails.add(b, id)
	}
}

// reorder makes row i hold what row rows[i] held.
func (sb *sequenceBias) reorder(rows []int) {
	if sb != nil {
		sb.tails.reorder(rows)
	}
}

// apply adds, in logits [B, V], each bias whose sequence the next token
// would complete, in every row not done. As transformers does, a token's
// biases are summed (in float32, the one-token one first) before they are
// added to its logit.
func (sb *sequenceBias) apply(logits []float32, V int, done []bool) {
	if sb == nil {
		return
	}
	sum := map[int64]float32{}
	var order []int64
	addTo := func(id int64, bias float32) {
		if _, ok := sum[id]; !ok {
			order = append(order, id)
		}
		sum[id] += bias
	}
	for b, t := range sb.rows {
		if done[b] {
			continue
		}
		clear(sum)
		order = order[:0]
		for _, s := range sb.single {
			addTo(s.Tokens[0], s.Bias)
		}
		for _, s := range sb.multi {
			n := len(s.Tokens) - 1
			if len(t) >= n && slices.Equal(t[len(t)-n:], s.Tokens[:n]) {
				addTo(s.Tokens[n], s.Bias)
			}
		}
		for _, id := range order {
			logits[b*V+int(id)] += sum[id]
		}
	}
}
