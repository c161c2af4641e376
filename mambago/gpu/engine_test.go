package gpu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cpu"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/internal/enginetest"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

func needGPU(t *testing.T) {
	t.Helper()
	if err := cuda.Init(); err != nil {
		t.Skipf("no usable GPU: %v", err)
	}
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no CUDA device (%v)", err)
	}
}

func newEngine(t *testing.T, w *checkpoint.Weights) *gpu.Engine {
	t.Helper()
	e, err := gpu.New(w, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func open(t *testing.T, dir string) engine.Engine {
	t.Helper()
	w, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return newEngine(t, w)
}

// TestConformance runs the HF fixtures and the equivalences on the GPU.
func TestConformance(t *testing.T) {
	needGPU(t)
	enginetest.Suite{Open: open, EquivTol: enginetest.EquivTolLib}.Run(t)
}

// TestSmallChunks reruns the suite with chunks of a few rows along T.
func TestSmallChunks(t *testing.T) {
	needGPU(t)
	enginetest.Suite{Open: func(t *testing.T, dir string) engine.Engine {
		e := open(t, dir).(*gpu.Engine)
		e.ChunkRows = 7
		return e
	}, EquivTol: enginetest.EquivTolLib}.Run(t)
}

// TestMatchesCPU compares the GPU engine with the CPU engine on fresh random
// weights and inputs over T, B and d_state: every position's hidden state and
// the final states, max relative error ≤ 1e-4.
func TestMatchesCPU(t *testing.T) {
	needGPU(t)
	for _, N := range []int{8, 16, 64, 256} {
		cfg := fixture.Shape(64, 2, 100)
		cfg.State = N
		w := fixture.RandomWeights(cfg, rand.Uint64())
		g, c := newEngine(t, w), cpu.New(w)
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
