// The causal conv with SiLU and x_proj in one launch, for the 16-bit storage
// types (sm_80 and newer):
//
//   u[b, t, c]   = silu(bias[c] + sum_k w[c, k] * x[b, t - K + 1 + k, c])   (conv.cu)
//   dbl[b, t, j] = sum_c u[b, t, c] * W[j, c]                               (x_proj)
//
// x is the xs half of in_proj's output (f32, row (b, t) at xz + (b*T + t)*ldx),
// win [B, E, K] the carried windows (f32, updated as conv.cu does), cw [E, K]
// and cbias [E] (or nullptr) the conv's f32 weights, W [J, E] x_proj's weight
// in the storage type T, u [B, T, E] in T, dbl [B, T, J] f32. K <= 4, E a
// multiple of 8, J a multiple of 4 and at most 8 NT. part [B, T, CX_CS, J]
// (f32) is scratch, and count [B ceil(T / CX_TM)] counters that are zero
// between launches.
//
// Unfused, the conv writes u and x_proj's GEMM reads it back: two graph nodes,
// one of them cuBLAS's, whose fixed cost (about 3 us at the 130m shape, B=1,
// T=2048, where x_proj's 2048 x 80 output fills half the GPU) is a large part
// of a layer's. Here CX_CS blocks take CX_TM positions of one sequence (grid
// (CX_CS ceil(T / CX_TM), B)), block r of them slice r of the channels, in
// chunks of CX_KC (at most CX_MAXC a slice):
// - every chunk's inputs are copied to shared memory at once (cp.async):
//   W's and the conv's weights ahead of the wait for the kernel before; x's
//   after it, rows t0 - 3 .. t0 + CX_TM - 1, a group a chunk;
// - the conv of a chunk, a thread one channel and CX_RUN consecutive
//   positions, goes to a tile of u in shared memory, and from there to u in
//   16-byte pieces: the same bits as conv_silu's (the same f32 operations in
//   the same order);
// - the chunk's share of x_proj on the tensor cores: warp w owns rows
//   16 (w % 4) .. 16 (w % 4) + 15 of the tile and half of dbl's columns (NT / 2
//   tiles of 8, the first or the second half as w / 4), in f32 accumulators
//   (mma.m16n8k16 over fragments from ldmatrix), beside the next chunk's conv,
//   so a chunk costs one barrier.
// Each block then writes its partial products to part and counts itself in
// on its tile's counter; the tile's last block sums the CX_CS partials in
// slice order (so the same bits whichever block is last), writes dbl and
// resets the counter. (A cluster of CX_CS blocks summing through distributed
// shared memory was slower on the H200: 30 clusters of 8 fit at once, fewer
// than the 32 of the 130m shape at T=2048, and its barriers' release fences
// waited for the stores of u; bench/NOTES.md.)

#define CX_THREADS 256                 // a block: 8 warps
#define CX_TM 64                       // positions a tile
#define CX_WN 2                        // warps a row of 16 positions: they split dbl's columns
#define CX_CS 8                        // blocks a tile of positions: slices of the channels
#define CX_KC 64                       // channels a chunk
#define CX_KP (CX_KC + 8)              // a row of a chunk's tiles in shared memory: 144 bytes, so ldmatrix's rows miss each other's banks
#define CX_GROUPS (CX_THREADS / CX_KC) // the conv's threads a channel
#define CX_RUN (CX_TM / CX_GROUPS)     // the conv's positions a thread

#define CX_XR (CX_TM + 3)               // rows of a chunk of x in shared memory: 3 positions before the tile
#define CX_MAXC 4                      // chunks a slice at most: E <= CX_CS CX_KC CX_MAXC = 2048

// conv_xproj_chunks is a slice's chunks of CX_KC channels for E channels.
__host__ __device__ constexpr int conv_xproj_chunks(int E) { return ((E + CX_KC - 1) / CX_KC + CX_CS - 1) / CX_CS; }

