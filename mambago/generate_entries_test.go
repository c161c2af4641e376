package mambago_test

import (
	"cmp"
	"errors"
	"fmt"
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
// takes its greedy, top-k and top-p steps one at a time.
type hostDecoders struct {
	engine.Engine
	nanRow   int
	steps    *int
	unqueued bool
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
	logits, err := d.Logits(ids)
	if err != nil {
		return err
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
	d.ids, d.vals = d.ids[:0], d.vals[:0]
	err := d.rows(ids, func(b int, row []float32) {
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
func (d *hostEntries) TopP(ids []int64, temperature, p float64, uniforms []float64, next []int64) error {
	return d.rows(ids, func(b int, row []float32) { next[b] = drawNucleus(row, temperature, p, uniforms[b]) })
}

// drawNucleus draws from row's nucleus at temperature and p with the
// uniform u, walked best first; -1 for a nil row (NaN).
func drawNucleus(row []float32, temperature, p, u float64) int64 {
	if row == nil {
		return -1
	}
	nucleus, w := nucleusOf(row, temperature, p)
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

func (d *hostEntries) QueueTopP(ids []int64, temperature, p float64, uniforms []float64) error {
	u := slices.Clone(uniforms) // the CUDA decoder copies them before it returns
	return d.queue(ids, func(b int, row []float32) int64 { return drawNucleus(row, temperature, p, u[b]) })
}

func (d *hostEntries) TopKQueueMax() int { return 1024 }

// QueueTopK draws as the host's sampler does from each row's k best with
// the uniform it is given, as the CUDA decoder's topk_draw_f32 does.
func (d *hostEntries) QueueTopK(ids []int64, k int, temperature, p float64, uniforms []float64) error {
	u := slices.Clone(uniforms)
	s := mambago.Sampling{Temperature: temperature, TopK: k, TopP: p}
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
	if err := d.rows(ids, func(b int, row []float32) { picks[b] = pick(b, row) }); err != nil {
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
func nucleusOf(row []float32, temp, topP float64) (ids []int, w []float64) {
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
