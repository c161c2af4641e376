package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestSplitInProjMatches runs prefills with in_proj split in two GEMMs on
// two streams (Engine.SplitInProj, off by default), the z half planned for
// all SMs and for 32, on models of the 130m width and a narrower one with
// in_proj and out_proj biases, in f32, bf16 and f16, at lengths with
// partial tiles and one shorter than the conv. Two split engines must give
// the same bits eagerly and as graph replays (prefillsMatch: the scan
// waits for the z half in both). Against an unsplit engine the halves may
// run other GEMM kernels, with another order of summation, so outputs and
// carried states must agree to within 2e-3 of their norms (bf16's rounding
// is 4e-3 of a value) or 1e-4 in f32. Fresh random inputs; outputs start
// as NaN.
func TestSplitInProjMatches(t *testing.T) {
	gputest.Need(t)
	biased := fixture.Shape(512, 2, 100)
	biased.UseBias = true
	for _, w := range []*checkpoint.Weights{fixture.RandomWeights(fixture.Shape(768, 2, 100), rand.Uint64()),
		fixture.RandomWeights(biased, rand.Uint64())} {
		d := w.Config.Hidden
		for _, dt := range []cuda.DType{cuda.BF16, cuda.F16, cuda.F32} {
			for _, sms := range []int{0, 32} {
				for _, sz := range []struct{ B, T int }{{1, 300}, {3, 77}, {2, 2}} {
					label := fmt.Sprintf("d=%d bias %v %s sms %d B%d_T%d", d, w.Config.UseBias, dt, sms, sz.B, sz.T)
					t.Run(label, func(t *testing.T) {
						a, b, off := newEngine(t, w, dt), newEngine(t, w, dt), newEngine(t, w, dt)
						a.SplitInProj, b.SplitInProj = true, true
						a.SplitInProjSMs, b.SplitInProjSMs = sms, sms
						prefillsMatch(t, label+" split", a, b, sz.B, sz.T)
						tol := 2e-3
						if dt == cuda.F32 {
							tol = 1e-4
						}
						in := engine.Input{B: sz.B, T: sz.T, IDs: randomIDs(sz.B*sz.T, w.Config.Vocab)}
						sa, _ := a.NewState(sz.B)
						so, _ := off.NewState(sz.B)
						for call := 0; call < 2; call++ { // the second continues from the first's state
							got, want := fixture.NaNs(sz.B*sz.T*d), fixture.NaNs(sz.B*sz.T*d)
							check(t, a.Prefill(sa, in, engine.All, got))
							check(t, off.Prefill(so, in, engine.All, want))
							if e := normRel(got, want); !(e <= tol) {
								t.Errorf("call %d: hidden states split against unsplit: %.3g of the norm", call, e)
							}
							if e := normRel(flatState(t, a, sa), flatState(t, off, so)); !(e <= tol) {
								t.Errorf("call %d: carried state split against unsplit: %.3g of the norm", call, e)
							}
						}
					})
				}
			}
		}
	}
}
