// A decode GEMV for a batch of up to 8 sequences on Hopper's warpgroup
// products (wgmma) and copy engine (TMA), the way cuBLAS runs these GEMMs
// at B = 8 (bench/cublas_gemv.py) but with x kept to f32 precision:
//
//   out[b, n] (+)= sum_k W[n, k] * x[b, k] + bias[n]      for n < rows, b < B
//
// x goes in as three bf16 parts (x_parts_bf16: hi + mid + lo, each the top
// 16 bits of what is left, as step.cu's split3 makes them, so every
// product of a weight and a part is exact), laid out as 24 rows of K:
// row 8 p + b is part p of sequence b (zeros for b >= B). One wgmma
// m64n24k16 then multiplies 64 weight rows by all three parts of all eight
// sequences, and the epilogue sums each sequence's three columns. Where
// step.cu's group_tile issues six mma.sync and split3's arithmetic for
// every 16 x 32 weights, this is one instruction for 64 x 16 of them, with
// both operands read from shared memory.
//
// gemv_wg_bf16: a block of 160 threads takes 64 rows (grid ceil(rows /
// 64)). Warp 4 is the producer: one thread copies each 64-wide step of K,
// W's 64 x 64 box and the parts' 24 x 64 box (tensor maps, 128-byte
// swizzle), into a ring of GW_STAGES stages, each completing on its full
// barrier. Warpgroup 0 consumes: for each stage, four wgmma (16 of K
// each), then the stage before goes back through its empty barrier (one
// step's products in flight while the next stage is waited for), as
// gemm_tma.cu's consumers do. Measurement only (BenchmarkGEMVBatch,
// TestGEMVWGKernel): not an engine's entry yet.
//
// wgmma and the tensor maps need sm_90a: on any other target the GEMV
// compiles to a trap, so that every source builds for every architecture.

#define GW_ROWS 64
#define GW_BK 64
#ifndef GW_STAGES
#define GW_STAGES 8
#endif
#define GW_THREADS 160
#define GW_W_BYTES (GW_ROWS * GW_BK * 2)
#define GW_X_BYTES (24 * GW_BK * 2)
#define GW_STAGE_BYTES (GW_W_BYTES + 4096)  // the parts' 3 KB padded, so that every stage starts 1024-aligned

// gemv_wg_shared is gemv_wg_bf16's dynamic shared memory: the ring, 1024
// bytes to align it (the 128-byte swizzle repeats every 1024), and the
// barriers.
__host__ __device__ constexpr int gemv_wg_shared() { return GW_STAGES * GW_STAGE_BYTES + 1024 + 2 * GW_STAGES * 8; }

// x_parts_bf16 writes parts [24][K] bf16: row 8 p + b is part p (0 hi, 1
// mid, 2 lo) of x[b, :] (row stride ldx), zeros for b >= B. Grid
// (ceil(K / 256), 8), block 256.
extern "C" __global__ void x_parts_bf16(const float *__restrict__ x, int ldx, int B, int K, bf16 *__restrict__ parts) {
    int k = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
    if (k >= K) return;
    float v = b < B ? x[(size_t)b * ldx + k] : 0.f;
#pragma unroll
    for (int p = 0; p < 3; p++) {
        unsigned u = __float_as_uint(v) & 0xffff0000u;  // the top 16 bits: exact in bf16
        parts[(size_t)(8 * p + b) * K + k] = bf16{(unsigned short)(u >> 16)};
        v -= __uint_as_float(u);
    }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// wg_mma24 runs D (+)= A · Bᵀ for a 64 x 24 x 16 step of a warpgroup, bf16
// operands from shared memory (wg_desc), D 12 floats a thread; scale 0
// overwrites D.
__device__ __forceinline__ void wg_mma24(float (&d)[12], unsigned long long da, unsigned long long db, int scale) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %14, 0;\n"
        " wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11},"
        " %12, %13, p, 1, 1, 0, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
        : "l"(da), "l"(db), "r"(scale));
}

__device__ __forceinline__ void gemv_wg(const tensor_map *wmap, const tensor_map *xmap, const float *__restrict__ bias,
                                        float *out, int ldo, int accumulate, int B, int K, int rows) {
    extern __shared__ __align__(1024) unsigned char gw_smem[];
    const unsigned base = (shared_addr(gw_smem) + 1023) & ~1023u;
    const unsigned bars = base + GW_STAGES * GW_STAGE_BYTES;  // full[s] at bars + 8 s, empty[s] after them
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (GW_STAGES + s); };
    auto sW = [&](int s) { return base + s * GW_STAGE_BYTES; };
    auto sX = [&](int s) { return base + s * GW_STAGE_BYTES + GW_W_BYTES; };
    const int steps = (K + GW_BK - 1) / GW_BK, n0 = blockIdx.x * GW_ROWS;
    if (B > 8 || blockDim.x != GW_THREADS) __trap();
    if (threadIdx.x == 0) {
        for (int s = 0; s < GW_STAGES; s++) mbar_init(full(s), 1), mbar_init(empty(s), 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x >= 128) {  // the producer's warp; one thread copies
        if (threadIdx.x == 128) {
            for (int k = 0; k < steps; k++) {
                const int s = k % GW_STAGES;
                if (k >= GW_STAGES) mbar_wait(empty(s), (k / GW_STAGES - 1) & 1);
                mbar_expect_tx(full(s), GW_W_BYTES + GW_X_BYTES);
                tma_load(sW(s), wmap, full(s), k * GW_BK, n0);
                tma_load(sX(s), xmap, full(s), k * GW_BK, 0);
            }
        }
        return;
    }
    float d[12];
#pragma unroll
    for (int i = 0; i < 12; i++) d[i] = 0.f;
    const bool lead = threadIdx.x == 0;
    for (int k = 0; k < steps; k++) {
        const int s = k % GW_STAGES;
        mbar_wait(full(s), (k / GW_STAGES) & 1);
        wg_fence();
#pragma unroll
        for (int j = 0; j < GW_BK / 16; j++)  // 16 elements of K (32 bytes) a product, inside the swizzled row
            wg_mma24(d, wg_desc(sW(s) + 32 * j), wg_desc(sX(s) + 32 * j), k > 0 || j > 0);
        wg_commit();
        wg_wait1();  // the step before's products are done: its stage goes back
        if (k > 0 && lead) mbar_arrive(empty((k - 1) % GW_STAGES));
    }
    wg_wait0();
    // d[4 i + h] is row 16 w + lane / 4 (+ 8 for h >= 2), column 8 i + 2
    // (lane % 4) + h % 2: part i of sequence 2 (lane % 4) + h % 2.
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int h = 0; h < 4; h++) {
        const int n = n0 + 16 * w + lane / 4 + (h >= 2 ? 8 : 0), b = 2 * (lane % 4) + h % 2;
        if (n >= rows || b >= B) continue;
        float v = (d[h] + d[4 + h]) + d[8 + h];  // hi + mid, then lo
        if (bias) v += bias[n];
        float *o = out + (size_t)b * ldo + n;
        *o = accumulate ? *o + v : v;
    }
}
#endif

extern "C" __global__ void __launch_bounds__(GW_THREADS)
    gemv_wg_bf16(const __grid_constant__ tensor_map wmap, const __grid_constant__ tensor_map xmap,
                 const float *__restrict__ bias, float *out, int ldo, int accumulate, int B, int K, int rows) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    gemv_wg(&wmap, &xmap, bias, out, ldo, accumulate, B, K, rows);
#else
    __trap();
#endif
}
