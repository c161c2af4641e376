// dt_proj and the time step: the low-rank projection, a GEMM with a short
// inner dimension R (dt_rank, d/16) that cuBLAS runs at a fraction of the
// FP32 rate (23 us a layer for the 130m shape at T=2048, 13 TFLOP/s), then
// the bias and softplus, once per (r, c) rather than in each scan pass.
//
//   dt[r, c] = softplus(sum_{k < R} dbl[r, k] * W[c, k] + bias[c])   r < rows, c < E
//
// dbl [rows, ldd] f32 (x_proj's output; dt_low is its first R columns),
// W [E, R] f32, bias [E] f32, dt [rows, E] f32; f32 products and sums, and
// math.cuh's softplus_f (within 2e-6 of float64; x above 20 comes back as
// x, PyTorch's threshold).
//
// dt_proj: grid (ceil(E / DT_CH), ceil(rows / DT_ROWS)), block
// DT_THREADS. Each thread sums a DT_TM x DT_TN tile of dt in registers:
// DT_TN consecutive channels (lane) by DT_TM consecutive rows (warp). Per
// stage of DT_K columns the block stages the tile's dt_low rows and its
// channels' weights in shared memory, both transposed to [k][row or
// channel]; then for each k a thread reads its DT_TN weights (one 16-byte
// load, consecutive across the warp) and its DT_TM dt_low values (16-byte
// loads, the same for the whole warp) and does DT_TM * DT_TN FMAs. Rows of
// the staged arrays are padded by 4 floats, which keeps 16-byte alignment
// and spreads the transposing stores over the banks. Each row's DT_TN
// channels are stored as one float4.
//
// The global reads of stage k + 1 are issued before stage k's FMAs, into
// registers, and go to shared memory after them, so their latency overlaps
// the arithmetic; where R, ldd and the pointers allow, each is a 16-byte
// piece of a row (the two entries at the end).
// (The first version read 4 bytes at a time, without the overlap, and
// took 18.9 us a layer on the H200 for the 130m shape at T=2048, its issue
// slots 72% busy; one channel per thread, with the weights in registers,
// needed a shared-memory read per FMA and took 30-37 us.)

#define DT_TN 4                                    // channels per thread
#define DT_TM 8                                    // rows per thread
#define DT_CH (32 * DT_TN)                         // channels per block: a warp's lanes
#define DT_WARPS 8                                 // warps per block, each DT_TM rows
#define DT_ROWS (DT_WARPS * DT_TM)                 // rows per block
#define DT_THREADS (32 * DT_WARPS)
#define DT_K 16                                    // columns of dt_low per stage
static_assert(DT_TN == 4, "a thread's channels are stored as one float4");

// dt_stage holds one thread's share of a stage's global reads: XP pieces of
// dt_low rows and WP of weight rows, each V consecutive columns. Piece p of
// a thread is row (channel) i + p * STEP of the block's tile, at column k.
template <int V>
struct dt_stage {
    static constexpr int PER_ROW = DT_K / V, STEP = DT_THREADS / PER_ROW;
    static constexpr int XP = DT_ROWS / STEP, WP = DT_CH / STEP;
    float x[XP][V], w[WP][V];
    const float *xsrc, *wsrc;  // piece 0 at column 0
    int i, k, xrows, wrows;     // xrows, wrows: the tile's rows and channels that exist
    size_t ldd, R;

    __device__ __forceinline__ dt_stage(const float *dbl, int ldd_, int R_, const float *W, int rows, int E, int r0,
                                        int c0)
        : i(threadIdx.x / PER_ROW), k(threadIdx.x % PER_ROW * V), ldd(ldd_), R(R_) {
        xrows = rows - r0, wrows = E - c0;
        xsrc = dbl + (size_t)(r0 + i) * ldd + k;
        wsrc = W + (size_t)(c0 + i) * R + k;
    }
    // load reads columns k0 .. k0 + DT_K - 1 (zeros past rows, E and R).
    __device__ __forceinline__ void load(int k0) {
        bool kok = k0 + k < (int)R;
#pragma unroll
        for (int p = 0; p < XP; p++) read(x[p], kok && i + p * STEP < xrows, xsrc + p * STEP * ldd + k0);
#pragma unroll
        for (int p = 0; p < WP; p++) read(w[p], kok && i + p * STEP < wrows, wsrc + p * STEP * R + k0);
    }
    __device__ __forceinline__ static void read(float (&v)[V], bool ok, const float *src) {
        if constexpr (V == 4) {
            float4 f = ok ? *reinterpret_cast<const float4 *>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
            v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
        } else {
            v[0] = ok ? *src : 0.f;
        }
    }
    // store writes the pieces to the staged arrays, transposed.
    __device__ __forceinline__ void store(float (*sx)[DT_ROWS + 4], float (*sw)[DT_CH + 4]) const {
#pragma unroll
        for (int p = 0; p < XP; p++)
#pragma unroll
            for (int j = 0; j < V; j++) sx[k + j][i + p * STEP] = x[p][j];
#pragma unroll
        for (int p = 0; p < WP; p++)
#pragma unroll
            for (int j = 0; j < V; j++) sw[k + j][i + p * STEP] = w[p][j];
    }
};

