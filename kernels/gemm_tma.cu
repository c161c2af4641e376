// GEMMs on Hopper's tensor cores through the copy engine (TMA) and wgmma:
//
//   C [M, N] = A [M, K] · Wᵀ + beta · C        (beta 0: C is only written)
//
// A and W [N, K] of a 16-bit storage type, both K-major (a linear layer's
// input and weight as PyTorch stores them); C f32, row stride ldc. A and W
// come in as TMA tensor maps, which carry their row strides
// (cuda.NewTensorMap2D: boxes of 64 elements of K by 128 rows of A or GT_BN
// of W, 128-byte swizzle), and zero-fill rows past M or N and columns past K.
//
// gemm_tma_<T>: a block of 288 threads computes 128 x GT_BN tiles of C: one
// on a grid of (ceil(N / GT_BN), ceil(M / 128)), or every gridDim.x-th on a
// smaller, persistent grid (P, 1), its ring running on from one tile into
// the next while the consumers store. GT_BLOCKS blocks an SM (the
// default build: 128 x 128 tiles, 3 stages, two blocks, so that one block's
// epilogue runs under the other's MMAs). Warp 8 is the producer: one thread
// copies A's 128 x 64 and W's GT_BN x 64 tiles of each step of K into a ring
// of GT_STAGES stages, each completing on the stage's full barrier (the copy
// engine counts its bytes). Warpgroups 0 and 1 are the consumers, rows 0-63
// and 64-127 of the tile: each waits for a stage, runs its four wgmma
// m64nGT_BNk16 (f32 accumulators in registers), and releases the step
// before's stage through its empty barrier once that step's MMAs are done
// (one step's MMAs in flight while the next stage is waited for). The
// epilogue stores the accumulators (adding beta · C) inside C only. Under
// programmatic dependent launch the producer fetches the first stages of W
// (a weight, which no kernel in flight writes) before it waits for the
// previous kernel, then A's.
//
// wgmma and the tensor maps need sm_90a: on any other target the kernels
// compile to a trap, so that every source builds for every architecture.

#define GT_BM 128
#ifndef GT_BN
#define GT_BN 128  // the tile's columns: 128 or 256 (fewer bytes from L2 a FLOP, more registers)
#endif
#define GT_BK 64
#ifndef GT_STAGES
#define GT_STAGES 3  // with two blocks an SM (GT_BLOCKS), six stages of loads in flight an SM
#endif
#ifndef GT_BLOCKS
#define GT_BLOCKS 2  // blocks an SM: one's epilogue runs under the other's MMAs
#endif
// GT_WAIT0 1 has the consumers wait for each step's MMAs and release its
// stage; 0 (the default) keeps one step's MMAs in flight and releases the
// step before's, which puts a stage back only once the next has arrived.
// out_norm.cu's loop gained 5% (130m, T = 2048) and 16% (T = 8192) from
// the change (bench/results/2026-12-01-out-norm.md, run 11); here it has not
// yet run on a GPU.
#ifndef GT_WAIT0
#define GT_WAIT0 0
#endif
#define GT_THREADS 288  // two consumer warpgroups, then the producer's warp
#define GT_STAGE_BYTES ((GT_BM + GT_BN) * GT_BK * 2)

