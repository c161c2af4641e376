package kernels_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	gpuengine "github.com/mambago/mambago/mambago/gpu"
)

// BenchmarkDTProj times dt_proj at the 130m, 1.4b and 2.8b shapes (T=2048;
// 1.4b also at T=128, 256, 512 and 1024, 2.8b at T=128 and 512 and at B=8),
// and at a ragged one (no dimension a multiple of its tile), for the
// checks: dt_proj_f32 on CUDA cores, then dt_proj_tc_f32 compiled with each
// setting of its tile constants (kernels/dtproj.cu), dt_proj_tc1_f32 (one
// TF32 product), the tall entries (128 rows a block), the short ones (32
// rows a block, all of R staged at once) and, on sm_90, dt_proj_wg_f32 (the
// warpgroup products), each checked against dt_proj_f32's output first.
// Then, to size the parts of dt_proj_tc_f32 and dt_proj_wg_f32, copies of
// them with a part cut out of the source (sizingCuts, wgSizingCuts; their
// outputs are wrong, and not checked): without the softplus, and with no
// products at all. It reports the median launch in µs, timed with CUDA
// events.
func BenchmarkDTProj(b *testing.B) {
	d, fn, s, src, timer := kernelBench(b, "dtproj.cu")
	// Each variant is compiled once: nil is dt_proj_f32 from fn.
	type variant struct {
		name   string
		f      *cuda.Function
		sizing bool
		bound  float64 // of the error against dt_proj_f32
		tall   bool    // a tall entry: DTProj launches it in blocks of 128 rows
		wg     bool    // the warpgroup entry (sm_90a)
		short  bool    // a short entry: blocks of 32 rows, all of R staged at once
	}
	var variants []variant
	for _, opts := range []string{"cuda_cores", "", "tc1", "-DTC_STAGES=2", "-DTC_MINB=2", "-DTC_STAGES=2 -DTC_MINB=2",
		"tall", "tc1 tall", "short", "tc1 short", "wg", "sizing:no_softplus", "sizing:no_products", "wg sizing:no_softplus",
		"wg sizing:no_products"} {
		if opts == "cuda_cores" {
			variants = append(variants, variant{name: opts, bound: 1e-5})
			continue
		}
		if cut, ok := strings.CutPrefix(opts, "wg sizing:"); ok { // dt_proj_wg_f32 with a part cut out, for sm_90a
			if d.Major != 9 || d.Minor != 0 {
				continue
			}
			vsrc := src
			for _, c := range wgSizingCuts[cut] {
				if !strings.Contains(vsrc, c[0]) {
					b.Fatalf("sizing %s: dtproj.cu has no %q any more", opts, c[0])
				}
				vsrc = strings.ReplaceAll(vsrc, c[0], c[1])
			}
			f, err := loadSourceFor(b, "sm_90a", vsrc, "dtproj.cu").Function("dt_proj_wg_f32")
			if err != nil {
				b.Fatal(err)
			}
			variants = append(variants, variant{name: "dt_proj_wg_f32 " + cut, f: f, sizing: true, wg: true})
			continue
		}
		if opts == "wg" {
			if d.Major != 9 || d.Minor != 0 {
				continue
			}
			// The engine's module: compiled for sm_90a, as the kernel needs.
			variants = append(variants, variant{name: "dt_proj_wg_f32", f: fn("dt_proj_wg_f32"), bound: 2e-3, wg: true})
			continue
		}
		entry, bound := "dt_proj_tc_f32", 1e-5
		tall, short := false, false
		switch opts {
		case "tc1": // operands rounded to TF32: 2^-11 each
			entry, bound, opts = "dt_proj_tc1_f32", 2e-3, ""
		case "tall":
			entry, opts, tall = "dt_proj_tc_tall_f32", "", true
		case "tc1 tall":
			entry, bound, opts, tall = "dt_proj_tc1_tall_f32", 2e-3, "", true
		case "short":
			entry, opts, short = "dt_proj_tc_short_f32", "", true
		case "tc1 short":
			entry, bound, opts, short = "dt_proj_tc1_short_f32", 2e-3, "", true
		}
		vsrc, copts := src, strings.Fields(opts)
		cut, sizing := strings.CutPrefix(opts, "sizing:")
		if sizing {
			copts = nil
			for _, c := range sizingCuts[cut] {
				if !strings.Contains(vsrc, c[0]) {
					b.Fatalf("sizing %s: dtproj.cu has no %q any more", cut, c[0])
				}
				vsrc = strings.ReplaceAll(vsrc, c[0], c[1])
			}
		}
		f, err := loadSource(b, d, vsrc, "dtproj.cu", copts...).Function(entry)
		if err != nil {
			b.Fatal(err)
		}
		name := opts
		if entry != "dt_proj_tc_f32" {
			name = entry
		}
		variants = append(variants, variant{name, f, sizing, bound, tall, false, short})
	}
	for _, sh := range []struct {
		name       string
		rows, E, R int
	}{{"130m", 2048, 1536, 48}, {"1.4b_T128", 128, 4096, 128}, {"1.4b_T256", 256, 4096, 128},
		{"1.4b_T512", 512, 4096, 128}, {"1.4b_T1024", 1024, 4096, 128}, {"1.4b", 2048, 4096, 128},
		{"2.8b_T128", 128, 5120, 160}, {"2.8b_T512", 512, 5120, 160}, {"2.8b", 2048, 5120, 160},
		{"2.8b_B8", 8 * 2048, 5120, 160}, {"ragged", 1000, 4100, 136}} {
		ldd := sh.R + 32
		bdbl, bW, bb := upload(b, s, randn(sh.rows*ldd, 1)), upload(b, s, randn(sh.E*sh.R, 0.3)), upload(b, s, randn(sh.E, 1))
		ref, out := poisoned(b, s, sh.rows*sh.E), poisoned(b, s, sh.rows*sh.E)
		p := gpuengine.DTProj{DBL: bdbl.Ptr, LDD: ldd, R: sh.R, W: bW.Ptr, Bias: bb.Ptr, DT: ref.Ptr, Rows: sh.rows, E: sh.E}
		if err := p.Launch(fn, s); err != nil {
			b.Fatal(err)
		}
		want := download(b, s, ref, sh.rows*sh.E)
		want64 := make([]float64, len(want))
		for i, v := range want {
			want64[i] = float64(v)
		}
		for _, v := range variants {
			lookup, p := fn, p
			p.DT = out.Ptr
			if v.f != nil {
				lookup, p.TensorCores = func(string) *cuda.Function { return v.f }, true
				if v.tall { // one SM: DTProj takes the tall blocks' grid wherever there are three of them
					p.SMs = 1
				}
				if v.wg {
					p.OneTF32Product, p.Warpgroup, p.SMs = true, true, d.SMs
				}
				p.Short = v.short
			}
			if v.tall != strings.Contains(p.Kernel(), "_tall_") || v.short != strings.Contains(p.Kernel(), "_short_") {
				b.Fatalf("%s: DTProj would launch it as %s", v.name, p.Kernel())
			}
			launch := func() error { return p.Launch(lookup, s) }
			b.Run(fmt.Sprintf("%s/%s", sh.name, v.name), func(b *testing.B) {
				if err := launch(); err != nil {
					b.Fatal(err)
				}
				if e := relErr(download(b, s, out, sh.rows*sh.E), want64); e > v.bound && !v.sizing {
					b.Fatalf("against dt_proj_f32: rel err %.3g", e)
				}
				var times []float64
				for b.Loop() {
					times = append(times, timer.ms(b, launch))
				}
				b.ReportMetric(1e3*gputest.Median(times), "us")
			})
		}
	}
}

