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
//   the channels (E / XP_KS): 4 x 32 = 128 blocks at the 130m shape (the
//   tensor-map entry also comes in clusters of 3; see xproj_tma);
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

// XP_TIMELINE (a diagnostic build; BenchmarkXProjTimeline) records when
// thread 0 of each block reaches each event below, as %globaltimer's
// nanoseconds in xp_timeline, a row of XP_EVENTS a block (the first
// XP_TL_BLOCKS blocks), and the SM it ran on in xp_sm. Other builds compile
// xp_mark to nothing.
#ifndef XP_TIMELINE
#define XP_TIMELINE 0
#endif
enum {
    XP_EV_ENTRY,    // the block starts
    XP_EV_WAITED,   // pdl_wait returned
    XP_EV_WLANDED,  // W's slice landed
    XP_EV_ULANDED,  // the last of thread 0's rows of u landed
    XP_EV_MMA,      // thread 0's products done
    XP_EV_SYNC,     // the cluster's partials in (the first cluster barrier passed)
    XP_EV_EXIT,     // the sums stored and the last cluster barrier passed
    XP_EVENTS
};
#define XP_TL_BLOCKS 1024
#if XP_TIMELINE
extern "C" __device__ unsigned long long xp_timeline[XP_TL_BLOCKS * XP_EVENTS];
extern "C" __device__ unsigned xp_sm[XP_TL_BLOCKS];  // the SM each block ran on (%smid)
#endif
__device__ __forceinline__ void xp_mark(int event) {
#if XP_TIMELINE
    if (threadIdx.x != 0) return;
    timeline_mark(xp_timeline, XP_EVENTS, XP_TL_BLOCKS, event);
    if (event == XP_EV_ENTRY && blockIdx.x < XP_TL_BLOCKS) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        xp_sm[blockIdx.x] = sm;
    }
#endif
}

// xproj_pitch is a row of W's slice and of u's tile in shared memory, in
// elements: the slice plus 8, so that rows are an odd number of 16-byte
// pieces apart and ldmatrix's eight rows miss each other's banks.
__host__ __device__ constexpr int xproj_pitch(int E) { return E / XP_KS + 8; }

// xproj_shared is the dynamic shared memory of the NT entry for E channels,
// in bytes: W's slice (8 NT rows, zeros past J) and u's tile. The partial
// products (XP_TM x 8 NT f32) reuse W's rows. gpu.XProj computes the same.
__host__ __device__ constexpr int xproj_shared(int NT, int E) { return (8 * NT + XP_TM) * xproj_pitch(E) * 2; }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// XP_RELAXED 1 (the default) ends both kernels with cluster_sync_relaxed:
// a block's last barrier only keeps it alive while the cluster reads its
// partials, so it need not wait for its stores of dbl to be seen.
#ifndef XP_RELAXED
#define XP_RELAXED 1
#endif

// xproj_part stores a warp's products (acc, rows 16 wm of the tile and
// tiles wn NW .. of 8 columns, in mma.m16n8k16's and wgmma's layout) into
// the block's partials in shared memory (part, [XP_TM][8 NT] f32).
template <int NT, int NW>
__device__ __forceinline__ void xproj_part(const float (&acc)[NW][4], float *part, int wm, int wn) {
    const int lane = threadIdx.x & 31;
    const int r = 16 * wm + (lane >> 2), col = 8 * NW * wn + 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < NW; n++) {
        *reinterpret_cast<float2 *>(part + r * 8 * NT + col + 8 * n) = make_float2(acc[n][0], acc[n][1]);
        *reinterpret_cast<float2 *>(part + (r + 8) * 8 * NT + col + 8 * n) = make_float2(acc[n][2], acc[n][3]);
    }
}

