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
#define GT_THREADS 288  // two consumer warpgroups, then the producer's warp
#define GT_STAGE_BYTES ((GT_BM + GT_BN) * GT_BK * 2)

// gemm_tma_shared is the dynamic shared memory of gemm_tma_*: the ring, 1024
// bytes to align it (the 128-byte swizzle repeats every 1024), and the
// barriers. gpu code passes the same (kernels' gemmTMAShared).
__host__ __device__ constexpr int gemm_tma_shared() { return GT_STAGES * GT_STAGE_BYTES + 1024 + 2 * GT_STAGES * 8; }

// A CUtensorMap as the driver encodes it: 128 opaque bytes.
struct __align__(64) tensor_map {
    unsigned long long v[16];
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n .reg .pred p;\n GT_WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra GT_WAIT_%=;\n}" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// tma_load copies the box at (x, y) (x along K) of map into shared memory at
// dst, completing on bar.
__device__ __forceinline__ void tma_load(unsigned dst, const tensor_map *map, unsigned bar, int x, int y) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
        "l"(map), "r"(bar), "r"(x), "r"(y)
        : "memory");
}
// wg_desc is the wgmma descriptor of a K-major tile at shared address addr,
// 128-byte rows swizzled in groups of 8 rows (1024 bytes apart).
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
__device__ __forceinline__ void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory"); }

// wg_mma runs D (+)= A · Bᵀ for a 64 x N x 16 step (N = 128 or 256: D holds
// N / 2 floats a thread); scale 0 overwrites D.
#define WG_MMA128(TY)                                                                                \
    __device__ __forceinline__ void wg_mma(TY, float (&d)[64], unsigned long long da, unsigned long long db, int scale) { \
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"                                 \
                     " wgmma.mma_async.sync.aligned.m64n128k16.f32." #TY "." #TY                    \
                     " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}"                                         \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                                          \
                     : "l"(da), "l"(db), "r"(scale));                                                \
    }
WG_MMA128(bf16)
WG_MMA128(f16)
#define WG_MMA256(TY)                                                                                \
    __device__ __forceinline__ void wg_mma(TY, float (&d)[128], unsigned long long da, unsigned long long db, int scale) { \
        asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"                                 \
                     " wgmma.mma_async.sync.aligned.m64n256k16.f32." #TY "." #TY                    \
                     " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}"                                         \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])                                                                          \
                     : "l"(da), "l"(db), "r"(scale));                                                \
    }
WG_MMA256(bf16)
WG_MMA256(f16)
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
                // The step before's MMAs are done once at most this step's are in
                // flight: its stage goes back to the producer, while the tensor
                // cores run this one.
                wg_wait1();
                if (k > 0 && lead) mbar_arrive(empty((g - 1) % GT_STAGES));
            }
            wg_wait0();
            if (lead) mbar_arrive(empty((g - 1) % GT_STAGES));  // the tile's last stage
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
