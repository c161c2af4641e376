// The selective scan in one pass: a thread owns SPT states of one channel for
// every position, in order. The math, the layouts and the arguments are
// scan.cu's (its opening comment); this kernel needs N <= 16 and E a
// multiple of 8.
//
// The chunked scan of scan.cu splits T into chunks that run in parallel, so
// it computes every decay exp2(dt A) twice (its summary pass and its output
// pass) and carries the chunks' states between them in a third launch. Here
// every decay is computed once, in one launch, with no scratch. The
// parallelism is B · E · 16 / SPT threads: at B=1 the 1.4b shape (E = 4096)
// gives 512 warps at SPT = 4, about one a scheduler of the H200, and the
// 130m shape (E = 1536) 384 at SPT = 2. With a warp a scheduler the time is
// one warp's chain of T positions, each SPT ex2 (8 XU cycles a warp
// instruction) and about 8 SPT other instructions.
//
// A block of 128 threads owns CB = 8 SPT consecutive channels of one
// sequence (grid (ceil(E / CB), B)): thread i holds channel c0 + i / G and
// states g SPT .. g SPT + SPT - 1 of it, g = i % G, G = 16 / SPT, so a
// channel's G threads are neighbouring lanes of one warp. Its inputs go
// through dynamic shared memory TL positions at a time, in a ring of BUF
// tiles that cp.async fills ahead of use; B and C are interleaved there,
// each thread's SPT values of B then of C side by side, so one 16-byte load
// (two at SPT = 4) brings both. Positions are computed BATCH = G at a time:
// after a batch each thread holds its term of the output sum for G
// positions, and a butterfly over the channel's G lanes (G - 1 shuffles)
// leaves lane g with the whole sum of the batch's position g, which it
// gates (the D skip, silu(z)) and writes. Positions past T and channels
// past E read as zeros, and dt = 0 leaves a state as it is.
//
// The sums used to go through shared memory (a store a position, a second
// barrier a tile and G loads an output): with a lone warp a scheduler
// (B=1), the shared-memory pipe was about 60% busy, and the butterfly takes
// its wavefronts from about 7.4 to 4.7 a position a warp.
//
// Longer tiles spread each tile's fixed costs (a barrier, the copies'
// issue) over more positions, and a deeper ring hides more of the copies'
// latency, but both take shared memory, which bounds the blocks an SM. On
// the H200 (bf16 prefills, T=2048, bench/NOTES.md): at 2 states a thread,
// for one warp or so a scheduler (B=1), tiles of 64 in a ring of 3 were
// fastest (130m 530k tok/s with 16, 608k with 32, 632k with 64); at 4
// states a thread, for many warps (B=8), tiles of 32 in a ring of 2 (130m
// 1.19M tok/s against 1.05M with a ring of 3 and 0.90M with tiles of 64).

#define OP_THREADS 128
#define OP_NS 16   // states a channel at most

// onepass_copies is one thread's share of the copies that fill a tile of the
// ring: dt and z of channels c0 .. c0 + CB - 1 in 16-byte pieces, u in
// 16-byte pieces, and B and C in pieces of BCW bytes (4 SPT, or 4 where
// dbl's rows do not allow more), into the interleaved rows of sBC
// ([position][state group][SPT of B, SPT of C]). Every piece keeps its source pointer and its
// position in the tile, computed once: a tile's copies then cost a compare,
// a select and an add each, where recomputing their addresses from (b, t,
// c) cost about 6 instructions a position (a sixth of the loop). A piece
// whose columns do not exist has row = T (never a position), so it copies
// zeros; a piece past the tile's count (NX not a multiple of the block) is
// never copied.
template <int SPT, int CB, int TL, int BCW, class Tv>
struct onepass_copies {
    static constexpr int G = OP_NS / SPT, PW = BCW / 4, PG = SPT / PW;  // floats a piece of B, pieces a group's B
    static constexpr int FP = CB / 4, UV = 16 / sizeof(Tv), FU = CB / UV, BP = G * PG;
    static constexpr int NX = TL * FP, NU = TL * FU, NB = TL * BP;  // pieces a tile
    static constexpr int SX = (NX + OP_THREADS - 1) / OP_THREADS, SU = (NU + OP_THREADS - 1) / OP_THREADS,
                         SB = (NB + OP_THREADS - 1) / OP_THREADS;  // a thread's pieces a tile
    const float *dt[SX], *z[SX], *bc[SB];
    const Tv *u[SU];
    int xrow[SX], urow[SU], brow[SB];
    unsigned xoff[SX], uoff[SU], boff[SB];  // bytes into the piece's tile
    size_t xstep, zstep, bstep;  // elements from a tile's rows to the next tile's

