package mambago_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestGenerateOnDevice checks generation on the CUDA engine's decoder
// (gpu.Decoder), eager and through a step graph, in f32 and bf16, with fresh
// prompts: greedy tokens, picked on the device, against the host's argmax of
// eager steps' logits, then with an EOS and a further eos id that stop
// rows early, the rows after them padded with EOS; sampled tokens (from the top 20, ranked on the
// device), the same with a graph as without (its logits are the same bits)
// and as the host's draws from whole rows, under the further warpers too;
// and tokens drawn from a nucleus
// on the device, the same with a graph as without. Generate queues its
// greedy and nucleus steps (gpu.Decoder's queue); taken one at a time
// (unqueued) they give the same tokens.
func TestGenerateOnDevice(t *testing.T) {
	gputest.Need(t)
	const B, T, n = 3, 5, 12
	for _, dtype := range []string{"float32", "bfloat16"} {
		m, err := mambago.Open(filepath.Join(fixture.Root(), "base"), mambago.Options{Device: "cuda", DType: dtype})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		g := m.Engine.(*gpu.Engine)
		ids := make([]int64, B*T)
		for i := range ids {
			ids[i] = rand.Int64N(int64(m.Config().Vocab))
		}
		flat, want := hostLoop(t, m, ids, B, T, n, 1), make([][]int64, B) // want[b]: row b's tokens
		for b := range want {
			want[b] = flat[b*n : (b+1)*n]
		}
		var sampled, topPTokens []int64
		for _, graphSteps := range []int{0, 1} {
			g.DecoderGraphSteps = graphSteps
			st, err := m.NewState(B)
			if err != nil {
				t.Fatal(err)
			}
			d, err := g.NewDecoder(st, n-1)
			if err != nil {
				t.Fatal(err)
			}
			if graphed := d.(*gpu.Decoder).Graphed(); graphed != (graphSteps == 1) {
				t.Errorf("%s: DecoderGraphSteps %d: graphed %v", dtype, graphSteps, graphed)
			}
			if err := errors.Join(d.Close(), st.(interface{ Free() error }).Free()); err != nil {
				t.Fatal(err)
			}
			got, gotN, err := m.Generate(ids, B, T, n, mambago.Sampling{TopP: 1, EOS: -1})
			if err != nil || gotN != n {
				t.Fatalf("%s, graph steps %d: n=%d err=%v", dtype, graphSteps, gotN, err)
			}
			for b := range B {
				if row := got[b*n : (b+1)*n]; !slices.Equal(row, want[b]) {
					t.Errorf("%s, graph steps %d, row %d: %v, want %v", dtype, graphSteps, b, row, want[b])
				}
			}
			// Row 1's fifth token as EOS and row 2's seventh as a further
			// id: each row stops at its first of them, padded with EOS.
			eos, more := want[1][4], want[2][6]
			got, gotN, err = m.Generate(ids, B, T, n, mambago.Sampling{TopP: 1, EOS: eos, MoreEOS: []int64{more}})
			if err != nil {
				t.Fatal(err)
			}
			wantN, rows := 0, make([][]int64, B)
			for b := range B {
				k := slices.IndexFunc(want[b], func(id int64) bool { return id == eos || id == more })
				if k < 0 {
					k, wantN = n-1, n
				}
				wantN = max(wantN, k+1)
				rows[b] = want[b][:k+1]
			}
			if gotN != wantN {
				t.Fatalf("%s, graph steps %d, EOS %d and %d: n=%d, want %d", dtype, graphSteps, eos, more, gotN, wantN)
			}
			for b := range B {
				row := append(slices.Clone(rows[b]), slices.Repeat([]int64{eos}, wantN-len(rows[b]))...)
				if g := got[b*wantN : (b+1)*wantN]; !slices.Equal(g, row) {
					t.Errorf("%s, graph steps %d, EOS %d and %d, row %d: %v, want %v", dtype, graphSteps, eos, more, b, g, row)
				}
			}
			s := mambago.Sampling{Temperature: 1.5, TopK: 20, TopP: 0.9, Seed: 11, EOS: -1}
			toks, _, err := m.Generate(ids, B, T, n, s)
			if err != nil {
				t.Fatal(err)
			}
			if sampled == nil {
				sampled = toks
			} else if !slices.Equal(toks, sampled) {
				t.Errorf("%s: sampled tokens with a step graph %v, without %v", dtype, toks, sampled)
			}
			// Top-p alone draws on the device: the same tokens with a graph as without.
			nucleusOnly := mambago.Sampling{Temperature: 0.9, TopP: 0.8, Seed: 12, EOS: -1}
			toksP, _, err := m.Generate(ids, B, T, n, nucleusOnly)
			if err != nil {
				t.Fatal(err)
			}
			if topPTokens == nil {
				topPTokens = toksP
			} else if !slices.Equal(toksP, topPTokens) {
				t.Errorf("%s: top-p tokens with a step graph %v, without %v", dtype, toksP, topPTokens)
			}
			// min_p = 1 leaves of a nucleus drawn on the device its best
			// token alone: greedy's tokens, and hostLoop's under a penalty.
			for _, penalty := range []float32{1, 1.4} {
				s := mambago.Sampling{Temperature: 1.3, TopP: 0.9, MinP: 1, Seed: 13, EOS: -1, RepetitionPenalty: float64(penalty)}
				if got, _, err := m.Generate(ids, B, T, n, s); err != nil {
					t.Fatal(err)
				} else if want := hostLoop(t, m, ids, B, T, n, penalty); !slices.Equal(got, want) {
					t.Errorf("%s, graph steps %d, top-p 0.9 with min_p 1, penalty %v: %v, want greedy's %v", dtype, graphSteps,
						penalty, got, want)
				}
			}
			// Greedy and top-p steps one at a time: the tokens of the queue.
			oneByOne := &mambago.Model{Engine: unqueued{Engine: g}}
			for _, c := range []struct {
				s    mambago.Sampling
				want []int64
			}{{mambago.Sampling{TopP: 1, EOS: -1}, flat}, {nucleusOnly, toksP}} {
				got, _, err := oneByOne.Generate(ids, B, T, n, c.s)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, c.want) {
					t.Errorf("%s, graph steps %d, %+v: one step at a time %v, queued %v", dtype, graphSteps, c.s, got, c.want)
				}
			}
			// Under a repetition penalty the queued greedy steps process
			// their logits on the device, and pick hostLoop's tokens.
			if got, _, err := m.Generate(ids, B, T, n, mambago.Sampling{TopP: 1, EOS: -1, RepetitionPenalty: 1.4}); err != nil {
				t.Fatal(err)
			} else if want := hostLoop(t, m, ids, B, T, n, 1.4); !slices.Equal(got, want) {
				t.Errorf("%s, graph steps %d, repetition penalty: %v, want %v", dtype, graphSteps, got, want)
			}
			// With MinNew, row 0's first greedy token as EOS is kept from
			// its first three tokens.
			if got, gotN, err := m.Generate(ids, B, T, n, mambago.Sampling{TopP: 1, EOS: want[0][0], MinNew: 3}); err != nil {
				t.Fatal(err)
			} else if slices.Contains(got[:3], want[0][0]) || gotN < 4 {
				t.Errorf("%s, graph steps %d, MinNew 3: row 0 %v (n=%d) ends at EOS %d early", dtype, graphSteps, got[:gotN], gotN, want[0][0])
			}
			// Under NoRepeatNGram 1 (processed on the device) no row takes a token
			// it holds.
			if got, gotN, err := m.Generate(ids, B, T, n, mambago.Sampling{TopP: 1, EOS: -1, NoRepeatNGram: 1}); err != nil {
				t.Fatal(err)
			} else {
				for b := range B {
					row := append(slices.Clone(ids[b*T:(b+1)*T]), got[b*gotN:(b+1)*gotN]...)
					if u := slices.Compact(slices.Sorted(slices.Values(row))); len(u) < len(slices.Compact(slices.Sorted(slices.Values(ids[b*T:(b+1)*T]))))+gotN {
						t.Errorf("%s, graph steps %d, NoRepeatNGram 1: row %d repeats a token: %v", dtype, graphSteps, b, row)
					}
				}
			}
			// The same draws from whole rows of logits on the host.
			host, _, err := (&mambago.Model{Engine: hostSampled{Engine: g}}).Generate(ids, B, T, n, s)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(toks, host) {
				t.Errorf("%s, graph steps %d: sampled tokens from the device's top-k %v, from whole rows %v", dtype, graphSteps, toks, host)
			}
			// Under the further warpers the host cuts the top-k ranked on
			// the device: whole rows' tokens.
			sw := mambago.Sampling{Temperature: 0.9, TopK: 30, TopP: 1, Seed: 14, EOS: -1,
				Warpers: mambago.Warpers{TypicalP: 0.7, EpsilonCutoff: 1e-3, EtaCutoff: 1e-2}}
			devW, _, err1 := m.Generate(ids, B, T, n, sw)
			hostW, _, err2 := (&mambago.Model{Engine: hostSampled{Engine: g}}).Generate(ids, B, T, n, sw)
			if err := errors.Join(err1, err2); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(devW, hostW) {
				t.Errorf("%s, graph steps %d, warpers: from the device's top-k %v, from whole rows %v", dtype, graphSteps, devW, hostW)
			}
			// Under a repetition penalty and a minimum length the queued
			// top-k draws process their logits on the device
			// (process_rows_f32): the host's draws from logits it
			// processed itself, token for token.
			sp := s
			sp.RepetitionPenalty, sp.MinNew, sp.EOS = 1.3, 4, want[1][2]
			devP, _, err := m.Generate(ids, B, T, n, sp)
			if err != nil {
				t.Fatal(err)
			}
			hostP, _, err := (&mambago.Model{Engine: hostSampled{Engine: g}}).Generate(ids, B, T, n, sp)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(devP, hostP) {
				t.Errorf("%s, graph steps %d, penalty and MinNew: sampled on the device %v, on the host %v", dtype, graphSteps, devP, hostP)
			}
		}
	}
}

