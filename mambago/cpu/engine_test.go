package cpu_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/mambago/mambago/internal/blastest"
	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cpu"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/enginetest"
	"github.com/mambago/mambago/mambago/internal/fixture"
	"github.com/mambago/mambago/mambago/safetensors"
)

func open(t *testing.T, dir string) engine.Engine {
	t.Helper()
	w, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cpu.New(w)
}

func TestConformance(t *testing.T) { enginetest.Run(t, open) }

// TestConformanceNoLanes reruns the suite on the scalar paths alone, as on
// a CPU without AVX2.
func TestConformanceNoLanes(t *testing.T) {
	defer cpu.SetLanes(false)()
	enginetest.Run(t, open)
}

// TestConformanceAVX2 reruns the suite on the AVX2 kernels alone (the
// SGEMM's 6 × 16 micro-kernel among them), as on a CPU without AVX-512F.
func TestConformanceAVX2(t *testing.T) {
	if !cpu.HasWideKernels {
		t.Skip("this CPU has no AVX-512F: TestConformance ran the AVX2 kernels")
	}
	defer cpu.SetWideKernels(false)()
	enginetest.Run(t, open)
}

// TestConformanceBLAS reruns the suite with the GEMMs in the CBLAS library
// named by MAMBAGO_TEST_BLAS (scripts/test.sh sets it to numpy's OpenBLAS).
func TestConformanceBLAS(t *testing.T) {
	lib := blastest.Need(t)
	enginetest.Run(t, func(t *testing.T, dir string) engine.Engine {
		e := open(t, dir).(*cpu.Engine)
		e.BLAS = lib
		return e
	})
}

// TestSmallChunks reruns the suite with chunks of a few rows, so the chunking
// along T is exercised on every case.
func TestSmallChunks(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, dir string) engine.Engine {
		e := open(t, dir).(*cpu.Engine)
		e.ChunkRows = 5
		return e
	})
}

// TestHalfPrecisionWeights checks that BF16- and F16-stored weights give
// exactly the outputs of their float32 upcast.
func TestHalfPrecisionWeights(t *testing.T) {
	for _, dt := range []safetensors.DType{safetensors.BF16, safetensors.F16} {
		half, up := t.TempDir(), t.TempDir()
		if err := fixture.CopyAs("base", half, dt, false); err != nil {
			t.Fatal(err)
		}
		if err := fixture.CopyAs("base", up, dt, true); err != nil {
			t.Fatal(err)
		}
		var outs [][]float32
		for _, dir := range []string{half, up} {
			e := open(t, dir)
			st, _ := e.NewState(2)
			c, _ := fixture.Load(filepath.Join(fixture.Root(), "base"))
			out := fixture.NaNs(2 * c.T * e.Config().Hidden)
			if err := e.Prefill(st, c.Input, engine.All, out); err != nil {
				t.Fatal(err)
			}
			outs = append(outs, out)
		}
		for i := range outs[0] {
			if outs[0][i] != outs[1][i] {
				t.Fatalf("%s: output %d is %v, its f32 upcast gives %v", dt, i, outs[0][i], outs[1][i])
			}
		}
	}
}

// TestConformance16 runs the suite's checks of the engine against itself
// (all but the HF references, which rounding the float32 fixtures' weights
// moves away from) on engines that keep their weights in 16 bits, loaded
// straight into them (checkpoint.LoadNarrowed), with the lanes on and off.
func TestConformance16(t *testing.T) {
	for _, st := range []struct {
		storage cpu.Storage
		dtype   safetensors.DType
	}{{cpu.BFloat16, safetensors.BF16}, {cpu.Float16, safetensors.F16}} {
		open := func(t *testing.T, dir string) engine.Engine {
			w, err := checkpoint.LoadNarrowed(dir, st.dtype)
			if err != nil {
				t.Fatal(err)
			}
			return cpu.NewStored(w, st.storage)
		}
		for _, lanes := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/lanes=%v", st.storage, lanes), func(t *testing.T) {
				defer cpu.SetLanes(lanes)()
				enginetest.RunSelf(t, open)
			})
		}
	}
}
