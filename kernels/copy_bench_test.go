package kernels_test

import (
	"slices"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
)

// copySource holds the kernel of BenchmarkTileCopy: each block copies one
// tile's worth of bytes into shared memory with 16-byte cp.async pieces, as
// the one-pass scan fills its ring, and records (%globaltimer) when it
// starts and when the copies have landed. Part of the tile (common bytes)
// is the same for every block, as dt_low, B and C are for the scan's blocks
// (a tile's whole rows of x_proj's output), unless distinct is set, when
// each block reads its own copy of those bytes; the rest (own bytes) is
// each block's own, as u and z are.
const copySource = `
__device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}

extern "C" __global__ void tile_copy(const char *src, long long common, long long own, int distinct,
                                     unsigned long long *tl, float *sink) {
    extern __shared__ __align__(16) char buf[];
    __syncthreads();
    unsigned long long t0 = gtimer();
    const char *c = src + (distinct ? (long long)(blockIdx.x + 1) * common : 0);
    const char *o = src + (long long)(gridDim.x + 1) * common + (long long)blockIdx.x * own;
    for (long long i = 16 * threadIdx.x; i < common; i += 16 * blockDim.x) {
        unsigned d = (unsigned)__cvta_generic_to_shared(buf + i);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(c + i));
    }
    for (long long i = 16 * threadIdx.x; i < own; i += 16 * blockDim.x) {
        unsigned d = (unsigned)__cvta_generic_to_shared(buf + common + i);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(o + i));
    }
    asm volatile("cp.async.commit_group;\n cp.async.wait_all;" ::: "memory");
    __syncthreads();
    unsigned long long t1 = gtimer();
    if (threadIdx.x == 0) {
        tl[2 * blockIdx.x] = t0;
        tl[2 * blockIdx.x + 1] = t1;
        sink[blockIdx.x] = reinterpret_cast<float *>(buf)[blockIdx.x % 64];
    }
}
`

// BenchmarkTileCopy asks why the one-pass scan's first tile lands about
// 1.6 µs after its wait at 130m B=1 T=2048 (bench/NOTES.md,
// BenchmarkOnePassTimeline), whatever else is copied beside it: is it the
// 96 blocks reading the same lines of dt_low, B and C at once, the bytes,
// or one SM's latency? Each case fills the source (a memset, so the lines
// are in L2 as x_proj leaves them) and then runs tile_copy; it logs the
// medians over 15 launches of the median and slowest block's time from its
// own start to its copies' landing.
func BenchmarkTileCopy(b *testing.B) {
	d := gputest.Device(b)
	s := newStream(b)
	m := loadSource(b, d, copySource, "tile_copy.cu")
	f, err := m.Function("tile_copy")
	if err != nil {
		b.Fatal(err)
	}
	const maxBlocks, maxCommon, maxOwn = 132, 40 << 10, 8 << 10
	if err := f.SetMaxDynamicShared(maxCommon + maxOwn); err != nil {
		b.Fatal(err)
	}
	srcBytes := (maxBlocks+1)*maxCommon + maxBlocks*maxOwn
	src := poisoned(b, s, srcBytes/4)
	tl := poisoned(b, s, 2*2*maxBlocks)
	sink := poisoned(b, s, maxBlocks)
	type tcase struct {
		blocks, common, own int
		distinct            bool
	}
	// 20 KB: dt_low (48 columns), B and C (16 each) of 64 rows, f32; 6 KB:
	// u (bf16) and z (f32) of 64 rows of a block's 16 channels.
	cases := []tcase{
		{1, 20 << 10, 6 << 10, false},
		{96, 20 << 10, 6 << 10, false},
		{96, 20 << 10, 6 << 10, true},
		{96, 0, 6 << 10, false},
		{96, 5 << 10, 6 << 10, false},
		{96, 40 << 10, 6 << 10, false},
		{132, 20 << 10, 6 << 10, false},
		{132, 20 << 10, 6 << 10, true},
	}
	for _, c := range cases {
		var med, last []float64
		for run := range 20 {
			if err := cuda.Fill32(src.Ptr, uint32(0x3f800000+run), srcBytes/4, s); err != nil {
				b.Fatal(err)
			}
			if err := f.Launch(cuda.D1(c.blocks), cuda.D1(128), c.common+c.own, s, src.Ptr, int64(c.common), int64(c.own),
				int32(b2i(c.distinct)), tl.Ptr, sink.Ptr); err != nil {
				b.Fatal(err)
			}
			rows := make([]int64, 2*c.blocks)
			if err := cuda.CopyOut(rows, tl.Ptr, s); err != nil {
				b.Fatal(err)
			}
			if run < 5 {
				continue
			}
			var us []float64
			for blk := range c.blocks {
				us = append(us, float64(rows[2*blk+1]-rows[2*blk])/1e3)
			}
			med = append(med, gputest.Median(us))
			last = append(last, slices.Max(us))
		}
		which := "common"
		if c.distinct {
			which = "distinct"
		}
		b.Logf("tile copy: %3d blocks, %5d %-8s + %4d own bytes a block: landed %.2f us (median block), %.2f (slowest)",
			c.blocks, c.common, which, c.own, gputest.Median(med), gputest.Median(last))
	}
}

// TestTileCopySourceCompiles compiles BenchmarkTileCopy's kernel through
// NVRTC for sm_90 (no GPU needed), so CI catches a benchmark that would not
// build.
func TestTileCopySourceCompiles(t *testing.T) {
	if err := cuda.LoadNVRTC(); err != nil {
		t.Skipf("no NVRTC library (set MAMBAGO_NVRTC, or install nvidia-cuda-nvrtc): %v", err)
	}
	if _, err := cuda.Compile(copySource, "tile_copy.cu", "sm_90", "--std=c++17"); err != nil {
		t.Fatal(err)
	}
}
