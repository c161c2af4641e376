// x_proj on the tensor cores, for the 16-bit storage types on sm_90 (it
// uses clusters):
//
//   dbl[r, j] = sum_c u[r, c] * W[j, c]
//
// u [M, E] and W [J, E] in the storage type T, dbl [M, J] f32 (rows r = b T
// + t of the chunk's B sequences). E a multiple of XP_KS XP_CHUNKS 16, J a
// multiple of 4 of at most 8 NT.
//
// Why not cuBLAS: at the 130m shape (B=1, T=2048) x_proj's 2048 x 80 output
// is a small GEMM whose graph node takes about 5 us, of which about 3 do not
// shrink with T (2 us per 2048 rows at T=8192; bench/NOTES.md). cuBLAS's
// kernels take no programmatic dependent launch, so the node cannot start
// before the conv ends, and its few blocks (about 100) each walk all of
// K = E. Here:
// - a cluster of XP_KS blocks owns XP_TM rows, block q of them slice q of
//   the channels (E / XP_KS): 4 x 32 = 128 blocks at the 130m shape;
// - a block copies its slice of W into shared memory before it waits for
//   the conv (weights, pdl_wait), then its tile of u in XP_CHUNKS groups, all
//   in flight at once, and lets the scan after it launch;
// - warp w multiplies rows 16 (w % 4) .. + 15 of the tile by half of dbl's
//   columns (NT / 2 tiles of 8, the first or the second half as w / 4), each
//   group of u as it lands (mma.m16n8k16, fragments from ldmatrix, f32
//   accumulators);
// - the blocks' partial products meet in shared memory (over W's slice,
//   which is then done with), and block q adds the XP_KS partials of rows
//   q XP_TM / XP_KS .. in slice order through distributed shared memory,
//   so every run gives the same bits, and writes them to dbl.

#define XP_THREADS 256  // a block: 8 warps
#define XP_TM 64        // rows a cluster
#define XP_KS 4         // blocks a cluster, each a slice of the channels
#define XP_CHUNKS 4     // (XP_BULK 0) groups of u's copies, multiplied as each lands
#ifndef XP_BULK
#define XP_BULK 1       // rows copied by the copy engine (cp.async.bulk); 0: cp.async, 16 bytes a thread
#endif

// xproj_pitch is a row of W's slice and of u's tile in shared memory, in
// elements: the slice plus 8, so that rows are an odd number of 16-byte
// pieces apart and ldmatrix's eight rows miss each other's banks.
__host__ __device__ constexpr int xproj_pitch(int E) { return E / XP_KS + 8; }

