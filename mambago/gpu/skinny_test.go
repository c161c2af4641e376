package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// skinnyTol is how far bf16 prefills with in_proj and out_proj on the
// skinny GEMM may stray from cuBLAS's, in relative norm: the GEMMs' f32
// outputs differ in their last bits (another order of sums), and the bf16
// roundings after them (the conv's u, the scan's y) turn a few of those
// into steps of a bf16 ulp (2^-8).
const skinnyTol = 2e-3

// TestSkinnyGEMMMatches runs bf16 prefills with Engine.SkinnyGEMM on
// against off (cuBLAS), from fresh random weights and ids: every position's
// hidden state and every layer's state within skinnyTol (settingNear:
// eagerly, twice, and as graph replays), and the last position's hidden
// state (where the last layer's out_proj adds into each sequence's last row
// only) within it too. Widths 768 (in_proj's k split over 2 blocks,
// out_proj's over 4) and 2048 (1.4b: in_proj whole, out_proj over 4), two
// layers; 128 rows (B=1 T=128), 77 (x's box past them reads zeros) and 120
// (B=3 T=40). sm_90 only, where the kernel runs.
func TestSkinnyGEMMMatches(t *testing.T) {
	gputest.Need(t)
	if d := gputest.Device(t); d.Major != 9 || d.Minor != 0 {
		t.Skipf("gemm_skinny_bf16_f32 needs an sm_90 device (this one is sm_%d%d)", d.Major, d.Minor)
	}
	for _, d := range []int{768, 2048} {
		w := fixture.RandomWeights(fixture.Shape(d, 2, 100), rand.Uint64())
		for _, sz := range []struct{ B, T int }{{1, 128}, {1, 77}, {3, 40}} {
			t.Run(fmt.Sprintf("d%d B%d_T%d", d, sz.B, sz.T), func(t *testing.T) {
				on, off := newEngine(t, w, cuda.BF16), newEngine(t, w, cuda.BF16)
				on.SkinnyGEMM, off.SkinnyGEMM = true, false
				settingNear(t, on, off, sz.B, sz.T, skinnyTol)
				c := on.Config()
				in := engine.Input{B: sz.B, T: sz.T, IDs: randomIDs(sz.B*sz.T, c.Vocab)}
				sOn, _ := on.NewState(sz.B)
				sOff, _ := off.NewState(sz.B)
				got, want := fixture.NaNs(sz.B*c.Hidden), fixture.NaNs(sz.B*c.Hidden)
				check(t, on.Prefill(sOn, in, engine.Last, got))
				check(t, off.Prefill(sOff, in, engine.Last, want))
				normNear(t, "last position", got, want, skinnyTol)
			})
		}
	}
}

// BenchmarkSkinnyGEMM times bf16 prefills with in_proj and out_proj on the
// skinny GEMM (Engine.SkinnyGEMM) off and on (compareSettings): B=1 T=128
// at every size, T=64 at 1.4b and 2.8b, and 1.4b at B=2 T=64.
// $SKINNY_SHAPES replaces the list (envShapes).
func BenchmarkSkinnyGEMM(b *testing.B) {
	shapes := envShapes(b, "SKINNY_SHAPES", []benchShape{shape("130m", 1, 128), shape("370m", 1, 128),
		shape("1.4b", 1, 128), shape("2.8b", 1, 128), shape("1.4b", 1, 64), shape("2.8b", 1, 64), shape("1.4b", 2, 64)})
	compareSettings(b, "skinny", shapes, func(e *gpu.Engine, on bool) { e.SkinnyGEMM = on })
}
