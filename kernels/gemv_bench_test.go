package kernels_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
)

// BenchmarkGEMVOneSequence times the decode GEMVs of kernels/step.cu at B=1,
// bf16 weights, at the 2.8b shape's sizes (in_proj's 10240 rows of 2560,
// out_proj's 2560 of 5120, x_proj's 192 of 5120, the LM head's 50280 of
// 2560): the entry for up to 8 sequences (gemv_r4_, or gemv_ below 1024
// rows) against the one-sequence entry (_b1) built with STEP_UNROLL_B1 1,
// 2 and 4, each at the split the engine takes (gpu.gemvSplit), and the
// one-sequence build of unroll 2 at twice that split. The weights
// rotate over copies that together exceed L2, as a step's layers do. The
// builds take turns (9 rounds of 20 launches, CUDA events), and each
// logs its median launch in µs and its ratio to the wide entry's.
func BenchmarkGEMVOneSequence(b *testing.B) {
	d, _, s, src, timer := kernelBench(b, "step.cu")
	builds := []struct{ name, opts, suffix string }{
		{"wide", "", ""}, {"b1 unroll1", "-DSTEP_UNROLL_B1=1", "b1_"},
		{"b1 unroll2", "-DSTEP_UNROLL_B1=2", "b1_"}, {"b1 unroll4", "-DSTEP_UNROLL_B1=4", "b1_"},
	}
	mods := make([]*cuda.Module, len(builds))
	for i, bd := range builds {
		if bd.opts == "" {
			mods[i] = loadSource(b, d, src, "step.cu")
		} else {
			mods[i] = loadSource(b, d, src, "step.cu", bd.opts)
		}
	}
	const rounds, runs = 9, 20
	for range b.N {
		for _, sh := range []struct {
			name           string
			rows, K, split int
		}{{"in_proj", 10240, 2560, 2}, {"out_proj", 2560, 5120, 2}, {"x_proj", 192, 5120, 8}, {"lm_head", 50280, 2560, 2}} {
			kernel := "gemv_r4_"
			group := 4
			if sh.rows < 1024 {
				kernel, group = "gemv_", 1
			}
			ws := rotatingWeights(b, s, sh.rows, sh.K)
			x, bias := upload(b, s, randn(sh.K, 1)), upload(b, s, randn(sh.rows, 1))
			out := poisoned(b, s, sh.rows)
			// Each build at the engine's split, then the default one-sequence
			// build (unroll 2) at twice that split.
			type variant struct {
				name  string
				mod   *cuda.Module
				sfx   string
				split int
			}
			var vs []variant
			for i, bd := range builds {
				vs = append(vs, variant{bd.name, mods[i], bd.suffix, sh.split})
			}
			if 2*sh.split <= 8 {
				vs = append(vs, variant{fmt.Sprintf("b1 unroll2 split%d", 2*sh.split), mods[2], "b1_", 2 * sh.split})
			}
			launches := make([]func() error, len(vs))
			for i, v := range vs {
				f, err := v.mod.Function(kernel + v.sfx + "bf16")
				if err != nil {
					b.Fatal(err)
				}
				grid := cuda.D1((sh.rows + 8/v.split*group - 1) / (8 / v.split * group))
				next := 0
				launches[i] = func() error {
					w := ws[next%len(ws)]
					next++
					return f.Launch(grid, cuda.D1(256), 0, s, x.Ptr, sh.K, cuda.Ptr(0), float32(0), w.Ptr, bias.Ptr,
						out.Ptr, sh.rows, 0, 1, sh.K, sh.rows, v.split)
				}
			}
			times := timer.turns(b, launches, rounds, runs)
			line := fmt.Sprintf("gemv %-8s %5d x %4d (%5.1f MB)", sh.name, sh.rows, sh.K, float64(2*sh.rows*sh.K)/1e6)
			base := gputest.Median(times[0])
			for i, v := range vs {
				m := gputest.Median(times[i])
				line += fmt.Sprintf("  %s %.2f us (%.3fx, %.2f TB/s)", v.name, 1e3*m, m/base, float64(2*sh.rows*sh.K)/(m*1e-3)/1e12)
			}
			b.Log(line)
			for _, buf := range append(ws, x, bias, out) {
				buf.Free()
			}
		}
	}
}

