// RMSNorm of each row, as Hugging Face's MambaRMSNorm computes it in f32:
//
//   y[r, i] = x[r, i] * rsqrt(mean_i(x[r, :]^2) + eps) * w[i]      (w == nullptr: no weight)
//
// x [rows, d] f32 (the residual stream), w [d] f32, y [rows, d] of the entry's
// storage type (rmsnorm_f32 may write over x); row r of x starts r * ldx
// elements in and row r of y r * ldy (both d for whole rows; ldx = n d and
// ldy = d for the last position of each of B sequences of n, written as B
// whole rows). A warp owns a row: grid (ceil(rows / (blockDim.x / 32))),
// blockDim.x a multiple of 32. A row with d, ldx and ldy multiples of 4 and
// d <= 128 * RMS_V is read once, as float4s kept in registers between the
// sum of squares and the scaling; other rows are read twice.
// Rows read once take w from shared memory (rmsnorm below).
// (At the 130m shape, T = 2048, the stage timer gave a block a row with two
// barriers 8.8 us a layer and this kernel 7.5; ncu with warm caches gives
// this one 5.2 us, against 2.9 per 2048 rows at T = 8192.)
//
// Each entry also writes fill_words copies of the 32-bit fill_word from
// fill, after its wait for the kernel before it: a captured graph folds a
// library's memset of its scratch into the RMSNorm before the library's
// GEMM that way (cuda.MemsetEdit's Fold), so that the GEMM waits for one
// kernel instead of two. Launches pass fill_words = 0.

#define RMS_V 20  // float4s a lane keeps: rows of up to 2560 floats

// row_of is the row of x that row r reads: ids[r] clamped to [0, V) where
// ids is set (an embedding lookup; the host checks ids, and a bad one must
// still never read outside the table), else r.
__device__ __forceinline__ long long row_of(const long long *ids, int r, int V) {
    if (!ids) return r;
    long long id = ids[r];
    return id < 0 ? 0 : (id >= V ? V - 1 : id);
}

// fill_after_wait is the fill every entry does once it has waited: the
// grid's threads write fill_word to fill[0 .. n).
__device__ __forceinline__ void fill_after_wait(unsigned *fill, unsigned fill_word, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        fill[i] = fill_word;
}

// rmsnorm waits for the kernel before (pdl_wait) itself. Rows read once
// (d % 4 == 0 and d <= 128 RMS_V) copy w, a weight that no kernel in flight
// writes, into shared memory ahead of the wait (cp.async, so no thread
// waits for it there), and wait for it only after the row's sum of squares:
// its latency hides behind the wait and the row's loads. (Loaded after the
// sum from global memory, each piece of w waited for the store before it:
// L2's latency six times in a row at d = 768, about 2 us of a 130m
// RMSNorm's 4.6 in a prefill graph.)
//
// Row r is x's row r (S = float, ids null), or, where ids is set, row
// ids[r] of an embedding table x [V, d] of type S (ids clamped to [0, V),
// ldx = d), which is also written to the residual stream h [rows, d] f32:
// the embedding lookup and the first layer's RMSNorm in one pass.
template <class T, class S>
__device__ void rmsnorm(const S *x, const long long *ids, int V, float *h, const float *__restrict__ w, T *y,
                        int rows, int d, int ldx, int ldy, float eps, unsigned *fill, unsigned fill_word,
                        long long fill_words) {
    __shared__ __align__(16) float wsh[128 * RMS_V];
    const int r = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    const bool live = r < rows;  // the warp's row
    T *out = y + (size_t)r * ldy;
    float *hrow = h ? h + (size_t)r * d : nullptr;
    if (d % 4 != 0 || ldx % 4 != 0 || ldy % 4 != 0 || d > 128 * RMS_V) {
        pdl_wait();
        fill_after_wait(fill, fill_word, fill_words);
        if (!live) return;
        const S *row = x + (size_t)row_of(ids, r, V) * ldx;
        float ss = 0.f;
        for (int i = lane; i < d; i += 32) {
            float v = to_f32(row[i]);
            ss += v * v;
            if (hrow) hrow[i] = v;
        }
        float scale = rsqrtf(warp_sum(ss) / d + eps);
        for (int i = lane; i < d; i += 32) {
            float v = to_f32(row[i]) * scale;
            out[i] = from_f32<T>(w ? w[i] * v : v);
        }
        return;
    }
    if (w)
        for (int i = 4 * threadIdx.x; i < d; i += 4 * blockDim.x) cp_async_s<16>(shared_addr(wsh + i), w + i, true);
    cp_async_commit();
    pdl_wait();  // before ids too: a graph's input, written by the copy before it
    fill_after_wait(fill, fill_word, fill_words);
    const S *row = x + (size_t)(live ? row_of(ids, r, V) : 0) * ldx;
    float4 v[RMS_V];
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < RMS_V; j++) {
        int i = 4 * (lane + 32 * j);
        v[j] = live && i < d ? load4(row + i) : make_float4(0.f, 0.f, 0.f, 0.f);
        ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
    }
    float scale = rsqrtf(warp_sum(ss) / d + eps);
    cp_async_wait<0>();
    __syncthreads();
    if (!live) return;
