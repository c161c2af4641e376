package cpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/blastest"
	"github.com/mambago/mambago/mambago/cpu"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// BenchmarkPrefill130m times a prefill of the 130m shape (d=768, 24 layers).
func BenchmarkPrefill130m(b *testing.B) {
	e := cpu.New(fixture.RandomWeights(fixture.Shape(768, 24, 50280), 1))
	e.BLAS = blastest.Maybe(b)
	for _, T := range []int{128, 512} {
		b.Run(fmt.Sprintf("B1_T%d", T), func(b *testing.B) {
			ids := make([]int64, T)
			for i := range ids {
				ids[i] = rand.Int64N(50280)
			}
			out := make([]float32, 768)
			e.Timer = &cpu.StageTimer{}
			for b.Loop() {
				st, _ := e.NewState(1)
				if err := e.Prefill(st, engine.Input{B: 1, T: T, IDs: ids}, engine.Last, out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(T)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			b.Logf("stages over %d prefills:\n%s", b.N, e.Timer)
		})
	}
}