template <int V>
__device__ __forceinline__ void dt_proj(const float *__restrict__ dbl, int ldd, int R, const float *__restrict__ W,
                                        const float *__restrict__ bias, float *__restrict__ dt, int rows, int E) {
    __shared__ __align__(16) float sx[DT_K][DT_ROWS + 4];
    __shared__ __align__(16) float sw[DT_K][DT_CH + 4];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int c0 = blockIdx.x * DT_CH, r0 = blockIdx.y * DT_ROWS;
    float acc[DT_TM][DT_TN];
#pragma unroll
    for (int i = 0; i < DT_TM; i++)
#pragma unroll
        for (int j = 0; j < DT_TN; j++) acc[i][j] = 0.f;
    pdl_wait();  // launched with PDL: dt_low comes from x_proj
    dt_stage<V> next(dbl, ldd, R, W, rows, E, r0, c0);
    next.load(0);
    for (int k0 = 0; k0 < R; k0 += DT_K) {
        __syncthreads();  // the previous stage's columns are consumed
        next.store(sx, sw);
        __syncthreads();
        if (k0 + DT_K < R) next.load(k0 + DT_K);
#pragma unroll
        for (int k = 0; k < DT_K; k++) {
            float4 w = *reinterpret_cast<const float4 *>(&sw[k][lane * DT_TN]);
            float wv[DT_TN] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int i = 0; i < DT_TM; i += 4) {
                float4 x = *reinterpret_cast<const float4 *>(&sx[k][warp * DT_TM + i]);
                float xv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                for (int ii = 0; ii < 4; ii++)
#pragma unroll
                    for (int j = 0; j < DT_TN; j++) acc[i + ii][j] += xv[ii] * wv[j];
            }
        }
    }
    // A row's DT_TN channels go out as one 16-byte store where they can
    // (a warp then writes 512 contiguous bytes), else one by one.
    int c = c0 + lane * DT_TN;
    float b[DT_TN];
#pragma unroll
    for (int j = 0; j < DT_TN; j++) b[j] = c + j < E ? bias[c + j] : 0.f;
#pragma unroll
    for (int i = 0; i < DT_TM; i++) {
        int r = r0 + warp * DT_TM + i;
        if (r >= rows) break;
        float v[DT_TN];
#pragma unroll
        for (int j = 0; j < DT_TN; j++) v[j] = softplus_f(acc[i][j] + b[j]);
        float *o = dt + (size_t)r * E + c;
        if (E % DT_TN == 0 && c + DT_TN <= E) {
            *reinterpret_cast<float4 *>(o) = make_float4(v[0], v[1], v[2], v[3]);
        } else {
#pragma unroll
            for (int j = 0; j < DT_TN; j++)
                if (c + j < E) o[j] = v[j];
        }
    }
    pdl_release();
}

// Two entries: dt_proj_f32 reads 16-byte pieces (R and ldd multiples of 4,
// dbl and W 16-byte aligned: the Mamba shapes), three blocks an SM;
// dt_proj_narrow_f32 reads 4 bytes at a time, for any R and ldd, two
// blocks an SM (its registers).
extern "C" __global__ void __launch_bounds__(DT_THREADS, 3)
    dt_proj_f32(const float *__restrict__ dbl, int ldd, int R, const float *__restrict__ W,
                const float *__restrict__ bias, float *__restrict__ dt, int rows, int E) {
    dt_proj<4>(dbl, ldd, R, W, bias, dt, rows, E);
}
extern "C" __global__ void __launch_bounds__(DT_THREADS, 2)
    dt_proj_narrow_f32(const float *__restrict__ dbl, int ldd, int R, const float *__restrict__ W,
                       const float *__restrict__ bias, float *__restrict__ dt, int rows, int E) {
    dt_proj<1>(dbl, ldd, R, W, bias, dt, rows, E);
}

