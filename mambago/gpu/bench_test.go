package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// BenchmarkPrefill130m times prefills of the 130m shape (d=768, 24 layers)
// at B=1, T=2048 for several scan chunk lengths, then prints where the time
// goes, stage by stage, at the default chunk length.
func BenchmarkPrefill130m(b *testing.B) {
	gputest.Need(b)
	e, err := gpu.New(fixture.RandomWeights(fixture.Shape(768, 24, 50280), 1), 0, cuda.F32)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	const B, T = 1, 2048
	ids := make([]int64, B*T)
	for i := range ids {
		ids[i] = rand.Int64N(50280)
	}
	in, out := engine.Input{B: B, T: T, IDs: ids}, make([]float32, B*768)
	st, err := e.NewState(B)
	if err != nil {
		b.Fatal(err)
	}
	for _, chunk := range []int{64, 32, 128, 64} {
		b.Run(fmt.Sprintf("B%d_T%d_chunk%d", B, T, chunk), func(b *testing.B) {
			e.ScanChunk = chunk
			for b.Loop() {
				if err := e.Prefill(st, in, engine.Last, out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(B*T)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
	b.Run(fmt.Sprintf("B%d_T%d_tile", B, T), func(b *testing.B) {
		e.ScanChunk, e.TileScan = 0, true
		defer func() { e.TileScan = false }()
		for b.Loop() {
			if err := e.Prefill(st, in, engine.Last, out); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(B*T)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
	})
	// A short prompt, eager and as a captured graph: launch-bound.
	const short = 128
	sin, sout := engine.Input{B: B, T: short, IDs: ids[:B*short]}, make([]float32, B*768)
	b.Run(fmt.Sprintf("B%d_T%d_eager", B, short), func(b *testing.B) {
		for b.Loop() {
			if err := e.Prefill(st, sin, engine.Last, sout); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(B*short)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
	})
	b.Run(fmt.Sprintf("B%d_T%d_graph", B, short), func(b *testing.B) {
		g, err := e.CapturePrefill(st, "ids", short, engine.Last)
		if err != nil {
			b.Fatal(err)
		}
		defer g.Destroy()
		for b.Loop() {
			if err := g.Prefill(sin, sout); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(B*short)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
	})
	e.ScanChunk, e.Timer = 0, &gpu.StageTimer{}
	for range 5 {
		if err := e.Prefill(st, in, engine.Last, out); err != nil {
			b.Fatal(err)
		}
	}
	report, err := e.Timer.Report(e)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("stages over 5 prefills, B=%d T=%d, default chunk:\n%s", B, T, report)
}

// BenchmarkPrefill130mBF16 times bf16 prefills of the 130m shape at B=1,
// T=2048, with each scan, then prints where the time goes with the tile scan.
func BenchmarkPrefill130mBF16(b *testing.B) {
	gputest.Need(b)
	e, err := gpu.New(fixture.RandomWeights(fixture.Shape(768, 24, 50280), 1), 0, cuda.BF16)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	const B, T = 1, 2048
	ids := make([]int64, B*T)
	for i := range ids {
		ids[i] = rand.Int64N(50280)
	}
	in, out := engine.Input{B: B, T: T, IDs: ids}, make([]float32, B*768)
	st, err := e.NewState(B)
	if err != nil {
		b.Fatal(err)
	}
	for _, tile := range []bool{false, true, false} {
		b.Run(fmt.Sprintf("B%d_T%d_tile=%v", B, T, tile), func(b *testing.B) {
			e.TileScan = tile
			for b.Loop() {
				if err := e.Prefill(st, in, engine.Last, out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(B*T)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
	e.TileScan, e.Timer = true, &gpu.StageTimer{}
	for range 5 {
		if err := e.Prefill(st, in, engine.Last, out); err != nil {
			b.Fatal(err)
		}
	}
	report, err := e.Timer.Report(e)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("bf16 stages over 5 prefills, B=%d T=%d, tile scan:\n%s", B, T, report)
}