// TestProcessorsOnDeviceMatchHost: under each logits processor alone and
// all together, with fresh prompts (and left-padded ones, and one-token
// prompts under a forced bos), the queued steps that process their logits
// on the device (process_rows_f32, counted through Process) take the
// host's tokens, the host drawing from whole rows of logits it processed
// itself: greedy, and sampled from the top 40 (the device's draw is the
// host's rule token for token), and under typical_p and eta_cutoff from
// the top 40 the steps rank on the device after processing them (TopK), in
// f32 and bf16, with a step graph and without. The settings: one-token and longer bans (one that greedy
// decoding completes), biases of one, two and three tokens with two that
// raise one token (their sum's order), suppressed and begin-suppressed ids,
// forced eos ids, a length decay, and with them the penalty and a minimum
// length.
func TestProcessorsOnDeviceMatchHost(t *testing.T) {
	gputest.Need(t)
	const B, T, n = 3, 6, 14
	for _, dtype := range []string{"float32", "bfloat16"} {
		r := newProcessingRig(t, dtype, B, T, n)
		g, counted, onDevice, onHost, ids := r.g, r.counted, r.onDevice, r.onHost, r.ids
		cases := processorCases(ids, r.free, T, n, r.V)
		for _, graphSteps := range []int{0, 1} {
			g.DecoderGraphSteps = graphSteps
			for name, c := range cases {
				for _, draw := range []mambago.Sampling{{TopP: 1}, {Temperature: 1.3, TopK: 40, TopP: 0.95, Seed: 7},
					{Temperature: 1.6, TopK: 60, TopP: 1, MinP: 0.08, Seed: 8},
					{Temperature: 1.1, TopK: 40, TopP: 1, Seed: 9, Warpers: mambago.Warpers{TypicalP: 0.6, EtaCutoff: 0.02}}} {
					s := c
					s.Temperature, s.TopK, s.TopP, s.MinP, s.Seed, s.Warpers = draw.Temperature, draw.TopK, draw.TopP, draw.MinP,
						draw.Seed, draw.Warpers
					what := fmt.Sprintf("%s, graph steps %d, %s, temperature %v, min_p %v, %+v", dtype, graphSteps, name, s.Temperature,
						s.MinP, s.Warpers)
					compare := func(what string, ids []int64, B, T int, spans []mambago.Span, s mambago.Sampling) {
						t.Helper()
						before := counted.n
						got, gotN, errG := onDevice.GenerateSpans(context.Background(), ids, B, T, spans, n, s)
						want, wantN, errW := onHost.GenerateSpans(context.Background(), ids, B, T, spans, n, s)
						if err := errors.Join(errG, errW); err != nil {
							t.Fatalf("%s: %v", what, err)
						}
						if counted.n != before+1 {
							t.Errorf("%s: the device processed %d generations' logits, want 1", what, counted.n-before)
						}
						if gotN != wantN || !slices.Equal(got, want) {
							t.Errorf("%s: on the device %v (n=%d), on the host %v (n=%d)", what, got, gotN, want, wantN)
						}
					}
					compare(what, ids, B, T, nil, s)
					compare(what+", left-padded", ids, B, T, processorSpans(T), s)
				}
			}
			// A one-token prompt under a forced bos: the begin-suppressed ids
			// wait for the second token, the device's first step.
			s := forcedBOS(t, onHost, ids[:B], n)
			before := counted.n
			got, _, errG := onDevice.Generate(ids[:B], B, 1, n, s)
			want, _, errW := onHost.Generate(ids[:B], B, 1, n, s)
			if err := errors.Join(errG, errW); err != nil || counted.n != before+1 || !slices.Equal(got, want) {
				t.Errorf("%s, graph steps %d, forced bos: on the device %v, on the host %v (err %v, processed %d)",
					dtype, graphSteps, got, want, err, counted.n-before)
			}
		}
	}
}

