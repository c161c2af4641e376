// A decode GEMV for a batch of up to 8 sequences on Hopper's warpgroup
// products (wgmma) and copy engine (TMA), the way cuBLAS runs these GEMMs
// at B = 8 (bench/cublas_gemv.py) but with x kept to f32 precision:
//
//   out[b, n] (+)= sum_k W[n, k] * x[b, k] + bias[n]      for n < rows, b < B
//
// x goes in as three bf16 parts (store_parts in math.cuh: hi + mid + lo,
// each the top 16 bits of what is left, so every product of a weight and a
// part is exact), laid out as 24 rows of K: row 8 p + b is part p of
// sequence b. x_parts_bf16 writes them from f32 rows, normed or not; the
// decode step's scan writes out_proj's (step.cu). One wgmma m64n24k16 then
// multiplies 64 weight rows by all three parts of all eight sequences, and
// the epilogue sums each sequence's three columns. A column of the product
// depends on its own column of x only, so rows of sequences past B may
// hold anything. Where step.cu's group_tile issues six mma.sync and
// split3's arithmetic for every 16 x 32 weights, this is one instruction
// for 64 x 16 of them, with both operands read from shared memory.
//
// A block of GW_THREADS (160) threads takes 64 rows (grid ceil(rows /
// 64)). Warp 4 is the producer: one thread copies each 64-wide step of K,
// W's 64 x 64 box and the parts' 24 x 64 box (tensor maps, 128-byte
// swizzle), into a ring of GW_STAGES stages, each completing on its full
// barrier; the first stages' weights go before it waits for the previous
// kernel (PDL). Warpgroup 0 consumes: for each stage, four wgmma (16 of K
// each), then the stage before goes back through its empty barrier (one
// step's products in flight while the next stage is waited for), as
// gemm_tma.cu's consumers do. The entries differ in what the epilogue
// does with a sum: gemv_wg_bf16 adds a bias and maybe the output's value,
// lm_head_wg_bf16 also ranks each sequence's greedy pick, step_in_wg_bf16
// runs step.cu's step_in epilogue (the conv step).
// gpu.Engine.GEMVWarpgroup picks them.
//
// The ring itself (wg_ring) takes any width of x that one wgmma does: it
// also runs gemm_skinny_bf16_f32, a prefill GEMM of up to 128 rows as
// the products' columns, for in_proj and out_proj of short prompts on the
// large shapes, where the weights set the time (behind Engine.SkinnyGEMM,
// off: it still loses to cuBLASLt, bench/results/2026-12-04-skinny.md;
// BenchmarkGemmSkinny times them).
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

// gw_x_bytes is a stage's box of the x operand, cols rows by 64 of K in
// bf16; gw_stage_bytes a stage, W's box and room for x's of at least 4 KB
// (the parts' 3 KB padded), so that every stage starts 1024-aligned.
__host__ __device__ constexpr int gw_x_bytes(int cols) { return cols * GW_BK * 2; }
__host__ __device__ constexpr int gw_stage_bytes(int cols) {
    return GW_W_BYTES + (gw_x_bytes(cols) > 4096 ? gw_x_bytes(cols) : 4096);
}

// gemv_wg_shared is the dynamic shared memory of a ring whose x boxes have
// cols rows (24: gemv_wg_bf16's parts): the ring, 1024 bytes to align it
// (the 128-byte swizzle repeats every 1024), and the barriers.
__host__ __device__ constexpr int gemv_wg_shared(int cols = 24) {
    return GW_STAGES * gw_stage_bytes(cols) + 1024 + 2 * GW_STAGES * 8;
}

