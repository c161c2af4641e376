package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestExp32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	worst := 0.0
	for i := 0; i < 1_000_000; i++ {
		x := float32(-90 * rng.Float64())
		if i%2 == 0 {
			x = float32(-2 * rng.Float64())
		}
		got, want := float64(exp32(x)), math.Exp(float64(x))
		if want < 1.2e-38 { // below float32's normal range: flushing to 0 is allowed
			if math.Abs(got-want) > 1.2e-38 {
				t.Fatalf("exp32(%g) = %g, want %g", x, got, want)
			}
			continue
		}
		if rel := math.Abs(got-want) / want; rel > worst {
			worst = rel
		}
	}
	if worst > 3e-7 {
		t.Fatalf("exp32 max relative error %.3g, want ≤ 3e-7", worst)
	}
	if exp32(0) != 1 {
		t.Fatalf("exp32(0) = %v", exp32(0))
	}
}
