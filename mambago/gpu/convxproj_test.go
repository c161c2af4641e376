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

// TestFusedConvXProjMatches runs 16-bit prefills with the conv and x_proj
// fused (Engine.FusedConvXProj, off by default) and unfused
// (matchesUnfused).
func TestFusedConvXProjMatches(t *testing.T) {
	matchesUnfused(t, "the fused conv and x_proj", func(e *gpu.Engine, on bool) bool {
		e.FusedConvXProj = on
		return e.ConvXProjFused()
	})
}

// TestOwnXProjMatches runs 16-bit prefills with x_proj on our kernel
// (Engine.OwnXProj) and on cuBLAS's GEMM (matchesUnfused).
func TestOwnXProjMatches(t *testing.T) {
	matchesUnfused(t, "our x_proj", func(e *gpu.Engine, on bool) bool {
		e.OwnXProj = on
		return e.OwnXProjOn()
	})
}

// TestOwnXProjTMAMatches is TestOwnXProjMatches with the tensor-map entry
// (Engine.XProjTMA).
func TestOwnXProjTMAMatches(t *testing.T) {
	matchesUnfused(t, "our x_proj on tensor maps", func(e *gpu.Engine, on bool) bool {
		e.OwnXProj, e.XProjTMA = on, on
		return e.OwnXProjOn()
	})
}

// TestAutoXProjMatches is TestOwnXProjMatches for the engine's default,
// Engine.AutoXProj: our x_proj's tensor-map entry at these lengths (at most
// 900 rows) where its policy takes it.
func TestAutoXProjMatches(t *testing.T) {
	matchesUnfused(t, "x_proj by AutoXProj", func(e *gpu.Engine, on bool) bool {
		e.AutoXProj = on
		return e.XProjOwnAt(900)
	})
}

// TestXProjSlicesMatches is TestOwnXProjTMAMatches for the tensor-map entry
// in clusters of 3 (Engine.XProjSlices; the 130m width takes it).
func TestXProjSlicesMatches(t *testing.T) {
	matchesUnfused(t, "our x_proj on tensor maps in clusters of 3", func(e *gpu.Engine, on bool) bool {
		e.OwnXProj, e.XProjTMA, e.XProjSlices = on, on, 0
		if on {
			e.XProjSlices = 3
		}
		return e.OwnXProjOn() && e.XProjTMASlices(900) == 3
	})
}

// matchesUnfused runs 16-bit prefills with a setting that replaces x_proj's
// GEMM (set turns it on or off and reports whether it then applies) on and
// off, on models of the 130m and 370m widths (x_proj 80 and 96 wide: both
// kernel entries) and a narrower one, at lengths with partial tiles and
// one shorter than the conv. On, two engines must give the same bits
// eagerly and as graph replays (prefillsMatch: the kernels sum in a fixed
// order). Against the setting off only x_proj's order of summation
// differs, so outputs and carried states must agree to within 2e-3 of
// their norms (bf16's rounding is 4e-3 of a value). Fresh random inputs;
// outputs start as NaN.
func matchesUnfused(t *testing.T, what string, set func(e *gpu.Engine, on bool) bool) {
	gputest.Need(t)
	for _, d := range []int{768, 1024, 512} {
		w := fixture.RandomWeights(fixture.Shape(d, 2, 100), rand.Uint64())
		for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
			for _, sz := range []struct{ B, T int }{{1, 300}, {3, 77}, {2, 2}} {
				label := fmt.Sprintf("d=%d %s B%d_T%d", d, dt, sz.B, sz.T)
				t.Run(label, func(t *testing.T) {
					a, b, off := newEngine(t, w, dt), newEngine(t, w, dt), newEngine(t, w, dt)
					a.AutoXProj, b.AutoXProj, off.AutoXProj = false, false, false // off: x_proj on cuBLAS at every length
					onA, onB, onOff := set(a, true), set(b, true), set(off, false)
					if !onA || !onB || onOff {
						t.Skipf("%s does not apply here: on %v, off %v", what, onA, onOff)
					}
					prefillsMatch(t, label+" "+what, a, b, sz.B, sz.T)
					closeToUnfused(t, a, off, sz.B, sz.T, 2e-3)
				})
			}
		}
	}
}

// closeToUnfused runs the same random prompts through a fused engine and
// an unfused one, twice (the second call continuing from the first's
// state): all positions' hidden states, the carried states and the last
// positions' hidden states must agree to within tol of their norms.
// Outputs start as NaN.
func closeToUnfused(t *testing.T, fused, off *gpu.Engine, B, T int, tol float64) {
	t.Helper()
	c := fused.Config()
	d := c.Hidden
	in := engine.Input{B: B, T: T, IDs: randomIDs(B*T, c.Vocab)}
	sa, _ := fused.NewState(B)
	so, _ := off.NewState(B)
	for call := 0; call < 2; call++ {
		got, want := fixture.NaNs(B*T*d), fixture.NaNs(B*T*d)
		check(t, fused.Prefill(sa, in, engine.All, got))
		check(t, off.Prefill(so, in, engine.All, want))
		if e := normRel(got, want); !(e <= tol) {
			t.Errorf("call %d: hidden states fused against unfused: %.3g of the norm", call, e)
		}
		if e := normRel(flatState(t, fused, sa), flatState(t, off, so)); !(e <= tol) {
			t.Errorf("call %d: carried state fused against unfused: %.3g of the norm", call, e)
		}
		last, wantLast := fixture.NaNs(B*d), fixture.NaNs(B*d)
		check(t, fused.Prefill(sa, in, engine.Last, last))
		check(t, off.Prefill(so, in, engine.Last, wantLast))
		if e := normRel(last, wantLast); !(e <= tol) {
			t.Errorf("call %d: last positions fused against unfused: %.3g of the norm", call, e)
		}
	}
}
