package kernels_test

import (
	"fmt"
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

// functions returns m's functions by name, failing tb for a name m lacks.
func functions(tb testing.TB, m *cuda.Module) func(string) *cuda.Function {
	return func(name string) *cuda.Function {
		f, err := m.Function(name)
		if err != nil {
			tb.Fatal(err)
		}
		return f
	}
}

// global returns m's device variable name (its address and size in
// bytes), failing tb if m lacks it.
func global(tb testing.TB, m *cuda.Module, name string) (cuda.Ptr, int) {
	tb.Helper()
	p, n, err := m.Global(name)
	if err != nil {
		tb.Fatal(err)
	}
	return p, n
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

// inTrains returns each of launches as a train of n launches back to back,
// so that the host's launch latency falls outside all but the first, as in
// a step graph.
func inTrains(launches []func() error, n int) []func() error {
	trains := make([]func() error, len(launches))
	for i, launch := range launches {
		trains[i] = func() error {
			for range n {
				if err := launch(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return trains
}

// turns times each of launches runs times in a row, the launches taking
// turns over rounds rounds, and returns each one's times in milliseconds.
func (t *launchTimer) turns(tb testing.TB, launches []func() error, rounds, runs int) [][]float64 {
	tb.Helper()
	times := make([][]float64, len(launches))
	for range rounds {
		for i, launch := range launches {
			for range runs {
				times[i] = append(times[i], t.ms(tb, launch))
			}
		}
	}
	return times
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

// blockTimeline launches a timeline build's kernel (launch) 20 times, the
// first 5 as warm-up, zeroing its record (timeline: blocks rows of
// len(events) %globaltimer nanoseconds) before each launch and reading it
// back after. It returns the kernel's median time (CUDA events around the
// launch, µs) and, for each event, " name median/last": the medians over
// the launches of the median block's and the last block's time from the
// first block's start, in µs. Every block must record every event. each,
// where set, sees every measured launch's rows (as recorded, ns).
func blockTimeline(b *testing.B, s *cuda.Stream, timer *launchTimer, timeline cuda.Ptr, blocks int, events []string,
	launch func() error, each func(rows []int64)) (kernelUs float64, summary string) {
	b.Helper()
	n := len(events)
	var kernel []float64
	median, last := make([][]float64, n), make([][]float64, n)
	for run := range 20 {
		if err := cuda.Fill32(timeline, 0, blocks*n*2, s); err != nil {
			b.Fatal(err)
		}
		ms := timer.ms(b, launch)
		if run < 5 {
			continue
		}
		kernel = append(kernel, 1e3*ms)
		rows := make([]int64, blocks*n)
		if err := cuda.CopyOut(rows, timeline, s); err != nil {
			b.Fatal(err)
		}
		if each != nil {
			each(rows)
		}
		start := int64(math.MaxInt64)
		for blk := range blocks {
			start = min(start, rows[blk*n])
		}
		for ev := range n {
			var at []float64
			for blk := range blocks {
				if t := rows[blk*n+ev]; t != 0 {
					at = append(at, float64(t-start)/1e3)
				}
			}
			if len(at) != blocks {
				b.Fatalf("event %s recorded by %d blocks of %d", events[ev], len(at), blocks)
			}
			median[ev] = append(median[ev], gputest.Median(at))
			last[ev] = append(last[ev], slices.Max(at))
		}
	}
	for ev := range n {
		summary += fmt.Sprintf(" %s %.2f/%.2f", events[ev], gputest.Median(median[ev]), gputest.Median(last[ev]))
	}
	return gputest.Median(kernel), summary
}
