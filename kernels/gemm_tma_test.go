package kernels_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
)

// gemmTMA is kernels/gemm_tma.cu built for sm_90a (wgmma and tensor maps),
// and a launcher of its entries: C [M, N] = A [M, K] · Wᵀ + beta · C, A and
// W of dt (K-major, rows K apart), C f32 (rows N apart).
type gemmTMA struct {
	fn map[cuda.DType]*cuda.Function
	s  *cuda.Stream
}

// gemmTMAShared is gemm_tma_shared(): 3 stages (GT_STAGES) of two 128 x 64
// 16-bit tiles, 1024 bytes of alignment, the barriers.
const gemmTMAShared = 3*(128+128)*64*2 + 1024 + 2*3*8

// newGemmTMA compiles gemm_tma.cu for d's sm_90a, or skips where d is no
// sm_90 GPU.
func newGemmTMA(tb testing.TB, s *cuda.Stream) *gemmTMA {
	tb.Helper()
	d := gputest.Device(tb)
	if d.Major != 9 || d.Minor != 0 {
		tb.Skipf("gemm_tma needs sm_90a (wgmma); this GPU is sm_%d%d", d.Major, d.Minor)
	}
	src, err := kernels.Source("gemm_tma.cu")
	if err != nil {
		tb.Fatal(err)
	}
	cubin, err := cuda.Compile(src, "gemm_tma.cu", "sm_90a", "--std=c++17")
	if err != nil {
		tb.Fatal(err)
	}
	m, err := cuda.LoadModule(cubin)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Unload() })
	g := &gemmTMA{fn: map[cuda.DType]*cuda.Function{}, s: s}
	for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
		f, err := m.Function("gemm_tma_" + dt.Suffix())
		if err != nil {
			tb.Fatal(err)
		}
		if err := f.SetMaxDynamicShared(gemmTMAShared); err != nil {
			tb.Fatal(err)
		}
		g.fn[dt] = f
	}
	return g
}

// maps encodes A's and W's tensor maps.
func (g *gemmTMA) maps(dt cuda.DType, A, W cuda.Ptr, M, N, K int) (cuda.TensorMap, cuda.TensorMap, error) {
	am, err := cuda.NewTensorMap2D(dt, A, M, K, K, 128, 64)
	if err != nil {
		return am, am, err
	}
	wm, err := cuda.NewTensorMap2D(dt, W, N, K, K, 128, 64)
	return am, wm, err
}

// launch queues the GEMM (with programmatic dependent launch when pdl).
func (g *gemmTMA) launch(dt cuda.DType, am, wm cuda.TensorMap, C cuda.Ptr, M, N, K int, beta float32, pdl bool) error {
	return g.fn[dt].LaunchMaybePDL(pdl, cuda.Dim3{X: (N + 127) / 128, Y: (M + 127) / 128, Z: 1}, cuda.D1(288),
		gemmTMAShared, g.s, am, wm, C, N, M, N, K, beta)
}

// TestGemmTMAKernel checks gemm_tma (bf16, f16) against float64 sums of the
// products of its inputs as stored: within 1e-5 of C's largest value, at
// the 130m in_proj and out_proj shapes (the latter adding into C, beta 1),
// at shapes with partial tiles in every dimension (M, N not multiples of
// 128, K not of 64), and at one row. C starts as NaN where beta is 0, so an
// element the kernel skips fails. Fresh random inputs each run.
func TestGemmTMAKernel(t *testing.T) {
	_, s := gpu(t)
	g := newGemmTMA(t, s)
	for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
		for _, tc := range []struct {
			M, N, K int
			beta    float32
		}{{2048, 3072, 768, 0}, {2048, 768, 1536, 1}, {300, 200, 96, 0}, {1, 128, 64, 0}, {130, 72, 1000, 1}, {129, 257, 8, 0}} {
			label := fmt.Sprintf("%s M=%d N=%d K=%d beta=%g", dt, tc.M, tc.N, tc.K, tc.beta)
			M, N, K := tc.M, tc.N, tc.K
			a, aPacked := pack16(dt, randn(M*K, 1))
			w, wPacked := pack16(dt, randn(N*K, 0.05))
			c0 := randn(M*N, 1)
			bA, bW := upload(t, s, aPacked), upload(t, s, wPacked)
			var bC *cuda.Buffer
			if tc.beta != 0 {
				bC = upload(t, s, c0)
			} else {
				bC = poisoned(t, s, M*N)
			}
			am, wm, err := g.maps(dt, bA.Ptr, bW.Ptr, M, N, K)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.launch(dt, am, wm, bC.Ptr, M, N, K, tc.beta, rand.IntN(2) == 0); err != nil {
				t.Fatal(err)
			}
			want := make([]float64, M*N)
			for r := 0; r < M; r++ {
				for c := 0; c < N; c++ {
					var acc float64
					for k := 0; k < K; k++ {
						acc += float64(a[r*K+k]) * float64(w[c*K+k])
					}
					if tc.beta != 0 {
						acc += float64(tc.beta) * float64(c0[r*N+c])
					}
					want[r*N+c] = acc
				}
			}
			if e := relErr(download(t, s, bC, M*N), want); !(e <= 1e-5) {
				t.Errorf("%s: rel err %.3g", label, e)
			}
		}
	}
}