// TestBeamProcessorsOnDeviceMatchHost: beam search under each logits
// processor alone and all together (processorCases), its rows' log
// probabilities processed and ranked on the device
// (engine.BeamProcessingDecoder, counted through Process), finds the beams
// that the search over whole rows of logits processed on the host finds:
// the same tokens and indices, scores within 1e-5, in f32 and bf16, with a
// step graph and without, renormalized and not, for fresh, left-padded and
// one-token prompts under a forced bos.
func TestBeamProcessorsOnDeviceMatchHost(t *testing.T) {
	gputest.Need(t)
	const B, T, n = 3, 6, 14
	for _, dtype := range []string{"float32", "bfloat16"} {
		r := newProcessingRig(t, dtype, B, T, n)
		for _, graphSteps := range []int{0, 1} {
			r.g.DecoderGraphSteps = graphSteps
			compare := func(what string, ids []int64, B, T int, spans []mambago.Span, s mambago.Sampling) {
				t.Helper()
				for _, renorm := range []bool{false, true} {
					what := fmt.Sprintf("%s, graph steps %d, %s, renormalize %v", dtype, graphSteps, what, renorm)
					bm := beamsUnder(s, renorm)
					before := r.counted.n
					got, errG := r.onDevice.BeamSearch(context.Background(), ids, B, T, spans, n, bm)
					want, errW := r.onHost.BeamSearch(context.Background(), ids, B, T, spans, n, bm)
					if err := errors.Join(errG, errW); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					if r.counted.n != before+1 {
						t.Errorf("%s: the device processed %d searches' log probabilities, want 1", what, r.counted.n-before)
					}
					sameBeams(t, what+": on the device, then on the host", got, want)
				}
			}
			for name, c := range processorCases(r.ids, r.free, T, n, r.V) {
				compare(name, r.ids, B, T, nil, c)
				compare(name+", left-padded", r.ids, B, T, processorSpans(T), c)
			}
			compare("forced bos", r.ids[:B], B, 1, nil, forcedBOS(t, r.onHost, r.ids[:B], n))
		}
	}
}

// TestBeamSamplingOnDeviceMatchHost: beam sampling with a top_k
// (beamSamplings), under no logits processor, each alone and all together
// (processorCases), takes each row's top_k candidates ranked on the device
// (engine.BeamDecoder, or engine.BeamProcessingDecoder after processing
// them, counted through Process) and draws the beams that the draw over
// whole rows of logits on the host draws from the same seed: the same
// tokens and indices, scores within 1e-5, in f32 and bf16, with a step
// graph and without, renormalized and not.
func TestBeamSamplingOnDeviceMatchHost(t *testing.T) {
	gputest.Need(t)
	const B, T, n = 3, 6, 14
	for _, dtype := range []string{"float32", "bfloat16"} {
		r := newProcessingRig(t, dtype, B, T, n)
		cases := processorCases(r.ids, r.free, T, n, r.V)
		cases["none"] = mambago.Sampling{EOS: r.free[3]}
		for _, graphSteps := range []int{0, 1} {
			r.g.DecoderGraphSteps = graphSteps
			for name, c := range cases {
				for i, ws := range beamSamplings {
					renorm := i%2 == 1
					what := fmt.Sprintf("%s, graph steps %d, %s, %+v, renormalize %v", dtype, graphSteps, name, ws, renorm)
					bm := beamsUnder(c, renorm)
					bm.Sample = ws
					bm.Sample.Seed = uint64(i + graphSteps)
					before := r.counted.n
					got, errG := r.onDevice.BeamSearch(context.Background(), r.ids, B, T, nil, n, bm)
					want, errW := r.onHost.BeamSearch(context.Background(), r.ids, B, T, nil, n, bm)
					if err := errors.Join(errG, errW); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					processes := 1
					if name == "none" {
						processes = 0
					}
					if r.counted.n != before+processes {
						t.Errorf("%s: the device processed %d searches' log probabilities, want %d", what, r.counted.n-before, processes)
					}
					sameBeams(t, what+": ranked on the device, then whole rows on the host", got, want)
				}
			}
		}
	}
}

