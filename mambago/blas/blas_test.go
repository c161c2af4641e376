package blas_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/blastest"
	"github.com/mambago/mambago/mambago/blas"
)

// TestSgemm checks the library named by MAMBAGO_TEST_BLAS (scripts/test.sh
// points it at numpy's OpenBLAS) against a float64 reference: SGEMM both
// ways, and SGEMV.
func TestSgemm(t *testing.T) {
	l := blastest.Need(t)
	t.Logf("%s: %s", l.Path, l.Symbol)
	for _, transB := range []bool{false, true} {
		m, n, k, lda, ldc := 37, 53, 29, 31, 60
		a, b, c := randn(m*lda), randn(k*n), randn(m*ldc)
		ldb := n
		if transB {
			ldb = k
		}
		want := make([]float64, len(c))
		for i := range c {
			want[i] = float64(c[i]) // padding past column n stays as it is
			if i%ldc < n {
				want[i] *= 0.5
			}
		}
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s float64
				for p := 0; p < k; p++ {
					bv := b[p*ldb+j]
					if transB {
						bv = b[j*ldb+p]
					}
					s += float64(a[i*lda+p]) * float64(bv)
				}
				want[i*ldc+j] += 2 * s
			}
		}
		l.Sgemm(transB, m, n, k, 2, a, lda, b, ldb, 0.5, c, ldc)
		for i := range c {
			if math.Abs(float64(c[i])-want[i]) > 1e-4*(1+math.Abs(want[i])) {
				t.Fatalf("transB=%v: c[%d] = %v, want %v", transB, i, c[i], want[i])
			}
		}
	}
	if !l.HasSgemv() {
		t.Fatalf("%s has no SGEMV beside %s", l.Path, l.Symbol)
	}
	m, n, lda := 300, 77, 80 // y = 0.5·y + 2·A·x, A [m, n] with padded rows
	a, x, y := randn(m*lda), randn(n), randn(m)
	want := make([]float64, m)
	for i := range want {
		var s float64
		for j := 0; j < n; j++ {
			s += float64(a[i*lda+j]) * float64(x[j])
		}
		want[i] = 0.5*float64(y[i]) + 2*s
	}
	l.Sgemv(m, n, 2, a, lda, x, 0.5, y)
	for i := range y {
		if math.Abs(float64(y[i])-want[i]) > 1e-4*(1+math.Abs(want[i])) {
			t.Fatalf("Sgemv: y[%d] = %v, want %v", i, y[i], want[i])
		}
	}
	if _, err := blas.Open("/nonexistent/libnothing.so"); err == nil {
		t.Error("opening a missing library succeeded")
	}
}

func randn(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rand.NormFloat64())
	}
	return v
}

// BenchmarkSgemmRows times C = A·Wᵀ with A of m rows against weights W of
// the 130m in_proj's shape [3072, 768], forty different W per call so that
// W streams from memory as it does in a decode step; GB/s counts W's bytes.
func BenchmarkSgemmRows(b *testing.B) {
	l := blastest.Need(b)
	const n, k, count = 3072, 768, 40
	ws := make([][]float32, count)
	for i := range ws {
		ws[i] = randn(n * k)
	}
	for _, m := range []int{0, 1, 2, 8, -2, -8} { // 0: one row through SGEMV; -m: m rows as W·Aᵀ
		b.Run(fmt.Sprintf("m=%d", m), func(b *testing.B) {
			rows := max(m, -m, 1)
			a, c := randn(rows*k), make([]float32, rows*n)
			for b.Loop() {
				for _, w := range ws {
					switch {
					case m == 0:
						l.Sgemv(n, k, 1, w, k, a, 0, c)
					case m < 0:
						l.Sgemm(true, n, rows, k, 1, w, k, a, k, 0, c, rows)
					default:
						l.Sgemm(true, m, n, k, 1, a, k, w, k, 0, c, n)
					}
				}
			}
			b.ReportMetric(float64(count*n*k*4)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}
