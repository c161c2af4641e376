package cpu

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/mambago/mambago/internal/blastest"
	"github.com/mambago/mambago/mambago/blas"
)

// BenchmarkGemmSplits times a prefill GEMM (C = A·Wᵀ) cut over the
// goroutines in several ways, each block one single-threaded SGEMM of
// $MAMBAGO_TEST_BLAS: "split" (one strip of W's rows a goroutine), "split4"
// (four strips a goroutine, taken as they come), "tiles" (blocks of 128
// rows of A by 384 of W) and "gemm" (gemmTiles' cut, as gemm runs it). It
// reports GFLOP/s and, for "split", the slowest block's time over the
// fastest one's (the median of that ratio over the runs).
func BenchmarkGemmSplits(b *testing.B) {
	lib := perCallBLAS(b)
	workers, e := runtime.GOMAXPROCS(0), &Engine{BLAS: lib}
	for _, s := range []struct {
		name    string
		M, N, K int
	}{
		{"in_proj_T128", 128, 3072, 768}, {"in_proj_T512", 512, 3072, 768}, {"out_proj_T512", 512, 768, 1536},
		{"x_proj_T512", 512, 80, 1536}, {"in_proj_T2048", 2048, 3072, 768}, {"out_proj_T2048", 2048, 768, 1536},
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
			{"gemm", func([]time.Duration) { e.gemmTiled(c, s.N, a, s.K, w, s.M, s.N, s.K, 0, workers) }},
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

// randVec returns n fresh standard-normal values.
func randVec(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rand.NormFloat64())
	}
	return v
}

// TestGemmTiled checks gemmTiled against float64 at every kind of cut
// gemmTiles makes (strips along either side, tiles from gemmTileWorkers
// workers on, shapes no tile divides), with beta 0 and 1.
func TestGemmTiled(t *testing.T) {
	e := &Engine{BLAS: perCallBLAS(t)}
	for _, s := range []struct{ M, N, K int }{{9, 300, 17}, {300, 37, 29}, {517, 1001, 64}, {2048, 80, 40}, {33, 4000, 8}} {
		for _, workers := range []int{1, 2, 7, gemmTileWorkers, 16, 64} {
			for _, beta := range []float32{0, 1} {
				lda, ldc := s.K+3, s.N+5
				a, w, c := randVec(s.M*lda), randVec(s.N*s.K), randVec(s.M*ldc)
				want := make([]float64, len(c))
				for i, v := range c {
					want[i] = float64(v)
				}
				for m := range s.M {
					for n := range s.N {
						var sum float64
						for k := range s.K {
							sum += float64(a[m*lda+k]) * float64(w[n*s.K+k])
						}
						want[m*ldc+n] = sum + float64(beta)*float64(c[m*ldc+n])
					}
				}
				e.gemmTiled(c, ldc, a, lda, w, s.M, s.N, s.K, beta, workers)
				for i := range c {
					if math.Abs(float64(c[i])-want[i]) > 1e-5*(math.Sqrt(float64(s.K))+math.Abs(want[i])) {
						t.Fatalf("%+v workers=%d beta=%v: c[%d] = %v, want %v", s, workers, beta, i, c[i], want[i])
					}
				}
			}
		}
	}
}

// TestGemmTiles checks the cut itself: strips below gemmTileWorkers
// workers, about four tiles a worker from there on, no side below its
// floor unless the whole side is smaller.
func TestGemmTiles(t *testing.T) {
	for _, s := range [][2]int{{512, 3072}, {512, 768}, {512, 80}, {2048, 3072}, {128, 3072}, {1, 1}, {9, 50280}, {5000, 3}} {
		M, N := s[0], s[1]
		for _, workers := range []int{1, 2, 4, 7, 8, 16, 32, 128} {
			tm, tn := gemmTiles(M, N, workers)
			tiles := ((M + tm - 1) / tm) * ((N + tn - 1) / tn)
			if tm < 1 || tn < 1 || tm > M && tm > 64 || tn > N && tn > 64 {
				t.Fatalf("M=%d N=%d workers=%d: tile %dx%d", M, N, workers, tm, tn)
			}
			if workers < gemmTileWorkers && tm != M && tn != N {
				t.Errorf("M=%d N=%d workers=%d: tile %dx%d is no strip", M, N, workers, tm, tn)
			}
			if workers >= gemmTileWorkers && M >= 32*workers && N >= 64*workers && (tiles < 3*workers || tiles > 5*workers) {
				t.Errorf("M=%d N=%d workers=%d: %d tiles of %dx%d, want about %d", M, N, workers, tiles, tm, tn, 4*workers)
			}
		}
	}
}

// perCallBLAS opens the CBLAS library $MAMBAGO_TEST_BLAS names, skipping
// where none is named or where it takes no per-call thread count (so that
// single-threaded calls can run side by side, as gemmTiled runs them).
func perCallBLAS(tb testing.TB) *blas.Lib {
	tb.Helper()
	lib := blastest.Need(tb)
	if !lib.SingleThreaded {
		tb.Skip("the library takes no per-call thread count")
	}
	return lib
}
