package kernels_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	gpuengine "github.com/mambago/mambago/mambago/gpu"
)

// onePassKnob is a setting of scan_onepass.cu's tuning knobs: other NVRTC
// options, or, with spt set, the tile and ring at spt states a thread
// (OP_TL2 and OP_BUF2, or OP_TL4 and OP_BUF4), which fix its shared memory.
type onePassKnob struct {
	opts            string
	spt, tile, ring int
}

// onePassKnobs are the settings BenchmarkOnePass compiles: the first is the
// engine's.
var onePassKnobs = []onePassKnob{
	{}, {opts: "-DOP_BCI=1"},
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
func (k onePassKnob) applies(spt int) bool { return k.spt == 0 || k.spt == spt }

// shared is the dynamic shared memory of the knob's build at spt states a
// thread, bf16; 0 where it is the engine's.
func (k onePassKnob) shared(spt int) int {
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
// arithmetic.
// It launches them as gpu.Scan does (its grid and shared memory), timed with
// CUDA events, the settings taking turns: 9 rounds of 25 launches each, so
// that the clock's drift over the run falls on all of them alike. It logs a
// line per shape: each setting's median launch in µs, and its ratio to the
// engine's.
func BenchmarkOnePass(b *testing.B) {
	d, _, s, src, timer := kernelBench(b, "scan_onepass.cu")
	const N, R = 16, 48
	const rounds, runs = 9, 25
	mods := make([]*cuda.Module, len(onePassKnobs))
	for i, k := range onePassKnobs {
		mods[i] = loadSource(b, d, src, "scan_onepass.cu", strings.Fields(k.options())...)
	}
	for range b.N {
		for _, sh := range []struct {
			name         string
			B, T, E, spt int
		}{{"130m_B1_T2048", 1, 2048, 1536, 2}, {"130m_B1_T8192", 1, 8192, 1536, 2}, {"370m_B1_T2048", 1, 2048, 2048, 2},
			{"1.4b_B1_T2048", 1, 2048, 4096, 2}, {"130m_B8_T2048", 8, 2048, 1536, 4}} {
			rows, ld := sh.B*sh.T, R+2*N
			dt := randn(rows*sh.E, 1)
			for i, v := range dt {
				dt[i] = float32(softplus(float64(v) - 2))
			}
			A2 := make([]float32, sh.E*N)
			for i := range A2 {
				A2[i] = -float32(1+i%N) * math.Log2E
			}
			_, u := bf16Bits(randn(rows*sh.E, 1))
			st0 := randn(sh.B*sh.E*N, 1)
			bdt, bA2, bdbl, bu := upload(b, s, dt), upload(b, s, A2), upload(b, s, randn(rows*ld, 1)), upload(b, s, u)
			bD, bz := upload(b, s, randn(sh.E, 1)), upload(b, s, randn(rows*2*sh.E, 1))
			bst, by := upload(b, s, st0), poisoned(b, s, rows*sh.E/2)
			var want []float32
			var knobs []onePassKnob
			var launches []func() error
			for i, k := range onePassKnobs {
				if !k.applies(sh.spt) {
					continue
				}
				f, err := mods[i].Function(fmt.Sprintf("scan_onepass%d_bf16", sh.spt))
				if err != nil {
					b.Fatal(err)
				}
				sc := gpuengine.Scan{DT: bdt.Ptr, A2: bA2.Ptr, DBL: bdbl.Ptr, LDD: ld, R: R, U: bu.Ptr, D: bD.Ptr,
					Z: bz.Offset(4 * sh.E), LDZ: 2 * sh.E, State: bst.Ptr, Y: by.Ptr, B: sh.B, T: sh.T, E: sh.E, N: N,
					DType: cuda.BF16, OnePass: sh.spt, SharedBytes: k.shared(sh.spt)}
				if !sc.OnePassApplies() {
					b.Fatalf("%s: the one-pass scan does not apply", sh.name)
				}
				launch := func() error { return sc.Launch(func(string) *cuda.Function { return f }, s) }
				knobs, launches = append(knobs, k), append(launches, launch)
				// Checked once from the same state into a poisoned y: every
				// element written, and the engine's bits.
				if err := cuda.CopyIn(bst.Ptr, st0, s); err != nil {
					b.Fatal(err)
				}
				if err := cuda.Fill32(by.Ptr, 0x7fc07fc0, rows*sh.E/2, s); err != nil { // bf16 NaN in both halves
					b.Fatal(err)
				}
				if err := launch(); err != nil {
					b.Fatal(err)
				}
				got := append(download(b, s, by, rows*sh.E/2), download(b, s, bst, sh.B*sh.E*N)...)
				for _, w := range got[:rows*sh.E/2] {
					if bits := math.Float32bits(w); bits&0x7f80 == 0x7f80 || bits>>16&0x7f80 == 0x7f80 {
						b.Fatalf("%s %q: y holds a NaN or Inf: an element the kernel did not write", sh.name, k.options())
					}
				}
				if want == nil {
					want = got
				} else if !slices.EqualFunc(got, want, func(x, y float32) bool {
					return math.Float32bits(x) == math.Float32bits(y)
				}) {
					b.Fatalf("%s %q: output differs from the engine's setting's", sh.name, k.options())
				}
			}
			times := make([][]float64, len(knobs))
			for range rounds {
				for i := range knobs {
					for range runs {
						times[i] = append(times[i], timer.ms(b, launches[i]))
					}
				}
			}
			line := fmt.Sprintf("onepass %-14s", sh.name)
			base := gputest.Median(times[0])
			for i, k := range knobs {
				opts := k.options()
				if opts == "" {
					opts = "engine"
				}
				m := gputest.Median(times[i])
				line += fmt.Sprintf("  %s %.2f us (%.3fx)", opts, 1e3*m, m/base)
			}
			b.Log(line)
			// Freed now rather than at cleanup, so that the shapes' buffers
			// do not all stay on the device together.
			for _, buf := range []*cuda.Buffer{bdt, bA2, bdbl, bu, bD, bz, bst, by} {
				buf.Free()
			}
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
	const N, R = 16, 48
	const rounds, runs = 9, 25
	for range b.N {
		for _, sh := range []struct {
			name string
			T, E int
		}{{"130m_B1_T2048", 2048, 1536}, {"130m_B1_T8192", 8192, 1536}, {"370m_B1_T2048", 2048, 2048}} {
			rows, ld := sh.T, R+2*N
			S := gpuengine.OnePassSegments(1, sh.T, sh.E, 2, d.SMs)
			dt := randn(rows*sh.E, 1)
			for i, v := range dt {
				dt[i] = float32(softplus(float64(v) - 2))
			}
			A2 := make([]float32, sh.E*N)
			for i := range A2 {
				A2[i] = -float32(1+i%N) * math.Log2E
			}
			_, u := bf16Bits(randn(rows*sh.E, 1))
			st0 := randn(sh.E*N, 1)
			bdt, bA2, bdbl, bu := upload(b, s, dt), upload(b, s, A2), upload(b, s, randn(rows*ld, 1)), upload(b, s, u)
			bD, bz := upload(b, s, randn(sh.E, 1)), upload(b, s, randn(rows*2*sh.E, 1))
			bst, by := upload(b, s, st0), poisoned(b, s, rows*sh.E/2)
			bv := poisoned(b, s, rows*sh.E)
			var outs [2][]float32
			var launches [2]func() error
			var scratch [2]*cuda.Buffer
			for i, segs := range []int{0, S} {
				sc := gpuengine.Scan{DT: bdt.Ptr, A2: bA2.Ptr, DBL: bdbl.Ptr, LDD: ld, R: R, U: bu.Ptr, D: bD.Ptr,
					Z: bz.Offset(4 * sh.E), LDZ: 2 * sh.E, State: bst.Ptr, Y: by.Ptr, B: 1, T: sh.T, E: sh.E, N: N,
					DType: cuda.BF16, OnePass: 2, Segments: segs, V: bv.Ptr, LDV: sh.E, SMs: d.SMs}
				scratch[i] = poisoned(b, s, max(1, sc.ScratchFloats()))
				sc.Scratch = scratch[i].Ptr
				launches[i] = func() error { return sc.Launch(fn, s) }
				// From the same state and dt (the walk in segments overwrites dt) into a poisoned y.
				if err := cuda.CopyIn(bst.Ptr, st0, s); err != nil {
					b.Fatal(err)
				}
				if err := cuda.CopyIn(bdt.Ptr, dt, s); err != nil {
					b.Fatal(err)
				}
				if err := cuda.Fill32(by.Ptr, 0x7fc07fc0, rows*sh.E/2, s); err != nil {
					b.Fatal(err)
				}
				if err := launches[i](); err != nil {
					b.Fatal(err)
				}
				outs[i] = append(bf16Unpack(download(b, s, by, rows*sh.E/2)), download(b, s, bst, sh.E*N)...)
			}
			want := make([]float64, len(outs[0]))
			for i, v := range outs[0] {
				want[i] = float64(v)
			}
			if e := relErr(outs[1], want); !(e < 1e-2) { // y in bf16: a rounding apart at most
				b.Fatalf("%s: walked in %d segments, y and state rel err %.3g against walked once", sh.name, S, e)
			}
			var times [2][]float64
			for range rounds {
				for i := range launches {
					for range runs {
						times[i] = append(times[i], timer.ms(b, launches[i]))
					}
				}
			}
			once, segs := gputest.Median(times[0]), gputest.Median(times[1])
			b.Logf("scan segments %-14s once %.2f us, in %d segments with scan_fixup %.2f us: %.3fx", sh.name,
				1e3*once, S, 1e3*segs, once/segs)
			for _, buf := range []*cuda.Buffer{bdt, bA2, bdbl, bu, bD, bz, bst, by, bv, scratch[0], scratch[1]} {
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