// x_parts_bf16 writes parts [24][K] bf16 (store_parts: row 8 p + b is part p
// of sequence b) from x [B, K] f32 (row stride ldx), zeros for B <= b < 8;
// with a norm weight, of rmsnorm(x[b]) * normw instead (eps inside the
// square root, as rmsnorm.cu). Grid (8), block a multiple of 32; under PDL
// it lets the next kernel start at once.
// Where head_keys is set (the step's first x_parts_bf16), it also zeroes
// lm_head_wg_bf16's keys [8] for the step's LM head.
extern "C" __global__ void x_parts_bf16(const float *x, int ldx, const float *__restrict__ normw,
                                        float eps, int B, int K, bf16 *__restrict__ parts,
                                        unsigned long long *__restrict__ head_keys) {
    pdl_release();
    pdl_wait();
    const int b = blockIdx.x;
    if (head_keys && b == 0 && threadIdx.x < 8) head_keys[threadIdx.x] = 0;
    const float *row = x + (size_t)b * ldx;
    float scale = 1.f;
    if (normw && b < B) {
        float ss = 0.f;
        for (int k = threadIdx.x; k < K; k += blockDim.x) ss += row[k] * row[k];
        scale = rsqrtf(block_sum(ss) / K + eps);
    }
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        store_parts(parts, K, b, k, b < B ? row[k] * scale * (normw ? normw[k] : 1.f) : 0.f);
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

// gw_row and gw_seq are the output row (of the block's 64) and the
// sequence of a consumer thread's result h (0-3): wgmma's D fragment puts
// d[4 i + h] at row 16 w + lane / 4 (+ 8 for h >= 2) and column 8 i + 2
// (lane % 4) + h % 2, that is part i of sequence 2 (lane % 4) + h % 2.
__device__ __forceinline__ int gw_row(int h) { return 16 * (threadIdx.x / 32) + threadIdx.x % 32 / 4 + (h >= 2 ? 8 : 0); }
__device__ __forceinline__ int gw_seq(int h) { return 2 * (threadIdx.x % 4) + h % 2; }

// wg_mma_cols runs D (+)= A · Bᵀ for a 64 x COLS x 16 step of a warpgroup
// (wg_mma24 for the decode GEMV's parts, hopper.cuh's wg_mma for the rest).
template <int COLS>
__device__ __forceinline__ void wg_mma_cols(float (&d)[COLS / 2], unsigned long long da, unsigned long long db,
                                            int scale) {
    if constexpr (COLS == 24)
        wg_mma24(d, da, db, scale);
    else
        wg_mma(bf16{}, d, da, db, scale);
}

// wg_ring runs the ring for the block's 64 rows n0 = 64 blockIdx.x of W
// against COLS rows of x (both K-major bf16, 64 x 64 and COLS x 64 boxes
// through wmap and xmap): the producer thread copies the first GW_STAGES
// stages' weights before it waits for the previous kernel (pdl_wait;
// weights are read-only), then their x boxes, then the rest. The
// consumers call pre() (which loads what the body reads: the weights'
// part before its pdl_wait, the activations' after) and leave d with
// sum_k W[n, k] x[c, k] over the block's steps of K, in wgmma's D
// fragment: d[4 i + h] at row gw_row(h) and column 8 i + 2 (lane % 4) +
// h % 2.
//
// Split along k (gridDim.y = parts > 1), block (x, p) takes only steps
// [S p / parts, S (p + 1) / parts) of the S = ceil(K / 64) (wg_split adds
// the parts).
//
// It traps where the block is not GW_THREADS or where the caller says its
// arguments cannot run (bad), and returns false in the producer's warp,
// whose d is not set.
template <int COLS, class Pre>
__device__ __forceinline__ bool wg_ring(const tensor_map *wmap, const tensor_map *xmap, int K, float (&d)[COLS / 2],
                                        bool bad, Pre pre) {
    constexpr int stage_bytes = gw_stage_bytes(COLS);
    extern __shared__ __align__(1024) unsigned char gw_smem[];
    const unsigned base = (shared_addr(gw_smem) + 1023) & ~1023u;
    const unsigned bars = base + GW_STAGES * stage_bytes;  // full[s] at bars + 8 s, empty[s] after them
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (GW_STAGES + s); };
    auto sW = [&](int s) { return base + s * stage_bytes; };
    auto sX = [&](int s) { return base + s * stage_bytes + GW_W_BYTES; };
    const int all = (K + GW_BK - 1) / GW_BK, parts = gridDim.y, p = blockIdx.y, n0 = blockIdx.x * GW_ROWS;
    const int kbeg = all * p / parts, steps = all * (p + 1) / parts - kbeg;  // in steps of GW_BK
    if (bad || blockDim.x != GW_THREADS) __trap();
    pdl_release();
    if (threadIdx.x == 0) {
        for (int s = 0; s < GW_STAGES; s++) mbar_init(full(s), 1), mbar_init(empty(s), 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x >= 128) {  // the producer's warp; one thread copies
        if (threadIdx.x == 128) {
            const int first = min(steps, GW_STAGES);
            for (int k = 0; k < first; k++) {
                mbar_expect_tx(full(k), GW_W_BYTES + gw_x_bytes(COLS));
                tma_load(sW(k), wmap, full(k), (kbeg + k) * GW_BK, n0);
            }
            pdl_wait();
            for (int k = 0; k < first; k++) tma_load(sX(k), xmap, full(k), (kbeg + k) * GW_BK, 0);
            for (int k = first; k < steps; k++) {
                const int s = k % GW_STAGES;
                mbar_wait(empty(s), (k / GW_STAGES - 1) & 1);
                mbar_expect_tx(full(s), GW_W_BYTES + gw_x_bytes(COLS));
                tma_load(sW(s), wmap, full(s), (kbeg + k) * GW_BK, n0);
                tma_load(sX(s), xmap, full(s), (kbeg + k) * GW_BK, 0);
            }
        }
        return false;
    }
    pre();
#pragma unroll
    for (int i = 0; i < COLS / 2; i++) d[i] = 0.f;
    const bool lead = threadIdx.x == 0;
    for (int k = 0; k < steps; k++) {
        const int s = k % GW_STAGES;
        mbar_wait(full(s), (k / GW_STAGES) & 1);
        wg_fence();
#pragma unroll
        for (int j = 0; j < GW_BK / 16; j++)  // 16 elements of K (32 bytes) a product, inside the swizzled row
            wg_mma_cols<COLS>(d, wg_desc(sW(s) + 32 * j), wg_desc(sX(s) + 32 * j), k > 0 || j > 0);
        wg_commit();
        wg_wait1();  // the step before's products are done: its stage goes back
        if (k > 0 && lead) mbar_arrive(empty((k - 1) % GW_STAGES));
    }
    wg_wait0();
    return true;
}

// wg_split adds a tile's parts split along k (gridDim.y = parts > 1): each
// block stores its consumer thread's V sums v (V a multiple of 4) in
// scratch [gridDim.x][parts][V / 4][128] float4 (16-byte aligned) and
// counts in at count[blockIdx.x] (zero between launches), and the last of
// a tile's blocks to count in sums the parts in order 0 .. parts - 1 into
// v (the same bits whichever is last) and resets the counter. It returns
// whether this block is that last one (true where parts is 1). The 128
// consumer threads only.
//
// A part's loads go out together, as float4 (the fences order them after
// the other blocks' stores: plain loads, which ptxas issues at once where
// __ldcg's went four at a time).
template <int V>
__device__ __forceinline__ bool wg_split(float (&v)[V], float *scratch, unsigned *count) {
    static_assert(V % 4 == 0, "wg_split moves float4s");
    const int parts = gridDim.y, p = blockIdx.y;
    if (parts < 2) return true;
    __shared__ unsigned last;
    const int t = threadIdx.x;
    float4 *tile = reinterpret_cast<float4 *>(scratch) + (size_t)blockIdx.x * parts * (32 * V);
    float4 *mine = tile + (size_t)p * (32 * V);
#pragma unroll
    for (int q = 0; q < V / 4; q++) mine[128 * q + t] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
    __threadfence();  // the part before the count
    bar_sync_named(1, 128);
    if (t == 0) last = atomicAdd(count + blockIdx.x, 1u) == (unsigned)parts - 1;
    bar_sync_named(1, 128);
    if (!last) return false;
    __threadfence();  // every part counted in before this is seen
#pragma unroll
    for (int h = 0; h < V; h++) v[h] = 0.f;
    for (int j = 0; j < parts; j++) {
        const float4 *part = tile + (size_t)j * (32 * V);
        float4 got[V / 4];
#pragma unroll
        for (int q = 0; q < V / 4; q++) got[q] = part[128 * q + t];
#pragma unroll
        for (int q = 0; q < V / 4; q++)
            v[4 * q] += got[q].x, v[4 * q + 1] += got[q].y, v[4 * q + 2] += got[q].z, v[4 * q + 3] += got[q].w;
    }
    if (t == 0) count[blockIdx.x] = 0;  // for the next launch
    return true;
}

// gemv_wg runs wg_ring for the decode GEMV: x as 24 rows of parts (part p
// of sequence b at row 8 p + b), each sequence's three parts' sums added
// as (hi + mid) + lo, the parts along k added by wg_split, and body(h, n,
// b, v) for each of a consumer thread's four results h of row n < rows
// and sequence b < B: v = sum_k W[n, k] x[b, k].
//
// It returns whether this thread ran the body: false in the producer's
// warp and in the blocks of a split tile other than the last.
template <class Pre, class Body>
__device__ __forceinline__ bool gemv_wg(const tensor_map *wmap, const tensor_map *xmap, int B, int K, int rows,
                                        float *scratch, unsigned *count, Pre pre, Body body) {
    float d[12];
    if (!wg_ring<24>(wmap, xmap, K, d, B > 8, pre)) return false;
    float v[4];
#pragma unroll
    for (int h = 0; h < 4; h++) v[h] = (d[h] + d[4 + h]) + d[8 + h];
    if (!wg_split(v, scratch, count)) return false;
    const int n0 = blockIdx.x * GW_ROWS;
#pragma unroll
    for (int h = 0; h < 4; h++) {
        const int n = n0 + gw_row(h), b = gw_seq(h);
        if (n < rows && b < B) body(h, n, b, v[h]);
    }
    return true;
}

// wg_norm_scale sets scale[j] to the RMSNorm's scale of the thread's
// sequence gw_seq(j), rsqrt(sum / K + eps), from the sums of squares that
// the GEMV before wrote a tile at a time (ss [tiles][8]); 1 where ss is
// nullptr. The 128 consumer threads share the loads (thread t those of
// sequence t % 8 at flat index t, t + 128, ...: one round trip, not one a
// tile) and add them in a fixed order, the same bits in every block. After
// the wait for the previous kernel.
__device__ __forceinline__ void wg_norm_scale(const float *ss, int tiles, int K, float eps,
                                              float (&scale)[2]) {
    if (!ss) {
        scale[0] = scale[1] = 1.f;
        return;
    }
    __shared__ float red[4][8];
    const int t = threadIdx.x, w = t / 32, lane = t % 32;
    float sum = 0.f;
#pragma unroll 4
    for (int i = t; i < 8 * tiles; i += 128) sum += __ldcg(ss + i);
    sum += __shfl_xor_sync(0xffffffffu, sum, 8);  // the lanes of sequence lane % 8
    sum += __shfl_xor_sync(0xffffffffu, sum, 16);
    if (lane < 8) red[w][lane] = sum;
    bar_sync_named(1, 128);
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int b = gw_seq(j);
        scale[j] = rsqrtf((((red[0][b] + red[1][b]) + red[2][b]) + red[3][b]) / K + eps);
    }
}

