package gpu

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
)

// typedKernels have one entry per storage type (kernels.DTypes), named
// <kernel>_<suffix>; plainKernels have one entry, named whole (most f32).
var (
	typedKernels = []string{"embed", "rmsnorm", "rmsnorm_embed", "to", "conv_silu", "scan_chunk_sum", "scan_chunk_out",
		"scan_chunk_sum_st", "scan_chunk_out_st", "scan_onepass2", "scan_onepass4", "scan_onepass2s", "scan_onepass2w", "scan_onepass2wd", "scan_onepass2wdt", "scan_fixup", "step_in", "gemv",
		"step_in_r4", "gemv_r4", "step_in_b1", "gemv_b1", "step_in_r4_b1", "gemv_r4_b1", "gemv_sb1", "from"}
	plainKernels = []string{"scale_f32", "add_bias_f32", "memset_rows", "rmsnorm_dbc_f32", "scan_carry_f32",
		"pool_f32", "argmax_rows_f32", "head_picks_i64", "zero_padding", "mean_rows_f32", "pad_window_f32", "step_scan_f32", "dt_proj_f32", "dt_proj_narrow_f32", "dt_proj_tc_f32", "dt_proj_tc1_f32",
		"dt_proj_tc_tall_f32", "dt_proj_tc1_tall_f32", "dt_proj_tc_short_f32", "dt_proj_tc1_short_f32", "dt_proj_wg_f32", "gemv_tc_bf16", "step_in_tc_bf16", "gemv_tc_split_bf16", "step_in_tc_split_bf16",
		"step_scan_batch_f32", "x_parts_bf16", "gemv_wg_bf16", "lm_head_wg_bf16", "step_in_wg_bf16", "gemm_skinny_bf16_f32",
		"topk_rows_f32", "topk_draw_f32", "topp_draw_f32", "topp_draw_x8_f32", "process_rows_f32", "copy_rows_f32", "copy_rows_u8", "row_norms_f32", "log_softmax_rows_f32"}
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

// kernelOptions are NVRTC's options for every kernel source.
var kernelOptions = []string{"--std=c++17"}

// maxCompiles bounds the kernel sources NVRTC compiles at once: each
// compile holds a few hundred MB of host memory while it runs.
const maxCompiles = 8

// compileKernels returns a CUBIN for each of kernels.Units() in order,
// compiled for arch (each source's kernels.Target) or read from the disk
// cache (cuda.CompileCached). Up to maxCompiles units compile at once, the
// larger source files first, so the longest (step.cu's and scan_onepass.cu's
// parts) do not start last. A source's typed entries compile as one part a
// storage type (kernels.Unit): for sm_90 on a 2-core machine step.cu took
// 24-28 s whole and 6.1-8.2 s a part, so with enough cores the first load
// waits for about a third of its longest source (2 cores: 28.9 s against
// 30.3 with whole files, bench/results/2026-12-04-compile-units.md).
func compileKernels(arch string) ([][]byte, error) { return compileUnits(arch, kernels.Units()) }

// compileUnits returns a CUBIN for each of units in order, as
// compileKernels does.
func compileUnits(arch string, units []kernels.Unit) ([][]byte, error) {
	srcs := make([]string, len(units))
	for i, u := range units {
		src, err := kernels.Source(u.Name)
		if err != nil {
			return nil, err
		}
		srcs[i] = src
	}
	order := make([]int, len(units))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(srcs[b]) - len(srcs[a]) })
	queue := make(chan int, len(order))
	for _, i := range order {
		queue <- i
	}
	close(queue)
	cubins := make([][]byte, len(units))
	errs := make([]error, len(units))
	var wg sync.WaitGroup
	for range max(1, min(maxCompiles, runtime.GOMAXPROCS(0))) {
		wg.Go(func() {
			for i := range queue {
				u := units[i]
				cubins[i], errs[i] = cuda.CompileCached(srcs[i], u.Name, kernels.Target(u.Name, arch), unitOptions(u)...)
				if errs[i] != nil {
					errs[i] = fmt.Errorf("%s: %w", u, errs[i])
				}
			}
		})
	}
	wg.Wait()
	return cubins, errors.Join(errs...)
}

// unitOptions are NVRTC's options for unit u: kernelOptions and those that
// select u's part of its file.
func unitOptions(u kernels.Unit) []string {
	return append(slices.Clip(kernelOptions), u.Options()...)
}

// PendingKernels returns device ordinal's architecture and the kernel
// sources that loading an engine there would compile, those with some unit
// (kernels.Unit) that has no CUBIN for it in the disk cache yet
// (cuda.CacheDir). Loading compiles them once (up to half a minute), then
// reads them from the cache; callers report that wait to their users.
func PendingKernels(ordinal int) (arch string, pending []string, err error) {
	if arch, err = cuda.DeviceArch(ordinal); err != nil {
		return "", nil, err
	}
	pending, err = pendingKernels(arch)
	return arch, pending, err
}

