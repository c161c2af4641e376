// out_proj, the residual add and the next layer's RMSNorm in one launch
// (sm_90a), for a layer of d = 8 ON_BN columns:
//
//   h [M, d] += y [M, K] · Wᵀ                                  (the residual stream, f32)
//   x [M, d]  = T(w[i] · (h[r, i] · rsqrt(mean_i(h[r, :]²) + eps)))   (the next layer's in_proj input)
//
// y [M, K] and W [d, K] of a 16-bit storage type T, both K-major, as TMA
// tensor maps (cuda.NewTensorMap2D, 128-byte swizzle, 64 elements of K a
// box: y in boxes of ON_BOX rows, W in boxes of ON_BN rows); h [M, d] f32
// also as a plain tensor map (cuda.NewTensorMap2DPlain, read only with
// ON_HTMA); h and x rows d apart; w [d] f32 (RMSNorm's weight). The norm is
// rmsnorm.cu's math, its sum of squares added in another order.
//
// A cluster of 8 blocks owns 128 rows of h, block r (its rank) the columns
// r ON_BN .. r ON_BN + ON_BN - 1 of them: grid (8, ceil(M / 128)), cluster
// (8, 1, 1). So a cluster holds whole rows, and the row sums of the norm
// stay on chip: each block sums the squares of its tile's rows over its
// columns, and every block adds the cluster's 8 partial sums of a row in
// rank order through distributed shared memory. (At the 130m shape, d =
// 768 and T = 2048: 128 blocks, about one wave.)
//
// A block is gemm_tma.cu's: warp 8 the producer, warpgroups 0 and 1 the
// consumers of rows 0-63 and 64-127, a ring of ON_STAGES stages on full and
// empty mbarriers (ON_WAIT0 says when a stage goes back). Under
// programmatic dependent launch the producer fetches W's first stages
// before it waits for the previous kernel (the scan, which writes y), and
// the consumers wait before they read h.

#define ON_BM 128
#ifndef ON_BN
#define ON_BN 96  // d / 8: 96 for the 130m shape's d = 768, 128 for 1024
#endif
#define ON_BK 64
#define ON_CLUSTER 8
#ifndef ON_STAGES
#define ON_STAGES 3  // 28 KB a stage at ON_BN = 96: two blocks an SM
#endif
// ON_MULTICAST 0 (the default) has each block copy y's whole 128 x 64 tile
// of a step itself (in ON_BOX-row boxes); 1 shares the tiles across the
// cluster (TMA multicast, boxes of 16 rows): y is then read from L2 once a
// cluster, but every stage waits for the consumers of all 8 blocks, each
// releasing it in 8 blocks (a cluster-scope fence each). On the H200 the
// main loop alone took 55.7 µs with the multicast against 10.0 without
// (130m, T = 2048; BenchmarkOutNorm), so the multicast is a build for
// comparison only.
#ifndef ON_MULTICAST
#define ON_MULTICAST 0
#endif
// ON_BOX: the rows of y each copy brings (y's tensor map's box), so a
// stage takes 128 / ON_BOX copies of y and one of W. The main loop alone on
// the H200 (130m, T = 2048; BenchmarkOutNorm, runs 3-5 of
// bench/results/2026-12-01-out-norm.md, on three machines): y in 8 boxes
// of 16 rows and W in one 10.0 µs, y in one box 17.6, y and W both in
// boxes of 16 rows 20.1.
#ifndef ON_BOX
#define ON_BOX 16
#endif
// ON_HTMA 1 has the producer copy the block's tile of h (f32, 128 x ON_BN,
// plain rows: cuda.NewTensorMap2DPlain) into shared memory by TMA as soon
// as it may, so the epilogue reads it there instead of from L2 through
// registers (the loads alone cost 8.6 µs at the 130m shape, T = 2048).
#ifndef ON_HTMA
#define ON_HTMA 0
#endif
#define ON_H_BYTES (ON_HTMA ? ON_BM * ON_BN * 4 : 0)
// ON_WAIT0 1 (the default) has the consumers wait for each step's MMAs
// before they release its stage; 0 keeps one step's MMAs in flight and
// releases the step before's stage (gemm_tma.cu's loop). With 0 a stage goes
// back only after the next has arrived, so the ring holds one copy fewer in
// flight. On the H200 (130m; BenchmarkOutNorm, run 11 of
// bench/results/2026-12-01-out-norm.md): 34.4 µs against 36.3 at T = 2048,
// 96.2 against 115.2 at T = 8192. (ptxas serializes the MMAs of the build
// without an epilogue whatever this says.)
#ifndef ON_WAIT0
#define ON_WAIT0 1
#endif
// ON_EPILOGUE 0 drops the epilogue (h, the norm, x: nothing is written),
// a build that times the main loop alone (BenchmarkOutNorm); 5 only loads
// h, a build that times that load. (Runs 8-9 of
// bench/results/2026-12-01-out-norm.md also timed 2, 3 and 4: the sums
// without the cluster's exchange, h loaded and stored only, the norm and x
// only; they are in the history at 967320e.)
#ifndef ON_EPILOGUE
#define ON_EPILOGUE 1
#endif
#define ON_H_LOAD (ON_EPILOGUE == 1 || ON_EPILOGUE == 5)
#define ON_H_STORE (ON_EPILOGUE == 1)
#define ON_X (ON_EPILOGUE == 1)
#define ON_THREADS 288
#define ON_SLICE (ON_BM / ON_CLUSTER)  // rows of y's tile each block copies for its cluster
#define ON_STAGE_BYTES ((ON_BM + ON_BN) * ON_BK * 2)

