package mambago_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mambago/mambago/mambago"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestOpenReportsCompile checks Options.Progress: no line for the CPU
// engine; on a GPU with an empty kernel cache, Open says it compiles before
// it does and how long the load took, and with the cache filled it says
// nothing.
func TestOpenReportsCompile(t *testing.T) {
	t.Setenv("MAMBAGO_KERNEL_CACHE", t.TempDir())
	dir := filepath.Join(fixture.Root(), "base")
	if n := mambago.CompileNotice("cpu"); n != "" {
		t.Fatalf("CompileNotice(cpu) = %q", n)
	}
	if err := mambago.GPUUsable(); err != nil {
		if n := mambago.CompileNotice("auto"); n != "" {
			t.Fatalf("no GPU (%v), but CompileNotice(auto) = %q", err, n)
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
			!strings.Contains(got, "loaded the model in")) {
			t.Fatalf("load %d wrote %q; want %q", i+1, got, want)
		}
	}
}
