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
// sequence (grid (ceil(E / CB), B)): thread i holds channel c0 + i % CB and
// states g SPT .. g SPT + SPT - 1 of it, g = i / CB, so a warp reads whole
// rows of dt, u and z and at most two distinct pieces of B and C (broadcast
// loads). Its inputs go through dynamic shared memory TL positions at a
// time, in a ring of BUF tiles that cp.async fills ahead of use
// (onepass_copies), with B and C laid out as OP_BCI says. Each
// position's terms of the output sum, sum over its states of s C, go to a
// tile of partial sums; after the tile's TL positions the block adds each
// (position, channel)'s G = 16 / SPT partials, applies the D skip and the
// gate, and writes y (only the stores under the condition t < T, so that
// the outputs' sums overlap). Positions past T and channels past E read as
// zeros, and dt = 0 leaves a state as it is. Longer tiles spread each
// tile's fixed costs (two barriers, the copies' issue, the sums' latency)
// over more positions, and a deeper ring hides more of the copies'
// latency, but both take shared memory, which bounds the blocks an SM. On
// the H200 (bf16 prefills, T=2048, bench/NOTES.md): at 2 states a thread,
// for one warp or so a scheduler (B=1), tiles of 64 in a ring of 3 were
// fastest (130m 530k tok/s with 16, 608k with 32, 632k with 64); at 4
// states a thread, for many warps (B=8), tiles of 32 in a ring of 2 (130m
// 1.19M tok/s against 1.05M with a ring of 3 and 0.90M with tiles of 64).

#define OP_THREADS 128  // a block
#define OP_NS 16        // states a channel at most

// A tuning knob, with the engine's setting as its default; BenchmarkOnePass
// (kernels/onepass_bench_test.go) compiles and times the other. OP_BCI 1
// interleaves B and C by state group in shared memory, so that at 2 states
// a thread one 16-byte load brings a position's B and C (copied in 8-byte
// pieces) instead of two 8-byte loads. On the H200, scan alone, bf16, B=1,
// T=2048 (BenchmarkOnePass, two runs): 130m 52.6 -> 51.3 and 56.2 -> 53.3
// us, 1.4b 85.7 -> 80.1 and 87.5 -> 83.3; at 4 states (B=8), where both
// settings issue the same loads, no change beyond noise. (Blocks of 96
// threads at 2 states, which put the 130m shape's 384 warps on 128 SMs
// instead of 96, were slower: 61.7 us.) Since then the kernel changed
// around it, and with OP_P2 (below) the plain layout is the faster one
// (BenchmarkOnePass at 4949b3c, settings taking turns): 130m B=1 T=2048
// 52.83 us interleaved against 51.10 plain, T=8192 187.7 against 183.1,
// 370m 53.4 against 52.3, 1.4b 80.3 against 78.0, 130m B=8 178.8 against
// 171.2 (at 4 states the plain layout had led by 2.3-2.4% before too).
#ifndef OP_BCI
#define OP_BCI 0
#endif
// OP_PAIRS, a second knob: how many pairs of batches of positions the loop
// over a tile's positions unrolls; 0 (the default) unrolls it whole. A
// smaller loop would leave room in the instruction cache for other code a
// scheduler runs beside it, but it is slower on the H200 (scan alone, bf16,
// BenchmarkOnePass): 130m B=1 T=2048 53.2 us whole, 57.8 with one pair,
// 58.8 with two; 130m B=8 175 against 194 and 189.
#ifndef OP_PAIRS
#define OP_PAIRS 0
#endif
// OP_P2, a third: 1 (the default) has a thread at 2 states store its terms of
// the output sum two positions at a time, one 8-byte store for two 4-byte
// ones; the tile of partial sums is then [position / 2][slot][position % 2].
// At 4 states it stays a store a position. On the H200 (scan alone, bf16,
// BenchmarkOnePass, bits unchanged): 2 states 130m B=1 T=2048 52.58 ->
// 51.71 us, T=8192 189.8 -> 185.3, 370m 53.5 -> 52.4, 1.4b 80.7 -> 79.2;
// at 4 states (130m B=8) the pairs were slower, 176.8 -> 182.3.
#ifndef OP_P2
#define OP_P2 1
#endif

// onepass_bcol is the column of B[n] in a position's row of B and C in
// shared memory (C[n] is SPT further when interleaved, else OP_NS): with
// OP_BCI each state group's SPT values of B, then its SPT of C.
template <int SPT>
__host__ __device__ constexpr int onepass_bcol(int n) { return OP_BCI ? n / SPT * 2 * SPT + n % SPT : n; }
template <int SPT>
__host__ __device__ constexpr int onepass_cgap() { return OP_BCI ? SPT : OP_NS; }

// onepass_copies is one thread's share of the copies that fill a tile of the
// ring: dt and z of channels c0 .. c0 + CB - 1 in 16-byte pieces, u in
// 16-byte pieces, and B and C in pieces of BCW bytes (16, or 4 SPT
// interleaved, or 4 where dbl's rows do not allow more). Every piece keeps
// its source pointer and its position in the tile, computed once: a tile's
// copies then cost a compare, a select and an add each, where recomputing
// their addresses from (b, t, c) cost about 6 instructions a position (a
// sixth of the loop). A piece
// whose columns do not exist has row = T (never a position), so it copies
// zeros; a piece past the tile's count (NX not a multiple of the block) is
// never copied.
template <int SPT, int CB, int TL, int BCW, class Tv>
struct onepass_copies {
    static constexpr int FP = CB / 4, UV = 16 / sizeof(Tv), FU = CB / UV, BP = OP_NS * 4 / BCW;
    static constexpr int NX = TL * FP, NU = TL * FU, NB = TL * BP;  // pieces a tile
    static constexpr int SX = (NX + OP_THREADS - 1) / OP_THREADS, SU = (NU + OP_THREADS - 1) / OP_THREADS,
                         SB = (NB + OP_THREADS - 1) / OP_THREADS;  // a thread's pieces a tile
    const float *dt[SX], *z[SX], *bc[SB];
    const Tv *u[SU];
    int xrow[SX], urow[SU], brow[SB];
    unsigned xoff[SX], uoff[SU], boff[SB];  // bytes into the piece's tile
    size_t xstep, zstep, bstep;  // elements from a tile's rows to the next tile's

    // Sequence b's positions t0 .. t0 + T - 1, of Trows a sequence; tid is
    // the thread's index among the OP_THREADS that copy.
    __device__ __forceinline__ onepass_copies(const float *dtv, const Tv *uv, const float *zv, int ldz,
                                              const float *dbl, int ldd, int R, int b, int Trows, int t0, int T,
                                              int E, int N, int c0, unsigned tid) {
        size_t r0 = (size_t)b * Trows + t0;
        xstep = (size_t)TL * E, zstep = (size_t)TL * ldz, bstep = (size_t)TL * ldd;
#pragma unroll
        for (int k = 0; k < SX; k++) {
            int i = k * OP_THREADS + tid, tt = i / FP, cc = i % FP * 4;
            bool live = c0 + cc < E;
            xrow[k] = live ? tt : T, xoff[k] = (tt * CB + cc) * 4;
            dt[k] = live ? dtv + (r0 + tt) * E + c0 + cc : dtv;
            z[k] = live ? zv + (r0 + tt) * ldz + c0 + cc : zv;
        }
#pragma unroll
        for (int k = 0; k < SU; k++) {
            int i = k * OP_THREADS + tid, tt = i / FU, cc = i % FU * UV;
            bool live = c0 + cc < E;
            urow[k] = live ? tt : T, uoff[k] = (tt * CB + cc) * sizeof(Tv);
            u[k] = live ? uv + (r0 + tt) * E + c0 + cc : uv;
        }
#pragma unroll
        for (int k = 0; k < SB; k++) {
            int i = k * OP_THREADS + tid, tt = i / BP, n = i % BP * (BCW / 4);
            bool live = n < N;
            brow[k] = live ? tt : T, boff[k] = (tt * 2 * OP_NS + onepass_bcol<SPT>(n)) * 4;
            bc[k] = live ? dbl + (r0 + tt) * ldd + R + n : dbl;
        }
    }

