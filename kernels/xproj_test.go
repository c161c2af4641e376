package kernels_test

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
	gpuengine "github.com/mambago/mambago/mambago/gpu"
)

// xprojCase is one shape of x_proj: M rows of E channels into J columns.
type xprojCase struct{ M, E, J int }

// TestXProjKernel checks our x_proj (kernels/xproj.cu) in bf16 and f16
// against float64 sums of the products of u and W as stored: within 1e-5
// of the largest value, every element written (the output starts as NaN),
// and a second launch gives the same bits (the cluster adds its partials in
// a fixed order). The shapes take both entries (J up to 80 and up to 96),
// J short of a tile of columns, partial tiles of rows and a single row.
func TestXProjKernel(t *testing.T) {
	fn, s := gpu(t)
	if d := gputest.Device(t); d.Major != 9 || d.Minor != 0 {
		t.Skipf("xproj is compiled for sm_90a (clusters); this GPU is sm_%d%d", d.Major, d.Minor)
	}
	for _, k := range append([]xprojKnob{{name: "engine"}}, xprojKnobs...) {
		build := k.functions(t, fn)
		t.Run(k.name, func(t *testing.T) {
			gputest.Device(t) // a subtest runs on its own goroutine: the context made current on its thread
			testXProj(t, k.tma, k.slices, build, s)
		})
	}
}

// xprojKnob is a build of xproj.cu with other NVRTC options, or its
// entries that copy through tensor maps (tma: gpu.XProj.TMA), tested and
// timed beside the engine's; noPDL launches it without programmatic
// dependent launch (BenchmarkXProj's control); slices is the tensor-map
// entry's blocks a cluster (gpu.XProj.Slices).
type xprojKnob struct {
	name, opts string
	tma, noPDL bool
	slices     int
}

// takes reports whether the knob's entry serves E channels: a multiple of
// 64 a slice (of 4 slices, or of the tensor-map entry's 3), at most 2048.
func (k xprojKnob) takes(E int) bool {
	slices := 4
	if k.tma && k.slices != 0 {
		slices = k.slices
	}
	return E%(64*slices) == 0 && E/slices <= 512
}

// functions returns the knob's build's functions by name: engine's (the
// engine's build) where the knob has no NVRTC options of its own.
func (k xprojKnob) functions(tb testing.TB, engine func(string) *cuda.Function) func(string) *cuda.Function {
	if k.opts == "" {
		return engine
	}
	return xprojBuild(tb, k.opts)
}

// xprojKnobs are xproj.cu's builds besides the engine's: copies by
// cp.async (XP_BULK=0), and tiles through tensor maps, multiplied on wgmma
// (the default) or on mma.m16n8k16 (XP_WGMMA=0), and the tensor-map entry
// in clusters of 3. (Three more, W's
// rows in an order rotated by the cluster, the copies issued from warp 0
// alone and clusters of 8 slices over 128 rows, were measured slower on
// 2026-12-01 and taken out.)
var xprojKnobs = []xprojKnob{{name: "cp.async", opts: "-DXP_BULK=0"}, {name: "tensor maps", tma: true},
	{name: "tensor maps on mma.sync", opts: "-DXP_WGMMA=0", tma: true},
	{name: "tensor maps in clusters of 3", tma: true, slices: 3}}

// xprojBuild compiles xproj.cu for sm_90a with opts and returns its
// functions by name.
func xprojBuild(tb testing.TB, opts string) func(string) *cuda.Function {
	src, err := kernels.Source("xproj.cu")
	if err != nil {
		tb.Fatal(err)
	}
	return functions(tb, loadSourceFor(tb, "sm_90a", src, "xproj.cu", strings.Fields(opts)...))
}

