package gpu_test

import (
	"math"
	"slices"
	"testing"
	"unsafe"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
)

// TestDeviceEntriesRefuseBadBuffers hands the device entries (a prefill,
// eager and from the graph cache, and a step graph's replay) host
// addresses and buffers too small for their shapes. Each is an input error
// before anything is launched, and the engine then runs a good call to the
// bits of one that came first: no kernel faulted the context.
func TestDeviceEntriesRefuseBadBuffers(t *testing.T) {
	gputest.Device(t)
	w := fixtureWeights(t, "base")
	e := newEngine(t, w, cuda.BF16)
	c := e.Config()
	const B, T = 2, 7
	ids := make([]int64, B*T)
	for i := range ids {
		ids[i] = int64(i*31) % int64(c.Vocab)
	}
	din := deviceInput(t, engine.Input{B: B, T: T, IDs: ids})
	dout := gputest.Alloc(t, 4*B*T*c.Hidden)
	hostIDs := make([]int64, B*T)
	hostOut := make([]float32, B*T*c.Hidden)
	hostAddr := func(p unsafe.Pointer) uintptr { return uintptr(p) }
	// One row's room at the end of an allocation of 2 MB (a multiple of
	// the driver's granularity, so its extent is exactly that): too small
	// for B rows.
	const tail = 2 << 20
	small := gputest.Alloc(t, tail).Offset(tail - 4*c.Hidden)

	good := func() []float32 {
		st, _ := e.NewState(B)
		if err := cuda.Fill32(dout.Ptr, math.Float32bits(float32(math.NaN())), B*c.Hidden, nil); err != nil {
			t.Fatal(err)
		}
		if err := e.PrefillDevice(st, "ids", uintptr(din.Ptr), cuda.F32, B, T, engine.Last, gpu.Output{Ptr: uintptr(dout.Ptr), Type: cuda.F32}, 0); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, B*c.Hidden)
		if err := cuda.CopyOut(got, dout.Ptr, nil); err != nil { // pageable: ordered after the default stream's work
			t.Fatal(err)
		}
		return got
	}
	want := good()
	for _, graphs := range []int{0, 4} {
		e.SetPrefillGraphs(graphs)
		for name, bad := range map[string][2]uintptr{
			"host input":       {hostAddr(unsafe.Pointer(&hostIDs[0])), uintptr(dout.Ptr)},
			"host output":      {uintptr(din.Ptr), hostAddr(unsafe.Pointer(&hostOut[0]))},
			"output too small": {uintptr(din.Ptr), uintptr(small)},
		} {
			st, _ := e.NewState(B)
			err := e.PrefillDevice(st, "ids", bad[0], cuda.F32, B, T, engine.Last, gpu.Output{Ptr: bad[1], Type: cuda.F32}, 0)
			if !engine.IsInvalid(err) {
				t.Fatalf("graphs %d, %s: PrefillDevice = %v, want an input error", graphs, name, err)
			}
			t.Logf("graphs %d, %s: %v", graphs, name, err)
		}
		if got := good(); !slices.EqualFunc(got, want, func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }) {
			t.Fatalf("graphs %d: a good prefill after the refused ones differs from the first", graphs)
		}
	}

	st, _ := e.NewState(B)
	g, err := e.CaptureStep(st)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	logits := gputest.Alloc(t, 4*B*c.Vocab)
	for name, bad := range map[string][2]uintptr{
		"host ids":         {hostAddr(unsafe.Pointer(&hostIDs[0])), uintptr(logits.Ptr)},
		"logits too small": {uintptr(din.Ptr), uintptr(small)},
		"host logits":      {uintptr(din.Ptr), hostAddr(unsafe.Pointer(&hostOut[0]))},
	} {
		if err := g.StepDevice(bad[0], bad[1], 0); !engine.IsInvalid(err) {
			t.Fatalf("%s: StepDevice = %v, want an input error", name, err)
		}
	}
	if err := g.StepDevice(uintptr(din.Ptr), uintptr(logits.Ptr), 0); err != nil {
		t.Fatal(err)
	}
	if err := cuda.Synchronize(); err != nil {
		t.Fatalf("after the refused replays, a good one: %v", err)
	}
}
