package kernels_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
)

// TestDumpCubin is a tool, not a check: with MAMBAGO_DUMP set to a kernel
// source (e.g. scan_onepass.cu) it compiles that source for sm_90 (or the
// architecture in MAMBAGO_DUMP_ARCH, e.g. sm_90a) through NVRTC, with the options in MAMBAGO_DUMP_OPTS (e.g. "-DOP_TL2=32"), logs
// ptxas's register and spill lines, and writes the cubin to
// MAMBAGO_DUMP_DIR (default the system's temporary folder) for cuobjdump.
// scripts/sass.sh runs it. Without MAMBAGO_DUMP it skips.
func TestDumpCubin(t *testing.T) {
	name := os.Getenv("MAMBAGO_DUMP")
	if name == "" {
		t.Skip("MAMBAGO_DUMP is not set (a tool for scripts/sass.sh)")
	}
	gputest.NeedNVRTC(t)
	src, err := kernels.Source(name)
	if err != nil {
		t.Fatal(err)
	}
	opts := append([]string{"--std=c++17", "--ptxas-options=-v"}, strings.Fields(os.Getenv("MAMBAGO_DUMP_OPTS"))...)
	arch := os.Getenv("MAMBAGO_DUMP_ARCH")
	if arch == "" {
		arch = "sm_90"
	}
	cubin, log, err := cuda.CompileLog(src, name, arch, opts...)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "Compiling entry") || strings.Contains(line, "Used ") || strings.Contains(line, "spill") {
			t.Log(strings.TrimSpace(line))
		}
	}
	dir := os.Getenv("MAMBAGO_DUMP_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	out := filepath.Join(dir, name+".cubin")
	if err := os.WriteFile(out, cubin, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", out)
}