// wg_store_ss writes the block's sums of squares, ss[8 blockIdx.x + b] for
// b < 8, from each consumer thread's q[j] (its rows' squares of sequence
// gw_seq(j)): over the lanes of a warp that share a sequence, then over the
// four warps in order.
__device__ __forceinline__ void wg_store_ss(float (&q)[2], float *__restrict__ ss) {
    __shared__ float red[4][8];
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) q[j] += __shfl_xor_sync(0xffffffffu, q[j], o);
    if (lane < 4) red[w][2 * lane] = q[0], red[w][2 * lane + 1] = q[1];
    bar_sync_named(1, 128);
    if (threadIdx.x < 8)
        ss[8 * blockIdx.x + threadIdx.x] =
            ((red[0][threadIdx.x] + red[1][threadIdx.x]) + red[2][threadIdx.x]) + red[3][threadIdx.x];
}
#endif

// gemv_wg_bf16: out[b, n] (+)= scale[b] sum_k W[n, k] x[b, k] + bias[n] for
// n < rows and b < B <= 8, W rows x K bf16 through wmap (64 x 64 boxes) and
// x as parts (x_parts_bf16, the scan step's, or the GEMV before's next
// parts) through xmap (24 x 64 boxes); bias may be nullptr; accumulate
// adds to out. scale is the RMSNorm's from ss (wg_norm_scale: ss_tiles
// tiles of sums of squares of x's K, eps), or 1 where ss is nullptr. Where
// next_parts is set, the sums also go on as the next GEMV's x: out[b, n] *
// next_normw[n] (1 where it is nullptr) as parts into next_parts (rows of
// rows), and the block's
// sums of out[b, n]^2 into next_ss [gridDim.x][8], for the next GEMV's
// norm (the norm folded across the launch: no x_parts_bf16 between).
// Grid (ceil(rows / 64), parts): with parts > 1 split along k through
// scratch and count (gemv_wg), which may be nullptr otherwise. Block
// GW_THREADS, dynamic shared memory gemv_wg_shared().
extern "C" __global__ void __launch_bounds__(GW_THREADS)
    gemv_wg_bf16(const __grid_constant__ tensor_map wmap, const __grid_constant__ tensor_map xmap,
                 const float *__restrict__ bias, float *out, int ldo, int accumulate, int B, int K, int rows,
                 float *scratch, unsigned *count, const float *ss, int ss_tiles, float eps,
                 const float *__restrict__ next_normw, bf16 *__restrict__ next_parts, float *__restrict__ next_ss) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // The bias and next norm weight of the thread's two rows, out at its
    // four results, the scale of its two sequences, and its squares.
    float pb[2], pn[2], po[4], scale[2], q[2] = {0.f, 0.f};
    auto pre = [&]() {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int n = blockIdx.x * GW_ROWS + gw_row(2 * r);
            pb[r] = bias && n < rows ? bias[n] : 0.f;
            pn[r] = !next_parts || n >= rows ? 0.f : next_normw ? next_normw[n] : 1.f;
        }
        pdl_wait();
        wg_norm_scale(ss, ss_tiles, K, eps, scale);
