package gpu

import (
	"fmt"

	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
)

// typedKernels have one entry per storage type (kernels.DTypes), named
// <kernel>_<suffix>; plainKernels have one f32 entry.
var (
	typedKernels = []string{"embed", "rmsnorm", "rmsnorm_embed", "to", "conv_silu", "scan_chunk_sum", "scan_chunk_out",
		"scan_chunk_sum_st", "scan_chunk_out_st", "scan_onepass2", "scan_onepass4", "scan_onepass2s", "scan_onepass2w", "scan_onepass2wd", "scan_fixup", "step_in", "gemv",
		"step_in_r4", "gemv_r4", "step_in_b1", "gemv_b1", "step_in_r4_b1", "gemv_r4_b1", "from"}
	plainKernels = []string{"scale_f32", "add_bias_f32", "memset_rows", "rmsnorm_dbc_f32", "scan_carry_f32",
		"pool_f32", "step_scan_f32", "dt_proj_f32", "dt_proj_narrow_f32", "dt_proj_tc_f32", "dt_proj_tc1_f32",
		"dt_proj_tc_tall_f32", "dt_proj_tc1_tall_f32"}
)

// wantedKernels names every entry the engine launches.
func wantedKernels() []string {
	want := append([]string{}, plainKernels...)
	for _, nt := range convXProjEntries {
		for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
			want = append(want, convXProjKernel(nt, dt))
		}
	}
	for _, nt := range xprojEntries {
		for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
			want = append(want, xprojKernel(nt, dt))
			for _, ks := range xprojTMASliceCounts {
				want = append(want, xprojTMAKernel(nt, ks, dt))
			}
		}
	}
	for _, k := range typedKernels {
		for _, sfx := range kernels.DTypes {
			want = append(want, k+"_"+sfx)
		}
	}
	return want
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
		cubin, err := cuda.CompileCached(src, name, kernels.Target(name, dev.Arch()), "--std=c++17")
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
	for _, k := range wantedKernels() {
		if fns[k] == nil {
			return nil, mods, fmt.Errorf("gpu: kernel %s is in no source of kernels/", k)
		}
	}
	// The kernels below take more than the 48 KB of shared memory a kernel
	// gets unasked; allow it here, outside any graph capture (their
	// launches ask again, which then does nothing). allow does so where on
	// holds and the device can give it; a device that cannot runs another
	// path (Engine.scanOnePass, ConvXProjApplies, XProjApplies,
	// OutNormApplies).
	allow := func(name string, shared int, on bool) error {
		if !on || shared > dev.MaxSharedOptIn {
			return nil
		}
		return fns[name].SetMaxDynamicShared(shared)
	}
	hopper := dev.Major == 9 && dev.Minor == 0 // the kernels compiled for sm_90a
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16, cuda.F16} {
		for _, spt := range []int{2, 4} {
			if err := allow(onePassKernel(spt, dt), onePassShared(spt, dt.Size()), true); err != nil {
				return nil, mods, err
			}
		}
		if err := fns[segmentKernel(dt)].SetMaxDynamicShared(segmentShared(dt.Size())); err != nil {
			return nil, mods, err
		}
		for _, dtf := range []bool{false, true} {
			if err := allow(helpersKernel(dt, dtf), helpersShared(dt.Size(), dtf), dev.Major >= 9); err != nil {
				return nil, mods, err
			}
		}
	}
	for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
		// The fused conv and x_proj at the widest E it serves, and our
		// x_proj at the 370m shape's 2048 (its launch asks for more where a
		// wider layer needs it).
		for _, nt := range convXProjEntries {
			if err := allow(convXProjKernel(nt, dt), convXProjShared(nt, convXProjMaxE), dev.Major >= 8); err != nil {
				return nil, mods, err
			}
		}
		for _, nt := range xprojEntries {
			if err := allow(xprojKernel(nt, dt), xprojShared(nt, 2048), hopper); err != nil {
				return nil, mods, err
			}
		}
		// out_proj with the next layer's RMSNorm (OutNorm).
		if err := allow(outNormKernel(dt), outNormShared(OutNormBuild{}), hopper); err != nil {
			return nil, mods, err
		}
	}
	return fns, mods, nil
}
