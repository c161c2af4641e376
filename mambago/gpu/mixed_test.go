package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// The bars of mixed precision (bf16/f16 activations and GEMMs, f32 residual,
// scan and state), against HF's float64 reference and the f32 engine.
const (
	maxMeanKL     = 1e-3 // mean over positions of KL(reference ‖ ours) on the logits
	minArgmaxHits = 0.99 // share of positions whose greedy token agrees
	maxStateRel   = 1e-2 // ‖state − state_f32‖ / ‖state_f32‖ after a prefill
)

// normRel is ‖got − want‖ / ‖want‖.
func normRel(got, want []float32) float64 {
	var d, n float64
	for i := range want {
		d += (float64(got[i]) - float64(want[i])) * (float64(got[i]) - float64(want[i]))
		n += float64(want[i]) * float64(want[i])
	}
	if n == 0 {
		return math.Sqrt(d)
	}
	return math.Sqrt(d / n)
}

// prefillLogits runs in from a zero state and returns the logits of every
// position and the state.
func prefillLogits(t *testing.T, e *gpu.Engine, in engine.Input) ([]float32, engine.State) {
	t.Helper()
	c := e.Config()
	st, err := e.NewState(in.B)
	if err != nil {
		t.Fatal(err)
	}
	hidden := fixture.NaNs(in.B * in.T * c.Hidden)
	if err := e.Prefill(st, in, engine.All, hidden); err != nil {
		t.Fatal(err)
	}
	logits := fixture.NaNs(in.B * in.T * c.Vocab)
	if err := e.Logits(hidden, in.B*in.T, logits); err != nil {
		t.Fatal(err)
	}
	for i, v := range logits {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("logit %d is %v", i, v)
		}
	}
	return logits, st
}

// checkStates compares the carried state (every layer's SSM state and conv
// window together) with the f32 engine's: the norm of the difference over
// the norm of the f32 state. The worst single layer is logged too.
func checkStates(t *testing.T, what string, got, want engine.State, layers int) {
	t.Helper()
	var all, allRef []float32
	worst := 0.0
	for l := 0; l < layers; l++ {
		for _, get := range []func(engine.State, int) ([]float32, error){engine.State.SSMState, engine.State.ConvState} {
			g, err := get(got, l)
			if err != nil {
				t.Fatal(err)
			}
			w, _ := get(want, l)
			worst = math.Max(worst, normRel(g, w))
			all, allRef = append(all, g...), append(allRef, w...)
		}
	}
	rel := normRel(all, allRef)
	if rel > maxStateRel {
		t.Errorf("%s: carried state differs from f32 by %.3g (norm ratio), bar %g", what, rel, maxStateRel)
	}
	t.Logf("%s: state vs f32 %.2e (worst single layer %.2e)", what, rel, worst)
}

// TestMixedPrecisionFixtures checks bf16 and f16 on every HF fixture: the KL
// of their logits from HF's, greedy agreement, and the carried state against
// the f32 engine's.
func TestMixedPrecisionFixtures(t *testing.T) {
	gputest.Need(t)
	cases, err := fixture.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
		positions, hits, worstKL := 0, 0, 0.0
		for _, c := range cases {
			w, err := checkpoint.Load(c.Dir)
			if err != nil {
				t.Fatal(err)
			}
			e16, e32 := newEngine(t, w, dt), newEngine(t, w, cuda.F32)
			logits, st := prefillLogits(t, e16, c.Input)
			_, st32 := prefillLogits(t, e32, c.Input)
			kl, h := fixture.LogitStats(c.Logits, logits, w.Config.Vocab)
			positions += c.B * c.T
			hits += h
			worstKL = math.Max(worstKL, kl)
			if kl > maxMeanKL {
				t.Errorf("%s %s: mean KL %.3g, bar %g", dt, c.Name, kl, maxMeanKL)
			}
			checkStates(t, dt.String()+" "+c.Name, st, st32, w.Config.Layers)
			t.Logf("%s %s: mean KL %.2e, argmax %d/%d", dt, c.Name, kl, h, c.B*c.T)
		}
		share := float64(hits) / float64(positions)
		if share < minArgmaxHits {
			t.Errorf("%s: greedy argmax agrees at %.4f of %d positions, bar %g", dt, share, positions, minArgmaxHits)
		}
		t.Logf("%s over %d cases: worst mean KL %.2e, argmax agreement %.4f of %d positions", dt, len(cases),
			worstKL, share, positions)
	}
}