#pragma unroll
        for (int h = 0; h < 4; h++) {
            const int n = blockIdx.x * GW_ROWS + gw_row(h), b = gw_seq(h);
            po[h] = accumulate && n < rows && b < B ? out[(size_t)b * ldo + n] : 0.f;
        }
    };
    const bool ran = gemv_wg(&wmap, &xmap, B, K, rows, scratch, count, pre, [&](int h, int n, int b, float v) {
        v = scale[h % 2] * v + pb[h / 2];
        const float o = accumulate ? po[h] + v : v;
        out[(size_t)b * ldo + n] = o;
        if (next_parts) {
            store_parts(next_parts, rows, b, n, o * pn[h / 2]);
            q[h % 2] += o * o;
        }
    });
    if (ran && next_parts) wg_store_ss(q, next_ss);
#else
    __trap();
#endif
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// head_key packs logit v of id n into a key whose unsigned order is
// argmax_rows_f32's choice: a larger value beats a smaller one, among equal
// values the lower id wins (the id's complement in the low half; -0 counts
// as +0), and NaN (all ones) beats every number. A row's largest key is
// its pick, or says it holds NaN. Every key is above 0, the keys' rest.
__device__ __forceinline__ unsigned long long head_key(float v, int n) {
    if (v != v) return ~0ull;
    unsigned u = __float_as_uint(v == 0.f ? 0.f : v);
    u = u & 0x80000000u ? ~u : u | 0x80000000u;  // the floats' order as unsigned
    return (unsigned long long)u << 32 | (0xffffffffu - (unsigned)n);
}