// out_norm_shared is the dynamic shared memory of out_norm_*: the ring (and
// h's tile with ON_HTMA), 1024 bytes to align it (the 128-byte swizzle
// repeats every 1024), two barriers a stage and h's, and a float a row (the
// block's sums of squares). gpu.OutNorm passes the same.
__host__ __device__ constexpr int out_norm_shared() {
    return ON_STAGES * ON_STAGE_BYTES + ON_H_BYTES + 1024 + (2 * ON_STAGES + 1) * 8 + ON_BM * 4;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <class T>
__device__ __forceinline__ void out_norm(const tensor_map *ymap, const tensor_map *wmap, const tensor_map *hmap, float *h,
                                         const float *__restrict__ nw, T *x, int M, int K, float eps) {
    extern __shared__ __align__(1024) unsigned char on_smem[];
    const unsigned base = (shared_addr(on_smem) + 1023) & ~1023u;
    const unsigned htile = base + ON_STAGES * ON_STAGE_BYTES;  // [ON_BM][ON_BN] f32 (ON_HTMA)
    const unsigned bars = htile + ON_H_BYTES;  // full[s] at bars + 8 s, empty[s] after them, then h's
    const unsigned hbar = bars + 2 * ON_STAGES * 8;
    const unsigned sums = hbar + 8;  // [ON_BM] f32
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (ON_STAGES + s); };
    auto sY = [&](int s) { return base + s * ON_STAGE_BYTES; };
    auto sW = [&](int s) { return base + s * ON_STAGE_BYTES + ON_BM * ON_BK * 2; };
    constexpr int N = ON_CLUSTER * ON_BN;
    const unsigned rank = cluster_rank();
    const int steps = (K + ON_BK - 1) / ON_BK, m0 = blockIdx.y * ON_BM, n0 = rank * ON_BN;
    const int wg = threadIdx.x / 128;  // 0 and 1 the consumers, 2 the producer (one warp)
    if (threadIdx.x == 0) {
        for (int s = 0; s < ON_STAGES; s++) mbar_init(full(s), 1), mbar_init(empty(s), ON_MULTICAST ? 2 * ON_CLUSTER : 2);
        mbar_init(hbar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    cluster_sync();  // every block's barriers exist before a copy or an arrival reaches them
    if (wg == 2) {
        if (threadIdx.x == 256) {
            // Step k's stage: the local W slice, and this block's slice of
            // y's tile into every block of the cluster.
            auto copy_y = [&](int s, int k) {
                if (ON_MULTICAST)
                    tma_load_multicast(sY(s) + rank * ON_SLICE * ON_BK * 2, ymap, full(s), k * ON_BK,
                                       m0 + rank * ON_SLICE, (1u << ON_CLUSTER) - 1);
                else
                    for (int q = 0; q < ON_BM / ON_BOX; q++)
                        tma_load(sY(s) + q * ON_BOX * ON_BK * 2, ymap, full(s), k * ON_BK, m0 + q * ON_BOX);
            };
            auto copy_w = [&](int s, int k) { tma_load(sW(s), wmap, full(s), k * ON_BK, n0); };
            const int k0 = min(steps, ON_STAGES);
            for (int k = 0; k < k0; k++) {  // W: a weight, ready before the wait
                mbar_expect_tx(full(k), ON_STAGE_BYTES);
                copy_w(k, k);
            }
            pdl_wait();
            if (ON_HTMA) {
                mbar_expect_tx(hbar, ON_H_BYTES);
                tma_load(htile, hmap, hbar, n0, m0);
            }
            for (int k = 0; k < k0; k++) copy_y(k, k);
            for (int k = k0; k < steps; k++) {
                const int s = k % ON_STAGES;
                // Every consumer of the cluster is done with step k - ON_STAGES.
                mbar_wait_cluster(empty(s), (k / ON_STAGES - 1) & 1);
                mbar_expect_tx(full(s), ON_STAGE_BYTES);
                copy_w(s, k);
                copy_y(s, k);
            }
        }
    }
    // d[4i + 2hh + q] is local row lr + 8 hh, column 8 i + 2 (lane % 4) + q
    // of the block's tile (w the warp in its warpgroup).
    const int w = threadIdx.x % 128 / 32, lane = threadIdx.x % 32, lr = wg * 64 + 16 * w + lane / 4;
    float d[ON_BN / 2];
    if (wg < 2) {
        pdl_wait();  // h is read below
#pragma unroll
        for (int i = 0; i < ON_BN / 2; i++) d[i] = 0.f;
        const unsigned rows = wg * 64 * ON_BK * 2;  // the warpgroup's 64 rows of y's tile
        const bool lead = threadIdx.x % 128 == 0;
        for (int k = 0; k < steps; k++) {
            const int s = k % ON_STAGES;
            mbar_wait(full(s), (k / ON_STAGES) & 1);
            wg_fence();
#pragma unroll
            for (int j = 0; j < ON_BK / 16; j++)
                wg_mma(T{}, d, wg_desc(sY(s) + rows + 32 * j), wg_desc(sW(s) + 32 * j), k > 0 || j > 0);
            wg_commit();
            // ON_WAIT0: step k's MMAs are done, and its stage goes back to
            // the producer (of every block of the cluster with the
            // multicast) if it will fill it again. Else step k - 1's are,
            // and its stage goes back: one step's MMAs stay in flight while
            // the next stage is waited for, but a stage is then released
            // only once the next one has arrived.
            const int done = ON_WAIT0 ? k : k - 1;
            if (ON_WAIT0)
                wg_wait0();
            else
                wg_wait1();
            if (lead && done >= 0 && done + ON_STAGES < steps) {
                const unsigned e = empty(done % ON_STAGES);
                if (ON_MULTICAST)
                    for (int q = 0; q < ON_CLUSTER; q++) mbar_arrive_cluster(cluster_map(e, q));
                else
                    mbar_arrive(e);
            }
        }
        // The tile's rows of h, all loads in flight together while the last
        // step's MMAs run. (Loaded and stored element by element, each load
        // waited for the store before it: 18 µs of L2 round trips at the
        // 130m shape, T = 2048.)
        float2 o[ON_BN / 8][2];
#pragma unroll
        for (int i = 0; i < ON_BN / 8; i++) {
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int r = m0 + lr + 8 * hh, c = n0 + 8 * i + 2 * (lane % 4);
                if (ON_HTMA) {
                    if (i == 0 && hh == 0) mbar_wait(hbar, 0);
                    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];"
                                 : "=f"(o[i][hh].x), "=f"(o[i][hh].y)
                                 : "r"(htile + 4 * ((lr + 8 * hh) * ON_BN + c - n0))
                                 : "memory");
                } else {
                    o[i][hh] = r < M && ON_H_LOAD ? *reinterpret_cast<const float2 *>(h + (size_t)r * N + c)
                                                  : make_float2(0.f, 0.f);
                }
            }
        }
        wg_wait0();
        // h += the tile, and this block's sum of squares of each row.
        float ss[2] = {0.f, 0.f};
#pragma unroll
        for (int i = 0; i < ON_BN / 8; i++) {
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int r = m0 + lr + 8 * hh, c = n0 + 8 * i + 2 * (lane % 4);
                const float a = d[4 * i + 2 * hh] + o[i][hh].x, b = d[4 * i + 2 * hh + 1] + o[i][hh].y;
                d[4 * i + 2 * hh] = a, d[4 * i + 2 * hh + 1] = b;
                ss[hh] += a * a + b * b;
                if (r < M && ON_H_STORE) *reinterpret_cast<float2 *>(h + (size_t)r * N + c) = make_float2(a, b);
            }
        }
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {  // the four lanes of a row
            ss[hh] += __shfl_xor_sync(0xffffffffu, ss[hh], 1);
            ss[hh] += __shfl_xor_sync(0xffffffffu, ss[hh], 2);
        }
        if (lane % 4 == 0) {
            asm volatile("st.shared.f32 [%0], %1;" ::"r"(sums + 4 * lr), "f"(ss[0]) : "memory");
            asm volatile("st.shared.f32 [%0], %1;" ::"r"(sums + 4 * (lr + 8)), "f"(ss[1]) : "memory");
        }
    }
    cluster_sync();  // every block's row sums are in
    if (wg < 2 && ON_X) {
        float scale[2];
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            float total = 0.f;
            for (int q = 0; q < ON_CLUSTER; q++) total += cluster_ld(cluster_map(sums + 4 * (lr + 8 * hh), q));
            scale[hh] = rsqrtf(total / N + eps);
        }