// dt_proj on the tensor cores (sm_80 and newer), for the same product as
// dt_proj_f32 at close to f32 accuracy: 3xTF32 (dt_proj_tc_f32). Each
// operand v is split as hi, v truncated to TF32, and lo = v - hi (exact,
// under 2^-10 |v|; the tensor core keeps lo's top 10 mantissa bits), and the
// product is hi*hi + hi*lo + lo*hi. That leaves out lo*lo and the truncation
// of lo, each under 2^-20 of the product. One pass of TF32 (2^-11, as f16's
// rounding) would cost the f16 engine its carried-state bar
// (mambago/internal/precision, row "dt_proj on 1xTF32"); for the bf16
// engine, whose error is set by its bf16 weights, it changes nothing there
// (KL 1.04e-2 and state 7.06e-2 against 1.04e-2 and 6.98e-2 in f32), so
// dt_proj_tc1_f32 takes one product of the operands rounded to TF32.
//
// dt_proj_tc_f32: grid (ceil(E / TC_BN), ceil(rows / BM)), block
// TC_THREADS: 8 warps, 2 along the rows by 4 along the channels, each
// summing a 16 MT x 32 tile of dt as MT x TC_NT mma.m16n8k8 tiles (BM = 32 MT
// rows a block, MT = 2 or 4: the entries at the end). The
// block stages TC_BK columns of its dt_low rows and of its channels'
// weights at a time with cp.async, TC_STAGES - 1 stages ahead of the one
// in use, as rows of four 16-byte pieces: piece c of row r is stored at
// c ^ (r / 2 % 4) (tc_swizzle). Then both the copies (8 threads, rows r and
// r + 1, each a row's four pieces) and the fragment loads (a warp's 8 row
// groups by 4 columns) hit 32 different banks; padded rows, without the
// swizzle, left 43% of the wavefronts in conflicts. It needs R and ldd
// multiples of 4 and dbl and W 16-byte aligned (the 16-byte copies), as
// dt_proj_f32 does.
//
// TC_STAGES and TC_MINB may be set when compiling (BenchmarkDTProj sweeps
// them); the defaults are the fastest it measured.
#define TC_BN 128                      // channels per block
#define TC_BK 16                       // columns of dt_low per stage: four 16-byte pieces
#ifndef TC_STAGES
#define TC_STAGES 3                    // stages in flight
#endif
#ifndef TC_MINB
#define TC_MINB 3                      // blocks an SM, for the register budget
#endif
#define TC_THREADS 256
#define TC_NT 4                        // n8 tiles per warp (32 channels)
static_assert(TC_BN == 4 * 8 * TC_NT, "8 warps: 2 along rows, 4 along channels");

// tc_swizzle is where column k of row r of a stage is stored in the row.
__device__ __forceinline__ int tc_swizzle(int r, int k) { return (k ^ (r << 1 & 12)); }

// dt_store_pair stores v0 and v1 at o, channels c and c + 1 of a row of dt
// (E channels): one 8-byte store where E allows (a warp's store then fills
// eight 32-byte sectors), else one float at a time, inside E.
__device__ __forceinline__ void dt_store_pair(float *o, int c, int E, float v0, float v1) {
    if (E % 2 == 0 && c + 1 < E) {
        *reinterpret_cast<float2 *>(o) = make_float2(v0, v1);
    } else {
        if (c < E) o[0] = v0;
        if (c + 1 < E) o[1] = v1;
    }
}