// processingRig is the CUDA engine of one dtype (g; its DecoderGraphSteps
// restored by the test's cleanup) twice over: with its decoders' Process
// calls counted (onDevice, through counted), and with every step's logits
// brought to the host (onHost); and B·T fresh prompt ids of a vocabulary
// of V, which greedy decoding continues with free [B, n].
type processingRig struct {
	g                *gpu.Engine
	counted          *countingProcess
	onDevice, onHost *mambago.Model
	V                int64
	ids, free        []int64
}

// newProcessingRig returns the rig of dtype for prompts [B, T] and n new tokens.
func newProcessingRig(t *testing.T, dtype string, B, T, n int) processingRig {
	t.Helper()
	m := openCUDA(t, dtype)
	g := m.Engine.(*gpu.Engine)
	steps := g.DecoderGraphSteps
	t.Cleanup(func() { g.DecoderGraphSteps = steps })
	r := processingRig{g: g, counted: &countingProcess{Engine: g}, V: int64(m.Config().Vocab), ids: randomIDs(m, B*T)}
	r.onDevice, r.onHost = &mambago.Model{Engine: r.counted}, &mambago.Model{Engine: hostSampled{Engine: g}}
	var err error
	if r.free, _, err = m.Generate(r.ids, B, T, n, mambago.Sampling{TopP: 1, EOS: -1}); err != nil {
		t.Fatal(err)
	}
	return r
}

// countingProcess is the CUDA engine with its decoders' Process calls
// counted (n).
type countingProcess struct {
	*gpu.Engine
	n int
}

// NewDecoder wraps the engine's decoder, every method its own but Process.
func (e *countingProcess) NewDecoder(st engine.State, steps int) (engine.Decoder, error) {
	d, err := e.Engine.NewDecoder(st, steps)
	if err != nil {
		return nil, err
	}
	return &countedDecoder{Decoder: d.(*gpu.Decoder), n: &e.n}, nil
}

// countedDecoder counts its Process calls in *n.
type countedDecoder struct {
	*gpu.Decoder
	n *int
}

// Process counts the call, then processes.
func (d *countedDecoder) Process(p engine.Processing) error {
	*d.n++
	return d.Decoder.Process(p)
}

// TestDecoderQueue checks the decoder's queue, eager and through a step
// graph, on the decode kernels and on the prefill path at T = 1, in f32
// and bf16, against a twin state stepped by Engine.Step on
// the same ids: two steps queued at a time, the first fed the host's ids
// and the second the first's picks on the device, greedy steps picking the
// host's argmax of the twin's logits, nucleus steps a token of each row's
// nucleus (row 0 draws 0: its first by id). Logits between them feeds the
// host's ids, so the next step needs ids again. Misuse is an input error:
// a step fed no ids with no picks to feed it, a third step queued, Picks
// with none queued, Greedy with steps queued, a closed decoder. Close with
// steps queued waits for them.
func TestDecoderQueue(t *testing.T) {
	gputest.Need(t)
	const B, T, rounds = 3, 6, 8
	for _, dtype := range []string{"float32", "bfloat16"} {
		m := openCUDA(t, dtype)
		g, V := m.Engine.(*gpu.Engine), m.Config().Vocab
		random := func() []int64 {
			ids := make([]int64, B)
			for b := range ids {
				ids[b] = rand.Int64N(int64(V))
			}
			return ids
		}
		prompt := make([]int64, B*T)
		for i := range prompt {
			prompt[i] = rand.Int64N(int64(V))
		}
		// The decode kernels, then the prefill path at T = 1 (a batch over
		// their limit takes it), each eager and graphed.
		for _, c := range []struct{ graphSteps, kernelMaxB int }{{0, 0}, {1, 0}, {0, -1}, {1, -1}} {
			graphSteps := c.graphSteps
			g.DecoderGraphSteps, g.DecodeKernelMaxB = graphSteps, c.kernelMaxB
			states := twins(t, m, prompt, B, T)
			d, err := g.NewDecoder(states[0], 32)
			if err != nil {
				t.Fatal(err)
			}
			q, ok := d.(engine.QueueDecoder)
			if !ok {
				t.Fatalf("%T is not an engine.QueueDecoder", d)
			}
			if err := q.QueueGreedy(nil); !engine.IsInvalid(err) {
				t.Errorf("a step fed no ids first: err = %v, want an input error", err)
			}
			if err := q.Picks(make([]int64, B)); !engine.IsInvalid(err) {
				t.Errorf("Picks with no step queued: err = %v, want an input error", err)
			}
			want := make([]float32, B*V)
			fed := random()
			for round := range rounds {
				where := fmt.Sprintf("%s, graph steps %d, decode kernels' B limit %d, round %d", dtype, graphSteps, c.kernelMaxB, round)
				nucleus := round%2 == 1
				temp, p, u := 0.9, 0.8, []float64{0, rand.Float64(), rand.Float64()}
				minP := []float64{0, 0.2}[round/2%2]
				queue := func(ids []int64) error {
					if nucleus {
						return q.QueueTopP(ids, temp, p, minP, u)
					}
					return q.QueueGreedy(ids)
				}
				if err := queue(fed); err != nil {
					t.Fatal(err)
				}
				if err := queue(nil); err != nil {
					t.Fatal(err)
				}
				if round == 0 {
					if err := queue(nil); !engine.IsInvalid(err) {
						t.Errorf("a third step queued: err = %v, want an input error", err)
					}
					if err := d.Greedy(fed, make([]int64, B)); !engine.IsInvalid(err) {
						t.Errorf("Greedy with steps queued: err = %v, want an input error", err)
					}
				}
				for k := range 2 {
					picks := slices.Repeat([]int64{-7}, B)
					if err := q.Picks(picks); err != nil {
						t.Fatal(err)
					}
					if err := m.Step(states[1], fed, want); err != nil {
						t.Fatal(err)
					}
					for b, id := range picks {
						row := want[b*V : (b+1)*V]
						if !nucleus && id != fixture.Argmax(row) {
							t.Fatalf("%s, step %d: row %d picked %d, the twin's argmax %d", where, k, b, id, fixture.Argmax(row))
						}
						if ids := nucleusIDs(row, temp, p, minP); nucleus && (!slices.Contains(ids, id) || b == 0 && id != slices.Min(ids)) {
							t.Fatalf("%s, step %d: row %d (u %.3f) drew %d; the nucleus (min_p %v): %v", where, k, b, u[b], id, minP,
								ids[:min(len(ids), 10)])
						}
					}
					fed = picks
				}
				if round%2 == 0 {
					continue
				}
				got, err := d.Logits(fed)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Step(states[1], fed, want); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s: Logits after the queue: logit %d = %v, Step's %v", where, i, got[i], want[i])
					}
				}
				if err := q.QueueGreedy(nil); !engine.IsInvalid(err) {
					t.Errorf("%s: a step fed no ids after Logits: err = %v, want an input error", where, err)
				}
				fed = random()
			}
			if err := errors.Join(q.QueueGreedy(fed), q.QueueGreedy(nil), d.Close()); err != nil {
				t.Fatalf("Close with two steps queued: %v", err)
			}
			if err := q.QueueGreedy(fed); !engine.IsInvalid(err) {
				t.Errorf("a closed decoder's QueueGreedy: err = %v, want an input error", err)
			}
			if err := q.Picks(make([]int64, B)); !engine.IsInvalid(err) {
				t.Errorf("a closed decoder's Picks: err = %v, want an input error", err)
			}
		}
	}
}