    // fold returns a value that depends on every piece's address, for
    // pdl_wait_after: ptxas otherwise computes them (about 130 instructions
    // a thread and the parameters' constant loads) after the kernel's wait,
    // where they delay tile 0's copies.
    __device__ __forceinline__ unsigned fold() const {
        unsigned v = 0;
#pragma unroll
        for (int k = 0; k < SX; k++) v ^= lo32(dt[k]) ^ lo32(z[k]) ^ xrow[k] ^ xoff[k];
#pragma unroll
        for (int k = 0; k < SU; k++) v ^= lo32(u[k]) ^ urow[k] ^ uoff[k];
#pragma unroll
        for (int k = 0; k < SB; k++) v ^= lo32(bc[k]) ^ brow[k] ^ boff[k];
        return v;
    }

    // issue queues the copies of the tile at positions t0 .. t0 + TL - 1
    // into one tile of the ring (the shared addresses of its dt, u, z and its
    // rows of B and C; dt only with DT), and moves every piece on to the next
    // tile. PART picks the pieces: 0 every one, 1 u's, 2 the others.
    template <bool DT = true, int PART = 0>
    __device__ __forceinline__ void issue(unsigned sdt, unsigned su, unsigned sz, unsigned sBC, const float *dtv,
                                          const Tv *uv, const float *zv, const float *dbl, int N, int T, int t0,
                                          unsigned tid) {
#pragma unroll
        for (int k = 0; PART != 1 && k < SX; k++) {
            if (NX % OP_THREADS == 0 || k * OP_THREADS + (int)tid < NX) {
                bool ok = t0 + xrow[k] < T;
                if (DT) cp_async_s<16>(sdt + xoff[k], ok ? dt[k] : dtv, ok);
                cp_async_s<16>(sz + xoff[k], ok ? z[k] : zv, ok);
            }
            dt[k] += xstep, z[k] += zstep;
        }
#pragma unroll
        for (int k = 0; PART != 2 && k < SU; k++) {
            if (NU % OP_THREADS == 0 || k * OP_THREADS + (int)tid < NU) {
                bool ok = t0 + urow[k] < T;
                cp_async_s<16>(su + uoff[k], ok ? u[k] : uv, ok);
            }
            u[k] += xstep;
        }
#pragma unroll
        for (int k = 0; PART != 1 && k < SB; k++) {
            if (NB % OP_THREADS == 0 || k * OP_THREADS + (int)tid < NB) {
                bool ok = t0 + brow[k] < T;
                cp_async_s<BCW>(sBC + boff[k], ok ? bc[k] : dbl, ok);
                cp_async_s<BCW>(sBC + boff[k] + 4 * onepass_cgap<SPT>(), ok ? bc[k] + N : dbl, ok);
            }
            bc[k] += bstep;
        }
    }
};

// onepass_shared is the dynamic shared memory, in bytes, of the one-pass
// scan at SPT states a thread, tiles of TL positions in a ring of BUF and a
// storage type of size TV bytes: the ring of tiles of dt, u, z, B and C,
// then the tile of partial sums (rows of OP_THREADS floats, 16 more where a
// warp reads two rows). gpu.Scan computes the same size to launch it.
__host__ __device__ constexpr int onepass_pst(int SPT) { return OP_THREADS + (8 * SPT < 32 ? 16 : 0); }
__host__ __device__ constexpr int onepass_shared(int SPT, int TL, int BUF, int TV) {
    return BUF * TL * (8 * SPT * (8 + TV) + 2 * OP_NS * 4) + TL * onepass_pst(SPT) * 4;
}

// OP_RMAX bounds dt_rank (R) where the entry computes the time step itself
// (DTF, below), and OP_DL is the row of a tile of dt_low in shared memory
// (4 floats of padding: a fragment's 8 rows by 4 columns hit 32 banks).
#define OP_RMAX 64
#define OP_DL (OP_RMAX + 4)

// OP_WS_SP, a knob of the entries whose warps specialize: the tiles of
// partial sums between the walk and the output warps (the walk runs up to
// OP_WS_SP - 1 tiles ahead of the outputs). 2 is the engine's
// (gpu.HelpersShared). 3 (stall samples at 6b5c7b9: the walk waited on the
// outputs) fits 227 KB with a ring of 3 (OP_WS_BUF), and was no faster on
// the H200: 57.12 us for the engine's against 57.18-60.64 for the knobs at
// 130m T=2048 (bench/NOTES.md, session of 2026-12-01 17:19).
#ifndef OP_WS_SP
#define OP_WS_SP 2
#endif

// onepass_ws_shared is onepass_shared for the entry whose warps specialize
// (SCAN_ONEPASS_RUN's WS): OP_WS_SP - 1 more tiles of partial sums, then
// the ring's mbarriers and two for each tile of partial sums
// (onepass_bars); with DTF, 2 BUF more mbarriers, then (at a multiple of 128
// bytes, where the copy engine can write them: TMA below) a ring of BUF
// tiles of dt_low rows. gpu.Scan computes the same (HelpersShared).
__host__ __device__ constexpr int onepass_ws_shared(int SPT, int TL, int BUF, int TV, bool DTF) {
    return DTF ? (onepass_ws_shared(SPT, TL, BUF, TV, false) + 16 * BUF + 127) / 128 * 128 + BUF * TL * OP_DL * 4
               : onepass_shared(SPT, TL, BUF, TV) + (OP_WS_SP - 1) * TL * onepass_pst(SPT) * 4 +
                     8 * (BUF + 2 * OP_WS_SP);
}

// onepass_dtargs are the time step's weights [E, R] and bias [E] (f32) and
// its TF32 products (1 or 3), where the entry computes it (DTF).
struct onepass_dtargs {
    const float *W, *bias;
    int products;
};

// onepass_maps are the tensor maps of the entry whose copying warps take
// every tile through the copy engine (scan_onepass2wdt_, TMA below): u
// [T][E] and z [T][E] (row stride ldz) in boxes of TL positions by CB
// channels, and x_proj's output [T][ldd] twice: in boxes of TL rows of 2
// OP_NS columns from column R (B, then C), and of TL rows of OP_DL columns
// from column 0 (dt_low, in sL's rows as they are: the columns past R are
// never read, those past ldd come as zeros). One sequence, d_state OP_NS.
struct onepass_maps {
    const tensor_map *u, *z, *bc, *low;
};

// onepass_lowcopies is one copying thread's share of the copies of a
// tile's dt_low rows, the first R columns of dbl (R a multiple of 8, at
// most OP_RMAX), into rows of OP_DL floats, in 16-byte pieces; rows past T
// copy zeros, columns past R nothing.
template <int TL>
struct onepass_lowcopies {
    static constexpr int PR = OP_RMAX / 4, NP = TL * PR / OP_THREADS;  // pieces a row, a thread's pieces a tile
    static_assert(TL * PR % OP_THREADS == 0, "whole rounds of pieces");
    const float *src[NP];
    int row[NP];
    unsigned off[NP];
    bool live[NP];
    size_t step;
    __device__ __forceinline__ onepass_lowcopies(const float *dbl, int ldd, int R, int b, int Trows, int t0,
                                                 unsigned tid) {
        size_t r0 = (size_t)b * Trows + t0;
        step = (size_t)TL * ldd;
#pragma unroll
        for (int k = 0; k < NP; k++) {
            int i = k * OP_THREADS + tid, tt = i / PR, cc = i % PR * 4;
            live[k] = cc < R, row[k] = tt, off[k] = (tt * OP_DL + cc) * 4;
            src[k] = dbl + (r0 + tt) * ldd + cc;
        }
    }
    // fold is onepass_copies::fold for these pieces.
    __device__ __forceinline__ unsigned fold() const {
        unsigned v = 0;
#pragma unroll
        for (int k = 0; k < NP; k++) v ^= lo32(src[k]) ^ row[k] ^ off[k] ^ live[k];
        return v;
    }
    // issue queues the tile at positions t0 .. into the tile at shared
    // address sL, and moves on to the next tile.
    __device__ __forceinline__ void issue(unsigned sL, const float *dbl, int T, int t0) {
#pragma unroll
        for (int k = 0; k < NP; k++) {
            bool ok = t0 + row[k] < T;
            if (live[k]) cp_async_s<16>(sL + off[k], ok ? src[k] : dbl, ok);
            src[k] += step;
        }
    }
};