#pragma unroll
    for (int j = 0; j < RMS_V; j++) {
        int i = 4 * (lane + 32 * j);
        if (i >= d) break;
        if (hrow) store4(hrow + i, v[j]);
        float4 s = w ? *reinterpret_cast<const float4 *>(wsh + i) : make_float4(1.f, 1.f, 1.f, 1.f);
        store4(out + i, make_float4(s.x * (v[j].x * scale), s.y * (v[j].y * scale), s.z * (v[j].z * scale),
                                    s.w * (v[j].w * scale)));
    }
}

// rmsnorm_<T>: x [rows, d] f32 (row stride ldx) normed into y.
// rmsnorm_embed_<T>: rows ids[r] of the embedding table E [V, d] (storage
// type T) written to h [rows, d] f32 and normed into y [rows, d].
// Both then fill (the opening comment): their last three arguments.
#define RMSNORM(sfx, T)                                                                                     \
    extern "C" __global__ void rmsnorm_##sfx(const float *x, const float *__restrict__ w, T *y, int rows, int d, \
                                             int ldx, int ldy, float eps, unsigned *fill, unsigned fill_word, \
                                             long long fill_words) {                                        \
        rmsnorm<T, float>(x, nullptr, 0, nullptr, w, y, rows, d, ldx, ldy, eps, fill, fill_word, fill_words); \
        pdl_release();                                                                                      \
    }                                                                                                       \
    extern "C" __global__ void rmsnorm_embed_##sfx(const long long *ids, const T *__restrict__ E, int V,      \
                                                   float *h, const float *__restrict__ w, T *y, int rows,   \
                                                   int d, float eps, unsigned *fill, unsigned fill_word,    \
                                                   long long fill_words) {                                  \
        rmsnorm<T, T>(E, ids, V, h, w, y, rows, d, d, d, eps, fill, fill_word, fill_words);                 \
        pdl_release();                                                                                      \
    }
EACH_DTYPE(RMSNORM)

// FalconMamba's weightless RMSNorm on the dt, B and C parts of each row of
// x_proj's output dbl [rows, R + 2N] f32: each part is scaled by
// rsqrt(mean(part^2) + eps) on its own. Grid (rows), block a multiple of 32.
#if PLAIN_ENTRIES
extern "C" __global__ void rmsnorm_dbc_f32(float *dbl, int R, int N, float eps) {
    float *row = dbl + (size_t)blockIdx.x * (R + 2 * N);
    int start[3] = {0, R, R + N}, len[3] = {R, N, N};
    for (int p = 0; p < 3; p++) {
        float *v = row + start[p];
        float ss = 0.f;
        for (int i = threadIdx.x; i < len[p]; i += blockDim.x) ss += v[i] * v[i];
        float scale = rsqrtf(block_sum(ss) / len[p] + eps);
        for (int i = threadIdx.x; i < len[p]; i += blockDim.x) v[i] *= scale;
    }
}
#endif
