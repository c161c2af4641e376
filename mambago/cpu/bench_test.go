package cpu_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
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

// BenchmarkStorage130m times a 130m-shaped model (random weights) with its
// matrices kept in each Storage, taking turns in one process: a prefill of
// B=1, T=512, and a decode step (with its logits) of 1, 2, 4 and 8 sequences.
// The GEMMs run in the library MAMBAGO_TEST_BLAS names (numpy's OpenBLAS),
// or in gonum without one.
func BenchmarkStorage130m(b *testing.B) {
	w := fixture.RandomWeights(fixture.Shape(768, 24, 50280), 1)
	lib := blastest.Maybe(b)
	for _, st := range []cpu.Storage{cpu.Float32, cpu.BFloat16, cpu.Float16} {
		e := cpu.NewStored(w, st)
		e.BLAS = lib
		b.Run(fmt.Sprintf("%v/prefill_T512", st), func(b *testing.B) {
			ids := make([]int64, 512)
			for i := range ids {
				ids[i] = int64(i * 7 % 50280)
			}
			out := make([]float32, 768)
			for b.Loop() {
				st, _ := e.NewState(1)
				if err := e.Prefill(st, engine.Input{B: 1, T: 512, IDs: ids}, engine.Last, out); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(512*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
		for _, B := range []int{1, 2, 4, 8} {
			b.Run(fmt.Sprintf("%v/step_B%d", st, B), func(b *testing.B) {
				s, _ := e.NewState(B)
				ids, logits := make([]int64, B), make([]float32, B*50280)
				for b.Loop() {
					if err := e.Step(s, ids, logits); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/step")
			})
		}
	}
}

// BenchmarkLockedCaller times a 130m-shaped bfloat16 decode step of one
// sequence from an ordinary goroutine and from one locked to its OS thread,
// as every call from C (Python's) is: the engine's entry points run their
// work on a goroutine of their own (offCaller), so the two should match.
func BenchmarkLockedCaller(b *testing.B) {
	e := cpu.NewStored(fixture.RandomWeights(fixture.Shape(768, 24, 50280), 1), cpu.BFloat16)
	for _, locked := range []bool{false, true} {
		b.Run(fmt.Sprintf("locked=%v", locked), func(b *testing.B) {
			if locked {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			s, _ := e.NewState(1)
			ids, logits := make([]int64, 1), make([]float32, 50280)
			for b.Loop() {
				if err := e.Step(s, ids, logits); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "ms/step")
		})
	}
}