// xproj_reduce ends both kernels, once every warp's products are in part:
// block q of the cluster of KS adds the KS partials of rows q RB .. (RB =
// ceil(XP_TM / KS)) in slice order through distributed shared memory, so
// every run gives the same bits, and writes them to dbl (rows r0 ..; those
// past M left out).
template <int NT, int KS>
__device__ __forceinline__ void xproj_reduce(const float *part, float *__restrict__ dbl, int r0, int M, int J, int q) {
    const int tid = threadIdx.x;
    cluster_sync();  // every block's partials are in
    xp_mark(XP_EV_SYNC);
    constexpr int RB = (XP_TM + KS - 1) / KS;  // rows this block sums
    const int J4 = J / 4;
    const unsigned pbase = shared_addr(part);
    for (int p = tid; p < RB * J4; p += XP_THREADS) {
        const int r = q * RB + p / J4, j = p % J4 * 4;
        if (r >= XP_TM || r0 + r >= M) break;
        const unsigned at = pbase + (r * 8 * NT + j) * 4;
        float4 s = cluster_ld4(cluster_map(at, 0));
#pragma unroll
        for (int o = 1; o < KS; o++) {
            const float4 v = cluster_ld4(cluster_map(at, o));
            s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        *reinterpret_cast<float4 *>(dbl + (size_t)(r0 + r) * J + j) = s;
    }
    // No block leaves while another reads its partials.
    if (XP_RELAXED)
        cluster_sync_relaxed();
    else
        cluster_sync();
    xp_mark(XP_EV_EXIT);
}

template <class T, int NT>
__device__ __forceinline__ void xproj(const T *u, const T *__restrict__ W, float *__restrict__ dbl, int M,
                                      int E, int J) {
    static_assert(NT % 2 == 0, "two warps split a row's tiles of columns");
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    xp_mark(XP_EV_ENTRY);
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
    xp_mark(XP_EV_WAITED);
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
    xp_mark(XP_EV_WAITED);
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
    xp_mark(XP_EV_WLANDED);
    mbar_wait(ubar(wm), 0);
    xp_mark(XP_EV_ULANDED);
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
    xp_mark(XP_EV_MMA);
    __syncthreads();  // every warp is done with W's slice: the partials go over it
    xproj_part<NT, NW>(acc, part, wm, wn);
    xproj_reduce<NT, XP_KS>(part, dbl, r0, M, J, q);
}
// xproj_tma is xproj with its operands copied as tiles through TMA tensor
// maps (XProj.TMA; the engine's where Engine.AutoXProj takes our kernel):
// umap views u as [M, E] and wmap W as [J, E], both in boxes of 64
// channels (128 bytes, swizzled in 128-byte rows) by 64 rows of u or 8 NT
// rows of W, which the copy engine zero-fills past M and past J. A block's
// slice of E / KS channels is C = E / KS / 64 such chunks: C copies of W
// (issued before the wait) and C of u, 2 C copies a block in all (12 at the
// 130m shape in clusters of 4) where xproj makes a copy a row (144).
//
// KS, the blocks of a cluster (slices of E), is XP_KS (4) or 3. Clusters
// sit inside one GPC: at 32 tiles of rows (130m, T=2048) clusters of 4 did
// not all find four SMs of a GPC on the H200 measured, so some SMs ran two
// blocks and ended late; clusters of 3 fit one block an SM
// (bench/results/2026-12-01-xproj-clusters.md).
//
// Shared memory: chunk k's W box (8 NT x 128 bytes) then its u box
// (XP_TM x 128 bytes), each 1024-byte aligned (the swizzle's period), so
// xproj_tma_shared(NT, E, KS) = C (8 NT + XP_TM) 128 + 1024. In a box, the 16
// bytes of channels 8 c .. 8 c + 7 of row r sit at r 128 + 16 (c ^ r % 8):
// ldmatrix's eight rows of one 16-byte column then fall on eight distinct
// bank groups.
__host__ __device__ constexpr int xproj_tma_chunks(int E, int KS) { return E / KS / 64; }
__host__ __device__ constexpr int xproj_tma_shared(int NT, int E, int KS) {
    return xproj_tma_chunks(E, KS) * (8 * NT + XP_TM) * 128 + 1024;
}
#define XP_TMA_CMAX 8  // chunks a slice at most: E <= 2048
// XP_WGMMA 1 (the default) multiplies on wgmma, one warpgroup; 0 on
// mma.m16n8k16, every warp (as xproj).
#ifndef XP_WGMMA
#define XP_WGMMA 1
#endif

// xproj_sw is the shared address of 16-byte column c of row r in the
// swizzled box at box.
__device__ __forceinline__ unsigned xproj_sw(unsigned box, int r, int c) { return box + r * 128 + ((c ^ (r & 7)) << 4); }

template <class T, int NT, int KS>
__device__ __forceinline__ void xproj_tma(const tensor_map *umap, const tensor_map *wmap, float *__restrict__ dbl, int M,
                                          int E, int J) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    xp_mark(XP_EV_ENTRY);
    const int q = cluster_rank(), r0 = blockIdx.x / KS * XP_TM;
    const int C = xproj_tma_chunks(E, KS), c0 = q * (E / KS);
    extern __shared__ __align__(16) unsigned char xpt_smem[];
    const unsigned base = (shared_addr(xpt_smem) + 1023) & ~1023u;  // the boxes' alignment, within the 1024 bytes added
    constexpr int WBOX = 8 * NT * 128, UBOX = XP_TM * 128;
    auto wbox = [&](int k) { return base + k * (WBOX + UBOX); };
    auto ubox = [&](int k) { return wbox(k) + WBOX; };
    float *part = reinterpret_cast<float *>(xpt_smem + (base - shared_addr(xpt_smem)));  // [XP_TM][8 NT], over the boxes once done
    __shared__ __align__(8) unsigned long long xp_bars[1 + XP_TMA_CMAX];
    const unsigned wbar = shared_addr(&xp_bars[0]);
    auto ubar = [&](int k) { return wbar + 8 * (1 + k); };
    if (C < 1 || C > XP_TMA_CMAX || XP_TM * 8 * NT * 4 > C * (WBOX + UBOX)) __trap();  // gpu.XProj checks E
    if (tid == 0) {
        for (int b = 0; b <= C; b++) mbar_init(wbar + 8 * b, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        tma_prefetch_map(umap);
        mbar_expect_tx(wbar, C * WBOX);  // whole boxes: the zeros past J count
        for (int k = 0; k < C; k++) tma_load(wbox(k), wmap, wbar, c0 + 64 * k, 0);
    }
    pdl_wait();
    xp_mark(XP_EV_WAITED);
    if (tid == 0) {
        for (int k = 0; k < C; k++) {
            mbar_expect_tx(ubar(k), UBOX);
            tma_load(ubox(k), umap, ubar(k), c0 + 64 * k, r0);
        }
    }
    pdl_release();  // the scan may launch: it waits for this grid before reading dbl
    __syncthreads();  // the barriers are initialized before any thread waits on them

#if XP_WGMMA
    // Warpgroup 0 multiplies, on wgmma (m64 n8NT k16, both operands from
    // the swizzled boxes), each chunk's four steps as the chunk lands; its
    // accumulators hold mma.m16n8k16's layout for rows 16 warp .., all NT
    // tiles of columns. Warpgroup 1 only joins the sums.
    float acc[NT][4];
    if (warp < 4) {
        float(&d)[4 * NT] = *reinterpret_cast<float(*)[4 * NT]>(&acc[0][0]);
        mbar_wait(wbar, 0);
        xp_mark(XP_EV_WLANDED);
        for (int k = 0; k < C; k++) {
            mbar_wait(ubar(k), 0);
            if (k == C - 1) xp_mark(XP_EV_ULANDED);
            wg_fence();
#pragma unroll
            for (int j = 0; j < 4; j++) wg_mma(T{}, d, wg_desc(ubox(k) + 32 * j), wg_desc(wbox(k) + 32 * j), k > 0 || j > 0);
            wg_commit();
        }
        wg_wait0();
    }
    xp_mark(XP_EV_MMA);
    __syncthreads();  // every warp is done with the boxes: the partials go over them
    if (warp < 4) xproj_part<NT, NT>(acc, part, warp, 0);
#else
    constexpr int NW = NT / 2;  // a warp's tiles of 8 columns
    const int wm = warp % 4, wn = warp / 4;
    float acc[NW][4];
#pragma unroll
    for (int n = 0; n < NW; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    // This lane's rows in ldmatrix's terms (as mma_k16 takes them): A's row
    // and 16-byte half, B's row within a pair of 8-row tiles and its half.
    const int ar = 16 * wm + (lane & 15), ah = lane >> 4;
    const int br = wn * NW * 8 + (lane & 7) + (lane >> 4) * 8, bh = (lane >> 3) & 1;
    mbar_wait(wbar, 0);
    xp_mark(XP_EV_WLANDED);
    for (int k = 0; k < C; k++) {
        mbar_wait(ubar(k), 0);
        if (k == C - 1) xp_mark(XP_EV_ULANDED);
#pragma unroll
        for (int j = 0; j < 4; j++) {  // 16 channels a step: 16-byte columns 2 j and 2 j + 1
            unsigned a[4];
            ldmatrix4(xproj_sw(ubox(k), ar, 2 * j + ah), a);
#pragma unroll
            for (int n = 0; n < NW; n += 2) {
                unsigned bf[4];
                const unsigned at = xproj_sw(wbox(k), br + 8 * n, 2 * j + bh);
                if (n + 1 < NW) {
                    ldmatrix4(at, bf);
                    mma16816<T>(acc[n + 1], a, bf[2], bf[3]);
                } else {
                    ldmatrix2(at, bf);
                }
                mma16816<T>(acc[n], a, bf[0], bf[1]);
            }
        }
    }
    xp_mark(XP_EV_MMA);
    __syncthreads();  // every warp is done with the boxes: the partials go over them
    xproj_part<NT, NW>(acc, part, wm, wn);
#endif
    xproj_reduce<NT, KS>(part, dbl, r0, M, J, q);
}
#define XP_CLUSTER(KS) __cluster_dims__(KS, 1, 1)
#define XP_BODY(NT, T) xproj<T, NT>(u, W, dbl, M, E, J);
#define XP_TMA_BODY(NT, T, KS) xproj_tma<T, NT, KS>(&umap, &wmap, dbl, M, E, J);
#else
#define XP_CLUSTER(KS)
#define XP_BODY(NT, T) __trap();  // gpu.XProjApplies keeps the engine off it
#define XP_TMA_BODY(NT, T, KS) __trap();
#endif
#define XP_CLUSTER_DIMS XP_CLUSTER(XP_KS)
#define XP_CLUSTER_DIMS3 XP_CLUSTER(3)

// xproj<NT>_*: NT = 10 serves J <= 80 (the 130m shape's 48 + 2 x 16), NT = 12
// J <= 96 (370m's). Grid (XP_KS ceil(M / XP_TM)), block XP_THREADS.
#define XP_PARAMS(T) const T *u, const T *__restrict__ W, float *__restrict__ dbl, int M, int E, int J
extern "C" __global__ void XP_CLUSTER_DIMS __launch_bounds__(XP_THREADS) xproj10_bf16(XP_PARAMS(bf16)) { XP_BODY(10, bf16) }
extern "C" __global__ void XP_CLUSTER_DIMS __launch_bounds__(XP_THREADS) xproj10_f16(XP_PARAMS(f16)) { XP_BODY(10, f16) }
extern "C" __global__ void XP_CLUSTER_DIMS __launch_bounds__(XP_THREADS) xproj12_bf16(XP_PARAMS(bf16)) { XP_BODY(12, bf16) }
extern "C" __global__ void XP_CLUSTER_DIMS __launch_bounds__(XP_THREADS) xproj12_f16(XP_PARAMS(f16)) { XP_BODY(12, f16) }

// xproj_tma<NT>_*: xproj_tma, the same grid and block, its shared memory
// xproj_tma_shared(NT, E, XP_KS) (launched by gpu.XProj with TMA set);
// xproj_tma<NT>s3_*: clusters of 3 (grid 3 ceil(M / XP_TM), E a multiple of
// 192; gpu.XProj with Slices 3).
#define XP_TMA_PARAMS \
    const __grid_constant__ tensor_map umap, const __grid_constant__ tensor_map wmap, float *__restrict__ dbl, int M, int E, int J
extern "C" __global__ void XP_CLUSTER_DIMS __launch_bounds__(XP_THREADS) xproj_tma10_bf16(XP_TMA_PARAMS) { XP_TMA_BODY(10, bf16, XP_KS) }
extern "C" __global__ void XP_CLUSTER_DIMS __launch_bounds__(XP_THREADS) xproj_tma10_f16(XP_TMA_PARAMS) { XP_TMA_BODY(10, f16, XP_KS) }
extern "C" __global__ void XP_CLUSTER_DIMS __launch_bounds__(XP_THREADS) xproj_tma12_bf16(XP_TMA_PARAMS) { XP_TMA_BODY(12, bf16, XP_KS) }
extern "C" __global__ void XP_CLUSTER_DIMS __launch_bounds__(XP_THREADS) xproj_tma12_f16(XP_TMA_PARAMS) { XP_TMA_BODY(12, f16, XP_KS) }
extern "C" __global__ void XP_CLUSTER_DIMS3 __launch_bounds__(XP_THREADS) xproj_tma10s3_bf16(XP_TMA_PARAMS) { XP_TMA_BODY(10, bf16, 3) }
extern "C" __global__ void XP_CLUSTER_DIMS3 __launch_bounds__(XP_THREADS) xproj_tma10s3_f16(XP_TMA_PARAMS) { XP_TMA_BODY(10, f16, 3) }
extern "C" __global__ void XP_CLUSTER_DIMS3 __launch_bounds__(XP_THREADS) xproj_tma12s3_bf16(XP_TMA_PARAMS) { XP_TMA_BODY(12, bf16, 3) }
extern "C" __global__ void XP_CLUSTER_DIMS3 __launch_bounds__(XP_THREADS) xproj_tma12s3_f16(XP_TMA_PARAMS) { XP_TMA_BODY(12, f16, 3) }
