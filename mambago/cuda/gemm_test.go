package cuda_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
)

// bf16Values returns n random values in [-1, 1) that bf16 holds exactly,
// and their bf16 bits.
func bf16Values(n int) ([]float32, []uint16) {
	v, bits := make([]float32, n), make([]uint16, n)
	for i := range v {
		b := math.Float32bits(rand.Float32()*2-1) &^ 0xffff
		v[i], bits[i] = math.Float32frombits(b), uint16(b>>16)
	}
	return v, bits
}

// upload copies v to new device memory on s, failing tb on any error.
func upload[T float32 | uint16](tb testing.TB, s *cuda.Stream, v []T) *cuda.Buffer {
	tb.Helper()
	buf, err := cuda.Alloc(int(unsafe.Sizeof(v[0])) * len(v))
	if err != nil {
		tb.Fatal(err)
	}
	if err := cuda.CopyIn(buf.Ptr, v, s); err != nil {
		tb.Fatal(err)
	}
	return buf
}

// gemmCase is a GEMM TestGemmAlgos checks: C [M, N] (row stride ldc) =
// A [M, K] (row stride lda) · Wᵀ + beta C.
type gemmCase struct{ M, N, K, lda, ldc, beta int }

// gemmCases are the engine's 130m shapes (in_proj, x_proj, out_proj at
// T=2048), a ragged M and a row stride past the width.
var gemmCases = []gemmCase{
	{2048, 3072, 768, 768, 3072, 0}, {2048, 80, 1536, 1536, 80, 0}, {2048, 768, 1536, 1536, 768, 1},
	{37, 80, 1536, 1536, 80, 0}, {300, 64, 256, 264, 72, 1},
}

