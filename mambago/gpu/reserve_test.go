package gpu

import (
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestReserveThenNoAllocation checks that after Reserve(B, T) the prefills
// and steps it covers leave the workspace as it was: no buffer is
// reallocated.
func TestReserveThenNoAllocation(t *testing.T) {
	gputest.Need(t)
	e, err := New(fixture.RandomWeights(fixture.Shape(64, 2, 100), 1), 0, cuda.F32)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const B, T = 3, 700
	if err := e.Reserve(B, T); err != nil {
		t.Fatal(err)
	}
	ws := e.ws
	st, err := e.NewState(B)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, B*T)
	for _, pool := range []engine.Pool{engine.All, engine.Last, engine.Mean} {
		for _, n := range []int{1, 100, T} {
			out := make([]float32, pool.OutLen(B, n, 64))
			if err := e.Prefill(st, engine.Input{B: B, T: n, IDs: ids[:B*n]}, pool, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, b := range []int{1, B} {
		s1, err := e.NewState(b)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Step(s1, ids[:b], make([]float32, b*100)); err != nil {
			t.Fatal(err)
		}
	}
	if e.ws.generation != ws.generation || e.ws.outLen != ws.outLen || e.ws.logitsLen != ws.logitsLen {
		t.Fatalf("workspace changed after Reserve: generation %d -> %d, out %d -> %d, logits %d -> %d",
			ws.generation, e.ws.generation, ws.outLen, e.ws.outLen, ws.logitsLen, e.ws.logitsLen)
	}
}