// tc_step runs a thread's products over one stage x (the block's dt_low
// rows from 0, its channels' weight rows from wc - its warp's columns): for
// each 8 columns, its fragments of MT m16 tiles at rows wr and TC_NT n8
// tiles, split (PRODUCTS 3) or rounded (1) to TF32, then the products, each
// over all tiles in turn: an accumulator's next product is then 8 mma later.
template <int PRODUCTS, int MT>
__device__ __forceinline__ void tc_step(float (&acc)[MT][TC_NT][4], const float (*x)[TC_BK], int wr, int wc, int g,
                                        int q) {
    static_assert(PRODUCTS == 3 || PRODUCTS == 1, "3xTF32 or 1xTF32");
#pragma unroll
    for (int kk = 0; kk < TC_BK; kk += 8) {
        // Every fragment row is a multiple of 8 plus g, so its swizzle is
        // g's: (g / 2 % 4) * 4.
        unsigned ah[MT][4], al[MT][4], bh[TC_NT][2], bl[TC_NT][2];
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float v = x[wr + m * 16 + g + (j & 1) * 8][tc_swizzle(g, kk + q + (j >> 1) * 4)];
                if (PRODUCTS == 3)
                    split_tf32(v, ah[m][j], al[m][j]);
                else
                    ah[m][j] = round_tf32(v);
            }
#pragma unroll
        for (int n = 0; n < TC_NT; n++)
#pragma unroll
            for (int j = 0; j < 2; j++) {
                float v = x[wc + n * 8 + g][tc_swizzle(g, kk + q + j * 4)];
                if (PRODUCTS == 3)
                    split_tf32(v, bh[n][j], bl[n][j]);
                else
                    bh[n][j] = round_tf32(v);
            }
        if (PRODUCTS == 3) {
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int n = 0; n < TC_NT; n++) mma_tf32(acc[m][n], al[m], bh[n]);
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int n = 0; n < TC_NT; n++) mma_tf32(acc[m][n], ah[m], bl[n]);
        }
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int n = 0; n < TC_NT; n++) mma_tf32(acc[m][n], ah[m], bh[n]);
    }
}

// tc_store adds the bias to a thread's sums, runs the softplus and stores
// them: channels c, c + 1 of rows g and g + 8 of each tile, from row r0 +
// wr and channel c0 + wc. The bias and softplus go on every value first,
// rows past the end included (their sums are zeros), so that the 4 MT TC_NT
// softplus overlap; only the stores depend on the row. (With each row's
// softplus under its row's condition, every pair paid its latency alone.)
template <int MT>
__device__ __forceinline__ void tc_store(float (&acc)[MT][TC_NT][4], const float *__restrict__ bias,
                                         float *__restrict__ dt, int rows, int E, int r0, int c0, int g, int q) {
#pragma unroll
    for (int n = 0; n < TC_NT; n++) {
        int c = c0 + n * 8 + 2 * q;
        float b0 = c < E ? bias[c] : 0.f, b1 = c + 1 < E ? bias[c + 1] : 0.f;
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                acc[m][n][2 * h] = softplus_f(acc[m][n][2 * h] + b0);
                acc[m][n][2 * h + 1] = softplus_f(acc[m][n][2 * h + 1] + b1);
            }
    }
#pragma unroll
    for (int n = 0; n < TC_NT; n++) {
        int c = c0 + n * 8 + 2 * q;
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int r = r0 + m * 16 + g + h * 8;
                float v0 = acc[m][n][2 * h], v1 = acc[m][n][2 * h + 1], *o = dt + (size_t)r * E + c;
                if (r >= rows) continue;
                dt_store_pair(o, c, E, v0, v1);
            }
    }
}

// tc_zero clears a thread's sums.
template <int MT>
__device__ __forceinline__ void tc_zero(float (&acc)[MT][TC_NT][4]) {
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < TC_NT; n++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[m][n][j] = 0.f;
}