// pendingKernels lists the kernel sources with a unit that has no CUBIN
// for arch in the disk cache, each once.
func pendingKernels(arch string) ([]string, error) {
	var pending []string
	for _, u := range kernels.Units() {
		src, err := kernels.Source(u.Name)
		if err != nil {
			return nil, err
		}
		if !cuda.IsCached(src, u.Name, kernels.Target(u.Name, arch), unitOptions(u)...) && !slices.Contains(pending, u.Name) {
			pending = append(pending, u.Name)
		}
	}
	return pending, nil
}

// loadKernels compiles every kernel unit for the device and looks up each
// entry point in its unit's module.
func loadKernels(dev *cuda.Device) (map[string]*cuda.Function, []*cuda.Module, error) {
	fns := map[string]*cuda.Function{}
	var mods []*cuda.Module
	cubins, err := compileKernels(dev.Arch())
	if err != nil {
		return nil, mods, err
	}
	for i, u := range kernels.Units() {
		m, err := cuda.LoadModule(cubins[i])
		if err != nil {
			return nil, mods, fmt.Errorf("%s: %w", u, err)
		}
		mods = append(mods, m)
		for _, k := range u.Entries() {
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
	hopper := sm90a(dev)
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16, cuda.F16} {
		for _, spt := range []int{2, 4} {
			if err := allow(onePassKernel(spt, dt), onePassShared(spt, dt.Size()), true); err != nil {
				return nil, mods, err
			}
		}
		if err := fns[segmentKernel(dt)].SetMaxDynamicShared(segmentShared(dt.Size())); err != nil {
			return nil, mods, err
		}
		for _, e := range []struct{ dtf, tma bool }{{false, false}, {true, false}, {true, true}} {
			if err := allow(helpersKernel(dt, e.dtf, e.tma), helpersShared(dt.Size(), e.dtf), dev.Major >= 9); err != nil {
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
		// The warpgroup GEMVs (GEMVWarpgroup) and the skinny GEMM on their
		// ring (SkinnyGEMM).
		for _, k := range []string{"gemv_wg_bf16", "lm_head_wg_bf16", "step_in_wg_bf16"} {
			if err := allow(k, wgShared(), hopper && dt == cuda.BF16); err != nil {
				return nil, mods, err
			}
		}
		if err := allow("gemm_skinny_bf16_f32", skinnyShared(), hopper && dt == cuda.BF16); err != nil {
			return nil, mods, err
		}
		// out_proj with the next layer's RMSNorm (OutNorm).
		if err := allow(outNormKernel(dt), outNormShared(OutNormBuild{}), hopper); err != nil {
			return nil, mods, err
		}
	}
	// dt_proj on the warpgroup products (DTProj.Warpgroup), at its largest R.
	if err := allow("dt_proj_wg_f32", dtProjWGShared(dtProjWGMaxR), hopper); err != nil {
		return nil, mods, err
	}
	return fns, mods, nil
}

// MinMajor is the oldest compute capability (major version) the CUDA
// engine runs on: its kernels round to bf16 with PTX that needs sm_80, so
// NVRTC refuses them for sm_75 (the T4) and older.
const MinMajor = 8

// ErrOldGPU is what Supported returns, wrapped, for a GPU older than
// MinMajor.
var ErrOldGPU = errors.New("older than the CUDA engine needs")

// Supported returns nil where the CUDA engine runs on a GPU named name of
// compute capability major.minor, else an error wrapping ErrOldGPU that
// names the GPU and what the engine needs.
func Supported(name string, major, minor int) error {
	if major >= MinMajor {
		return nil
	}
	return fmt.Errorf("%s has compute capability %d.%d, %w: %d.0 or newer (A100, A10, L4, RTX 30 and 40 series, H100, H200)",
		name, major, minor, ErrOldGPU, MinMajor)
}

// DeviceSupported is Supported for GPU ordinal, read without retaining its
// context.
func DeviceSupported(ordinal int) error {
	name, major, minor, err := cuda.DeviceCapability(ordinal)
	if err != nil {
		return err
	}
	return Supported(fmt.Sprintf("GPU %d (%s)", ordinal, name), major, minor)
}

// sm90a reports whether dev's kernels are compiled for sm_90a (compute
// capability 9.0: the H100 and H200), the only target where the kernels on
// wgmma, the copy engine's tensor maps and clusters run; elsewhere they
// compile to a trap.
func sm90a(dev *cuda.Device) bool { return dev != nil && dev.Major == 9 && dev.Minor == 0 }
