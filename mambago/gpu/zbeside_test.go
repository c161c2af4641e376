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

// TestZBesideScanMatches runs prefills with in_proj's z half beside the scan
// (Engine.ZBesideScan, off by default) against in_proj whole, on models of
// the 130m width and a narrower one with in_proj and out_proj biases, in
// bf16 and f16, at lengths with partial tiles and one shorter than the
// conv, and at batches where the scan leaves no SMs idle (the setting then
// changes nothing). Two such engines must give the same bits eagerly and as
// graph replays (prefillsMatch: the gate waits for the z half in both).
// Against in_proj whole, only the z half's GEMM may differ (another kernel,
// another order of summation; the gate is the scan's own arithmetic), so
// outputs and carried states must agree to within 2e-3 of their norms
// (bf16's rounding is 4e-3 of a value). Fresh random inputs; outputs start
// as NaN.
func TestZBesideScanMatches(t *testing.T) {
	gputest.Need(t)
	biased := fixture.Shape(512, 2, 100)
	biased.UseBias = true
	for _, w := range []*checkpoint.Weights{fixture.RandomWeights(fixture.Shape(768, 2, 100), rand.Uint64()),
		fixture.RandomWeights(biased, rand.Uint64())} {
		d := w.Config.Hidden
		for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
			for _, sz := range []struct{ B, T int }{{1, 300}, {1, 2}, {1, 2048}, {3, 77}} {
				label := fmt.Sprintf("d=%d bias %v %s B%d_T%d", d, w.Config.UseBias, dt, sz.B, sz.T)
				t.Run(label, func(t *testing.T) {
					a, b, off := newEngine(t, w, dt), newEngine(t, w, dt), newEngine(t, w, dt)
					a.ZBesideScan, b.ZBesideScan = true, true
					idle := a.ZBesideSMs(sz.B, sz.T)
					t.Logf("the z half on %d SMs beside the scan", idle)
					if sz.B == 1 && idle == 0 {
						t.Errorf("B=1 at width %d: the z half should run beside the scan", d)
					}
					prefillsMatch(t, label+" z beside", a, b, sz.B, sz.T)
					in := engine.Input{B: sz.B, T: sz.T, IDs: randomIDs(sz.B*sz.T, w.Config.Vocab)}
					sa, _ := a.NewState(sz.B)
					so, _ := off.NewState(sz.B)
					for call := 0; call < 2; call++ { // the second continues from the first's state
						got, want := fixture.NaNs(sz.B*sz.T*d), fixture.NaNs(sz.B*sz.T*d)
						check(t, a.Prefill(sa, in, engine.All, got))
						check(t, off.Prefill(so, in, engine.All, want))
						if e := normRel(got, want); !(e <= 2e-3) {
							t.Errorf("call %d: hidden states z beside against in place: %.3g of the norm", call, e)
						}
						if e := normRel(flatState(t, a, sa), flatState(t, off, so)); !(e <= 2e-3) {
							t.Errorf("call %d: carried state z beside against in place: %.3g of the norm", call, e)
						}
					}
				})
			}
		}
	}
}
