package kernels_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
)

// skinnyCopies is how many copies of the weights BenchmarkGemmSkinny turns
// through, so that each launch of a graph reads its weights from HBM, as a
// prefill does (4 copies of 1.4b's in_proj are 134 MB against 50 MB of L2).
const skinnyCopies = 4

// BenchmarkGemmSkinny times gemm_skinny_bf16_f32 (kernels/gemv_wg.cu)
// against cuBLASLt's tuned pick at the GEMMs of a short prompt on the large
// shapes, as the engine runs them (f32 out): in_proj and out_proj
// (accumulated) of 1.4b and 2.8b at T = 128 and 64, with k split over 1, 2 and 4 blocks. Graphs
// of 20 launches, each on the next of skinnyCopies copies of the weights
// (L2 cold for them), the runs taking turns (graphTurns); µs a launch and
// the rate at which the weights stream (their bytes over the time).
// $SKINNY_SPLITS (e.g. "4") replaces the splits (for ncu, which then sees
// one configuration's launches).
func BenchmarkGemmSkinny(b *testing.B) {
	fn, s := gpu(b)
	needSM90(b)
	if err := fn("gemm_skinny_bf16_f32").SetMaxDynamicShared(gemmSkinnyShared); err != nil {
		b.Fatal(err)
	}
	blas := tunedBLAS(b, s)
	for _, tc := range []struct {
		name    string
		T, N, K int
		accu    bool
	}{
		{"1.4b_in_proj", 128, 8192, 2048, false}, {"1.4b_out_proj", 128, 2048, 4096, true},
		{"2.8b_in_proj", 128, 10240, 2560, false}, {"2.8b_out_proj", 128, 2560, 5120, true},
		{"1.4b_in_proj", 64, 8192, 2048, false}, {"1.4b_out_proj", 64, 2048, 4096, true},
	} {
		b.Run(fmt.Sprintf("%s_T%d", tc.name, tc.T), func(b *testing.B) {
			gputest.Device(b) // a sub-benchmark runs on its own goroutine: the context made current on its thread
			T, N, K := tc.T, tc.N, tc.K
			_, xPacked := bf16Bits(randn(T*K, 1))
			bx, bo := upload(b, s, xPacked), upload(b, s, randn(T*N, 1))
			xmap, err := cuda.NewTensorMap2D(cuda.BF16, bx.Ptr, T, K, K, 128, 64)
			if err != nil {
				b.Fatal(err)
			}
			var ws []cuda.Ptr
			var wmaps []cuda.TensorMap
			for range skinnyCopies {
				_, wPacked := bf16Bits(randn(N*K, 0.05))
				bw := upload(b, s, wPacked)
				wmap, err := cuda.NewTensorMap2D(cuda.BF16, bw.Ptr, N, K, K, 64, 64)
				if err != nil {
					b.Fatal(err)
				}
				ws, wmaps = append(ws, bw.Ptr), append(wmaps, wmap)
			}
			beta, accu := float32(0), 0
			if tc.accu {
				beta, accu = 1, 1
			}
			next := 0 // the copy of the weights the next launch reads
			turn := func() int { next = (next + 1) % skinnyCopies; return next }
			runs := []func() error{func() error {
				return blas.Gemm(T, N, K, bx.Ptr, K, ws[turn()], bo.Ptr, N, beta, cuda.BF16, cuda.F32)
			}}
			tiles, splits := (N+63)/64, skinnySplits(b)
			for _, parts := range splits {
				scratch, count := poisoned(b, s, tiles*parts*64*128), upload(b, s, make([]float32, tiles))
				runs = append(runs, func() error {
					return fn("gemm_skinny_bf16_f32").Launch(cuda.Dim3{X: tiles, Y: parts, Z: 1}, cuda.D1(160),
						gemmSkinnyShared, s, wmaps[turn()], xmap, cuda.Ptr(0), bo.Ptr, N, accu, T, K, N, scratch.Ptr,
						count.Ptr)
				})
			}
			if err := runs[0](); err != nil { // cuBLASLt tunes outside the capture
				b.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			times := graphTurns(b, s, runs)
			bytes := 2 * float64(N) * float64(K)
			line := fmt.Sprintf("gemm_skinny %s T=%d: cuBLASLt %.2f us (%.2f TB/s)", tc.name, T, times[0], bytes/times[0]/1e6)
			for i, parts := range splits {
				line += fmt.Sprintf("; %d tiles x %d parts %.2f us (%.2f TB/s, %.3fx)", tiles, parts, times[i+1],
					bytes/times[i+1]/1e6, times[0]/times[i+1])
			}
			b.Log(line)
		})
	}
}

// skinnySplits is how many blocks BenchmarkGemmSkinny splits k over in
// turn: 1, 2 and 4, or the comma-separated list $SKINNY_SPLITS.
func skinnySplits(b *testing.B) []int {
	env := os.Getenv("SKINNY_SPLITS")
	if env == "" {
		return []int{1, 2, 4}
	}
	var splits []int
	for _, f := range strings.Split(env, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("SKINNY_SPLITS=%q: %q is not a count of blocks", env, f)
		}
		splits = append(splits, n)
	}
	return splits
}
