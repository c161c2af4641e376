// Single-token decode: one position for each of B <= STEP_MAXB sequences,
// four launches a layer, with every activation in f32 and the weights in
// the entry's storage type T.
//
//   step_in_<T>:   x = rmsnorm(h) * norm_w, then in_proj: for channel c < E,
//                  the conv step (window shift, u = silu(bias + w·window)),
//                  writing u to xz[b, c]; for E <= c < 2E, z to xz[b, c].
//   gemv_<T>:      x_proj (dbl = u · W_xᵀ), and out_proj accumulated into
//                  the residual stream (h += y · W_outᵀ + bias); with a norm
//                  weight, the LM head (logits = rmsnorm(h) · W_headᵀ).
//   step_scan_f32: dt_proj, softplus, the state update, the D skip and the
//                  silu(z) gate, writing y [B, E].
//
// The math is that of the prefill kernels (rmsnorm.cu, conv.cu, scan.cu) at
// T = 1; only the GEMMs differ, as matrix-vector products read each weight
// once for all B sequences. Layouts: h [B, d] f32; xz [B, 2E] f32; the conv
// window [B, E, K] f32 and the SSM state [B, E, N] f32, as the prefill keeps
// them; weights row-major [out, in].
//
// gemv and step_in: grid (ceil(rows / (STEP_WARPS / S))), block
// 32 * STEP_WARPS, where S (split, a power of two up to STEP_WARPS) warps
// share an output row: warp j of a row's group takes every S-th 32·V-wide
// slice of k, so that a long row (x_proj and out_proj read rows of E) is a
// few dependent loads per warp rather than a chain of K / (32·V). Each lane
// keeps one sum per sequence, and, with a norm weight, the sum of x^2 over
// its slices; the group's warps together see all of k, so their sums give
// the norm's scale with no pass of its own, applied after the dot product:
// sum_k W[n, k] * (x[b, k] * scale[b] * normw[k]) =
// scale[b] * sum_k W[n, k] * x[b, k] * normw[k].

#define STEP_MAXB 8
#define STEP_WARPS 8
#define STEP_MAXK 8  // the longest conv kernel, as MAX_K in conv.cu

// unpack widens the 16 bytes at w (16-byte aligned) to floats.
__device__ __forceinline__ void unpack(const float *w, float *out) {
    float4 v = *reinterpret_cast<const float4 *>(w);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
}
__device__ __forceinline__ void unpack(const bf16 *w, float *out) {
    uint4 v = *reinterpret_cast<const uint4 *>(w);
    unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        out[2 * i] = __uint_as_float(words[i] << 16);
        out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void unpack(const f16 *w, float *out) {
    uint4 v = *reinterpret_cast<const uint4 *>(w);
    unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        out[2 * i] = to_f32(f16{(unsigned short)(words[i] & 0xffffu)});
        out[2 * i + 1] = to_f32(f16{(unsigned short)(words[i] >> 16)});
    }
}

// pick returns acc[i] for a run-time i < STEP_MAXB (acc stays in registers).
__device__ __forceinline__ float pick(const float acc[STEP_MAXB], int i) {
    float v = 0.f;
#pragma unroll
    for (int b = 0; b < STEP_MAXB; b++)
        if (b == i) v = acc[b];
    return v;
}

// Sums of one output row over a warp's slices of k: dot[b] = sum W[n, k] *
// x[b, k] * normw[k] (normw may be nullptr, meaning 1), and, when normw is
// set, ss[b] = sum x[b, k]^2 over the same k. Lanes hold partial sums.
template <class T>
__device__ __forceinline__ void row_dot(const T *__restrict__ W, int n, int K, const float *__restrict__ x, int ldx,
                                        const float *__restrict__ normw, int B, int slice, int split,
                                        float dot[STEP_MAXB], float ss[STEP_MAXB]) {
    constexpr int V = 16 / sizeof(T);
    int lane = threadIdx.x & 31;
    const T *w = W + (size_t)n * K;
#pragma unroll
    for (int b = 0; b < STEP_MAXB; b++) dot[b] = ss[b] = 0.f;
    if (K % V == 0 && ldx % 4 == 0) {
        for (int k = (slice * 32 + lane) * V; k < K; k += 32 * V * split) {
            float wv[V], nw[V];
            unpack(w + k, wv);
#pragma unroll
            for (int i = 0; i < V; i += 4) {
                if (normw) unpack(normw + k + i, nw + i);
                else nw[i] = nw[i + 1] = nw[i + 2] = nw[i + 3] = 1.f;
            }
#pragma unroll
            for (int b = 0; b < STEP_MAXB; b++) {
                if (b < B) {
                    float xv[V];
#pragma unroll
                    for (int i = 0; i < V; i += 4) unpack(x + (size_t)b * ldx + k + i, xv + i);
                    float sum = 0.f, sq = 0.f;
#pragma unroll
                    for (int i = 0; i < V; i++) {
                        sum += wv[i] * (xv[i] * nw[i]);
                        sq += xv[i] * xv[i];
                    }
                    dot[b] += sum;
                    ss[b] += sq;
                }
            }
        }
    } else {
        for (int k = slice * 32 + lane; k < K; k += 32 * split) {
            float wv = to_f32(w[k]), nw = normw ? normw[k] : 1.f;
#pragma unroll
            for (int b = 0; b < STEP_MAXB; b++)
                if (b < B) {
                    float xv = x[(size_t)b * ldx + k];
                    dot[b] += wv * (xv * nw);
                    ss[b] += xv * xv;
                }
        }
    }
}

