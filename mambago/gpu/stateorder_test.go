package gpu_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
)

// TestStateWaitsForCallerStreams queues a device-entry prefill on a
// caller's stream behind about 4 ms of memsets there, then at once reads,
// resets or sets the state from the host, as mambago.hf's caches do after
// a forward call on torch's stream. Each must come after the prefill: the
// read sees the prefill's state (a twin's, prefilled by the host entry, to
// the bit), the reset leaves zeros and the set leaves its values. Without
// the order the host's copy runs on the engine's own stream beside the
// caller's, before the prefill.
func TestStateWaitsForCallerStreams(t *testing.T) {
	gputest.Device(t)
	w := fixtureWeights(t, "base")
	e := newEngine(t, w, cuda.F32)
	c := e.Config()
	const B, T = 2, 64
	in := engine.Input{B: B, T: T, IDs: make([]int64, B*T)}
	for i := range in.IDs {
		in.IDs[i] = rand.Int64N(int64(c.Vocab))
	}
	din := deviceInput(t, in)
	dout := gputest.Alloc(t, 4*B*c.Hidden)
	twin := newState(t, e, B)
	if err := e.Prefill(twin, in, engine.Last, make([]float32, B*c.Hidden)); err != nil {
		t.Fatal(err)
	}
	stream, err := cuda.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Destroy()
	ballast := gputest.Alloc(t, 1<<30)
	st := newState(t, e, B)
	prefillBehind := func() { // about 4 ms of memsets on the caller's stream, then the prefill
		t.Helper()
		for range 16 {
			if err := cuda.Fill32(ballast.Ptr, 0, ballast.Bytes/4, stream); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.PrefillDevice(st, "ids", uintptr(din.Ptr), cuda.F32, B, T, engine.Last,
			gpu.Output{Ptr: uintptr(dout.Ptr), Type: cuda.F32}, stream.Handle()); err != nil {
			t.Fatal(err)
		}
	}
	same := func(what string, got, want []float32) {
		t.Helper()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: value %d = %v, want %v", what, i, got[i], want[i])
			}
		}
	}

	prefillBehind()
	for l := range c.Layers {
		for name, get := range map[string]func(*gpu.State, int) ([]float32, error){
			"conv": (*gpu.State).ConvState, "ssm": (*gpu.State).SSMState} {
			got, errGot := get(st, l)
			want, errWant := get(twin, l)
			if errGot != nil || errWant != nil {
				t.Fatal(errGot, errWant)
			}
			same("read after the prefill: "+name, got, want)
		}
	}

	prefillBehind()
	st.Reset()
	if err := stream.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for l := range c.Layers {
		got, err := st.SSMState(l)
		if err != nil {
			t.Fatal(err)
		}
		same("reset after the prefill", got, make([]float32, len(got)))
	}

	prefillBehind()
	v := make([]float32, B*c.Inner*c.State)
	for i := range v {
		v[i] = float32(i%7) - 3
	}
	if err := st.SetSSMState(0, v); err != nil {
		t.Fatal(err)
	}
	if err := stream.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got, err := st.SSMState(0)
	if err != nil {
		t.Fatal(err)
	}
	same("set after the prefill", got, v)
}
