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
	for _, x := range []float32{0, 1, -1, 3, -7} {
		if got, want := exp2f32(x), float32(math.Exp2(float64(x))); got != want {
			t.Errorf("exp2f32(%v) = %v, want %v", x, got, want)
		}
	}
}
