// Causal depthwise conv1d with fused SiLU, continuing from the carried window.
//
//   u[b, t, c] = silu(bias[c] + sum_k w[c, k] * x[b, t - K + 1 + k, c])
//
// x is the xs half of in_proj's output: row (b, t) starts at xz + (b*T + t)*ldx.
// Positions before t = 0 come from the window win [B, E, K] (the last K inputs,
// newest last, as Hugging Face keeps it), which is then replaced by the last K
// inputs of concat(win, x). u [B, T, E]; w [E, K]; bias [E] or nullptr.
// Grid (ceil(E / blockDim.x), B); one thread per channel walks t = 0..T-1 with
// its window in registers (K <= 8).

#define MAX_K 8

extern "C" __global__ void conv_silu_f32(const float *__restrict__ xz, int ldx, float *__restrict__ win,
                                         const float *__restrict__ w, const float *__restrict__ bias,
                                         float *__restrict__ u, int T, int E, int K) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
    if (c >= E) return;
    float wk[MAX_K], x[MAX_K];
    float *state = win + ((size_t)b * E + c) * K;
    for (int k = 0; k < K; k++) wk[k] = w[(size_t)c * K + k], x[k] = state[k];
    float b0 = bias ? bias[c] : 0.f;
    for (int t = 0; t < T; t++) {
        size_t r = (size_t)b * T + t;
        for (int k = 0; k < K - 1; k++) x[k] = x[k + 1];
        x[K - 1] = xz[r * ldx + c];
        float acc = b0;
        for (int k = 0; k < K; k++) acc += wk[k] * x[k];
        u[r * E + c] = acc / (1.f + __expf(-acc));
    }
    for (int k = 0; k < K; k++) state[k] = x[k];
}
