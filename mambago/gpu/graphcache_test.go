package gpu

import (
	"math"
	"math/rand/v2"
	"slices"
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
	e.PoisonOutputs = true
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
		if err := e.PrefillDevice(st, "ids", uintptr(in.Ptr), cuda.F32, B, T, engine.Mean, Output{Ptr: uintptr(out.Ptr), Type: cuda.F32}, 0); err != nil {
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

// TestGraphReplaysAcrossBuffers checks that cached prefill graphs, replayed
// on device memory, give the eager call's bits whichever caller buffers they
// read and write: replays alternate between two inputs and two f32 outputs,
// with a replay into a bf16 output between, every output poisoned before
// each replay and the ones not written checked untouched, for each pooling.
func TestGraphReplaysAcrossBuffers(t *testing.T) {
	gputest.Device(t)
	const V, dm, B, T = 100, 64, 2, 37
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16} {
		e, st := smallEngine(t, dm, V, 11, dt, B)
		inputs := [2]*cuda.Buffer{}
		for k := range inputs {
			ids := make([]int64, B*T)
			for i := range ids {
				ids[i] = rand.Int64N(V)
			}
			inputs[k] = gputest.Alloc(t, 8*B*T)
			if err := cuda.CopyIn(inputs[k].Ptr, ids, nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, pool := range []engine.Pool{engine.Last, engine.All, engine.Sum, engine.Mean} {
			n := pool.OutLen(B, T, dm)
			outs := [2]*cuda.Buffer{gputest.Alloc(t, 4*n), gputest.Alloc(t, 4*n)}
			half := gputest.Alloc(t, 2*n)
			// run prefills input k into out (of type ot) from a fresh state
			// and returns out's bits, with every output poisoned before and
			// the others checked untouched after.
			run := func(k int, out *cuda.Buffer, ot cuda.DType) []uint32 {
				t.Helper()
				for _, b := range []*cuda.Buffer{outs[0], outs[1], half} {
					if err := cuda.Fill32(b.Ptr, math.Float32bits(float32(math.NaN())), b.Bytes/4, nil); err != nil {
						t.Fatal(err)
					}
				}
				st.Reset()
				if err := e.PrefillDevice(st, "ids", uintptr(inputs[k].Ptr), cuda.F32, B, T, pool, Output{Ptr: uintptr(out.Ptr), Type: ot}, 0); err != nil {
					t.Fatal(err)
				}
				if err := cuda.Synchronize(); err != nil {
					t.Fatal(err)
				}
				var got []uint32
				for _, b := range []*cuda.Buffer{outs[0], outs[1], half} {
					bits := make([]float32, b.Bytes/4)
					if err := cuda.CopyOut(bits, b.Ptr, nil); err != nil {
						t.Fatal(err)
					}
					for i, v := range bits {
						if b == out {
							got = append(got, math.Float32bits(v))
						} else if !math.IsNaN(float64(v)) {
							t.Fatalf("%s pool %d: a replay into another buffer wrote [%d] = %v", dt, pool, i, v)
						}
					}
				}
				return got
			}
			if err := e.SetPrefillGraphs(0); err != nil {
				t.Fatal(err)
			}
			want := [2][]uint32{run(0, outs[0], cuda.F32), run(1, outs[0], cuda.F32)}
			wantHalf := run(0, half, cuda.BF16)
			if err := e.SetPrefillGraphs(4); err != nil {
				t.Fatal(err)
			}
			for i, step := range []struct{ in, out int }{{0, 0}, {1, 1}, {0, 1}, {-1, 0}, {1, 0}, {0, 0}} {
				if step.in < 0 {
					if got := run(0, half, cuda.BF16); !slices.Equal(got, wantHalf) {
						t.Fatalf("%s pool %d: replay %d into a bf16 output differs from eager", dt, pool, i)
					}
					continue
				}
				if got := run(step.in, outs[step.out], cuda.F32); !slices.Equal(got, want[step.in]) {
					t.Fatalf("%s pool %d: replay %d (input %d, output %d) differs from eager", dt, pool, i, step.in, step.out)
				}
			}
		}
	}
}

// smallEngine is a two-layer engine of random weights (width dm, vocabulary
// V, drawn from seed) in dt, closed when the test ends, and a state for B
// sequences.
func smallEngine(t *testing.T, dm, V int, seed uint64, dt cuda.DType, B int) (*Engine, engine.State) {
	t.Helper()
	e, err := New(fixture.RandomWeights(fixture.Shape(dm, 2, V), seed), 0, dt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	e.PoisonOutputs = true // an element the kernels miss shows as NaN
	st, err := e.NewState(B)
	if err != nil {
		t.Fatal(err)
	}
	return e, st
}
