package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
)

// TestEngineStepDevice steps a state after a prompt through
// Engine.StepDevice, from caller-owned device ids into a NaN-poisoned
// device buffer 4 bytes past its allocation's alignment (as a torch slice
// may be), beside a twin stepped by Engine.Step. Every step gives the
// twin's logits to the bit and writes nothing around them: eagerly for the
// first steps, then from the step graph kept with the state once
// StepDeviceGraphSteps were asked for (whatever DecoderGraphSteps says),
// the same graph again, and a new one once the workspace has grown. The
// two states end the same. Null, host and too small buffers are input
// errors, and a good step runs after them.
// In f32 and bf16.
func TestEngineStepDevice(t *testing.T) {
	gputest.Device(t)
	w := fixtureWeights(t, "base")
	const B, T, n = 2, 7, 3
	hostAddr := func(p unsafe.Pointer) uintptr { return uintptr(p) }
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16} {
		e := newEngine(t, w, dt)
		e.StepDeviceGraphSteps, e.DecoderGraphSteps = n, 1000
		c := e.Config()
		V := c.Vocab
		st, twin := newState(t, e, B), newState(t, e, B)
		prompt := engine.Input{B: B, T: T, IDs: make([]int64, B*T)}
		for i := range prompt.IDs {
			prompt.IDs[i] = rand.Int64N(int64(V))
		}
		for _, s := range []*gpu.State{st, twin} {
			if err := e.Prefill(s, prompt, engine.Last, make([]float32, B*c.Hidden)); err != nil {
				t.Fatal(err)
			}
		}
		din := gputest.Alloc(t, 8*B)
		buf := gputest.Alloc(t, 4*B*V+8)
		out := uintptr(buf.Ptr) + 4
		step := func(where string, graphed bool) {
			t.Helper()
			where = fmt.Sprintf("%v %s", dt, where)
			ids := make([]int64, B)
			for b := range ids {
				ids[b] = rand.Int64N(int64(V))
			}
			if err := cuda.CopyIn(din.Ptr, ids, nil); err != nil {
				t.Fatal(err)
			}
			if err := cuda.Fill32(buf.Ptr, math.Float32bits(float32(math.NaN())), buf.Bytes/4, nil); err != nil {
				t.Fatal(err)
			}
			if err := e.StepDevice(st, uintptr(din.Ptr), out, 0); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			words := make([]float32, buf.Bytes/4)
			if err := cuda.CopyOut(words, buf.Ptr, nil); err != nil { // pageable: after the default stream's work
				t.Fatal(err)
			}
			want := make([]float32, B*V)
			if err := e.Step(twin, ids, want); err != nil {
				t.Fatal(err)
			}
			if !math.IsNaN(float64(words[0])) || !math.IsNaN(float64(words[len(words)-1])) {
				t.Fatalf("%s: a word around the logits was written (%v, %v)", where, words[0], words[len(words)-1])
			}
			for i, v := range want {
				if math.Float32bits(words[1+i]) != math.Float32bits(v) {
					t.Fatalf("%s: logit %d = %v, Step's %v", where, i, words[1+i], v)
				}
			}
			if got := gpu.StepGraphOf(st) != nil; got != graphed {
				t.Fatalf("%s: a step graph kept: %v, want %v", where, got, graphed)
			}
		}
		for i := range n - 1 {
			step(fmt.Sprintf("eager step %d", i), false)
		}
		step("the capturing step", true)
		first := gpu.StepGraphOf(st)
		step("a replay", true)
		if gpu.StepGraphOf(st) != first {
			t.Fatalf("%v: the kept graph was captured again", dt)
		}
		// A prefill longer than any before grows the workspace: the kept
		// graph can no longer replay, and the next step captures anew.
		long := engine.Input{B: B, T: 600, IDs: make([]int64, B*600)}
		scratch := newState(t, e, B)
		if err := e.Prefill(scratch, long, engine.Last, make([]float32, B*c.Hidden)); err != nil {
			t.Fatal(err)
		}
		step("after the workspace grew", true)
		if g := gpu.StepGraphOf(st); g == first {
			t.Fatalf("%v: the stale graph was replayed", dt)
		}
		for l := range c.Layers {
			for _, get := range []func(*gpu.State, int) ([]float32, error){(*gpu.State).ConvState, (*gpu.State).SSMState} {
				a, errA := get(st, l)
				b, errB := get(twin, l)
				if errA != nil || errB != nil {
					t.Fatal(errA, errB)
				}
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
						t.Fatalf("%v layer %d: state value %d = %v, the twin's %v", dt, l, i, a[i], b[i])
					}
				}
			}
		}
		hostIDs := make([]int64, B)
		hostOut := make([]float32, B*V)
		const tail = 2 << 20 // one row's room at the end of an allocation of 2 MB: too small for B rows
		small := gputest.Alloc(t, tail).Offset(tail - 4*V)
		for _, graphSteps := range []int{n, 0} { // the kept graph's checks, then the eager path's
			e.StepDeviceGraphSteps = graphSteps
			for name, bad := range map[string][2]uintptr{
				"null ids":         {0, out},
				"host ids":         {hostAddr(unsafe.Pointer(&hostIDs[0])), out},
				"host logits":      {uintptr(din.Ptr), hostAddr(unsafe.Pointer(&hostOut[0]))},
				"logits too small": {uintptr(din.Ptr), uintptr(small)},
			} {
				if err := e.StepDevice(st, bad[0], bad[1], 0); !engine.IsInvalid(err) {
					t.Fatalf("%v %s (StepDeviceGraphSteps %d): StepDevice = %v, want an input error", dt, name, graphSteps, err)
				}
			}
			if err := e.StepDevice(st, uintptr(din.Ptr), out, 0); err != nil {
				t.Fatal(err)
			}
			if err := cuda.Synchronize(); err != nil {
				t.Fatalf("%v: after the refused steps, a good one: %v", dt, err)
			}
		}
	}
}

// newState returns a new state of e for B sequences, freed when t ends.
func newState(t *testing.T, e *gpu.Engine, B int) *gpu.State {
	t.Helper()
	st, err := e.NewState(B)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.(*gpu.State).Free() })
	return st.(*gpu.State)
}