// head_max is the larger of two keys.
__device__ __forceinline__ unsigned long long head_max(unsigned long long a, unsigned long long b) {
    return a > b ? a : b;
}
#endif

// lm_head_wg_bf16 is gemv_wg_bf16 for the LM head (no bias, no
// accumulating, no next parts, never split along k: grid ceil(rows / 64),
// block GW_THREADS, dynamic shared memory gemv_wg_shared()) that also ranks
// each sequence's logits for its greedy pick: keys[b] ends as the largest
// head_key of out[b, 0 .. rows), which head_picks_i64 (pool.cu) turns into
// the id argmax_rows_f32 would pick (the lowest among equal values, -1 for
// a row with NaN). keys [8] must be 0 before the launch (x_parts_bf16's
// head_keys). Each block takes its best key of each sequence there by
// atomicMax, where it beats the key already there: no block waits on
// another, and most of them find theirs beaten.
extern "C" __global__ void __launch_bounds__(GW_THREADS)
    lm_head_wg_bf16(const __grid_constant__ tensor_map wmap, const __grid_constant__ tensor_map xmap, float *out,
                    int ldo, int B, int K, int rows, const float *ss, int ss_tiles, float eps,
                    unsigned long long *keys) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    float scale[2];
    unsigned long long best[2] = {0ull, 0ull};  // of the thread's two sequences, gw_seq(0) and gw_seq(1)
    auto pre = [&]() {
        pdl_wait();
        wg_norm_scale(ss, ss_tiles, K, eps, scale);
    };
    const bool ran = gemv_wg(&wmap, &xmap, B, K, rows, nullptr, nullptr, pre, [&](int h, int n, int b, float v) {
        v = scale[h % 2] * v;
        out[(size_t)b * ldo + n] = v;
        best[h % 2] = head_max(best[h % 2], head_key(v, n));
    });
    if (!ran) return;
    // The block's best of each sequence: over the lanes that share it (as
    // wg_store_ss adds), then over the four warps.
    __shared__ unsigned long long red[4][8];
    const int t = threadIdx.x, w = t / 32, lane = t % 32;
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) best[j] = head_max(best[j], __shfl_xor_sync(0xffffffffu, best[j], o));
    if (lane < 4) red[w][2 * lane] = best[0], red[w][2 * lane + 1] = best[1];
    bar_sync_named(1, 128);
    if (t < B) {
        const unsigned long long k = head_max(head_max(red[0][t], red[1][t]), head_max(red[2][t], red[3][t]));
        // Keys only grow during the launch, so one at or above k now beats
        // k at the end too (a load through L2: L1 may hold an older one).
        if (k > __ldcg(keys + t)) atomicMax(keys + t, k);
    }