// TestMixedPrecision130m checks bf16 and f16 on fresh random inputs to a
// 130m-shaped model against the f32 engine (which matches HF to 1e-4).
func TestMixedPrecision130m(t *testing.T) {
	gputest.Need(t)
	w := fixture.RandomWeights(fixture.Shape(768, 24, 50280), rand.Uint64())
	e32 := newEngine(t, w, cuda.F32)
	B, T := 2, 200
	in := engine.Input{B: B, T: T, IDs: randomIDs(B*T, 50280)}
	ref, st32 := prefillLogits(t, e32, in)
	for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
		e := newEngine(t, w, dt)
		logits, st := prefillLogits(t, e, in)
		kl, hits := fixture.LogitStats(ref, logits, 50280)
		if kl > maxMeanKL {
			t.Errorf("%s: mean KL from f32 %.3g, bar %g", dt, kl, maxMeanKL)
		}
		checkStates(t, dt.String()+" 130m", st, st32, 24)
		t.Logf("%s 130m B=%d T=%d: mean KL from f32 %.2e, argmax %d/%d", dt, B, T, kl, hits, B*T)
		e.Close()
	}
}

// TestDecodeMatchesPrefill checks the decode step (the kernels of
// kernels/step.cu up to decodeMaxB = 8 sequences, the prefill path above)
// against a prefill one position longer, from fresh random weights and
// tokens: in f32 to 1e-4, in bf16 and f16 by the mixed-precision KL bar
// (the decode step keeps its activations in f32, the prefill rounds them).
// Three shapes: d = 64, where every GEMV row is one warp's, d = 512, where
// warps share rows (each split of kernels/step.cu but 1 runs), and d = 2048,
// whose out_proj rows of 4096 the one-sequence entries split four ways at
// B=1; each with one row to a warp group and with four (Engine.GEMVRows),
// which only GEMVs of 1024 rows or more take.
func TestDecodeMatchesPrefill(t *testing.T) {
	gputest.Need(t)
	for _, cfg := range []checkpoint.Config{fixture.Shape(64, 3, 300), fixture.Shape(512, 2, 1000), fixture.Shape(2048, 1, 1000)} {
		t.Run(fmt.Sprintf("d%d", cfg.Hidden), func(t *testing.T) { decodeMatchesPrefill(t, cfg) })
	}
}

func decodeMatchesPrefill(t *testing.T, cfg checkpoint.Config) {
	w := fixture.RandomWeights(cfg, rand.Uint64())
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16, cuda.F16} {
		e := newEngine(t, w, dt)
		for _, run := range []struct{ B, rows int }{{1, 1}, {8, 1}, {9, 1}, {1, 4}, {8, 4}} {
			B := run.B
			e.GEMVRows = run.rows
			const T = 6
			ids := make([]int64, B*(T+1))
			for i := range ids {
				ids[i] = rand.Int64N(int64(cfg.Vocab))
			}
			// The reference: a prefill of all T+1 positions, the last one's logits.
			full := engine.Input{B: B, T: T + 1, IDs: ids}
			st, err := e.NewState(B)
			if err != nil {
				t.Fatal(err)
			}
			hidden := fixture.NaNs(B * cfg.Hidden)
			if err := e.Prefill(st, full, engine.Last, hidden); err != nil {
				t.Fatal(err)
			}
			want := fixture.NaNs(B * cfg.Vocab)
			if err := e.Logits(hidden, B, want); err != nil {
				t.Fatal(err)
			}
			// T positions by prefill, then one step.
			head, next := make([]int64, 0, B*T), make([]int64, 0, B)
			for b := 0; b < B; b++ {
				head = append(head, ids[b*(T+1):b*(T+1)+T]...)
				next = append(next, ids[b*(T+1)+T])
			}
			st2, err := e.NewState(B)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Prefill(st2, engine.Input{B: B, T: T, IDs: head}, engine.Last, hidden); err != nil {
				t.Fatal(err)
			}
			got := fixture.NaNs(B * cfg.Vocab)
			if err := e.Step(st2, next, got); err != nil {
				t.Fatal(err)
			}
			if dt == cuda.F32 {
				if rel := fixture.RelErr(got, want); rel > 1e-4 {
					t.Errorf("f32 B=%d rows %d: step logits differ from the prefill's by %.3g", B, run.rows, rel)
				}
				checkStates(t, fmt.Sprintf("f32 B=%d rows %d step", B, run.rows), st2, st, cfg.Layers)
				continue
			}
			kl, hits := fixture.LogitStats(want, got, cfg.Vocab)
			if kl > maxMeanKL {
				t.Errorf("%s B=%d rows %d: step logits KL %.3g from the prefill's, bar %g", dt, B, run.rows, kl, maxMeanKL)
			}
			t.Logf("%s B=%d rows %d: step vs prefill KL %.2e, argmax %d/%d", dt, B, run.rows, kl, hits, B)
		}
		e.Close()
	}
}

