package cuda_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/mambago/mambago/mambago/cuda"
)

// TestCompileCached needs NVRTC but no GPU: a second compile of the same
// source is read from disk, a changed option compiles again, and a corrupt
// cache file is ignored. IsCached says beforehand which of these compile.
func TestCompileCached(t *testing.T) {
	if err := cuda.LoadNVRTC(); err != nil {
		t.Skipf("no NVRTC library (set MAMBAGO_NVRTC): %v", err)
	}
	dir := t.TempDir()
	t.Setenv("MAMBAGO_KERNEL_CACHE", dir)
	src := `extern "C" __global__ void k(float *x) { x[threadIdx.x] *= 2.f; }`
	if cuda.IsCached(src, "k.cu", "sm_90") {
		t.Fatal("an empty cache holds the source")
	}
	h0, m0 := cuda.CacheStats()
	a, err := cuda.CompileCached(src, "k.cu", "sm_90")
	if err != nil {
		t.Fatal(err)
	}
	b, err := cuda.CompileCached(src, "k.cu", "sm_90")
	if err != nil {
		t.Fatal(err)
	}
	h1, m1 := cuda.CacheStats()
	if h1-h0 != 1 || m1-m0 != 1 || !bytes.Equal(a, b) {
		t.Fatalf("hits %d misses %d (want 1, 1), same bytes %v", h1-h0, m1-m0, bytes.Equal(a, b))
	}
	if !cuda.IsCached(src, "k.cu", "sm_90") || cuda.IsCached(src, "k.cu", "sm_90", "--use_fast_math") ||
		cuda.IsCached(src, "k.cu", "sm_80") {
		t.Fatal("IsCached: want the compiled source cached for sm_90 only, with no other option")
	}
	if _, err := cuda.CompileCached(src, "k.cu", "sm_90", "--use_fast_math"); err != nil {
		t.Fatal(err)
	}
	if _, m2 := cuda.CacheStats(); m2-m1 != 1 {
		t.Errorf("a new option did not compile again")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "k-sm_90-*.cubin"))
	if len(files) != 2 {
		t.Fatalf("cache holds %v", files)
	}
	for _, f := range files {
		os.WriteFile(f, []byte("garbage"), 0o644)
	}
	if cuda.IsCached(src, "k.cu", "sm_90") {
		t.Fatal("IsCached trusts a corrupt cache file")
	}
	c, err := cuda.CompileCached(src, "k.cu", "sm_90")
	if err != nil || !bytes.Equal(c, a) {
		t.Fatalf("after corrupting the cache: err %v, same bytes %v", err, bytes.Equal(c, a))
	}
}