// OP_TIMELINE (a diagnostic build; BenchmarkOnePassTimeline) records when
// the first thread of each role reaches each of the events below, as
// %globaltimer's nanoseconds in op_timeline, a row of OP_EVENTS a block
// (the first OP_TL_BLOCKS blocks). Other builds compile op_mark to nothing.
#ifndef OP_TIMELINE
#define OP_TIMELINE 0
#endif
enum {
    OP_EV_ENTRY,     // the block starts (thread 0)
    OP_EV_WAITED,    // pdl_wait returned (thread 0)
    OP_EV_ISSUED,    // the copies of the ring's first tiles issued (the first copying thread)
    OP_EV_LANDED0,   // tile 0's copies (with OP_EARLY its dt_low and u) landed (the first time-step thread)
    OP_EV_DT0,       // tile 0's time step computed
    OP_EV_WALK0,     // the walk starts tile 0 (thread 0)
    OP_EV_WALK1,     // the walk is done with tile 0 (thread 0)
    OP_EV_WALKEND,   // the walk's last tile done
    OP_EV_OUTEND,    // the last tile's outputs stored (the first output thread)
    OP_EV_DTEND,     // the last tile's time step computed
    OP_EV_ISSUED0,   // tile 0's copies issued (the first copying thread)
    OP_EV_DTW,       // the time step's weights in registers (the first time-step thread)
    OP_EV_CREADY,    // the copies' addresses computed, before the wait (the first copying thread)
    OP_EV_CWAITED,   // the copying warps' wait returned (the first copying thread)
    OP_EV_DTMMA0,    // tile 0's products done, before the bias and softplus (the first time-step thread)
    OP_EV_CENTRY,    // the first copying thread starts
    OP_EV_SYNCED,    // the first copying thread is past the barriers' initialization (__syncthreads)
    OP_EVENTS
};
#define OP_TL_BLOCKS 1024
#if OP_TIMELINE
extern "C" __device__ unsigned long long op_timeline[OP_TL_BLOCKS * OP_EVENTS];
#endif
__device__ __forceinline__ void op_mark(int event) {
#if OP_TIMELINE
    timeline_mark(op_timeline, OP_EVENTS, OP_TL_BLOCKS, event);
#endif
}

// op_mark_after is op_mark once dep has been computed (its loads landed).
__device__ __forceinline__ void op_mark_after(int event, unsigned dep) {
#if OP_TIMELINE
    timeline_mark_after(op_timeline, OP_EVENTS, OP_TL_BLOCKS, event, dep);
#endif
}

// onepass_dt computes the time step of a tile for the block's 16 channels
// (2 states a thread) on the tensor cores, as dt_proj_tc in dtproj.cu does
// it: the same TF32 operands and products in the same order, then the bias
// and softplus_f, so the same bits. Each of the 4 warps that compute it
// takes 16 positions of the tile at a time (TL = 64: one such m16 tile)
// and both n8 halves of the channels; a thread keeps its fragments of the
// weights (bh, bl) and its 4 channels' biases in registers. Positions past
// T and channels past E get dt = 0, which leaves a state as it is.
struct onepass_dt {
    static constexpr int KC = OP_RMAX / 8;  // k chunks at most
    unsigned bh[KC][2][2], bl[KC][2][2];
    float bias[2][2];
    int products, chunks;
    // (A null W, as the entries that do not compute the time step pass,
    // loads nothing.)
    __device__ __forceinline__ onepass_dt(const onepass_dtargs &a, int c0, int E, int R, unsigned tid) {
        const int lane = tid % 32, g = lane / 4, q = lane % 4;
        products = a.products, chunks = a.W ? R / 8 : 0;
#pragma unroll
        for (int n = 0; n < 2; n++) {
            const int c = c0 + n * 8 + g, cb = c0 + n * 8 + 2 * q;
            bias[n][0] = chunks && cb < E ? a.bias[cb] : 0.f, bias[n][1] = chunks && cb + 1 < E ? a.bias[cb + 1] : 0.f;
#pragma unroll
            for (int kc = 0; kc < KC; kc++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    float w = c < E && kc < chunks ? a.W[(size_t)c * R + kc * 8 + q + j * 4] : 0.f;
                    if (products == 3)
                        split_tf32(w, bh[kc][n][j], bl[kc][n][j]);
                    else
                        bh[kc][n][j] = round_tf32(w), bl[kc][n][j] = 0;
                }
        }
    }
    // fold returns a value that depends on every weight and bias, for
    // pdl_wait_after: their loads then land before the kernel's wait (ptxas
    // would otherwise issue them after it).
    __device__ __forceinline__ unsigned fold() const {
        unsigned v = __float_as_uint(bias[0][0]) ^ __float_as_uint(bias[0][1]) ^ __float_as_uint(bias[1][0]) ^
                     __float_as_uint(bias[1][1]);
#pragma unroll
        for (int kc = 0; kc < KC; kc++)
#pragma unroll
            for (int n = 0; n < 2; n++) v ^= bh[kc][n][0] ^ bh[kc][n][1] ^ bl[kc][n][0] ^ bl[kc][n][1];
        return v;
    }
    // tile computes the time step of the tile at positions t0 .. (of Tl)
    // from its dt_low rows sL, and leaves in each row, in place of its
    // dt_low, the pairs (dt, dt u) of the block's 16 channels (u from su
    // [TL][16]): the walk's loads then take one 8-byte load a position
    // where they took dt, u, its conversion and the product.
    // (mark: the timeline's OP_EV_DTMMA0 once the products are done.)
    template <int TL, class Tv>
    __device__ __forceinline__ void tile(float (*sL)[OP_DL], const Tv (*su)[16], int t0, int Tl, int c0, int E,
                                         unsigned tid, bool mark = false) const {
        static_assert(TL % 16 == 0, "whole m16 tiles");
#pragma unroll
        for (int m = tid / 32 * 16; m < TL; m += OP_THREADS / 2) rows(sL, su, m, t0, Tl, c0, E, tid, mark);
    }
    // rows is tile's 16 positions from m0, for one warp. The products'
    // count is read at run time, so ptxas keeps the three-product MMAs,
    // predicated off, in the one product's chain. With the count as a
    // template argument (1d4e6c9), tile 0's products took 0.48 us instead
    // of 0.80 and each tile walked about 2% faster. That speeds long prompts
    // more than short ones: on two H200s the 130m window widened by 0.3 and
    // 0.8 points (to +15.0% and +14.7%), with 130m T=2048 at 1.004x and
    // 0.996x (bench/NOTES.md, session of 2026-12-02 20:38). If the window
    // bar reads one-sided, take 1d4e6c9 together with Engine.ScanTMA.
    template <class Tv>
    __device__ __forceinline__ void rows(float (*sL)[OP_DL], const Tv (*su)[16], int m0, int t0, int Tl, int c0,
                                         int E, unsigned tid, bool mark) const {
        const int lane = tid % 32, g = lane / 4, q = lane % 4;
        float acc[2][4] = {};
#pragma unroll
        for (int kc = 0; kc < KC; kc++) {
            if (kc >= chunks) break;
            unsigned ah[4], al[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float v = sL[m0 + g + (j & 1) * 8][kc * 8 + q + (j >> 1) * 4];
                if (products == 3)
                    split_tf32(v, ah[j], al[j]);
                else
                    ah[j] = round_tf32(v);
            }
            if (products == 3) {
#pragma unroll
                for (int n = 0; n < 2; n++) mma_tf32(acc[n], al, bh[kc][n]);
#pragma unroll
                for (int n = 0; n < 2; n++) mma_tf32(acc[n], ah, bl[kc][n]);
            }
#pragma unroll
            for (int n = 0; n < 2; n++) mma_tf32(acc[n], ah, bh[kc][n]);
        }
        if (OP_TIMELINE && mark)
            op_mark_after(OP_EV_DTMMA0, __float_as_uint(acc[0][0]) ^ __float_as_uint(acc[0][3]) ^
                                            __float_as_uint(acc[1][0]) ^ __float_as_uint(acc[1][3]));
        __syncwarp();  // every lane has read its dt_low from these rows, which take the pairs now
#pragma unroll
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int pos = m0 + g + 8 * h, c = n * 8 + 2 * q;
                const bool live = t0 + pos < Tl;
                float v0 = softplus_f(acc[n][2 * h] + bias[n][0]), v1 = softplus_f(acc[n][2 * h + 1] + bias[n][1]);
                v0 = live && c0 + c < E ? v0 : 0.f, v1 = live && c0 + c + 1 < E ? v1 : 0.f;
                const float u0 = to_f32(su[pos][c]), u1 = to_f32(su[pos][c + 1]);
                *reinterpret_cast<float4 *>(&sL[pos][2 * c]) = make_float4(v0, v0 * u0, v1, v1 * u1);
            }
    }
};