// group_rows runs body(n, v) for every output row n < rows of the block's
// rows, with v[b] = sum_k W[n, k] * x'[b, k] for b < B (x' is x, or
// rmsnorm(x) * normw with a norm weight), in lanes b < B of the row's first
// warp. The loop over rows has the same trip count in every warp, for the
// barrier that joins a group's partial sums.
template <class T, class Body>
__device__ __forceinline__ void group_rows(const T *__restrict__ W, int K, const float *__restrict__ x, int ldx,
                                           const float *__restrict__ normw, float eps, int B, int rows, int split,
                                           Body body) {
    __shared__ float part[STEP_WARPS][STEP_MAXB], sqpart[STEP_WARPS][STEP_MAXB];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, per = STEP_WARPS / split;
    int slice = warp % split, first = warp - slice;
    for (int n0 = blockIdx.x * per; n0 < rows; n0 += gridDim.x * per) {
        int n = n0 + warp / split;
        float dot[STEP_MAXB], ss[STEP_MAXB];
        if (n < rows) row_dot(W, n, K, x, ldx, normw, B, slice, split, dot, ss);
#pragma unroll
        for (int b = 0; b < STEP_MAXB; b++) {  // B and normw are the same in every lane
            if (b < B) dot[b] = warp_sum(n < rows ? dot[b] : 0.f);
            if (b < B && normw) ss[b] = warp_sum(n < rows ? ss[b] : 0.f);
        }
        if (split > 1) {
            if (lane < B) {
                part[warp][lane] = pick(dot, lane);
                sqpart[warp][lane] = pick(ss, lane);
            }
            __syncthreads();
            if (slice == 0 && lane < B) {
                float d = 0.f, q = 0.f;
                for (int j = 0; j < split; j++) d += part[first + j][lane], q += sqpart[first + j][lane];
                dot[0] = d, ss[0] = q;
            }
            __syncthreads();  // part is free for the next rows
        } else if (lane < B) {
            dot[0] = pick(dot, lane), ss[0] = pick(ss, lane);
        }
        if (slice == 0 && lane < B && n < rows) body(n, normw ? dot[0] * rsqrtf(ss[0] / K + eps) : dot[0]);
    }
}

// pdl_start begins a kernel that may run under programmatic dependent
// launch: it lets the next kernel start, asks L2 for the weights of the
// warp's first row (read-only, so safe before the wait), then waits for the
// previous kernel's results.
template <class T>
__device__ __forceinline__ void pdl_start(const T *W, int K, int rows, int split) {
    pdl_release();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n = blockIdx.x * (STEP_WARPS / split) + warp / split;
    if (n < rows)
        for (int k = (warp % split * 32 + lane) * (128 / sizeof(T)); k < K; k += 32 * split * (128 / sizeof(T)))
            prefetch_l2(W + (size_t)n * K + k);
    pdl_wait();
}

// gemv: out[b, n] (+)= sum_k W[n, k] * x'[b, k] + bias[n] for n < rows, with
// x' as in group_rows; bias may be nullptr; accumulate adds to out.
template <class T>
__device__ void gemv(const float *x, int ldx, const float *__restrict__ normw, float eps, const T *__restrict__ W,
                     const float *__restrict__ bias, float *out, int ldo, int accumulate, int B, int K, int rows,
                     int split) {
    pdl_start(W, K, rows, split);
    group_rows(W, K, x, ldx, normw, eps, B, rows, split, [&](int n, float v) {
        int lane = threadIdx.x & 31;
        v += bias ? bias[n] : 0.f;
        float *o = out + (size_t)lane * ldo + n;
        *o = accumulate ? *o + v : v;
    });
}

