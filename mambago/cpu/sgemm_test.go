package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// TestSgemm checks sgemm on each micro-kernel against float64 sums, on
// fresh random operands: shapes that leave edge blocks in both directions
// and one K past sgemmKC (several blocks of k) and past sgemmMC rows, K
// under a block, padded row strides, W in each Storage (widened as it is
// packed, through transpose16 with AVX-512, transpose8 with AVX2), beta 0 (C not read: NaN
// there must not leak), 1 and 0.5, at 1 and 3 goroutines.
func TestSgemm(t *testing.T) {
	if !hasAVX2 {
		t.Skip("this CPU has no AVX2/FMA: gemm runs gonum's SGEMM")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	defer func() { useWideSgemm = hasAVX512 }()
	rng := rand.New(rand.NewPCG(rand.Uint64(), 13))
	for _, wide := range []bool{false, true} {
		if wide && !hasAVX512 {
			continue
		}
		useWideSgemm = wide
		s, _ := sgemmKernel()
		for _, sh := range [][3]int{{1, 1, 1}, {7, 33, 5}, {13, 31, 300}, {250, 70, 529}, {64, 96, 256}, {5, 200, 17}} {
			M, N, K := sh[0], sh[1], sh[2]
			for _, st := range []Storage{Float32, BFloat16, Float16} {
				for _, beta := range []float32{0, 1, 0.5} {
					procs := 1 + 2*rng.IntN(2)
					runtime.GOMAXPROCS(procs)
					name := fmt.Sprintf("mr=%d/M=%d_N=%d_K=%d/%v/beta=%v/procs=%d", s.mr, M, N, K, st, beta, procs)
					lda, ldc := K+rng.IntN(3), N+rng.IntN(3)
					a, c := randVec(M*lda), randVec(M*ldc)
					if beta == 0 {
						for i := range c {
							c[i] = float32(math.NaN())
						}
					}
					w := newMatrix(randVec(N*K), N, K, st)
					want := make([]float64, len(c))
					for m := range M {
						for n := range N {
							var sum float64
							for k := range K {
								sum += float64(a[m*lda+k]) * float64(w.at(n, k))
							}
							if beta != 0 {
								sum += float64(beta) * float64(c[m*ldc+n])
							}
							want[m*ldc+n] = sum
						}
					}
					c0 := slices.Clone(c)
					sgemm(s, c, ldc, a, lda, w, M, N, K, beta)
					for m := range M {
						for n := range ldc {
							i := m*ldc + n
							if n >= N {
								if math.Float32bits(c[i]) != math.Float32bits(c0[i]) {
									t.Fatalf("%s: C's padding [%d, %d] written", name, m, n)
								}
								continue
							}
							if math.Abs(float64(c[i])-want[i]) > 1e-5*(math.Sqrt(float64(K))+math.Abs(want[i])) {
								t.Fatalf("%s: C[%d, %d] = %v, want %v", name, m, n, c[i], want[i])
							}
						}
					}
				}
			}
		}
	}
}

// BenchmarkSgemm times sgemm on each micro-kernel, and gonum's SGEMM, on
// the 130m prefill's in_proj and out_proj at T=128 and T=512 ([T, 768] by
// [3072, 768]ᵀ and [T, 1536] by [768, 1536]ᵀ), in GFLOP/s, with W in
// float32 and (on our kernels) bfloat16. Each call takes the next of eight
// copies of W (19 to 75 MB in all), so that W comes from past the caches,
// or for bf16 out_proj's 19 MB from L3 at most, as in a prefill, where a
// layer's weights were last read a whole model before.
func BenchmarkSgemm(b *testing.B) {
	if !hasAVX2 {
		b.Skip("this CPU has no AVX2/FMA")
	}
	defer func() { useWideSgemm = hasAVX512 }()
	for _, sh := range [][3]int{{128, 3072, 768}, {128, 768, 1536}, {512, 3072, 768}, {512, 768, 1536}} {
		M, N, K := sh[0], sh[1], sh[2]
		a, c := randVec(M*K), make([]float32, M*N)
		flops := 2 * float64(M) * float64(N) * float64(K)
		for _, st := range []Storage{Float32, BFloat16} {
			ws := make([]matrix, 8)
			for i := range ws {
				ws[i] = newMatrix(randVec(N*K), N, K, st)
			}
			for _, kernel := range []string{"gonum", "avx2", "avx512"} {
				if kernel == "avx512" && !hasAVX512 || kernel == "gonum" && st != Float32 {
					continue
				}
				b.Run(fmt.Sprintf("%dx%dx%d/%v/%s", M, N, K, st, kernel), func(b *testing.B) {
					useWideSgemm = kernel == "avx512"
					s, _ := sgemmKernel()
					i := 0
					for b.Loop() {
						w := ws[i%len(ws)]
						i++
						if kernel == "gonum" {
							blas32.Gemm(gblas.NoTrans, gblas.Trans, 1, blas32.General{Rows: M, Cols: K, Stride: K, Data: a},
								blas32.General{Rows: N, Cols: K, Stride: K, Data: w.f32}, 0, blas32.General{Rows: M, Cols: N, Stride: N, Data: c})
							continue
						}
						sgemm(s, c, N, a, K, w, M, N, K, 0)
					}
					b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// TestPackPanel checks packPanel's micro-panels value for value against W
// (each Storage widened exactly), on each micro-kernel's panel width: W's
// rows ending inside a panel and inside a transpose block, k blocks of
// every remainder, and a start row n0 > 0.
func TestPackPanel(t *testing.T) {
	if !hasAVX2 {
		t.Skip("this CPU has no AVX2/FMA: gemm runs gonum's SGEMM")
	}
	defer func() { useWideSgemm = hasAVX512 }()
	for _, wide := range []bool{false, true} {
		if wide && !hasAVX512 {
			continue
		}
		useWideSgemm = wide
		s, _ := sgemmKernel()
		nr := s.nr
		for _, st := range []Storage{Float32, BFloat16, Float16} {
			for _, sh := range [][3]int{{3 * nr, 300, 0}, {2*nr + 5, 41, 3}, {nr - 3, 17, 1}, {nr + 9, 256, 2}} {
				rows, K, n0 := sh[0], sh[1], sh[2]
				w := newMatrix(randVec((rows+n0)*K), rows+n0, K, st)
				for k0 := 0; k0 < K; k0 += sgemmKC {
					kc := min(sgemmKC, K-k0)
					for p := 0; p*nr < rows; p++ {
						panel := randVec(nr * kc)
						packPanel(panel, w, n0, rows, p, k0, kc, nr)
						for k := range kc {
							for j := range nr {
								want := float32(0)
								if n := p*nr + j; n < rows {
									want = w.at(n0+n, k0+k)
								}
								if got := panel[k*nr+j]; math.Float32bits(got) != math.Float32bits(want) {
									t.Fatalf("nr=%d %v rows=%d K=%d n0=%d: panel %d of k0=%d [%d][%d] = %v, want %v",
										nr, st, rows, K, n0, p, k0, k, j, got, want)
								}
							}
						}
					}
				}
			}
		}
	}
}
