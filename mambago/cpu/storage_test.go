package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/x448/float16"

	"github.com/mambago/mambago/internal/blastest"
	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cpu"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
	"github.com/mambago/mambago/mambago/safetensors"
)

// rounded returns w with every weight matrix the engine stores in st
// rounded to st and widened back: the float32 weights whose 16-bit
// storage is exact.
func rounded(w *checkpoint.Weights, st cpu.Storage) *checkpoint.Weights {
	r := w.Clone()
	round := func(v []float32) {
		for i, x := range v {
			if st == cpu.BFloat16 {
				v[i] = math.Float32frombits(uint32(safetensors.BF16Bits(x)) << 16)
			} else {
				v[i] = float16.Fromfloat32(x).Float32()
			}
		}
	}
	round(r.Embeddings)
	if !r.Tied() {
		round(r.LMHead)
	}
	round(r.InputProj)
	for _, l := range r.Layers {
		round(l.InProj)
		round(l.XProj)
		round(l.DTProj)
		round(l.OutProj)
	}
	return r
}

// TestStorageMatchesFloat32 checks the contract of 16-bit storage: an
// engine keeping its matrices in bf16 or f16 computes what the float32
// engine computes on those matrices' values. Every prefill (ids, embeds
// and features; each pooling; rows past the few-row GEMM and under it) and
// the steps of two sequences give the same bits, and so do the carried
// states; a step of one sequence, whose products a 16-bit W sums in
// another order, agrees within 1e-5 of the logits' scale. Random weights
// (an untied head, input_proj, biases) and random inputs, drawn fresh;
// the lanes on and off, gonum's GEMMs and (where scripts/test.sh names it)
// OpenBLAS's.
func TestStorageMatchesFloat32(t *testing.T) {
	cfg := fixture.Shape(64, 3, 97)
	cfg.Inner, cfg.DTRank, cfg.InputDim, cfg.UseBias, cfg.TieEmbeddings = 136, 5, 12, true, false
	seed := rand.Uint64()
	lib := blastest.Maybe(t)
	for _, st := range []cpu.Storage{cpu.BFloat16, cpu.Float16} {
		w := fixture.RandomWeights(cfg, seed)
		w.LMHead = slices.Clone(w.Embeddings)
		for i := range w.LMHead {
			w.LMHead[i] *= -1.5
		}
		w32 := rounded(w, st)
		for _, lanes := range []bool{true, false} {
			for _, useBLAS := range []bool{false, true} {
				if useBLAS && lib == nil {
					continue
				}
				name := fmt.Sprintf("%v/lanes=%v/blas=%v", st, lanes, useBLAS)
				t.Run(name, func(t *testing.T) {
					defer cpu.SetLanes(lanes)()
					ref, half := cpu.New(w32), cpu.NewStored(w32.Clone(), st)
					if half.Storage() != st || ref.Storage() != cpu.Float32 {
						t.Fatalf("storage %v and %v, want %v and float32", half.Storage(), ref.Storage(), st)
					}
					if useBLAS {
						ref.BLAS, half.BLAS = lib, lib
					}
					compareEngines(t, ref, half, cfg, seed)
				})
			}
		}
	}
}

