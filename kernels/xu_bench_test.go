package kernels_test

import (
	"fmt"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
)

// xuSource holds the microbenchmarks of BenchmarkXU: how many ex2 a clock an
// SM's XU (the special function unit) gives, alone and in the scan's
// instruction mix, at the scan's occupancy (3 warps a scheduler at B=1,
// T=2048) and at a full one. The scan's passes run the XU at about 37% of
// 16 a clock (bench/NOTES.md); this says whether that is the mix's own limit
// or the scan kernel's.
const xuSource = `
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Each block's thread 0 writes the SM clocks its block ran to cycles.
__device__ __forceinline__ void block_cycles(long long start, long long *cycles) {
    __syncthreads();
    if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - start;
}

// xu_ex2: 16 independent chains x = ex2(a x) a thread, iters steps each.
extern "C" __global__ void xu_ex2(float *out, long long *cycles, float a, int iters) {
    long long start = clock64();
    float x[16];
#pragma unroll
    for (int k = 0; k < 16; k++) x[k] = threadIdx.x * 1e-3f + k * 1e-2f;
#pragma unroll 8
    for (int i = 0; i < iters; i++)
#pragma unroll
        for (int k = 0; k < 16; k++) x[k] = ex2(x[k] * a);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 16; k++) s += x[k];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
    block_cycles(start, cycles);
}

// xu_init sets a thread's 16 decay rates, states and B and C values.
__device__ __forceinline__ void xu_init(float a0, float a[16], float s[16], float B[16], float C[16]) {
#pragma unroll
    for (int k = 0; k < 16; k++) {
        a[k] = a0 * (k + 1);
        s[k] = 0.f;
        B[k] = 1e-2f * (k + threadIdx.x % 7);
        C[k] = 1e-2f * (16 - k);
    }
}

// xu_scan: the scan's output pass on registers alone: each position, for
// 16 states, s = ex2(dt a) s + du B and y += s C.
extern "C" __global__ void xu_scan(float *out, long long *cycles, float a0, int iters) {
    long long start = clock64();
    float a[16], s[16], B[16], C[16];
    xu_init(a0, a, s, B, C);
    float y = 0.f, dt = 0.01f + threadIdx.x * 1e-5f;
#pragma unroll 8
    for (int i = 0; i < iters; i++) {
        dt = dt * 0.999f + 1e-4f;
        float du = dt * 0.5f, acc = 0.f;
#pragma unroll
        for (int k = 0; k < 16; k++) {
            s[k] = ex2(dt * a[k]) * s[k] + du * B[k];
            acc += s[k] * C[k];
        }
        y += acc;
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = y;
    block_cycles(start, cycles);
}

// xu_scan_smem: xu_scan with each position's dt, u, B and C read from
// shared memory as the staged scan's output pass reads them (dt and u a
// word a thread, B and C as broadcast 16-byte loads), eight positions'
// worth refilled by no one, reread every eight positions. Shared-memory
// loads and ex2 share the MIO queue; this says what the loads cost the XU.
extern "C" __global__ void xu_scan_smem(float *out, long long *cycles, float a0, int iters) {
    __shared__ __align__(16) float sdt[8][128], su[8][128], sB[8][16], sC[8][16];
    long long start = clock64();
    float a[16], s[16], B[16], C[16];
    xu_init(a0, a, s, B, C);
    for (int i = 0; i < 8; i++) {
        sdt[i][threadIdx.x] = 0.01f + (threadIdx.x + i) * 1e-5f;
        su[i][threadIdx.x] = 0.5f;
        if (threadIdx.x < 16) sB[i][threadIdx.x] = 1e-2f * (threadIdx.x + i), sC[i][threadIdx.x] = 1e-2f * (16 - i);
    }
    __syncthreads();
    float y = 0.f;
    for (int i0 = 0; i0 < iters; i0 += 8) {
        asm volatile("" ::: "memory");  // reread the tiles each round, as the scan does
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float dt = sdt[i][threadIdx.x], du = dt * su[i][threadIdx.x], acc = 0.f;
#pragma unroll
            for (int k = 0; k < 16; k++) {
                s[k] = ex2(dt * a[k]) * s[k] + du * sB[i][k];
                acc += s[k] * sC[i][k];
            }
            y += acc;
        }
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = y;
    block_cycles(start, cycles);
}

// xu_scan_ahead: xu_scan with each position's ex2 issued one position
// ahead of their use, the order a software-pipelined scan would ask for.
extern "C" __global__ void xu_scan_ahead(float *out, long long *cycles, float a0, int iters) {
    long long start = clock64();
    float a[16], s[16], B[16], C[16], e[16];
    xu_init(a0, a, s, B, C);
    float y = 0.f, dt = 0.01f + threadIdx.x * 1e-5f;
    dt = dt * 0.999f + 1e-4f;
#pragma unroll
    for (int k = 0; k < 16; k++) e[k] = ex2(dt * a[k]);
#pragma unroll 8
    for (int i = 0; i < iters; i++) {
        float du = dt * 0.5f, acc = 0.f, next = dt * 0.999f + 1e-4f;
#pragma unroll
        for (int k = 0; k < 16; k++) {
            float en = ex2(next * a[k]);
            s[k] = e[k] * s[k] + du * B[k];
            acc += s[k] * C[k];
            e[k] = en;
        }
        dt = next;
        y += acc;
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = y;
    block_cycles(start, cycles);
}
`

