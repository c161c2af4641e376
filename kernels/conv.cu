// Causal depthwise conv1d with fused SiLU, continuing from the carried window.
//
//   u[b, t, c] = silu(bias[c] + sum_k w[c, k] * x[b, t - K + 1 + k, c])
//
// x is the xs half of in_proj's output: row (b, t) starts at xz + (b*T + t)*ldx.
// Positions before t = 0 come from the window win [B, E, K] (the last K inputs,
// newest last, as Hugging Face keeps it). u [B, T, E]; w [E, K]; bias [E] or
// nullptr; K <= 8.
//
// conv_silu_f32 computes every (b, t, c) in parallel: grid (ceil(E / blockDim.x),
// min(T, 65535), B), one thread per channel (a warp reads 32 consecutive
// channels of a row), striding over t.
// conv_window_f32 then replaces each window with the last K inputs of
// concat(window, x): grid (ceil(E / blockDim.x), B). They are two launches
// because the first reads the windows the second overwrites.

extern "C" __global__ void conv_silu_f32(const float *__restrict__ xz, int ldx, const float *__restrict__ win,
                                         const float *__restrict__ w, const float *__restrict__ bias,
                                         float *__restrict__ u, int T, int E, int K) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.z;
    if (c >= E) return;
    const float *state = win + ((size_t)b * E + c) * K;
    for (int t = blockIdx.y; t < T; t += gridDim.y) {
        float acc = bias ? bias[c] : 0.f;
        for (int k = 0; k < K; k++) {
            int tt = t - (K - 1) + k;  // input position; before 0 it is in the window
            float x = tt >= 0 ? xz[((size_t)b * T + tt) * ldx + c] : state[K + tt];
            acc += w[(size_t)c * K + k] * x;
        }
        u[((size_t)b * T + t) * E + c] = acc / (1.f + __expf(-acc));
    }
}

#define MAX_K 8

extern "C" __global__ void conv_window_f32(const float *__restrict__ xz, int ldx, float *__restrict__ win, int T,
                                           int E, int K) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
    if (c >= E) return;
    float *state = win + ((size_t)b * E + c) * K;
    float next[MAX_K];
    for (int k = 0; k < K; k++) {  // slot k holds element T + k of concat(window, x)
        int tt = T - K + k;
        next[k] = tt >= 0 ? xz[((size_t)b * T + tt) * ldx + c] : state[T + k];
    }
    for (int k = 0; k < K; k++) state[k] = next[k];
}