// TestDecodePDLMatches checks that programmatic dependent launch changes no
// bit of the decode step: eager steps and a captured step graph with
// DecodePDL give what plain launches give, logits and state.
func TestDecodePDLMatches(t *testing.T) {
	decodeSettingMatches(t, "PDL", 128, []int{1, 3}, 0, func(e *gpu.Engine, on bool) { e.DecodePDL = on })
}

// TestDecodeOneSequenceMatches checks that the one-sequence GEMV entries
// (Engine.GEMVOneSequence, taken at B=1) change no bit of the decode step,
// with one row and four to a warp group (d = 256: in_proj's 1024 rows take
// four).
func TestDecodeOneSequenceMatches(t *testing.T) {
	for _, rows := range []int{1, 4} {
		decodeSettingMatches(t, fmt.Sprintf("one-sequence GEMVs, rows %d", rows), 256, []int{1}, 0,
			func(e *gpu.Engine, on bool) { e.GEMVOneSequence, e.GEMVRows = on, rows })
	}
}

// TestDecodeStreamMatches checks that the streaming one-sequence entry
// (Engine.GEMVStream; gemv_sb1_ for out_proj, whose rows are d) changes no
// bit of a B=1 decode step against the one-sequence entries, f32 and bf16:
// d = 1032 (out_proj's K = 2064 not a multiple of a warp's 256 bf16
// weights, so a row's last slices are partial; split 2) and 2048 (K =
// 4096, split 4). The warpgroup GEMVs are off, so that both engines take
// the FMA entries. (The fixture's LM head has too few rows to stream;
// TestGEMVKernel checks the entry with a norm weight.)
func TestDecodeStreamMatches(t *testing.T) {
	for _, d := range []int{1032, 2048} {
		decodeSettingMatches(t, fmt.Sprintf("streaming GEMVs, d=%d", d), d, []int{1}, 0, func(e *gpu.Engine, on bool) {
			e.GEMVStream, e.GEMVWarpgroup, e.GEMVWarpgroupOneSequence = on, false, false
		})
	}
}