// dt_proj_tc sums PRODUCTS (3 or 1) TF32 products, as above, in blocks of
// BM = 32 MT rows (MT m16 tiles a warp).
template <int PRODUCTS, int MT>
__device__ __forceinline__ void dt_proj_tc(const float *__restrict__ dbl, int ldd, int R, const float *__restrict__ W,
                                           const float *__restrict__ bias, float *__restrict__ dt, int rows, int E) {
    constexpr int BM = 32 * MT;                                       // rows per block
    constexpr int COPIES = (BM + TC_BN) * TC_BK / 4 / TC_THREADS;  // 16-byte copies a thread a stage
    static_assert(COPIES * TC_THREADS * 4 == (BM + TC_BN) * TC_BK && BM % (TC_THREADS / 4) == 0,
                  "a stage is whole rounds of 16-byte copies, dt_low's rounds first");
    static_assert(TC_STAGES * (BM + TC_BN) * TC_BK * 4 <= 48 * 1024, "static shared memory");
    // A stage: the block's dt_low rows, then its channels' weight rows.
    __shared__ __align__(16) float st[TC_STAGES][BM + TC_BN][TC_BK];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    int wr = warp / 4 * (16 * MT), wc = BM + warp % 4 * (8 * TC_NT);  // the warp's rows in a stage
    int r0 = blockIdx.y * BM, c0 = blockIdx.x * TC_BN;
    pdl_wait();  // launched with PDL: dt_low comes from x_proj

    // A thread copies piece k of stage rows i, i + 64, ...: dt_low rows
    // below BM, weight rows from there. Zeros past rows, E and R.
    constexpr int ROUND = TC_THREADS / 4;  // stage rows a round of copies
    int i = threadIdx.x / 4, k = threadIdx.x % 4 * 4;
    const float *src[COPIES];
    bool ok[COPIES];
#pragma unroll
    for (int j = 0; j < COPIES; j++) {
        int row = i + j * ROUND;
        if (j * ROUND < BM) {
            ok[j] = r0 + row < rows;
            src[j] = dbl + (size_t)(ok[j] ? r0 + row : 0) * ldd + k;
        } else {
            ok[j] = c0 + row - BM < E;
            src[j] = W + (size_t)(ok[j] ? c0 + row - BM : 0) * R + k;
        }
    }
    auto stage = [&](int s, int k0) {
        bool kok = k0 + k < R;
#pragma unroll
        for (int j = 0; j < COPIES; j++) {
            int row = i + j * ROUND;
            cp_async<16>(&st[s][row][tc_swizzle(row, k)], src[j] + (kok ? k0 : 0), kok && ok[j]);
        }
    };

    float acc[MT][TC_NT][4];
    tc_zero(acc);
    int stages = (R + TC_BK - 1) / TC_BK;
#pragma unroll
    for (int s = 0; s < TC_STAGES - 1; s++) {
        if (s < stages) stage(s, s * TC_BK);
        cp_async_commit();
    }
    for (int s = 0; s < stages; s++) {
        int ahead = s + TC_STAGES - 1;
        if (ahead < stages) stage(ahead % TC_STAGES, ahead * TC_BK);
        cp_async_commit();
        cp_async_wait<TC_STAGES - 1>();  // stage s has landed
        __syncthreads();
        tc_step<PRODUCTS>(acc, st[s % TC_STAGES], wr, wc, g, q);
        __syncthreads();  // stage s is consumed before stage s + TC_STAGES overwrites it
    }
    tc_store(acc, bias, dt, rows, E, r0 + wr, c0 + wc - BM, g, q);
    pdl_release();
}

// dt_proj_tc_short is dt_proj_tc for short prompts (gpu's dtProjShortPays:
// 1.4b at 129-256 rows), where dt_proj_tc's blocks are few and each waits
// on its stages one after another (8 at R = 128, two in flight): 7.6 us a
// 1.4b layer at T = 128 (bench/results/2026-12-03-shortprompts.md), for 2
// MB of weights. Here a block of BM = 32 MT rows stages all of R at once, in
// dynamic shared memory (dt_proj_short_shared(R, MT): R / TC_BK stages, as
// dt_proj_tc lays them out), so the whole tile waits one round trip. The
// weights are copied before pdl_wait (no kernel writes them), dt_low after
// it. The same products in the same order as dt_proj_tc's, so the same
// bits.
__host__ __device__ constexpr int dt_proj_short_shared(int R, int MT) {
    return (R + TC_BK - 1) / TC_BK * (32 * MT + TC_BN) * TC_BK * 4;
}
template <int PRODUCTS, int MT>
__device__ __forceinline__ void dt_proj_tc_short(const float *__restrict__ dbl, int ldd, int R,
                                                 const float *__restrict__ W, const float *__restrict__ bias,
                                                 float *__restrict__ dt, int rows, int E) {
    constexpr int BM = 32 * MT, ROWS = BM + TC_BN;  // a stage's rows: dt_low's, then the weights'
    extern __shared__ __align__(16) float ts_smem[];
    auto st = reinterpret_cast<float(*)[ROWS][TC_BK]>(ts_smem);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    int wr = warp / 4 * (16 * MT), wc = BM + warp % 4 * (8 * TC_NT);
    int r0 = blockIdx.y * BM, c0 = blockIdx.x * TC_BN, stages = (R + TC_BK - 1) / TC_BK;
    // Piece i of a stage is row i / 4's 16-byte piece i % 4; zeros past
    // rows, E and R.
    auto copy = [&](int first, int last, const float *base, int ld, int n0, int n) {
        for (int s = 0; s < stages; s++)
            for (int i = first * 4 + threadIdx.x; i < last * 4; i += TC_THREADS) {
                int row = i / 4, k = i % 4 * 4, src = n0 + row - first;
                bool full = src < n && s * TC_BK + k < R;
                cp_async<16>(&st[s][row][tc_swizzle(row, k)], base + (full ? (size_t)src * ld + s * TC_BK + k : 0),
                             full);
            }
    };
    copy(BM, ROWS, W, R, c0, E);
    pdl_wait();  // launched with PDL: dt_low comes from x_proj
    copy(0, BM, dbl, ldd, r0, rows);
    cp_async_commit();

    float acc[MT][TC_NT][4];
    tc_zero(acc);
    cp_async_wait<0>();
    __syncthreads();
    for (int s = 0; s < stages; s++) tc_step<PRODUCTS>(acc, st[s], wr, wc, g, q);
    tc_store(acc, bias, dt, rows, E, r0 + wr, c0 + wc - BM, g, q);
    pdl_release();
}

