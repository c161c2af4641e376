// Causal depthwise conv1d with fused SiLU, continuing from the carried window.
//
//   u[b, t, c] = silu(bias[c] + sum_k w[c, k] * x[b, t - K + 1 + k, c])
//
// x is the xs half of in_proj's output: row (b, t) starts at xz + (b*T + t)*ldx.
// Positions before t = 0 come from the window win [B, E, K] f32 (the last K
// inputs, newest last, as Hugging Face keeps it). u [B, T, E] has the entry's
// storage type T (it feeds x_proj's GEMM); xz, w [E, K], bias [E] (or
// nullptr) and the arithmetic are f32. K <= 8.
//
// conv_silu_*: grid (ceil(E / blockDim.x), ceil(T / RUN), B). A thread
// computes RUN consecutive positions of one channel (a warp reads 32
// consecutive channels of a row), loading the run's inputs together and
// sliding the last MAX_K through registers, so each input is loaded once.
// Only the first run of each sequence reads the window, so its thread then
// replaces its channel's window with the last K inputs of concat(window,
// x): no other thread reads that window, and one launch does both (a
// separate window kernel took 2.2 us a layer at the 130m shape).
//
// Each block lets the next kernel launch (PDL) as soon as it starts: the
// only kernel that follows the conv with PDL is our x_proj (XProj), which
// reads nothing but its weight before it waits for the conv's end, so it
// fetches W while the conv runs. (Ahead of a cuBLAS node the trigger does
// nothing: that edge is a full one.)

#define MAX_K 8
#define RUN 16

// conv_silu computes with KK >= K taps (the weights right-aligned, zeros in
// front): conv_silu_* run KK = 4, Mamba's kernel size, when K <= 4, and
// MAX_K otherwise.
template <class T, int KK>
__device__ void conv_silu(const float *__restrict__ xz, int ldx, float *__restrict__ win,
                          const float *__restrict__ w, const float *__restrict__ bias, T *__restrict__ u, int T_,
                          int E, int K) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.z, t0 = blockIdx.y * RUN;
    if (c >= E) return;
    float *state = win + ((size_t)b * E + c) * K;
    // wp[j] weighs hist[j] = x[t - (KK - 1) + j]: the K weights, right-aligned.
    float wp[KK], hist[KK];
#pragma unroll
    for (int j = 0; j < KK; j++) {
        int k = j - (KK - K);
        wp[j] = k >= 0 ? w[(size_t)c * K + k] : 0.f;
        // hist starts one position back, as each step shifts first. Before
        // position 0 the inputs are in the window (slot K + tt), or weigh 0.
        int tt = t0 - KK + j;
        hist[j] = j == 0 ? 0.f : tt >= 0 ? xz[((size_t)b * T_ + tt) * ldx + c] : tt >= -K ? state[K + tt] : 0.f;
    }
    float b0 = bias ? bias[c] : 0.f;
    int n = min(RUN, T_ - t0);
    // Every input of the run is loaded before the first is used: with a
    // load per step, each step waited a full memory round trip (ptxas
    // issued the loads one iteration at a time), 17 us a layer at 130m.
    float in[RUN];
#pragma unroll
    for (int i = 0; i < RUN; i++) in[i] = i < n ? xz[((size_t)b * T_ + t0 + i) * ldx + c] : 0.f;
#pragma unroll
    for (int i = 0; i < RUN; i++) {
        if (i >= n) break;
        size_t r = (size_t)b * T_ + t0 + i;
#pragma unroll
        for (int j = 0; j < KK - 1; j++) hist[j] = hist[j + 1];
        hist[KK - 1] = in[i];
        float acc = b0;
#pragma unroll
        for (int j = 0; j < KK; j++) acc += wp[j] * hist[j];
        u[r * E + c] = from_f32<T>(silu_f(acc));
    }
    if (t0 == 0) {  // the window's only reader, done with it: slot k takes element T + k of concat(window, x)
        float next[MAX_K];
#pragma unroll
        for (int k = 0; k < MAX_K; k++) {
            int tt = T_ - K + k;
            next[k] = k >= K ? 0.f : tt >= 0 ? xz[((size_t)b * T_ + tt) * ldx + c] : state[T_ + k];
        }
#pragma unroll
        for (int k = 0; k < MAX_K; k++)
            if (k < K) state[k] = next[k];
    }
}

#define CONV(sfx, T)                                                                                            \
    extern "C" __global__ void conv_silu_##sfx(const float *__restrict__ xz, int ldx, float *__restrict__ win,       \
                                               const float *__restrict__ w, const float *__restrict__ bias,        \
                                               T *__restrict__ u, int T_, int E, int K) {                          \
        pdl_wait();                                                                                             \
        pdl_release();                                                                                          \
        if (K <= 4)                                                                                             \
            conv_silu<T, 4>(xz, ldx, win, w, bias, u, T_, E, K);                                                   \
        else                                                                                                    \
            conv_silu<T, MAX_K>(xz, ldx, win, w, bias, u, T_, E, K);                                               \
    }
EACH_DTYPE(CONV)

// pad_window_f32 carries a left-padded batch's windows (engine.Input.Pad)
// past the padding, before conv_silu runs on a chunk of n positions from t0.
// Sequence b's chunk opens with p = min(n, max(0, pad[b] - t0)) positions of
// padding; element p + k of concat(window, x) takes the window's slot k, so
// the conv reads the window right before the sequence's first token and
// leaves it in place when the whole chunk is padding. The padding's other
// inputs reach only the padding's own outputs. Grid (ceil(E / blockDim.x),
// B); xz, ldx, win, E and K as conv_silu's.
#if PLAIN_ENTRIES
extern "C" __global__ void pad_window_f32(float *__restrict__ xz, int ldx, float *__restrict__ win, int n, int E,
                                          int K, const int *__restrict__ pad, int t0) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
    int p = min(n, max(0, pad[b] - t0));
    if (c >= E || p == 0) return;
    float *state = win + ((size_t)b * E + c) * K;
    float old[MAX_K];
#pragma unroll
    for (int k = 0; k < MAX_K; k++) old[k] = k < K ? state[k] : 0.f;
#pragma unroll
    for (int k = 0; k < MAX_K; k++) {
        if (k >= K) break;
        int i = p + k - K;  // the chunk's position for element p + k (before it: the window)
        if (i < 0)
            state[p + k] = old[k];
        else
            xz[((size_t)b * n + i) * ldx + c] = old[k];
    }
}
#endif