// TestDecodeTensorCoresMatch checks the tensor-core GEMVs of a bf16 batch
// (Engine.GEMVTensorCores) against the FMA entries: x goes through the
// tensor cores as three bf16 parts and is summed in another order, so the
// logits and states agree to f32 rounding, not to the bit. d = 64 (one
// block of 16 rows short of in_proj's 256), 136 (K a multiple of 8, not of
// 16 or 32: slices past K in every warp) and 512; B = 2, 5 and 8; blocks
// of 8 and 16 warps (Engine.GEMVTileWarps), and 8 warps with tiles split
// along k (Engine.GEMVTileParts 8: at d = 512, where the tiles are fewer
// than a quarter of the SMs, out_proj's and x_proj's take 4 blocks each and
// the LM head's 2).
func TestDecodeTensorCoresMatch(t *testing.T) {
	for _, tiles := range []struct{ warps, parts int }{{8, 1}, {16, 1}, {8, 8}} {
		for _, d := range []int{64, 136, 512} {
			decodeSettingMatches(t, fmt.Sprintf("tensor-core GEMVs, %+v, d=%d", tiles, d), d, []int{2, 5, 8}, 1e-4,
				func(e *gpu.Engine, on bool) {
					e.GEMVTensorCores, e.GEMVTileWarps, e.GEMVTileParts = on, tiles.warps, tiles.parts
					e.GEMVWarpgroup = false // every GEMV on the entries compared
				})
		}
	}
}

// TestDecodeWarpgroupMatches checks the warpgroup GEMVs of a bf16 batch
// (Engine.GEMVWarpgroup: in_proj and the LM head; with GEMVWarpgroupOut
// out_proj too, its x's parts from the scan step, whole or split along k
// over up to 8 blocks, 3 and 6 among them (uneven steps a part); with
// GEMVWarpgroupFold the norm folded across out_proj and the next in_proj or
// the LM head) against the engine's other GEMVs: x goes through wgmma as
// three bf16 parts, summed in another order, so logits and states agree to
// f32 rounding. d = 64 (in_proj one block of channels and one of z), 136 (K
// not a multiple of 64: the tensor maps' zeros past it; E = 272 straddles a
// block) and 512; B = 2, 5 and 8, and B = 1 and 3 with the fold at B=1 too
// (GEMVWarpgroupOneSequence). They run on sm_90 only; elsewhere both engines
// take the same path.
func TestDecodeWarpgroupMatches(t *testing.T) {
	for _, wg := range []struct {
		out   bool
		parts int
		fold  bool
		one   bool // B=1 too (GEMVWarpgroupOneSequence)
	}{{false, 1, false, false}, {true, 1, false, false}, {true, 8, false, false}, {false, 1, true, false},
		{false, 8, true, false}, {false, 8, true, true}, {false, 3, true, false}, {false, 6, true, true}} {
		Bs := []int{2, 5, 8}
		if wg.one {
			Bs = []int{1, 3}
		}
		for _, d := range []int{64, 136, 512} {
			decodeSettingMatches(t, fmt.Sprintf("warpgroup GEMVs, %+v, d=%d", wg, d), d, Bs, 1e-4,
				func(e *gpu.Engine, on bool) {
					e.GEMVWarpgroup, e.GEMVWarpgroupOut, e.GEMVWarpgroupParts = on, on && wg.out, wg.parts
					e.GEMVWarpgroupFold, e.GEMVWarpgroupOneSequence = on && wg.fold, on && wg.one
				})
		}
	}
}

// TestDecodeScanBatchMatches checks that the batched scan step
// (Engine.DecodeScanBatch: a warp a channel for every sequence) changes no
// bit of the decode step: it does a warp a channel and sequence's sums in
// their order. B = 2, 5 (an odd batch leaves the last pair half empty) and
// 8.
func TestDecodeScanBatchMatches(t *testing.T) {
	for _, d := range []int{64, 512} {
		decodeSettingMatches(t, fmt.Sprintf("batched scan step, d=%d", d), d, []int{2, 5, 8}, 0,
			func(e *gpu.Engine, on bool) { e.DecodeScanBatch = on })
	}
}

