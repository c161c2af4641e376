package gpu

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
)

// TestCompileKernels needs NVRTC but no GPU. In an empty cache every source
// is pending for sm_90; compileKernels compiles every unit at once into it,
// a CUBIN each in kernels.Units' order: ELF, defining every entry that
// loadKernels looks up in it (so the lookups cannot fail on a GPU) and no
// entry that it looks up in another part (nothing compiled twice), and for
// a whole source and a typed part the bits cuda.Compile gives alone. Then
// none is pending, and a second call reads every one from the cache.
func TestCompileKernels(t *testing.T) {
	gputest.NeedNVRTC(t)
	if testing.Short() {
		t.Skip("compiles every kernel source: not in -short")
	}
	t.Setenv("MAMBAGO_KERNEL_CACHE", t.TempDir())
	const arch = "sm_90"
	names, units := kernels.Names(), kernels.Units()
	pending, err := pendingKernels(arch)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pending, names) {
		t.Fatalf("pending in an empty cache: %v, want every source %v", pending, names)
	}
	start := time.Now()
	cubins, err := compileKernels(arch)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d units of %d sources compiled in %.1f s", len(units), len(names), time.Since(start).Seconds())
	if len(cubins) != len(units) {
		t.Fatalf("%d CUBINs for %d units", len(cubins), len(units))
	}
	for i, u := range units {
		defined, err := cubinFunctions(cubins[i])
		if err != nil {
			t.Errorf("%s: %v", u, err)
			continue
		}
		for _, k := range u.Entries() {
			if !defined[k] {
				t.Errorf("%s: its CUBIN does not define %s", u, k)
			}
		}
		for _, k := range kernels.Entries(u.Name) { // the file's other entries: other parts' own
			if defined[k] && !slices.Contains(u.Entries(), k) {
				t.Errorf("%s compiles %s, another part's entry (a plain one belongs under #if PLAIN_ENTRIES)", u, k)
			}
		}
	}
	for _, u := range []kernels.Unit{{Name: "pool.cu"}, {Name: "embed.cu", DType: "bf16"}} { // quick ones to compile again alone
		i := slices.Index(units, u)
		if i < 0 {
			t.Fatalf("%s is not a unit: %v", u, units)
		}
		src, err := kernels.Source(u.Name)
		if err != nil {
			t.Fatal(err)
		}
		alone, err := cuda.Compile(src, u.Name, kernels.Target(u.Name, arch), unitOptions(u)...)
		if err != nil || !bytes.Equal(alone, cubins[i]) {
			t.Fatalf("%s compiled alone: err %v, the same bits %v", u, err, bytes.Equal(alone, cubins[i]))
		}
	}
	if pending, err = pendingKernels(arch); err != nil || len(pending) != 0 {
		t.Fatalf("pending after compiling: %v (err %v)", pending, err)
	}
	h0, m0 := cuda.CacheStats()
	if _, err := compileKernels(arch); err != nil {
		t.Fatal(err)
	}
	if h1, m1 := cuda.CacheStats(); h1-h0 != int64(len(units)) || m1 != m0 {
		t.Fatalf("second call: %d cache hits, %d compiles; want %d and 0", h1-h0, m1-m0, len(units))
	}
}

// cubinFunctions returns the names of the functions a CUBIN's symbol table
// defines: its kernels, among others.
func cubinFunctions(cubin []byte) (map[string]bool, error) {
	f, err := elf.NewFile(bytes.NewReader(cubin))
	if err != nil {
		return nil, err
	}
	syms, err := f.Symbols()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF {
			out[s.Name] = true
		}
	}
	return out, nil
}

// TestTopKDrawMaxIsTheKernels checks that topKDrawMax, the largest k
// Decoder.QueueTopK takes, is kernels/topk.cu's TOPK_DRAW_MAX, whose
// shared memory topk_draw_f32 ranks the candidates in.
func TestTopKDrawMaxIsTheKernels(t *testing.T) {
	src, err := kernels.Source("topk.cu")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("#define TOPK_DRAW_MAX %d\n", topKDrawMax); !strings.Contains(src, want) {
		t.Errorf("kernels/topk.cu does not hold %q", want)
	}
}

// TestSupported checks the CUDA engine's oldest GPU, without one: compute
// capability 8.0 and newer run, older ones are an error wrapping ErrOldGPU
// that names the GPU and what the engine needs.
func TestSupported(t *testing.T) {
	for _, c := range []struct{ major, minor int }{{8, 0}, {8, 6}, {8, 9}, {9, 0}, {10, 0}, {12, 0}} {
		if err := Supported("GPU 0 (x)", c.major, c.minor); err != nil {
			t.Errorf("Supported(%d.%d) = %v", c.major, c.minor, err)
		}
	}
	for _, c := range []struct{ major, minor int }{{7, 5}, {7, 0}, {6, 1}} {
		err := Supported("GPU 1 (Tesla V100)", c.major, c.minor)
		want := fmt.Sprintf("GPU 1 (Tesla V100) has compute capability %d.%d, older than the CUDA engine needs: 8.0 or newer", c.major, c.minor)
		if !errors.Is(err, ErrOldGPU) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Supported(%d.%d) = %v, want %q... wrapping ErrOldGPU", c.major, c.minor, err, want)
		}
	}
}

// TestMinMajorIsTheKernels checks, through NVRTC (no GPU needed), why
// MinMajor is 8: some kernel source does not compile for sm_75, the newest
// architecture below it, while TestCompileAll (kernels/) compiles every one
// for sm_80. A build whose kernels all compile for sm_75 fails here, so
// that MinMajor is lowered only with the kernels (and a GPU run there).
func TestMinMajorIsTheKernels(t *testing.T) {
	gputest.NeedNVRTC(t)
	for _, name := range kernels.Names() {
		src, err := kernels.Source(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cuda.Compile(src, name, "sm_75", kernelOptions...); err != nil {
			t.Logf("%s does not compile for sm_75", name)
			return
		}
	}
	t.Fatalf("every kernel source compiles for sm_75, yet MinMajor = %d", MinMajor)
}
