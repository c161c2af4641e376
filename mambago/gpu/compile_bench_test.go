package gpu

import (
	"slices"
	"testing"
	"time"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
)

// BenchmarkCompileKernels times the first load's compile for sm_90 into an
// empty cache (NVRTC, no GPU), as compileKernels runs it (min(8,
// GOMAXPROCS) at once, larger sources first), two ways taking turns: every
// source whole, and in kernels.Units (a source with typed entries as one
// part a storage type). Reports each way's median seconds over b.N rounds
// and whole/units. A round compiles everything twice: about 75 s on 2
// cores, so run it with -test.benchtime=3x.
func BenchmarkCompileKernels(b *testing.B) {
	gputest.NeedNVRTC(b)
	var whole []kernels.Unit
	for _, name := range kernels.Names() {
		whole = append(whole, kernels.Unit{Name: name})
	}
	ways := []struct {
		name  string
		units []kernels.Unit
		times []float64
	}{{"whole", whole, nil}, {"units", kernels.Units(), nil}}
	for i := range b.N {
		for k := range ways {
			w := &ways[(i+k)%len(ways)] // each way first in every other round
			b.Setenv("MAMBAGO_KERNEL_CACHE", b.TempDir())
			start := time.Now()
			if _, err := compileUnits("sm_90", w.units); err != nil {
				b.Fatal(err)
			}
			w.times = append(w.times, time.Since(start).Seconds())
			b.Logf("round %d, %s (%d programs): %.1f s", i, w.name, len(w.units), w.times[len(w.times)-1])
		}
	}
	median := func(v []float64) float64 {
		v = slices.Sorted(slices.Values(v))
		return (v[(len(v)-1)/2] + v[len(v)/2]) / 2
	}
	for _, w := range ways {
		b.ReportMetric(median(w.times), w.name+"_s")
	}
	b.ReportMetric(median(ways[0].times)/median(ways[1].times), "whole/units")
}
