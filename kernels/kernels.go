// Package kernels embeds the CUDA C sources of the GPU engine, one file per
// stage family, each opening with its math and shapes. They are compiled at
// run time by NVRTC for the device's exact architecture.
package kernels

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
)

//go:embed *.cu *.cuh
var sources embed.FS

// prelude is put in front of every source, in order: the storage types and
// EACH_DTYPE, then the shared device helpers.
var prelude = []string{"dtype.cuh", "math.cuh", "hopper.cuh"}

// DTypes are the suffixes of the typed kernels, as EACH_DTYPE in dtype.cuh
// expands them.
var DTypes = []string{"f32", "bf16", "f16"}

// Names returns the kernel source files, sorted.
func Names() []string {
	entries, _ := fs.ReadDir(sources, ".")
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".cu") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// Source returns the text NVRTC compiles for one source file: the prelude,
// then the file (a #line directive keeps its line numbers in messages).
func Source(name string) (string, error) {
	b, err := sources.ReadFile(name)
	if err != nil {
		return "", err
	}
	return SourceOf(name, string(b))
}

// SourceOf is Source for another version of file name, text: another
// build's kernels, compiled with this build's prelude.
func SourceOf(name, text string) (string, error) {
	var out strings.Builder
	for _, f := range prelude {
		b, err := sources.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&out, "#line 1 %q\n%s\n", f, b)
	}
	fmt.Fprintf(&out, "#line 1 %q\n%s\n", name, text)
	return out.String(), nil
}

// Target is the architecture to compile the source file name for on a
// device of architecture arch (e.g. sm_90): arch itself, or sm_90a where the
// file has code for Hopper's architecture-specific target (wgmma, TMA
// multicast), which it guards with __CUDA_ARCH_FEAT_SM90_ALL and which
// compiles to a trap elsewhere.
func Target(name, arch string) string {
	b, err := sources.ReadFile(name)
	if arch == "sm_90" && err == nil && strings.Contains(string(b), "__CUDA_ARCH_FEAT_SM90_ALL") {
		return "sm_90a"
	}
	return arch
}

// entryRE matches a kernel's definition: its attributes (__launch_bounds__,
// or a macro in capitals such as out_norm.cu's cluster dimensions) skipped,
// then its name, with ##sfx where EACH_DTYPE makes one per type.
var entryRE = regexp.MustCompile(`extern "C" __global__ void[\s\\]+(?:(?:__launch_bounds__\([^)]*\)|[A-Z][A-Z0-9_]*)[\s\\]+)*(\w+?)(##sfx)?\(`)

// Entries returns the kernels a source file defines (its extern "C"
// __global__ functions, a name ending in ##sfx once per DTypes suffix), so
// callers look each up only in its own module.
func Entries(name string) []string {
	src, err := Source(name)
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range entryRE.FindAllStringSubmatch(src, -1) {
		if m[2] == "" {
			out = append(out, m[1])
			continue
		}
		for _, sfx := range DTypes {
			out = append(out, m[1]+sfx)
		}
	}
	return out
}