// The entries: blocks of 64 rows (TC_MT = 2), three an SM, and the tall
// ones, of 128 rows (TC_MT = 4), two an SM, which read each weight tile half
// as often. gpu.DTProj picks the tall ones where they still make three
// blocks an SM (BenchmarkDTProj on the H200, one product: 2.8b at B=8
// 347 -> 302 us, 1.4b at T=2048 38.7 -> 36.1; 130m 14.8 -> 16.7).
extern "C" __global__ void __launch_bounds__(TC_THREADS, TC_MINB)
    dt_proj_tc_f32(const float *__restrict__ dbl, int ldd, int R, const float *__restrict__ W,
                   const float *__restrict__ bias, float *__restrict__ dt, int rows, int E) {
    dt_proj_tc<3, 2>(dbl, ldd, R, W, bias, dt, rows, E);
}
extern "C" __global__ void __launch_bounds__(TC_THREADS, TC_MINB)
    dt_proj_tc1_f32(const float *__restrict__ dbl, int ldd, int R, const float *__restrict__ W,
                    const float *__restrict__ bias, float *__restrict__ dt, int rows, int E) {
    dt_proj_tc<1, 2>(dbl, ldd, R, W, bias, dt, rows, E);
}
extern "C" __global__ void __launch_bounds__(TC_THREADS, 2)
    dt_proj_tc_tall_f32(const float *__restrict__ dbl, int ldd, int R, const float *__restrict__ W,
                        const float *__restrict__ bias, float *__restrict__ dt, int rows, int E) {
    dt_proj_tc<3, 4>(dbl, ldd, R, W, bias, dt, rows, E);
}
extern "C" __global__ void __launch_bounds__(TC_THREADS, 2)
    dt_proj_tc1_tall_f32(const float *__restrict__ dbl, int ldd, int R, const float *__restrict__ W,
                         const float *__restrict__ bias, float *__restrict__ dt, int rows, int E) {
    dt_proj_tc<1, 4>(dbl, ldd, R, W, bias, dt, rows, E);
}