#pragma unroll
        for (int i = 0; i < ON_BN / 8; i++) {
            const int c = n0 + 8 * i + 2 * (lane % 4);
            const float2 g = *reinterpret_cast<const float2 *>(nw + c);
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int r = m0 + lr + 8 * hh;
                if (r >= M) continue;
                const unsigned v = from_f32<T>(g.x * (d[4 * i + 2 * hh] * scale[hh])).bits |
                                   (unsigned)from_f32<T>(g.y * (d[4 * i + 2 * hh + 1] * scale[hh])).bits << 16;
                *reinterpret_cast<unsigned *>(x + (size_t)r * N + c) = v;
            }
        }
    }
    cluster_sync();  // no block leaves while another reads its row sums
    pdl_release();
}
#define ON_CLUSTER_DIMS __cluster_dims__(ON_CLUSTER, 1, 1)
#else
#define ON_CLUSTER_DIMS
#endif

// out_norm_entry runs out_norm for a 16-bit type on sm_90a; elsewhere, and
// for f32 (EACH_DTYPE makes every type's entry), it traps.
template <class T>
__device__ __forceinline__ void out_norm_entry(const tensor_map *ymap, const tensor_map *wmap, const tensor_map *hmap,
                                               float *h, const float *nw, T *x, int M, int K, float eps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    out_norm<T>(ymap, wmap, hmap, h, nw, x, M, K, eps);
#else
    __trap();
#endif
}
template <>
__device__ __forceinline__ void out_norm_entry<float>(const tensor_map *, const tensor_map *, const tensor_map *, float *,
                                                      const float *, float *, int, int, float) {
    __trap();
}
#define OUT_NORM(sfx, T)                                                                                            \
    extern "C" __global__ void ON_CLUSTER_DIMS __launch_bounds__(ON_THREADS, 1)                                      \
        out_norm_##sfx(const __grid_constant__ tensor_map ymap, const __grid_constant__ tensor_map wmap,             \
                       const __grid_constant__ tensor_map hmap, float *h, const float *__restrict__ nw, T *x, int M, \
                       int K, float eps) {                                                                           \
        out_norm_entry<T>(&ymap, &wmap, &hmap, h, nw, x, M, K, eps);                                                  \
    }
EACH_DTYPE(OUT_NORM)
