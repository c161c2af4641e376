// Package enginetest is the conformance suite every engine passes: the
// Hugging Face fixtures, and the equivalences that must hold whatever the
// engine (prefill ≡ steps, chunked prefill ≡ one prefill, independent batch
// rows, pooled outputs, left-padded rows).
package enginetest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// Open makes an engine for the checkpoint in dir.
type Open func(t *testing.T, dir string) engine.Engine

// RefTol is the tolerance against HF (run in float64): the bar.
const RefTol = 1e-4

// EquivTol is the tolerance between two runs of one engine that group the
// same arithmetic differently (a prefill of T rows against T one-row steps,
// say), on fresh random prompts. No engine here sums a row the same way
// whatever the shape: gonum's SGEMM blocks K in 64s and differs from M=2 to
// M=74 once K > 64, the CPU engine's gemmRows takes up to eight rows, and
// cuBLAS and optimised BLASes pick kernels by shape.
//
// The fixtures amplify that rounding where a position's residual stream
// nearly cancels before the final RMSNorm: numpy's own float32 forward of
// these models differs from float64 by up to 4.3e-5 in 40 random prompts,
// at positions whose final residual has 1/15 of the median rms. Over 1300
// runs of the CPU suite (with and without OpenBLAS) the worst difference
// per run had a median of 5e-6 to 9e-6, a 99.9th percentile of 6e-5 and a
// maximum of 1.09e-4, so RefTol would fail about one run in a thousand.
// 3e-4 still catches a step whose dt is off by 1e-4 relative (that gave
// 9e-4 on the same check).
const EquivTol = 3e-4

// Run runs the whole suite on the engines open opens.
func Run(t *testing.T, open Open) {
	t.Run("fixtures", func(t *testing.T) { Fixtures(t, open) })
	RunSelf(t, open)
}

// RunSelf runs the suite's checks of an engine against itself, all but
// Fixtures' comparison with the HF references: for engines whose weights
// differ from the fixtures' (the CPU engine's 16-bit storage).
func RunSelf(t *testing.T, open Open) {
	t.Run("prefill-equals-steps", func(t *testing.T) { PrefillEqualsSteps(t, open) })
	t.Run("chunked-prefill", func(t *testing.T) { ChunkedPrefill(t, open) })
	t.Run("batch-rows-independent", func(t *testing.T) { BatchRowsIndependent(t, open) })
	t.Run("pooling", func(t *testing.T) { Pooling(t, open) })
	t.Run("padded-rows", func(t *testing.T) { PaddedRows(t, open) })
	t.Run("prefill-layers", func(t *testing.T) { PrefillLayers(t, open) })
}

// Fixtures compares every output with the HF reference of every case.
func Fixtures(t *testing.T, open Open) {
	cases, err := fixture.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 10 {
		t.Fatalf("found %d fixture cases under %s, want the committed set", len(cases), fixture.Root())
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			e := open(t, c.Dir)
			cfg := e.Config()
			st := mustState(t, e, c.B)
			hidden := fixture.NaNs(c.B * c.T * cfg.Hidden)
			if err := e.Prefill(st, c.Input, engine.All, hidden); err != nil {
				t.Fatal(err)
			}
			check(t, "hidden", hidden, c.Hidden, RefTol)
			logits := fixture.NaNs(c.B * c.T * cfg.Vocab)
			if err := e.Logits(hidden, c.B*c.T, logits); err != nil {
				t.Fatal(err)
			}
			check(t, "logits", logits, c.Logits, RefTol)
			for l := range c.Conv {
				conv, err := st.ConvState(l)
				if err != nil {
					t.Fatal(err)
				}
				ssm, _ := st.SSMState(l)
				check(t, fmt.Sprintf("conv state %d", l), conv, c.Conv[l], RefTol)
				check(t, fmt.Sprintf("ssm state %d", l), ssm, c.SSM[l], RefTol)
			}
			for i, in := range c.Next {
				logits := fixture.NaNs(c.B * cfg.Vocab)
				if in.IDs != nil {
					err = e.Step(st, in.IDs, logits)
				} else {
					h := fixture.NaNs(c.B * cfg.Hidden)
					if err = e.Prefill(st, in, engine.Last, h); err == nil {
						err = e.Logits(h, c.B, logits)
					}
				}
				if err != nil {
					t.Fatal(err)
				}
				check(t, fmt.Sprintf("next token %d logits", i), logits, c.NextLogits[i], RefTol)
			}
		})
	}
}