// onepass_bars are the mbarriers of the entry whose warps specialize, at
// shared address a: full[j] completes once ring slot j's tile is ready for
// the walk (the copying warps' OP_THREADS arrivals: their copies landed,
// or with DTF its time step computed), landed[j] (DTF) once all its copies
// have landed and early[j] (DTF, OP_EARLY) once those the time step reads
// (dt_low and u, issued first) have; sums[p] once the walking warps have stored
// their terms in tile p of the OP_WS_SP tiles of partial sums, and free[p]
// once the output warps have read them back (OP_THREADS each).
struct onepass_bars {
    unsigned a;
    int BUF;
    __device__ __forceinline__ unsigned full(int j) const { return a + 8 * j; }
    __device__ __forceinline__ unsigned sums(int p) const { return a + 8 * (BUF + p); }
    __device__ __forceinline__ unsigned free(int p) const { return a + 8 * (BUF + OP_WS_SP + p); }
    __device__ __forceinline__ unsigned landed(int j) const { return a + 8 * (BUF + 2 * OP_WS_SP + j); }
    __device__ __forceinline__ unsigned early(int j) const { return a + 8 * (2 * BUF + 2 * OP_WS_SP + j); }
};
// OP_WS_WAIT, a knob of the entry whose warps specialize: how the output
// warps wait for the walk's terms and the time-step warps for their
// copies (most of their time): 0 spins on try_wait, whose retries take
// issue slots from the walking warp on the same scheduler; 1 (the
// default) passes try_wait a suspend hint of OP_WS_NS nanoseconds; 2 polls
// test_wait with __nanosleep(OP_WS_NS) between polls. On the H200 the three
// were within 0.6% of each other with 8 warps a block (BenchmarkOnePass at
// 72c19b2), and 2 with 300 ns gave the prefill 1.000x at 130m B=1 T=2048
// with 12 (bench/results/2026-12-01-scan-helpers.md, run 11).
#ifndef OP_WS_WAIT
#define OP_WS_WAIT 1
#endif
#ifndef OP_WS_NS
#define OP_WS_NS 1000
#endif
// OP_WS_BUF, another: the ring's tiles in that entry (gpu.HelpersShared).
// On the H200 (scan alone, bf16, BenchmarkOnePass at 78961a8): 130m B=1
// T=2048 49.66 us with 3, 48.77 with 4, 50.66 with 2; T=8192 170.2, 167.3,
// 174.3; 370m 50.8, 49.8, 51.7.
#ifndef OP_WS_BUF
#define OP_WS_BUF 4
#endif
// OP_EARLY, another (the entries that compute the time step): 1 issues a
// tile's dt_low and u first, on a barrier of their own (onepass_bars'
// early), so that the time-step warps start before z, B and C land; 0
// issues every copy on landed. The early barriers are in the layout either way.
#ifndef OP_EARLY
#define OP_EARLY 0
#endif
// op_wait_idle is the wait of the warps that wait most (OP_WS_WAIT).
__device__ __forceinline__ void op_wait_idle(unsigned bar, unsigned parity) {
    if (OP_WS_WAIT == 1)
        mbar_wait_hint(bar, parity, OP_WS_NS);
    else if (OP_WS_WAIT == 2)
        while (!mbar_test(bar, parity)) __nanosleep(OP_WS_NS);
    else
        mbar_wait(bar, parity);
}

// WS, the warps that specialize (2 states a thread, no segments; a block of
// 2 OP_THREADS): the first OP_THREADS threads walk the chain and nothing
// else, each tile's terms into one of two tiles of partial sums; the other
// OP_THREADS copy the ring's tiles and compute the outputs (the sums, the
// gate, the stores), each taking the place of the walking thread of the
// same index in the tile's copies and outputs. So the walk no longer stops
// at each tile's end for two barriers, the copies' issue and the outputs,
// which were about a quarter of its time (stall samples,
// bench/results/2026-11-30-scan-stalls-spread-92a2ebf.md); the two halves
// meet on mbarriers (onepass_bars). The arithmetic is the plain entry's, in
// the same order: the same bits.
//
// DTF (with WS): OP_THREADS more threads (a block of 3 OP_THREADS) compute
// each tile's time step from dt_low (onepass_dt, dta) as soon as its
// copies land, in place of dt_proj's kernel; dtv is then unused. (With the
// copying warps computing it too, between their copies and outputs, those
// warps became the walk's bottleneck: prefills 0.85x of the plain entry's.)
template <int SPT, int TL, int BUF, int BCW, class Tv, bool SEG, bool WS, bool DTF, bool TMA>
__device__ __forceinline__ void scan_onepass(const float *__restrict__ dtv, const float *__restrict__ A2,
                                             const float *dbl, int ldd, int R,
                                             const Tv *u, const float *__restrict__ Dskip,
                                             const float *z, int ldz, float *__restrict__ state,
                                             Tv *__restrict__ y, int T, int E, int N, const void *pf,
                                             long long pf_bytes, int pf_lead, int Ts, float *__restrict__ vpart,
                                             int ldv, float *__restrict__ ends, float *cum, const onepass_dtargs dta,
                                             const onepass_maps maps) {
    constexpr int G = OP_NS / SPT;      // threads a channel
    constexpr int CB = OP_THREADS / G;  // channels a block
    // Positions computed together: their loads first, then their decays,
    // then the chain through s. (Written position by position, ptxas issues
    // each position's loads after the previous one's store to sp, and every
    // position pays its whole latency.)
    constexpr int BATCH = 16 / SPT;
    constexpr int PST = onepass_pst(SPT);
    constexpr int NO = TL / G;  // outputs a thread gates and writes a tile
    constexpr bool P2 = OP_P2 && SPT == 2;  // terms stored in pairs of positions
    static_assert(TL % (2 * BATCH) == 0 && OP_THREADS % CB == 0 && CB == 8 * SPT && BUF >= 2, "tile shapes");
    static_assert(!WS || (SPT == 2 && !SEG), "the warps specialize at 2 states a thread, walking once");
    static_assert(!DTF || WS, "the time step is computed by the warps that specialize");
    static_assert(!TMA || (DTF && !OP_BCI), "the copy engine's boxes serve the entry that computes the time step, "
                                            "with B and C in plain rows");
    if (threadIdx.x == 0) op_mark(OP_EV_ENTRY);
    if (WS && threadIdx.x == OP_THREADS) op_mark(OP_EV_CENTRY);
    extern __shared__ __align__(16) unsigned char op_smem[];
    unsigned smem;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(smem));
    if (smem < (WS ? onepass_ws_shared(SPT, TL, BUF, sizeof(Tv), DTF) : onepass_shared(SPT, TL, BUF, sizeof(Tv))))
        __trap();  // launched with too little shared memory
    auto sdt = reinterpret_cast<float(*)[TL][CB]>(op_smem);
    auto su = reinterpret_cast<Tv(*)[TL][CB]>(sdt + BUF);
    auto sz = reinterpret_cast<float(*)[TL][CB]>(su + BUF);
    auto sBC = reinterpret_cast<float(*)[TL][2 * OP_NS]>(sz + BUF);  // [position][onepass_bcol]
    auto sp = reinterpret_cast<float(*)[PST]>(sBC + BUF);  // [position][g CB + channel]: each thread's term of the sum
    // WS: the index among the walking or the output threads, and the role
    const unsigned tid = WS ? threadIdx.x % OP_THREADS : threadIdx.x;
    const bool walker = !WS || threadIdx.x < OP_THREADS;
    constexpr int SP = OP_WS_SP;  // WS: tiles of partial sums
    static_assert(SP >= 2, "the walk and the outputs on different tiles of partial sums");
    const onepass_bars bars{shared_addr(op_smem) + onepass_shared(SPT, TL, BUF, sizeof(Tv)) + (SP - 1) * TL * PST * 4,
                            BUF};
    // DTF: the ring of dt_low tiles
    auto sL = reinterpret_cast<float(*)[TL][OP_DL]>(op_smem + onepass_ws_shared(SPT, TL, BUF, sizeof(Tv), DTF) -
                                                    BUF * TL * OP_DL * 4);
    int b = blockIdx.y, c0 = blockIdx.x * CB, cl = tid % CB, g = tid / CB, c = c0 + cl;
    int n0 = g * SPT;
    bool on = c < E;
    // SEG: the segment walked (SCAN_ONEPASS_PARAMS), positions t0 .. t0 + Tl - 1;
    // else the whole sequence, with the code of a walk that knows no segments.
    const int seg = SEG ? blockIdx.z : 0, t0 = seg * Ts, Tl = SEG ? min(T, t0 + Ts) - t0 : T;
    float a[SPT], s[SPT];
