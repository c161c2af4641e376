package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestFusedOutNormMatches runs 16-bit prefills of a three-layer model of the
// 130m width with out_proj and the next layer's RMSNorm fused
// (Engine.FusedOutNorm) and unfused, at lengths with partial tiles, a
// prompt split into chunks (Engine.ChunkRows) and two positions. Fused, two
// engines must give the same bits eagerly and as graph replays
// (prefillsMatch: the cluster's sums run in a fixed order). Against the
// unfused engine only the order of out_proj's and the norm's sums differs,
// so outputs and carried states must agree to within 2e-3 of their norms
// (bf16's rounding is 4e-3 of a value). Fresh random inputs; outputs start
// as NaN.
func TestFusedOutNormMatches(t *testing.T) {
	gputest.Need(t)
	const d = 768
	w := fixture.RandomWeights(fixture.Shape(d, 3, 100), rand.Uint64())
	for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
		for _, sz := range []struct{ B, T, chunk int }{{1, 300, 0}, {3, 77, 0}, {2, 2, 0}, {1, 700, 256}} {
			label := fmt.Sprintf("%s B%d_T%d chunk%d", dt, sz.B, sz.T, sz.chunk)
			t.Run(label, func(t *testing.T) {
				a, b, off := newEngine(t, w, dt), newEngine(t, w, dt), newEngine(t, w, dt)
				a.FusedOutNorm, b.FusedOutNorm, off.FusedOutNorm = true, true, false
				if sz.chunk > 0 {
					a.ChunkRows, b.ChunkRows, off.ChunkRows = sz.chunk, sz.chunk, sz.chunk
				}
				if !a.OutNormFused() || off.OutNormFused() {
					t.Skipf("the fused kernel does not apply here (sm_90a): fused %v, unfused engine %v",
						a.OutNormFused(), off.OutNormFused())
				}
				if sz.chunk == 0 { // a captured prefill runs as one chunk
					prefillsMatch(t, label+" fused", a, b, sz.B, sz.T)
				}
				closeToUnfused(t, a, off, sz.B, sz.T, 2e-3)
			})
		}
	}
}