// TestDecoderLogits checks the decoder's Logits, TopK and TopP, eager and
// through a step graph, in f32 and bf16, in turns, against Engine.Step on a
// twin state: Logits the same bits, with the previous step's slice poisoned
// with NaN before each call; TopK (k = 1, 50, V) each row's k best-ranked
// ids (the lower id first among equal logits), with those ids' logits; TopP
// a token of each row's nucleus, for a draw of 0 its first by id (eager on
// one block a row, graphed on a cluster where Engine.TopPClusters is on by
// default). Bad ids,
// a k, temperature, p or draw out of range and a closed decoder are input
// errors.
func TestDecoderLogits(t *testing.T) {
	gputest.Need(t)
	const B, T, steps = 3, 6, 12
	for _, dtype := range []string{"float32", "bfloat16"} {
		m := openCUDA(t, dtype)
		g, V := m.Engine.(*gpu.Engine), m.Config().Vocab
		clusters := g.TopPClusters // the default: on sm_90a
		ids := make([]int64, B*T)
		for i := range ids {
			ids[i] = rand.Int64N(int64(V))
		}
		for _, graphSteps := range []int{0, 1} {
			g.DecoderGraphSteps = graphSteps
			g.TopPClusters = clusters && graphSteps == 1 // TopP's kernel of one block a row eager, of a cluster graphed
			states := twins(t, m, ids, B, T)
			d, err := g.NewDecoder(states[0], steps)
			if err != nil {
				t.Fatal(err)
			}
			td, ok := d.(engine.TopKDecoder)
			if !ok {
				t.Fatalf("%T is not an engine.TopKDecoder", d)
			}
			pd, ok := d.(engine.TopPDecoder)
			if !ok {
				t.Fatalf("%T is not an engine.TopPDecoder", d)
			}
			want := make([]float32, B*V)
			var got []float32
			var gotIDs []int32
			for step := range steps {
				next := make([]int64, B)
				for b := range next {
					next[b] = rand.Int64N(int64(V))
				}
				if err := m.Step(states[1], next, want); err != nil {
					t.Fatal(err)
				}
				where := fmt.Sprintf("%s, graph steps %d, step %d", dtype, graphSteps, step)
				if step%3 == 2 {
					// Row 0 draws u = 0: the nucleus's first token by id.
					temp, topP := []float64{1, 0.7}[step/3%2], []float64{0.9, 0.5}[step/3%2]
					minP := []float64{0, 0, 0.3, 0.05}[step/3%4]
					u := []float64{0, rand.Float64(), rand.Float64()}
					drawn := slices.Repeat([]int64{-7}, B)
					if err := pd.TopP(next, temp, topP, minP, u, drawn); err != nil {
						t.Fatal(err)
					}
					for b := range B {
						nucleus := nucleusIDs(want[b*V:(b+1)*V], temp, topP, minP)
						if !slices.Contains(nucleus, drawn[b]) || (b == 0 && drawn[b] != slices.Min(nucleus)) {
							t.Fatalf("%s: row %d (u %.3f) drew %d; the nucleus of T=%v p=%v min_p=%v: %v", where, b, u[b], drawn[b],
								temp, topP, minP, nucleus[:min(len(nucleus), 10)])
						}
					}
					continue
				}
				if step%3 == 0 {
					for i := range got {
						got[i] = float32(math.NaN())
					}
					if got, err = d.Logits(next); err != nil {
						t.Fatal(err)
					}
					if len(got) != B*V {
						t.Fatalf("%s: %d logits, want %d", where, len(got), B*V)
					}
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s: logit %d = %v, Step's %v", where, i, got[i], want[i])
						}
					}
					continue
				}
				k := []int{1, 50, V}[step/3%3]
				for i := range gotIDs {
					gotIDs[i] = -7
				}
				var vals []float32
				if gotIDs, vals, err = td.TopK(next, k); err != nil {
					t.Fatal(err)
				}
				if len(gotIDs) != B*k || len(vals) != B*k {
					t.Fatalf("%s: top-%d gave %d ids and %d logits, want %d", where, k, len(gotIDs), len(vals), B*k)
				}
				for b := range B {
					row, ids := want[b*V:(b+1)*V], gotIDs[b*k:(b+1)*k]
					for n, id := range ids {
						if id < 0 || int(id) >= V || math.Float32bits(vals[b*k+n]) != math.Float32bits(row[id]) {
							t.Fatalf("%s: row %d's top-%d candidate %d: id %d, logit %v", where, b, k, n, id, vals[b*k+n])
						}
					}
					if got, want := slices.Sorted(slices.Values(ids)), rankedIDs(row, k); !slices.Equal(got, want) {
						t.Fatalf("%s: row %d's top-%d %v, want %v", where, b, k, got[:min(k, 10)], want[:min(k, 10)])
					}
				}
			}
			if _, _, err := td.TopK(make([]int64, B), 0); !engine.IsInvalid(err) {
				t.Errorf("top-0: err = %v, want an input error", err)
			}
			if _, _, err := td.TopK(make([]int64, B), V+1); !engine.IsInvalid(err) {
				t.Errorf("top-%d of %d: err = %v, want an input error", V+1, V, err)
			}
			for _, bad := range []struct {
				temp, p, minP float64
				u             []float64
			}{{0, 0.9, 0, []float64{0, 0, 0}}, {1, 0, 0, []float64{0, 0, 0}}, {1, 1.5, 0, []float64{0, 0, 0}},
				{1, 0.9, 0, []float64{0, 1, 0}}, {1, 0.9, 0, []float64{0, 0}}, {1, 0.9, -0.1, []float64{0, 0, 0}},
				{1, 0.9, 1.5, []float64{0, 0, 0}}, {1, 0.9, math.NaN(), []float64{0, 0, 0}}} {
				if err := pd.TopP(make([]int64, B), bad.temp, bad.p, bad.minP, bad.u, make([]int64, B)); !engine.IsInvalid(err) {
					t.Errorf("TopP(T=%v, p=%v, min_p=%v, u=%v): err = %v, want an input error", bad.temp, bad.p, bad.minP, bad.u, err)
				}
			}
			if _, err := d.Logits(make([]int64, B+1)); !engine.IsInvalid(err) {
				t.Errorf("%d ids for B=%d: err = %v, want an input error", B+1, B, err)
			}
			if _, err := d.Logits([]int64{0, int64(V), 0}); !engine.IsInvalid(err) {
				t.Errorf("an id past the vocabulary: err = %v, want an input error", err)
			}
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Logits(make([]int64, B)); !engine.IsInvalid(err) {
				t.Errorf("a closed decoder: err = %v, want an input error", err)
			}
			if _, _, err := td.TopK(make([]int64, B), 1); !engine.IsInvalid(err) {
				t.Errorf("a closed decoder's TopK: err = %v, want an input error", err)
			}
			if err := pd.TopP(make([]int64, B), 1, 0.9, 0, make([]float64, B), make([]int64, B)); !engine.IsInvalid(err) {
				t.Errorf("a closed decoder's TopP: err = %v, want an input error", err)
			}
		}
	}
}