// decodeSettingMatches runs, from the same weights, tokens and prefill, four
// eager decode steps and a captured step graph on two engines, one with a
// setting off and one with it on (set), at each batch in Bs, f32 and bf16,
// and requires the same bits (tol 0), or logits and states within tol in
// relative error: logits and every layer's state.
func decodeSettingMatches(t *testing.T, setting string, d int, Bs []int, tol float64, set func(e *gpu.Engine, on bool)) {
	gputest.Need(t)
	cfg := fixture.Shape(d, 4, 500)
	w := fixture.RandomWeights(cfg, rand.Uint64())
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16} {
		off, on := newEngine(t, w, dt), newEngine(t, w, dt)
		set(off, false)
		set(on, true)
		for _, B := range Bs {
			ids := make([]int64, B*9)
			for i := range ids {
				ids[i] = rand.Int64N(int64(cfg.Vocab))
			}
			var states [2]engine.State
			var logits [2][]float32
			for i, e := range []*gpu.Engine{off, on} {
				st, err := e.NewState(B)
				if err != nil {
					t.Fatal(err)
				}
				if err := e.Prefill(st, engine.Input{B: B, T: 4, IDs: ids[:B*4]}, engine.Last, fixture.NaNs(B*cfg.Hidden)); err != nil {
					t.Fatal(err)
				}
				for s := 0; s < 4; s++ { // eager steps, then one graph replay
					logits[i] = fixture.NaNs(B * cfg.Vocab)
					if err := e.Step(st, ids[B*(4+s):B*(5+s)], logits[i]); err != nil {
						t.Fatal(err)
					}
				}
				g, err := e.CaptureStep(st)
				if err != nil {
					t.Fatal(err)
				}
				logits[i] = fixture.NaNs(B * cfg.Vocab)
				if err := g.Step(ids[B*8:], logits[i]); err != nil {
					t.Fatal(err)
				}
				g.Destroy()
				states[i] = st
			}
			if tol == 0 {
				for i := range logits[0] {
					if math.Float32bits(logits[0][i]) != math.Float32bits(logits[1][i]) {
						t.Fatalf("%s B=%d: logit %d is %v with %s, %v without", dt, B, i, logits[1][i], setting, logits[0][i])
					}
				}
			} else if e := fixture.RelErr(logits[1], logits[0]); e > tol || math.IsNaN(e) {
				t.Errorf("%s B=%d: logits differ with %s by %.3g, bar %g", dt, B, setting, e, tol)
			} else {
				t.Logf("%s B=%d: logits with %s within %.3g", dt, B, setting, e)
			}
			for l := 0; l < cfg.Layers; l++ {
				a, _ := states[0].SSMState(l)
				b, _ := states[1].SSMState(l)
				if e := fixture.RelErr(b, a); e > tol || math.IsNaN(e) {
					t.Errorf("%s B=%d: layer %d state differs with %s by %.3g", dt, B, l, setting, e)
				}
			}
		}
	}
}

// TestScanVariantsMatch checks the staged scan kernels (Engine.ScanStaged)
// and the one-pass scan at 2 and 4 states a thread (Engine.ScanOnePass),
// also walked in segments (Engine.ScanSegments) and with warps that
// specialize (Engine.ScanHelpers, sm_90: the plain walk's bits, also with
// dt_proj in the scan's tiles, Engine.ScanDTProj),
// against the plain chunked kernels in every dtype, through whole prefills
// of several chunks (and a second prefill continuing from the carried
// state). The staged kernels do the same arithmetic, so they agree exactly;
// the one-pass scan sums in another order, so it agrees to f32 rounding in
// f32, and in bf16 and f16 to the rounding of y to the storage type.
func TestScanVariantsMatch(t *testing.T) {
	gputest.Need(t)
	cfg := fixture.Shape(256, 2, 500)
	w := fixture.RandomWeights(cfg, rand.Uint64())
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16, cuda.F16} {
		ids := randomIDs(2*2*300, cfg.Vocab)
		ref := newEngine(t, w, dt)
		ref.ScanStaged, ref.ScanOnePass = false, -1
		refOut, refState := prefillTwice(t, ref, ids, 2, 300, cfg.Hidden, nil)
		var walkOut []float32 // the one-pass scan's at 2 states a thread, walked once
		for _, v := range []struct {
			name                    string
			staged, helpers, dtProj bool
			onePass, segments       int
		}{{"staged scan", true, false, false, -1, -1}, {"one-pass scan, 2 states a thread", false, false, false, 2, -1},
			{"one-pass scan, 2 states a thread, warps that specialize", false, true, false, 2, -1},
			{"one-pass scan, 2 states a thread, warps that specialize, dt_proj in its tiles", false, true, true, 2, -1},
			{"one-pass scan, 4 states a thread", false, false, false, 4, -1},
			{"one-pass scan, 2 states a thread in 4 segments", false, false, false, 2, 4}} {
			e := newEngine(t, w, dt) // (before sm_90 ScanHelpers changes nothing)
			e.ScanStaged, e.ScanOnePass, e.ScanSegments, e.ScanHelpers, e.ScanDTProj = v.staged, v.onePass, v.segments,
				v.helpers, v.dtProj
			out, state := prefillTwice(t, e, ids, 2, 300, cfg.Hidden, nil)
			switch {
			case v.onePass == 2 && v.segments < 0 && !v.helpers:
				walkOut = out
			case v.helpers && !slices.Equal(out, walkOut):
				t.Errorf("%s %s: hidden states differ from the plain walk's bits", dt, v.name)
			}
			bound := 1e-5
			switch {
			case v.staged:
				bound = 0
			case dt != cuda.F32:
				bound = 1e-2
			}
			if rel := fixture.RelErr(out, refOut); rel > bound {
				t.Errorf("%s %s: hidden states differ from the plain scan's by %.3g, bound %g", dt, v.name, rel, bound)
			}
			worst := 0.0
			for l := 0; l < cfg.Layers; l++ {
				a, _ := state.SSMState(l)
				b, _ := refState.SSMState(l)
				worst = math.Max(worst, normRel(a, b))
			}
			if worst > bound {
				t.Errorf("%s %s: carried state differs from the plain scan's by %.3g, bound %g", dt, v.name, worst, bound)
			}
			t.Logf("%s %s: carried state against the plain scan's %.2e (worst layer)", dt, v.name, worst)
		}
	}
}

