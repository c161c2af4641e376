package blas_test

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/mambago/mambago/mambago/blas"
)

// TestSgemm checks the library named by MAMBAGO_TEST_BLAS (scripts/test.sh
// points it at numpy's OpenBLAS) against a float64 reference.
func TestSgemm(t *testing.T) {
	path := os.Getenv("MAMBAGO_TEST_BLAS")
	if path == "" {
		t.Skip("MAMBAGO_TEST_BLAS is not set: no CBLAS library to test (scripts/test.sh sets it to numpy's OpenBLAS)")
	}
	l, err := blas.Open(path)
	if err != nil {
		t.Fatal(err)
	}
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