// conv_xproj_shared is the dynamic shared memory of the NT entry for E
// channels, in bytes: every chunk's x, the conv's weights and bias (f32) and
// W (T), then two tiles of u. gpu.ConvXProj computes the same size to launch it.
__host__ __device__ constexpr int conv_xproj_shared(int NT, int E) {
    return conv_xproj_chunks(E) * (CX_XR * CX_KC * 4 + CX_KC * 5 * 4 + 8 * NT * CX_KP * 2) + 2 * CX_TM * CX_KP * 2;
}

#if __CUDA_ARCH__ >= 800

template <class T, int NT>
__device__ __forceinline__ void conv_xproj(const float *xz, int ldx, float *__restrict__ win,
                                           const float *__restrict__ cw, const float *__restrict__ cbias,
                                           const T *__restrict__ W, T *__restrict__ u, float *__restrict__ dbl,
                                           float *part, unsigned *count, int T_, int E, int K, int J) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int rank = blockIdx.x % CX_CS, b = blockIdx.y, tile = blockIdx.x / CX_CS, t0 = tile * CX_TM;
    const int chunks = conv_xproj_chunks(E);  // a slice's
    const int cfirst = rank * chunks * CX_KC;  // the slice's first channel
    const size_t row0 = (size_t)b * T_;
    extern __shared__ __align__(16) unsigned char cx_smem[];
    float *xs = reinterpret_cast<float *>(cx_smem);                        // [chunks][CX_XR][CX_KC]
    float *cws = xs + chunks * CX_XR * CX_KC;                              // [chunks][CX_KC K], the conv's weights
    float *cbs = cws + chunks * CX_KC * 4;                                 // [chunks][CX_KC], its bias
    T *ws = reinterpret_cast<T *>(cbs + chunks * CX_KC);                   // [chunks][8 NT][CX_KP]
    T *us = ws + chunks * 8 * NT * CX_KP;                                   // [2][CX_TM][CX_KP]

    // Every chunk's copies at once, so that their latencies overlap: W's
    // (rows j < J of the chunk's columns; zeros past J, up to 8 NT, and past
    // E) in one group ahead of the wait, as weights; then each chunk's x in
    // a group of its own, rows t0 - 3 .. t0 + CX_TM - 1 (zeros before 0 and
    // past T: the conv takes the window's values from global memory).
    for (int p = tid; p < chunks * 8 * NT * (CX_KC / 8); p += CX_THREADS) {
        int i = p / (8 * NT * (CX_KC / 8)), j = p / (CX_KC / 8) % (8 * NT), k = p % (CX_KC / 8) * 8, c = cfirst + i * CX_KC + k;
        bool ok = j < J && c < E;
        cp_async_s<16>(shared_addr(ws + (i * 8 * NT + j) * CX_KP + k), ok ? W + (size_t)j * E + c : W, ok);
    }
    // The conv's weights and bias likewise, 16 bytes a piece: E K and E are
    // multiples of 8, so a piece is whole or past the end.
    for (int p = tid; p < chunks * CX_KC * (K + 1) / 4; p += CX_THREADS) {
        int i = p / (CX_KC * (K + 1) / 4), q = p % (CX_KC * (K + 1) / 4) * 4, c0 = cfirst + i * CX_KC;
        if (q < CX_KC * K) {
            bool ok = c0 * K + q < E * K;
            cp_async_s<16>(shared_addr(cws + i * CX_KC * 4 + q), ok ? cw + (size_t)c0 * K + q : cw, ok);
        } else {
            q -= CX_KC * K;
            bool ok = cbias && c0 + q < E;
            cp_async_s<16>(shared_addr(cbs + i * CX_KC + q), ok ? cbias + c0 + q : cw, ok);
        }
    }
    cp_async_commit();
    pdl_wait();
    for (int i = 0; i < chunks; i++) {
        const int c0 = cfirst + i * CX_KC;
        const unsigned dst = shared_addr(xs + i * CX_XR * CX_KC);
        each_copy<CX_THREADS, CX_XR * CX_KC / 4>([&](int p) {
            int r = p / (CX_KC / 4), k = p % (CX_KC / 4) * 4, t = t0 - 3 + r;
            bool ok = t >= 0 && t < T_ && c0 + k < E;
            cp_async_s<16>(dst + (r * CX_KC + k) * 4, ok ? xz + (row0 + t) * ldx + c0 + k : xz, ok);
        });
        cp_async_commit();
    }
    // wait_x(i) returns once this thread's copies of chunk i (and of every
    // group before it) have landed.
    auto wait_x = [&](int i) {
        switch (chunks - 1 - i) {
            case 0: cp_async_wait<0>(); break;
            case 1: cp_async_wait<1>(); break;
            case 2: cp_async_wait<2>(); break;
            default: cp_async_wait<3>(); break;
        }
    };

    // The conv of chunk i into the tile of u ut, as conv_silu computes it
    // (acc = bias, then each tap's product added in order): thread (cc, g)
    // takes channel cc and positions g CX_RUN .. g CX_RUN + CX_RUN - 1 of
    // the tile. Tile 0 reads the window (its only reader) and then updates it.
    const int cc = tid % CX_KC, g = tid / CX_KC;
    auto conv = [&](int i, T *ut) {
        const int c = cfirst + i * CX_KC + cc;
        const bool live = c < E;
        float wp[4], in[CX_RUN + 3];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int k = j - (4 - K);
            wp[j] = k >= 0 ? cws[i * CX_KC * 4 + cc * K + k] : 0.f;  // zeros past E
        }
        const float b0 = cbs[i * CX_KC + cc];
        const float *xc = xs + (i * CX_XR + g * CX_RUN) * CX_KC + cc;
