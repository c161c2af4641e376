package gpu

import (
	"fmt"

	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
)

// kernelNames are the entry points the engine launches.
var kernelNames = []string{
	"embed_f32", "rmsnorm_f32", "rmsnorm_dbc_f32", "add_bias_f32", "scale_f32",
	"conv_silu_f32", "scan_chunk_sum_f32", "scan_carry_f32", "scan_chunk_out_f32", "pool_f32",
}

// loadKernels compiles every kernel source for the device and looks up the
// entry points.
func loadKernels(dev *cuda.Device) (map[string]*cuda.Function, []*cuda.Module, error) {
	fns := map[string]*cuda.Function{}
	var mods []*cuda.Module
	for _, name := range kernels.Names() {
		src, err := kernels.Source(name)
		if err != nil {
			return nil, mods, err
		}
		cubin, err := cuda.CompileCached(src, name, dev.Arch(), "--std=c++17")
		if err != nil {
			return nil, mods, err
		}
		m, err := cuda.LoadModule(cubin)
		if err != nil {
			return nil, mods, fmt.Errorf("%s: %w", name, err)
		}
		mods = append(mods, m)
		for _, k := range kernels.Entries(name) {
			f, err := m.Function(k)
			if err != nil {
				return nil, mods, err
			}
			fns[k] = f
		}
	}
	for _, k := range kernelNames {
		if fns[k] == nil {
			return nil, mods, fmt.Errorf("gpu: kernel %s is in no source of kernels/", k)
		}
	}
	return fns, mods, nil
}
