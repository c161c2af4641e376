package kernels_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
	gpuengine "github.com/mambago/mambago/mambago/gpu"
)

// BenchmarkDTProj times dt_proj at the 130m, 1.4b and 2.8b shapes (T=2048):
// dt_proj_f32 on CUDA cores, then dt_proj_tc_f32 compiled with each setting
// of its tile constants (kernels/dtproj.cu), each checked against
// dt_proj_f32's output first. It reports the median launch in µs, timed
// with CUDA events.
func BenchmarkDTProj(b *testing.B) {
	d := gputest.Device(b)
	fn, s := gpu(b)
	src, err := kernels.Source("dtproj.cu")
	if err != nil {
		b.Fatal(err)
	}
	start, end := mustEvent(b), mustEvent(b)
	defer start.Destroy()
	defer end.Destroy()
	for _, sh := range []struct {
		name       string
		rows, E, R int
	}{{"130m", 2048, 1536, 48}, {"1.4b", 2048, 4096, 128}, {"2.8b", 2048, 5120, 160}} {
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
		for _, opts := range []string{"cuda_cores", "", "-DTC_STAGES=2", "-DTC_MINB=2", "-DTC_STAGES=2 -DTC_MINB=2"} {
			lookup, p := fn, p
			p.DT = out.Ptr
			if opts != "cuda_cores" {
				cubin, err := cuda.Compile(src, "dtproj.cu", d.Arch(), append([]string{"--std=c++17"}, strings.Fields(opts)...)...)
				if err != nil {
					b.Fatal(err)
				}
				m, err := cuda.LoadModule(cubin)
				if err != nil {
					b.Fatal(err)
				}
				defer m.Unload()
				f, err := m.Function("dt_proj_tc_f32")
				if err != nil {
					b.Fatal(err)
				}
				lookup, p.TensorCores = func(string) *cuda.Function { return f }, true
			}
			b.Run(fmt.Sprintf("%s/%s", sh.name, opts), func(b *testing.B) {
				if err := p.Launch(lookup, s); err != nil {
					b.Fatal(err)
				}
				if e := relErr(download(b, s, out, sh.rows*sh.E), want64); e > 1e-5 {
					b.Fatalf("against dt_proj_f32: rel err %.3g", e)
				}
				var times []float64
				for b.Loop() {
					if err := start.Record(s); err != nil {
						b.Fatal(err)
					}
					if err := p.Launch(lookup, s); err != nil {
						b.Fatal(err)
					}
					if err := end.Record(s); err != nil {
						b.Fatal(err)
					}
					if err := end.Synchronize(); err != nil {
						b.Fatal(err)
					}
					ms, err := cuda.Elapsed(start, end)
					if err != nil {
						b.Fatal(err)
					}
					times = append(times, float64(ms))
				}
				slices.Sort(times)
				b.ReportMetric(1e3*times[len(times)/2], "us")
			})
		}
	}
}