// BenchmarkGenerate times a token of generation on the CUDA engine (bf16,
// random weights, prompts of 16 tokens) several ways in turn, in one
// process. Greedy: "host", the loop Generate ran before the device pick
// (eager steps, every row's logits copied to the host and its argmax taken
// there), and Generate with the device pick, stepping eagerly ("device") or
// through a step graph ("device+graph"), one step queued ahead of the host,
// or one step at a time ("+unqueued"). Sampled (temperature 0.8, top-k
// 50): Generate stepping eagerly ("sampled") or through a step graph
// ("sampled+graph"), drawn from the k best on the device (QueueTopK),
// or the candidates ranked on the device and drawn on the host one step at
// a time ("+candidates": TopK, the path before QueueTopK); then
// through the graph but drawn on the host from whole rows of logits, copied
// into the decoder's page-locked buffer ("+host") or into pageable memory
// as before it ("+pageable"). Top-p (temperature 0.8, the nucleus of 0.95 of
// all tokens) through the graph, drawn on the device ("top-p+graph"; on
// sm_90a a cluster of blocks a row, Engine.TopPClusters; "+block": one
// block a row, the same tokens; "+unqueued": one step at a time), or on
// the host from logits page-locked ("+host") or pageable ("+pageable"):
// other tokens than the device's, at the same odds. A token's time is (t(129) - t(1)) /
// 128 of wall time, so the prefill and the first token cancel; the medians
// of 7 rounds.
func BenchmarkGenerate(b *testing.B) {
	gputest.Need(b)
	const prompt, n, rounds = 16, 129, 7
	eachBenchShape(b, func(shape string, m *mambago.Model, g *gpu.Engine) {
		clusters := g.TopPClusters
		for _, B := range []int{1, 8} {
			ids := make([]int64, B*prompt)
			for i := range ids {
				ids[i] = rand.Int64N(50280)
			}
			greedy := mambago.Sampling{TopP: 1, EOS: -1}
			sampled := mambago.Sampling{Temperature: 0.8, TopK: 50, TopP: 1, Seed: 5, EOS: -1}
			topP := mambago.Sampling{Temperature: 0.8, TopP: 0.95, Seed: 6, EOS: -1}
			run := func(graphSteps int, topPClusters bool, s mambago.Sampling) func(int) []int64 {
				return func(n int) []int64 {
					g.DecoderGraphSteps, g.TopPClusters = graphSteps, topPClusters
					return generate(b, m, ids, B, prompt, n, s)
				}
			}
			oneByOne := func(s mambago.Sampling) func(int) []int64 {
				wrapped := &mambago.Model{Engine: unqueued{Engine: g}}
				return func(n int) []int64 {
					g.DecoderGraphSteps, g.TopPClusters = 32, clusters
					return generate(b, wrapped, ids, B, prompt, n, s)
				}
			}
			onHost := func(pageable bool, s mambago.Sampling) func(int) []int64 {
				wrapped := &mambago.Model{Engine: hostSampled{Engine: g, pageable: pageable}}
				return func(n int) []int64 { g.DecoderGraphSteps = 32; return generate(b, wrapped, ids, B, prompt, n, s) }
			}
			variants := []struct {
				name, group string // a group's variants give the same tokens
				run         func(n int) []int64
			}{
				{"host", "greedy", func(n int) []int64 { return hostLoop(b, m, ids, B, prompt, n, 1) }},
				{"device", "greedy", run(0, clusters, greedy)},
				{"device+graph", "greedy", run(32, clusters, greedy)},
				{"device+graph+unqueued", "greedy", oneByOne(greedy)},
				{"sampled", "sampled", run(0, clusters, sampled)},
				{"sampled+graph", "sampled", run(32, clusters, sampled)},
				{"sampled+graph+candidates", "sampled", func(n int) []int64 {
					g.DecoderGraphSteps = 32
					return generate(b, &mambago.Model{Engine: candidatesOnHost{Engine: g}}, ids, B, prompt, n, sampled)
				}},
				{"sampled+graph+host", "sampled", onHost(false, sampled)},
				{"sampled+graph+pageable", "sampled", onHost(true, sampled)},
				{"top-p+graph", "top-p", run(32, clusters, topP)},
				{"top-p+graph+block", "top-p", run(32, false, topP)},
				{"top-p+graph+unqueued", "top-p", oneByOne(topP)},
				{"top-p+graph+host", "top-p-host", onHost(false, topP)},
				{"top-p+graph+pageable", "top-p-host", onHost(true, topP)},
			}
			times := make([][]float64, len(variants))
			first := map[string][]int64{}
			for r := range rounds + 1 { // round 0 warms up
				for v, x := range variants {
					t0 := time.Now()
					x.run(1)
					t1 := time.Now()
					toks := x.run(n)
					t2 := time.Now()
					if first[x.group] == nil {
						first[x.group] = toks
					} else if !slices.Equal(toks, first[x.group]) {
						b.Fatalf("%s B=%d: %s gave other tokens than the rest of its group", shape, B, x.name)
					}
					if r > 0 {
						times[v] = append(times[v], (t2.Sub(t1)-t1.Sub(t0)).Seconds()/(n-1)*1e6)
					}
				}
			}
			base := fixture.Median(times[0])
			for v, x := range variants {
				us := fixture.Median(times[v])
				b.Logf("%s B=%d %-22s %7.1f µs a token (%.2fx of host)", shape, B, x.name, us, base/us)
				b.ReportMetric(us, shape+"/B"+strconv.Itoa(B)+"/"+x.name+"-µs/token")
			}
		}
	})
}

