package cpu_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"

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

// BenchmarkOwnAgainstBLAS times the engine's own GEMMs (Engine.BLAS nil)
// against the CBLAS library $MAMBAGO_TEST_BLAS names, on a 130m-shaped
// model (random weights) in float32 and bfloat16, the two taking turns call
// by call in one process, so that a machine's drift reaches both alike:
// prefills of T=128 and 512 at B=1, and decode steps of one sequence (the
// library's SGEMV against the own GEMV). It reports each side's median
// and own/blas, the ratio of the medians (below 1: the own GEMMs faster).
// It is blas="auto"'s evidence (cpu.PreferOwnGEMM). MAMBAGO_BENCH_AVX2=1
// turns the AVX-512 kernels off, and OPENBLAS_CORETYPE=Haswell does as much
// for OpenBLAS: an AVX2 CPU of the host's core count.
func BenchmarkOwnAgainstBLAS(b *testing.B) {
	lib := blastest.Need(b)
	if os.Getenv("MAMBAGO_BENCH_AVX2") != "" {
		defer cpu.SetWideKernels(false)()
	}
	w := fixture.RandomWeights(fixture.Shape(768, 24, 50280), 1)
	for _, st := range []cpu.Storage{cpu.Float32, cpu.BFloat16} {
		own, viaBLAS := cpu.NewStored(w, st), cpu.NewStored(w, st)
		viaBLAS.BLAS = lib
		for _, T := range []int{128, 512, 1} {
			name := fmt.Sprintf("%v/prefill_T%d", st, T)
			if T == 1 {
				name = fmt.Sprintf("%v/step_B1", st)
			}
			ids := make([]int64, T)
			for i := range ids {
				ids[i] = rand.Int64N(50280)
			}
			out, logits := make([]float32, 768), make([]float32, 50280)
			run := func(e *cpu.Engine) {
				s, err := e.NewState(1)
				if err != nil {
					b.Fatal(err)
				}
				if T == 1 {
					err = e.Step(s, ids, logits)
				} else {
					err = e.Prefill(s, engine.Input{B: 1, T: T, IDs: ids}, engine.Last, out)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.Run(name, func(b *testing.B) {
				run(own) // each side warm
				run(viaBLAS)
				var times [2][]float64
				for b.Loop() {
					for i, e := range []*cpu.Engine{own, viaBLAS} {
						t0 := time.Now()
						run(e)
						times[i] = append(times[i], time.Since(t0).Seconds()*1e3)
					}
				}
				m0, m1 := fixture.Median(times[0]), fixture.Median(times[1])
				b.ReportMetric(m0, "own-ms")
				b.ReportMetric(m1, "blas-ms")
				b.ReportMetric(m0/m1, "own/blas")
			})
		}
	}
}