// BenchmarkGEMVBatch times the decode GEMVs of kernels/step.cu for a batch
// of 8 sequences, bf16 weights, at the 1.4b shape's sizes (in_proj's 8192
// rows of 2048, out_proj's 2048 of 4096, x_proj's 160 of 4096, the LM
// head's 50280 of 2048) and the 2.8b shape's (10240 of 2560, 2560 of 5120,
// 192 of 5120): the FMA entry the engine takes without tensor cores
// (gemv_r4_ at split 2, or gemv_ at split 8 below 1024 rows) against the
// tensor-core entries at 16 warps a tile, whole (gemv_tc_) and with each
// tile's k split over 4 and 8 blocks (gemv_tc_split_;
// gpu.Engine.GEMVTileParts). With GEMV_BASE_SOURCE (a file holding another
// version's kernels.Source("step.cu")), that version's gemv_tc_ at 16
// warps comes first among them. On sm_90, gemv_wg.cu's GEMV (wgmma, TMA)
// comes last, on rings of 4, 8 and 12 stages, alone ("wg sN", x's parts
// made once) and, at 8, after x_parts_bf16 ("wg s8+parts", as a step would
// run it).
// Each build's output must match the FMA entry's. The weights rotate over
// copies that together exceed L2, as a step's layers do. A timed run is 8
// launches back to back, so that the host's launch latency falls outside
// all but the first, as in a step graph (timed one launch at a time, each
// GEMV took 4-6 µs longer); the builds take turns (9 rounds of 20 runs,
// CUDA events), and each logs its median time a launch in µs, its ratio to
// the FMA entry's and the weights' rate against the H200's 4.8 TB/s.
// bench/cublas_gemv.py times cuBLAS on the same sizes.
func BenchmarkGEMVBatch(b *testing.B) {
	const B, rounds, runs, train = 8, 9, 20, 8
	d, _, s, src, timer := kernelBench(b, "step.cu")
	type build struct {
		name         string
		mod          *cuda.Module
		warps, parts int
		wg           int // gemv_wg_bf16: 1 alone, 2 after x_parts_bf16 (0: not it)
		wgFn         *cuda.Function
		wgShared     int // its dynamic shared memory
	}
	mod := loadSource(b, d, src, "step.cu")
	builds := []build{{"fma", mod, 8, 1, 0, nil, 0}}
	if path := os.Getenv("GEMV_BASE_SOURCE"); path != "" {
		base, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		builds = append(builds, build{"base", loadSource(b, d, string(base), "step.cu"), 16, 1, 0, nil, 0})
	}
	for _, v := range []struct{ warps, parts int }{{16, 1}, {16, 4}, {16, 8}} {
		builds = append(builds, build{fmt.Sprintf("tc w%d p%d", v.warps, v.parts), mod, v.warps, v.parts, 0, nil, 0})
	}
	var partsFn *cuda.Function // gemv_wg.cu's x_parts_bf16, on sm_90 only
	if d.Major == 9 && d.Minor == 0 {
		wsrc, err := kernels.Source("gemv_wg.cu")
		if err != nil {
			b.Fatal(err)
		}
		// Rings of 4, 8 (the source's) and 12 stages: 4, 2 and 1 blocks an SM.
		for _, stages := range []int{4, 8, 12} {
			wmod := loadSourceFor(b, "sm_90a", wsrc, "gemv_wg.cu", fmt.Sprintf("-DGW_STAGES=%d", stages))
			f, err := wmod.Function("gemv_wg_bf16")
			if err != nil {
				b.Fatal(err)
			}
			shared := gemvWGSharedFor(stages)
			if err := f.SetMaxDynamicShared(shared); err != nil {
				b.Fatal(err)
			}
			builds = append(builds, build{fmt.Sprintf("wg s%d", stages), wmod, 5, 1, 1, f, shared})
			if stages == 8 {
				builds = append(builds, build{"wg s8+parts", wmod, 5, 1, 2, f, shared})
				if partsFn, err = wmod.Function("x_parts_bf16"); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	for range b.N {
		for _, sh := range []struct {
			name    string
			rows, K int
		}{{"in_proj", 8192, 2048}, {"out_proj", 2048, 4096}, {"x_proj", 160, 4096}, {"lm_head", 50280, 2048},
			{"in_proj", 10240, 2560}, {"out_proj", 2560, 5120}, {"x_proj", 192, 5120}} {
			bytes := float64(2 * sh.rows * sh.K)
			ws := rotatingWeights(b, s, sh.rows, sh.K)
			x, bias := upload(b, s, randn(B*sh.K, 1)), upload(b, s, randn(sh.rows, 1))
			out := poisoned(b, s, B*sh.rows)
			tiles := (sh.rows + 15) / 16
			scratch, count := upload(b, s, make([]float32, tiles*8*144)), upload(b, s, make([]float32, tiles))
			launches := make([]func() error, len(builds))
			var parts *cuda.Buffer // x's three bf16 parts, 24 rows of K, and the tensor maps of them and each W
			var xmap cuda.TensorMap
			var wmaps []cuda.TensorMap
			makeParts := func() error {
				return partsFn.Launch(cuda.D1(8), cuda.D1(256), 0, s, x.Ptr, sh.K, cuda.Ptr(0), float32(0), B, sh.K, parts.Ptr, cuda.Ptr(0))
			}
			if partsFn != nil {
				parts = poisoned(b, s, 24*sh.K/2)
				var err error
				if xmap, err = cuda.NewTensorMap2D(cuda.BF16, parts.Ptr, 24, sh.K, sh.K, 24, 64); err != nil {
					b.Fatal(err)
				}
				if err := makeParts(); err != nil {
					b.Fatal(err)
				}
				for _, w := range ws {
					m, err := cuda.NewTensorMap2D(cuda.BF16, w.Ptr, sh.rows, sh.K, sh.K, 64, 64)
					if err != nil {
						b.Fatal(err)
					}
					wmaps = append(wmaps, m)
				}
			}
			for i, bd := range builds {
				if bd.wg > 0 {
					next := 0
					launches[i] = func() error {
						if bd.wg == 2 {
							if err := makeParts(); err != nil {
								return err
							}
						}
						m := wmaps[next%len(wmaps)]
						next++
						return bd.wgFn.Launch(cuda.D1((sh.rows+63)/64), cuda.D1(160), bd.wgShared, s, m, xmap, bias.Ptr,
							out.Ptr, sh.rows, 0, B, sh.K, sh.rows, cuda.Ptr(0), cuda.Ptr(0), cuda.Ptr(0), 0, float32(0),
							cuda.Ptr(0), cuda.Ptr(0), cuda.Ptr(0))
					}
					continue
				}
				kernel, split, per := "gemv_r4_bf16", 2, 16 // per: rows a block
				switch {
				case bd.parts > 1:
					kernel, split = "gemv_tc_split_bf16", bd.warps
				case i > 0:
					kernel, split = "gemv_tc_bf16", bd.warps
				case sh.rows < 1024:
					kernel, split, per = "gemv_bf16", 8, 1
				}
				f, err := bd.mod.Function(kernel)
				if err != nil {
					b.Fatal(err)
				}
				grid, next := cuda.Dim3{X: (sh.rows + per - 1) / per, Y: bd.parts, Z: 1}, 0
				launches[i] = func() error {
					w := ws[next%len(ws)]
					next++
					args := []any{x.Ptr, sh.K, cuda.Ptr(0), float32(0), w.Ptr, bias.Ptr, out.Ptr, sh.rows, 0, B, sh.K, sh.rows, split}
					if kernel == "gemv_tc_split_bf16" {
						args = append(args, scratch.Ptr, count.Ptr)
					}
					return f.Launch(grid, cuda.D1(32*bd.warps), 0, s, args...)
				}
			}
			// Every build's output against the FMA entry's (which the tests
			// hold to float64), from the same weights (each launch's first
			// call reads the first copy), over NaNs.
			var ref []float64
			for i, bd := range builds {
				if err := cuda.Fill32(out.Ptr, 0x7fc00000, B*sh.rows, s); err != nil {
					b.Fatal(err)
				}
				if err := launches[i](); err != nil {
					b.Fatal(err)
				}
				got := download(b, s, out, B*sh.rows)
				if i == 0 {
					for _, v := range got {
						ref = append(ref, float64(v))
					}
				} else if e := relErr(got, ref); e > 1e-5 {
					b.Fatalf("%s %s: rel err %.3g against the FMA entry", sh.name, bd.name, e)
				}
			}
			times := timer.turns(b, inTrains(launches, train), rounds, runs)
			line := fmt.Sprintf("gemv B=%d %-8s %5d x %4d (%5.1f MB)", B, sh.name, sh.rows, sh.K, bytes/1e6)
			base := gputest.Median(times[0]) / train
			for i, bd := range builds {
				m := gputest.Median(times[i]) / train
				line += fmt.Sprintf("  %s %.2f us (%.2fx, %.2f TB/s, %.0f%%)", bd.name, 1e3*m, base/m, bytes/(m*1e-3)/1e12,
					100*bytes/(m*1e-3)/4.8e12)
			}
			b.Log(line)
			if parts != nil {
				parts.Free()
			}
			for _, buf := range append(ws, x, bias, out, scratch, count) {
				buf.Free()
			}
		}
	}
}

// rotatingWeights uploads random bf16 weights of rows x K in as many copies
// as make 200 MB or more, past L2's 50 MB, so that a benchmark rotating over
// them reads its weights from memory, as a step's layers do.
func rotatingWeights(b *testing.B, s *cuda.Stream, rows, K int) []*cuda.Buffer {
	copies := max(1, (200<<20)/(2*rows*K)+1)
	ws := make([]*cuda.Buffer, 0, copies)
	for range copies {
		_, packed := bf16Bits(randn(rows*K, 0.05))
		ws = append(ws, upload(b, s, packed))
	}
	return ws
}
