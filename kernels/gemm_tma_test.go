package kernels_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
)

// gemmTMA is kernels/gemm_tma.cu built for sm_90a (wgmma and tensor maps)
// with a tile of 128 x bn, a ring of stages and blocks an SM, and a
// launcher of its entries: C [M, N] = A [M, K] · Wᵀ + beta · C, A and W of
// dt (K-major, rows K apart), C f32 (rows N apart).
type gemmTMA struct {
	bn, shared int
	slots      int // blocks the GPU holds at once; positive: launch a persistent grid of at most that many
	fn         map[cuda.DType]*cuda.Function
	s          *cuda.Stream
}

// gemmTMABuilds are the builds the test checks and the benchmark times:
// the source's defaults (128 x 128, 3 stages, two blocks an SM) on a block a
// tile and on a persistent grid (two blocks an SM), then one block an SM
// with a deeper ring (more bytes in flight), 128 x 256 tiles, and the
// defaults with each step's MMAs waited for before its stage goes back
// (GT_WAIT0).
var gemmTMABuilds = []struct {
	bn, stages, blocks int
	persistent, wait0  bool
}{{128, 3, 2, false, false}, {128, 3, 2, true, false}, {128, 6, 1, false, false}, {256, 4, 1, false, false},
	{128, 3, 2, false, true}}

// newGemmTMA compiles gemm_tma.cu for d's sm_90a with a tile of 128 x bn,
// stages stages, blocks blocks an SM and GT_WAIT0 as wait0 says, or skips
// where d is no sm_90 GPU.
func newGemmTMA(tb testing.TB, s *cuda.Stream, bn, stages, blocks int, persistent, wait0 bool) *gemmTMA {
	tb.Helper()
	d := gputest.Device(tb)
	if d.Major != 9 || d.Minor != 0 {
		tb.Skipf("gemm_tma needs sm_90a (wgmma); this GPU is sm_%d%d", d.Major, d.Minor)
	}
	src, err := kernels.Source("gemm_tma.cu")
	if err != nil {
		tb.Fatal(err)
	}
	m := loadSourceFor(tb, "sm_90a", src, "gemm_tma.cu", fmt.Sprintf("-DGT_BN=%d", bn),
		fmt.Sprintf("-DGT_STAGES=%d", stages), fmt.Sprintf("-DGT_BLOCKS=%d", blocks), fmt.Sprintf("-DGT_WAIT0=%d", b2i(wait0)))
	// gemm_tma_shared(): the ring of stages of A's 128 and W's bn rows of 64
	// 16-bit elements, 1024 bytes of alignment, two barriers a stage.
	g := &gemmTMA{bn: bn, shared: stages*(128+bn)*64*2 + 1024 + 2*stages*8, fn: map[cuda.DType]*cuda.Function{}, s: s}
	if persistent {
		g.slots = blocks * d.SMs
	}
	for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
		f, err := m.Function("gemm_tma_" + dt.Suffix())
		if err != nil {
			tb.Fatal(err)
		}
		if err := f.SetMaxDynamicShared(g.shared); err != nil {
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
	wm, err := cuda.NewTensorMap2D(dt, W, N, K, K, g.bn, 64)
	return am, wm, err
}

// launch queues the GEMM (with programmatic dependent launch when pdl).
func (g *gemmTMA) launch(dt cuda.DType, am, wm cuda.TensorMap, C cuda.Ptr, M, N, K int, beta float32, pdl bool) error {
	grid := cuda.Dim3{X: (N + g.bn - 1) / g.bn, Y: (M + 127) / 128, Z: 1}
	if g.slots > 0 {
		grid = cuda.Dim3{X: min(grid.X*grid.Y, g.slots), Y: 1, Z: 1}
	}
	return g.fn[dt].LaunchMaybePDL(pdl, grid, cuda.D1(288), g.shared, g.s, am, wm, C, N, M, N, K, beta)
}

// TestGemmTMAKernel checks each build of gemm_tma (gemmTMABuilds; bf16, f16)
// against float64 sums of the products of its inputs as stored: within 1e-5
// of C's largest value (64 random rows of the two large shapes), at
// the 130m in_proj and out_proj shapes (the latter adding into C, beta 1),
// at shapes with partial tiles in every dimension (M, N not multiples of
// 128, K not of 64), and at one row. C starts as NaN where beta is 0, so an
// element the kernel skips fails. Fresh random inputs each run.
func TestGemmTMAKernel(t *testing.T) {
	_, s := gpu(t)
	for _, build := range gemmTMABuilds {
		g := newGemmTMA(t, s, build.bn, build.stages, build.blocks, build.persistent, build.wait0)
		for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
			gemmTMACheck(t, g, s, dt, fmt.Sprintf("128x%d %d stages persistent %v wait0 %v", build.bn, build.stages,
				build.persistent, build.wait0))
		}
	}
}

