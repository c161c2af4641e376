package mambago_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mambago/mambago/mambago"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// hostDecoders is the CPU engine with decoders that keep the CUDA decoder's
// contract (engine.TopKDecoder, engine.TopKQueueDecoder) on the host, from
// Engine.Step's logits: TopK returns each row's k best in a shuffled order,
// TopP draws from the nucleus with the uniform it is given, QueueTopK from
// the k best as the host's sampler does, and a queued step runs at once,
// its picks waiting in a queue. Generate's use of those
// entries runs here without a GPU. With nanRow ≥ 0 that row's logits hold
// NaN at every step. steps, where set, counts the steps its decoders ran;
// with unqueued its decoders hide the queue (and TopK), so that Generate
// takes its greedy, top-k and top-p steps one at a time. Its queued steps
// process their logits as Process asks (engine.ProcessingDecoder), as
// process_rows_f32 does.
type hostDecoders struct {
	engine.Engine
	nanRow    int
	steps     *int
	unqueued  bool
	processed *int // where set, counts the Process calls
	ranked    *int // where set, counts the TopK calls
	queueMax  int  // TopKQueueMax; 0 for 1024
}

// NewDecoder returns a decoder for st.
func (e hostDecoders) NewDecoder(st engine.State, steps int) (engine.Decoder, error) {
	d := &hostEntries{e: e, st: st}
	if e.unqueued {
		return struct{ engine.TopPDecoder }{d}, nil
	}
	return d, nil
}

type hostEntries struct {
	e      hostDecoders
	st     engine.State
	logits []float32
	ids    []int32
	vals   []float32
	queued [][]int64 // the queued steps' picks, oldest first
	last   []int64   // the last queued step's picks

	proc    *engine.Processing // Process's, or nil
	step    int                // the next queued step's number in proc
	seen    []map[int64]bool   // each row's tokens, for proc.Penalty
	tails   [][]int64          // each row's tokens, for proc.Biases
	history [][]int64          // each row's tokens, for proc.NGram
}

// Process keeps p for the steps queued after it.
func (d *hostEntries) Process(p engine.Processing) error {
	if d.e.processed != nil {
		*d.e.processed++
	}
	d.proc, d.step = &p, 0
	d.seen, d.tails = make([]map[int64]bool, len(p.Seen)), make([][]int64, len(p.Tails))
	for b, row := range p.Seen {
		d.seen[b] = map[int64]bool{}
		for _, id := range row {
			d.seen[b][int64(id)] = true
		}
	}
	for b, row := range p.Tails {
		d.tails[b] = slices.Clone(row)
	}
	d.history = make([][]int64, len(p.History))
	for b, row := range p.History {
		d.history[b] = slices.Clone(row)
	}
	return nil
}

// reorder makes row i of the processors' tokens hold what row rows[i] held
// (nil: none moves).
func (d *hostEntries) reorder(rows []int) {
	if rows == nil {
		return
	}
	seen, tails, history := slices.Clone(d.seen), slices.Clone(d.tails), slices.Clone(d.history)
	for i, r := range rows {
		if len(seen) > 0 {
			seen[i] = maps.Clone(d.seen[r])
		}
		if len(tails) > 0 {
			tails[i] = slices.Clone(d.tails[r])
		}
		if len(history) > 0 {
			history[i] = slices.Clone(d.history[r])
		}
	}
	d.seen, d.tails, d.history = seen, tails, history
}

