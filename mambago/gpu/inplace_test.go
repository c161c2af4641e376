package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
)

// TestGraphInPlace checks that cached prefill graphs read the caller's
// token ids and write an f32 output in place: the capture finds both
// buffers' uses, a replay leaves the graph's own buffers as they were
// (poisoned before it: token 0 for every id, 42 for every output), and its
// bits are the eager call's. An output aligned to 4 bytes only goes
// through the graph's own buffer, with the same bits; so does every replay
// of a captured step's logits, while its ids are read in place, and host
// replays in between point the graph back at its own buffers. Eager
// prefills into an output aligned to 4 bytes give the same bits too, and
// so do replays queued back to back into four outputs without a wait.
// bf16 runs with Engine.PoisonOutputs on and off (the default), so with
// and without the output's memset node among its uses.
func TestGraphInPlace(t *testing.T) {
	gputest.Device(t)
	if !cuda.GraphRebinds() {
		t.Skip("this driver lacks the entry points in-place replays need (CUDA 12.4 or later)")
	}
	const V, dm, B, T = 100, 64, 2, 37
	for _, c := range []struct {
		dt     cuda.DType
		poison bool // Engine.PoisonOutputs: the output's memset node is bound too
	}{{cuda.F32, true}, {cuda.BF16, true}, {cuda.BF16, false}} {
		dt, name := c.dt, fmt.Sprintf("%s (poison %v)", c.dt, c.poison)
		e, st := smallEngine(t, dm, V, 13, dt, B)
		e.PoisonOutputs = c.poison
		ids := make([]int64, B*T)
		for i := range ids {
			ids[i] = 1 + rand.Int64N(V-1)
		}
		in := gputest.Alloc(t, 8*B*T)
		if err := cuda.CopyIn(in.Ptr, ids, nil); err != nil {
			t.Fatal(err)
		}
		fill := func(b *cuda.Buffer, at, n int, v float32) {
			t.Helper()
			if err := cuda.Fill32(b.Ptr+cuda.Ptr(at), math.Float32bits(v), n, nil); err != nil {
				t.Fatal(err)
			}
		}
		bits := func(p cuda.Ptr, n int) []uint32 {
			t.Helper()
			if err := cuda.Synchronize(); err != nil {
				t.Fatal(err)
			}
			v := make([]float32, n)
			if err := cuda.CopyOut(v, p, nil); err != nil {
				t.Fatal(err)
			}
			u := make([]uint32, n)
			for i, x := range v {
				u[i] = math.Float32bits(x)
			}
			return u
		}
		for _, pool := range []engine.Pool{engine.Last, engine.All, engine.Sum, engine.Mean} {
			n := pool.OutLen(B, T, dm)
			out := gputest.Alloc(t, 4*(n+1))
			run := func(at int) []uint32 {
				t.Helper()
				fill(out, 0, n+1, float32(math.NaN()))
				st.Reset()
				if err := e.PrefillDevice(st, "ids", uintptr(in.Ptr), cuda.F32, B, T, pool, Output{Ptr: uintptr(out.Ptr) + uintptr(at), Type: cuda.F32}, 0); err != nil {
					t.Fatal(err)
				}
				return bits(out.Ptr+cuda.Ptr(at), n)
			}
			if err := e.SetPrefillGraphs(0); err != nil {
				t.Fatal(err)
			}
			want := run(0)
			if got := run(4); !slices.Equal(got, want) { // the kernels' 16-byte stores go through the engine's buffer
				t.Fatalf("%s pool %d: an eager prefill into an output aligned to 4 bytes differs", name, pool)
			}
			if err := e.SetPrefillGraphs(4); err != nil {
				t.Fatal(err)
			}
			if got := run(0); !slices.Equal(got, want) {
				t.Fatalf("%s pool %d: the first replay differs from eager", name, pool)
			}
			g := e.graphs[graphKey{s: st.(*State), kind: "ids", B: B, T: T, pool: pool}]
			if inIDs, inOut, why := g.InPlace(); !inIDs || !inOut {
				t.Fatalf("%s pool %d: in place: ids %v, output %v; want both (%v)", name, pool, inIDs, inOut, why)
			}
			for i, at := range []int{0, 4, 0, 0} {
				if err := cuda.Fill32(g.in.Ptr, 0, g.in.Bytes/4, nil); err != nil {
					t.Fatal(err)
				}
				fill(g.out, 0, n, 42)
				if got := run(at); !slices.Equal(got, want) {
					t.Fatalf("%s pool %d: replay %d (output at +%d bytes) differs from eager", name, pool, i, at)
				}
				own := bits(g.out.Ptr, n)
				if at%16 == 0 && slices.ContainsFunc(own, func(u uint32) bool { return u != math.Float32bits(42) }) {
					t.Fatalf("%s pool %d: replay %d in place wrote the graph's own output", name, pool, i)
				}
				if at%16 != 0 && !slices.Equal(own, want) {
					t.Fatalf("%s pool %d: replay %d into an output aligned to 4 bytes did not go through the graph's own", name, pool, i)
				}
			}
		}

		// Replays queued back to back, each into another output, with no
		// wait between: a rebinding must not reach a replay already queued.
		// Each prefill continues the state the one before left, eagerly
		// first, then from the graph.
		pool, n := engine.Last, engine.Last.OutLen(B, T, dm)
		burst := func() [][]uint32 {
			t.Helper()
			outs := make([]*cuda.Buffer, 4)
			for i := range outs {
				outs[i] = gputest.Alloc(t, 4*n)
				fill(outs[i], 0, n, float32(math.NaN()))
			}
			st.Reset()
			for _, o := range outs {
				if err := e.PrefillDevice(st, "ids", uintptr(in.Ptr), cuda.F32, B, T, pool, Output{Ptr: uintptr(o.Ptr), Type: cuda.F32}, 0); err != nil {
					t.Fatal(err)
				}
			}
			var got [][]uint32
			for _, o := range outs {
				got = append(got, bits(o.Ptr, n))
			}
			return got
		}
		if err := e.SetPrefillGraphs(0); err != nil {
			t.Fatal(err)
		}
		want := burst()
		if err := e.SetPrefillGraphs(4); err != nil {
			t.Fatal(err)
		}
		for i, got := range burst() {
			if !slices.Equal(got, want[i]) {
				t.Fatalf("%s: replay %d of a burst into its own output differs from eager", name, i)
			}
		}

		// The decode step: ids in place, logits copied, host replays between.
		gs, err := e.CaptureStep(st)
		if err != nil {
			t.Fatal(err)
		}
		defer gs.Destroy()
		if inIDs, inOut, why := gs.InPlace(); !inIDs || inOut {
			t.Fatalf("%s step: in place: ids %v, logits %v; want ids only (%v)", name, inIDs, inOut, why)
		}
		stepIDs := []int64{3, 77}
		dids, logits := gputest.Alloc(t, 8*B), gputest.Alloc(t, 4*B*V)
		if err := cuda.CopyIn(dids.Ptr, stepIDs, nil); err != nil {
			t.Fatal(err)
		}
		host := make([]float32, B*V)
		var wantStep []uint32
		for i := range 4 {
			st.Reset()
			if err := cuda.Fill32(gs.in.Ptr, 0, gs.in.Bytes/4, nil); err != nil {
				t.Fatal(err)
			}
			var got []uint32
			if i%2 == 0 {
				fill(logits, 0, B*V, float32(math.NaN()))
				if err := gs.StepDevice(uintptr(dids.Ptr), uintptr(logits.Ptr), 0); err != nil {
					t.Fatal(err)
				}
				got = bits(logits.Ptr, B*V)
			} else {
				if err := gs.Step(stepIDs, host); err != nil {
					t.Fatal(err)
				}
				for _, x := range host {
					got = append(got, math.Float32bits(x))
				}
			}
			if wantStep == nil {
				wantStep = got
			} else if !slices.Equal(got, wantStep) {
				t.Fatalf("%s step: replay %d (device %v) differs from the first", name, i, i%2 == 0)
			}
		}
	}
}
