package kernels_test

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	gpuengine "github.com/mambago/mambago/mambago/gpu"
)

// onePassKnob is a setting of scan_onepass.cu's tuning knobs: other NVRTC
// options, or, with spt set, the tile and ring at spt states a thread
// (OP_TL2 and OP_BUF2, or OP_TL4 and OP_BUF4), which fix its shared memory;
// or, with helpers, a build launched as its entry whose warps specialize
// (gpu.Scan.Helpers, 2 states a thread), its ring (OP_WS_BUF) in ring and
// its tiles of partial sums (OP_WS_SP) in sums where set, and with dt as
// the entry that computes the time step too (gpu.Scan.DTProducts, one
// product: the bf16 engine's).
type onePassKnob struct {
	opts                  string
	spt, tile, ring, sums int
	helpers, dt           bool
}

// onePassKnobs are the settings BenchmarkOnePass compiles: the first is the
// engine's.
var onePassKnobs = []onePassKnob{
	{}, {helpers: true}, {helpers: true, opts: "-DOP_WS_WAIT=0"}, {helpers: true, opts: "-DOP_WS_WAIT=2 -DOP_WS_NS=200"},
	{helpers: true, opts: "-DOP_WS_NS=200"}, {helpers: true, opts: "-DOP_WS_NS=5000"},
	{helpers: true, opts: "-DOP_WS_BUF=4", ring: 4}, {helpers: true, opts: "-DOP_WS_BUF=2", ring: 2},
	{helpers: true, dt: true}, {helpers: true, dt: true, opts: "-DOP_WS_SP=3 -DOP_WS_BUF=3", ring: 3, sums: 3},
	{helpers: true, dt: true, opts: "-DOP_WS_BUF=3", ring: 3}, {helpers: true, dt: true, opts: "-DOP_WS_WAIT=2 -DOP_WS_NS=2000"},
	{helpers: true, dt: true, opts: "-DOP_EARLY=1"},
	{opts: "-DOP_BCI=1"},
	{spt: 2, tile: 32, ring: 3}, {spt: 2, tile: 32, ring: 4}, {spt: 2, tile: 64, ring: 2},
	{spt: 2, tile: 64, ring: 4}, {spt: 2, tile: 128, ring: 2},
	{spt: 4, tile: 32, ring: 3}, {spt: 4, tile: 64, ring: 2}, {spt: 4, tile: 16, ring: 4},
}

// options are the knob's NVRTC options.
func (k onePassKnob) options() string {
	if k.spt == 0 {
		return k.opts
	}
	return fmt.Sprintf("-DOP_TL%d=%d -DOP_BUF%d=%d", k.spt, k.tile, k.spt, k.ring)
}

// applies says whether the knob changes the build at spt states a thread:
// a tile and ring of the other width leave it the engine's.
func (k onePassKnob) applies(spt int) bool {
	if k.helpers {
		return spt == 2
	}
	return k.spt == 0 || k.spt == spt
}

// name is the knob's name in the benchmark's lines.
func (k onePassKnob) name() string {
	switch {
	case k.helpers:
		name := "helpers"
		if k.dt {
			name += "+dt"
		}
		return name + strings.ReplaceAll(k.opts, " ", "")
	case k.options() == "":
		return "engine"
	}
	return k.options()
}

// shared is the dynamic shared memory of the knob's build at spt states a
// thread, bf16; 0 where it is the engine's.
func (k onePassKnob) shared(spt int) int {
	if k.helpers && (k.ring > 0 || k.sums > 0) {
		return gpuengine.HelpersShared(k.ring, k.sums, 2, k.dt)
	}
	if k.spt != spt {
		return 0
	}
	return gpuengine.OnePassShared(spt, k.tile, k.ring, 2)
}