#pragma unroll
    for (int k = 0; k < SPT; k++) {
        bool live = on && n0 + k < N;
        a[k] = live ? A2[(size_t)c * N + n0 + k] : 0.f;
        s[k] = live && seg == 0 ? state[((size_t)b * E + c) * N + n0 + k] : 0.f;
    }
    float dskip = on ? Dskip[c] : 0.f;
    // SEG: dt summed from the segment's start, and at this thread's outputs' positions of the tile
    float cdr = 0.f, cdo[TL / G];
    int tiles = (Tl + TL - 1) / TL;
    Tv *yt = y + ((size_t)b * T + t0 + g) * E + c;  // output (position g, channel c) of the tile
    float *vt = vpart + ((size_t)b * T + t0 + g) * ldv + c;  // the same in a later segment
    float *ct = cum + ((size_t)b * T + t0 + g) * E + c;
    onepass_copies<SPT, CB, TL, BCW, Tv> copies(dtv, u, z, ldz, dbl, ldd, R, b, T, t0, Tl, E, N, c0, tid);
    onepass_lowcopies<TL> lows(dbl, ldd, R, b, T, t0, tid);
    auto issue = [&](int k) {  // tile k into its slot of the ring; past the last tile an empty group
        if (k < tiles) {
            int j = k % BUF;
            if constexpr (TMA) {  // one thread: four boxes, their bytes counted on the tile's barriers
                if (tid == 0) {
                    const unsigned first = OP_EARLY ? bars.early(j) : bars.landed(j), rest = bars.landed(j);
                    mbar_add_tx(first, TL * CB * sizeof(Tv) + TL * OP_DL * 4);
                    tma_load(shared_addr(sL[j]), maps.low, first, 0, k * TL);
                    tma_load(shared_addr(su[j]), maps.u, first, c0, k * TL);
                    mbar_add_tx(rest, TL * CB * 4 + TL * 2 * OP_NS * 4);
                    tma_load(shared_addr(sz[j]), maps.z, rest, c0, k * TL);
                    tma_load(shared_addr(sBC[j]), maps.bc, rest, R, k * TL);
                }
                if (OP_EARLY) mbar_arrive_copies(bars.early(j));
            } else if constexpr (DTF && OP_EARLY) {  // what the time step reads first, on its own barrier
                lows.issue(shared_addr(sL[j]), dbl, Tl, k * TL);
                copies.template issue<false, 1>(shared_addr(sdt[j]), shared_addr(su[j]), shared_addr(sz[j]),
                                                shared_addr(sBC[j]), dtv, u, z, dbl, N, Tl, k * TL, tid);
                mbar_arrive_copies(bars.early(j));
                copies.template issue<false, 2>(shared_addr(sdt[j]), shared_addr(su[j]), shared_addr(sz[j]),
                                                shared_addr(sBC[j]), dtv, u, z, dbl, N, Tl, k * TL, tid);
            } else {
                copies.template issue<!DTF>(shared_addr(sdt[j]), shared_addr(su[j]), shared_addr(sz[j]),
                                            shared_addr(sBC[j]), dtv, u, z, dbl, N, Tl, k * TL, tid);
                if (DTF) lows.issue(shared_addr(sL[j]), dbl, Tl, k * TL);
            }
            if (WS) mbar_arrive_copies(DTF ? bars.landed(j) : bars.full(j));
        }
        if (!WS) cp_async_commit();
    };
    // The outputs of tile k (terms in spk, the gate's u and z in gu and gz):
    // output (position tt, channel cl) for tt = g, g + G, ..., this thread's
    // own channel, since CB divides the block. Only the stores depend on
    // t < T, so the NO outputs' sums and gates interleave (with the whole
    // output under the condition, each output was a branch of its own and
    // paid its latency alone).
    auto outputs = [&](int k, const float(*spk)[PST], const float(&gu)[NO], const float(&gz)[NO]) {
#pragma unroll
        for (int o = 0; o < NO; o++) {
            int tt = g + o * G;
            // Slot q CB + cl of position tt: spk[tt][slot], or with P2 float
            // 2 slot + tt % 2 of the pair of rows from tt - tt % 2.
            const float *terms = P2 ? &spk[tt - tt % 2][tt % 2] : spk[tt];
            constexpr int step = P2 ? 2 : 1;
            float v = terms[step * cl];
#pragma unroll
            for (int q = 1; q < G; q++) v += terms[step * (q * CB + cl)];
            if (!SEG || seg == 0) {
                Tv out = from_f32<Tv>((v + dskip * gu[o]) * silu_f(gz[o]));
                if (on && k * TL + tt < Tl) yt[o * G * E] = out;
            } else if (on && k * TL + tt < Tl) {  // the sum before the gate, which scan_fixup completes, and dt summed
                vt[(size_t)o * G * ldv] = v + dskip * gu[o];
                ct[(size_t)o * G * E] = cdo[o];
            }
        }
        yt += (size_t)TL * E;
        if (SEG) vt += (size_t)TL * ldv, ct += (size_t)TL * E;
    };
    if (TMA && (gridDim.y != 1 || N != OP_NS || ldd != R + 2 * OP_NS ||
                (shared_addr(su[0]) | shared_addr(sz[0]) | shared_addr(sBC[0]) | shared_addr(sL[0])) % 128))
        __trap();  // the boxes: one sequence, d_state OP_NS, B and C right after dt_low, slots 128-byte aligned
    if (WS && threadIdx.x == 0) {
        for (int j = 0; j < BUF; j++) mbar_init(bars.full(j), OP_THREADS);
        for (int p = 0; p < SP; p++) mbar_init(bars.sums(p), OP_THREADS), mbar_init(bars.free(p), OP_THREADS);
        for (int j = 0; DTF && j < BUF; j++) mbar_init(bars.landed(j), OP_THREADS);
        for (int j = 0; DTF && OP_EARLY && j < BUF; j++) mbar_init(bars.early(j), OP_THREADS);
    }
    if (WS) __syncthreads();  // the barriers initialized
    if (WS && threadIdx.x == OP_THREADS) op_mark(OP_EV_SYNCED);
    // Launched with programmatic dependent launch, the kernel gets here while
    // the kernel before it may still run: everything above reads weights and
    // the carried state, which no kernel in flight writes; dt, u, z, B and C
    // come after pdl_wait. Each role waits in its own branch, after what it
    // can do without the inputs: the time-step warps load their weights and
    // the copying warps compute their pieces' addresses, so tile 0's copies
    // and time step start as soon as the wait returns (with one wait for
    // every thread, ptxas placed both after it: tile 0's copies were issued
    // 0.9 us after the wait, bench/results/2026-12-02-tilecopy.md).
    const bool timestep = DTF && threadIdx.x >= 2 * OP_THREADS;
    const bool copier = WS && !walker && !timestep;
    if (!timestep && !copier) pdl_wait();
    if (threadIdx.x == 0) op_mark(OP_EV_WAITED);
    if constexpr (DTF) {
        if (timestep) {  // the time step of each tile, once its dt_low has landed
            const onepass_dt dtw(dta, c0, E, R, tid);
            pdl_wait_after(dtw.fold());
            if (OP_TIMELINE && threadIdx.x == 2 * OP_THREADS) op_mark_after(OP_EV_DTW, dtw.fold());
            for (int k = 0; k < tiles; k++) {
                const int j = k % BUF;
                // its dt_low and u, or all its copies (and the walk is done with slot j's last tile)
                op_wait_idle(OP_EARLY ? bars.early(j) : bars.landed(j), k / BUF % 2);
                if (k == 0 && threadIdx.x == 2 * OP_THREADS) op_mark(OP_EV_LANDED0);
                dtw.template tile<TL>(sL[j], su[j], k * TL, Tl, c0, E, tid, k == 0 && threadIdx.x == 2 * OP_THREADS);
                if (TMA) fence_proxy_async();  // the pairs written over dt_low, before the copy engine refills slot j
                mbar_arrive(bars.full(j));
                if (k == 0 && threadIdx.x == 2 * OP_THREADS) op_mark(OP_EV_DT0);
            }
            if (threadIdx.x == 2 * OP_THREADS) op_mark(OP_EV_DTEND);
        }
    }
    if (copier) {  // the copies and the outputs
        const unsigned ready = TMA ? 0u : copies.fold() ^ (DTF ? lows.fold() : 0u);
        if (OP_TIMELINE && threadIdx.x == OP_THREADS) op_mark_after(OP_EV_CREADY, ready);
        pdl_wait_after(ready);
        if (threadIdx.x == OP_THREADS) op_mark(OP_EV_CWAITED);
        for (int k = 0; k < BUF; k++) {
            issue(k);
            if (k == 0 && threadIdx.x == OP_THREADS) op_mark(OP_EV_ISSUED0);
        }
        if (threadIdx.x == OP_THREADS) op_mark(OP_EV_ISSUED);
        for (int k = 0; k < tiles; k++) {
            const int j = k % BUF;
            op_wait_idle(bars.sums(k % SP), k / SP % 2);  // the walk's terms of tile k are in, and it is done with slot j
            float gu[NO], gz[NO];
#pragma unroll
            for (int o = 0; o < NO; o++) gu[o] = to_f32(su[j][g + o * G][cl]), gz[o] = sz[j][g + o * G][cl];
            bar_sync_named(1, OP_THREADS);  // every output thread has read its gate's u and z from slot j
            issue(k + BUF);  // into slot j, before the outputs: the copies' lead is the walk's BUF - 1 tiles
            outputs(k, sp + k % SP * TL, gu, gz);
            mbar_arrive(bars.free(k % SP));
        }
        if (threadIdx.x == OP_THREADS) op_mark(OP_EV_OUTEND);
    }
    if (!WS) {
        for (int k = 0; k < BUF - 1; k++) issue(k);
    }
    for (int k = 0; walker && k < tiles; k++) {
        const int j = k % BUF;
        float(*spk)[PST] = WS ? sp + k % SP * TL : sp;  // WS: the tile's terms go to one of SP tiles
        if (WS) {
            if (DTF) mbar_wait(bars.landed(j), k / BUF % 2);  // its copies have landed
            mbar_wait(bars.full(j), k / BUF % 2);  // tile k is in
            if (k >= SP) mbar_wait(bars.free(k % SP), (k / SP - 1) % 2);  // and the outputs of tile k - SP have read spk
            if (k == 0 && threadIdx.x == 0) op_mark(OP_EV_WALK0);
        } else {
            cp_async_wait<BUF - 2>();  // tile k is in
            __syncthreads();  // and visible; every thread is done with tile k - 1, whose slot the next issue refills, and with sp
            issue(k + BUF - 1);
        }
        if (k == max(0, tiles - 1 - pf_lead)) prefetch_share(pf, pf_bytes);  // see SCAN_ONEPASS_PARAMS
        // The gate's u and z of the NO outputs this thread writes (positions
        // g, g + G, ..., channel cl), into registers now: the loads' latency
        // hides under the chain instead of adding to the tile's tail.
        float gu[NO], gz[NO];
        if (!WS) {
#pragma unroll
            for (int o = 0; o < NO; o++) gu[o] = to_f32(su[j][g + o * G][cl]), gz[o] = sz[j][g + o * G][cl];
        }
        // Two batches in flight: the loads and decays of the next batch are
        // written before the chain of this one, so they need not wait for
        // this batch's stores to sp (ptxas cannot tell the ring and sp apart
        // in dynamic shared memory, and keeps loads after earlier stores).
        float e[2][BATCH][SPT], x[2][BATCH][SPT], cv[2][BATCH][SPT];
        auto load = [&](int h, float(&e)[BATCH][SPT], float(&x)[BATCH][SPT], float(&cv)[BATCH][SPT]) {
#pragma unroll
            for (int i = 0; i < BATCH; i++) {
                float dt, du;
                if constexpr (DTF) {  // the pairs (dt, dt u) in the tile's rows of dt_low (onepass_dt)
                    const float2 p = *reinterpret_cast<const float2 *>(&sL[j][h + i][2 * cl]);
                    dt = p.x, du = p.y;
                } else {
                    dt = sdt[j][h + i][cl], du = dt * to_f32(su[j][h + i][cl]);
                }
                if (SEG) {  // h is a multiple of BATCH = G: position h + g is this thread's output h / G
                    cdr += dt;
                    if (i == g) cdo[h / BATCH] = cdr;
                }
                const float *bc = &sBC[j][h + i][onepass_bcol<SPT>(n0)];
                float bv[2 * SPT];  // B[n0 ..], then C[n0 ..]
                if (OP_BCI && SPT % 2 == 0) {  // whole 16-byte loads
#pragma unroll
                    for (int q = 0; q < 2 * SPT; q += 4)
                        *reinterpret_cast<float4 *>(bv + q) = *reinterpret_cast<const float4 *>(bc + q);
                } else {
#pragma unroll
                    for (int q = 0; q < SPT; q++) bv[q] = bc[q], bv[SPT + q] = bc[onepass_cgap<SPT>() + q];
                }
#pragma unroll
                for (int q = 0; q < SPT; q++) {
                    e[i][q] = dt * a[q];
                    x[i][q] = du * bv[q];
                    cv[i][q] = bv[SPT + q];
                }
            }
#pragma unroll
            for (int i = 0; i < BATCH; i++)
#pragma unroll
                for (int q = 0; q < SPT; q++) e[i][q] = ex2(e[i][q]);
        };
        auto chain = [&](int h, const float(&e)[BATCH][SPT], const float(&x)[BATCH][SPT],
                         const float(&cv)[BATCH][SPT]) {
            float even = 0.f;  // P2: the even position's term, stored with the odd one's
#pragma unroll
            for (int i = 0; i < BATCH; i++) {
                float p = 0.f;
#pragma unroll
                for (int q = 0; q < SPT; q++) {
                    s[q] = e[i][q] * s[q] + x[i][q];
                    p += s[q] * cv[i][q];
                }
                if (!P2)
                    spk[h + i][tid] = p;
                else if (i % 2 == 0)
                    even = p;
                else  // h + i - 1 is even: the pair's two rows hold [slot][2]
                    *reinterpret_cast<float2 *>(&spk[h + i - 1][2 * tid]) = make_float2(even, p);
            }
        };
        // The batches go in pairs, so that each buffer keeps one name when
        // the loop is not unrolled whole (OP_PAIRS).
        load(0, e[0], x[0], cv[0]);
#if OP_PAIRS
#pragma unroll OP_PAIRS
#else
#pragma unroll
#endif
        for (int h = 0; h < TL; h += 2 * BATCH) {
            load(h + BATCH, e[1], x[1], cv[1]);
            chain(h, e[0], x[0], cv[0]);
            if (h + 2 * BATCH < TL) load(h + 2 * BATCH, e[0], x[0], cv[0]);
            chain(h + BATCH, e[1], x[1], cv[1]);
        }
        if (WS) {
            mbar_arrive(bars.sums(k % SP));  // the tile's terms are in spk
            if (k == 0 && threadIdx.x == 0) op_mark(OP_EV_WALK1);
            continue;
        }
        __syncthreads();  // every term of the tile is in sp
        outputs(k, sp, gu, gz);
    }
    if (threadIdx.x == 0) op_mark(OP_EV_WALKEND);
    if (walker && (!SEG || gridDim.z == 1)) {
#pragma unroll
        for (int k = 0; k < SPT; k++)
            if (on && n0 + k < N) state[((size_t)b * E + c) * N + n0 + k] = s[k];
    } else if (walker) {  // the segment's end state from its start state
        size_t sc = ((size_t)seg * gridDim.y + b) * E + c;
#pragma unroll
        for (int k = 0; k < SPT; k++)
            if (on && n0 + k < N) ends[sc * N + n0 + k] = s[k];
    }
    pdl_release();
}