// BenchmarkXU reports ex2 a clock an SM for each microbenchmark kernel of
// xuSource at two occupancies: 3 and 16 blocks of 128 threads an SM (3
// warps a scheduler, as the scan at B=1 T=2048, and as many as fit). The
// clock is the longest block's clock64 count over the elapsed time of the
// 3-block launch, whose blocks all run at once.
func BenchmarkXU(b *testing.B) {
	d := gputest.Device(b)
	m := loadSource(b, d, xuSource, "xu.cu")
	s := newStream(b)
	timer := newLaunchTimer(b, s)
	const threads, iters = 128, 4096
	maxBlocks := 16 * d.SMs
	out, err := cuda.Alloc(4 * threads * maxBlocks)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Free()
	cyc, err := cuda.Alloc(8 * maxBlocks)
	if err != nil {
		b.Fatal(err)
	}
	defer cyc.Free()
	for _, kernel := range []string{"xu_ex2", "xu_scan", "xu_scan_smem", "xu_scan_ahead"} {
		f, err := m.Function(kernel)
		if err != nil {
			b.Fatal(err)
		}
		// run launches blocks blocks once and returns its milliseconds.
		run := func(blocks int) float64 {
			return timer.ms(b, func() error {
				return f.Launch(cuda.D1(blocks), cuda.D1(threads), 0, s, out.Ptr, cyc.Ptr, float32(-0.5), int32(iters))
			})
		}
		// The clock: 3 blocks an SM all run at once, so the longest block's
		// clock64 count spans the launch.
		run(3 * d.SMs)
		ms := run(3 * d.SMs)
		cycles := make([]int64, 3*d.SMs)
		if err := cuda.CopyOut(cycles, cyc.Ptr, s); err != nil {
			b.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			b.Fatal(err)
		}
		longest := int64(0)
		for _, c := range cycles {
			longest = max(longest, c)
		}
		clockHz := float64(longest) / (ms * 1e-3)
		for _, perSM := range []int{3, 16} {
			blocks := perSM * d.SMs
			b.Run(fmt.Sprintf("%s/%d_blocks_an_SM", kernel, perSM), func(b *testing.B) {
				run(blocks) // warm-up
				var times []float64
				for b.Loop() {
					times = append(times, run(blocks))
				}
				ms := gputest.Median(times)
				perClock := float64(blocks) * threads * iters * 16 / (ms * 1e-3) / clockHz / float64(d.SMs)
				b.ReportMetric(clockHz/1e9, "GHz")
				b.ReportMetric(perClock, "ex2/clk/SM")
				b.ReportMetric(100*perClock/16, "%_of_16")
			})
		}
	}
}

// TestXUSourceCompiles compiles BenchmarkXU's kernels through NVRTC for
// sm_90 (no GPU needed), so CI catches a benchmark that would not build.
func TestXUSourceCompiles(t *testing.T) {
	if err := cuda.LoadNVRTC(); err != nil {
		t.Skipf("no NVRTC library (set MAMBAGO_NVRTC, or install nvidia-cuda-nvrtc): %v", err)
	}
	if _, err := cuda.Compile(xuSource, "xu.cu", "sm_90", "--std=c++17"); err != nil {
		t.Fatal(err)
	}
}
