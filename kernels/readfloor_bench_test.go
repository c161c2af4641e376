package kernels_test

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
)

// readFloorSource holds BenchmarkReadFloor's kernels: each reads n16
// 16-byte words once and keeps nothing but a word that is never written
// (the loads cannot be dropped). Block b reads the b-th of gridDim.x equal
// contiguous spans, its threads U words at a time, all U loads in flight
// together. The load's cache hint is the entry's: plain (ld.global), cs
// (evict first), or nc256 (the non-coherent path, no L1 allocation, L2
// fetching 256 bytes at a miss).
const readFloorSource = `
template <int HINT>
__device__ __forceinline__ uint4 load16(const uint4 *p) {
    uint4 v;
    if constexpr (HINT == 0) {
        v = *p;
    } else if constexpr (HINT == 1) {
        v = __ldcs(p);
    } else {
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    }
    return v;
}

template <int U, int HINT>
__device__ void read_span(const uint4 *src, long long n16, unsigned *sink) {
    long long per = (n16 + gridDim.x - 1) / gridDim.x;
    long long beg = (long long)blockIdx.x * per, end = min(n16, beg + per);
    unsigned acc = 0;
    for (long long i = beg + threadIdx.x; i < end; i += (long long)blockDim.x * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            long long j = i + (long long)u * blockDim.x;
            v[u] = j < end ? load16<HINT>(src + j) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

#define READ_ENTRY(U, HINT, name) \
    extern "C" __global__ void read_##name(const uint4 *src, long long n16, unsigned *sink) { read_span<U, HINT>(src, n16, sink); }
READ_ENTRY(4, 0, u4)
READ_ENTRY(8, 0, u8)
READ_ENTRY(8, 1, u8_cs)
READ_ENTRY(4, 2, u4_nc256)
READ_ENTRY(8, 2, u8_nc256)
`