// onepass_config is each entry's tile and ring: two states a thread in
// tiles of 64 positions, a ring of 3 (scan_onepass2_), four in tiles of 32,
// a ring of 2 (scan_onepass4_). gpu.onePassShared gives the same sizes, and
// its test compiles them against onepass_shared. OP_TL2 and OP_BUF2 (2
// states), OP_TL4 and OP_BUF4 (4 states) are tuning knobs over them, for
// BenchmarkOnePass, which launches such a build with its own shared memory
// (gpu.Scan.SharedBytes).
#ifndef OP_TL2
#define OP_TL2 64
#endif
#ifndef OP_BUF2
#define OP_BUF2 3
#endif
#ifndef OP_TL4
#define OP_TL4 32
#endif
#ifndef OP_BUF4
#define OP_BUF4 2
#endif
template <int SPT>
struct onepass_config {
    static constexpr int TL = SPT == 2 ? OP_TL2 : OP_TL4, BUF = SPT == 2 ? OP_BUF2 : OP_BUF4;
};
// OP_TLS and OP_BUFS are the tile and ring of scan_onepass2s_, the entry
// for a walk in segments (Scan.Segments): with several blocks an SM, a
// smaller ring (46 KB at bf16 against 92) lets four of them fit.
#ifndef OP_TLS
#define OP_TLS 32
#endif
#ifndef OP_BUFS
#define OP_BUFS 3
#endif
// B and C go in 16-byte pieces (4 SPT-byte ones interleaved) where dbl's
// rows allow it, else in 4-byte ones.
#define SCAN_ONEPASS_RUN(SPT, TL, BUF, T, SEG, WS, DTF, DTA, TMA, MAPS)                                       \
    if (R % 4 == 0 && ldd % 4 == 0 && N % 4 == 0 && ((size_t)dbl & 15) == 0)                                 \
        scan_onepass<SPT, TL, BUF, OP_BCI ? 4 * SPT : 16, T, SEG, WS, DTF, TMA>(SCAN_ONEPASS_ARGS, DTA,       \
                                                                                 MAPS);                        \
    else if constexpr (!DTF)                                                                                 \
        scan_onepass<SPT, TL, BUF, 4, T, SEG, WS, DTF, false>(SCAN_ONEPASS_ARGS, DTA, MAPS);                  \
    else                                                                                                     \
        __trap() /* gpu.Scan runs the time step's entry only where dbl's rows allow 16-byte pieces */

