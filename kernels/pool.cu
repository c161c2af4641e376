// Pooling over the positions of a chunk of the normed hidden states.
//
//   mode 1 (sum):   out[b, i] (+)= sum_t h[b, t, i]      ('+=' when accumulate, for later chunks)
//   mode 2 (all):   out[b, t0 + t, i] = h[b, t, i]        (out holds [B, T, d], the chunk starts at t0)
//
// h [B, n, d] is one chunk of n positions. Mean is sum followed by scale_f32.
// (The last position, and every position of a prompt run as one chunk, need
// no pooling: the final RMSNorm writes them to out itself.)
// Grid (ceil(d / blockDim.x), B); each thread owns one column i and walks t,
// so a warp reads 32 consecutive floats of a row at each step.

extern "C" __global__ void pool_f32(const float *__restrict__ h, float *__restrict__ out, int n, int d, int mode,
                                    int accumulate, int T, int t0) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
    if (i >= d) return;
    const float *rows = h + (size_t)b * n * d + i;
    if (mode == 1) {
        double acc = accumulate ? out[(size_t)b * d + i] : 0.0;  // f64: T may reach the thousands
#pragma unroll 8
        for (int t = 0; t < n; t++) acc += rows[(size_t)t * d];
        out[(size_t)b * d + i] = (float)acc;
    } else {
#pragma unroll 8
        for (int t = 0; t < n; t++) out[((size_t)b * T + t0 + t) * d + i] = rows[(size_t)t * d];
    }
}
