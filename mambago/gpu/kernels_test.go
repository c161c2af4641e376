package gpu

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
)

// TestCompileKernels needs NVRTC but no GPU. In an empty cache every source
// is pending for sm_90; compileKernels compiles them all at once into it, a
// CUBIN each in kernels.Names' order (ELF, and for one source the bits
// cuda.Compile gives alone); then none is pending, and a second call reads
// every one from the cache.
func TestCompileKernels(t *testing.T) {
	gputest.NeedNVRTC(t)
	if testing.Short() {
		t.Skip("compiles every kernel source: not in -short")
	}
	t.Setenv("MAMBAGO_KERNEL_CACHE", t.TempDir())
	const arch = "sm_90"
	names := kernels.Names()
	pending, err := pendingKernels(arch)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pending, names) {
		t.Fatalf("pending in an empty cache: %v, want every source %v", pending, names)
	}
	cubins, err := compileKernels(arch)
	if err != nil {
		t.Fatal(err)
	}
	if len(cubins) != len(names) {
		t.Fatalf("%d CUBINs for %d sources", len(cubins), len(names))
	}
	for i, c := range cubins {
		if !bytes.HasPrefix(c, []byte("\x7fELF")) {
			t.Errorf("%s: not an ELF CUBIN (%d bytes)", names[i], len(c))
		}
	}
	i := slices.Index(names, "pool.cu") // a quick one to compile again alone
	src, err := kernels.Source(names[i])
	if err != nil {
		t.Fatal(err)
	}
	alone, err := cuda.Compile(src, names[i], kernels.Target(names[i], arch), kernelOptions...)
	if err != nil || !bytes.Equal(alone, cubins[i]) {
		t.Fatalf("%s compiled alone: err %v, the same bits %v", names[i], err, bytes.Equal(alone, cubins[i]))
	}
	if pending, err = pendingKernels(arch); err != nil || len(pending) != 0 {
		t.Fatalf("pending after compiling: %v (err %v)", pending, err)
	}
	h0, m0 := cuda.CacheStats()
	if _, err := compileKernels(arch); err != nil {
		t.Fatal(err)
	}
	if h1, m1 := cuda.CacheStats(); h1-h0 != int64(len(names)) || m1 != m0 {
		t.Fatalf("second call: %d cache hits, %d compiles; want %d and 0", h1-h0, m1-m0, len(names))
	}
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