// The span of pf_bytes at pf (prefetch_share; null for none) is what
// out_proj reads next beside y: the rows of the residual stream it adds
// into, last read at the layer's start, so no longer in L2. Each block asks
// for its share pf_lead tiles before its last one: late enough that the
// scan's own traffic does not push the rows out again, early enough for
// them to arrive.
//
// A grid of gridDim.z = S > 1 walks each sequence in S segments of Ts
// positions at once, S times the blocks (Scan.Segments): segment 0 from the
// carried state, writing y; each later one from zero, writing its sums
// before the gate to vpart (f32, rows of ldv) and, at each of its
// positions, dt summed from its start to cum (rows of E: the engine passes
// dt itself, each value replaced after the walk has read it); every
// segment its end state to ends [S, B, E, N]. scan_fixup then adds what
// each later segment's true start state contributes, gates, and writes y
// and the carried state. With S = 1 (Ts >= T) the walk is the whole scan,
// and vpart, ends and cum go unused. scan_onepass2s_ is the walk in
// segments (the only entry that writes cum); at 4 states a thread the
// blocks are many already, and the walk does not run in segments. The
// other entries ignore Ts, vpart, ends and cum, and compile to the walk
// that knows no segments (a walk with the segments' logic cost the 130m
// B=1 prefill 3%). cum may be dt itself, though dt is __restrict__: the
// walk reads dt only through cp.async (asm with a memory clobber), never
// as a C++ load that a store through cum could be reordered with.
#define SCAN_ONEPASS_PARAMS(T)                                                                                 \
    const float *dt, const float *__restrict__ A2, const float *dbl, int ldd, int R,                           \
        const T *u, const float *__restrict__ Dskip, const float *z, int ldz,                                  \
        float *__restrict__ state, T *__restrict__ y, int T_, int E, int N, const void *pf, long long pf_bytes, \
        int pf_lead, int Ts, float *__restrict__ vpart, int ldv, float *__restrict__ ends, float *cum
#define SCAN_ONEPASS_ARGS \
    dt, A2, dbl, ldd, R, u, Dskip, z, ldz, state, y, T_, E, N, pf, pf_bytes, pf_lead, Ts, vpart, ldv, ends, cum
#define SCAN_ONEPASS(sfx, T)                                                                                   \
    extern "C" __global__ void __launch_bounds__(OP_THREADS) scan_onepass2_##sfx(SCAN_ONEPASS_PARAMS(T)) {     \
        SCAN_ONEPASS_RUN(2, onepass_config<2>::TL, onepass_config<2>::BUF, T, false, false, false, {}, false,   \
                         {});                                                                                  \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(OP_THREADS) scan_onepass4_##sfx(SCAN_ONEPASS_PARAMS(T)) {     \
        SCAN_ONEPASS_RUN(4, onepass_config<4>::TL, onepass_config<4>::BUF, T, false, false, false, {}, false,   \
                         {});                                                                                  \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(OP_THREADS) scan_onepass2s_##sfx(SCAN_ONEPASS_PARAMS(T)) {    \
        SCAN_ONEPASS_RUN(2, OP_TLS, OP_BUFS, T, true, false, false, {}, false, {});                            \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(2 * OP_THREADS, 1) scan_onepass2w_##sfx(SCAN_ONEPASS_PARAMS(T)) { \
        SCAN_ONEPASS_RUN(2, onepass_config<2>::TL, OP_WS_BUF, T, false, true, false, {}, false, {});           \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(3 * OP_THREADS, 1)                                            \
        scan_onepass2wd_##sfx(SCAN_ONEPASS_PARAMS(T), const float *__restrict__ Wdt,                           \
                              const float *__restrict__ dtb, int products) {                                   \
        SCAN_ONEPASS_RUN(2, onepass_config<2>::TL, OP_WS_BUF, T, false, true, true,                            \
                         (onepass_dtargs{Wdt, dtb, products}), false, {});                                     \
    }                                                                                                          \
    /* scan_onepass2wd_ with every tile through the copy engine (onepass_maps; the maps first,    */          \
    /* so that their 64-byte alignment holds in the parameter buffer) */                                       \
    extern "C" __global__ void __launch_bounds__(3 * OP_THREADS, 1) scan_onepass2wdt_##sfx(                    \
        const __grid_constant__ tensor_map umap, const __grid_constant__ tensor_map zmap,                      \
        const __grid_constant__ tensor_map bcmap, const __grid_constant__ tensor_map lowmap,                    \
        SCAN_ONEPASS_PARAMS(T), const float *__restrict__ Wdt, const float *__restrict__ dtb, int products) {   \
        SCAN_ONEPASS_RUN(2, onepass_config<2>::TL, OP_WS_BUF, T, false, true, true,                            \
                         (onepass_dtargs{Wdt, dtb, products}), true,                                           \
                         (onepass_maps{&umap, &zmap, &bcmap, &lowmap}));                                       \
    }
EACH_DTYPE(SCAN_ONEPASS)

