package mambago_test

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestCloneState checks that a cloned state holds the original's values and
// continues as it would, bit for bit, while each is its own memory, on the
// CPU engine and, where there is a GPU, the CUDA engine in f32 and bf16.
// A state of another model's shape is refused.
func TestCloneState(t *testing.T) {
	t.Run("cpu", func(t *testing.T) {
		m, err := mambago.Open(filepath.Join(fixture.Root(), "base"), mambago.Options{Device: "cpu"})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		checkClone(t, m)
	})
	for _, dtype := range []string{"float32", "bfloat16"} {
		t.Run("cuda-"+dtype, func(t *testing.T) {
			gputest.Need(t)
			checkClone(t, openCUDA(t, dtype))
		})
	}
}

func checkClone(t *testing.T, m *mambago.Model) {
	cfg := m.Config()
	const B, T = 3, 23
	ids := make([]int64, B*T)
	for i := range ids {
		ids[i] = rand.Int64N(int64(cfg.Vocab))
	}
	st := newState(t, m, B)
	if err := m.Prefill(st, engine.Input{B: B, T: T, IDs: ids}, engine.Last, make([]float32, B*cfg.Hidden)); err != nil {
		t.Fatal(err)
	}
	twin, err := m.CloneState(st)
	if err != nil {
		t.Fatal(err)
	}
	defer free(twin)
	for layer := range cfg.Layers {
		for _, get := range []func(engine.State, int) ([]float32, error){engine.State.ConvState, engine.State.SSMState} {
			a, err := get(st, layer)
			if err != nil {
				t.Fatal(err)
			}
			b, err := get(twin, layer)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(a, b) || !slices.ContainsFunc(a, func(v float32) bool { return v != 0 }) {
				t.Fatalf("layer %d: the clone differs from the state, or the state is zero", layer)
			}
		}
	}
	next := ids[:B]
	want := step(t, m, st, next)
	// st has moved on a token; the clone is where st was, so its step is st's.
	if got := step(t, m, twin, next); !slices.Equal(got, want) {
		t.Fatal("the clone's step differs from the original's")
	}
	if again := step(t, m, st, next); slices.Equal(again, want) {
		t.Fatal("the original did not move on: its step repeats")
	}

	other, err := mambago.Open(filepath.Join(fixture.Root(), "dstate64"), mambago.Options{Device: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.CloneState(st); !engine.IsInvalid(err) {
		t.Fatalf("a state of another shape: CloneState err = %v, want an input error", err)
	}
}

func newState(t *testing.T, m *mambago.Model, B int) engine.State {
	t.Helper()
	st, err := m.NewState(B)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { free(st) })
	return st
}

func step(t *testing.T, m *mambago.Model, st engine.State, ids []int64) []float32 {
	t.Helper()
	logits := make([]float32, len(ids)*m.Config().Vocab)
	if err := m.Step(st, ids, logits); err != nil {
		t.Fatal(err)
	}
	return logits
}

// free releases a CUDA state's device memory; a CPU state is left to the collector.
func free(st engine.State) {
	if f, ok := st.(interface{ Free() error }); ok {
		f.Free()
	}
}