    __device__ __forceinline__ onepass_copies(const float *dtv, const Tv *uv, const float *zv, int ldz,
                                              const float *dbl, int ldd, int R, int b, int T, int E, int N, int c0) {
        size_t r0 = (size_t)b * T;
        xstep = (size_t)TL * E, zstep = (size_t)TL * ldz, bstep = (size_t)TL * ldd;
#pragma unroll
        for (int k = 0; k < SX; k++) {
            int i = k * OP_THREADS + threadIdx.x, tt = i / FP, cc = i % FP * 4;
            bool live = c0 + cc < E;
            xrow[k] = live ? tt : T, xoff[k] = (tt * CB + cc) * 4;
            dt[k] = live ? dtv + (r0 + tt) * E + c0 + cc : dtv;
            z[k] = live ? zv + (r0 + tt) * ldz + c0 + cc : zv;
        }
#pragma unroll
        for (int k = 0; k < SU; k++) {
            int i = k * OP_THREADS + threadIdx.x, tt = i / FU, cc = i % FU * UV;
            bool live = c0 + cc < E;
            urow[k] = live ? tt : T, uoff[k] = (tt * CB + cc) * sizeof(Tv);
            u[k] = live ? uv + (r0 + tt) * E + c0 + cc : uv;
        }
#pragma unroll
        for (int k = 0; k < SB; k++) {
            int i = k * OP_THREADS + threadIdx.x, tt = i / BP, gg = i % BP / PG, q = i % PG * PW, n = gg * SPT + q;
            bool live = n < N;
            brow[k] = live ? tt : T, boff[k] = ((tt * G + gg) * 2 * SPT + q) * 4;
            bc[k] = live ? dbl + (r0 + tt) * ldd + R + n : dbl;
        }
    }

    // issue queues the copies of the tile at positions t0 .. t0 + TL - 1
    // into one tile of the ring (the shared addresses of its dt, u, z and
    // interleaved B and C), and moves every piece on to the next tile.
    __device__ __forceinline__ void issue(unsigned sdt, unsigned su, unsigned sz, unsigned sBC, const float *dtv,
                                          const Tv *uv, const float *zv, const float *dbl, int N, int T, int t0) {
#pragma unroll
        for (int k = 0; k < SX; k++) {
            if (NX % OP_THREADS == 0 || k * OP_THREADS + (int)threadIdx.x < NX) {
                bool ok = t0 + xrow[k] < T;
                cp_async_s<16>(sdt + xoff[k], ok ? dt[k] : dtv, ok);
                cp_async_s<16>(sz + xoff[k], ok ? z[k] : zv, ok);
            }
            dt[k] += xstep, z[k] += zstep;
        }
#pragma unroll
        for (int k = 0; k < SU; k++) {
            if (NU % OP_THREADS == 0 || k * OP_THREADS + (int)threadIdx.x < NU) {
                bool ok = t0 + urow[k] < T;
                cp_async_s<16>(su + uoff[k], ok ? u[k] : uv, ok);
            }
            u[k] += xstep;
        }
#pragma unroll
        for (int k = 0; k < SB; k++) {
            if (NB % OP_THREADS == 0 || k * OP_THREADS + (int)threadIdx.x < NB) {
                bool ok = t0 + brow[k] < T;
                cp_async_s<BCW>(sBC + boff[k], ok ? bc[k] : dbl, ok);
                cp_async_s<BCW>(sBC + boff[k] + 4 * SPT, ok ? bc[k] + N : dbl, ok);
            }
            bc[k] += bstep;
        }
    }
};

// onepass_shared is the dynamic shared memory, in bytes, of the one-pass
// scan at SPT states a thread, tiles of TL positions in a ring of BUF and a
// storage type of size TV bytes: the ring of tiles of dt, u, z and of B and
// C. gpu.Scan computes the same size to launch it.
__host__ __device__ constexpr int onepass_shared(int SPT, int TL, int BUF, int TV) {
    return BUF * TL * (8 * SPT * (8 + TV) + 2 * OP_NS * 4);
}