func check(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if e := fixture.RelErr(got, want); e > tol {
		t.Errorf("%s: max relative error %.3g > %.0e", what, e, tol)
	} else {
		t.Logf("%s: max relative error %.3g", what, e)
	}
}

func mustState(t *testing.T, e engine.Engine, B int) engine.State {
	t.Helper()
	st, err := e.NewState(B)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// randomIDs draws fresh token ids, never the same across runs of the suite.
func randomIDs(n, vocab int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = rand.Int64N(int64(vocab))
	}
	return ids
}

func caseDir(name string) string { return filepath.Join(fixture.Root(), name) }

// States returns a copy of every layer's conv and SSM state, in layer order
// (conv, ssm, conv, ssm, ...).
func States(t *testing.T, e engine.Engine, st engine.State) [][]float32 {
	var out [][]float32
	for l := 0; l < e.Config().Layers; l++ {
		c, err := st.ConvState(l)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := st.SSMState(l)
		out = append(out, c, s)
	}
	return out
}

// checkStates compares two sets of states (from states) layer by layer.
func checkStates(t *testing.T, label string, got, want [][]float32, tol float64) {
	t.Helper()
	for i := range want {
		check(t, fmt.Sprintf("%s state %d", label, i), got[i], want[i], tol)
	}
}

// PrefillEqualsSteps checks prefill(T) ≡ T single-token steps, in hidden
// states and final states.
func PrefillEqualsSteps(t *testing.T, open Open) {
	for _, name := range []string{"base", "falcon", "conv3_bias"} {
		e := open(t, caseDir(name))
		cfg := e.Config()
		B, T := 2, 37
		ids := randomIDs(B*T, cfg.Vocab)
		st1 := mustState(t, e, B)
		all := fixture.NaNs(B * T * cfg.Hidden)
		if err := e.Prefill(st1, engine.Input{B: B, T: T, IDs: ids}, engine.All, all); err != nil {
			t.Fatal(err)
		}
		st2 := mustState(t, e, B)
		for i := 0; i < T; i++ {
			step := []int64{ids[i], ids[T+i]}
			h := fixture.NaNs(B * cfg.Hidden)
			if err := e.Prefill(st2, engine.Input{B: B, T: 1, IDs: step}, engine.Last, h); err != nil {
				t.Fatal(err)
			}
			for b := 0; b < B; b++ {
				want := all[(b*T+i)*cfg.Hidden : (b*T+i+1)*cfg.Hidden]
				check(t, fmt.Sprintf("%s step %d row %d", name, i, b), h[b*cfg.Hidden:(b+1)*cfg.Hidden], want, EquivTol)
			}
		}
		checkStates(t, name, States(t, e, st2), States(t, e, st1), EquivTol)
	}
}