#else
    __trap();
#endif
}

// GW_TAPS is the longest conv step_in_wg_bf16 takes (Mamba's is 4).
#define GW_TAPS 4

// step_in_wg_bf16 is step.cu's step_in on gemv_wg: xz[b, n] for the 2E rows
// of in_proj (W 2E x d through wmap) applied to x (rmsnorm(h) * normw as
// x_parts_bf16 writes it, through xmap; or h * normw as out_proj's next
// parts, scaled after the products by ss's norm as gemv_wg_bf16 scales),
// plus in_bias (may be nullptr); for
// a channel n < E, then the conv step of the window win [B, E, taps]
// (weights conv_w [E, taps], bias conv_b, may be nullptr; taps <=
// GW_TAPS) and silu, as step_in does them, in its order. Grid ceil(2E /
// 64) (never split along k), block GW_THREADS, dynamic shared memory
// gemv_wg_shared().
extern "C" __global__ void __launch_bounds__(GW_THREADS)
    step_in_wg_bf16(const __grid_constant__ tensor_map wmap, const __grid_constant__ tensor_map xmap,
                    const float *__restrict__ in_bias, const float *__restrict__ conv_w,
                    const float *__restrict__ conv_b, float *__restrict__ win, float *__restrict__ xz, int B, int d,
                    int E, int taps, const float *ss, int ss_tiles, float eps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if (taps > GW_TAPS) __trap();
    // The thread's two rows' biases and taps, then its four results' windows.
    float ib[2], cb[2], cw[2][GW_TAPS], wd[4][GW_TAPS], scale[2];
    auto pre = [&]() {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int n = blockIdx.x * GW_ROWS + gw_row(2 * r);
            const bool conv = n < E;
            ib[r] = in_bias && n < 2 * E ? in_bias[n] : 0.f;
            cb[r] = conv_b && conv ? conv_b[n] : 0.f;
#pragma unroll
            for (int k = 0; k < GW_TAPS; k++) cw[r][k] = conv && k < taps ? conv_w[(size_t)n * taps + k] : 0.f;
        }
        pdl_wait();
        wg_norm_scale(ss, ss_tiles, d, eps, scale);
#pragma unroll
        for (int h = 0; h < 4; h++) {
            const int n = blockIdx.x * GW_ROWS + gw_row(h), b = gw_seq(h);
            const bool conv = n < E && b < B;
#pragma unroll
            for (int k = 0; k < GW_TAPS; k++) wd[h][k] = conv && k < taps ? win[((size_t)b * E + n) * taps + k] : 0.f;
        }
    };
    gemv_wg(&wmap, &xmap, B, d, 2 * E, nullptr, nullptr, pre, [&](int h, int n, int b, float v) {
        v = scale[h % 2] * v + ib[h / 2];
        float *row = xz + (size_t)b * 2 * E;
        if (n >= E) {
            row[n] = v;  // z
            return;
        }
        float *wnd = win + ((size_t)b * E + n) * taps, sum = cb[h / 2];
#pragma unroll
        for (int k = 0; k < GW_TAPS; k++) {
            if (k < taps) {
                float in = k + 1 < taps ? wd[h][k + 1 < GW_TAPS ? k + 1 : 0] : v;
                sum += cw[h / 2][k] * in;
                wnd[k] = in;
            }
        }
        row[n] = sum / (1.f + __expf(-sum));  // silu, as conv.cu computes it
    });
