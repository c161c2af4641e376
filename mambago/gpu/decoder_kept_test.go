package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
)

// TestDecoderKeepsStepGraph checks that a decoder leaves its step graph with
// its state and the state's next decoder replays it (the same graph, the
// logits of a twin state's eager steps bit for bit), that a decoder
// captures again once the workspace has grown (a larger prefill ran), and
// that freeing the state lets the graph go; in f32 and bf16.
func TestDecoderKeepsStepGraph(t *testing.T) {
	gputest.Need(t)
	w := fixtureWeights(t, "base")
	const B = 2
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16} {
		e := newEngine(t, w, dt)
		V := w.Config.Vocab
		states := make([]*gpu.State, 2) // the decoders', and the twin stepped eagerly
		for i := range states {
			st, err := e.NewState(B)
			if err != nil {
				t.Fatal(err)
			}
			states[i] = st.(*gpu.State)
		}
		defer states[1].Free()
		steps := func(n int) {
			t.Helper()
			d, err := e.NewDecoder(states[0], e.DecoderGraphSteps)
			if err != nil {
				t.Fatal(err)
			}
			for range n {
				stepMatchesTwin(t, e, d, states[1], B, V, dt.String())
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
		}
		steps(3)
		first := gpu.StepGraphOf(states[0])
		if first == nil {
			t.Fatalf("%v: the decoder left no step graph with its state", dt)
		}
		steps(3)
		if g := gpu.StepGraphOf(states[0]); g != first {
			t.Errorf("%v: the second decoder captured again (%p, first %p)", dt, g, first)
		}
		// A prefill longer than any before grows the workspace: the kept
		// graph can no longer replay, and the next decoder captures anew.
		long := make([]int64, B*600)
		for i := range long {
			long[i] = rand.Int64N(int64(V))
		}
		scratch, err := e.NewState(B)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Prefill(scratch, engine.Input{B: B, T: 600, IDs: long}, engine.Last, make([]float32, B*w.Config.Hidden)); err != nil {
			t.Fatal(err)
		}
		if err := scratch.(*gpu.State).Free(); err != nil {
			t.Fatal(err)
		}
		steps(3)
		if g := gpu.StepGraphOf(states[0]); g == nil || g == first {
			t.Errorf("%v: after the workspace grew the state holds %p (first %p)", dt, g, first)
		}
		if err := states[0].Free(); err != nil {
			t.Fatal(err)
		}
		if g := gpu.StepGraphOf(states[0]); g != nil {
			t.Errorf("%v: a freed state still holds its step graph", dt)
		}
	}
}

// TestDecoderGraphsShortRuns checks that decoders made for few steps
// capture a step graph once the steps asked for on their state add up to
// DecoderGraphSteps, that later decoders replay the state's graph however
// few their steps (its logits a twin's eager steps' bits), and that
// DecoderGraphSteps 0 never replays one, in bf16.
func TestDecoderGraphsShortRuns(t *testing.T) {
	gputest.Need(t)
	w := fixtureWeights(t, "base")
	e := newEngine(t, w, cuda.BF16)
	const B, n = 2, 32
	V := w.Config.Vocab
	e.DecoderGraphSteps = n
	st, err := e.NewState(B)
	if err != nil {
		t.Fatal(err)
	}
	defer st.(*gpu.State).Free()
	twin, err := e.NewState(B)
	if err != nil {
		t.Fatal(err)
	}
	defer twin.(*gpu.State).Free()
	var graph *gpu.Graph
	for i, c := range []struct {
		steps, graphSteps int
		graphed           bool
	}{
		{19, n, false}, // 19 asked for: eager
		{12, n, false}, // 31
		{1, n, true},   // 32: captures
		{3, n, true},   // the kept graph
		{0, n, true},
		{40, 0, false}, // never
		{2, n, true},   // the kept graph again
	} {
		e.DecoderGraphSteps = c.graphSteps
		d, err := e.NewDecoder(st, c.steps)
		if err != nil {
			t.Fatal(err)
		}
		dec := d.(*gpu.Decoder)
		if dec.Graphed() != c.graphed {
			t.Errorf("decoder %d (%d steps, DecoderGraphSteps %d): graphed %v, want %v", i, c.steps, c.graphSteps,
				dec.Graphed(), c.graphed)
		}
		if c.graphed {
			if graph == nil {
				graph = gpu.StepGraphOf(st.(*gpu.State))
			} else if g := gpu.StepGraphOf(st.(*gpu.State)); g != graph {
				t.Errorf("decoder %d captured again (%p, first %p)", i, g, graph)
			}
		}
		for range 2 {
			stepMatchesTwin(t, e, d, twin, B, V, fmt.Sprintf("decoder %d", i))
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// stepMatchesTwin feeds d and, by Engine.Step, twin the same B random ids
// (of V) and requires d's logits to be the twin's bit for bit.
func stepMatchesTwin(t *testing.T, e *gpu.Engine, d engine.Decoder, twin engine.State, B, V int, where string) {
	t.Helper()
	ids := make([]int64, B)
	for b := range ids {
		ids[b] = rand.Int64N(int64(V))
	}
	got, err := d.Logits(ids)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, B*V)
	if err := e.Step(twin, ids, want); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: logit %d = %v, the twin's %v", where, i, got[i], want[i])
		}
	}
}