// ChunkedPrefill checks prefill(T1) then prefill(T2) ≡ prefill(T1+T2).
func ChunkedPrefill(t *testing.T, open Open) {
	e := open(t, caseDir("base"))
	cfg := e.Config()
	B := 3
	for _, split := range [][2]int{{1, 1}, {5, 30}, {33, 2}, {64, 64}} {
		T1, T2 := split[0], split[1]
		T := T1 + T2
		ids := randomIDs(B*T, cfg.Vocab)
		whole := mustState(t, e, B)
		want := fixture.NaNs(B * T * cfg.Hidden)
		if err := e.Prefill(whole, engine.Input{B: B, T: T, IDs: ids}, engine.All, want); err != nil {
			t.Fatal(err)
		}
		part := mustState(t, e, B)
		var got []float32
		for _, span := range [][2]int{{0, T1}, {T1, T}} {
			n := span[1] - span[0]
			sub := make([]int64, 0, B*n)
			for b := 0; b < B; b++ {
				sub = append(sub, ids[b*T+span[0]:b*T+span[1]]...)
			}
			h := fixture.NaNs(B * n * cfg.Hidden)
			if err := e.Prefill(part, engine.Input{B: B, T: n, IDs: sub}, engine.All, h); err != nil {
				t.Fatal(err)
			}
			got = append(got, h...)
		}
		// got is [span][B][n][d]; reorder to [B][T][d].
		reordered := make([]float32, 0, len(want))
		d := cfg.Hidden
		for b := 0; b < B; b++ {
			reordered = append(reordered, got[b*T1*d:(b+1)*T1*d]...)
			off := B * T1 * d
			reordered = append(reordered, got[off+b*T2*d:off+(b+1)*T2*d]...)
		}
		check(t, fmt.Sprintf("split %v hidden", split), reordered, want, EquivTol)
		checkStates(t, fmt.Sprintf("split %v", split), States(t, e, part), States(t, e, whole), EquivTol)
	}
}

// BatchRowsIndependent checks that each row of a batch gives what it gives alone.
func BatchRowsIndependent(t *testing.T, open Open) {
	e := open(t, caseDir("dstate8"))
	cfg := e.Config()
	B, T, d := 3, 19, cfg.Hidden
	ids := randomIDs(B*T, cfg.Vocab)
	st := mustState(t, e, B)
	all := fixture.NaNs(B * T * d)
	if err := e.Prefill(st, engine.Input{B: B, T: T, IDs: ids}, engine.All, all); err != nil {
		t.Fatal(err)
	}
	batched := States(t, e, st)
	for b := 0; b < B; b++ {
		one := mustState(t, e, 1)
		h := fixture.NaNs(T * d)
		if err := e.Prefill(one, engine.Input{B: 1, T: T, IDs: ids[b*T : (b+1)*T]}, engine.All, h); err != nil {
			t.Fatal(err)
		}
		check(t, fmt.Sprintf("row %d hidden", b), h, all[b*T*d:(b+1)*T*d], EquivTol)
		alone := States(t, e, one)
		for i := range alone {
			per := len(alone[i])
			check(t, fmt.Sprintf("row %d state %d", b, i), alone[i], batched[i][b*per:(b+1)*per], EquivTol)
		}
	}
}

