package mambago_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/mambago"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/enginetest"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestPrefillSpansMatchesRows runs a padded batch, continuing from a carried
// state, and each row alone from the same state: outputs and final states
// agree, and the padding's outputs are zero.
func TestPrefillSpansMatchesRows(t *testing.T) {
	m := openBase(t)
	V := int64(m.Config().Vocab)
	rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
	const B, T, lead = 4, 13, 3
	ids := make([]int64, B*T)
	first := make([]int64, B*lead)
	for i := range ids {
		ids[i] = rng.Int64N(V)
	}
	for i := range first {
		first[i] = rng.Int64N(V)
	}
	for _, spans := range [][]mambago.Span{
		{{0, T}, {5, 8}, {0, 6}, {2, 1 + rng.IntN(T-2)}}, // whole, left, right, both: four lengths
		{{4, 9}, {0, 9}, {2, 9}, {3, 9}},                 // one length: one prefill on the batch's state
		{{1, 12}, {0, T}, {0, 13}, {0, T}},               // whole rows
	} {
		for _, one := range []bool{false, true} { // one prefill, and one a row length
			restore := mambago.SetOnePrefillPads(one)
			checkSpans(t, m, spans, ids, first, false)
			checkSpans(t, m, spans, ids, first, true)
			restore()
		}
	}
}

// checkSpans runs PrefillSpans on B rows of T ids after lead ids, or with
// start StartSpans, with each pool, against each row alone (after its lead
// ids, or with start from a new state).
func checkSpans(t *testing.T, m *mambago.Model, spans []mambago.Span, ids, first []int64, start bool) {
	cfg := m.Config()
	d := cfg.Hidden
	B := len(spans)
	T, lead := len(ids)/B, len(first)/B
	run := m.PrefillSpans
	if start {
		run = m.StartSpans
	}
	for _, pool := range []engine.Pool{engine.All, engine.Last, engine.Sum, engine.Mean} {
		st, _ := m.NewState(B)
		if err := m.Prefill(st, engine.Input{B: B, T: lead, IDs: first}, engine.Last, make([]float32, B*d)); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, pool.OutLen(B, T, d))
		for i := range out {
			out[i] = float32(math.NaN())
		}
		if err := run(st, engine.Input{B: B, T: T, IDs: ids}, spans, pool, out); err != nil {
			t.Fatal(err)
		}
		for b, s := range spans {
			alone, _ := m.NewState(1)
			if !start {
				m.Prefill(alone, engine.Input{B: 1, T: lead, IDs: first[b*lead : (b+1)*lead]}, engine.Last, make([]float32, d))
			}
			want := make([]float32, pool.OutLen(1, s.Len, d))
			in := engine.Input{B: 1, T: s.Len, IDs: ids[b*T+s.Start : b*T+s.Start+s.Len]}
			if err := m.Prefill(alone, in, pool, want); err != nil {
				t.Fatal(err)
			}
			got := out[b*d : (b+1)*d]
			if pool == engine.All {
				row := out[b*T*d : (b+1)*T*d]
				got = row[s.Start*d : (s.Start+s.Len)*d]
				for i, v := range row {
					if p := i / d; (p < s.Start || p >= s.Start+s.Len) && v != 0 {
						t.Fatalf("pool %d row %d: padding position %d holds %v", pool, b, p, v)
					}
				}
			}
			if e := fixture.RelErr(got, want); e > enginetest.EquivTol {
				t.Errorf("start %v pool %d row %d %+v: rel err %.3g", start, pool, b, s, e)
			}
			for l := range cfg.Layers {
				for _, part := range []func(engine.State, int) ([]float32, error){engine.State.ConvState, engine.State.SSMState} {
					all, _ := part(st, l)
					one, _ := part(alone, l)
					w := len(one)
					if e := fixture.RelErr(all[b*w:(b+1)*w], one); e > enginetest.EquivTol {
						t.Errorf("start %v pool %d row %d layer %d: state rel err %.3g", start, pool, b, l, e)
					}
				}
			}
		}
	}
}

func TestPrefillSpansRefusesBadSpans(t *testing.T) {
	m := openBase(t)
	d := m.Config().Hidden
	st, _ := m.NewState(2)
	in := engine.Input{B: 2, T: 4, IDs: make([]int64, 8)}
	for _, spans := range [][]mambago.Span{
		{{0, 4}},                 // too few
		{{0, 4}, {0, 0}},         // an empty row
		{{0, 4}, {-1, 2}},        // before the row
		{{0, 4}, {3, 2}},         // past its end
		{{0, 4}, {0, 4}, {0, 4}}, // too many
	} {
		for _, run := range []func(engine.State, engine.Input, []mambago.Span, engine.Pool, []float32) error{m.PrefillSpans, m.StartSpans} {
			if err := run(st, in, spans, engine.Last, make([]float32, 2*d)); !engine.IsInvalid(err) {
				t.Errorf("spans %v: got %v, want an input error", spans, err)
			}
		}
	}
}

// freeCounter is an engine whose states count their Free calls, as the
// CUDA engine's device states must be freed.
type freeCounter struct {
	engine.Engine
	made, freed int
}

type countedState struct {
	engine.State
	owner *freeCounter
}

func (c *countedState) Free() error { c.owner.freed++; return nil }

func (f *freeCounter) NewState(batch int) (engine.State, error) {
	st, err := f.Engine.NewState(batch)
	f.made++
	return &countedState{st, f}, err
}

func (f *freeCounter) own(st engine.State) engine.State {
	if c, ok := st.(*countedState); ok {
		return c.State
	}
	return st
}

func (f *freeCounter) Prefill(st engine.State, in engine.Input, pool engine.Pool, out []float32) error {
	return f.Engine.Prefill(f.own(st), in, pool, out)
}

func (f *freeCounter) Step(st engine.State, ids []int64, logits []float32) error {
	return f.Engine.Step(f.own(st), ids, logits)
}

// TestCallsFreeTheirStates: the states Generate and PrefillSpans make for
// themselves are freed before they return, but for the one Generate keeps
// for its next call, which Close frees (on the CUDA engine each holds
// device memory, which the collector does not see).
func TestCallsFreeTheirStates(t *testing.T) {
	counter := &freeCounter{Engine: openBase(t).Engine}
	m := &mambago.Model{Engine: counter}
	ids := []int64{5, 17, 33, 2, 9, 41, 7, 8}
	if _, _, err := m.Generate(ids, 2, 4, 3, mambago.Sampling{TopP: 1, EOS: -1}); err != nil {
		t.Fatal(err)
	}
	spans := []mambago.Span{{1, 3}, {0, 2}}
	if _, _, err := m.GenerateSpans(context.Background(), ids, 2, 4, spans, 3, mambago.Sampling{TopP: 1, EOS: -1}); err != nil {
		t.Fatal(err)
	}
	st, _ := m.NewState(2)
	counter.made--
	out := make([]float32, 2*m.Config().Hidden)
	if err := m.PrefillSpans(st, engine.Input{B: 2, T: 4, IDs: ids}, spans, engine.Last, out); err != nil {
		t.Fatal(err)
	}
	// Generate keeps its last state for its next call, until Close.
	if counter.made == 0 || counter.freed != counter.made-1 {
		t.Fatalf("%d states made inside the calls, %d freed (one kept)", counter.made, counter.freed)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if counter.freed != counter.made {
		t.Fatalf("after Close: %d states made inside the calls, %d freed", counter.made, counter.freed)
	}
}
