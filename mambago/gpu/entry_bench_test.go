package gpu

import (
	"testing"
	"time"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// BenchmarkEntryHost times, on the host, what a device-entry prefill
// (PrefillDevice with a cached graph; bf16 130m, B=1, T=2048) spends
// before and around its graph: the whole call, and each driver call it
// makes alone (the graph's launch, the 16 KB input copy, the wait on the
// engine's last event, cuBLAS's stream switched and back, the event
// record, the checks of the caller's two buffers). Each is the median
// over 15 repeats of 10 calls (the stream drained between repeats, not
// timed), in µs a call. The GPU cannot start
// a call's graph before the calls ahead of the launch are made, so their
// sum is time a caller who times each prefill alone (bench/mamba_ssm/
// compare.py) sees added to the GPU's.
func BenchmarkEntryHost(b *testing.B) {
	gputest.Need(b)
	const d, layers, B, T = 768, 24, 1, 2048
	e, err := New(fixture.RandomWeights(fixture.Shape(d, layers, 50280), 1), 0, cuda.BF16)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	if err := e.SetPrefillGraphs(1); err != nil {
		b.Fatal(err)
	}
	st, err := e.NewState(B)
	if err != nil {
		b.Fatal(err)
	}
	stream, in, out := gputest.EntryBuffers(b, B, T, d, 50280)
	prefill := func() error {
		return e.PrefillDevice(st, "ids", uintptr(in.Ptr), cuda.F32, B, T, engine.Last, Output{Ptr: uintptr(out.Ptr), Type: cuda.F32}, stream.Handle())
	}
	for range 3 {
		if err := prefill(); err != nil {
			b.Fatal(err)
		}
	}
	if err := stream.Synchronize(); err != nil {
		b.Fatal(err)
	}
	s, err := e.own(st)
	if err != nil {
		b.Fatal(err)
	}
	g, err := e.cachedPrefill(graphKey{s: s, kind: "ids", B: B, T: T, pool: engine.Last})
	if err != nil {
		b.Fatal(err)
	}
	hostUS := func(name string, bound bool, call func() error) {
		var per []float64
		for range 15 {
			if err := stream.Synchronize(); err != nil {
				b.Fatal(err)
			}
			done := func() {}
			if bound {
				if done, err = e.bind(); err != nil {
					b.Fatal(err)
				}
			}
			t0 := time.Now()
			for range 10 {
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
			per = append(per, float64(time.Since(t0).Nanoseconds())/10/1e3)
			done()
		}
		if err := stream.Synchronize(); err != nil {
			b.Fatal(err)
		}
		b.Logf("entry host %-34s %7.1f us a call", name, gputest.Median(per))
	}
	hostUS("PrefillDevice (whole call)", false, prefill)
	hostUS("graph launch", true, func() error { return g.g.Launch(stream) })
	hostUS("input copy (16 KB, device to device)", true, func() error { return cuda.Copy(g.in.Ptr, in.Ptr, g.in.Bytes, stream) })
	hostUS("wait on the engine's last event", true, func() error { return stream.Wait(e.last) })
	hostUS("cuBLAS stream switched and back", true, func() error {
		if err := e.blas.SetStream(stream); err != nil {
			return err
		}
		return e.blas.SetStream(e.stream)
	})
	hostUS("event record", true, func() error { return e.last.Record(stream) })
	hostUS("buffer checks (input, output)", true, func() error {
		return e.checkBuffers(callerBuffer{"input", uintptr(in.Ptr), 8 * B * T}, callerBuffer{"output", uintptr(out.Ptr), 4 * d})
	})
	hostUS("bind and release", false, func() error {
		done, err := e.bind()
		if err == nil {
			done()
		}
		return err
	})
	b.Logf("entry host: graph of %d layers, B=%d T=%d", layers, B, T)
}