// BenchmarkOnePass times the one-pass scan alone, bf16, compiled with each
// setting of its tuning knobs (onePassKnobs) that changes the build at a
// shape, at the shapes where the engine
// runs it: 2 states a thread at B=1 (130m at T=2048 and T=8192, 370m, 1.4b)
// and 4 at B=8 (130m). Every setting's output (y and the state) must equal
// the engine's setting's bit for bit: the knobs move data and code, not
// arithmetic. (The settings with dt compute the time step from dt_low,
// so they must equal the first such setting's bits instead.)
// It launches them as gpu.Scan does (its grid and shared memory), timed with
// CUDA events, the settings taking turns: 9 rounds of 25 launches each, so
// that the clock's drift over the run falls on all of them alike. It logs a
// line per shape: each setting's median launch in µs, and its ratio to the
// engine's. ONEPASS_KNOBS, a comma-separated list of the settings' names
// (as the lines give them), times only those beside the engine's.
func BenchmarkOnePass(b *testing.B) {
	d, _, s, src, timer := kernelBench(b, "scan_onepass.cu")
	const rounds, runs = 9, 25
	knobs := onePassKnobs
	if only := os.Getenv("ONEPASS_KNOBS"); only != "" {
		names := strings.Split(only, ",")
		for _, name := range names {
			if !slices.ContainsFunc(onePassKnobs, func(k onePassKnob) bool { return k.name() == name }) {
				b.Fatalf("ONEPASS_KNOBS: no setting %q in onePassKnobs", name)
			}
		}
		knobs = slices.DeleteFunc(slices.Clone(knobs[1:]), func(k onePassKnob) bool {
			return !slices.Contains(names, k.name())
		})
		knobs = append([]onePassKnob{onePassKnobs[0]}, knobs...)
	}
	mods := make([]*cuda.Module, len(knobs))
	for i, k := range knobs {
		mods[i] = loadSource(b, d, src, "scan_onepass.cu", strings.Fields(k.options())...)
	}
	for range b.N {
		for _, sh := range []struct {
			name         string
			B, T, E, spt int
		}{{"130m_B1_T2048", 1, 2048, 1536, 2}, {"130m_B1_T8192", 1, 8192, 1536, 2}, {"370m_B1_T2048", 1, 2048, 2048, 2},
			{"1.4b_B1_T2048", 1, 2048, 4096, 2}, {"130m_B8_T2048", 8, 2048, 1536, 4}} {
			rows := sh.B * sh.T
			in := newScanBenchInputs(b, s, sh.B, sh.T, sh.E)
			want := map[bool][]float32{} // by knob.dt
			var timed []onePassKnob
			var launches []func() error
			for i, k := range knobs {
				if !k.applies(sh.spt) {
					continue
				}
				entry := fmt.Sprintf("scan_onepass%d_bf16", sh.spt)
				switch {
				case k.dt:
					entry = "scan_onepass2wd_bf16"
				case k.helpers:
					entry = "scan_onepass2w_bf16"
				}
				f, err := mods[i].Function(entry)
				if err != nil {
					b.Fatal(err)
				}
				sc := in.scan(sh.spt)
				sc.SharedBytes, sc.Helpers = k.shared(sh.spt), k.helpers
				if k.dt {
					sc.DTProducts, sc.DTW, sc.DTBias = 1, in.W.Ptr, in.bias.Ptr
					if !sc.FusedDTApplies() {
						b.Fatalf("%s %s: the scan does not compute the time step here", sh.name, k.name())
					}
				}
				if !sc.OnePassApplies() {
					b.Fatalf("%s: the one-pass scan does not apply", sh.name)
				}
				launch := func() error { return sc.Launch(func(string) *cuda.Function { return f }, s) }
				timed, launches = append(timed, k), append(launches, launch)
				// Checked once from the same state into a poisoned y: every
				// element written, and the engine's bits.
				in.reset(b)
				if err := launch(); err != nil {
					b.Fatal(err)
				}
				got := append(download(b, s, in.y, rows*sh.E/2), download(b, s, in.st, len(in.st0))...)
				for _, w := range got[:rows*sh.E/2] {
					if bits := math.Float32bits(w); bits&0x7f80 == 0x7f80 || bits>>16&0x7f80 == 0x7f80 {
						b.Fatalf("%s %s: y holds a NaN or Inf: an element the kernel did not write", sh.name, k.name())
					}
				}
				if want[k.dt] == nil {
					want[k.dt] = got
				} else if !sameBits(got, want[k.dt]) {
					b.Fatalf("%s %s: output differs from the first such setting's", sh.name, k.name())
				}
			}
			times := timer.turns(b, launches, rounds, runs)
			line := fmt.Sprintf("onepass %-14s", sh.name)
			base := gputest.Median(times[0])
			for i, k := range timed {
				m := gputest.Median(times[i])
				line += fmt.Sprintf("  %s %.2f us (%.3fx)", k.name(), 1e3*m, m/base)
			}
			b.Log(line)
			// Freed now rather than at cleanup, so that the shapes' buffers
			// do not all stay on the device together.
			in.free()
		}
	}
}