#pragma unroll
        for (int p = 0; p < CX_RUN + 3; p++) in[p] = xc[p * CX_KC];
        float *state = win + ((size_t)b * E + c) * K;
        if (t0 == 0 && g == 0 && live) {
#pragma unroll
            for (int p = 0; p < 3; p++) in[p] = p - 3 >= -K ? state[K + p - 3] : 0.f;
        }
#pragma unroll
        for (int p = 0; p < CX_RUN; p++) {
            float a = b0;
#pragma unroll
            for (int j = 0; j < 4; j++) a += wp[j] * in[p + j];
            ut[(g * CX_RUN + p) * CX_KP + cc] = from_f32<T>(silu_f(a));
        }
        if (t0 == 0 && g == 0 && live) {  // done with the window: slot k takes element T + k of concat(window, x)
            float next[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                int t = T_ - K + k;
                next[k] = k >= K ? 0.f : t >= 0 ? xz[(row0 + t) * ldx + c] : state[T_ + k];
            }
#pragma unroll
            for (int k = 0; k < 4; k++)
                if (k < K) state[k] = next[k];
        }
    };

    constexpr int NW = NT / CX_WN;  // a warp's tiles of 8 columns
    const int wm = warp % (CX_TM / 16), wn = warp / (CX_TM / 16);
    float acc[NW][4];