// process applies d.proc to a queued step's logits [B, V], fed ids: the
// contract of engine.Processing, written out once more from its words.
func (d *hostEntries) process(fed []int64, logits []float32) {
	p, j, V := d.proc, d.step, d.e.Config().Vocab
	d.step++
	inf := float32(math.Inf(-1))
	for b, id := range fed {
		row := logits[b*V : (b+1)*V]
		if p.Penalty != 1 {
			d.seen[b][id] = true
		}
		if len(d.tails) > 0 {
			d.tails[b] = append(d.tails[b], id)
		}
		if p.NGram > 0 {
			d.history[b] = append(d.history[b], id)
		}
		sums, order := map[int64]float32{}, []int64(nil)
		for _, single := range []bool{true, false} {
			for _, bias := range p.Biases {
				k := len(bias.Tokens) - 1
				if (k == 0) != single || k > 0 && (len(d.tails[b]) < k || !slices.Equal(d.tails[b][len(d.tails[b])-k:], bias.Tokens[:k])) {
					continue
				}
				if _, ok := sums[bias.Tokens[k]]; !ok {
					order = append(order, bias.Tokens[k])
				}
				sums[bias.Tokens[k]] += bias.Bias
			}
		}
		for _, id := range order {
			row[id] += sums[id]
		}
		for v := range row {
			if p.Penalty != 1 && d.seen[b][int64(v)] {
				if row[v] < 0 {
					row[v] *= p.Penalty
				} else {
					row[v] /= p.Penalty
				}
			}
		}
		if k := p.NGram; k > 0 { // each n-gram's last token, after a run of its first n-1
			h := d.history[b]
			for i := 0; i+k <= len(h); i++ {
				if slices.Equal(h[i:i+k-1], h[len(h)-k+1:]) {
					row[h[i+k-1]] = inf
				}
			}
		}
		for _, id := range p.EOS {
			if j < p.BanEOS {
				row[id] = inf
			}
		}
		if j == p.ForcedAt {
			for v := range row {
				row[v] = inf
			}
			for _, id := range p.Forced {
				row[id] = 0
			}
		}
		for _, id := range p.EOS {
			if s := row[id]; j < len(p.Decay) && p.Decay[j] != 0 && !math.IsInf(float64(s), 0) && s == s {
				row[id] = s + float32(float32(math.Abs(float64(s)))*p.Decay[j])
			}
		}
		for _, id := range p.Suppress {
			row[id] = inf
		}
		for _, id := range p.BeginSuppress {
			if j == p.BeginAt {
				row[id] = inf
			}
		}
	}
}

func (d *hostEntries) Logits(ids []int64) ([]float32, error) {
	V := d.e.Config().Vocab
	if d.logits == nil {
		d.logits = make([]float32, len(ids)*V)
	}
	if d.e.steps != nil {
		*d.e.steps++
	}
	if err := d.e.Step(d.st, ids, d.logits); err != nil {
		return nil, err
	}
	if d.e.nanRow >= 0 {
		d.logits[d.e.nanRow*V+V/2] = float32(math.NaN())
	}
	return d.logits, nil
}

// rows runs a step and calls f with each row's logits, or nil for a row
// that holds NaN.
func (d *hostEntries) rows(ids []int64, f func(b int, row []float32)) error {
	return d.processedRows(ids, false, f)
}

// processedRows is rows, the logits processed first where process is set
// and Process asked for it.
func (d *hostEntries) processedRows(ids []int64, process bool, f func(b int, row []float32)) error {
	logits, err := d.Logits(ids)
	if err != nil {
		return err
	}
	if process && d.proc != nil {
		d.process(ids, logits)
	}
	V := d.e.Config().Vocab
	for b := range ids {
		row := logits[b*V : (b+1)*V]
		if slices.ContainsFunc(row, func(v float32) bool { return v != v }) {
			row = nil
		}
		f(b, row)
	}
	return nil
}

func (d *hostEntries) Greedy(ids, next []int64) error {
	var nan error
	err := d.rows(ids, func(b int, row []float32) {
		if row == nil {
			nan = errors.New("NaN")
			return
		}
		next[b] = fixture.Argmax(row)
	})
	return errors.Join(err, nan)
}

func (d *hostEntries) TopK(ids []int64, k int) ([]int32, []float32, error) {
	if d.e.ranked != nil {
		*d.e.ranked++
	}
	d.ids, d.vals = d.ids[:0], d.vals[:0]
	err := d.processedRows(ids, true, func(b int, row []float32) {
		if row == nil {
			for range k {
				d.ids, d.vals = append(d.ids, -1), append(d.vals, 0)
			}
			return
		}
		best := rankIDs(row)[:k]
		rand.Shuffle(k, func(i, j int) { best[i], best[j] = best[j], best[i] })
		for _, id := range best {
			d.ids, d.vals = append(d.ids, int32(id)), append(d.vals, row[id])
		}
	})
	return d.ids, d.vals, err
}