// BenchmarkScanSegments times the one-pass scan alone, bf16, at 2 states a
// thread, walked once against walked in gpu.OnePassSegments' segments and
// corrected by scan_fixup (both launches), at the B=1 shapes where the
// engine may walk in segments, the two taking turns (9 rounds of 25
// launches). Each from the same inputs: the outputs must agree within
// f32 rounding (the segments sum in another order). It logs a line per
// shape with each median in µs and the ratio.
func BenchmarkScanSegments(b *testing.B) {
	d, fn, s, _, timer := kernelBench(b, "scan_onepass.cu")
	const rounds, runs = 9, 25
	for range b.N {
		for _, sh := range []struct {
			name string
			T, E int
		}{{"130m_B1_T2048", 2048, 1536}, {"130m_B1_T8192", 8192, 1536}, {"370m_B1_T2048", 2048, 2048}} {
			rows := sh.T
			S := gpuengine.OnePassSegments(1, sh.T, sh.E, 2, d.SMs)
			in := newScanBenchInputs(b, s, 1, sh.T, sh.E)
			bv := poisoned(b, s, rows*sh.E)
			var outs [2][]float32
			var launches [2]func() error
			var scratch [2]*cuda.Buffer
			for i, segs := range []int{0, S} {
				sc := in.scan(2)
				sc.Segments, sc.V, sc.LDV, sc.SMs = segs, bv.Ptr, sh.E, d.SMs
				scratch[i] = poisoned(b, s, max(1, sc.ScratchFloats()))
				sc.Scratch = scratch[i].Ptr
				launches[i] = func() error { return sc.Launch(fn, s) }
				in.reset(b) // the walk in segments overwrites dt
				if err := launches[i](); err != nil {
					b.Fatal(err)
				}
				outs[i] = append(bf16Unpack(download(b, s, in.y, rows*sh.E/2)), download(b, s, in.st, len(in.st0))...)
			}
			want := make([]float64, len(outs[0]))
			for i, v := range outs[0] {
				want[i] = float64(v)
			}
			if e := relErr(outs[1], want); !(e < 1e-2) { // y in bf16: a rounding apart at most
				b.Fatalf("%s: walked in %d segments, y and state rel err %.3g against walked once", sh.name, S, e)
			}
			times := timer.turns(b, launches[:], rounds, runs)
			once, segs := gputest.Median(times[0]), gputest.Median(times[1])
			b.Logf("scan segments %-14s once %.2f us, in %d segments with scan_fixup %.2f us: %.3fx", sh.name,
				1e3*once, S, 1e3*segs, once/segs)
			in.free()
			for _, buf := range []*cuda.Buffer{bv, scratch[0], scratch[1]} {
				buf.Free()
			}
		}
	}
}

// bf16Unpack is the values of bf16 elements packed two to a float32 slot
// (bf16Bits' layout).
func bf16Unpack(packed []float32) []float32 {
	v := make([]float32, 2*len(packed))
	for i, p := range packed {
		w := math.Float32bits(p)
		v[2*i], v[2*i+1] = math.Float32frombits(w<<16), math.Float32frombits(w&^0xffff)
	}
	return v
}

