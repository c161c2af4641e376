package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
	gpuengine "github.com/mambago/mambago/mambago/gpu"
)

// outNormDevice skips where OutNorm does not apply (no sm_90 GPU).
func outNormDevice(tb testing.TB, dt cuda.DType, D, K int) {
	tb.Helper()
	d := gputest.Device(tb)
	if !gpuengine.OutNormApplies(d, dt, D, K) {
		tb.Skipf("out_norm needs sm_90a (wgmma, TMA multicast); this GPU is sm_%d%d", d.Major, d.Minor)
	}
}

// outNormBuilds are out_norm.cu's builds the test checks and the benchmark
// times: the engine's (gpu.OutNormBuild's zero value), one step's MMAs in
// flight, other rings, y multicast across the cluster, and h's tile copied by
// TMA.
var outNormBuilds = []gpuengine.OutNormBuild{{}, {InFlight: true}, {Stages: 4}, {Stages: 2}, {Multicast: true},
	{HTMA: true}}

// outNormBenchBuilds are the builds BenchmarkOutNorm times: outNormBuilds,
// then the main loop alone (no epilogue) and with h loaded only (both ways
// of waiting for the MMAs). MAMBAGO_OUTNORM_BUILD=i times the i-th
// alone, for a profiler.
func outNormBenchBuilds() []gpuengine.OutNormBuild {
	all := append(append([]gpuengine.OutNormBuild{}, outNormBuilds...), gpuengine.OutNormBuild{Epilogue: -1},
		gpuengine.OutNormBuild{Epilogue: 5}, gpuengine.OutNormBuild{Epilogue: 5, InFlight: true})
	if i, err := strconv.Atoi(os.Getenv("MAMBAGO_OUTNORM_BUILD")); err == nil && i >= 0 && i < len(all) {
		return all[i : i+1]
	}
	return all
}

// outNormBuild compiles out_norm.cu for sm_90a as b, and returns a lookup
// of its entries.
func outNormBuild(tb testing.TB, b gpuengine.OutNormBuild) func(string) *cuda.Function {
	tb.Helper()
	src, err := kernels.Source("out_norm.cu")
	if err != nil {
		tb.Fatal(err)
	}
	return functions(tb, loadSourceFor(tb, "sm_90a", src, "out_norm.cu", b.Options()...))
}

// TestOutNormKernel checks out_norm (gpu.OutNorm) against float64 sums of
// its inputs as stored, bf16 and f16, at the 130m width (D = 768): the
// residual stream h + y · Wᵀ within 1e-5 of its largest value, and the
// normalized rows x within one rounding of the storage type (2^-8 of the
// largest value for bf16, 2^-11 for f16) of the float64 norm of the float64
// sums. Shapes: the 130m out_proj at T=2048, rows and K not multiples of
// the tiles (300 rows, K = 1000: y read past K and M as zeros), one row, and
// rows of y farther apart than K (the last positions of sequences). h and x
// start as NaN beyond what the kernel must write (x everywhere); fresh
// random inputs each run.
func TestOutNormKernel(t *testing.T) {
	fn, s := gpu(t)
	outNormDevice(t, cuda.BF16, 768, 64)
	for i, build := range outNormBuilds {
		lookup := fn // the engine's build, compiled as gpu.loadKernels compiles it
		if i > 0 {
			lookup = outNormBuild(t, build)
		}
		outNormCheck(t, lookup, s, build)
	}
}

