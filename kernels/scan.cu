// Selective scan with softplus(delta + dt_bias), the D skip and the silu(z)
// gate fused in, continuing from and writing back the carried SSM state.
//
//   dt_t = softplus(delta[b,t,c] + dt_bias[c])                     (PyTorch threshold 20)
//   s_t[n] = exp(dt_t * A[c,n]) * s_{t-1}[n] + dt_t * B[b,t,n] * u[b,t,c]
//   y[b,t,c] = (sum_n s_t[n] * C[b,t,n] + D[c] * u[b,t,c]) * silu(z[b,t,c])
//
// delta, u, y [B, T, E]; B and C are columns of x_proj's output dbl
// [B, T, R + 2N] (row stride ldd, B at column R, C at R + N); z is the second
// half of in_proj's output (row stride ldz); A [E, N] holds A * log2(e), so
// exp is exp2; state [B, E, N] f32.
//
// This first version runs the recurrence sequentially over t: one thread per
// (b, c, n), N threads of a warp per channel (N <= 32 per warp group; larger
// N splits a channel over several warps and reduces through shared memory).
// Grid (E / channels_per_block, B), block = channels_per_block * N threads.

__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(__expf(x)); }

extern "C" __global__ void scan_seq_f32(const float *__restrict__ delta, const float *__restrict__ dt_bias,
                                        const float *__restrict__ A2, const float *__restrict__ dbl, int ldd, int R,
                                        const float *__restrict__ u, const float *__restrict__ Dskip,
                                        const float *__restrict__ z, int ldz, float *__restrict__ state,
                                        float *__restrict__ y, int T, int E, int N) {
    extern __shared__ float partial[];  // [channels_per_block][ceil(N/32)]
    int per = (N + 31) / 32 * 32;       // threads per channel, rounded to whole warps
    int local = threadIdx.x / per, n = threadIdx.x % per;
    int c = blockIdx.x * (blockDim.x / per) + local, b = blockIdx.y;
    bool active = c < E && n < N;
    float a = 0.f, s = 0.f;
    size_t si = ((size_t)b * E + c) * N + n;
    if (active) a = A2[(size_t)c * N + n], s = state[si];
    int warps = per / 32;
    for (int t = 0; t < T; t++) {
        size_t r = (size_t)b * T + t;
        float contrib = 0.f, uu = 0.f, dt = 0.f;
        if (active) {
            dt = softplus_f(delta[r * E + c] + dt_bias[c]);
            uu = u[r * E + c];
            s = exp2f(dt * a) * s + dt * dbl[r * ldd + R + n] * uu;
            contrib = s * dbl[r * ldd + R + N + n];
        }
        for (int o = 16; o > 0; o >>= 1) contrib += __shfl_xor_sync(0xffffffffu, contrib, o);
        if (warps > 1) {
            if ((n & 31) == 0) partial[local * warps + n / 32] = contrib;
            __syncthreads();
            contrib = 0.f;
            for (int w = 0; w < warps; w++) contrib += partial[local * warps + w];
            __syncthreads();
        }
        if (active && n == 0) {
            float zz = z[r * ldz + c];
            y[r * E + c] = (contrib + Dskip[c] * uu) * (zz / (1.f + __expf(-zz)));
        }
    }
    if (active) state[si] = s;
}
