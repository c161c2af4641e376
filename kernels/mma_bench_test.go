package kernels_test

import (
	"fmt"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
)

// mmaSource holds BenchmarkMMA's kernels: the tensor cores' rate through
// mma.sync (the instructions sm_80 introduced; Hopper's full rate needs its
// warpgroup instructions) for each input type dt_proj could be split into.
// Each warp runs 8 independent accumulators, iters steps each, on operands
// that stay in registers.
const mmaSource = `
#define MMA_LOOP(ASM, ...)                                                        \
    float d[8][4] = {};                                                           \
    unsigned a0 = threadIdx.x, a1 = a0 * 3u, a2 = a0 * 5u, a3 = a0 * 7u;          \
    unsigned b0 = a0 ^ 0x3c003c00u, b1 = a0 | 0x3f800000u;                         \
    for (int i = 0; i < iters; i++)                                               \
        _Pragma("unroll") for (int k = 0; k < 8; k++)                             \
            asm volatile(ASM : "+f"(d[k][0]), "+f"(d[k][1]), "+f"(d[k][2]), "+f"(d[k][3]) \
                         : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));  \
    float s = 0.f;                                                                \
    _Pragma("unroll") for (int k = 0; k < 8; k++) s += d[k][0] + d[k][1] + d[k][2] + d[k][3]; \
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;

extern "C" __global__ void mma_tf32_m16n8k8(float *out, int iters) {
    MMA_LOOP("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};")
}
extern "C" __global__ void mma_bf16_m16n8k16(float *out, int iters) {
    MMA_LOOP("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};")
}
extern "C" __global__ void mma_f16_m16n8k16(float *out, int iters) {
    MMA_LOOP("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};")
}
`

// BenchmarkMMA reports each mma.sync shape's dense rate in TFLOP/s over the
// median launch's elapsed time, with 4 and 16 warps an SM.
func BenchmarkMMA(b *testing.B) {
	d := gputest.Device(b)
	m := loadSource(b, d, mmaSource, "mma.cu")
	s := newStream(b)
	timer := newLaunchTimer(b, s)
	const threads, iters = 128, 8192
	out, err := cuda.Alloc(4 * threads * 4 * d.SMs)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Free()
	for _, k := range []struct {
		name  string
		flops float64 // a warp's mma
	}{{"mma_tf32_m16n8k8", 2 * 16 * 8 * 8}, {"mma_bf16_m16n8k16", 2 * 16 * 8 * 16}, {"mma_f16_m16n8k16", 2 * 16 * 8 * 16}} {
		f, err := m.Function(k.name)
		if err != nil {
			b.Fatal(err)
		}
		for _, perSM := range []int{1, 4} {
			blocks := perSM * d.SMs
			b.Run(fmt.Sprintf("%s/%d_warps_an_SM", k.name, 4*perSM), func(b *testing.B) {
				launch := func() error {
					return f.Launch(cuda.D1(blocks), cuda.D1(threads), 0, s, out.Ptr, int32(iters))
				}
				timer.ms(b, launch) // warm-up
				var times []float64
				for b.Loop() {
					times = append(times, timer.ms(b, launch))
				}
				flops := float64(blocks*threads/32) * iters * 8 * k.flops
				b.ReportMetric(flops/(gputest.Median(times)*1e-3)/1e12, "TFLOP/s")
			})
		}
	}
}

// TestMMASourceCompiles compiles BenchmarkMMA's kernels through NVRTC for
// sm_90 (no GPU needed).
func TestMMASourceCompiles(t *testing.T) {
	if err := cuda.LoadNVRTC(); err != nil {
		t.Skipf("no NVRTC library (set MAMBAGO_NVRTC, or install nvidia-cuda-nvrtc): %v", err)
	}
	if _, err := cuda.Compile(mmaSource, "mma.cu", "sm_90", "--std=c++17"); err != nil {
		t.Fatal(err)
	}
}