// scan_fixup finishes a walk in S segments (SCAN_ONEPASS_PARAMS). A later
// segment's true state at position t is its walk's state plus
// 2^(A2 cd(t)) s0, where s0 is the true state before the segment and cd(t)
// the sum of dt from the segment's start through t (dt >= 0, A2 < 0; the
// walk left cd in cum). So its output adds sum over n of
// C[t, n] s0[n] 2^(A2[n] cd(t)) to the walk's sum before the gate. No term
// depends on another, as the walk's do: every position after the first
// segment runs in parallel, one exp a (position, channel, state).
//
// Grid (ceil(E / 32), Y, B), FX_WARPS warps a block: lane i owns channel
// 32 blockIdx.x + i, and the block the blockIdx.y-th of Y shares of the
// positions Ts .. T - 1, each warp a run of consecutive positions of it.
// One wave of blocks (Y from Scan.Launch): each first chains every later
// segment's s0 from the segments' end states and last cd into shared
// memory ([S - 1][state][lane], OP_NS / FX_WARPS states a warp, every load
// of a chain issued before its first step), the blocks of share 0 the
// carried state too. A thread then keeps its channel's A2 and its
// segment's s0 in registers, and a warp walks its run a pair of positions
// at a time, with the inputs of the next FX_DEPTH - 2 positions in flight:
// cp.async copies them into a ring of slots in shared memory (a build that
// loaded each position's inputs into registers while it computed the one
// before had too few loads in flight an SM, and waited on L2).
#define FX_WARPS 8
#define FX_BLOCKS 3  // blocks an SM: the launch bounds, fixupBlocksPerSM in Go
#define FX_DEPTH 8   // a warp's ring of positions, a power of 2 (pairs of them in flight)
#define FX_SLOT (3 * 32 + OP_NS)  // floats a position: the warp's cd, v and z, then C's row
#define FX_SEGS 8    // segments at most (gpu.maxSegments)
// fixup_shared is scan_fixup's dynamic shared memory, in bytes, for S
// segments: the warps' rings, then the start states (gpu.fixupShared).
__host__ __device__ constexpr int fixup_shared(int S) { return 4 * (FX_WARPS * FX_DEPTH * FX_SLOT + (S - 1) * OP_NS * 32); }
template <class Tv>
__device__ __forceinline__ void scan_fixup(const float *__restrict__ cum, const float *__restrict__ A2,
                                           const float *dbl, int ldd, int R, const float *z,
                                           int ldz, const float *__restrict__ vpart, int ldv,
                                           const float *__restrict__ ends, float *__restrict__ state,
                                           Tv *__restrict__ y, int T, int E, int N, int Ts) {
    extern __shared__ __align__(16) float fx_smem[];
    const int lane = threadIdx.x % 32, w = threadIdx.x / 32, c = blockIdx.x * 32 + lane;
    const int S = (T + Ts - 1) / Ts, B = gridDim.z, b = blockIdx.z;
    const bool on = c < E;
    float *s0 = fx_smem + FX_WARPS * FX_DEPTH * FX_SLOT;  // [S - 1][OP_NS][32]
    float a[OP_NS];  // states past N have a = 0, s0 = 0 and C = 0
#pragma unroll
    for (int n = 0; n < OP_NS; n++) a[n] = on && n < N ? A2[(size_t)c * N + n] : 0.f;
    pdl_wait();  // the walk's outputs
    {  // every load of the chains first (one L2 round trip), then the chains
        constexpr int NK = OP_NS / FX_WARPS;  // states a warp
        float total[FX_SEGS], en[NK][FX_SEGS], an[NK];  // (a[n] would put a in local memory: n is not a constant)
#pragma unroll
        for (int k = 0; k < NK; k++) an[k] = on && w + k * FX_WARPS < N ? A2[(size_t)c * N + w + k * FX_WARPS] : 0.f;
#pragma unroll
        for (int j = 0; j < FX_SEGS; j++) {  // cd at segment j's last position
            total[j] = on && j < S ? cum[((size_t)b * T + min(T, (j + 1) * Ts) - 1) * E + c] : 0.f;
#pragma unroll
            for (int k = 0; k < NK; k++) {
                const int n = w + k * FX_WARPS;
                en[k][j] = on && n < N && j < S ? ends[(((size_t)j * B + b) * E + c) * N + n] : 0.f;
            }
        }
#pragma unroll
        for (int k = 0; k < NK; k++) {
            const int n = w + k * FX_WARPS;
            float s = en[k][0];
#pragma unroll
            for (int j = 1; j < FX_SEGS; j++) {
                if (j < S) {
                    s0[((j - 1) * OP_NS + n) * 32 + lane] = s;
                    s = en[k][j] + ex2(an[k] * total[j]) * s;
                }
            }
            if (blockIdx.y == 0 && on && n < N) state[((size_t)b * E + c) * N + n] = s;
        }
    }
    __syncthreads();
    // Shares and runs of whole pairs of positions from Ts (even, as a
    // multiple of segmentAlign): a pair never straddles two segments.
    const int share = ((T - Ts + gridDim.y - 1) / gridDim.y + 1) & ~1, run = ((share + FX_WARPS - 1) / FX_WARPS + 1) & ~1;
    const int t0 = Ts + blockIdx.y * share + w * run, t1 = min(min(T, Ts + (blockIdx.y + 1) * share), t0 + run);
    if (t0 >= t1) return;  // the whole warp
    int seg = t0 / Ts, next = (seg + 1) * Ts;  // the run's segment, and the position that starts the one after
    float sv[OP_NS];
    auto states = [&] {
#pragma unroll
        for (int n = 0; n < OP_NS; n++) sv[n] = s0[((seg - 1) * OP_NS + n) * 32 + lane];
    };
    states();
    const size_t r0 = (size_t)b * T;
    float *ring = fx_smem + w * FX_DEPTH * FX_SLOT;
    const unsigned sring = shared_addr(ring);
    // The next position to issue. Where every row allows it, lane p < 28
    // copies the p-th 16-byte piece of a slot: lanes 0-7 cd, 8-15 v, 16-23
    // z (four channels each; pieces past E zeros), 24-27 C's row; else each
    // lane its channel's cd, v and z, and lanes 0-15 a state of C, in 4-byte
    // pieces. Each source moves on a row a position.
    const bool vec = N == OP_NS && E % 4 == 0 && ldv % 4 == 0 && ldz % 4 == 0 && (R + N) % 4 == 0 && ldd % 4 == 0 &&
                     (((size_t)cum | (size_t)vpart | (size_t)z | (size_t)dbl) & 15) == 0;
    const int q = lane % 8 * 4, c0 = blockIdx.x * 32;  // a piece's first channel or state
    const float *src = lane < 8 ? cum : lane < 16 ? vpart : lane < 24 ? z : dbl;
    const int ld = lane < 8 ? E : lane < 16 ? ldv : lane < 24 ? ldz : ldd;
    const bool piece = lane < 24 ? c0 + q < E : lane < 28;
    src += (r0 + t0) * ld + (lane < 24 ? (piece ? c0 + q : 0) : R + N + q);
    int ti = t0;
    const float *pc = cum + (r0 + t0) * E + (on ? c : 0), *pv = vpart + (r0 + t0) * ldv + (on ? c : 0),
                *pz = z + (r0 + t0) * ldz + (on ? c : 0), *pC = dbl + (r0 + t0) * ldd + R + N + (lane < N ? lane : 0);
    // The next pair of positions' inputs into their slots (positions past
    // the run nothing), as one group, so that every iteration waits for
    // the same count.
    auto issue = [&] {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            if (ti < t1) {
                const unsigned slot = sring + ti % FX_DEPTH * FX_SLOT * 4;
                if (vec) {
                    if (lane < 28) cp_async_s<16>(slot + lane * 16, src, piece);
                } else {
                    cp_async_s<4>(slot + lane * 4, pc, on);
                    cp_async_s<4>(slot + (32 + lane) * 4, pv, on);
                    cp_async_s<4>(slot + (64 + lane) * 4, pz, on);
                    if (lane < OP_NS) cp_async_s<4>(slot + (96 + lane) * 4, pC, lane < N);
                }
            }
            ti++;
            if (vec)  // only the path taken moves its sources
                src += ld;
            else
                pc += E, pv += ldv, pz += ldz, pC += ldd;
        }
        cp_async_commit();
    };
    for (int k = 0; k < FX_DEPTH / 2 - 1; k++) issue();
    // A pair of positions an iteration, t and t + 1 (the latter past the
    // run where the run is odd at T: computed from a stale slot, not
    // stored), so that each warp has two chains of exps to interleave.
    for (int t = t0; t < t1; t += 2) {
        cp_async_wait<FX_DEPTH / 2 - 2>();  // positions t and t + 1 are in
        __syncwarp();  // and visible to the warp, whose lanes are all done with the previous pair's slots
        issue();  // positions t + FX_DEPTH - 2 and t + FX_DEPTH - 1, into those slots
        if (t == next) seg++, next += Ts, states();  // the same t on every lane: no divergence
        const float *sa = ring + t % FX_DEPTH * FX_SLOT, *sb = sa + FX_SLOT;
        const float cda = sa[lane], cdb = sb[lane];
        float adda = 0.f, addb = 0.f;
#pragma unroll
        for (int n = 0; n < OP_NS; n += 4) {
            const float4 ca = *reinterpret_cast<const float4 *>(sa + 96 + n),
                         cb = *reinterpret_cast<const float4 *>(sb + 96 + n);
            const float cva[4] = {ca.x, ca.y, ca.z, ca.w}, cvb[4] = {cb.x, cb.y, cb.z, cb.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                adda += cva[k] * (sv[n + k] * ex2(a[n + k] * cda));
                addb += cvb[k] * (sv[n + k] * ex2(a[n + k] * cdb));
            }
        }
        if (on) y[(r0 + t) * E + c] = from_f32<Tv>((sa[32 + lane] + adda) * silu_f(sa[64 + lane]));
        if (on && t + 1 < t1) y[(r0 + t + 1) * E + c] = from_f32<Tv>((sb[32 + lane] + addb) * silu_f(sb[64 + lane]));
    }
}
#define SCAN_FIXUP(sfx, T)                                                                                     \
    extern "C" __global__ void __launch_bounds__(FX_WARPS * 32, FX_BLOCKS)                                     \
        scan_fixup_##sfx(const float *__restrict__ cum, const float *__restrict__ A2, const float *dbl,        \
                         int ldd, int R, const float *z, int ldz, const float *__restrict__ vpart,             \
                         int ldv, const float *__restrict__ ends, float *__restrict__ state, T *__restrict__ y, \
                         int T_, int E, int N, int Ts) {                                                       \
        scan_fixup<T>(cum, A2, dbl, ldd, R, z, ldz, vpart, ldv, ends, state, y, T_, E, N, Ts);                 \
    }
EACH_DTYPE(SCAN_FIXUP)