// TopP draws from the nucleus walked best first (the CUDA kernel walks it
// by id: the same odds).
func (d *hostEntries) TopP(ids []int64, temperature, p, minP float64, uniforms []float64, next []int64) error {
	return d.rows(ids, func(b int, row []float32) { next[b] = drawNucleus(row, temperature, p, minP, uniforms[b]) })
}

// drawNucleus draws from row's nucleus at temperature, p and minP with the
// uniform u, walked best first; -1 for a nil row (NaN).
func drawNucleus(row []float32, temperature, p, minP, u float64) int64 {
	if row == nil {
		return -1
	}
	nucleus, w := nucleusOf(row, temperature, p, minP)
	var mass float64
	for _, x := range w {
		mass += x
	}
	r := u * mass
	for n, id := range nucleus {
		if r -= w[n]; r < 0 {
			return int64(id)
		}
	}
	return int64(nucleus[len(nucleus)-1])
}

func (d *hostEntries) QueueDepth() int { return 2 }

func (d *hostEntries) QueueGreedy(ids []int64) error {
	return d.queue(ids, func(b int, row []float32) int64 {
		if row == nil {
			return -1
		}
		return fixture.Argmax(row)
	})
}

func (d *hostEntries) QueueTopP(ids []int64, temperature, p, minP float64, uniforms []float64) error {
	u := slices.Clone(uniforms) // the CUDA decoder copies them before it returns
	return d.queue(ids, func(b int, row []float32) int64 { return drawNucleus(row, temperature, p, minP, u[b]) })
}

func (d *hostEntries) TopKQueueMax() int {
	if d.e.queueMax > 0 {
		return d.e.queueMax
	}
	return 1024
}

// QueueTopK draws as the host's sampler does from each row's k best with
// the uniform it is given, as the CUDA decoder's topk_draw_f32 does.
func (d *hostEntries) QueueTopK(ids []int64, k int, temperature, p, minP float64, uniforms []float64) error {
	u := slices.Clone(uniforms)
	s := mambago.Sampling{Temperature: temperature, TopK: k, TopP: p, MinP: minP}
	return d.queue(ids, func(b int, row []float32) int64 {
		if row == nil {
			return -1
		}
		return mambago.DrawTopK(row, s, u[b])
	})
}

// queue runs a step at once on ids, or on nil the last step's picks (-1,
// NaN's pick, clamped to 0 as the device clamps ids), and queues its picks.
func (d *hostEntries) queue(ids []int64, pick func(b int, row []float32) int64) error {
	if len(d.queued) == d.QueueDepth() {
		return errors.New("queue full")
	}
	if ids == nil {
		if d.last == nil {
			return errors.New("no picks to feed")
		}
		ids = slices.Clone(d.last)
		for b := range ids {
			ids[b] = max(ids[b], 0)
		}
	}
	picks := make([]int64, len(ids))
	if err := d.processedRows(ids, true, func(b int, row []float32) { picks[b] = pick(b, row) }); err != nil {
		return err
	}
	d.queued, d.last = append(d.queued, picks), picks
	return nil
}

func (d *hostEntries) Picks(next []int64) error {
	if len(d.queued) == 0 {
		return errors.New("no step queued")
	}
	copy(next, d.queued[0])
	d.queued = d.queued[1:]
	return nil
}

func (d *hostEntries) Close() error { return nil }

// rankIDs returns row's ids best first (the lower id first among equals).
func rankIDs(row []float32) []int {
	ids := make([]int, len(row))
	for i := range ids {
		ids[i] = i
	}
	slices.SortStableFunc(ids, func(a, b int) int { return cmp.Compare(row[b], row[a]) })
	return ids
}

