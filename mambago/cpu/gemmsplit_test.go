package cpu

import (
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/mambago/mambago/mambago/blas"
)

// BenchmarkGemmSplits times a prefill GEMM (C = A·Wᵀ) cut over the
// goroutines in several ways, each block one single-threaded SGEMM of
// $MAMBAGO_TEST_BLAS: "split" (one block of W's rows a goroutine, as gemm
// does), "split4" (four blocks a goroutine, taken as they come), "tiles"
// (blocks of 128 rows of A by 384 of W). It reports GFLOP/s and, for
// "split", the slowest block's time over the fastest one's (the median of
// that ratio over the runs).
func BenchmarkGemmSplits(b *testing.B) {
	path := os.Getenv("MAMBAGO_TEST_BLAS")
	if path == "" {
		b.Skip("MAMBAGO_TEST_BLAS is not set")
	}
	lib, err := blas.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	if !lib.SingleThreaded {
		b.Skip("the library takes no per-call thread count")
	}
	workers := runtime.GOMAXPROCS(0)
	for _, s := range []struct {
		name    string
		M, N, K int
	}{
		{"in_proj_T512", 512, 3072, 768}, {"out_proj_T512", 512, 768, 1536}, {"in_proj_T2048", 2048, 3072, 768},
	} {
		a, w, c := randVec(s.M*s.K), randVec(s.N*s.K), make([]float32, s.M*s.N)
		gemmBlock := func(m0, m1, n0, n1 int) {
			lib.Sgemm(true, m1-m0, n1-n0, s.K, 1, a[m0*s.K:], s.K, w[n0*s.K:], s.K, 0, c[m0*s.N+n0:], s.N)
		}
		strategies := []struct {
			name string
			run  func(times []time.Duration)
		}{
			{"split", func(times []time.Duration) {
				grain := (s.N + workers - 1) / workers
				parallelRows(s.N, grain, func(lo, hi int) {
					t0 := time.Now()
					gemmBlock(0, s.M, lo, hi)
					times[lo/grain] = time.Since(t0)
				})
			}},
			{"split4", func([]time.Duration) {
				parallelRows(s.N, max(16, (s.N+4*workers-1)/(4*workers)), func(lo, hi int) { gemmBlock(0, s.M, lo, hi) })
			}},
			{"tiles", func([]time.Duration) {
				const tm, tn = 128, 384
				mb, nb := (s.M+tm-1)/tm, (s.N+tn-1)/tn
				parallelFor(mb*nb, func(i int) {
					m0, n0 := i/nb*tm, i%nb*tn
					gemmBlock(m0, min(s.M, m0+tm), n0, min(s.N, n0+tn))
				})
			}},
		}
		for _, st := range strategies {
			b.Run(s.name+"/"+st.name, func(b *testing.B) {
				times := make([]time.Duration, workers)
				var spread []float64
				for b.Loop() {
					st.run(times)
					if st.name == "split" {
						sorted := slices.Sorted(slices.Values(times))
						spread = append(spread, float64(sorted[len(sorted)-1])/float64(sorted[0]))
					}
				}
				b.ReportMetric(2*float64(s.M*s.N*s.K)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				if len(spread) > 0 {
					slices.Sort(spread)
					b.ReportMetric(spread[len(spread)/2], "max/min")
				}
			})
		}
	}
}

func randVec(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rand.NormFloat64())
	}
	return v
}
