package gpu_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cpu"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/internal/enginetest"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

func newEngine(t *testing.T, w *checkpoint.Weights, dt cuda.DType) *gpu.Engine {
	t.Helper()
	e, err := gpu.New(w, 0, dt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	e.PoisonOutputs = true // an element the kernels miss shows as NaN
	return e
}

// fixtureWeights loads the fixture checkpoint name (tests/fixtures/<name>).
func fixtureWeights(t *testing.T, name string) *checkpoint.Weights {
	t.Helper()
	w, err := checkpoint.Load(filepath.Join(fixture.Root(), name))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func open(t *testing.T, dir string) engine.Engine {
	t.Helper()
	w, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return newEngine(t, w, cuda.F32)
}

// TestConformance runs the HF fixtures and the equivalences on the GPU.
func TestConformance(t *testing.T) {
	gputest.Need(t)
	enginetest.Run(t, open)
}

// TestSmallChunks reruns the suite with chunks of a few rows along T.
func TestSmallChunks(t *testing.T) {
	gputest.Need(t)
	enginetest.Run(t, func(t *testing.T, dir string) engine.Engine {
		e := open(t, dir).(*gpu.Engine)
		e.ChunkRows = 7
		return e
	})
}

// TestMatchesCPU compares the GPU engine with the CPU engine on fresh random
// weights and inputs over T, B and d_state: every position's hidden state and
// the final states, max relative error ≤ 1e-4.
func TestMatchesCPU(t *testing.T) {
	gputest.Need(t)
	for _, N := range []int{8, 16, 64, 256} {
		cfg := fixture.Shape(64, 2, 100)
		cfg.State = N
		w := fixture.RandomWeights(cfg, rand.Uint64())
		g, c := newEngine(t, w, cuda.F32), cpu.New(w)
		for _, B := range []int{1, 3} {
			for _, T := range []int{1, 7, 255, 256, 257, 2049, 5000} {
				name := fmt.Sprintf("N=%d B=%d T=%d", N, B, T)
				ids := make([]int64, B*T)
				for i := range ids {
					ids[i] = rand.Int64N(int64(cfg.Vocab))
				}
				in := engine.Input{B: B, T: T, IDs: ids}
				var outs [2][]float32
				var states [2][][]float32
				for i, e := range []engine.Engine{g, c} {
					st, err := e.NewState(B)
					if err != nil {
						t.Fatal(err)
					}
					outs[i] = fixture.NaNs(B * T * cfg.Hidden)
					if err := e.Prefill(st, in, engine.All, outs[i]); err != nil {
						t.Fatal(err)
					}
					for l := 0; l < cfg.Layers; l++ {
						cs, _ := st.ConvState(l)
						ss, _ := st.SSMState(l)
						states[i] = append(states[i], cs, ss)
					}
				}
				if e := fixture.RelErr(outs[0], outs[1]); e > enginetest.RefTol {
					t.Errorf("%s: hidden rel err %.3g", name, e)
				}
				for k := range states[0] {
					if e := fixture.RelErr(states[0][k], states[1][k]); e > enginetest.RefTol {
						t.Errorf("%s: state %d rel err %.3g", name, k, e)
					}
				}
			}
		}
		t.Logf("d_state %d: GPU matches CPU", N)
	}
}

// TestPrefillLayersMatchCPU compares each layer's residual stream
// (PrefillLayers) of the GPU engine, f32 and bf16, with the CPU engine's,
// on a left-padded batch of fresh random weights, one chunk and several:
// within 1e-4 in f32. bf16's bound, 5e-2, only says the right rows of the
// right layer came out (a misplaced copy is off by the whole scale).
func TestPrefillLayersMatchCPU(t *testing.T) {
	gputest.Need(t)
	cfg := fixture.Shape(64, 3, 100)
	w := fixture.RandomWeights(cfg, rand.Uint64())
	const B, T = 3, 300
	in := engine.Input{B: B, T: T, IDs: make([]int64, B*T), Pad: []int{0, 17, 250}}
	for i := range in.IDs {
		in.IDs[i] = rand.Int64N(int64(cfg.Vocab))
	}
	run := func(e engine.LayerPrefiller, st engine.State) []float32 {
		layers := fixture.NaNs(cfg.Layers * B * T * cfg.Hidden)
		if err := e.PrefillLayers(context.Background(), st, in, fixture.NaNs(B*T*cfg.Hidden), layers); err != nil {
			t.Fatal(err)
		}
		return layers
	}
	c := cpu.New(w)
	cst, _ := c.NewState(B)
	want := run(c, cst)
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16} {
		for _, chunk := range []int{0, 128} {
			g := newEngine(t, w, dt)
			if chunk > 0 {
				g.ChunkRows = chunk
			}
			st, err := g.NewState(B)
			if err != nil {
				t.Fatal(err)
			}
			tol := enginetest.RefTol
			if dt != cuda.F32 {
				tol = 5e-2
			}
			if e := fixture.RelErr(run(g, st), want); e > tol {
				t.Errorf("%v, chunks of %d rows: layers rel err %.3g > %.0e", dt, chunk, e, tol)
			}
		}
	}
}

// TestDeviceEntryMatchesHostEntry feeds the same prompt through device
// pointers (on the engine's stream, and on a caller's stream) and through
// host buffers: the outputs and final states are the same bits.
func TestDeviceEntryMatchesHostEntry(t *testing.T) {
	gputest.Need(t)
	gputest.Device(t)
	w := fixtureWeights(t, "features")
	e := newEngine(t, w, cuda.F32)
	c := e.Config()
	B, T := 3, 41
	ids := make([]int64, B*T)
	for i := range ids {
		ids[i] = rand.Int64N(int64(c.Vocab))
	}
	feats := make([]float32, B*T*c.InputDim)
	for i := range feats {
		feats[i] = float32(rand.NormFloat64())
	}
	caller, err := cuda.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer caller.Destroy()
	// Uploads on the default stream (nil) are ordered before work on the
	// default stream; for the caller's stream the test waits for them.
	for _, tc := range []struct {
		kind string
		in   engine.Input
	}{{"ids", engine.Input{B: B, T: T, IDs: ids}}, {"features", engine.Input{B: B, T: T, Features: feats}}} {
		for _, pool := range []engine.Pool{engine.All, engine.Last, engine.Sum, engine.Mean} {
			host := fixture.NaNs(pool.OutLen(B, T, c.Hidden))
			st, _ := e.NewState(B)
			if err := e.Prefill(st, tc.in, pool, host); err != nil {
				t.Fatal(err)
			}
			for _, stream := range []*cuda.Stream{nil, caller} {
				din, dout := deviceInput(t, tc.in), gputest.Alloc(t, 4*len(host))
				if err := cuda.Fill32(dout.Ptr, math.Float32bits(float32(math.NaN())), len(host), nil); err != nil {
					t.Fatal(err)
				}
				if err := cuda.Synchronize(); err != nil {
					t.Fatal(err)
				}
				st2, _ := e.NewState(B)
				var handle uintptr
				if stream != nil {
					handle = stream.Handle()
				}
				if err := e.PrefillDevice(st2, tc.kind, uintptr(din.Ptr), cuda.F32, B, T, pool, gpu.Output{Ptr: uintptr(dout.Ptr), Type: cuda.F32}, handle); err != nil {
					t.Fatal(err)
				}
				if stream != nil {
					stream.Synchronize()
				}
				got := make([]float32, len(host)) // a pageable copy on the default stream: ordered after it
				if err := cuda.CopyOut(got, dout.Ptr, nil); err != nil {
					t.Fatal(err)
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(host[i]) {
						t.Fatalf("%s pool %d stream %v: out[%d] = %v, host entry gives %v", tc.kind, pool, stream != nil, i, got[i], host[i])
					}
				}
				s1, _ := st.SSMState(1)
				s2, _ := st2.SSMState(1)
				if fixture.RelErr(s2, s1) != 0 {
					t.Fatalf("%s pool %d: final states differ", tc.kind, pool)
				}
			}
		}
	}
}

// TestDevicePaddedMatchesHostPadded runs a left-padded batch (engine.Input.Pad)
// through PrefillDevicePadded and through Prefill with host buffers, each on
// a state that held something before: the outputs and final states are the
// same bits, and a bad pad is an input error.
func TestDevicePaddedMatchesHostPadded(t *testing.T) {
	gputest.Need(t)
	gputest.Device(t)
	w := fixtureWeights(t, "base")
	e := newEngine(t, w, cuda.F32)
	c := e.Config()
	B, T := 3, 29
	in := engine.Input{B: B, T: T, IDs: make([]int64, B*T), Pad: []int{rand.IntN(T), 0, T - 1}}
	for i := range in.IDs {
		in.IDs[i] = rand.Int64N(int64(c.Vocab))
	}
	lead := engine.Input{B: B, T: 4, IDs: in.IDs[:B*4]}
	din := deviceInput(t, in)
	for _, pool := range []engine.Pool{engine.All, engine.Last, engine.Sum, engine.Mean} {
		host := fixture.NaNs(pool.OutLen(B, T, c.Hidden))
		st, _ := e.NewState(B)
		st2, _ := e.NewState(B)
		for _, s := range []engine.State{st, st2} {
			if err := e.Prefill(s, lead, engine.Last, fixture.NaNs(B*c.Hidden)); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Prefill(st, in, pool, host); err != nil {
			t.Fatal(err)
		}
		dout := gputest.Alloc(t, 4*len(host))
		if err := cuda.Fill32(dout.Ptr, math.Float32bits(float32(math.NaN())), len(host), nil); err != nil {
			t.Fatal(err)
		}
		if err := e.PrefillDevicePadded(st2, "ids", uintptr(din.Ptr), cuda.F32, T, in.Pad, pool, gpu.Output{Ptr: uintptr(dout.Ptr), Type: cuda.F32}, 0); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(host))
		if err := cuda.CopyOut(got, dout.Ptr, nil); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(host[i]) {
				t.Fatalf("pool %d: out[%d] = %v, host entry gives %v", pool, i, got[i], host[i])
			}
		}
		want, have := enginetest.States(t, e, st), enginetest.States(t, e, st2)
		for i := range want {
			if fixture.RelErr(have[i], want[i]) != 0 {
				t.Fatalf("pool %d: final state %d differs", pool, i)
			}
		}
	}
	st, _ := e.NewState(B)
	for _, bad := range [][]int{{0, 0}, {0, T, 0}, {-1, 0, 0}} {
		err := e.PrefillDevicePadded(st, "ids", uintptr(din.Ptr), cuda.F32, T, bad, engine.Last, gpu.Output{Ptr: uintptr(din.Ptr), Type: cuda.F32}, 0)
		if !engine.IsInvalid(err) {
			t.Errorf("pad %v: got %v, want an input error", bad, err)
		}
	}
}

