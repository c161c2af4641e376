package cuda_test

import (
	"math"
	"testing"
	"time"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
)

const axpy = `extern "C" __global__ void axpy(float a, const float *x, float *y, int n, long long tag, double unused) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i] + (float)(tag - 1000000000000LL);
}`

// TestLaunchCopyGraph compiles, launches (with 4- and 8-byte arguments),
// copies both ways, poisons with NaN, times with events and replays a graph.
func TestLaunchCopyGraph(t *testing.T) {
	d := gputest.Device(t)
	t.Logf("%s (%s, %d SMs, %.0f GiB)", d.Name, d.Arch(), d.SMs, float64(d.TotalMem)/(1<<30))
	cubin, err := cuda.Compile(axpy, "axpy.cu", d.Arch())
	if err != nil {
		t.Fatal(err)
	}
	mod, err := cuda.LoadModule(cubin)
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Unload()
	f, err := mod.Function("axpy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mod.Function("nope"); err == nil {
		t.Error("a missing kernel was found")
	}
	s, err := cuda.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	const n = 100_003
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i%97)*0.5, float32(i%13)
	}
	bx, _ := cuda.Alloc(4 * n)
	by, _ := cuda.Alloc(4 * n)
	defer bx.Free()
	defer by.Free()
	must(t, cuda.CopyIn(bx.Ptr, x, s))
	must(t, cuda.Fill32(by.Ptr, math.Float32bits(float32(math.NaN())), n, s))
	must(t, cuda.CopyIn(by.Ptr, y, s))
	launch := func() error {
		return f.Launch(cuda.D1((n+255)/256), cuda.D1(256), 0, s, float32(2), bx.Ptr, by.Ptr, n, int64(1000000000001), float32(0))
	}
	start, _ := cuda.NewEvent()
	end, _ := cuda.NewEvent()
	must(t, start.Record(s))
	must(t, launch())
	must(t, end.Record(s))
	got := make([]float32, n)
	must(t, cuda.CopyOut(got, by.Ptr, s))
	must(t, s.Synchronize())
	ms, err := cuda.Elapsed(start, end)
	must(t, err)
	for i := range got {
		if want := 2*x[i] + y[i] + 1; got[i] != want {
			t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
		}
	}
	t.Logf("axpy over %d floats: %.3f ms", n, ms)
	g, err := cuda.Capture(s, launch)
	must(t, err)
	defer g.Destroy()
	for i := 0; i < 3; i++ {
		must(t, g.Launch(s))
	}
	must(t, cuda.CopyOut(got, by.Ptr, s))
	must(t, s.Synchronize())
	for i := range got {
		if want := 2*x[i] + y[i] + 1 + 3*(2*x[i]+1); got[i] != want {
			t.Fatalf("after 3 replays y[%d] = %v, want %v", i, got[i], want)
		}
	}
	if _, err := cuda.Alloc(1 << 62); err == nil {
		t.Error("allocating 4 EiB succeeded")
	} else {
		t.Logf("expected error: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestHostBuffer copies both ways through page-locked memory, checks its
// bounds and double free, and logs the time of a copy out of 1.6 MB (a
// 130m model's logits at B=8) into it and into pageable memory.
func TestHostBuffer(t *testing.T) {
	gputest.Device(t)
	s, err := cuda.NewStream()
	must(t, err)
	defer s.Destroy()
	const n = 8 * 50280
	h, err := cuda.AllocHost(4 * n)
	must(t, err)
	defer h.Free()
	dev, err := cuda.Alloc(4 * n)
	must(t, err)
	defer dev.Free()
	pinned := cuda.HostSlice[float32](h, 0, n)
	for i := range pinned {
		pinned[i] = float32(i%1009) - 500
	}
	must(t, cuda.CopyIn(dev.Ptr, pinned, s))
	must(t, s.Synchronize())
	clear(pinned)
	must(t, cuda.Fill32(dev.Ptr+4*7, math.Float32bits(float32(math.NaN())), 1, s))
	must(t, cuda.CopyOut(pinned, dev.Ptr, s))
	must(t, s.Synchronize())
	for i, v := range pinned {
		want := float32(i%1009) - 500
		if i == 7 {
			if !math.IsNaN(float64(v)) {
				t.Fatalf("pinned[7] = %v, want the NaN written there", v)
			}
		} else if v != want {
			t.Fatalf("pinned[%d] = %v, want %v", i, v, want)
		}
	}
	pageable := make([]float32, n)
	timeOut := func(dst []float32) float64 {
		best := math.Inf(1)
		for range 20 {
			t0 := time.Now()
			must(t, cuda.CopyOut(dst, dev.Ptr, s))
			must(t, s.Synchronize())
			best = min(best, time.Since(t0).Seconds())
		}
		return best * 1e6
	}
	t.Logf("a copy out of %.1f MB, best of 20: pageable %.0f µs, page-locked %.0f µs",
		4*n/1e6, timeOut(pageable), timeOut(pinned))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("HostSlice past the buffer's end did not panic")
			}
		}()
		cuda.HostSlice[float32](h, 4, n)
	}()
	// The device's address of the buffer takes a device-side copy (as a
	// kernel's stores) that the host then reads.
	at, err := h.Device()
	must(t, err)
	clear(pinned)
	must(t, cuda.Copy(at+4*3, dev.Ptr+4*3, 4*5, s))
	must(t, s.Synchronize())
	for i, v := range pinned[:10] {
		want := float32(0)
		if i >= 3 && i < 7 {
			want = float32(i) - 500
		}
		if i == 7 && !math.IsNaN(float64(v)) || i != 7 && v != want {
			t.Fatalf("after a copy of values 3 to 7 to the device's address: pinned[%d] = %v", i, v)
		}
	}
	must(t, h.Free())
	must(t, h.Free())
	if _, err := h.Device(); err == nil {
		t.Error("Device of a freed buffer succeeded")
	}
	if _, err := cuda.AllocHost(0); err == nil {
		t.Error("AllocHost(0) succeeded")
	}
}