// TestScanChunkResize changes Engine.ScanChunk between two prefills, the
// second at a chunk length that needs eight times the scan's scratch: the
// workspace must grow (compute-sanitizer's memcheck runs this test), and
// the f32 outputs match an engine that keeps the default chunk.
func TestScanChunkResize(t *testing.T) {
	gputest.Need(t)
	cfg := fixture.Shape(128, 2, 300)
	w := fixture.RandomWeights(cfg, rand.Uint64())
	ref, e := newEngine(t, w, cuda.F32), newEngine(t, w, cuda.F32)
	ids := randomIDs(2*2*300, cfg.Vocab)
	var states [2]engine.State
	var outs [2][]float32
	outs[0], states[0] = prefillTwice(t, ref, ids, 2, 300, cfg.Hidden, nil)
	outs[1], states[1] = prefillTwice(t, e, ids, 2, 300, cfg.Hidden, func(half int) { e.ScanChunk = []int{64, 8}[half] })
	if rel := fixture.RelErr(outs[1], outs[0]); rel > 1e-5 {
		t.Errorf("chunk 8 after chunk 64: hidden states differ from chunk 64's by %.3g", rel)
	}
	checkStates(t, "chunk 8 after chunk 64", states[1], states[0], cfg.Layers)
}

// randomIDs returns n token ids drawn uniformly from a vocabulary of vocab.
func randomIDs(n, vocab int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = rand.Int64N(int64(vocab))
	}
	return ids
}

// prefillTwice runs two prefills of B sequences of T positions on e, ids'
// first and second halves, the second continuing from the first's carried
// state; before(half), when set, runs before each. It returns the second
// prefill's hidden states at every position, and the state.
func prefillTwice(t *testing.T, e *gpu.Engine, ids []int64, B, T, hidden int, before func(half int)) ([]float32, engine.State) {
	t.Helper()
	st, err := e.NewState(B)
	if err != nil {
		t.Fatal(err)
	}
	var out []float32
	for half := 0; half < 2; half++ {
		if before != nil {
			before(half)
		}
		out = fixture.NaNs(B * T * hidden)
		if err := e.Prefill(st, engine.Input{B: B, T: T, IDs: ids[half*B*T : (half+1)*B*T]}, engine.All, out); err != nil {
			t.Fatal(err)
		}
	}
	return out, st
}