// BenchmarkReadFloor asks how far the one-sequence decode GEMVs are from
// the rate at which the H200 can read their weights at all. For each GEMV
// of the 1.4b and 2.8b step (in_proj, out_proj, the LM head; bf16) it
// times the engine's entry (gemv_r4_b1_bf16 at gpu.gemvSplit's split, and
// 4 for out_proj's long rows, as gpu.Engine.gemvPlan takes them) against
// the streaming entry (gemv_sb1_bf16) at several blocks an SM, walking
// whole slices (STREAM_WHOLE) or any K, its loads pinned (STREAM_PINNED)
// or not,
// whose outputs must have the gemv entry's bits, and against kernels that
// only read the same bytes (readFloorSource), at several grids, block
// sizes, depths and cache hints. in_proj and the LM head run with a norm
// weight, as in a step. Each timed run is 8
// launches back to back, as in a step graph, with the weights rotating
// over copies that exceed L2; the variants take turns (9 rounds of 20
// runs, CUDA events). It logs each one's median time a launch, its rate
// and its share of 4.8 TB/s. $READFLOOR_SHAPES (a regexp) picks shapes,
// and $READFLOOR_TURNS ("rounds,runs") other turns.
func BenchmarkReadFloor(b *testing.B) {
	const train = 8
	rounds, runs := 9, 20
	// READFLOOR_TURNS, "rounds,runs", shortens the timing (for ncu).
	if v := os.Getenv("READFLOOR_TURNS"); v != "" {
		if _, err := fmt.Sscanf(v, "%d,%d", &rounds, &runs); err != nil || rounds < 1 || runs < 1 {
			b.Fatalf("READFLOOR_TURNS %q: want rounds,runs (both 1 or more)", v)
		}
	}
	d, _, s, src, timer := kernelBench(b, "step.cu")
	step := functions(b, loadSource(b, d, src, "step.cu"))("gemv_r4_b1_bf16")
	// The streaming entry (gemv_sb1_) as built, and at other depths and
	// blocks an SM.
	type streamer struct {
		name       string
		f          *cuda.Function
		blocksAnSM int
	}
	var streams []streamer
	for _, v := range []struct {
		blocks        int
		whole, pinned bool
	}{{3, true, true}, {3, false, true}, {3, false, false}, {2, true, true}} {
		m := loadSource(b, d, src, "step.cu", fmt.Sprintf("-DSTREAM_BLOCKS=%d", v.blocks),
			fmt.Sprintf("-DSTREAM_WHOLE=%d", b2i(v.whole)), fmt.Sprintf("-DSTREAM_PINNED=%d", b2i(v.pinned)))
		name := fmt.Sprintf("stream %d", v.blocks)
		if !v.whole {
			name += " any"
		}
		if !v.pinned {
			name += " plain"
		}
		streams = append(streams, streamer{name, functions(b, m)("gemv_sb1_bf16"), v.blocks})
	}
	read := functions(b, loadSource(b, d, readFloorSource, "read_floor.cu"))
	sms := d.SMs
	type reader struct {
		entry           string
		blocksAnSM, thr int
	}
	readers := []reader{{"u8", 4, 256}, {"u8_cs", 4, 256}, {"u8_nc256", 8, 256}}
	sink := poisoned(b, s, 8*sms)
	// READFLOOR_SHAPES, a regexp, picks shapes by name (for ncu).
	only, err := regexp.Compile(os.Getenv("READFLOOR_SHAPES"))
	if err != nil {
		b.Fatalf("READFLOOR_SHAPES: %v", err)
	}
	for range b.N {
		for _, sh := range []struct {
			name           string
			rows, K, split int
			norm           bool // with a norm weight, as in_proj and the LM head run
		}{{"1.4b in_proj", 8192, 2048, 2, true}, {"1.4b out_proj", 2048, 4096, 4, false},
			{"2.8b in_proj", 10240, 2560, 2, true}, {"2.8b out_proj", 2560, 5120, 4, false},
			{"2.8b lm_head", 50280, 2560, 2, true}} {
			if !only.MatchString(sh.name) {
				continue
			}
			bytes := 2 * sh.rows * sh.K
			ws := rotatingWeights(b, s, sh.rows, sh.K)
			x, bias := upload(b, s, randn(sh.K, 1)), upload(b, s, randn(sh.rows, 1))
			normw, eps := cuda.Ptr(0), float32(0)
			if sh.norm {
				normw, eps = upload(b, s, randn(sh.K, 1)).Ptr, 1e-5
			}
			out := poisoned(b, s, sh.rows)
			names := []string{fmt.Sprintf("gemv split%d", sh.split)}
			next := 0
			gemv := func(w *cuda.Buffer) error {
				grid := cuda.D1((sh.rows + 8/sh.split*4 - 1) / (8 / sh.split * 4))
				return step.Launch(grid, cuda.D1(256), 0, s, x.Ptr, sh.K, normw, eps, w.Ptr, bias.Ptr,
					out.Ptr, sh.rows, 0, 1, sh.K, sh.rows, sh.split)
			}
			launches := []func() error{func() error {
				w := ws[next%len(ws)]
				next++
				return gemv(w)
			}}
			// Each streaming build's output has the gemv entry's bits.
			if err := gemv(ws[0]); err != nil {
				b.Fatal(err)
			}
			want := download(b, s, out, sh.rows)
			shared := 4 * sh.K // x', and normw beside it
			if sh.norm {
				shared *= 2
			}
			for _, st := range streams {
				stream := func(w *cuda.Buffer) error {
					return st.f.Launch(cuda.D1(st.blocksAnSM*sms), cuda.D1(256), shared, s, x.Ptr, sh.K, normw, eps, w.Ptr,
						bias.Ptr, out.Ptr, sh.rows, 0, 1, sh.K, sh.rows, sh.split, 0)
				}
				if err := cuda.Fill32(out.Ptr, 0x7fc00000, sh.rows, s); err != nil {
					b.Fatal(err)
				}
				if err := stream(ws[0]); err != nil {
					b.Fatal(err)
				}
				got := download(b, s, out, sh.rows)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						b.Fatalf("%s %s: row %d is %v, the gemv entry's %v", sh.name, st.name, i, got[i], want[i])
					}
				}
				names = append(names, st.name)
				ns := 0
				launches = append(launches, func() error {
					w := ws[ns%len(ws)]
					ns++
					return stream(w)
				})
			}
			for _, r := range readers {
				f := read("read_" + r.entry)
				names = append(names, fmt.Sprintf("%s %dx%d", r.entry, r.blocksAnSM, r.thr))
				nr := 0
				launches = append(launches, func() error {
					w := ws[nr%len(ws)]
					nr++
					return f.Launch(cuda.D1(r.blocksAnSM*sms), cuda.D1(r.thr), 0, s, w.Ptr, int64(bytes/16), sink.Ptr)
				})
			}
			times := timer.turns(b, inTrains(launches, train), rounds, runs)
			line := fmt.Sprintf("read floor %-13s %5d x %4d (%5.1f MB):", sh.name, sh.rows, sh.K, float64(bytes)/1e6)
			for i, name := range names {
				m := gputest.Median(times[i]) / train
				rate := float64(bytes) / (m * 1e-3) / 1e12
				line += fmt.Sprintf("  %s %.2f us (%.2f TB/s, %.0f%%)", name, 1e3*m, rate, 100*rate/4.8)
			}
			b.Log(line)
			for _, buf := range append(ws, x, bias, out) {
				buf.Free()
			}
		}
	}
}

// TestReadFloorSourceCompiles compiles BenchmarkReadFloor's kernels through
// NVRTC for sm_90 (no GPU needed), so CI catches a benchmark that would not
// build.
func TestReadFloorSourceCompiles(t *testing.T) {
	if err := cuda.LoadNVRTC(); err != nil {
		t.Skipf("no NVRTC library (set MAMBAGO_NVRTC, or install nvidia-cuda-nvrtc): %v", err)
	}
	if _, err := cuda.Compile(readFloorSource, "read_floor.cu", "sm_90", "--std=c++17"); err != nil {
		t.Fatal(err)
	}
}