// The short entries: blocks of 32 rows (MT = 1: gpu's dtProjShortRows), all
// of R staged at once. gpu.DTProj picks them for few rows (dtProjShortPays).
extern "C" __global__ void __launch_bounds__(TC_THREADS, 2)
    dt_proj_tc_short_f32(const float *__restrict__ dbl, int ldd, int R, const float *__restrict__ W,
                         const float *__restrict__ bias, float *__restrict__ dt, int rows, int E) {
    dt_proj_tc_short<3, 1>(dbl, ldd, R, W, bias, dt, rows, E);
}
extern "C" __global__ void __launch_bounds__(TC_THREADS, 2)
    dt_proj_tc1_short_f32(const float *__restrict__ dbl, int ldd, int R, const float *__restrict__ W,
                          const float *__restrict__ bias, float *__restrict__ dt, int rows, int E) {
    dt_proj_tc_short<1, 1>(dbl, ldd, R, W, bias, dt, rows, E);
}
// dt_proj_wg_f32: dt_proj_tc1_f32's product (one TF32 product of the
// operands rounded to nearest) on Hopper's warpgroup products (wgmma
// m64n128k8 .tf32, sm_90a), for the bf16 engine's tall shapes, where
// dt_proj_tc1's fragment loads, conversions and softplus keep its issue
// slots busy (1.4b T=2048: 36 us a layer, for 2 GFLOP and 34 MB of stores).
// Here the tensor cores read both operands from shared memory, so a
// thread's work is the rounding of its share of the tiles and the
// epilogue.
//
// A block holds DW_BN channels' weights [DW_BN][R] in shared memory for
// its whole life, and its DW_WGS warpgroups each walk their own tiles of
// 64 rows: row tile t = DW_WGS blockIdx.y + w, then every DW_WGS
// gridDim.y-th. A tile's dt_low rows are loaded into registers (16-byte
// pieces) while the tile before's products and epilogue run, then rounded
// to TF32 and stored into the warpgroup's buffer; both tiles are K-major
// with 128-byte rows (32 floats of k) swizzled as TMA's 128-byte mode lays
// them (wg_desc), in slabs of 32 columns, zeros past R, rows and E. Each
// thread then runs bias and softplus on its 64 sums and stores them as
// 8-byte pairs. Grid (ceil(E / DW_BN), up to ceil(rows / 64 / DW_WGS)),
// block 128 DW_WGS threads, dynamic shared memory dt_proj_wg_shared(R).
// R at most 32 DW_SLABS, a multiple of 4, ldd too, dbl and W 16-byte
// aligned (gpu.DTProj picks it only then). Compiled for anything but
// sm_90a it traps.
#define DW_BN 128
#define DW_WGS 2
#define DW_SLABS 5  // R up to 160 (2.8b)

__host__ __device__ constexpr int dt_proj_wg_shared(int R) {
    return ((R + 31) / 32) * 128 * (DW_BN + 64 * DW_WGS) + 1024;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wg_mma_tf32(float (&d)[64], unsigned long long da, unsigned long long db, int scale) { asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n" " wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) : "l"(da), "l"(db), "r"(scale)); }

// dw_store rounds v to TF32 and stores it as piece c (4 floats of k) of
// slab s of row r of a tile of N rows at tile (generic address).
template <int N>
__device__ __forceinline__ void dw_store(unsigned char *tile, int s, int r, int c, float4 v) {
    unsigned char *p = tile + (s * N + r) * 128 + (c ^ (r % 8)) * 16;
    *reinterpret_cast<uint4 *>(p) = make_uint4(round_tf32(v.x), round_tf32(v.y), round_tf32(v.z), round_tf32(v.w));
}

// dw_piece is where piece i of a tile of N rows lies: piece c < 8 of slab
// s of row r (8 consecutive threads read a row's 128 bytes of a slab).
template <int N>
__device__ __forceinline__ void dw_piece(int i, int &s, int &r, int &c) {
    c = i % 8, r = i / 8 % N, s = i / (8 * N);
}
#endif