#pragma unroll
    for (int n = 0; n < NW; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

    // store_u copies a tile of u, channels c0 .., from shared memory to u, 16
    // bytes a piece.
    auto store_u = [&](const T *ut, int c0) {
        each_copy<CX_THREADS, CX_TM * CX_KC / 8>([&](int p) {
            int r = p / (CX_KC / 8), k = p % (CX_KC / 8) * 8;
            if (t0 + r < T_ && c0 + k < E) {
                uint4 v;
                asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                             : "r"(shared_addr(ut + r * CX_KP + k)));
                *reinterpret_cast<uint4 *>(u + (row0 + t0 + r) * E + c0 + k) = v;
            }
        });
    };

    // Chunk i's products run beside chunk i + 1's conv: one barrier a chunk.
    wait_x(0);
    __syncthreads();
    conv(0, us);
    for (int i = 0; i < chunks; i++) {
        const int c0 = cfirst + i * CX_KC;
        T *ut = us + (i & 1) * CX_TM * CX_KP;
        if (i + 1 < chunks) wait_x(i + 1);
        __syncthreads();
        if (i + 1 < chunks) conv(i + 1, us + ((i + 1) & 1) * CX_TM * CX_KP);
        if (i + 1 < chunks) store_u(ut, c0);  // the last chunk's after the fence below
        // The chunk's products: the warp's 16 rows and NW tiles of columns.
        const T *wt = ws + (i * 8 * NT + wn * NW * 8) * CX_KP;
        const unsigned abase = shared_addr(ut + (16 * wm + (lane & 15)) * CX_KP + (lane >> 4) * 8);
        const unsigned bbase = shared_addr(wt + ((lane & 7) + (lane >> 4) * 8) * CX_KP + ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int ks = 0; ks < CX_KC / 16; ks++) mma_k16<T, NW>(acc, abase, bbase, CX_KP, ks * 32);
    }

    // The partial products to part, rows t < T; every thread fences its own
    // stores before the barrier, then one thread counts the block in.
    {
        const int r = 16 * wm + (lane >> 2), col = 8 * NW * wn + 2 * (lane & 3);
        float *pr = part + ((row0 + t0 + r) * CX_CS + rank) * J + col;
        const size_t down8 = (size_t)8 * CX_CS * J;  // 8 rows on
#pragma unroll
        for (int n = 0; n < NW; n++) {
            if (col + 8 * n >= J) break;
            if (t0 + r < T_) *reinterpret_cast<float2 *>(pr + 8 * n) = make_float2(acc[n][0], acc[n][1]);
            if (t0 + r + 8 < T_) *reinterpret_cast<float2 *>(pr + down8 + 8 * n) = make_float2(acc[n][2], acc[n][3]);
        }
    }
    __threadfence();
    __syncthreads();
    __shared__ unsigned last;
    unsigned *counter = count + (size_t)b * (gridDim.x / CX_CS) + tile;
    if (tid == 0) last = atomicAdd(counter, 1u) == CX_CS - 1;
    // The last tile of u goes out after the fence, which then did not wait
    // for those stores.
    store_u(us + ((chunks - 1) & 1) * CX_TM * CX_KP, cfirst + (chunks - 1) * CX_KC);
    __syncthreads();
    if (last) {  // every block of the tile has fenced its partials: sum them in slice order
        __threadfence();
        const int J4 = J / 4;
        for (int p = tid; p < CX_TM * J4; p += CX_THREADS) {
            const int r = p / J4, j = p % J4 * 4;
            if (t0 + r >= T_) break;
            const float *pr = part + (row0 + t0 + r) * CX_CS * J + j;
            float4 v[CX_CS];
#pragma unroll
            for (int q = 0; q < CX_CS; q++) v[q] = __ldcg(reinterpret_cast<const float4 *>(pr + q * J));
            float4 s = v[0];
#pragma unroll
            for (int q = 1; q < CX_CS; q++) s.x += v[q].x, s.y += v[q].y, s.z += v[q].z, s.w += v[q].w;
            *reinterpret_cast<float4 *>(dbl + (row0 + t0 + r) * J + j) = s;
        }
        if (tid == 0) *counter = 0;  // for the next launch
    }
    pdl_release();
}
#endif

// conv_xproj<NT>_*: NT = 10 serves J <= 80 (the 130m shape's 48 + 2 x 16),
// NT = 12 J <= 96 (370m's). Before sm_80 they trap; the engine launches them
// only on sm_80 and newer.
#define CX_PARAMS(T)                                                                                            \
    const float *xz, int ldx, float *__restrict__ win, const float *__restrict__ cw,                            \
        const float *__restrict__ cbias, const T *__restrict__ W, T *__restrict__ u, float *__restrict__ dbl,   \
        float *part, unsigned *count, int T_, int E, int K, int J
#if __CUDA_ARCH__ >= 800
#define CX_BODY(NT, T) conv_xproj<T, NT>(xz, ldx, win, cw, cbias, W, u, dbl, part, count, T_, E, K, J);
#else
#define CX_BODY(NT, T) __trap();
#endif
extern "C" __global__ void __launch_bounds__(CX_THREADS) conv_xproj10_bf16(CX_PARAMS(bf16)) { CX_BODY(10, bf16) }
extern "C" __global__ void __launch_bounds__(CX_THREADS) conv_xproj10_f16(CX_PARAMS(f16)) { CX_BODY(10, f16) }
extern "C" __global__ void __launch_bounds__(CX_THREADS) conv_xproj12_bf16(CX_PARAMS(bf16)) { CX_BODY(12, bf16) }
extern "C" __global__ void __launch_bounds__(CX_THREADS) conv_xproj12_f16(CX_PARAMS(f16)) { CX_BODY(12, f16) }
