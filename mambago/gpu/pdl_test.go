package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/internal/enginetest"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestPrefillSettingsMatch runs prefills with each of the engine's
// scheduling settings on and off, eager and as graph replays, with the
// one-pass scan at 2 and 4 states a thread and the chunked scan: outputs and
// carried states must be the same bits. For Engine.PrefillPDL that shows no
// kernel read its predecessor's results before they were all written; for
// Engine.ResidualPrefetch, that asking L2 for out_proj's residual rows
// changes nothing else; for Engine.MemsetKernels, HoistMemsets and FoldMemsets, that
// the graphs' edited memsets and edges keep every kernel's inputs ready;
// for Engine.EmbedNorm, that the first RMSNorm's lookup writes the
// embedding kernel's residual stream; for Engine.ScanTMA, that the scan's
// tiles through the copy engine are its cp.async pieces (the bf16 case at
// B=1 runs them, rows past T included). Fresh random inputs each run;
// outputs start as NaN.
func TestPrefillSettingsMatch(t *testing.T) {
	gputest.Need(t)
	features := fixtureWeights(t, "features")
	settings := []struct {
		name string
		set  func(e *gpu.Engine, on bool)
	}{
		{"PDL", func(e *gpu.Engine, on bool) { e.PrefillPDL = on }},
		{"prefetch", func(e *gpu.Engine, on bool) {
			e.ResidualPrefetch = 0
			if on {
				e.ResidualPrefetch = 1 << 40
			}
		}},
		{"memsets", func(e *gpu.Engine, on bool) { e.MemsetKernels, e.HoistMemsets, e.FoldMemsets = on, on, false }},
		{"folds", func(e *gpu.Engine, on bool) { e.MemsetKernels, e.HoistMemsets, e.FoldMemsets = on, on, on }},
		{"embednorm", func(e *gpu.Engine, on bool) { e.EmbedNorm = on }},
		{"poison", func(e *gpu.Engine, on bool) { e.PoisonOutputs = on }},
		{"scantma", func(e *gpu.Engine, on bool) { e.ScanTMA = on }},
	}
	for _, tc := range []struct {
		name string
		w    *checkpoint.Weights
		dt   cuda.DType
	}{
		{"random f32", fixture.RandomWeights(fixture.Shape(64, 3, 100), rand.Uint64()), cuda.F32},
		{"random bf16", fixture.RandomWeights(fixture.Shape(128, 2, 100), rand.Uint64()), cuda.BF16},
		{"features f16", features, cuda.F16},
	} {
		for _, setting := range settings {
			for _, onePass := range []int{2, 4, -1} {
				for _, sz := range []struct{ B, T int }{{1, 300}, {3, 77}} {
					name := fmt.Sprintf("%s %s onepass%d B%d_T%d", setting.name, tc.name, onePass, sz.B, sz.T)
					t.Run(name, func(t *testing.T) {
						on, off := newEngine(t, tc.w, tc.dt), newEngine(t, tc.w, tc.dt)
						setting.set(on, true)
						setting.set(off, false)
						on.ScanOnePass, off.ScanOnePass = onePass, onePass
						prefillsMatch(t, setting.name, on, off, sz.B, sz.T)
					})
				}
			}
		}
	}
}

// TestMemsetEdits130m runs a two-layer bf16 model of the 130m shape at
// B=1, T=2048 and T=8192, where the tuned cuBLASLt in_proj (and out_proj at
// T=8192) came with a memset on the H200, as graph replays with each of
// the memset edits (Engine.MemsetKernels, Engine.HoistMemsets, and
// Engine.FoldMemsets with both) against
// eager prefills with none: the same bits. It logs how many memsets each
// graph edited and folded (cuBLASLt's tuned pick may differ from process to
// process; cuda's TestCaptureEditing covers the edits themselves).
func TestMemsetEdits130m(t *testing.T) {
	gputest.Need(t)
	if testing.Short() {
		t.Skip("a 130m-wide model at T=8192: not in -short")
	}
	w := fixture.RandomWeights(fixture.Shape(768, 2, 1000), rand.Uint64())
	for _, T := range []int{2048, 8192} {
		for _, edit := range []struct{ kernels, hoist, fold bool }{{true, false, false}, {false, true, false},
			{true, true, false}, {true, true, true}} {
			on, off := newEngine(t, w, cuda.BF16), newEngine(t, w, cuda.BF16)
			on.MemsetKernels, on.HoistMemsets, on.FoldMemsets = edit.kernels, edit.hoist, edit.fold
			off.MemsetKernels, off.HoistMemsets, off.FoldMemsets = false, false, false
			label := fmt.Sprintf("130m-wide B=1 T=%d, memset kernels %v, hoisted %v, folded %v", T, edit.kernels,
				edit.hoist, edit.fold)
			edited, folded := prefillsMatch(t, label, on, off, 1, T)
			t.Logf("%s: %d memsets edited in the graph, %d of them folded", label, edited, folded)
		}
	}
}

// prefillsMatch runs the same fresh random prefill of B sequences of T
// positions on two engines, twice eagerly (the second call continuing from
// the first's state) and as three graph replays of on's, and requires the
// same bits of both in every output and carried state. It returns how many
// memsets the graph's capture edited, and how many of those it folded.
func prefillsMatch(t *testing.T, label string, on, off *gpu.Engine, B, T int) (edited, folded int) {
	t.Helper()
	c := on.Config()
	in := engine.Input{B: B, T: T}
	kind := "ids"
	if c.InputDim > 0 {
		kind, in.Features = "features", make([]float32, B*T*c.InputDim)
		for i := range in.Features {
			in.Features[i] = float32(rand.NormFloat64())
		}
	} else {
		in.IDs = randomIDs(B*T, c.Vocab)
	}
	sOn, _ := on.NewState(B)
	sOff, _ := off.NewState(B)
	for call := 0; call < 2; call++ { // the second continues from the first's state
		got, want := fixture.NaNs(B*T*c.Hidden), fixture.NaNs(B*T*c.Hidden)
		check(t, on.Prefill(sOn, in, engine.All, got))
		check(t, off.Prefill(sOff, in, engine.All, want))
		assertBits(t, fmt.Sprintf("%s on against off, eager call %d", label, call), got, want)
		assertBits(t, fmt.Sprintf("%s on against off, eager call %d, state", label, call), flatState(t, on, sOn), flatState(t, off, sOff))
	}
	g, err := on.CapturePrefill(sOn, kind, T, engine.All)
	check(t, err)
	defer g.Destroy()
	for replay := 0; replay < 3; replay++ {
		sOn.Reset()
		sOff.Reset()
		got, want := fixture.NaNs(B*T*c.Hidden), fixture.NaNs(B*T*c.Hidden)
		check(t, g.Prefill(in, got))
		check(t, off.Prefill(sOff, in, engine.All, want))
		assertBits(t, fmt.Sprintf("%s on (graph replay %d) against off", label, replay), got, want)
		assertBits(t, fmt.Sprintf("%s on (graph replay %d) against off, state", label, replay), flatState(t, on, sOn), flatState(t, off, sOff))
	}
	return g.Edited()
}

// flatState returns every layer's conv window and SSM state of st, in a row.
func flatState(t *testing.T, e engine.Engine, st engine.State) []float32 {
	t.Helper()
	var all []float32
	for _, v := range enginetest.States(t, e, st) {
		all = append(all, v...)
	}
	return all
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