#else
    __trap();
#endif
}

// GS_COLS is the most rows of a prompt gemm_skinny takes: the columns of
// one wgmma m64n128k16.
#define GS_COLS 128
// GS_LD is the row stride, in floats, of the epilogue's tile in shared
// memory: 64 rows of the weights and 4 more, so that the fragment's
// stores fall on 32 banks and a row's float4s stay 16-byte aligned.
#define GS_LD (GW_ROWS + 4)

// gemm_skinny_bf16_f32 runs a prefill GEMM of a prompt short enough that
// its weights, each read once, set its time (in_proj and out_proj at T =
// 128, where cuBLAS reads them at 1.6-2.8 TB/s: bench/results/
// 2026-12-03-shortprompts.md): out[t, n] (+)= sum_k W[n, k] x[t, k] +
// bias[n] for n < rows and t < T <= GS_COLS, in f32, on wg_ring with the
// weights as the products' rows and the prompt's rows as their columns. W
// (rows x K bf16) comes through wmap in 64 x 64 boxes, x (T x K bf16)
// through xmap in GS_COLS x 64 boxes, whose rows past T read as zeros.
// bias may be nullptr; accumulate adds out's values (row stride ldo).
// Grid (ceil(rows / 64), parts): with parts > 1 split along k through
// scratch [gridDim.x][parts][GS_COLS / 2][128] f32 and count (wg_split),
// which may be nullptr otherwise. Block GW_THREADS, dynamic shared memory
// gemv_wg_shared(GS_COLS).
extern "C" __global__ void __launch_bounds__(GW_THREADS)
    gemm_skinny_bf16_f32(const __grid_constant__ tensor_map wmap, const __grid_constant__ tensor_map xmap,
                         const float *__restrict__ bias, float *out, int ldo, int accumulate, int T, int K, int rows,
                         float *scratch, unsigned *count) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const int n0 = blockIdx.x * GW_ROWS;
    float pb[2];  // the bias of the thread's two rows
    auto pre = [&]() {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int n = n0 + gw_row(2 * r);
            pb[r] = bias && n < rows ? bias[n] : 0.f;
        }
        pdl_wait();
    };
    float d[GS_COLS / 2];
    if (!wg_ring<GS_COLS>(&wmap, &xmap, K, d, T > GS_COLS, pre)) return;
    if (!wg_split(d, scratch, count)) return;
    // The tile goes out through shared memory (the ring's, every stage
    // consumed), turned from wgmma's fragment to rows of the prompt: each
    // thread then moves 16 float4 of out, a warp 256 contiguous bytes of
    // each of two rows a move. Where it accumulates, all 16 loads go out
    // before the first add (from out itself where the float4 lies outside:
    // a load whose address depends on no branch).
    bar_sync_named(1, 128);  // every warp's products are out of the ring
    extern __shared__ __align__(1024) unsigned char gw_smem[];
    float *tile = reinterpret_cast<float *>(gw_smem);  // [GS_COLS][GS_LD]
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < GS_COLS / 8; i++)
#pragma unroll
        for (int h = 0; h < 4; h++)
            tile[(8 * i + 2 * (lane % 4) + h % 2) * GS_LD + gw_row(h)] = d[4 * i + h] + pb[h / 2];
    bar_sync_named(1, 128);
    constexpr int moves = GS_COLS * GW_ROWS / 4 / 128;
    const bool vec = rows % 4 == 0 && ldo % 4 == 0 && (reinterpret_cast<size_t>(out) & 15) == 0;
    auto place = [&](int q, int &t, int &c) {  // move q: prompt row t, columns 4 c .. 4 c + 3 of the tile
        const int e = 128 * q + threadIdx.x;
        t = e / (GW_ROWS / 4), c = e % (GW_ROWS / 4);
    };
    float4 prev[moves];