// onepass_sum returns, in lane g of each group of G neighbouring lanes, the
// group's sum of v[g]: a butterfly that halves the values a lane holds at
// each of its log2(G) steps, G - 1 shuffles in all.
template <int G>
__device__ __forceinline__ float onepass_sum(float (&v)[G], int g) {
#pragma unroll
    for (int m = G / 2; m >= 1; m /= 2) {
        bool hi = g & m;  // keeps the upper half, v[m ..]
#pragma unroll
        for (int k = 0; k < m; k++) {
            float send = hi ? v[k] : v[k + m], keep = hi ? v[k + m] : v[k];
            v[k] = keep + __shfl_xor_sync(0xffffffffu, send, m);
        }
    }
    return v[0];
}

template <int SPT, int TL, int BUF, int BCW, class Tv>
__device__ __forceinline__ void scan_onepass(const float *__restrict__ dtv, const float *__restrict__ A2,
                                             const float *__restrict__ dbl, int ldd, int R,
                                             const Tv *__restrict__ u, const float *__restrict__ Dskip,
                                             const float *__restrict__ z, int ldz, float *__restrict__ state,
                                             Tv *__restrict__ y, int T, int E, int N) {
    constexpr int G = OP_NS / SPT;      // threads a channel
    constexpr int CB = OP_THREADS / G;  // channels a block
    // Positions computed together: their loads first, then their decays,
    // then the chain through s, then their sums. (Written position by
    // position, every position pays its whole latency.)
    constexpr int BATCH = G;
    static_assert(TL % BATCH == 0 && OP_THREADS % CB == 0 && CB == 8 * SPT && BUF >= 2 && 32 % G == 0, "tile shapes");
    extern __shared__ __align__(16) unsigned char op_smem[];
    unsigned smem;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(smem));
    if (smem < onepass_shared(SPT, TL, BUF, sizeof(Tv))) __trap();  // launched with too little shared memory
    auto sdt = reinterpret_cast<float(*)[TL][CB]>(op_smem);
    auto su = reinterpret_cast<Tv(*)[TL][CB]>(sdt + BUF);
    auto sz = reinterpret_cast<float(*)[TL][CB]>(su + BUF);
    auto sBC = reinterpret_cast<float(*)[TL][G][2 * SPT]>(sz + BUF);
    int b = blockIdx.y, c0 = blockIdx.x * CB, cl = threadIdx.x / G, g = threadIdx.x % G, c = c0 + cl;
    int n0 = g * SPT;
    bool on = c < E;
    float a[SPT], s[SPT];