// scanBenchInputs are a random bf16 scan of B sequences of T positions and
// E channels on the device, for the scan's benchmarks: N = 16 states, dt
// rank R = 48, dt = softplus(x - 2) for standard normal x, A2 = -(1 + n)
// log2 e (S4D's initialization), and a y to poison; dt and the carried
// state also on the host, to restore (reset). W and bias are dt_proj's, for
// the entry that computes the time step from dbl's dt_low (about
// softplus(x - 2) again).
type scanBenchInputs struct {
	s                                     *cuda.Stream
	B, T, E                               int
	dt0, st0                              []float32
	dt, A2, dbl, u, D, xz, st, y, W, bias *cuda.Buffer
}

const scanBenchN, scanBenchR = 16, 48

// newScanBenchInputs draws and uploads a fresh set of inputs.
func newScanBenchInputs(b *testing.B, s *cuda.Stream, B, T, E int) *scanBenchInputs {
	rows, N := B*T, scanBenchN
	in := &scanBenchInputs{s: s, B: B, T: T, E: E, dt0: randn(rows*E, 1), st0: randn(B*E*N, 1)}
	for i, v := range in.dt0 {
		in.dt0[i] = float32(softplus(float64(v) - 2))
	}
	A2 := make([]float32, E*N)
	for i := range A2 {
		A2[i] = -float32(1+i%N) * math.Log2E
	}
	_, u := bf16Bits(randn(rows*E, 1))
	in.dt, in.A2, in.dbl, in.u = upload(b, s, in.dt0), upload(b, s, A2), upload(b, s, randn(rows*(scanBenchR+2*N), 1)), upload(b, s, u)
	in.D, in.xz = upload(b, s, randn(E, 1)), upload(b, s, randn(rows*2*E, 1))
	in.st, in.y = upload(b, s, in.st0), poisoned(b, s, rows*E/2)
	bias := make([]float32, E)
	for i := range bias {
		bias[i] = -2
	}
	in.W, in.bias = upload(b, s, randn(E*scanBenchR, 1/math.Sqrt(scanBenchR))), upload(b, s, bias)
	return in
}

// scan is the one-pass scan at spt states a thread over the inputs, z
// read from xz's second half as the engine lays it out.
func (in *scanBenchInputs) scan(spt int) gpuengine.Scan {
	return gpuengine.Scan{DT: in.dt.Ptr, A2: in.A2.Ptr, DBL: in.dbl.Ptr, LDD: scanBenchR + 2*scanBenchN, R: scanBenchR,
		U: in.u.Ptr, D: in.D.Ptr, Z: in.xz.Offset(4 * in.E), LDZ: 2 * in.E, State: in.st.Ptr, Y: in.y.Ptr, B: in.B,
		T: in.T, E: in.E, N: scanBenchN, DType: cuda.BF16, OnePass: spt}
}

// reset restores dt and the carried state and fills y with bf16 NaNs.
func (in *scanBenchInputs) reset(b *testing.B) {
	if err := cuda.CopyIn(in.dt.Ptr, in.dt0, in.s); err != nil {
		b.Fatal(err)
	}
	if err := cuda.CopyIn(in.st.Ptr, in.st0, in.s); err != nil {
		b.Fatal(err)
	}
	if err := cuda.Fill32(in.y.Ptr, 0x7fc07fc0, in.B*in.T*in.E/2, in.s); err != nil { // bf16 NaN in both halves
		b.Fatal(err)
	}
}

// free releases the device buffers.
func (in *scanBenchInputs) free() {
	for _, buf := range []*cuda.Buffer{in.dt, in.A2, in.dbl, in.u, in.D, in.xz, in.st, in.y, in.W, in.bias} {
		buf.Free()
	}
}

// opEvents names scan_onepass.cu's OP_TIMELINE events, in its order.
var opEvents = []string{"entry", "waited", "issued", "landed0", "dt0", "walk0", "walk1", "walkend", "outend", "dtend", "issued0", "dtw", "cready", "cwaited", "dtmma0", "centry", "synced"}