extern "C" __global__ void __launch_bounds__(128 * DW_WGS, 1)
    dt_proj_wg_f32(const float *__restrict__ dbl, int ldd, int R, const float *__restrict__ W,
                   const float *__restrict__ bias, float *__restrict__ dt, int rows, int E) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char dw_smem[];
    const int slabs = (R + 31) / 32;  // of 32 columns: 8 pieces of 16 bytes a row
    if (slabs > DW_SLABS || R % 4 != 0 || blockDim.x != 128 * DW_WGS) __trap();
    const unsigned base = (shared_addr(dw_smem) + 1023) & ~1023u;
    unsigned char *gbase = dw_smem + (base - shared_addr(dw_smem));
    const int t = threadIdx.x % 128, w = threadIdx.x / 128, c0 = blockIdx.x * DW_BN;
    unsigned char *sW = gbase, *sA = gbase + slabs * DW_BN * 128 + w * slabs * 64 * 128;
    const unsigned aW = base, aA = base + slabs * DW_BN * 128 + w * slabs * 64 * 128;

    // The weights first (no kernel in flight writes them), every piece's
    // load in flight before the first store: piece threadIdx.x + blockDim.x
    // p (dw_piece). (A loop of a load and a store a piece waited for each
    // load in turn: 16 round trips at R = 128, which made the kernel slower
    // than dt_proj_tc1's.)
    {
        constexpr int HELD = DW_BN * 8 * DW_SLABS / (128 * DW_WGS);
        float4 v[HELD];
#pragma unroll
        for (int p = 0; p < HELD; p++) {
            int s, n, c;
            dw_piece<DW_BN>(threadIdx.x + 128 * DW_WGS * p, s, n, c);
            const int k = 32 * s + 4 * c;
            v[p] = s < slabs && c0 + n < E && k < R ? *reinterpret_cast<const float4 *>(W + (size_t)(c0 + n) * R + k)
                                                   : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int p = 0; p < HELD; p++) {
            int s, n, c;
            dw_piece<DW_BN>(threadIdx.x + 128 * DW_WGS * p, s, n, c);
            if (s < slabs) dw_store<DW_BN>(sW, s, n, c, v[p]);
        }
    }
    // A thread's sums: d[4 j + h] is row 16 (t / 32) + t % 32 / 4 + 8 (h / 2)
    // of the tile, channel 8 j + 2 (t % 4) + h % 2 (wgmma's D fragment).
    const int lr = 16 * (t / 32) + t % 32 / 4, lc = 2 * (t % 4);
    float2 b[DW_BN / 8];
#pragma unroll
    for (int j = 0; j < DW_BN / 8; j++) {
        const int c = c0 + 8 * j + lc;
        b[j] = make_float2(c < E ? bias[c] : 0.f, c + 1 < E ? bias[c + 1] : 0.f);
    }
    pdl_wait();  // dt_low comes from x_proj

    // The tile's dt_low pieces in registers: piece t + 128 p (dw_piece).
    constexpr int HELD = 64 * 8 * DW_SLABS / 128;
    float4 a[HELD];
    const int tiles = (rows + 63) / 64, step = DW_WGS * gridDim.y;
    auto load = [&](int tile) {
#pragma unroll
        for (int p = 0; p < HELD; p++) {
            int s, r, c;
            dw_piece<64>(t + 128 * p, s, r, c);
            const int k = 32 * s + 4 * c;
            r += tile * 64;
            a[p] = s < slabs && r < rows && k < R ? *reinterpret_cast<const float4 *>(dbl + (size_t)r * ldd + k)
                                                  : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
    int tile = DW_WGS * blockIdx.y + w;
    if (tile < tiles) load(tile);
    fence_proxy_async();  // the weights' stores, for the products
    __syncthreads();
    for (; tile < tiles; tile += step) {
#pragma unroll
        for (int p = 0; p < HELD; p++) {
            int s, r, c;
            dw_piece<64>(t + 128 * p, s, r, c);
            if (s < slabs) dw_store<64>(sA, s, r, c, a[p]);
        }
        fence_proxy_async();
        bar_sync_named(1 + w, 128);
        float d[64];
        wg_fence();
        for (int k = 0; k < 4 * slabs; k++) {  // 8 of k (32 bytes) a product, inside the slab's swizzled rows
            const unsigned off = (k / 4) * 128, in = (k % 4) * 32;  // the slab (a row of it), then k in the row
            wg_mma_tf32(d, wg_desc(aA + off * 64 + in), wg_desc(aW + off * DW_BN + in), k > 0);
        }
        wg_commit();
        if (tile + step < tiles) load(tile + step);  // under the products
        wg_wait0();
        bar_sync_named(1 + w, 128);  // every warp's products done: the buffer is free
#pragma unroll
        for (int j = 0; j < DW_BN / 8; j++) {
#pragma unroll
            for (int h = 0; h < 4; h++) d[4 * j + h] = softplus_f(d[4 * j + h] + (h % 2 ? b[j].y : b[j].x));
        }
#pragma unroll
        for (int j = 0; j < DW_BN / 8; j++) {
            const int c = c0 + 8 * j + lc;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = tile * 64 + lr + 8 * h;
                if (r < rows) dt_store_pair(dt + (size_t)r * E + c, c, E, d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
            }
        }
    }
    pdl_release();
#else
    __trap();
#endif
}