#pragma unroll
    for (int k = 0; k < SPT; k++) {
        bool live = on && n0 + k < N;
        a[k] = live ? A2[(size_t)c * N + n0 + k] : 0.f;
        s[k] = live ? state[((size_t)b * E + c) * N + n0 + k] : 0.f;
    }
    float dskip = on ? Dskip[c] : 0.f;
    int tiles = (T + TL - 1) / TL;
    Tv *yt = y + ((size_t)b * T + g) * E + c;  // output (position g, channel c) of the tile
    onepass_copies<SPT, CB, TL, BCW, Tv> copies(dtv, u, z, ldz, dbl, ldd, R, b, T, E, N, c0);
    auto issue = [&](int k) {  // tile k into its slot of the ring; past the last tile an empty group
        if (k < tiles) {
            int j = k % BUF;
            copies.issue(shared_addr(sdt[j]), shared_addr(su[j]), shared_addr(sz[j]), shared_addr(sBC[j]), dtv, u, z,
                         dbl, N, T, k * TL);
        }
        cp_async_commit();
    };
    for (int k = 0; k < BUF - 1; k++) issue(k);
    for (int k = 0; k < tiles; k++) {
        const int j = k % BUF;
        cp_async_wait<BUF - 2>();  // tile k is in
        __syncthreads();  // and visible; every thread is done with tile k - 1, whose slot the next issue refills
        issue(k + BUF - 1);
        // Two batches in flight: the loads and decays of the next batch are
        // written before the chain of this one. With them, the gate's u and
        // z of the position this lane writes.
        struct batch {
            float e[BATCH][SPT], x[BATCH][SPT], cv[BATCH][SPT], gu, gz;
        } bt[2];
        auto load = [&](int h, batch &o) {
#pragma unroll
            for (int i = 0; i < BATCH; i++) {
                float dt = sdt[j][h + i][cl], du = dt * to_f32(su[j][h + i][cl]);
                float bc[2 * SPT];
#pragma unroll
                for (int q = 0; q < 2 * SPT; q += 4) *reinterpret_cast<float4 *>(bc + q) =
                    *reinterpret_cast<const float4 *>(&sBC[j][h + i][g][q]);
#pragma unroll
                for (int q = 0; q < SPT; q++) {
                    o.e[i][q] = dt * a[q];
                    o.x[i][q] = du * bc[q];
                    o.cv[i][q] = bc[SPT + q];
                }
            }
            o.gu = to_f32(su[j][h + g][cl]), o.gz = sz[j][h + g][cl];
#pragma unroll
            for (int i = 0; i < BATCH; i++)
#pragma unroll
                for (int q = 0; q < SPT; q++) o.e[i][q] = ex2(o.e[i][q]);
        };
        // chain runs the batch at h through the states, then sums, gates
        // and writes its output (position h + g).
        auto chain = [&](int h, const batch &o) {
            float p[BATCH];
#pragma unroll
            for (int i = 0; i < BATCH; i++) {
                p[i] = 0.f;
#pragma unroll
                for (int q = 0; q < SPT; q++) {
                    s[q] = o.e[i][q] * s[q] + o.x[i][q];
                    p[i] += s[q] * o.cv[i][q];
                }
            }
            float v = onepass_sum<G>(p, g);
            Tv out = from_f32<Tv>((v + dskip * o.gu) * silu_f(o.gz));
            if (on && k * TL + h + g < T) yt[h * E] = out;
        };
        load(0, bt[0]);
#pragma unroll
        for (int h = 0; h < TL; h += BATCH) {
            const int cur = h / BATCH % 2;
            if (h + BATCH < TL) load(h + BATCH, bt[cur ^ 1]);
            chain(h, bt[cur]);
        }
        yt += (size_t)TL * E;
    }
#pragma unroll
    for (int k = 0; k < SPT; k++)
        if (on && n0 + k < N) state[((size_t)b * E + c) * N + n0 + k] = s[k];
}

// onepass_config is each entry's tile and ring: two states a thread in
// tiles of 64 positions, a ring of 3 (scan_onepass2_), four in tiles of 32,
// a ring of 2 (scan_onepass4_). gpu.onePassShared gives the same sizes, and
// its test compiles them against onepass_shared.
template <int SPT>
struct onepass_config {
    static constexpr int TL = SPT == 2 ? 64 : 32, BUF = SPT == 2 ? 3 : 2;
};
// B and C go in pieces of 4 SPT bytes (a thread's states) where dbl's rows
// allow it, else in 4-byte ones.
#define SCAN_ONEPASS_RUN(SPT, T)                                                                            \
    if (R % 4 == 0 && ldd % 4 == 0 && N % 4 == 0 && ((size_t)dbl & 15) == 0)                                 \
        scan_onepass<SPT, onepass_config<SPT>::TL, onepass_config<SPT>::BUF, 4 * SPT, T>(SCAN_ONEPASS_ARGS); \
    else                                                                                                     \
        scan_onepass<SPT, onepass_config<SPT>::TL, onepass_config<SPT>::BUF, 4, T>(SCAN_ONEPASS_ARGS)

#define SCAN_ONEPASS_PARAMS(T)                                                                                 \
    const float *__restrict__ dt, const float *__restrict__ A2, const float *__restrict__ dbl, int ldd, int R,     \
        const T *__restrict__ u, const float *__restrict__ Dskip, const float *__restrict__ z, int ldz,            \
        float *__restrict__ state, T *__restrict__ y, int T_, int E, int N
#define SCAN_ONEPASS_ARGS dt, A2, dbl, ldd, R, u, Dskip, z, ldz, state, y, T_, E, N
#define SCAN_ONEPASS(sfx, T)                                                                                   \
    extern "C" __global__ void __launch_bounds__(OP_THREADS) scan_onepass2_##sfx(SCAN_ONEPASS_PARAMS(T)) {     \
        SCAN_ONEPASS_RUN(2, T);                                                                                \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(OP_THREADS) scan_onepass4_##sfx(SCAN_ONEPASS_PARAMS(T)) {     \
        SCAN_ONEPASS_RUN(4, T);                                                                                \
    }
EACH_DTYPE(SCAN_ONEPASS)