#pragma unroll
    for (int q = 0; q < moves; q++) {
        int t, c;
        place(q, t, c);
        const int n = n0 + 4 * c;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (accumulate && vec) {
            const float *src = t < T && n < rows ? out + (size_t)t * ldo + n : out;
            v = *reinterpret_cast<const float4 *>(src);
        } else if (accumulate && t < T) {  // widths that are not a multiple of 4 (tests)
            const float *src = out + (size_t)t * ldo + n;
            v = make_float4(n < rows ? src[0] : 0.f, n + 1 < rows ? src[1] : 0.f, n + 2 < rows ? src[2] : 0.f,
                            n + 3 < rows ? src[3] : 0.f);
        }
        prev[q] = v;
    }
#pragma unroll
    for (int q = 0; q < moves; q++) {
        int t, c;
        place(q, t, c);
        const int n = n0 + 4 * c;
        if (t >= T || n >= rows) continue;
        const float4 r = *reinterpret_cast<const float4 *>(tile + t * GS_LD + 4 * c);
        const float4 v = make_float4(r.x + prev[q].x, r.y + prev[q].y, r.z + prev[q].z, r.w + prev[q].w);
        float *dst = out + (size_t)t * ldo + n;
        if (vec) {
            *reinterpret_cast<float4 *>(dst) = v;
        } else {
            const float vs[4] = {v.x, v.y, v.z, v.w};
            for (int e = 0; e < 4 && n + e < rows; e++) dst[e] = vs[e];
        }
    }
#else
    __trap();
#endif
}
