package mambago_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestLoadNotice checks what a load announces: nothing for a small
// checkpoint on the CPU (and nothing written to Options.Progress); a
// checkpoint of a GB or more (here a sparse file) is announced with its
// size.
func TestLoadNotice(t *testing.T) {
	dir := filepath.Join(fixture.Root(), "base")
	if n := mambago.LoadNotice(dir, "cpu"); n != "" {
		t.Fatalf("LoadNotice(base, cpu) = %q", n)
	}
	var progress strings.Builder
	m, err := mambago.Open(dir, mambago.Options{Device: "cpu", Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if progress.Len() != 0 {
		t.Fatalf("a small CPU load wrote %q", progress.String())
	}
	big := t.TempDir()
	f, err := os.Create(filepath.Join(big, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(3 << 29); err != nil { // 1.6 GB, sparse
		t.Fatal(err)
	}
	f.Close()
	want := "mambago: reading 1.6 GB of weights from " + big
	if n := mambago.LoadNotice(big, "cpu"); !strings.HasPrefix(n, want) {
		t.Fatalf("LoadNotice(1.6 GB, cpu) = %q, want it to start %q", n, want)
	}
}

// TestFallbackNote checks, without a GPU, what "auto" says when the driver
// sees a GPU that cannot run the CUDA engine (too old, or a library
// missing): it runs on the CPU engine, and says why. Nothing is said for
// another device, a usable GPU, or no GPU at all.
func TestFallbackNote(t *testing.T) {
	supported := gpu.Supported("GPU 0 (Tesla T4)", 7, 5)
	if !errors.Is(supported, gpu.ErrOldGPU) {
		t.Fatalf("Supported(7.5) = %v, want an error wrapping ErrOldGPU", supported)
	}
	old := mambago.Unusable(supported)
	noLib := mambago.Unusable(errors.New("cuda: cannot load cuBLAS: [libcublas.so.13: cannot open shared object file]"))
	for _, c := range []struct {
		usable error
		want   string
	}{
		{old, "running on the CPU engine: GPU 0 (Tesla T4) has compute capability 7.5, older than the CUDA engine needs: 8.0 or newer"},
		{noLib, "running on the CPU engine: cuda: cannot load cuBLAS"},
	} {
		for _, device := range []string{"", "auto", "AUTO"} {
			if got := mambago.FallbackNote(device, c.usable); !strings.HasPrefix(got, c.want) {
				t.Errorf("FallbackNote(%q, %v) = %q, want it to start %q", device, c.usable, got, c.want)
			}
		}
	}
	for _, c := range []struct {
		device string
		usable error
	}{{"cuda", old}, {"cpu", old}, {"cuda", noLib}, {"auto", nil}, {"auto", errors.New("the driver sees no CUDA device")}} {
		if got := mambago.FallbackNote(c.device, c.usable); got != "" {
			t.Errorf("FallbackNote(%q, %v) = %q, want \"\"", c.device, c.usable, got)
		}
	}
}

// TestOpenReportsCompile checks Options.Progress on a GPU: with an empty
// kernel cache, Open says it compiles before it does and how long the load
// took; with the cache filled it says nothing. Without a GPU, LoadNotice
// names no compile.
func TestOpenReportsCompile(t *testing.T) {
	t.Setenv("MAMBAGO_KERNEL_CACHE", t.TempDir())
	dir := filepath.Join(fixture.Root(), "base")
	if err := mambago.GPUUsable(); err != nil {
		if n := mambago.LoadNotice(dir, "auto"); n != "" {
			t.Fatalf("no GPU (%v), but LoadNotice(base, auto) = %q", err, n)
		}
		t.Skipf("the rest needs a GPU: %v", err)
	}
	for i, want := range []string{"mambago: compiling", ""} {
		var progress strings.Builder
		m, err := mambago.Open(dir, mambago.Options{Device: "cuda", Progress: &progress})
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
		got := progress.String()
		t.Logf("load %d: %q", i+1, got)
		if want == "" && got != "" || want != "" && (!strings.HasPrefix(got, want) ||
			!strings.Contains(got, "\nmambago: loaded in ")) {
			t.Fatalf("load %d wrote %q; want %q", i+1, got, want)
		}
	}
}

// TestOpenDTypeAuto opens the bf16 and the f32 fixture with DType "auto"
// on the CPU engine: its weights stay in the type the config names, and
// the bf16 checkpoint's every output is the bits its float32 load gives.
// A dtype it does not know is an input error.
func TestOpenDTypeAuto(t *testing.T) {
	for name, want := range map[string]string{"bf16": "bfloat16", "base": "float32"} {
		dir := filepath.Join(fixture.Root(), name)
		m, err := mambago.Open(dir, mambago.Options{Device: "cpu", DType: "auto"})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if got := m.DType(); got != want {
			t.Errorf("%s on the CPU with dtype auto: %s, want %s", name, got, want)
		}
		f32, err := mambago.Open(dir, mambago.Options{Device: "cpu", DType: "float32"})
		if err != nil {
			t.Fatal(err)
		}
		defer f32.Close()
		c, err := fixture.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		var outs [2][]float32
		for i, m := range []*mambago.Model{m, f32} {
			st, _ := m.NewState(c.B)
			outs[i] = fixture.NaNs(c.B * c.T * m.Config().Hidden)
			if err := m.Prefill(st, c.Input, engine.All, outs[i]); err != nil {
				t.Fatal(err)
			}
		}
		for i := range outs[0] {
			if math.Float32bits(outs[0][i]) != math.Float32bits(outs[1][i]) {
				t.Fatalf("%s as %s: output %d is %v, its float32 load gives %v", name, want, i, outs[0][i], outs[1][i])
			}
		}
	}
	if _, err := mambago.Open(filepath.Join(fixture.Root(), "base"), mambago.Options{Device: "cpu", DType: "automatic"}); err == nil {
		t.Error(`dtype "automatic" opened, want an input error`)
	}
}

// TestOpenDTypeAutoGPU opens the bf16 and the f32 fixture with DType
// "auto" on the GPU: the type each config names.
func TestOpenDTypeAutoGPU(t *testing.T) {
	gputest.Need(t)
	for name, want := range map[string]string{"bf16": "bfloat16", "base": "float32"} {
		m, err := mambago.Open(filepath.Join(fixture.Root(), name), mambago.Options{Device: "cuda", DType: "auto"})
		if err != nil {
			t.Fatal(err)
		}
		if got := m.DType(); got != want {
			t.Errorf("%s on the GPU with dtype auto: %s, want %s", name, got, want)
		}
		m.Close()
	}
}

// TestOpenBorrowedOwnsItsWeights opens weights it borrows for the call
// (OpenBorrowed, as the Python bindings pass a state dict's arrays) on the
// CPU engine in float32 and in the 16-bit storages, then overwrites every
// borrowed array, as the caller may once the call returns: the model's
// outputs stay those of a model over its own copy.
func TestOpenBorrowedOwnsItsWeights(t *testing.T) {
	ids := []int64{3, 9, 27, 81 % 97, 5}
	for _, dtype := range []string{"float32", "bfloat16", "float16", "auto"} {
		w := fixture.RandomWeights(fixture.Shape(64, 2, 97), 5)
		w.Config.DType = "float16"
		want, err := mambago.OpenWeights(w.Clone(), mambago.Options{Device: "cpu", DType: dtype})
		if err != nil {
			t.Fatal(err)
		}
		got, err := mambago.OpenBorrowed(w, mambago.Options{Device: "cpu", DType: dtype})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range w.Tensors() {
			for i := range *p {
				(*p)[i] = float32(math.NaN())
			}
		}
		var outs [2][]float32
		for i, m := range []*mambago.Model{want, got} {
			st, _ := m.NewState(1)
			outs[i] = fixture.NaNs(len(ids) * 64)
			if err := m.Prefill(st, engine.Input{B: 1, T: len(ids), IDs: ids}, engine.All, outs[i]); err != nil {
				t.Fatal(err)
			}
			m.Close()
		}
		for i := range outs[0] {
			if math.Float32bits(outs[0][i]) != math.Float32bits(outs[1][i]) {
				t.Fatalf("dtype %s: output %d is %v after the borrowed weights changed, want %v", dtype, i, outs[1][i], outs[0][i])
			}
		}
	}
}