// xproj_shared is the dynamic shared memory of the NT entry for E channels,
// in bytes: W's slice (8 NT rows, zeros past J) and u's tile. The partial
// products (XP_TM x 8 NT f32) reuse W's rows. gpu.XProj computes the same.
__host__ __device__ constexpr int xproj_shared(int NT, int E) { return (8 * NT + XP_TM) * xproj_pitch(E) * 2; }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <class T, int NT>
__device__ __forceinline__ void xproj(const T *__restrict__ u, const T *__restrict__ W, float *__restrict__ dbl, int M,
                                      int E, int J) {
    static_assert(NT % 2 == 0, "two warps split a row's tiles of columns");
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int q = cluster_rank(), r0 = blockIdx.x / XP_KS * XP_TM;
    const int S = E / XP_KS, P = xproj_pitch(E), c0 = q * S;
    extern __shared__ __align__(16) unsigned char xp_smem[];
    T *ws = reinterpret_cast<T *>(xp_smem);  // [8 NT][P]
    T *us = ws + 8 * NT * P;                  // [XP_TM][P]
    float *part = reinterpret_cast<float *>(xp_smem);  // [XP_TM][8 NT], once the products are done

#if XP_BULK
    // Rows of W's slice and of u's tile on the copy engine, a row a copy:
    // W's ahead of the wait (a weight), completing on wbar; u's after it,
    // rows 16 g .. 16 g + 15 (those warp g multiplies) on ubar(g). The rows
    // past J and past M are zeros, written here.
    __shared__ __align__(8) unsigned long long xp_bars[1 + XP_TM / 16];
    const unsigned wbar = shared_addr(&xp_bars[0]);
    auto ubar = [&](int g) { return wbar + 8 * (1 + g); };
    const int live = min(XP_TM, M - r0);  // the tile's rows
    auto urows = [&](int g) { return max(0, min(16, live - 16 * g)); };  // rows of warp g's group
    if (tid == 0) {
        for (int b = 0; b < 1 + XP_TM / 16; b++) mbar_init(wbar + 8 * b, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        // Every barrier's bytes, before any thread issues a copy.
        mbar_expect_tx(wbar, J * S * 2);
        for (int g = 0; g < XP_TM / 16; g++) mbar_expect_tx(ubar(g), urows(g) * S * 2);
    }
    for (int p = tid; p < (8 * NT - J + XP_TM - live) * (S / 8); p += XP_THREADS) {
        const int row = p / (S / 8), k = p % (S / 8) * 8;
        T *dst = row < 8 * NT - J ? ws + (J + row) * P + k : us + (live + row - (8 * NT - J)) * P + k;
        *reinterpret_cast<uint4 *>(dst) = make_uint4(0, 0, 0, 0);
    }
    __syncthreads();
    // Row 8 l + w of W's slice (J <= 96) and of u's tile from lane l of
    // warp w, about ten copies a warp. A bulk copy takes its addresses from
    // uniform registers, so a warp issues its lanes' copies one at a time:
    // all 144 rows (130m) from warp 0 took 1.1 us longer at T = 512 and
    // 0.4 us at T = 2048 (bench/results/2026-12-01-tuning-embednorm.md).
    const int i = 8 * lane + warp;
    if (i < J) bulk_load(shared_addr(ws + i * P), W + (size_t)i * E + c0, S * 2, wbar);
    pdl_wait();
    if (i < live) bulk_load(shared_addr(us + i * P), u + (size_t)(r0 + i) * E + c0, S * 2, ubar(i / 16));
    pdl_release();  // the scan may launch: it waits for this grid before reading dbl
#else
    // W's slice, 16 bytes a piece, ahead of the wait: it is a weight.
    const int pieces = S / 8;
    for (int p = tid; p < 8 * NT * pieces; p += XP_THREADS) {
        const int j = p / pieces, k = p % pieces * 8;
        const bool ok = j < J;
        cp_async_s<16>(shared_addr(ws + j * P + k), ok ? W + (size_t)j * E + c0 + k : W, ok);
    }
    cp_async_commit();
    pdl_wait();
    // u's tile, chunk by chunk (zeros past M).
    const int SC = S / XP_CHUNKS, cpieces = SC / 8;
    for (int i = 0; i < XP_CHUNKS; i++) {
        for (int p = tid; p < XP_TM * cpieces; p += XP_THREADS) {
            const int r = p / cpieces, k = i * SC + p % cpieces * 8;
            const bool ok = r0 + r < M;
            cp_async_s<16>(shared_addr(us + r * P + k), ok ? u + (size_t)(r0 + r) * E + c0 + k : u, ok);
        }
        cp_async_commit();
    }
    pdl_release();  // the scan may launch: it waits for this grid before reading dbl
#endif

    constexpr int NW = NT / 2;  // a warp's tiles of 8 columns
    const int wm = warp % 4, wn = warp / 4;
    float acc[NW][4];
#pragma unroll
    for (int n = 0; n < NW; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    const unsigned abase = shared_addr(us + (16 * wm + (lane & 15)) * P + (lane >> 4) * 8);
    const unsigned bbase = shared_addr(ws + (wn * NW * 8 + (lane & 7) + (lane >> 4) * 8) * P + ((lane >> 3) & 1) * 8);
#if XP_BULK
    // The warp's rows and W's slice landed: the whole slice at once.
    mbar_wait(wbar, 0);
    mbar_wait(ubar(wm), 0);
    for (int ks = 0; ks < S / 16; ks++) {
        const int k = 16 * ks;
#else
#pragma unroll
    for (int i = 0; i < XP_CHUNKS; i++) {
        // Chunk i (and W, the first group) landed for this thread; the
        // barrier makes every thread's copies visible.
        switch (XP_CHUNKS - 1 - i) {
            case 0: cp_async_wait<0>(); break;
            case 1: cp_async_wait<1>(); break;
            case 2: cp_async_wait<2>(); break;
            default: cp_async_wait<3>(); break;
        }
        __syncthreads();
        for (int ks = 0; ks < S / XP_CHUNKS / 16; ks++) {
            const int k = i * (S / XP_CHUNKS) + 16 * ks;
#endif
            mma_k16<T, NW>(acc, abase, bbase, P, k * 2);
#if !XP_BULK
        }
#endif
    }
    __syncthreads();  // every warp is done with W's slice: the partials go over it
    {
        const int r = 16 * wm + (lane >> 2), col = 8 * NW * wn + 2 * (lane & 3);
#pragma unroll
        for (int n = 0; n < NW; n++) {
            *reinterpret_cast<float2 *>(part + r * 8 * NT + col + 8 * n) = make_float2(acc[n][0], acc[n][1]);
            *reinterpret_cast<float2 *>(part + (r + 8) * 8 * NT + col + 8 * n) = make_float2(acc[n][2], acc[n][3]);
        }
    }
    cluster_sync();  // every block's partials are in
    constexpr int RB = XP_TM / XP_KS;  // rows this block sums
    const int J4 = J / 4;
    const unsigned pbase = shared_addr(part);
    for (int p = tid; p < RB * J4; p += XP_THREADS) {
        const int r = q * RB + p / J4, j = p % J4 * 4;
        if (r0 + r >= M) break;
        const unsigned at = pbase + (r * 8 * NT + j) * 4;
        float4 s = cluster_ld4(cluster_map(at, 0));
#pragma unroll
        for (int o = 1; o < XP_KS; o++) {
            const float4 v = cluster_ld4(cluster_map(at, o));
            s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        *reinterpret_cast<float4 *>(dbl + (size_t)(r0 + r) * J + j) = s;
    }
    cluster_sync();  // no block leaves while another reads its partials
}
#define XP_CLUSTER_DIMS __cluster_dims__(XP_KS, 1, 1)
#define XP_BODY(NT, T) xproj<T, NT>(u, W, dbl, M, E, J);
#else
#define XP_CLUSTER_DIMS
#define XP_BODY(NT, T) __trap();  // gpu.XProjApplies keeps the engine off it
#endif

// xproj<NT>_*: NT = 10 serves J <= 80 (the 130m shape's 48 + 2 x 16), NT = 12
// J <= 96 (370m's). Grid (XP_KS ceil(M / XP_TM)), block XP_THREADS.
#define XP_PARAMS(T) const T *__restrict__ u, const T *__restrict__ W, float *__restrict__ dbl, int M, int E, int J
extern "C" __global__ void XP_CLUSTER_DIMS __launch_bounds__(XP_THREADS) xproj10_bf16(XP_PARAMS(bf16)) { XP_BODY(10, bf16) }
extern "C" __global__ void XP_CLUSTER_DIMS __launch_bounds__(XP_THREADS) xproj10_f16(XP_PARAMS(f16)) { XP_BODY(10, f16) }
extern "C" __global__ void XP_CLUSTER_DIMS __launch_bounds__(XP_THREADS) xproj12_bf16(XP_PARAMS(bf16)) { XP_BODY(12, bf16) }
extern "C" __global__ void XP_CLUSTER_DIMS __launch_bounds__(XP_THREADS) xproj12_f16(XP_PARAMS(f16)) { XP_BODY(12, f16) }
