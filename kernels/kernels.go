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
func Entries(name string) []string { return entries(name, "") }

// entries returns the kernels of source file name that a caller looks up in
// the module compiled for dtype: with dtype "", every entry; with a DTypes
// suffix, the typed entries of that type, and the plain ones in the first
// type's part, the only part that compiles them.
func entries(name, dtype string) []string {
	src, err := Source(name)
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range entryRE.FindAllStringSubmatch(src, -1) {
		switch {
		case m[2] == "": // a plain entry
			if dtype == "" || dtype == DTypes[0] {
				out = append(out, m[1])
			}
		case dtype != "":
			out = append(out, m[1]+dtype)
		default:
			for _, sfx := range DTypes {
				out = append(out, m[1]+sfx)
			}
		}
	}
	return out
}

// A Unit is one program for NVRTC: a source file without typed entries
// whole, or one storage type's part of a file with them (EACH_DTYPE
// expanding that type alone, under DTYPE_ONLY_<sfx>). The parts compile at
// once on as many cores: step.cu's three took 6.1-8.2 s each for sm_90 on a
// 2-core machine, against 24-28 s for the whole file. The file's plain
// entries compile in its first type's part only (PLAIN_ENTRIES, dtype.cuh).
type Unit struct {
	Name  string // the source file, such as "step.cu"
	DType string // the part's DTypes suffix, or "" for a whole file
}

// Units returns every source file's units: a file with typed entries as one
// part per DTypes suffix, in that order, any other file whole; files sorted
// by name.
func Units() []Unit {
	var out []Unit
	for _, name := range Names() {
		src, err := Source(name)
		if err != nil || !typed(src) {
			out = append(out, Unit{Name: name})
			continue
		}
		for _, sfx := range DTypes {
			out = append(out, Unit{Name: name, DType: sfx})
		}
	}
	return out
}

// typed reports whether a source defines a typed entry (a name with ##sfx).
func typed(src string) bool {
	for _, m := range entryRE.FindAllStringSubmatch(src, -1) {
		if m[2] != "" {
			return true
		}
	}
	return false
}

// Options are the NVRTC options that select u's part of its file.
func (u Unit) Options() []string {
	if u.DType == "" {
		return nil
	}
	return []string{"-DDTYPE_ONLY_" + u.DType}
}

// Entries returns the kernels to look up in u's module: a whole file's
// every entry, or a part's typed entries of its type, with the file's plain
// entries in the first type's part.
func (u Unit) Entries() []string { return entries(u.Name, u.DType) }

// String names u in messages: "step.cu", or "step.cu (bf16)" for a part.
func (u Unit) String() string {
	if u.DType == "" {
		return u.Name
	}
	return u.Name + " (" + u.DType + ")"
}