// BenchmarkOnePassTimeline times the stages of the engine's bf16 one-pass
// scan at B=1 (warps that specialize, the time step computed in its tiles)
// from inside the kernel: a build with OP_TIMELINE records, for each block,
// when its first thread of each role reaches each event (%globaltimer).
// After 5 warm-up launches, 15 launches each read back the blocks' rows;
// the line per shape and build gives the kernel's time (CUDA events) and
// each event's time from the first block's start, the median block's and
// the last block's, as medians over the launches, in µs: where the start
// (pdl_wait to the walk's first tile) and the end (the walk's last tile to
// the last outputs) of the scan go, the fixed part of its time.
// TIMELINE_BUILDS, a comma-separated list of NVRTC options (e.g.
// "-DOP_WS_BUF=3,-DOP_WS_WAIT=0"), adds builds beside the engine's; each
// must give the engine's bits. The build "tma" is the engine's entry whose
// tiles come through the copy engine (gpu.Scan.TMA).
func BenchmarkOnePassTimeline(b *testing.B) {
	d, _, s, src, timer := kernelBench(b, "scan_onepass.cu")
	builds := []string{""}
	if extra := os.Getenv("TIMELINE_BUILDS"); extra != "" {
		builds = append(builds, strings.Split(extra, ",")...)
	}
	type build struct {
		f        *cuda.Function
		timeline cuda.Ptr
		bytes    int
		tma      bool // the entry whose tiles come through the copy engine (gpu.Scan.TMA)
	}
	compiled := make([]build, len(builds))
	for i, opts := range builds {
		tma := opts == "tma"
		if tma {
			opts = ""
		}
		mod := loadSource(b, d, src, "scan_onepass.cu", append([]string{"-DOP_TIMELINE=1"}, strings.Fields(opts)...)...)
		entry := "scan_onepass2wd_bf16"
		if tma {
			entry = "scan_onepass2wdt_bf16"
		}
		f, err := mod.Function(entry)
		if err != nil {
			b.Fatal(err)
		}
		timeline, bytes := global(b, mod, "op_timeline")
		compiled[i] = build{f: f, timeline: timeline, bytes: bytes, tma: tma}
	}
	events := len(opEvents)
	for range b.N {
		for _, sh := range []struct {
			name string
			T, E int
		}{{"130m_B1_T2048", 2048, 1536}, {"130m_B1_T8192", 8192, 1536}, {"370m_B1_T2048", 2048, 2048},
			{"1.4b_B1_T2048", 2048, 4096}} {
			in := newScanBenchInputs(b, s, 1, sh.T, sh.E)
			blocks := (sh.E + 15) / 16
			var want []float32
			for i, bl := range compiled {
				sc := in.scan(2)
				sc.Helpers, sc.DTProducts, sc.DTW, sc.DTBias, sc.TMA = true, 1, in.W.Ptr, in.bias.Ptr, bl.tma
				if !sc.FusedDTApplies() || bl.tma && !sc.TMAApplies() {
					b.Fatalf("%s: the scan does not compute the time step here, or not through the copy engine", sh.name)
				}
				if blocks*events*8 > bl.bytes {
					b.Fatalf("%s: %d blocks, op_timeline holds %d", sh.name, blocks, bl.bytes/(8*events))
				}
				launch := func() error { return sc.Launch(func(string) *cuda.Function { return bl.f }, s) }
				in.reset(b)
				if err := launch(); err != nil {
					b.Fatal(err)
				}
				got := append(download(b, s, in.y, sh.T*sh.E/2), download(b, s, in.st, len(in.st0))...)
				if want == nil {
					want = got
				} else if !sameBits(got, want) {
					b.Fatalf("%s %s: output differs from the engine's build", sh.name, builds[i])
				}
				kernel, summary := blockTimeline(b, s, timer, bl.timeline, blocks, opEvents, launch, nil)
				name := builds[i]
				if name == "" {
					name = "engine"
				}
				b.Logf("timeline %-14s %-14s kernel %.2f us; from the first block's start (median block / last):%s",
					sh.name, name, kernel, summary)
			}
			in.free()
		}
	}
}
