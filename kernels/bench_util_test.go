package kernels_test

import (
	"math"
	"slices"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
)

// kernelBench is what a benchmark of one kernel source starts from: the
// device (or a skip without one), every kernel compiled with its stream
// (gpu), the source of name to compile variants of, and a launch timer on
// the stream.
func kernelBench(b *testing.B, name string) (d *cuda.Device, fn func(string) *cuda.Function, s *cuda.Stream,
	src string, timer *launchTimer) {
	b.Helper()
	d = gputest.Device(b)
	fn, s = gpu(b)
	src, err := kernels.Source(name)
	if err != nil {
		b.Fatal(err)
	}
	return d, fn, s, src, newLaunchTimer(b, s)
}

// loadSource compiles src (named name) through NVRTC for d, with opts
// after --std=c++17, and loads it; the module is unloaded at cleanup.
func loadSource(tb testing.TB, d *cuda.Device, src, name string, opts ...string) *cuda.Module {
	tb.Helper()
	return loadSourceFor(tb, d.Arch(), src, name, opts...)
}

// loadSourceFor is loadSource for the architecture arch (e.g. sm_90a).
func loadSourceFor(tb testing.TB, arch, src, name string, opts ...string) *cuda.Module {
	tb.Helper()
	cubin, err := cuda.Compile(src, name, arch, append([]string{"--std=c++17"}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := cuda.LoadModule(cubin)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Unload() })
	return m
}

// newStream returns a new CUDA stream, destroyed at cleanup.
func newStream(tb testing.TB) *cuda.Stream {
	tb.Helper()
	s, err := cuda.NewStream()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Destroy() })
	return s
}

// launchTimer times work queued on a stream between two CUDA events.
type launchTimer struct {
	s          *cuda.Stream
	start, end *cuda.Event
}

// newLaunchTimer returns a timer for s; its events are destroyed at cleanup.
func newLaunchTimer(tb testing.TB, s *cuda.Stream) *launchTimer {
	tb.Helper()
	t := &launchTimer{s: s, start: mustEvent(tb), end: mustEvent(tb)}
	tb.Cleanup(func() {
		t.start.Destroy()
		t.end.Destroy()
	})
	return t
}

// ms queues launch between the timer's events, waits for it, and returns
// its elapsed milliseconds.
func (t *launchTimer) ms(tb testing.TB, launch func() error) float64 {
	tb.Helper()
	if err := t.start.Record(t.s); err != nil {
		tb.Fatal(err)
	}
	if err := launch(); err != nil {
		tb.Fatal(err)
	}
	if err := t.end.Record(t.s); err != nil {
		tb.Fatal(err)
	}
	if err := t.end.Synchronize(); err != nil {
		tb.Fatal(err)
	}
	ms, err := cuda.Elapsed(t.start, t.end)
	if err != nil {
		tb.Fatal(err)
	}
	return float64(ms)
}

func mustEvent(tb testing.TB) *cuda.Event {
	tb.Helper()
	e, err := cuda.NewEvent()
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// tunedBLAS returns a cuBLAS handle on s that runs cuBLASLt's tuned plans
// (the engine's pick for 16-bit GEMMs), destroyed at cleanup.
func tunedBLAS(tb testing.TB, s *cuda.Stream) *cuda.BLAS {
	tb.Helper()
	blas, err := cuda.NewBLAS(s, false)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { blas.Destroy() })
	blas.Algo = cuda.GemmLtTuned
	return blas
}

// graphTurns times each of runs as graphs of 20 launches back to back,
// the runs taking turns over 9 rounds, and returns each one's median in
// microseconds a launch.
func graphTurns(tb testing.TB, s *cuda.Stream, runs []func() error) []float64 {
	tb.Helper()
	times := make([][]float64, len(runs))
	for round := 0; round < 9; round++ {
		for i, run := range runs {
			ms, err := cuda.TimeGraph(s, 20, run)
			if err != nil {
				tb.Fatal(err)
			}
			times[i] = append(times[i], float64(ms)*1e3) // TimeGraph: ms a launch
		}
	}
	medians := make([]float64, len(runs))
	for i, t := range times {
		medians[i] = gputest.Median(t)
	}
	return medians
}

// gemmNT64 returns the float64 sums a [M, K] · bᵀ ([N, K]), [M, N], with
// a's rows lda apart.
func gemmNT64(a []float32, lda int, b []float32, M, N, K int) []float64 {
	out := make([]float64, M*N)
	for r := 0; r < M; r++ {
		for j := 0; j < N; j++ {
			var acc float64
			for c := 0; c < K; c++ {
				acc += float64(a[r*lda+c]) * float64(b[j*K+c])
			}
			out[r*N+j] = acc
		}
	}
	return out
}

// sameBits reports whether a and b hold the same float32 bits, element by
// element (NaN equal to itself, -0 apart from 0).
func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}