// nucleusOf returns row's nucleus at temp and topP, the shortest best-first
// run of ids whose weight, exp((logit - max) / temp), reaches topP of the
// row's, and each one's weight.
func nucleusOf(row []float32, temp, topP, minP float64) (ids []int, w []float64) {
	order := rankIDs(row)
	top := float64(row[order[0]])
	weight := func(v float32) float64 { return math.Exp((float64(v) - top) / temp) }
	var total, mass float64
	for _, v := range row {
		total += weight(v)
	}
	for _, id := range order {
		ids, w = append(ids, id), append(w, weight(row[id]))
		if mass += w[len(w)-1]; mass >= topP*total {
			break
		}
	}
	for len(w) > 1 && w[len(w)-1] < minP { // the best weighs 1
		ids, w = ids[:len(ids)-1], w[:len(w)-1]
	}
	return ids, w
}

// TestGenerateThroughDecoderEntries runs Generate on decoders that offer
// TopK and TopP (hostDecoders, on the CPU engine) against Generate on the
// engine alone: greedy and top-k tokens must be the same, EOS and stopped
// rows included; top-p tokens must repeat for a seed and change with it;
// a row that stops early must take at most one queued step past its last
// token; queued steps give the tokens of steps taken one at a time; logits
// with NaN in a running row fail naming that row.
func TestGenerateThroughDecoderEntries(t *testing.T) {
	plain := openBase(t)
	wrapped := &mambago.Model{Engine: hostDecoders{Engine: plain.Engine, nanRow: -1}}
	const B, T, n = 3, 4, 12
	V := plain.Config().Vocab
	ids := make([]int64, B*T)
	for i := range ids {
		ids[i] = rand.Int64N(int64(V))
	}
	first, _, err := plain.Generate(ids, B, T, n, mambago.Sampling{TopP: 1, EOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	eos := first[n+3] // row 1 stops at its fourth token
	for _, s := range []mambago.Sampling{
		{TopP: 1, EOS: -1},
		{TopP: 1, EOS: eos},
		{Temperature: 0.8, TopK: 1, TopP: 1, Seed: 1, EOS: -1},
		{Temperature: 1.2, TopK: 5, TopP: 1, Seed: 2, EOS: -1},
		{Temperature: 1.5, TopK: 20, TopP: 0.9, Seed: 3, EOS: eos},
		{TopP: 1, EOS: eos, MoreEOS: []int64{first[2*n+5]}}, // row 2 stops by its sixth token too
		{Temperature: 1.4, TopK: 30, TopP: 0.95, MinP: 0.1, Seed: 6, EOS: eos},
		{Temperature: 1.4, TopK: 30, TopP: 1, MinP: 1, Seed: 6, EOS: -1},                 // only the best: greedy's tokens
		{Temperature: 1.4, TopP: 0.9, MinP: 1, Seed: 6, EOS: -1},                         // from the nucleus likewise
		{Temperature: 1.4, TopP: 0.9, MinP: 1, Seed: 6, EOS: -1, RepetitionPenalty: 1.3}, // processed first
	} {
		want, wantN := mustGenerate(t, plain, ids, B, T, n, s)
		got, gotN := mustGenerate(t, wrapped, ids, B, T, n, s)
		if gotN != wantN || !slices.Equal(got, want) {
			t.Errorf("%+v: through the decoder's entries %v (n=%d), on the engine %v (n=%d)", s, got, gotN, want, wantN)
		}
	}
	nucleus := func(seed uint64) []int64 {
		got, _, err := wrapped.Generate(ids, B, T, n, mambago.Sampling{Temperature: 1.5, TopP: 0.9, Seed: seed, EOS: -1})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if a, b, c := nucleus(7), nucleus(7), nucleus(8); !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Errorf("top-p: seed 7 gave %v then %v; seed 8 %v", a, b, c)
	}
	// Queued and one step at a time, with rows that stop early: the same
	// tokens (each row's draws in the same order, however far ahead).
	oneByOne := &mambago.Model{Engine: hostDecoders{Engine: plain.Engine, nanRow: -1, unqueued: true}}
	for _, s := range []mambago.Sampling{{TopP: 1, EOS: eos}, {TopP: 1, EOS: eos, MoreEOS: []int64{first[2*n+5]}},
		{Temperature: 1.5, TopP: 0.9, Seed: 5, EOS: -1}} {
		if s.EOS < 0 { // the second token of row 1's draws
			toks, _ := mustGenerate(t, wrapped, ids, B, T, n, s)
			s.EOS = toks[n+1]
		}
		queued, qn := mustGenerate(t, wrapped, ids, B, T, n, s)
		single, sn := mustGenerate(t, oneByOne, ids, B, T, n, s)
		if qn != sn || !slices.Equal(queued, single) {
			t.Errorf("%+v: queued %v (n=%d), one step at a time %v (n=%d)", s, queued, qn, single, sn)
		}
	}
	// One row that stops at its fourth token or later: the same tokens,
	// and the queue runs at most one step past the last.
	steps := 0
	counted := &mambago.Model{Engine: hostDecoders{Engine: plain.Engine, nanRow: -1, steps: &steps}}
	for _, s := range []mambago.Sampling{{TopP: 1, EOS: -1}, {Temperature: 1.5, TopP: 0.9, Seed: 4, EOS: -1}} {
		whole, _ := mustGenerate(t, counted, ids[:T], 1, T, n, s)
		k := 3 // the first token from the fourth on that is new
		for k < n && slices.Index(whole, whole[k]) < k {
			k++
		}
		if k == n {
			t.Fatalf("%+v: %v repeats its first three tokens", s, whole)
		}
		s.EOS = whole[k]
		want := whole[:k+1]
		steps = 0
		got, gotN := mustGenerate(t, counted, ids[:T], 1, T, n, s)
		if !slices.Equal(got, want) || gotN != len(want) || steps > gotN {
			t.Errorf("%+v: %v (n=%d) in %d steps, want %v in at most %d", s, got, gotN, steps, want, len(want))
		}
	}
	withNaN := &mambago.Model{Engine: hostDecoders{Engine: plain.Engine, nanRow: 1}}
	for _, s := range []mambago.Sampling{
		{TopP: 1, EOS: -1},
		{Temperature: 1, TopK: 5, TopP: 1, EOS: -1},
		{Temperature: 1, TopP: 0.9, EOS: -1},
	} {
		if _, _, err := withNaN.Generate(ids, B, T, n, s); err == nil || !strings.Contains(err.Error(), "sequence 1") ||
			!strings.Contains(err.Error(), "NaN") {
			t.Errorf("%+v with NaN in row 1's logits: err = %v", s, err)
		}
	}
}

// processorCases returns settings of every logits processor, alone and all
// together, for prompts ids [B, T] (B ≥ 3) that greedy decoding continues
// with free [B, n] (n ≥ 7), in a vocabulary of V: one-token and longer
// bans (one that greedy decoding completes), biases of one, two and three
// tokens with three that raise one token (their sum's order), suppressed
// and begin-suppressed ids, forced eos ids, a length decay, a minimum
// length, n-gram bans of 1 to 3, and all of them with the penalty.
func processorCases(ids, free []int64, T, n int, V int64) map[string]mambago.Sampling {
	r := func() int64 { return rand.Int64N(V) }
	all := mambago.Processors{
		Banned: [][]int64{{free[0]}, slices.Clone(free[4:6]), {r(), r(), r()}},
		Biases: []mambago.SequenceBias{{Tokens: []int64{r()}, Bias: 3}, {Tokens: []int64{ids[T-1], 13}, Bias: 1e4},
			{Tokens: []int64{free[1], free[2], r()}, Bias: -2.5}, {Tokens: []int64{free[2], 13}, Bias: 0.7},
			{Tokens: []int64{13}, Bias: 0.3}},
		Suppress:      []int64{free[n+1], r()},
		BeginSuppress: []int64{free[n], free[2*n]},
		ForcedEOS:     []int64{7, 11},
		Decay:         mambago.LengthDecay{Start: 5, Factor: 1.6},
	}
	eos := free[2*n+6]
	return map[string]mambago.Sampling{
		"banned":     {EOS: -1, Processors: mambago.Processors{Banned: all.Banned}},
		"biases":     {EOS: -1, Processors: mambago.Processors{Biases: all.Biases}},
		"suppressed": {EOS: -1, Processors: mambago.Processors{Suppress: all.Suppress, BeginSuppress: all.BeginSuppress}},
		"forced eos": {EOS: -1, Processors: mambago.Processors{ForcedEOS: all.ForcedEOS}},
		"decay":      {EOS: eos, Processors: mambago.Processors{Decay: all.Decay}},
		"min new":    {EOS: free[4], MinNew: 4}, // row 0 may end at its fifth token, not before
		"1-grams":    {EOS: -1, NoRepeatNGram: 1},
		"2-grams":    {EOS: -1, NoRepeatNGram: 2},
		"3-grams":    {EOS: -1, NoRepeatNGram: 3},
		"all":        {EOS: eos, RepetitionPenalty: 1.3, MinNew: 4, NoRepeatNGram: 2, Processors: all},
	}
}

// forcedBOS returns a greedy sampling for one-token prompts [B, 1] under a
// forced bos, generating n tokens on m: the ids each row takes second
// without it begin-suppressed (they wait for the second token, after the
// forced one), and the bos then row 0's third token banned.
func forcedBOS(t *testing.T, m *mambago.Model, prompts []int64, n int) mambago.Sampling {
	t.Helper()
	B := len(prompts)
	s := mambago.Sampling{TopP: 1, EOS: -1, Processors: mambago.Processors{ForcedBOS: []int64{21}}}
	free, _ := mustGenerate(t, m, prompts, B, 1, n, s)
	for b := range B {
		s.BeginSuppress = append(s.BeginSuppress, free[b*n+1])
	}
	s.Banned = [][]int64{{21, free[2]}}
	return s
}

// processorSpans left-pads rows 0 and 1 of a batch of T ≥ 5 by 2 and 4.
func processorSpans(T int) []mambago.Span {
	return []mambago.Span{{Start: 2, Len: T - 2}, {Start: 4, Len: T - 4}, {Len: T}}
}

// TestProcessorsThroughDecoderEntries runs Generate under each logits
// processor (processorCases) on decoders that process their queued steps'
// logits, and their TopK steps', as Process asks (hostDecoders) against
// Generate on the engine alone, which processes them itself: the same
// tokens, greedy and sampled from the top 40, for fresh prompts,
// left-padded ones and one-token prompts under a forced bos, and one
// Process call each. Sampled under typical_p, or from more tokens than the
// queue's draw takes, every step after the first ranks its processed
// logits (TopK) for the host's draw.
func TestProcessorsThroughDecoderEntries(t *testing.T) {
	plain := openBase(t)
	processed, ranked := 0, 0
	wrapped := &mambago.Model{Engine: hostDecoders{Engine: plain.Engine, nanRow: -1, processed: &processed, ranked: &ranked,
		queueMax: 50}}
	const B, T, n = 3, 6, 14
	V := int64(plain.Config().Vocab)
	ids := randomIDs(plain, B*T)
	free, _ := mustGenerate(t, plain, ids, B, T, n, mambago.Sampling{TopP: 1, EOS: -1})
	check := func(what string, ids []int64, B, T int, spans []mambago.Span, s mambago.Sampling) {
		t.Helper()
		before, rankedBefore := processed, ranked
		got, gotN, errG := wrapped.GenerateSpans(context.Background(), ids, B, T, spans, n, s)
		want, wantN, errW := plain.GenerateSpans(context.Background(), ids, B, T, spans, n, s)
		if err := errors.Join(errG, errW); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if processed != before+1 {
			t.Errorf("%s: %d Process calls, want 1", what, processed-before)
		}
		if gotN != wantN || !slices.Equal(got, want) {
			t.Errorf("%s: through the decoder %v (n=%d), on the engine %v (n=%d)", what, got, gotN, want, wantN)
		}
		rankedSteps := 0
		if s.Warpers != (mambago.Warpers{}) || s.TopK > 50 {
			rankedSteps = gotN - 1
		}
		if ranked-rankedBefore != rankedSteps {
			t.Errorf("%s: %d TopK steps, want %d", what, ranked-rankedBefore, rankedSteps)
		}
	}
	for name, c := range processorCases(ids, free, T, n, V) {
		for _, draw := range []mambago.Sampling{{TopP: 1}, {Temperature: 1.3, TopK: 40, TopP: 0.95, Seed: 7},
			{Temperature: 1.6, TopK: 60, TopP: 1, MinP: 0.08, Seed: 8},
			{Temperature: 1.1, TopK: 40, TopP: 1, Seed: 9, Warpers: mambago.Warpers{TypicalP: 0.6, EtaCutoff: 0.02}}} {
			s := c
			s.Temperature, s.TopK, s.TopP, s.MinP, s.Seed, s.Warpers = draw.Temperature, draw.TopK, draw.TopP, draw.MinP,
				draw.Seed, draw.Warpers
			what := fmt.Sprintf("%s, temperature %v, top_k %d, min_p %v, %+v", name, s.Temperature, s.TopK, s.MinP, s.Warpers)
			check(what, ids, B, T, nil, s)
			check(what+", left-padded", ids, B, T, processorSpans(T), s)
		}
	}
	check("forced bos", ids[:B], B, 1, nil, forcedBOS(t, plain, ids[:B], n))
}

// mustGenerate is m.Generate(ids, B, T, n, s), failing the test on an error.
func mustGenerate(t *testing.T, m *mambago.Model, ids []int64, B, T, n int, s mambago.Sampling) ([]int64, int) {
	t.Helper()
	toks, got, err := m.Generate(ids, B, T, n, s)
	if err != nil {
		t.Fatal(err)
	}
	return toks, got
}

// TestGenerateQueueRandomRuns runs Generate on random batches, prompt and
// output lengths, EOS tokens and samplings through the host decoders with
// their queue and without: the same tokens and lengths (greedy: also the
// engine's own loop's), and the queue runs at most one step more than the
// tokens it returns need (n − 1), and none more where no row stopped early;
// one step at a time exactly that many.
func TestGenerateQueueRandomRuns(t *testing.T) {
	plain := openBase(t)
	V := plain.Config().Vocab
	for run := range 24 {
		B, T, n := 1+rand.IntN(4), 1+rand.IntN(6), 1+rand.IntN(14)
		ids := make([]int64, B*T)
		for i := range ids {
			ids[i] = rand.Int64N(int64(V))
		}
		s := mambago.Sampling{TopP: 1, EOS: -1}
		if run%2 == 1 {
			s = mambago.Sampling{Temperature: 0.5 + rand.Float64(), TopP: 0.5 + rand.Float64()/2, Seed: rand.Uint64(), EOS: -1}
		}
		var queuedSteps, singleSteps int
		queued := &mambago.Model{Engine: hostDecoders{Engine: plain.Engine, nanRow: -1, steps: &queuedSteps}}
		single := &mambago.Model{Engine: hostDecoders{Engine: plain.Engine, nanRow: -1, steps: &singleSteps, unqueued: true}}
		whole, _ := mustGenerate(t, queued, ids, B, T, n, s)
		if rand.IntN(3) > 0 { // most runs stop rows early: one of the tokens drawn as EOS
			s.EOS = whole[rand.IntN(len(whole))]
		}
		queuedSteps = 0
		got, gotN := mustGenerate(t, queued, ids, B, T, n, s)
		want, wantN := mustGenerate(t, single, ids, B, T, n, s)
		where := fmt.Sprintf("run %d (B=%d T=%d n=%d %+v)", run, B, T, n, s)
		if gotN != wantN || !slices.Equal(got, want) {
			t.Fatalf("%s: queued %v (n=%d), one step at a time %v (n=%d)", where, got, gotN, want, wantN)
		}
		need := max(gotN-1, 0) // steps the tokens need; the queue may run one more only where rows stopped early
		if queuedSteps < need || queuedSteps > need+1 || gotN == n && queuedSteps != need || singleSteps != need {
			t.Errorf("%s: %d tokens in %d steps queued, %d one at a time", where, gotN, queuedSteps, singleSteps)
		}
		if s.Temperature == 0 {
			engine, engineN := mustGenerate(t, plain, ids, B, T, n, s)
			if engineN != gotN || !slices.Equal(engine, got) {
				t.Errorf("%s: queued %v, the engine's loop %v", where, got, engine)
			}
		}
	}
}
