package gpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestPrefillGraphCache checks that device-pointer prefills replayed from
// the graph cache give bit for bit what eager prefills give, that the cache
// keeps at most its size, and that freeing a state drops its graphs.
func TestPrefillGraphCache(t *testing.T) {
	d := gputest.Device(t)
	_ = d
	const V, dm = 100, 64
	e, err := New(fixture.RandomWeights(fixture.Shape(dm, 2, V), 7), 0, cuda.F32)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const B = 2
	run := func(st engine.State, T int) []float32 {
		t.Helper()
		ids := make([]int64, B*T)
		for i := range ids {
			ids[i] = int64(i*7+T) % V
		}
		in, err := cuda.Alloc(8 * B * T)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Free()
		out, err := cuda.Alloc(4 * B * dm)
		if err != nil {
			t.Fatal(err)
		}
		defer out.Free()
		if err := cuda.CopyIn(in.Ptr, ids, nil); err != nil {
			t.Fatal(err)
		}
		if err := cuda.Fill32(out.Ptr, math.Float32bits(float32(math.NaN())), B*dm, nil); err != nil {
			t.Fatal(err)
		}
		if err := e.PrefillDevice(st, "ids", uintptr(in.Ptr), cuda.F32, B, T, engine.Mean, uintptr(out.Ptr), cuda.F32, 0); err != nil {
			t.Fatal(err)
		}
		if err := cuda.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, B*dm)
		if err := cuda.CopyOut(got, out.Ptr, nil); err != nil {
			t.Fatal(err)
		}
		return got
	}
	lengths := []int{5, 64, 130}
	want := map[int][]float32{}
	st, err := e.NewState(B)
	if err != nil {
		t.Fatal(err)
	}
	for _, T := range lengths { // eager
		st.Reset()
		want[T] = run(st, T)
	}
	if err := e.SetPrefillGraphs(2); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3*len(lengths); i++ {
		T := lengths[rand.IntN(len(lengths))]
		st.Reset()
		got := run(st, T)
		for j := range got {
			if math.Float32bits(got[j]) != math.Float32bits(want[T][j]) {
				t.Fatalf("T=%d: [%d] = %v from the cached graph, eager gives %v", T, j, got[j], want[T][j])
			}
		}
		if len(e.graphs) > 2 || len(e.graphOrder) != len(e.graphs) {
			t.Fatalf("cache holds %d graphs (%d in order), its size is 2", len(e.graphs), len(e.graphOrder))
		}
	}
	if err := st.(*State).Free(); err != nil {
		t.Fatal(err)
	}
	if len(e.graphs) != 0 {
		t.Fatalf("%d graphs left after their state was freed", len(e.graphs))
	}
}
