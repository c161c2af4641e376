// Package kernels embeds the CUDA C sources of the GPU engine, one file per
// stage family, each opening with its math and shapes. They are compiled at
// run time by NVRTC for the device's exact architecture.
package kernels

import (
	"embed"
	"io/fs"
	"regexp"
	"sort"
)

//go:embed *.cu
var sources embed.FS

// Names returns the kernel source files, sorted.
func Names() []string {
	entries, _ := fs.ReadDir(sources, ".")
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// Source returns the text of one source file.
func Source(name string) (string, error) {
	b, err := sources.ReadFile(name)
	return string(b), err
}

var entryRE = regexp.MustCompile(`extern "C" __global__ void\s+(?:__launch_bounds__\([^)]*\)\s*)?(\w+)\(`)

// Entries returns the kernels a source file defines (its extern "C"
// __global__ functions), so callers look each up only in its own module.
func Entries(name string) []string {
	src, err := Source(name)
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range entryRE.FindAllStringSubmatch(src, -1) {
		out = append(out, m[1])
	}
	return out
}