// deviceInput uploads in's ids or features to a new device buffer.
func deviceInput(t *testing.T, in engine.Input) *cuda.Buffer {
	t.Helper()
	var b *cuda.Buffer
	var err error
	if in.IDs != nil {
		b = gputest.Alloc(t, 8*len(in.IDs))
		err = cuda.CopyIn(b.Ptr, in.IDs, nil)
	} else {
		b = gputest.Alloc(t, 4*len(in.Features))
		err = cuda.CopyIn(b.Ptr, in.Features, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGraphsReplayBitIdentical captures a decode step and a pooled prefill,
// replays each 100 times from the same state, and checks every replay gives
// the eager call's bits; a changed GEMM mode or a reallocated workspace makes
// replay refuse.
func TestGraphsReplayBitIdentical(t *testing.T) {
	gputest.Need(t)
	for _, tc := range []struct {
		name string
		dt   cuda.DType
	}{{"base", cuda.F32}, {"features", cuda.F32}, {"base", cuda.BF16}, {"features", cuda.F16}} {
		name := tc.name
		w := fixtureWeights(t, name)
		e := newEngine(t, w, tc.dt)
		c := e.Config()
		B, T := 2, 33
		in := engine.Input{B: B, T: T}
		kind := "ids"
		if c.InputDim > 0 {
			kind = "features"
			in.Features = make([]float32, B*T*c.InputDim)
			for i := range in.Features {
				in.Features[i] = float32(rand.NormFloat64())
			}
		} else {
			in.IDs = make([]int64, B*T)
			for i := range in.IDs {
				in.IDs[i] = rand.Int64N(int64(c.Vocab))
			}
		}
		st, _ := e.NewState(B)
		want := fixture.NaNs(B * c.Hidden)
		if err := e.Prefill(st, in, engine.Mean, want); err != nil {
			t.Fatal(err)
		}
		pg, err := e.CapturePrefill(st, kind, T, engine.Mean)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			st.Reset()
			got := fixture.NaNs(B * c.Hidden)
			if err := pg.Prefill(in, got); err != nil {
				t.Fatal(err)
			}
			assertBits(t, fmt.Sprintf("%s prefill replay %d", name, i), got, want)
		}
		if kind == "ids" {
			next := []int64{1, 2}
			saved := enginetest.States(t, e, st)
			wantLogits := fixture.NaNs(B * c.Vocab)
			if err := e.Step(st, next, wantLogits); err != nil {
				t.Fatal(err)
			}
			sg, err := e.CaptureStep(st)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 100; i++ {
				restore(t, st, saved)
				got := fixture.NaNs(B * c.Vocab)
				if err := sg.Step(next, got); err != nil {
					t.Fatal(err)
				}
				assertBits(t, fmt.Sprintf("step replay %d", i), got, wantLogits)
			}
			if err := e.SetTF32(true); err != nil {
				t.Fatal(err)
			}
			if err := sg.Step(next, fixture.NaNs(B*c.Vocab)); err == nil || !engine.IsInvalid(err) {
				t.Errorf("replay after a GEMM mode change: err = %v", err)
			}
			e.SetTF32(false)
			sg.Destroy()
		}
		// A prefill larger than any before grows the workspace: the graph must refuse.
		big := engine.Input{B: B, T: 4 * T, IDs: make([]int64, B*4*T), Features: nil}
		if kind == "features" {
			big = engine.Input{B: B, T: 4 * T, Features: make([]float32, B*4*T*c.InputDim)}
		}
		if err := e.Prefill(st, big, engine.Last, fixture.NaNs(B*c.Hidden)); err != nil {
			t.Fatal(err)
		}
		if err := pg.Prefill(in, fixture.NaNs(B*c.Hidden)); err == nil || !engine.IsInvalid(err) {
			t.Errorf("replay after the workspace grew: err = %v", err)
		}
		pg.Destroy()
	}
}

func assertBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] = %v, eager gives %v", what, i, got[i], want[i])
		}
	}
}

func restore(t *testing.T, st engine.State, saved [][]float32) {
	for l := 0; l < len(saved)/2; l++ {
		if err := st.SetConvState(l, saved[2*l]); err != nil {
			t.Fatal(err)
		}
		if err := st.SetSSMState(l, saved[2*l+1]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNewRefusesNarrowedWeights: weights loaded narrowed for the CPU engine
// (checkpoint.LoadNarrowed, their float32 matrices nil) are an input error
// that says how to load them, before any GPU is touched, so this runs
// without one too.
func TestNewRefusesNarrowedWeights(t *testing.T) {
	w, err := checkpoint.LoadNarrowed(filepath.Join(fixture.Root(), "base"), "BF16")
	if err != nil {
		t.Fatal(err)
	}
	e, err := gpu.New(w, 0, cuda.BF16)
	if err == nil {
		e.Close()
		t.Fatal("the CUDA engine took narrowed weights")
	}
	if !engine.IsInvalid(err) || !strings.Contains(err.Error(), "checkpoint.Load") {
		t.Fatalf("err = %v, want an input error that names checkpoint.Load", err)
	}
}
