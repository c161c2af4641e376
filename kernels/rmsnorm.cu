// RMSNorm of each row, as Hugging Face's MambaRMSNorm computes it in f32:
//
//   y[r, i] = x[r, i] * rsqrt(mean_i(x[r, :]^2) + eps) * w[i]      (w == nullptr: no weight)
//
// x [rows, d] f32 (the residual stream), w [d] f32, y [rows, d] of the entry's
// storage type (rmsnorm_f32 may write over x). Grid (rows), block a multiple
// of 32 threads (<= 1024); each block reduces its row's sum of squares
// through warp shuffles and one shared-memory pass.

__device__ float block_sum(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    int warps = (blockDim.x + 31) >> 5;
    v = threadIdx.x < warps ? part[threadIdx.x] : 0.f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) part[0] = v;
    __syncthreads();
    float total = part[0];
    __syncthreads();  // part is reused by the next call
    return total;
}

template <class T>
__device__ void rmsnorm(const float *x, const float *__restrict__ w, T *y, int d, float eps) {
    const float *row = x + (size_t)blockIdx.x * d;
    T *out = y + (size_t)blockIdx.x * d;
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss += row[i] * row[i];
    float scale = rsqrtf(block_sum(ss) / d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = row[i] * scale;
        out[i] = from_f32<T>(w ? w[i] * v : v);
    }
}

#define RMSNORM(sfx, T)                                                                                   \
    extern "C" __global__ void rmsnorm_##sfx(const float *x, const float *__restrict__ w, T *y, int d, float eps) { \
        rmsnorm<T>(x, w, y, d, eps);                                                                      \
    }
EACH_DTYPE(RMSNORM)

// FalconMamba's weightless RMSNorm on the dt, B and C parts of each row of
// x_proj's output dbl [rows, R + 2N] f32: each part is scaled by
// rsqrt(mean(part^2) + eps) on its own. Grid (rows), block a multiple of 32.
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