// testXProj is TestXProjKernel for one build (tma: its tensor-map entries,
// in clusters of slices), at the cases whose E it takes.
func testXProj(t *testing.T, tma bool, slices int, fn func(string) *cuda.Function, s *cuda.Stream) {
	for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
		for _, tc := range []xprojCase{{2048, 1536, 80}, {300, 2048, 96}, {1, 1536, 80}, {130, 512, 44}, {64, 768, 16},
			{77, 1024, 92}, {130, 1152, 44}, {77, 1536, 92}} {
			M, E, J := tc.M, tc.E, tc.J
			if !(xprojKnob{tma: tma, slices: slices}).takes(E) {
				continue
			}
			u, uPacked := pack16(dt, randn(M*E, 1))
			w, wPacked := pack16(dt, randn(J*E, 0.05))
			bu, bw := upload(t, s, uPacked), upload(t, s, wPacked)
			want := gemmNT64(u, E, w, M, J, E)
			var first []float32
			for run := 0; run < 2; run++ {
				out := poisoned(t, s, M*J)
				x := gpuengine.XProj{U: bu.Ptr, W: bw.Ptr, DBL: out.Ptr, M: M, E: E, J: J, DType: dt, TMA: tma, Slices: slices}
				if err := x.Launch(fn, s); err != nil {
					t.Fatal(err)
				}
				got := download(t, s, out, M*J)
				label := fmt.Sprintf("%s %+v run %d", dt, tc, run)
				if e := relErr(got, want); !(e <= 1e-5) {
					t.Errorf("%s: rel err %.3g", label, e)
				}
				if run == 0 {
					first = got
				} else if i := firstDiff(got, first); i >= 0 {
					t.Errorf("%s: element %d differs from the first launch's (%v against %v)", label, i, got[i], first[i])
				}
			}
			t.Logf("%s %+v ok", dt, tc)
		}
	}
}

// BenchmarkXProj times our x_proj against cuBLASLt's tuned GEMM on the
// same operands (bf16, graphs of 20 launches back to back, all taking
// turns over 9 rounds; medians), at the 130m and 370m shapes: the engine's
// build with PDL (back to back, each launch's weight copies overlap the
// one before; in a prefill the conv comes before it) and without, and the
// builds of xprojKnobs with PDL. Each is checked against
// cuBLAS's output first (within 1e-5 of its largest value).
func BenchmarkXProj(b *testing.B) {
	d, fn, s, _, _ := kernelBench(b, "xproj.cu")
	if d.Major != 9 || d.Minor != 0 {
		b.Skipf("xproj is compiled for sm_90a (clusters); this GPU is sm_%d%d", d.Major, d.Minor)
	}
	knobs := []xprojKnob{{name: "ours"}, {name: "ours without PDL", noPDL: true}}
	for _, k := range xprojKnobs {
		k.name = "ours, " + k.name
		knobs = append(knobs, k)
	}
	builds := make([]func(string) *cuda.Function, len(knobs))
	for i, k := range knobs {
		builds[i] = k.functions(b, fn)
	}
	blas := tunedBLAS(b, s)
	dt := cuda.BF16
	for _, tc := range []struct {
		name string
		xprojCase
	}{
		{"130m_T2048", xprojCase{2048, 1536, 80}}, {"130m_T8192", xprojCase{8192, 1536, 80}},
		{"130m_T512", xprojCase{512, 1536, 80}}, {"370m_T2048", xprojCase{2048, 2048, 96}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			gputest.Device(b) // a sub-benchmark runs on its own goroutine: the context made current on its thread
			M, E, J := tc.M, tc.E, tc.J
			_, uPacked := pack16(dt, randn(M*E, 1))
			_, wPacked := pack16(dt, randn(J*E, 0.05))
			bu, bw := upload(b, s, uPacked), upload(b, s, wPacked)
			ref := poisoned(b, s, M*J)
			runs := []func() error{func() error { return blas.Gemm(M, J, E, bu.Ptr, E, bw.Ptr, ref.Ptr, J, 0, dt, cuda.F32) }}
			var outs []*cuda.Buffer
			var timed []xprojKnob // the knobs that take E
			for i, build := range builds {
				if !knobs[i].takes(E) {
					continue
				}
				out := poisoned(b, s, M*J)
				x := gpuengine.XProj{U: bu.Ptr, W: bw.Ptr, DBL: out.Ptr, M: M, E: E, J: J, DType: dt,
					PDL: !knobs[i].noPDL, TMA: knobs[i].tma, Slices: knobs[i].slices}
				outs, timed = append(outs, out), append(timed, knobs[i])
				runs = append(runs, func() error { return x.Launch(build, s) })
			}
			for _, run := range runs { // cuBLASLt tunes outside the capture
				if err := run(); err != nil {
					b.Fatal(err)
				}
			}
			want := download(b, s, ref, M*J)
			want64 := make([]float64, len(want))
			for i, v := range want {
				want64[i] = float64(v)
			}
			for i, out := range outs {
				if e := relErr(download(b, s, out, M*J), want64); !(e <= 1e-5) {
					b.Fatalf("xproj %s, %s: rel err %.3g against cuBLAS", tc.name, timed[i].name, e)
				}
			}
			times := graphTurns(b, s, runs)
			mc := times[0]
			bytes := float64(2*(M*E+J*E) + 4*M*J)
			line := fmt.Sprintf("xproj %s: cuBLASLt %.2f us", tc.name, mc)
			for i, k := range timed {
				mo := times[i+1]
				line += fmt.Sprintf("; %s %.2f us (%.3fx; %.0f GB/s of u, W and dbl)", k.name, mo, mc/mo, bytes/mo/1e3)
			}
			b.Log(line)
		})
	}
}