// outNormCheck runs TestOutNormKernel's cases on one build.
func outNormCheck(t *testing.T, fn func(string) *cuda.Function, s *cuda.Stream, build gpuengine.OutNormBuild) {
	const D = 768
	for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
		for _, tc := range []struct{ M, K, LDY int }{{2048, 1536, 1536}, {300, 1000, 1000}, {1, 1536, 1536},
			{129, 64, 192}} {
			label := fmt.Sprintf("%s %s M=%d K=%d ldy=%d", build, dt, tc.M, tc.K, tc.LDY)
			outNormDevice(t, dt, D, tc.K)
			M, K, LDY := tc.M, tc.K, tc.LDY
			y, yPacked := pack16(dt, randn(M*LDY, 1))
			w, wPacked := pack16(dt, randn(D*K, 0.05))
			h0, nw := randn(M*D, 1), randn(D, 0.2)
			for i := range nw {
				nw[i] += 1
			}
			eps := float32(1e-5)
			bY, bW, bH, bN := upload(t, s, yPacked), upload(t, s, wPacked), upload(t, s, h0), upload(t, s, nw)
			nan16 := make([]float32, (M*D+1)/2) // M·D 16-bit elements, each a NaN in bf16 and f16
			for i := range nan16 {
				nan16[i] = math.Float32frombits(0xffffffff)
			}
			bX := upload(t, s, nan16)
			err := gpuengine.OutNorm{Y: bY.Ptr, LDY: LDY, W: bW.Ptr, H: bH.Ptr, Norm: bN.Ptr, X: bX.Ptr, M: M, D: D, K: K,
				Eps: eps, DType: dt, PDL: rand.IntN(2) == 0, Build: build}.Launch(fn, s)
			if err != nil {
				t.Fatal(err)
			}
			gotH := download(t, s, bH, M*D)
			gotX := unpack16(dt, download(t, s, bX, (M*D+1)/2))[:M*D]
			// Every row of the small shapes; 64 random rows of the large
			// one (and every NaN anywhere).
			rows := make([]int, M)
			for r := range rows {
				rows[r] = r
			}
			if M > 512 {
				rand.Shuffle(M, func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
				rows = rows[:64]
			}
			for i := range gotH {
				if gotH[i] != gotH[i] || gotX[i] != gotX[i] {
					t.Fatalf("%s: h or x [%d, %d] is NaN", label, i/D, i%D)
				}
			}
			var gh, gx []float32
			var wantH, wantX []float64
			for _, r := range rows {
				hr := make([]float64, D)
				var ss float64
				for c := 0; c < D; c++ {
					acc := float64(h0[r*D+c])
					for k := 0; k < K; k++ {
						acc += float64(y[r*LDY+k]) * float64(w[c*K+k])
					}
					hr[c], ss = acc, ss+acc*acc
				}
				scale := 1 / math.Sqrt(ss/D+float64(eps))
				for c := 0; c < D; c++ {
					wantX = append(wantX, float64(nw[c])*hr[c]*scale)
				}
				wantH = append(wantH, hr...)
				gh, gx = append(gh, gotH[r*D:(r+1)*D]...), append(gx, gotX[r*D:(r+1)*D]...)
			}
			if e := relErr(gh, wantH); !(e <= 1e-5) {
				t.Errorf("%s: h rel err %.3g", label, e)
			}
			tol := math.Ldexp(1, -8)
			if dt == cuda.F16 {
				tol = math.Ldexp(1, -11)
			}
			if e := relErr(gx, wantX); !(e <= tol) {
				t.Errorf("%s: x rel err %.3g (bar %.3g)", label, e, tol)
			}
			t.Logf("%s: h %.3g, x %.3g", label, relErr(gh, wantH), relErr(gx, wantX))
		}
	}
}

// BenchmarkOutNorm times out_norm against what it replaces in the engine,
// cuBLASLt's tuned out_proj (adding into h) then rmsnorm, at the 130m shape
// (bf16, D = 768, K = 1536) for T = 2048 and 8192: each the median of 9
// rounds of a graph of 20 launches, the two taking turns, and their ratio.
// Both launch with programmatic dependent launch where they can (out_norm
// and rmsnorm), as in the engine.
func BenchmarkOutNorm(b *testing.B) {
	fn, s := gpu(b)
	blas := tunedBLAS(b, s)
	const D, K = 768, 1536
	dt := cuda.BF16
	for _, M := range []int{2048, 8192} {
		b.Run(fmt.Sprintf("130m_T%d", M), func(b *testing.B) {
			outNormDevice(b, dt, D, K) // also makes the context current on this goroutine's thread
			_, yPacked := pack16(dt, randn(M*K, 1))
			_, wPacked := pack16(dt, randn(D*K, 0.05))
			bY, bW, bH, bN := upload(b, s, yPacked), upload(b, s, wPacked), upload(b, s, randn(M*D, 1)), upload(b, s, randn(D, 1))
			bX := upload(b, s, make([]float32, M*D/2))
			rms := fn("rmsnorm_bf16")
			runs := []func() error{
				func() error { // the engine's unfused path
					if err := blas.Gemm(M, D, K, bY.Ptr, K, bW.Ptr, bH.Ptr, D, 1, dt, cuda.F32); err != nil {
						return err
					}
					return rms.LaunchMaybePDL(true, cuda.D1((M+7)/8), cuda.D1(256), 0, s, bH.Ptr, bN.Ptr, bX.Ptr, M, D, D, D, float32(1e-5),
						cuda.Ptr(0), uint32(0), int64(0))
				},
			}
			builds := outNormBenchBuilds()
			for _, build := range builds {
				lookup := outNormBuild(b, build)
				runs = append(runs, func() error {
					return gpuengine.OutNorm{Y: bY.Ptr, LDY: K, W: bW.Ptr, H: bH.Ptr, Norm: bN.Ptr, X: bX.Ptr, M: M, D: D, K: K,
						Eps: 1e-5, DType: dt, PDL: true, Build: build}.Launch(lookup, s)
				})
			}
			if err := runs[0](); err != nil { // cuBLASLt tunes outside the capture
				b.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			times := graphTurns(b, s, runs)
			base := times[0]
			line := fmt.Sprintf("out_norm 130m T=%d: cuBLASLt out_proj + rmsnorm %.2f us", M, base)
			for i, build := range builds {
				ours := times[i+1]
				line += fmt.Sprintf("; %v: %.2f us (%.3fx; %.0f TFLOP/s)", build, ours, base/ours, 2*float64(M)*D*K/ours/1e6)
			}
			b.Log(line)
		})
	}
}
