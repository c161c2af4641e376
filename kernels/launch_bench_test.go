package kernels_test

import (
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
)

// BenchmarkGraphNode measures what one kernel node costs inside a CUDA
// graph on this GPU when the kernel does almost nothing: a graph of 200
// launches of rmsnorm_bf16 on 8 rows of 64 a block (one L2 round trip in,
// a warp reduction, a store), with 1 block, one block an SM and 8 blocks
// an SM, launched plainly and with programmatic dependent launch (its
// pdl_wait and pdl_release). It logs the median over 7 graphs of the GPU
// time a node: the floor under each kernel's fixed cost in a prefill,
// where a layer is 7 kernels (bench/NOTES.md, the T=8192 window).
func BenchmarkGraphNode(b *testing.B) {
	d, fn, s, _, _ := kernelBench(b, "rmsnorm.cu")
	const d64, runs = 64, 200
	f := fn("rmsnorm_bf16")
	for _, blocks := range []int{1, d.SMs, 8 * d.SMs} {
		rows := 8 * blocks
		x, w, y := poisoned(b, s, rows*d64), poisoned(b, s, d64), poisoned(b, s, rows*d64/2)
		if err := cuda.Fill32(x.Ptr, 0x3f800000, rows*d64, s); err != nil { // ones
			b.Fatal(err)
		}
		if err := cuda.Fill32(w.Ptr, 0x3f800000, d64, s); err != nil {
			b.Fatal(err)
		}
		for _, pdl := range []bool{false, true} {
			launch := func() error {
				return f.LaunchMaybePDL(pdl, cuda.D1(blocks), cuda.D1(256), 0, s, x.Ptr, w.Ptr, y.Ptr, rows, d64, d64, d64, float32(1e-5),
					cuda.Ptr(0), uint32(0), int64(0))
			}
			b.Logf("graph node: %4d blocks, PDL %-5v: %.2f us a node (median of 7 graphs of %d)", blocks, pdl,
				nodeTime(b, s, runs, launch), runs)
		}
	}
	// A bf16 GEMM of the 130m in_proj's shape on 64 rows (cuBLAS, the
	// engine's default algorithm): the same floor for the cuBLAS nodes.
	bl, err := cuda.NewBLAS(s, false)
	if err != nil {
		b.Fatal(err)
	}
	defer bl.Destroy()
	const M, N, K = 64, 3072, 768
	a, wt, c := poisoned(b, s, M*K/2), poisoned(b, s, N*K/2), poisoned(b, s, M*N)
	for _, p := range []*cuda.Buffer{a, wt} {
		if err := cuda.Fill32(p.Ptr, 0, p.Bytes/4, s); err != nil {
			b.Fatal(err)
		}
	}
	gemm := func() error { return bl.Gemm(M, N, K, a.Ptr, K, wt.Ptr, c.Ptr, N, 0, cuda.BF16, cuda.F32) }
	if err := gemm(); err != nil { // its plan, outside the capture
		b.Fatal(err)
	}
	b.Logf("graph node: bf16 GEMM M=%d N=%d K=%d (%s): %.2f us a node (median of 7 graphs of %d)", M, N, K, bl.Algo,
		nodeTime(b, s, runs, gemm), runs)
}

// nodeTime captures runs calls of fn on s as a graph, 7 times, and returns
// the median GPU time a call in microseconds (cuda.TimeGraph).
func nodeTime(b *testing.B, s *cuda.Stream, runs int, fn func() error) float64 {
	var us []float64
	for range 7 {
		ms, err := cuda.TimeGraph(s, runs, fn)
		if err != nil {
			b.Fatal(err)
		}
		us = append(us, 1e3*float64(ms))
	}
	return gputest.Median(us)
}