// gemm_tma_shared is the dynamic shared memory of gemm_tma_*: the ring, 1024
// bytes to align it (the 128-byte swizzle repeats every 1024), and the
// barriers. gpu code passes the same (kernels' gemmTMAShared).
__host__ __device__ constexpr int gemm_tma_shared() { return GT_STAGES * GT_STAGE_BYTES + 1024 + 2 * GT_STAGES * 8; }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <class T>
__device__ __forceinline__ void gemm_tma(const tensor_map *amap, const tensor_map *wmap, float *__restrict__ C, int ldc,
                                         int M, int N, int K, float beta) {
    extern __shared__ __align__(1024) unsigned char gt_smem[];
    const unsigned base = (shared_addr(gt_smem) + 1023) & ~1023u;
    const unsigned bars = base + GT_STAGES * GT_STAGE_BYTES;  // full[s] at bars + 8 s, empty[s] after them
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (GT_STAGES + s); };
    auto sA = [&](int s) { return base + s * GT_STAGE_BYTES; };
    auto sW = [&](int s) { return base + s * GT_STAGE_BYTES + GT_BM * GT_BK * 2; };
    const int steps = (K + GT_BK - 1) / GT_BK, nt = (N + GT_BN - 1) / GT_BN, tiles = (M + GT_BM - 1) / GT_BM * nt;
    // The tiles this block computes, row-major over (M, N) tiles: one for a
    // grid of a block a tile, every gridDim-th from its own for a smaller
    // (persistent) grid. Steps of K are counted over all of them, so the
    // ring's stages and phases run on from one tile to the next.
    const int t0 = blockIdx.y * gridDim.x + blockIdx.x, stride = gridDim.x * gridDim.y;
    const int wg = threadIdx.x / 128;  // 0 and 1 the consumers, 2 the producer (one warp)
    if (threadIdx.x == 0) {
        for (int s = 0; s < GT_STAGES; s++) mbar_init(full(s), 1), mbar_init(empty(s), 2);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (wg == 2) {  // the producer
        if (threadIdx.x == 256) {
            int g = 0, k0 = 0;  // steps issued, over every tile; the tile's first step still to issue
            for (int t = t0; t < tiles; t += stride, k0 = 0) {
                const int m0 = t / nt * GT_BM, n0 = t % nt * GT_BN;
                if (t == t0) {  // W's first stages: a weight, ready before the wait
                    k0 = min(steps, GT_STAGES);
                    for (int k = 0; k < k0; k++) {
                        mbar_expect_tx(full(k), GT_STAGE_BYTES);
                        tma_load(sW(k), wmap, full(k), k * GT_BK, n0);
                    }
                    pdl_wait();
                    for (int k = 0; k < k0; k++) tma_load(sA(k), amap, full(k), k * GT_BK, m0);
                    g = k0;
                }
                for (int k = k0; k < steps; k++, g++) {
                    const int s = g % GT_STAGES;
                    if (g >= GT_STAGES)
                        mbar_wait(empty(s), (g / GT_STAGES - 1) & 1);  // both consumers are done with step g - GT_STAGES
                    mbar_expect_tx(full(s), GT_STAGE_BYTES);
                    tma_load(sW(s), wmap, full(s), k * GT_BK, n0);
                    tma_load(sA(s), amap, full(s), k * GT_BK, m0);
                }
            }
        }
    } else {  // a consumer: rows 64 wg .. + 63 of each tile
        pdl_wait();  // the epilogue reads C
        float d[GT_BN / 2];
#pragma unroll
        for (int i = 0; i < GT_BN / 2; i++) d[i] = 0.f;
        const unsigned rows = wg * 64 * GT_BK * 2;  // the warpgroup's 64 rows of A's tile
        const bool lead = threadIdx.x % 128 == 0;
        int g = 0;  // steps consumed, over every tile
        for (int t = t0; t < tiles; t += stride) {
            const int m0 = t / nt * GT_BM, n0 = t % nt * GT_BN;
            for (int k = 0; k < steps; k++, g++) {
                const int s = g % GT_STAGES;
                mbar_wait(full(s), (g / GT_STAGES) & 1);
                wg_fence();
#pragma unroll
                for (int j = 0; j < GT_BK / 16; j++)  // 16 elements of K (32 bytes) a step, inside the swizzled row
                    wg_mma(T{}, d, wg_desc(sA(s) + rows + 32 * j), wg_desc(sW(s) + 32 * j), k > 0 || j > 0);
                wg_commit();
                if (GT_WAIT0) {  // this step's MMAs are done: its stage goes back
                    wg_wait0();
                    if (lead) mbar_arrive(empty(g % GT_STAGES));
                } else {
                    // The step before's MMAs are done once at most this step's are
                    // in flight: its stage goes back to the producer, while the
                    // tensor cores run this one.
                    wg_wait1();
                    if (k > 0 && lead) mbar_arrive(empty((g - 1) % GT_STAGES));
                }
            }
            wg_wait0();
            if (!GT_WAIT0 && lead) mbar_arrive(empty((g - 1) % GT_STAGES));  // the tile's last stage
            // d[4i + h] is row 16 w + lane / 4 (+ 8 for h >= 2), column 8 i + 2 (lane % 4) + h % 2 of the
            // warpgroup's 64 x GT_BN (w its warp).
            const int w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
            const int r0 = m0 + wg * 64 + 16 * w + lane / 4;
            const bool pairs = ldc % 2 == 0 && ((size_t)C & 7) == 0;  // each thread's two columns as one 8-byte access
#pragma unroll
            for (int i = 0; i < GT_BN / 8; i++) {
#pragma unroll
                for (int h = 0; h < 4; h += 2) {
                    const int r = r0 + (h >= 2 ? 8 : 0), c = n0 + 8 * i + 2 * (lane % 4);
                    if (r >= M) continue;
                    float *p = C + (size_t)r * ldc + c;
                    if (pairs && c + 1 < N) {
                        float2 v = make_float2(d[4 * i + h], d[4 * i + h + 1]);
                        if (beta != 0.f) {
                            const float2 o = *reinterpret_cast<const float2 *>(p);
                            v.x += beta * o.x, v.y += beta * o.y;
                        }
                        *reinterpret_cast<float2 *>(p) = v;
                    } else {
#pragma unroll
                        for (int q = 0; q < 2; q++)
                            if (c + q < N) p[q] = beta != 0.f ? d[4 * i + h + q] + beta * p[q] : d[4 * i + h + q];
                    }
                }
            }
        }
    }
    pdl_release();
}
#endif

#define GEMM_TMA(sfx, T)                                                                                        \
    extern "C" __global__ void __launch_bounds__(GT_THREADS, GT_BLOCKS)                                         \
        gemm_tma_##sfx(const __grid_constant__ tensor_map amap, const __grid_constant__ tensor_map wmap,        \
                       float *__restrict__ C, int ldc, int M, int N, int K, float beta) {                        \
        GEMM_TMA_BODY(T)                                                                                        \
    }
// gemm_tma_entry runs gemm_tma for a 16-bit type on sm_90a; gemm_tma_f32
// exists only because EACH_DTYPE makes every type's entry, and traps.
template <class T>
__device__ __forceinline__ void gemm_tma_entry(const tensor_map *amap, const tensor_map *wmap, float *C, int ldc, int M,
                                               int N, int K, float beta) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    gemm_tma<T>(amap, wmap, C, ldc, M, N, K, beta);
#else
    __trap();
#endif
}
template <>
__device__ __forceinline__ void gemm_tma_entry<float>(const tensor_map *, const tensor_map *, float *, int, int, int, int,
                                                      float) {
    __trap();
}
#define GEMM_TMA_BODY(T) gemm_tma_entry<T>(&amap, &wmap, C, ldc, M, N, K, beta);
EACH_DTYPE(GEMM_TMA)