// sizingCuts are BenchmarkDTProj's source edits of dt_proj_tc_f32, each a
// list of (text, replacement).
var sizingCuts = map[string][][2]string{
	"no_softplus": {{"acc[m][n][2 * h] = softplus_f(acc[m][n][2 * h] + b0);", "acc[m][n][2 * h] += b0;"},
		{"acc[m][n][2 * h + 1] = softplus_f(acc[m][n][2 * h + 1] + b1);", "acc[m][n][2 * h + 1] += b1;"}},
	"no_products": {{"mma_tf32(acc[m][n], al[m], bh[n]);", ";"}, {"mma_tf32(acc[m][n], ah[m], bl[n]);", ";"},
		{"mma_tf32(acc[m][n], ah[m], bh[n]);", "acc[m][n][0] += __uint_as_float(ah[m][0] ^ bh[n][0] ^ al[m][0] ^ bl[n][0]);"}},
}

// wgSizingCuts are the same for dt_proj_wg_f32.
var wgSizingCuts = map[string][][2]string{
	"no_softplus": {{"d[4 * j + h] = softplus_f(d[4 * j + h] + (h % 2 ? b[j].y : b[j].x));",
		"d[4 * j + h] += h % 2 ? b[j].y : b[j].x;"}},
	"no_products": {{"float d[64];", "float d[64] = {};"},
		{"wg_mma_tf32(d, wg_desc(aA + off * 64 + in), wg_desc(aW + off * DW_BN + in), k > 0);", "d[k % 64] += off + in;"}},
}