// Pooling checks last, sum and mean against the all-positions output.
func Pooling(t *testing.T, open Open) {
	e := open(t, caseDir("features"))
	cfg := e.Config()
	B, T, d, F := 2, 23, cfg.Hidden, cfg.InputDim
	feats := make([]float32, B*T*F)
	for i := range feats {
		feats[i] = float32(rand.NormFloat64())
	}
	in := engine.Input{B: B, T: T, Features: feats}
	run := func(pool engine.Pool) []float32 {
		out := fixture.NaNs(pool.OutLen(B, T, d))
		if err := e.Prefill(mustState(t, e, B), in, pool, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	all := run(engine.All)
	last, sum, mean := make([]float32, B*d), make([]float32, B*d), make([]float32, B*d)
	for b := 0; b < B; b++ {
		copy(last[b*d:], all[(b*T+T-1)*d:(b*T+T)*d])
		for t := 0; t < T; t++ {
			for i := 0; i < d; i++ {
				sum[b*d+i] += all[(b*T+t)*d+i]
			}
		}
		for i := 0; i < d; i++ {
			mean[b*d+i] = sum[b*d+i] / float32(T)
		}
	}
	check(t, "last", run(engine.Last), last, EquivTol)
	check(t, "sum", run(engine.Sum), sum, EquivTol)
	check(t, "mean", run(engine.Mean), mean, EquivTol)
}

// PaddedRows checks a left-padded batch (engine.Input.Pad) against each row's
// tokens alone, with every pool, on a state that holds a prompt before
// (continued) and on that state Reset (new sequences): outputs, zeros at the
// padding, and final states. Then Pads that leave a row no token are input errors.
func PaddedRows(t *testing.T, open Open) {
	for _, name := range []string{"base", "conv3_bias", "falcon", "features"} {
		e := open(t, caseDir(name))
		cfg := e.Config()
		B, T, d, F := 3, 2+rand.IntN(30), cfg.Hidden, cfg.InputDim
		pad := []int{0, 1 + rand.IntN(T-1), T - 1} // whole, some padding, one token
		rand.Shuffle(B, func(i, j int) { pad[i], pad[j] = pad[j], pad[i] })
		in := engine.Input{B: B, T: T, Pad: pad}
		lead := engine.Input{B: B, T: 5, IDs: randomIDs(B*5, cfg.Vocab)} // the prompt before
		if F > 0 {
			in.Features = make([]float32, B*T*F)
			for i := range in.Features {
				in.Features[i] = float32(rand.NormFloat64())
			}
			lead = engine.Input{B: B, T: 1, Features: make([]float32, B*F)}
			for i := range lead.Features {
				lead.Features[i] = float32(rand.NormFloat64())
			}
		} else {
			in.IDs = randomIDs(B*T, cfg.Vocab)
		}
		// row returns row b of x: its tokens alone, or with from, all of it.
		row := func(x engine.Input, b, from int) engine.Input {
			one := engine.Input{B: 1, T: x.T - from}
			if F > 0 {
				one.Features = x.Features[(b*x.T+from)*F : (b+1)*x.T*F]
			} else {
				one.IDs = x.IDs[b*x.T+from : (b+1)*x.T]
			}
			return one
		}
		for _, pool := range []engine.Pool{engine.All, engine.Last, engine.Sum, engine.Mean} {
			for _, fresh := range []bool{false, true} {
				label := fmt.Sprintf("%s pad %v pool %d fresh %v", name, pad, pool, fresh)
				st := mustState(t, e, B)
				if err := e.Prefill(st, lead, engine.Last, fixture.NaNs(B*d)); err != nil {
					t.Fatal(err)
				}
				if fresh {
					st.Reset()
				}
				out := fixture.NaNs(pool.OutLen(B, T, d))
				if err := e.Prefill(st, in, pool, out); err != nil {
					t.Fatal(err)
				}
				batched := States(t, e, st)
				for b := range B {
					one := mustState(t, e, 1)
					if !fresh {
						if err := e.Prefill(one, row(lead, b, 0), engine.Last, fixture.NaNs(d)); err != nil {
							t.Fatal(err)
						}
					}
					want := fixture.NaNs(pool.OutLen(1, T-pad[b], d))
					if err := e.Prefill(one, row(in, b, pad[b]), pool, want); err != nil {
						t.Fatal(err)
					}
					got := out[b*d : (b+1)*d]
					if pool == engine.All {
						got = out[(b*T+pad[b])*d : (b+1)*T*d]
						for i, v := range out[b*T*d : (b*T+pad[b])*d] {
							if v != 0 {
								t.Fatalf("%s row %d: padding position %d holds %v", label, b, i/d, v)
							}
						}
					}
					check(t, fmt.Sprintf("%s row %d", label, b), got, want, EquivTol)
					alone := States(t, e, one)
					for i := range alone {
						per := len(alone[i])
						check(t, fmt.Sprintf("%s row %d state %d", label, b, i), batched[i][b*per:(b+1)*per], alone[i], EquivTol)
					}
				}
			}
		}
		for _, bad := range [][]int{{0, 0}, {0, 0, T}, {0, -1, 0}, {0, 0, 0, 0}} {
			in.Pad = bad
			if err := e.Prefill(mustState(t, e, B), in, engine.Last, fixture.NaNs(B*d)); !engine.IsInvalid(err) {
				t.Errorf("%s: Pad %v gave %v, want an input error", name, bad, err)
			}
		}
	}
}

// PrefillLayers checks each layer's residual stream (engine.LayerPrefiller)
// on a left-padded batch, chunked and not: the output is Prefill's, the
// last layer's residual through norm_f (float64 here) is the output, every
// layer is zero at the padding, and each row's layers are what the row
// alone gives. A layers buffer of the wrong size is an input error.
func PrefillLayers(t *testing.T, open Open) {
	for _, name := range []string{"base", "falcon"} {
		e := open(t, caseDir(name))
		lp, ok := e.(engine.LayerPrefiller)
		if !ok {
			t.Fatalf("%T does not hand out each layer's states", e)
		}
		w, err := checkpoint.Load(caseDir(name))
		if err != nil {
			t.Fatal(err)
		}
		cfg := e.Config()
		B, T, d, L := 3, 29, cfg.Hidden, cfg.Layers
		pad := []int{0, 4, 11}
		in := engine.Input{B: B, T: T, IDs: randomIDs(B*T, cfg.Vocab), Pad: pad}
		out, layers := fixture.NaNs(B*T*d), fixture.NaNs(L*B*T*d)
		if err := lp.PrefillLayers(context.Background(), mustState(t, e, B), in, out, layers); err != nil {
			t.Fatal(err)
		}
		want := fixture.NaNs(B * T * d)
		if err := e.Prefill(mustState(t, e, B), in, engine.All, want); err != nil {
			t.Fatal(err)
		}
		check(t, name+" output", out, want, EquivTol)
		normed := make([]float32, B*T*d)
		for r, h := range chunks(layers[(L-1)*B*T*d:], d) {
			var ss float64
			for _, v := range h {
				ss += float64(v) * float64(v)
			}
			scale := 1 / math.Sqrt(ss/float64(d)+cfg.Eps)
			for i, v := range h {
				normed[r*d+i] = float32(float64(v) * scale * float64(w.NormF[i]))
			}
		}
		check(t, name+" norm_f of the last layer's residual", normed, out, EquivTol)
		for l := range L {
			for b, p := range pad {
				at := (l*B*T + b*T) * d
				for i, v := range layers[at : at+p*d] {
					if v != 0 {
						t.Fatalf("%s layer %d row %d: padding value %d = %v, want 0", name, l, b, i, v)
					}
				}
			}
		}
		for b, p := range pad {
			n := T - p
			alone := fixture.NaNs(L * n * d)
			one := engine.Input{B: 1, T: n, IDs: in.IDs[b*T+p : (b+1)*T]}
			if err := lp.PrefillLayers(context.Background(), mustState(t, e, 1), one, fixture.NaNs(n*d), alone); err != nil {
				t.Fatal(err)
			}
			for l := range L {
				at := (l*B*T + b*T + p) * d
				check(t, fmt.Sprintf("%s row %d alone, layer %d", name, b, l), layers[at:at+n*d], alone[l*n*d:(l+1)*n*d], EquivTol)
			}
		}
		err = lp.PrefillLayers(context.Background(), mustState(t, e, B), in, out, layers[:len(layers)-1])
		if !engine.IsInvalid(err) {
			t.Errorf("%s: a layers buffer one value short: %v, want an input error", name, err)
		}
	}
}

// chunks splits v into rows of n values.
func chunks(v []float32, n int) [][]float32 {
	rows := make([][]float32, 0, len(v)/n)
	for i := 0; i+n <= len(v); i += n {
		rows = append(rows, v[i:i+n])
	}
	return rows
}