// BenchmarkGemmTMA times gemm_tma against cuBLASLt (its tuned pick, as the
// engine runs it) at the 130m and 1.4b prefill GEMMs (in_proj, out_proj
// adding into C) at T=2048 and 8192, bf16: each the median of 9 rounds of a
// graph of 20 launches, the two taking turns, and their ratio.
func BenchmarkGemmTMA(b *testing.B) {
	_, s := gpu(b)
	g := newGemmTMA(b, s)
	blas, err := cuda.NewBLAS(s, false)
	if err != nil {
		b.Fatal(err)
	}
	defer blas.Destroy()
	blas.Algo = cuda.GemmLtTuned
	dt := cuda.BF16
	for _, tc := range []struct {
		name    string
		M, N, K int
		beta    float32
	}{
		{"130m_in_proj_T2048", 2048, 3072, 768, 0}, {"130m_out_proj_T2048", 2048, 768, 1536, 1},
		{"130m_in_proj_T8192", 8192, 3072, 768, 0}, {"1.4b_in_proj_T2048", 2048, 8192, 2048, 0},
		{"1.4b_out_proj_T2048", 2048, 2048, 4096, 1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			gputest.Device(b) // a sub-benchmark runs on its own goroutine: the context made current on its thread
			M, N, K := tc.M, tc.N, tc.K
			_, aPacked := pack16(dt, randn(M*K, 1))
			_, wPacked := pack16(dt, randn(N*K, 0.05))
			bA, bW, bC := upload(b, s, aPacked), upload(b, s, wPacked), upload(b, s, randn(M*N, 1))
			am, wm, err := g.maps(dt, bA.Ptr, bW.Ptr, M, N, K)
			if err != nil {
				b.Fatal(err)
			}
			ours := func() error { return g.launch(dt, am, wm, bC.Ptr, M, N, K, tc.beta, true) }
			theirs := func() error { return blas.Gemm(M, N, K, bA.Ptr, K, bW.Ptr, bC.Ptr, N, tc.beta, dt, cuda.F32) }
			if err := theirs(); err != nil { // tunes outside the capture
				b.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			var tOurs, tTheirs []float64
			for round := 0; round < 9; round++ {
				for _, x := range []struct {
					f   func() error
					out *[]float64
				}{{ours, &tOurs}, {theirs, &tTheirs}} {
					ms, err := cuda.TimeGraph(s, 20, x.f)
					if err != nil {
						b.Fatal(err)
					}
					*x.out = append(*x.out, float64(ms)*1e3) // TimeGraph: ms a run
				}
			}
			mo, mt := median(tOurs), median(tTheirs)
			flops := 2 * float64(M) * float64(N) * float64(K)
			b.Logf("gemm_tma %s: ours %.2f us (%.0f TFLOP/s), cuBLASLt %.2f us (%.0f TFLOP/s): %.3fx", tc.name,
				mo, flops/mo/1e6, mt, flops/mt/1e6, mt/mo)
		})
	}
}

// median returns the median of v (which it sorts).
func median(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}