// step_in: the block's first stages, from the residual stream h to xz.
template <class T>
__device__ void step_in(const float *__restrict__ h, const float *__restrict__ normw, float eps,
                        const T *__restrict__ W, const float *__restrict__ in_bias, const float *__restrict__ conv_w,
                        const float *__restrict__ conv_b, float *__restrict__ win, float *__restrict__ xz, int B,
                        int d, int E, int K, int split) {
    pdl_start(W, d, 2 * E, split);
    group_rows(W, d, h, d, normw, eps, B, 2 * E, split, [&](int n, float v) {
        int lane = threadIdx.x & 31;
        v += in_bias ? in_bias[n] : 0.f;
        float *row = xz + (size_t)lane * 2 * E;
        if (n >= E) {
            row[n] = v;  // z
            return;
        }
        // The conv step of channel n: the window takes v as its newest input.
        float *wnd = win + ((size_t)lane * E + n) * K;
        float sum = conv_b ? conv_b[n] : 0.f;
#pragma unroll
        for (int k = 0; k < STEP_MAXK; k++) {
            if (k < K) {
                float in = k + 1 < K ? wnd[k + 1] : v;
                sum += conv_w[(size_t)n * K + k] * in;
                wnd[k] = in;
            }
        }
        row[n] = sum / (1.f + __expf(-sum));  // silu, as conv.cu computes it
    });
}

#define STEP_GEMV(sfx, T)                                                                                      \
    extern "C" __global__ void                                                                                 \
        gemv_##sfx(const float *x, int ldx, const float *__restrict__ normw, float eps, const T *__restrict__ W, \
                   const float *__restrict__ bias, float *out, int ldo, int accumulate, int B, int K, int rows, \
                   int split) {                                                                                \
        gemv<T>(x, ldx, normw, eps, W, bias, out, ldo, accumulate, B, K, rows, split);                          \
    }                                                                                                          \
    extern "C" __global__ void                                                                                 \
        step_in_##sfx(const float *__restrict__ h, const float *__restrict__ normw, float eps,                  \
                      const T *__restrict__ W, const float *__restrict__ in_bias,                              \
                      const float *__restrict__ conv_w, const float *__restrict__ conv_b,                      \
                      float *__restrict__ win, float *__restrict__ xz, int B, int d, int E, int K, int split) { \
        step_in<T>(h, normw, eps, W, in_bias, conv_w, conv_b, win, xz, B, d, E, K, split);                     \
    }
EACH_DTYPE(STEP_GEMV)

// step_scan_f32: a warp per (channel c, sequence b); grid (ceil(E /
// STEP_WARPS), B), block 32 * STEP_WARPS. The lanes split dt_proj's R
// products, then the N states, and sum C·s across the warp.
//
//   dt = softplus(dbl[b, :R] · W_dt[c, :] + dt_bias[c])
//   s[n] = exp2(dt * A2[c, n]) * s[n] + dt * B[n] * u       (B, C from dbl)
//   y[b, c] = (sum_n s[n] * C[n] + D[c] * u) * silu(z)
extern "C" __global__ void __launch_bounds__(32 * STEP_WARPS)
    step_scan_f32(const float *__restrict__ dbl, int ldd, int R, const float *__restrict__ W_dt,
                  const float *__restrict__ dt_bias, const float *__restrict__ A2, const float *__restrict__ Dskip,
                  const float *__restrict__ xz, float *__restrict__ state, float *__restrict__ y, int E, int N) {
    pdl_release();
    pdl_wait();
    int lane = threadIdx.x & 31, c = blockIdx.x * STEP_WARPS + (threadIdx.x >> 5), b = blockIdx.y;
    if (c >= E) return;
    const float *row = dbl + (size_t)b * ldd;
    float dt = 0.f;
    for (int k = lane; k < R; k += 32) dt += row[k] * W_dt[(size_t)c * R + k];
    dt = softplus_f(warp_sum(dt) + dt_bias[c]);
    float u = xz[(size_t)b * 2 * E + c], du = dt * u, acc = 0.f;
    float *s = state + ((size_t)b * E + c) * N;
    for (int n = lane; n < N; n += 32) {
        float v = ex2(dt * A2[(size_t)c * N + n]) * s[n] + du * row[R + n];
        s[n] = v;
        acc += v * row[R + N + n];
    }
    acc = warp_sum(acc);
    if (lane == 0) y[(size_t)b * E + c] = (acc + Dskip[c] * u) * silu_f(xz[(size_t)b * 2 * E + E + c]);
}