// compareEngines runs the same prefills and steps on ref and got from the
// same random states and compares them as TestStorageMatchesFloat32 says.
func compareEngines(t *testing.T, ref, got *cpu.Engine, cfg checkpoint.Config, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	d, V := cfg.Hidden, cfg.Vocab
	for _, shape := range []struct{ B, T int }{{2, 3}, {3, 17}, {1, 40}} {
		B, T := shape.B, shape.T
		ids := make([]int64, B*T)
		for i := range ids {
			ids[i] = rng.Int64N(int64(V))
		}
		embeds, features := randomVec(rng, B*T*d), randomVec(rng, B*T*cfg.InputDim)
		inputs := map[string]engine.Input{
			"ids":      {B: B, T: T, IDs: ids},
			"embeds":   {B: B, T: T, Embeds: embeds},
			"features": {B: B, T: T, Features: features},
		}
		for kind, in := range inputs {
			for _, pool := range []engine.Pool{engine.Last, engine.All, engine.Mean} {
				what := fmt.Sprintf("B=%d T=%d %s %v", B, T, kind, pool)
				states := [2]engine.State{}
				outs := [2][]float32{}
				start := randomState(t, ref, B, rng)
				for i, e := range []*cpu.Engine{ref, got} {
					states[i] = cloneInto(t, e, start)
					outs[i] = fixture.NaNs(pool.OutLen(B, T, d))
					if err := e.Prefill(states[i], in, pool, outs[i]); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
				}
				sameBits(t, what+": output", outs[1], outs[0])
				sameStates(t, what, states[1], states[0], cfg.Layers)
				// Steps from the prefilled states: two sequences give the
				// same bits, one sequence agrees closely.
				step := make([]int64, B)
				for b := range step {
					step[b] = rng.Int64N(int64(V))
				}
				logits := [2][]float32{fixture.NaNs(B * V), fixture.NaNs(B * V)}
				for i, e := range []*cpu.Engine{ref, got} {
					if err := e.Step(states[i], step, logits[i]); err != nil {
						t.Fatalf("%s: step: %v", what, err)
					}
				}
				if B == 1 {
					if err := fixture.RelErr(logits[1], logits[0]); err > 1e-5 || math.IsNaN(err) {
						t.Fatalf("%s: step's logits differ by %.3g of their scale (want 1e-5)", what, err)
					}
				} else {
					sameBits(t, what+": step's logits", logits[1], logits[0])
					sameStates(t, what+" then a step", states[1], states[0], cfg.Layers)
				}
			}
		}
	}
}

func randomVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// randomState returns a state of e's model for B sequences holding random values.
func randomState(t *testing.T, e *cpu.Engine, B int, rng *rand.Rand) engine.State {
	t.Helper()
	st, err := e.NewState(B)
	if err != nil {
		t.Fatal(err)
	}
	c := e.Config()
	for l := range c.Layers {
		if err := st.SetConvState(l, randomVec(rng, B*c.Inner*c.ConvKernel)); err != nil {
			t.Fatal(err)
		}
		if err := st.SetSSMState(l, randomVec(rng, B*c.Inner*c.State)); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// cloneInto returns a new state of e holding src's values.
func cloneInto(t *testing.T, e *cpu.Engine, src engine.State) engine.State {
	t.Helper()
	st, err := e.NewState(src.Batch())
	if err != nil {
		t.Fatal(err)
	}
	for l := range e.Config().Layers {
		conv, _ := src.ConvState(l)
		ssm, _ := src.SSMState(l)
		if err := st.SetConvState(l, conv); err != nil {
			t.Fatal(err)
		}
		if err := st.SetSSMState(l, ssm); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %v, float32 storage gives %v", what, i, got[i], want[i])
		}
	}
}

func sameStates(t *testing.T, what string, got, want engine.State, layers int) {
	t.Helper()
	for l := range layers {
		gc, _ := got.ConvState(l)
		wc, _ := want.ConvState(l)
		gs, _ := got.SSMState(l)
		ws, _ := want.SSMState(l)
		sameBits(t, fmt.Sprintf("%s: layer %d's conv state", what, l), gc, wc)
		sameBits(t, fmt.Sprintf("%s: layer %d's SSM state", what, l), gs, ws)
	}
}

// TestNarrowedLoadMatchesStored checks that an engine over weights loaded
// narrowed (checkpoint.LoadNarrowed) computes what NewStored computes over
// the same checkpoint loaded as float32, to the bit, in every storage: the
// narrowed type kept as it is, and converted to the others. Fixtures with a
// tied and an untied head and with input_proj, from fresh random states.
func TestNarrowedLoadMatchesStored(t *testing.T) {
	seed := rand.Uint64()
	for _, name := range []string{"base", "untied", "features", "bf16"} {
		dir := filepath.Join(fixture.Root(), name)
		w, err := checkpoint.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, dt := range []safetensors.DType{safetensors.BF16, safetensors.F16} {
			n, err := checkpoint.LoadNarrowed(dir, dt)
			if err != nil {
				t.Fatal(err)
			}
			from := cpu.BFloat16
			if dt == safetensors.F16 {
				from = cpu.Float16
			}
			for _, st := range []cpu.Storage{cpu.Float32, cpu.BFloat16, cpu.Float16} {
				t.Run(fmt.Sprintf("%s/%s/%v", name, dt, st), func(t *testing.T) {
					// The reference: float32 weights rounded as the load
					// rounds them, then stored in st.
					ref := cpu.NewStored(rounded(w, from), st)
					got := cpu.NewStored(n, st)
					if got.Storage() != st {
						t.Fatalf("storage %v, want %v", got.Storage(), st)
					}
					compareFixture(t, ref, got, seed)
				})
			}
		}
	}
}

// compareFixture runs a prefill of every position and a step of two
// sequences on ref and got from the same random state and checks their
// outputs, logits and states for the same bits.
func compareFixture(t *testing.T, ref, got *cpu.Engine, seed uint64) {
	t.Helper()
	c := ref.Config()
	rng := rand.New(rand.NewPCG(seed, 3))
	const B, T = 2, 13
	in := engine.Input{B: B, T: T}
	if c.InputDim > 0 {
		in.Features = randomVec(rng, B*T*c.InputDim)
	} else {
		in.IDs = make([]int64, B*T)
		for i := range in.IDs {
			in.IDs[i] = rng.Int64N(int64(c.Vocab))
		}
	}
	start := randomState(t, ref, B, rng)
	var states [2]engine.State
	var outs, logits [2][]float32
	step := []int64{rng.Int64N(int64(c.Vocab)), rng.Int64N(int64(c.Vocab))}
	for i, e := range []*cpu.Engine{ref, got} {
		states[i] = cloneInto(t, e, start)
		outs[i] = fixture.NaNs(B * T * c.Hidden)
		if err := e.Prefill(states[i], in, engine.All, outs[i]); err != nil {
			t.Fatal(err)
		}
		logits[i] = fixture.NaNs(B * c.Vocab)
		if err := e.Step(states[i], step, logits[i]); err != nil {
			t.Fatal(err)
		}
	}
	sameBits(t, "prefill", outs[1], outs[0])
	sameBits(t, "step's logits", logits[1], logits[0])
	sameStates(t, "after the step", states[1], states[0], c.Layers)
}

// TestStepSameInEveryBatch checks that a decode step gives a sequence the
// same bits, logits and carried state, in a batch of 2 to ChunkedRows()
// sequences, in each storage: gemmRows groups W's rows by the batch's size,
// and every grouping, the rows left over from it included, adds the same
// products in the same order; past RowsMax sequences gemm runs gemmRows on
// chunks of them. The shape leaves rows over from each grouping (x_proj 37,
// dt_proj 134 and the head 97 rows). Random weights, states and ids, drawn
// fresh.
func TestStepSameInEveryBatch(t *testing.T) {
	if !cpu.HasLanes {
		t.Skip("this CPU has no AVX2/FMA/F16C: a batch's GEMMs run in gonum")
	}
	cfg := fixture.Shape(64, 2, 97)
	cfg.Inner, cfg.DTRank = 134, 5
	seed, most := rand.Uint64(), cpu.ChunkedRows()
	for _, st := range []cpu.Storage{cpu.Float32, cpu.BFloat16, cpu.Float16} {
		e := cpu.NewStored(fixture.RandomWeights(cfg, seed), st)
		rng := rand.New(rand.NewPCG(seed, 3))
		start := randomState(t, e, most, rng)
		ids := make([]int64, most)
		for i := range ids {
			ids[i] = rng.Int64N(int64(cfg.Vocab))
		}
		whole, wantLogits := cloneInto(t, e, start), fixture.NaNs(most*cfg.Vocab)
		if err := e.Step(whole, ids, wantLogits); err != nil {
			t.Fatal(err)
		}
		for B := 2; B < most; B++ {
			part, err := e.NewState(B)
			if err != nil {
				t.Fatal(err)
			}
			for l := range cfg.Layers {
				conv, _ := start.ConvState(l)
				ssm, _ := start.SSMState(l)
				if err := part.SetConvState(l, conv[:len(conv)/most*B]); err != nil {
					t.Fatal(err)
				}
				if err := part.SetSSMState(l, ssm[:len(ssm)/most*B]); err != nil {
					t.Fatal(err)
				}
			}
			logits := fixture.NaNs(B * cfg.Vocab)
			if err := e.Step(part, ids[:B], logits); err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("%v: the first %d of %d sequences", st, B, most)
			sameBitsAs(t, what+", logits", logits, wantLogits[:len(logits)])
			for l := range cfg.Layers {
				got, _ := part.SSMState(l)
				want, _ := whole.SSMState(l)
				sameBitsAs(t, fmt.Sprintf("%s, layer %d's scan state", what, l), got, want[:len(got)])
				got, _ = part.ConvState(l)
				want, _ = whole.ConvState(l)
				sameBitsAs(t, fmt.Sprintf("%s, layer %d's conv state", what, l), got, want[:len(got)])
			}
		}
	}
}

// sameBitsAs fails t unless got holds want's bits.
func sameBitsAs(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestStatesStepAtOnce runs one engine from several goroutines at once,
// each with states of its own (batches of 1, 2, 3, 5 and 8: every gemmRows
// grouping, and the conv and scan tasks on and off the calling
// goroutine): each goroutine's prefills and steps give the bits that the
// same calls give one after another. Run it with -race too: the engine's
// buffers from rowsPool and the tasks' stack scratch are per call.
func TestStatesStepAtOnce(t *testing.T) {
	cfg := fixture.Shape(64, 2, 97)
	cfg.Inner, cfg.DTRank = 1040, 5 // 130 lane blocks: B·E over serialChannels from B = 8
	seed := rand.Uint64()
	for _, st := range []cpu.Storage{cpu.Float32, cpu.BFloat16} {
		e := cpu.NewStored(fixture.RandomWeights(cfg, seed), st)
		batches := []int{1, 2, 3, 5, 8}
		run := func(i int) []float32 {
			B := batches[i]
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			s, err := e.NewState(B)
			if err != nil {
				t.Error(err)
				return nil
			}
			T := 3 + i
			ids := make([]int64, B*T)
			for j := range ids {
				ids[j] = rng.Int64N(int64(cfg.Vocab))
			}
			out := fixture.NaNs(B * cfg.Hidden)
			if err := e.Prefill(s, engine.Input{B: B, T: T, IDs: ids}, engine.Last, out); err != nil {
				t.Error(err)
				return nil
			}
			for range 4 {
				logits := fixture.NaNs(B * cfg.Vocab)
				if err := e.Step(s, ids[:B], logits); err != nil {
					t.Error(err)
					return nil
				}
				out = append(out, logits...)
			}
			return out
		}
		want := make([][]float32, len(batches))
		for i := range batches {
			want[i] = run(i)
		}
		got := make([][]float32, len(batches))
		var wg sync.WaitGroup
		for i := range batches {
			wg.Go(func() {
				for range 3 { // rounds, so that the calls overlap
					got[i] = run(i)
				}
			})
		}
		wg.Wait()
		for i := range batches {
			if len(got[i]) != len(want[i]) {
				t.Fatalf("%v B=%d: %d values, want %d", st, batches[i], len(got[i]), len(want[i]))
			}
			for j := range want[i] {
				if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
					t.Fatalf("%v B=%d: value %d = %v at once, %v alone", st, batches[i], j, got[i][j], want[i][j])
				}
			}
		}
	}
}