// BenchmarkGenerateShort times repeated Generate calls of 20 new tokens
// (transformers' default) on a 16-token prompt, bf16, greedy and top-k 50:
// each call's steps eager (DecoderGraphSteps 0: how such calls ran while a
// decoder captured only for 32 steps of its own), or replaying the step
// graph the state keeps (DecoderGraphSteps 32, summed over the calls: the
// second call captures). Wall time a call, prefill included; medians of 9
// rounds, the two settings in turns, the same tokens.
func BenchmarkGenerateShort(b *testing.B) {
	gputest.Need(b)
	const prompt, n, rounds = 16, 20, 9
	eachBenchShape(b, func(shape string, m *mambago.Model, g *gpu.Engine) {
		for _, B := range []int{1, 8} {
			ids := make([]int64, B*prompt)
			for i := range ids {
				ids[i] = rand.Int64N(50280)
			}
			for _, s := range []struct {
				name string
				s    mambago.Sampling
			}{{"greedy", mambago.Sampling{TopP: 1, EOS: -1}}, {"top-k 50", mambago.Sampling{Temperature: 0.8, TopK: 50, TopP: 1, Seed: 3, EOS: -1}}} {
				times := [2][]float64{}
				var first []int64
				for r := range rounds + 1 { // round 0 warms up (and captures)
					for v, graphSteps := range []int{0, 32} {
						g.DecoderGraphSteps = graphSteps
						t0 := time.Now()
						toks := generate(b, m, ids, B, prompt, n, s.s)
						if r > 0 {
							times[v] = append(times[v], time.Since(t0).Seconds()*1e6)
						}
						if first == nil {
							first = toks
						} else if !slices.Equal(toks, first) {
							b.Fatalf("%s B=%d %s: DecoderGraphSteps %d gave other tokens", shape, B, s.name, graphSteps)
						}
					}
				}
				eager, graphed := fixture.Median(times[0]), fixture.Median(times[1])
				b.Logf("%s B=%d %-8s a call of %d tokens: eager %7.1f µs, kept graph %7.1f µs (%.3fx)", shape, B, s.name, n,
					eager, graphed, eager/graphed)
				b.ReportMetric(graphed, shape+"/B"+strconv.Itoa(B)+"/"+strings.ReplaceAll(s.name, " ", "")+"-µs/call")
			}
		}
	})
}

// eachBenchShape runs f on a model of random weights of the 130m and the
// 1.4b shape in turn (vocabulary 50280), bf16 on the CUDA engine, closed
// after.
func eachBenchShape(b *testing.B, f func(shape string, m *mambago.Model, g *gpu.Engine)) {
	for _, sh := range []struct {
		name      string
		d, layers int
	}{{"130m", 768, 24}, {"1.4b", 2048, 48}} {
		m, err := mambago.OpenWeights(fixture.RandomWeights(fixture.Shape(sh.d, sh.layers, 50280), 1),
			mambago.Options{Device: "cuda", DType: "bfloat16"})
		if err != nil {
			b.Fatal(err)
		}
		f(sh.name, m, m.Engine.(*gpu.Engine))
		m.Close()
	}
}

// openCUDA opens the base fixture on the CUDA engine in dtype, closed by
// the test's cleanup.
func openCUDA(t *testing.T, dtype string) *mambago.Model {
	t.Helper()
	m, err := mambago.Open(filepath.Join(fixture.Root(), "base"), mambago.Options{Device: "cuda", DType: dtype})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// twins returns two states of m, each prefilled with prompt [B, T] and
// freed by the test's cleanup: one for a decoder, one for Engine.Step.
func twins(t *testing.T, m *mambago.Model, prompt []int64, B, T int) []engine.State {
	t.Helper()
	states := make([]engine.State, 2)
	for i := range states {
		st, err := m.NewState(B)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.(interface{ Free() error }).Free() })
		if err := m.Prefill(st, engine.Input{B: B, T: T, IDs: prompt}, engine.Last, make([]float32, B*m.Config().Hidden)); err != nil {
			t.Fatal(err)
		}
		states[i] = st
	}
	return states
}

