package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestExp2f32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	worst := 0.0
	for i := 0; i < 1_000_000; i++ {
		x := float32(-90 * rng.Float64())
		if i%2 == 0 {
			x = float32(-2 * rng.Float64())
		}
		got, want := float64(exp2f32(x*math.Log2E)), math.Exp(float64(float32(x*math.Log2E))*math.Ln2)
		if want < 1.2e-38 { // below float32's normal range: flushing to 0 is allowed
			if math.Abs(got-want) > 1.2e-38 {
				t.Fatalf("exp2f32(%g) = %g, want %g", x*math.Log2E, got, want)
			}
			continue
		}
		if rel := math.Abs(got-want) / want; rel > worst {
			worst = rel
		}
	}
	if worst > 3e-7 {
		t.Fatalf("exp2f32 max relative error %.3g, want ≤ 3e-7", worst)
	}
	for i := 0; i < 100000; i++ {
		x := float32(-130 * rng.Float64())
		got, want := float64(exp2neg(x)), math.Exp2(float64(x))
		if x < -126 {
			want = math.Exp2(-126)
		}
		if math.Abs(got-want) > 3e-7*want {
			t.Fatalf("exp2neg(%v) = %v, want %v", x, got, want)
		}
	}
	for _, x := range []float32{-30, -7, -3, -1, -0.5, -1e-3, 0, 1e-3, 0.5, 1, 3, 7, 19, 25} {
		want := math.Log1p(math.Exp(float64(x)))
		if x > 20 {
			want = float64(x)
		}
		tol := 3e-7 + 6e-8*math.Abs(float64(x)) // x·log2(e) is rounded to float32
		if got := float64(softplus(x)); math.Abs(got-want) > tol*want {
			t.Errorf("softplus(%v) = %v, want %v", x, got, want)
		}
		wantSilu := float64(x) / (1 + math.Exp(-float64(x)))
		if got := float64(silu(x)); math.Abs(got-wantSilu) > tol*math.Abs(wantSilu)+1e-30 {
			t.Errorf("silu(%v) = %v, want %v", x, got, wantSilu)
		}
	}
	for _, x := range []float32{0, 1, -1, 3, -7} {
		if got, want := exp2f32(x), float32(math.Exp2(float64(x))); got != want {
			t.Errorf("exp2f32(%v) = %v, want %v", x, got, want)
		}
	}
}

// TestScanRowKernels checks the AVX2 kernel against the Go loop (and both
// against float64) on fresh random rows of every length up to 40.
func TestScanRowKernels(t *testing.T) {
	if !hasAVX2 {
		t.Skip("this CPU has no AVX2/FMA: only the Go loop runs")
	}
	rng := rand.New(rand.NewPCG(rand.Uint64(), 3))
	for N := 1; N <= 40; N++ {
		for trial := 0; trial < 50; trial++ {
			s, a2, b, c := make([]float32, N), make([]float32, N), make([]float32, N), make([]float32, N)
			for i := range s {
				s[i] = float32(rng.NormFloat64())
				a2[i] = -float32(rng.Float64()*20) * math.Log2E
				b[i], c[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			}
			dt, dtu := float32(rng.Float64()*2), float32(rng.NormFloat64())
			want := make([]float64, N)
			var wantAcc float64
			for i := range s {
				want[i] = math.Exp2(float64(dt)*float64(a2[i]))*float64(s[i]) + float64(dtu)*float64(b[i])
				wantAcc += want[i] * float64(c[i])
			}
			for _, avx := range []bool{true, false} {
				useAVX2 = avx
				got := append([]float32(nil), s...)
				acc := scanRow(got, a2, b, c, dt, dtu)
				for i := range got {
					if math.Abs(float64(got[i])-want[i]) > 1e-6*(1+math.Abs(want[i])) {
						t.Fatalf("N=%d avx=%v: s[%d] = %v, want %v", N, avx, i, got[i], want[i])
					}
				}
				if math.Abs(float64(acc)-wantAcc) > 1e-5*(1+math.Abs(wantAcc)) {
					t.Fatalf("N=%d avx=%v: acc = %v, want %v", N, avx, acc, wantAcc)
				}
			}
			useAVX2 = hasAVX2
		}
	}
}

// TestRMSNorm checks rmsnorm (rmsScale's four sums) against float64 for
// rows of every length from 1 to 9 (the sums' tail) and 768, with and
// without a weight, over more rows than workers, each output first NaN.
func TestRMSNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, d := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 768} {
		for _, weighted := range []bool{true, false} {
			const rows, eps = 37, 1e-5
			h, x := make([]float32, rows*d), make([]float32, rows*d)
			for i := range h {
				h[i] = float32(rng.NormFloat64() * 3)
				x[i] = float32(math.NaN())
			}
			var w []float32
			if weighted {
				w = make([]float32, d)
				for i := range w {
					w[i] = float32(rng.NormFloat64())
				}
			}
			rmsnorm(x, h, w, d, eps)
			for r := range rows {
				var ss float64
				for _, v := range h[r*d : (r+1)*d] {
					ss += float64(v) * float64(v)
				}
				s := 1 / math.Sqrt(ss/float64(d)+eps)
				for i := range d {
					want := float64(h[r*d+i]) * s
					if weighted {
						want *= float64(w[i])
					}
					if got := float64(x[r*d+i]); !(math.Abs(got-want) <= 1e-6*math.Abs(want)+1e-30) {
						t.Fatalf("d=%d weighted=%v: row %d value %d is %g, want %g", d, weighted, r, i, got, want)
					}
				}
			}
		}
	}
}