// TestGemmAlgos checks Gemm with bf16 inputs and f32 outputs through
// cublasGemmEx, cuBLASLt and tuned cuBLASLt against a float64 product of
// fresh random inputs, with the output poisoned with NaN (beta = 0) or
// holding random values to accumulate into (beta = 1), at gemmCases (128
// rows of the large ones checked).
func TestGemmAlgos(t *testing.T) {
	gputest.Device(t)
	s, err := cuda.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	for _, algo := range []cuda.GemmAlgo{cuda.GemmEx, cuda.GemmLt, cuda.GemmLtTuned} {
		b, err := cuda.NewBLAS(s, false)
		if err != nil {
			t.Fatal(err)
		}
		b.Algo = algo
		for _, c := range gemmCases {
			name := fmt.Sprintf("%s M=%d N=%d K=%d lda=%d ldc=%d beta=%d", algo, c.M, c.N, c.K, c.lda, c.ldc, c.beta)
			if err := checkGemm(t, s, b, c, name); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if err := b.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPinnedGemmCandidates checks every candidate cuBLASLt's heuristic
// offers at gemmCases, each pinned in turn (cuda.PinGemmCandidate), as
// TestGemmAlgos checks the tuned one, until the pin passes the last
// (cuda.ErrNoCandidate).
func TestPinnedGemmCandidates(t *testing.T) {
	gputest.Device(t)
	s, b := newBLAS(t)
	b.Algo = cuda.GemmLtTuned
	for _, c := range gemmCases {
		for i := 0; ; i++ {
			cuda.PinGemmCandidate(c.M, c.N, c.K, i)
			name := fmt.Sprintf("candidate %d M=%d N=%d K=%d lda=%d ldc=%d beta=%d", i, c.M, c.N, c.K, c.lda, c.ldc, c.beta)
			err := checkGemm(t, s, b, c, name)
			cuda.PinGemmCandidate(c.M, c.N, c.K, -1)
			if errors.Is(err, cuda.ErrNoCandidate) {
				if i == 0 {
					t.Errorf("%s: no candidate at all", name)
				}
				t.Logf("M=%d N=%d K=%d: %d candidates", c.M, c.N, c.K, i)
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
}

// newBLAS returns a new stream and a BLAS handle on it, both released
// when tb ends.
func newBLAS(tb testing.TB) (*cuda.Stream, *cuda.BLAS) {
	tb.Helper()
	s, err := cuda.NewStream()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Destroy() })
	b, err := cuda.NewBLAS(s, false)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Destroy() })
	return s, b
}

// checkGemm runs c through b on fresh random bf16 inputs and compares it
// with a float64 product, reporting mismatches on t under name; it returns
// Gemm's own error.
func checkGemm(t *testing.T, s *cuda.Stream, b *cuda.BLAS, c gemmCase, name string) error {
	t.Helper()
	a, abits := bf16Values(c.M * c.lda)
	w, wbits := bf16Values(c.N * c.K)
	c0 := make([]float32, c.M*c.ldc)
	for i := range c0 {
		c0[i] = float32(math.NaN())
		if c.beta != 0 {
			c0[i] = rand.Float32()*2 - 1
		}
	}
	bufs := []*cuda.Buffer{upload(t, s, abits), upload(t, s, wbits), upload(t, s, c0)}
	defer func() {
		for _, buf := range bufs {
			buf.Free()
		}
	}()
	pa, pw, pc := bufs[0].Ptr, bufs[1].Ptr, bufs[2].Ptr
	if err := b.Gemm(c.M, c.N, c.K, pa, c.lda, pw, pc, c.ldc, float32(c.beta), cuda.BF16, cuda.F32); err != nil {
		return err
	}
	got := make([]float32, len(c0))
	if err := cuda.CopyOut(got, pc, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	var d2, n2 float64
	step := max(1, c.M/128) // every row of the small cases, 128 rows of the large
	for i := 0; i < c.M; i += step {
		for j := 0; j < c.N; j++ {
			want := 0.0
			if c.beta != 0 {
				want = float64(c0[i*c.ldc+j])
			}
			for k := 0; k < c.K; k++ {
				want += float64(a[i*c.lda+k]) * float64(w[j*c.K+k])
			}
			g := float64(got[i*c.ldc+j])
			d2 += (g - want) * (g - want)
			n2 += want * want
		}
	}
	// f32 sums of K exact products: about sqrt(K) 2^-24 (1.3e-6 at
	// K = 1536 on the H200, the same for every algorithm).
	if rel := math.Sqrt(d2 / n2); !(rel <= 4e-6) {
		t.Errorf("%s: rel err %.3g against float64, bound 4e-6", name, rel)
	}
	for j := c.N; j < c.ldc; j++ { // the row stride's padding is left as it was
		if g := got[j]; math.Float32bits(g) != math.Float32bits(c0[j]) {
			t.Errorf("%s: padding column %d changed to %g", name, j, g)
		}
	}
	return nil
}

// BenchmarkGemmAlgos times the engine's bf16 GEMMs (beta = 0; in_proj,
// x_proj and out_proj of prefills at the model shapes) through
// cublasGemmEx, through cuBLASLt's first heuristic algorithm, its tuned
// pick and each of its first 16 (GPU time: graphs of 20 runs, TimeGraph),
// and logs them with the FLOP rate of the fastest.
func BenchmarkGemmAlgos(b *testing.B) {
	gputest.Device(b)
	s, bl := newBLAS(b)
	type gemm struct {
		name    string
		M, N, K int
	}
	var shapes []gemm
	for _, m := range []struct {
		name          string
		d, E, R, rows int
	}{{"130m B1", 768, 1536, 48, 2048}, {"370m B1", 1024, 2048, 64, 2048}, {"1.4b B1", 2048, 4096, 128, 2048},
		{"130m B8", 768, 1536, 48, 16384}, {"2.8b B8", 2560, 5120, 160, 16384}} {
		shapes = append(shapes, gemm{m.name + " in_proj", m.rows, 2 * m.E, m.d}, gemm{m.name + " x_proj", m.rows, m.R + 32, m.E},
			gemm{m.name + " out_proj", m.rows, m.d, m.E})
	}
	for range b.N {
		for _, g := range shapes {
			_, abits := bf16Values(g.M * g.K)
			_, wbits := bf16Values(g.N * g.K)
			pa, pw, pc := upload(b, s, abits), upload(b, s, wbits), upload(b, s, make([]float32, g.M*g.N))
			timeAlgo := func(algo cuda.GemmAlgo) float32 {
				bl.Algo = algo
				run := func() error {
					return bl.Gemm(g.M, g.N, g.K, pa.Ptr, g.K, pw.Ptr, pc.Ptr, g.N, 0, cuda.BF16, cuda.F32)
				}
				if err := run(); err != nil { // plans and tuning outside the capture
					b.Fatal(err)
				}
				ms, err := cuda.TimeGraph(s, 20, run)
				if err != nil {
					b.Fatal(err)
				}
				return ms
			}
			ex, lt, tuned := timeAlgo(cuda.GemmEx), timeAlgo(cuda.GemmLt), timeAlgo(cuda.GemmLtTuned)
			cands, err := bl.TimeLtCandidates(g.M, g.N, g.K, pa.Ptr, g.K, pw.Ptr, pc.Ptr, g.N, 16, 20)
			if err != nil {
				b.Fatal(err)
			}
			best := min(ex, lt, tuned)
			for _, c := range cands {
				best = min(best, c)
			}
			line := fmt.Sprintf("%-18s M=%5d N=%5d K=%4d  GemmEx %7.2f us  Lt %7.2f  tuned %7.2f  best %7.2f (%.0f TFLOP/s)  candidates:",
				g.name, g.M, g.N, g.K, 1e3*ex, 1e3*lt, 1e3*tuned, 1e3*best, 2*float64(g.M*g.N*g.K)/float64(best)/1e9)
			for _, c := range cands {
				line += fmt.Sprintf(" %.2f", 1e3*c)
			}
			b.Log(line)
			pa.Free()
			pw.Free()
			pc.Free()
		}
	}
}

// BenchmarkLtTuning repeats the tuned GEMMs' tuning (cuBLASLt's first 8
// candidates timed on the GEMM's own operands) at the engine's 130m and
// 370m prefill shapes, with one round of timings and with three, and
// logs which candidate each repeat picked: a pick that changes between
// repeats is one that changes between processes. bench/results/
// 2026-12-01-candidates.md has each candidate's speed in place.
func BenchmarkLtTuning(b *testing.B) {
	gputest.Device(b)
	s, bl := newBLAS(b)
	const repeats = 12
	type gemm struct {
		name    string
		M, N, K int
		beta    float32
	}
	var shapes []gemm
	for _, m := range []struct {
		name          string
		d, E, R, rows int
	}{{"130m T2048", 768, 1536, 48, 2048}, {"130m T8192", 768, 1536, 48, 8192}, {"370m T2048", 1024, 2048, 64, 2048}} {
		shapes = append(shapes, gemm{m.name + " in_proj", m.rows, 2 * m.E, m.d, 0},
			gemm{m.name + " x_proj", m.rows, m.R + 32, m.E, 0}, gemm{m.name + " out_proj", m.rows, m.d, m.E, 1})
	}
	for range b.N {
		for _, g := range shapes {
			_, abits := bf16Values(g.M * g.K)
			_, wbits := bf16Values(g.N * g.K)
			pa, pw := upload(b, s, abits), upload(b, s, wbits)
			for _, rounds := range []int{1, 3} {
				picks := map[int]int{}
				var spread []string
				start := time.Now()
				for range repeats {
					best, med, err := bl.TuneLt(g.M, g.N, g.K, pa.Ptr, g.K, pw.Ptr, g.N, g.beta, rounds)
					if err != nil {
						b.Fatal(err)
					}
					picks[best]++
					if len(spread) < 2 {
						line := ""
						for _, m := range med {
							line += fmt.Sprintf(" %.2f", 1e3*m)
						}
						spread = append(spread, line)
					}
				}
				b.Logf("%-20s rounds=%d picks %v (%.1f ms a tuning); medians of the first two tunings, us:%s |%s",
					g.name, rounds, picks, float64(time.Since(start).Microseconds())/1e3/repeats, spread[0], spread[1])
			}
			pa.Free()
			pw.Free()
		}
	}
}