// xpEvents names xproj.cu's XP_TIMELINE events, in its order.
var xpEvents = []string{"entry", "waited", "wlanded", "ulanded", "mma", "sync", "exit"}

// BenchmarkXProjTimeline times the stages of our x_proj from inside the
// kernel: a build with XP_TIMELINE records, for each block, when its thread
// 0 reaches each event (%globaltimer). Each launch is alone on the stream
// (PDL set, with no kernel before it to wait for), beside cuBLASLt's tuned
// GEMM launched alone the same way. After 5 warm-up launches, 15 launches
// each read back the blocks' rows; the line per shape and build gives the
// kernel's time (CUDA events around the one launch) and each event's time
// from the first block's start, for the median block and the last, as
// medians over the launches, in µs. Both entries (row copies and tensor
// maps, the latter in clusters of 4 and of 3) are checked against cuBLAS's
// output first. Each line ends with how
// many SMs ran more than one block of the launch (%smid at entry) and the
// median exit of blocks alone on their SM and of those sharing one: whether
// cluster placement makes x_proj's tail. XPROJ_TIMELINE_BUILDS, a
// comma-separated list of NVRTC options (e.g. "-DXP_RELAXED=0"), adds
// builds beside the default one.
func BenchmarkXProjTimeline(b *testing.B) {
	d, _, s, src, timer := kernelBench(b, "xproj.cu")
	if d.Major != 9 || d.Minor != 0 {
		b.Skipf("xproj is compiled for sm_90a (clusters); this GPU is sm_%d%d", d.Major, d.Minor)
	}
	type build struct {
		name     string
		fn       func(string) *cuda.Function
		timeline cuda.Ptr
		sm       cuda.Ptr // xp_sm
		bytes    int
	}
	var builds []build
	opts := []string{""}
	if extra := os.Getenv("XPROJ_TIMELINE_BUILDS"); extra != "" {
		opts = append(opts, strings.Split(extra, ",")...)
	}
	for _, o := range opts {
		mod := loadSourceFor(b, "sm_90a", src, "xproj.cu", append([]string{"-DXP_TIMELINE=1"}, strings.Fields(o)...)...)
		timeline, bytes := global(b, mod, "xp_timeline")
		sm, _ := global(b, mod, "xp_sm")
		builds = append(builds, build{strings.TrimSpace(o), functions(b, mod), timeline, sm, bytes})
	}
	blas := tunedBLAS(b, s)
	dt, events := cuda.BF16, len(xpEvents)
	for range b.N {
		for _, tc := range []struct {
			name string
			xprojCase
		}{{"130m_T2048", xprojCase{2048, 1536, 80}}, {"130m_T8192", xprojCase{8192, 1536, 80}},
			{"130m_T512", xprojCase{512, 1536, 80}}} {
			M, E, J := tc.M, tc.E, tc.J
			maxBlocks := 4 * ((M + 63) / 64)
			if maxBlocks*events*8 > builds[0].bytes {
				b.Fatalf("%s: %d blocks, xp_timeline holds %d", tc.name, maxBlocks, builds[0].bytes/(8*events))
			}
			_, uPacked := pack16(dt, randn(M*E, 1))
			_, wPacked := pack16(dt, randn(J*E, 0.05))
			bu, bw := upload(b, s, uPacked), upload(b, s, wPacked)
			ref, out := poisoned(b, s, M*J), poisoned(b, s, M*J)
			gemm := func() error { return blas.Gemm(M, J, E, bu.Ptr, E, bw.Ptr, ref.Ptr, J, 0, dt, cuda.F32) }
			var blasMs []float64
			for run := range 20 {
				if ms := timer.ms(b, gemm); run >= 5 {
					blasMs = append(blasMs, 1e3*ms)
				}
			}
			want := download(b, s, ref, M*J)
			want64 := make([]float64, len(want))
			for i, v := range want {
				want64[i] = float64(v)
			}
			b.Logf("timeline %s cuBLASLt alone %.2f us", tc.name, gputest.Median(blasMs))
			for _, bl := range builds {
				for _, v := range []struct {
					name   string
					tma    bool
					slices int
				}{{"rows", false, 4}, {"tensor maps", true, 4}, {"tensor maps, clusters of 3", true, 3}} {
					blocks := v.slices * ((M + 63) / 64)
					x := gpuengine.XProj{U: bu.Ptr, W: bw.Ptr, DBL: out.Ptr, M: M, E: E, J: J, DType: dt, PDL: true, TMA: v.tma,
						Slices: v.slices}
					launch := func() error { return x.Launch(bl.fn, s) }
					if err := launch(); err != nil {
						b.Fatal(err)
					}
					if e := relErr(download(b, s, out, M*J), want64); !(e <= 1e-5) {
						b.Fatalf("%s %s: rel err %.3g against cuBLAS", tc.name, v.name, e)
					}
					// Each launch's blocks by the SMs they shared: the median
					// exit of those alone on their SM and of those beside
					// another block of the launch.
					var shared []float64
					var exitAlone, exitShared []float64
					each := func(rows []int64) {
						sms := make([]int32, blocks)
						if err := cuda.CopyOut(sms, bl.sm, s); err != nil {
							b.Fatal(err)
						}
						count := map[int32]int{}
						for _, m := range sms {
							count[m]++
						}
						start, n, two := int64(math.MaxInt64), len(xpEvents), 0
						for blk := range blocks {
							start = min(start, rows[blk*n])
						}
						var alone, beside []float64
						for blk, m := range sms {
							exit := float64(rows[blk*n+n-1]-start) / 1e3
							if count[m] > 1 {
								beside = append(beside, exit)
							} else {
								alone = append(alone, exit)
							}
						}
						for _, c := range count {
							if c > 1 {
								two++
							}
						}
						shared = append(shared, float64(two))
						if len(alone) > 0 {
							exitAlone = append(exitAlone, gputest.Median(alone))
						}
						if len(beside) > 0 {
							exitShared = append(exitShared, gputest.Median(beside))
						}
					}
					kernel, summary := blockTimeline(b, s, timer, bl.timeline, blocks, xpEvents, launch, each)
					summary += fmt.Sprintf("; SMs holding more than one block: %.0f (median over launches); exit, median block alone on its SM %.2f, sharing one %.2f",
						gputest.Median(shared), medianOrNaN(exitAlone), medianOrNaN(exitShared))
					name := v.name
					if bl.name != "" {
						name += " " + bl.name
					}
					b.Logf("timeline %s %-11s kernel %.2f us; from the first block's start (median block / last):%s",
						tc.name, name, kernel, summary)
				}
			}
		}
	}
}

// medianOrNaN is gputest.Median, or NaN for no values.
func medianOrNaN(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return gputest.Median(v)
}