// gemmTMACheck runs TestGemmTMAKernel's shapes on one build and type.
func gemmTMACheck(t *testing.T, g *gemmTMA, s *cuda.Stream, dt cuda.DType, build string) {
	for _, tc := range []struct {
		M, N, K int
		beta    float32
	}{{2048, 3072, 768, 0}, {2048, 768, 1536, 1}, {300, 200, 96, 0}, {1, 128, 64, 0}, {130, 72, 1000, 1}, {129, 257, 8, 0}} {
		label := fmt.Sprintf("%s %s M=%d N=%d K=%d beta=%g", build, dt, tc.M, tc.N, tc.K, tc.beta)
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
		got := download(t, s, bC, M*N)
		// Every row of the small shapes; of the large ones 64 random rows
		// (and every NaN anywhere), to keep the float64 sums quick.
		rows := make([]int, 0, M)
		for r := 0; r < M; r++ {
			rows = append(rows, r)
		}
		if M*N*K > 1<<26 {
			rand.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
			rows = rows[:64]
			for i, v := range got {
				if v != v {
					t.Fatalf("%s: C[%d, %d] is NaN", label, i/N, i%N)
				}
			}
		}
		var gotRows []float32
		var want []float64
		for _, r := range rows {
			gotRows = append(gotRows, got[r*N:(r+1)*N]...)
			for c := 0; c < N; c++ {
				var acc float64
				for k := 0; k < K; k++ {
					acc += float64(a[r*K+k]) * float64(w[c*K+k])
				}
				if tc.beta != 0 {
					acc += float64(tc.beta) * float64(c0[r*N+c])
				}
				want = append(want, acc)
			}
		}
		if e := relErr(gotRows, want); !(e <= 1e-5) {
			t.Errorf("%s: rel err %.3g", label, e)
		}
	}
}

// BenchmarkGemmTMA times gemm_tma against cuBLASLt (its tuned pick, as the
// engine runs it) at the 130m and 1.4b prefill GEMMs (in_proj, out_proj
// adding into C) at T=2048 and 8192, bf16: each the median of 9 rounds of a
// graph of 20 launches, the two taking turns, and their ratio.
func BenchmarkGemmTMA(b *testing.B) {
	_, s := gpu(b)
	var builds []*gemmTMA
	for _, build := range gemmTMABuilds {
		builds = append(builds, newGemmTMA(b, s, build.bn, build.stages, build.blocks, build.persistent, build.wait0))
	}
	blas := tunedBLAS(b, s)
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
			runs := []func() error{func() error { return blas.Gemm(M, N, K, bA.Ptr, K, bW.Ptr, bC.Ptr, N, tc.beta, dt, cuda.F32) }}
			for _, g := range builds {
				am, wm, err := g.maps(dt, bA.Ptr, bW.Ptr, M, N, K)
				if err != nil {
					b.Fatal(err)
				}
				runs = append(runs, func() error { return g.launch(dt, am, wm, bC.Ptr, M, N, K, tc.beta, true) })
			}
			if err := runs[0](); err != nil { // cuBLASLt tunes outside the capture
				b.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			times := graphTurns(b, s, runs) // the builds taking turns
			flops := 2 * float64(M) * float64(N) * float64(K)
			mt := times[0]
			line := fmt.Sprintf("gemm_tma %s: cuBLASLt %.2f us (%.0f TFLOP/s)", tc.name, mt, flops/mt/1e6)
			for i, build := range gemmTMABuilds {
				mo := times[i+1]
				kind := ""
				if build.persistent {
					kind = "/persistent"
				}
				if build.wait0 {
					kind += "/each step waited for"
				}
				line += fmt.Sprintf("; 128x%d/%d stages/%d an SM%s %.2f us (%.0f TFLOP/s, %.3fx)", build.bn, build.stages,
					build.blocks, kind, mo, flops/mo/1e6, mt/mo)
			}
			b.Log(line)
		})
	}
}

// b2i is 1 for true, 0 for false.
func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}