// unqueued is the CUDA engine whose decoders hide their queue (and TopK):
// Generate takes its greedy and nucleus steps one at a time, waiting for
// each step's picks before it feeds the next, as before the queue.
type unqueued struct{ *gpu.Engine }

// NewDecoder wraps the engine's decoder.
func (e unqueued) NewDecoder(st engine.State, steps int) (engine.Decoder, error) {
	d, err := e.Engine.NewDecoder(st, steps)
	if err != nil {
		return nil, err
	}
	return oneAtATime{d.(engine.TopPDecoder)}, nil
}

// oneAtATime embeds the interface, not *gpu.Decoder: no queue.
type oneAtATime struct{ engine.TopPDecoder }

// candidatesOnHost is the CUDA engine whose decoders rank the top-k
// candidates on the device but leave the draw from them to the host, one
// step at a time (TopK, not QueueTopK), as Generate ran before the queued
// draw from the k best.
type candidatesOnHost struct{ *gpu.Engine }

// NewDecoder wraps the engine's decoder.
func (e candidatesOnHost) NewDecoder(st engine.State, steps int) (engine.Decoder, error) {
	d, err := e.Engine.NewDecoder(st, steps)
	if err != nil {
		return nil, err
	}
	return topKOnly{d.(engine.TopKDecoder)}, nil
}

// topKOnly embeds the interface, not *gpu.Decoder: TopK, no queue.
type topKOnly struct{ engine.TopKDecoder }

// hostSampled is the CUDA engine whose decoders leave sampling to the host:
// they hide their TopK and TopP, so that Generate draws from whole rows of
// logits, and with pageable set they copy those into pageable memory
// (Decoder.Step into a Go slice), as Generate ran before the page-locked
// buffer.
type hostSampled struct {
	*gpu.Engine
	pageable bool
}

// NewDecoder wraps the engine's decoder.
func (e hostSampled) NewDecoder(st engine.State, steps int) (engine.Decoder, error) {
	d, err := e.Engine.NewDecoder(st, steps)
	if err != nil {
		return nil, err
	}
	h := &hostDecoder{Decoder: d}
	if e.pageable {
		h.step, h.vocab = d.(*gpu.Decoder).Step, e.Config().Vocab
	}
	return h, nil
}

// hostDecoder embeds the interface, not *gpu.Decoder: no TopK or TopP.
type hostDecoder struct {
	engine.Decoder
	step   func(ids []int64, logits []float32) error // nil: the decoder's own Logits
	vocab  int
	logits []float32
}

func (d *hostDecoder) Logits(ids []int64) ([]float32, error) {
	if d.step == nil {
		return d.Decoder.Logits(ids)
	}
	if d.logits == nil {
		d.logits = make([]float32, len(ids)*d.vocab)
	}
	return d.logits, d.step(ids, d.logits)
}

// nucleusIDs returns the ids of row's nucleus (nucleusOf), best first.
func nucleusIDs(row []float32, temp, topP, minP float64) []int64 {
	ids, _ := nucleusOf(row, temp, topP, minP)
	out := make([]int64, len(ids))
	for n, id := range ids {
		out[n] = int64(id)
	}
	return out
}

// rankedIDs returns the k best-ranked ids of row (rankIDs), sorted by id.
func rankedIDs(row []float32, k int) []int32 {
	out := make([]int32, k)
	for n, id := range rankIDs(row)[:k] {
		out[n] = int32(id)
	}
	return slices.Sorted(slices.Values(out))
}

// hostLoop is greedy generation as Generate ran it before the device pick,
// [B, n] tokens: eager steps, the logits copied to the host, the argmax
// taken there, after the logits of each row's tokens so far (its prompt's
// and those generated) are scaled by penalty as transformers' repetition
// penalty scales them.
func hostLoop(tb testing.TB, m *mambago.Model, ids []int64, B, T, n int, penalty float32) []int64 {
	V := m.Config().Vocab
	st, err := m.NewState(B)
	if err != nil {
		tb.Fatal(err)
	}
	if f, ok := st.(interface{ Free() error }); ok { // a CUDA state's memory
		defer f.Free()
	}
	hidden, logits := make([]float32, B*m.Config().Hidden), make([]float32, B*V)
	if err := m.Prefill(st, engine.Input{B: B, T: T, IDs: ids}, engine.Last, hidden); err != nil {
		tb.Fatal(err)
	}
	if err := m.Logits(hidden, B, logits); err != nil {
		tb.Fatal(err)
	}
	seen := make([]map[int64]bool, B) // each row's tokens so far, for the penalty
	for r := range seen {
		seen[r] = map[int64]bool{}
		for _, id := range ids[r*T : (r+1)*T] {
			seen[r][id] = true
		}
	}
	out, next := make([]int64, B*n), make([]int64, B)
	for k := range n {
		for r := range B {
			row := logits[r*V : (r+1)*V]
			for id := range seen[r] {
				if row[id] < 0 { // transformers' repetition penalty; 1 leaves the row as it is
					row[id] *= penalty
				} else {
					row[id] /= penalty
				}
			}
			next[r] = fixture.Argmax(row)
			seen[r][next[r]] = true
			out[r*n+k] = next[r]
		}
		if k < n-1 {
			if err := m.Step(st, next, logits); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return out
}

func generate(b *testing.B, m *mambago.Model, ids []int64, B, T, n int, s mambago.Sampling) []int64 {
	out, got, err := m.Generate(ids, B, T, n, s)
	if err != nil || got != n {
		b.Fatalf("generate: n=%d err=%v", got, err)
	}
	return out
}
