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

// The GEMVs' entries come in two widths: for up to STEP_MAXB sequences, and,
// with _b1 in their names, for one. A lane keeps ROWS x MAXB sums, so the
// one-sequence entries need fewer registers (step_in_r4 72 against 120 on
// sm_90: more warps an SM) and walk their slices of k STEP_UNROLL_B1 at a
// time, every weight load of those slices in flight together. Per sequence their arithmetic is the same
// as the wide entries', in the same order: the same bits.
#ifndef STEP_UNROLL_B1
#define STEP_UNROLL_B1 2
#endif

// widen turns 16 bytes of T, as loaded (one uint4), into floats; the
// pointer argument only picks T.
__device__ __forceinline__ void widen(uint4 v, const float *, float *out) {
    out[0] = __uint_as_float(v.x), out[1] = __uint_as_float(v.y), out[2] = __uint_as_float(v.z),
    out[3] = __uint_as_float(v.w);
}
__device__ __forceinline__ void widen(uint4 v, const bf16 *, float *out) {
    unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        out[2 * i] = __uint_as_float(words[i] << 16);
        out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void widen(uint4 v, const f16 *, float *out) {
    unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        out[2 * i] = to_f32(f16{(unsigned short)(words[i] & 0xffffu)});
        out[2 * i + 1] = to_f32(f16{(unsigned short)(words[i] >> 16)});
    }
}

// unpack widens the 16 bytes at w (16-byte aligned) to floats.
template <class T>
__device__ __forceinline__ void unpack(const T *w, float *out) {
    widen(*reinterpret_cast<const uint4 *>(w), w, out);
}

// pick returns acc[i] for a run-time i < MAXB (acc stays in registers).
template <int MAXB>
__device__ __forceinline__ float pick(const float (&acc)[MAXB], int i) {
    float v = 0.f;
#pragma unroll
    for (int b = 0; b < MAXB; b++)
        if (b == i) v = acc[b];
    return v;
}

// load_x reads 4 floats at p (16-byte aligned) and load_x1 one. With FRESH
// the activation was written by other blocks of the same launch
// (step_layers), so the load goes to L2 (ld.global.cg): neither the SM's L1
// nor the read-only path may hold a line from before the write.
template <bool FRESH>
__device__ __forceinline__ void load_x(const float *p, float *out) {
    if (FRESH) {
        float4 v = __ldcg(reinterpret_cast<const float4 *>(p));
        out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
    } else {
        unpack(p, out);
    }
}
template <bool FRESH>
__device__ __forceinline__ float load_x1(const float *p) {
    return FRESH ? __ldcg(p) : *p;
}

// quotient is a / b, rounded as IEEE division, or with FRESH (the fused
// step) as __fdividef (2 ulp): the exact division's slow path is a call, and
// around it ptxas spills the fused step's loop state.
template <bool FRESH>
__device__ __forceinline__ float quotient(float a, float b) {
    return FRESH ? __fdividef(a, b) : a / b;
}

// Sums of ROWS consecutive output rows n0 .. n0 + ROWS - 1 (those below
// rows) over a warp's slices of k: dot[r][b] = sum W[n0 + r, k] * x[b, k] *
// normw[k] (normw may be nullptr, meaning 1), and, when normw is set, ss[b]
// = sum x[b, k]^2 over the same k, for b < B <= MAXB. Each slice of x and
// normw is read once for the ROWS rows, whose weight loads are all in
// flight before the FMAs (those of UNROLL slices at a time). Lanes hold
// partial sums. FRESH reads x through L2 (load_x).
template <int ROWS, int MAXB, int UNROLL, bool FRESH, class T>
__device__ __forceinline__ void rows_dot(const T *__restrict__ W, int n0, int rows, int K, const float *__restrict__ x,
                                         int ldx, const float *__restrict__ normw, int B, int slice, int split,
                                         float (&dot)[ROWS][MAXB], float (&ss)[MAXB]) {
    constexpr int V = 16 / sizeof(T);
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int b = 0; b < MAXB; b++) {
        ss[b] = 0.f;
#pragma unroll
        for (int r = 0; r < ROWS; r++) dot[r][b] = 0.f;
    }
    if (K % V == 0 && ldx % 4 == 0) {
#pragma unroll UNROLL
        for (int k = (slice * 32 + lane) * V; k < K; k += 32 * V * split) {
            uint4 raw[ROWS];
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                raw[r] = n0 + r < rows ? *reinterpret_cast<const uint4 *>(W + (size_t)(n0 + r) * K + k) : make_uint4(0, 0, 0, 0);
            float nw[V];
#pragma unroll
            for (int i = 0; i < V; i += 4) {
                if (normw) unpack(normw + k + i, nw + i);
                else nw[i] = nw[i + 1] = nw[i + 2] = nw[i + 3] = 1.f;
            }
#pragma unroll
            for (int b = 0; b < MAXB; b++) {
                if (b < B) {
                    float xv[V];
#pragma unroll
                    for (int i = 0; i < V; i += 4) load_x<FRESH>(x + (size_t)b * ldx + k + i, xv + i);
                    float sq = 0.f;
#pragma unroll
                    for (int i = 0; i < V; i++) {
                        sq += xv[i] * xv[i];
                        xv[i] *= nw[i];
                    }
                    ss[b] += sq;
#pragma unroll
                    for (int r = 0; r < ROWS; r++) {
                        float wv[V], sum = 0.f;
                        widen(raw[r], W, wv);
#pragma unroll
                        for (int i = 0; i < V; i++) sum += wv[i] * xv[i];
                        dot[r][b] += sum;
                    }
                }
            }
        }
    } else {
        for (int k = slice * 32 + lane; k < K; k += 32 * split) {
            float wv[ROWS], nw = normw ? normw[k] : 1.f;
#pragma unroll
            for (int r = 0; r < ROWS; r++) wv[r] = n0 + r < rows ? to_f32(W[(size_t)(n0 + r) * K + k]) : 0.f;
#pragma unroll
            for (int b = 0; b < MAXB; b++)
                if (b < B) {
                    float xv = load_x1<FRESH>(x + (size_t)b * ldx + k);
                    ss[b] += xv * xv;
#pragma unroll
                    for (int r = 0; r < ROWS; r++) dot[r][b] += wv[r] * (xv * nw);
                }
        }
    }
}

// group_rows runs body(n, v) for every output row n < rows of the block's
// rows, with v[b] = sum_k W[n, k] * x'[b, k] for b < B <= MAXB (x' is x, or
// rmsnorm(x) * normw with a norm weight), in lanes b < B of the first warp
// of the row's group. A group of split warps shares ROWS consecutive rows
// (rows_dot). The loop over rows has the same trip count in every warp, for
// the barrier that joins a group's partial sums. FRESH as in rows_dot.
template <int ROWS, int MAXB, int UNROLL, bool FRESH, class T, class Body>
__device__ __forceinline__ void group_rows(const T *__restrict__ W, int K, const float *__restrict__ x, int ldx,
                                           const float *__restrict__ normw, float eps, int B, int rows, int split,
                                           Body body) {
    __shared__ float part[STEP_WARPS][ROWS][MAXB], sqpart[STEP_WARPS][MAXB];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, per = STEP_WARPS / split * ROWS;
    int slice = warp % split, first = warp - slice;
    for (int base = blockIdx.x * per; base < rows; base += gridDim.x * per) {
        int n0 = base + warp / split * ROWS;
        float dot[ROWS][MAXB] = {}, ss[MAXB] = {};  // stay 0 in a group past the last row
        bool live = n0 < rows;
        if (live) rows_dot<ROWS, MAXB, UNROLL, FRESH>(W, n0, rows, K, x, ldx, normw, B, slice, split, dot, ss);
#pragma unroll
        for (int b = 0; b < MAXB; b++) {  // B and normw are the same in every lane
            if (b < B && normw) ss[b] = warp_sum(live ? ss[b] : 0.f);
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                if (b < B) dot[r][b] = warp_sum(live ? dot[r][b] : 0.f);
        }
        // Lane b < B gathers sequence b's sums: v[r] for each row, q for the norm.
        float v[ROWS], q = 0.f;
        if (split > 1) {
            if (lane < B) {
#pragma unroll
                for (int r = 0; r < ROWS; r++) part[warp][r][lane] = pick(dot[r], lane);
                sqpart[warp][lane] = pick(ss, lane);
            }
            __syncthreads();
            if (slice == 0 && lane < B) {
#pragma unroll
                for (int r = 0; r < ROWS; r++) {
                    v[r] = 0.f;
                    for (int j = 0; j < split; j++) v[r] += part[first + j][r][lane];
                }
                for (int j = 0; j < split; j++) q += sqpart[first + j][lane];
            }
            __syncthreads();  // part is free for the next rows
        } else if (lane < B) {
#pragma unroll
            for (int r = 0; r < ROWS; r++) v[r] = pick(dot[r], lane);
            q = pick(ss, lane);
        }
        if (slice == 0 && lane < B) {
            float scale = normw ? rsqrtf(quotient<FRESH>(q, K) + eps) : 1.f;
            // The scaled sum rounded on its own (__fmul_rn), so that ptxas
            // cannot fuse it into the body's bias add in one entry and not
            // in another: every width and unrolling gives the same bits.
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                if (n0 + r < rows) body(n0 + r, normw ? __fmul_rn(v[r], scale) : v[r]);
        }
    }
}

// pdl_start begins a kernel that may run under programmatic dependent
// launch: it lets the next kernel start, asks L2 for the weights of the
// warp's first row (read-only, so safe before the wait), then waits for the
// previous kernel's results.
template <int ROWS, class T>
__device__ __forceinline__ void pdl_start(const T *W, int K, int rows, int split) {
    pdl_release();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int n = blockIdx.x * (STEP_WARPS / split * ROWS) + warp / split * ROWS;
    if (n < rows)
        for (int k = (warp % split * 32 + lane) * (128 / sizeof(T)); k < K; k += 32 * split * (128 / sizeof(T)))
            prefetch_l2(W + (size_t)n * K + k);
    pdl_wait();
}

// gemv_rows: out[b, n] (+)= sum_k W[n, k] * x'[b, k] + bias[n] for n < rows,
// with x' as in group_rows; bias may be nullptr; accumulate adds to out
// (read as FRESH reads x).
template <int ROWS, int MAXB, int UNROLL, bool FRESH, class T>
__device__ __forceinline__ void gemv_rows(const float *x, int ldx, const float *__restrict__ normw, float eps,
                                          const T *__restrict__ W, const float *__restrict__ bias, float *out, int ldo,
                                          int accumulate, int B, int K, int rows, int split) {
    group_rows<ROWS, MAXB, UNROLL, FRESH>(W, K, x, ldx, normw, eps, B, rows, split, [&](int n, float v) {
        int lane = threadIdx.x & 31;
        v += bias ? bias[n] : 0.f;
        float *o = out + (size_t)lane * ldo + n;
        *o = accumulate ? load_x1<FRESH>(o) + v : v;
    });
}

// gemv: gemv_rows as a launch of its own, under PDL.
template <int ROWS, int MAXB, int UNROLL, class T>
__device__ void gemv(const float *x, int ldx, const float *__restrict__ normw, float eps, const T *__restrict__ W,
                     const float *__restrict__ bias, float *out, int ldo, int accumulate, int B, int K, int rows,
                     int split) {
    if (B > MAXB) __trap();  // gpu's gemvPlan picks a one-sequence entry only for B = 1
    pdl_start<ROWS>(W, K, rows, split);
    gemv_rows<ROWS, MAXB, UNROLL, false>(x, ldx, normw, eps, W, bias, out, ldo, accumulate, B, K, rows, split);
}

// step_in_rows: the block's first stages, from the residual stream h to xz.
template <int ROWS, int MAXB, int UNROLL, bool FRESH, class T>
__device__ __forceinline__ void step_in_rows(const float *h, const float *__restrict__ normw, float eps,
                                             const T *__restrict__ W, const float *__restrict__ in_bias,
                                             const float *__restrict__ conv_w, const float *__restrict__ conv_b,
                                             float *__restrict__ win, float *__restrict__ xz, int B, int d, int E,
                                             int K, int split) {
    group_rows<ROWS, MAXB, UNROLL, FRESH>(W, d, h, d, normw, eps, B, 2 * E, split, [&](int n, float v) {
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
        row[n] = quotient<FRESH>(sum, 1.f + __expf(-sum));  // silu, as conv.cu computes it
    });
}

// step_in: step_in_rows as a launch of its own, under PDL.
template <int ROWS, int MAXB, int UNROLL, class T>
__device__ void step_in(const float *__restrict__ h, const float *__restrict__ normw, float eps,
                        const T *__restrict__ W, const float *__restrict__ in_bias, const float *__restrict__ conv_w,
                        const float *__restrict__ conv_b, float *__restrict__ win, float *__restrict__ xz, int B,
                        int d, int E, int K, int split) {
    if (B > MAXB) __trap();  // as in gemv
    pdl_start<ROWS>(W, d, 2 * E, split);
    step_in_rows<ROWS, MAXB, UNROLL, false>(h, normw, eps, W, in_bias, conv_w, conv_b, win, xz, B, d, E, K, split);
}

// Each GEMV has four entries: one row per warp group (gemv_, step_in_) and
// four (gemv_r4_, step_in_r4_), each for up to STEP_MAXB sequences and, with
// _b1, for one.
#define GEMV_PARAMS(T)                                                                                         \
    const float *x, int ldx, const float *__restrict__ normw, float eps, const T *__restrict__ W,             \
        const float *__restrict__ bias, float *out, int ldo, int accumulate, int B, int K, int rows, int split
#define GEMV_ARGS x, ldx, normw, eps, W, bias, out, ldo, accumulate, B, K, rows, split
#define STEP_IN_PARAMS(T)                                                                                      \
    const float *__restrict__ h, const float *__restrict__ normw, float eps, const T *__restrict__ W,          \
        const float *__restrict__ in_bias, const float *__restrict__ conv_w, const float *__restrict__ conv_b, \
        float *__restrict__ win, float *__restrict__ xz, int B, int d, int E, int K, int split
#define STEP_IN_ARGS h, normw, eps, W, in_bias, conv_w, conv_b, win, xz, B, d, E, K, split
#define STEP_GEMV(sfx, T)                                                                                      \
    extern "C" __global__ void gemv_##sfx(GEMV_PARAMS(T)) { gemv<1, STEP_MAXB, 1, T>(GEMV_ARGS); }             \
    extern "C" __global__ void gemv_r4_##sfx(GEMV_PARAMS(T)) { gemv<4, STEP_MAXB, 1, T>(GEMV_ARGS); }          \
    extern "C" __global__ void gemv_b1_##sfx(GEMV_PARAMS(T)) { gemv<1, 1, STEP_UNROLL_B1, T>(GEMV_ARGS); }     \
    extern "C" __global__ void gemv_r4_b1_##sfx(GEMV_PARAMS(T)) { gemv<4, 1, STEP_UNROLL_B1, T>(GEMV_ARGS); }  \
    extern "C" __global__ void step_in_##sfx(STEP_IN_PARAMS(T)) { step_in<1, STEP_MAXB, 1, T>(STEP_IN_ARGS); } \
    extern "C" __global__ void step_in_r4_##sfx(STEP_IN_PARAMS(T)) {                                          \
        step_in<4, STEP_MAXB, 1, T>(STEP_IN_ARGS);                                                            \
    }                                                                                                          \
    extern "C" __global__ void step_in_b1_##sfx(STEP_IN_PARAMS(T)) {                                          \
        step_in<1, 1, STEP_UNROLL_B1, T>(STEP_IN_ARGS);                                                       \
    }                                                                                                          \
    extern "C" __global__ void step_in_r4_b1_##sfx(STEP_IN_PARAMS(T)) {                                       \
        step_in<4, 1, STEP_UNROLL_B1, T>(STEP_IN_ARGS);                                                       \
    }
EACH_DTYPE(STEP_GEMV)

// scan_one: the decode step's scan for channel c of sequence b, by one warp.
// The lanes split dt_proj's R products, then the N states, and sum C·s
// across the warp.
//
//   dt = softplus(dbl[b, :R] · W_dt[c, :] + dt_bias[c])
//   s[n] = exp2(dt * A2[c, n]) * s[n] + dt * B[n] * u       (B, C from dbl)
//   y[b, c] = (sum_n s[n] * C[n] + D[c] * u) * silu(z)
//
// FRESH reads dbl and xz through L2 (load_x). NORM (FalconMamba) first
// RMS-normalizes dbl's three parts (dt's R inputs, B, C; no weight), as
// rmsnorm_dbc_f32 does in place for the separate launches, but each warp
// for itself: its sums of squares run in another order, so the same math
// to f32 rounding rather than the same bits.
template <bool FRESH, bool NORM>
__device__ __forceinline__ void scan_one(int c, int b, const float *dbl, int ldd, int R,
                                         const float *__restrict__ W_dt, const float *__restrict__ dt_bias,
                                         const float *__restrict__ A2, const float *__restrict__ Dskip,
                                         const float *xz, float *__restrict__ state, float *__restrict__ y, int E,
                                         int N, float mixer_eps) {
    int lane = threadIdx.x & 31;
    const float *row = dbl + (size_t)b * ldd;
    float sdt = 1.f, sb = 1.f, sc = 1.f;
    if (NORM) {
        float q[3] = {0.f, 0.f, 0.f};
        for (int k = lane; k < R; k += 32) q[0] += load_x1<FRESH>(row + k) * load_x1<FRESH>(row + k);
        for (int n = lane; n < N; n += 32) {
            float bv = load_x1<FRESH>(row + R + n), cv = load_x1<FRESH>(row + R + N + n);
            q[1] += bv * bv, q[2] += cv * cv;
        }
        sdt = rsqrtf(quotient<FRESH>(warp_sum(q[0]), R) + mixer_eps);
        sb = rsqrtf(quotient<FRESH>(warp_sum(q[1]), N) + mixer_eps);
        sc = rsqrtf(quotient<FRESH>(warp_sum(q[2]), N) + mixer_eps);
    }
    // value i of dbl's part scaled by s (NORM) or as stored
    auto part = [&](int i, float s) {
        float v = load_x1<FRESH>(row + i);
        return NORM ? v * s : v;
    };
    float dt = 0.f;
    for (int k = lane; k < R; k += 32) dt += part(k, sdt) * W_dt[(size_t)c * R + k];
    dt = softplus_f(warp_sum(dt) + dt_bias[c]);
    float u = load_x1<FRESH>(xz + (size_t)b * 2 * E + c), du = dt * u, acc = 0.f;
    float *s = state + ((size_t)b * E + c) * N;
    for (int n = lane; n < N; n += 32) {
        float v = ex2(dt * A2[(size_t)c * N + n]) * s[n] + du * part(R + n, sb);
        s[n] = v;
        acc += v * part(R + N + n, sc);
    }
    acc = warp_sum(acc);
    if (lane == 0) y[(size_t)b * E + c] = (acc + Dskip[c] * u) * silu_f(load_x1<FRESH>(xz + (size_t)b * 2 * E + E + c));
}

// step_scan_f32: scan_one for every channel and sequence, a warp each; grid
// (ceil(E / STEP_WARPS), B), block 32 * STEP_WARPS.
extern "C" __global__ void __launch_bounds__(32 * STEP_WARPS)
    step_scan_f32(const float *__restrict__ dbl, int ldd, int R, const float *__restrict__ W_dt,
                  const float *__restrict__ dt_bias, const float *__restrict__ A2, const float *__restrict__ Dskip,
                  const float *__restrict__ xz, float *__restrict__ state, float *__restrict__ y, int E, int N) {
    pdl_release();
    pdl_wait();
    int c = blockIdx.x * STEP_WARPS + (threadIdx.x >> 5), b = blockIdx.y;
    if (c >= E) return;
    scan_one<false, false>(c, b, dbl, ldd, R, W_dt, dt_bias, A2, Dskip, xz, state, y, E, N, 0.f);
}

// ---- The whole step in one launch (gpu's Engine.DecodeFused) ----
//
// step_layers_<T> runs what the launches above run, for every layer and then
// the LM head, in one cooperative launch of co-resident blocks (grid: a few
// blocks an SM; block 32 * STEP_WARPS). Each stage walks its rows over the
// whole grid (group_rows strides by gridDim.x) or, for the scan, a warp per
// (channel, sequence); a grid barrier (grid_sync) separates each stage from
// the next, which reads what it wrote:
//
//   in_proj + conv | x_proj | scan | out_proj | (the next layer) ... | LM head
//
// A row's arithmetic is that of the separate entries with the same split and
// rows a group, so the same bits (FalconMamba's norm of dbl aside, scan_one).
// What the launch itself writes (h, xz, dbl, y) is read FRESH. Before each
// barrier a block asks L2 for its first prefetch bytes of the next GEMV's
// weight rows (prefetch_rows), so the wait covers part of their fetch.
// 130m at B=1 runs 96 launches a step on the separate entries, each of them
// a few µs of launch and ramp for about 1 µs of weights.

// StepLayer is one layer's weights, as gpu's layer struct holds them (same
// order; every field a device pointer; the GEMV weights in the entry's
// storage type, the rest f32).
struct StepLayer {
    const float *norm;
    const void *in_proj;
    const float *in_bias, *conv, *conv_bias;
    const void *x_proj;
    const float *dt_proj, *dt_bias, *a2, *d;
    const void *out_proj;
    const float *out_bias;
};

// grid_sync: no block of the grid passes its k-th call of the launch (k from
// 1) until every block has made that call; what any block wrote before it,
// every block reads after it (FRESH). bar[0] counts arrivals and must be
// zero when the launch starts: grid_done leaves it so.
__device__ __forceinline__ void grid_sync(unsigned *bar, unsigned k) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(bar, 1u);
        unsigned target = k * gridDim.x, seen;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(bar) : "memory");
        } while (seen < target);
    }
    __syncthreads();
}

// grid_done: the last block past the launch's last grid_sync zeroes bar[0]
// and bar[1] (which counts them), for the next launch.
__device__ __forceinline__ void grid_done(unsigned *bar) {
    if (threadIdx.x == 0 && atomicAdd(bar + 1, 1u) == gridDim.x - 1) {
        bar[0] = 0;
        bar[1] = 0;
        __threadfence();
    }
}

// prefetch_rows asks L2 for up to bytes of the rows group_rows gives this
// block, of a GEMV of rows rows of K weights, per rows at a time.
template <class T>
__device__ __forceinline__ void prefetch_rows(const T *W, int K, int rows, int per, int bytes) {
    long long row_bytes = (long long)K * sizeof(T), left = bytes;
    for (int r = blockIdx.x * per; r < rows && left > 0; r += gridDim.x * per) {
        long long span = min((long long)min(per, rows - r) * row_bytes, left);
        const char *p = reinterpret_cast<const char *>(W) + r * row_bytes;
        for (long long o = threadIdx.x * 128ll; o < span; o += blockDim.x * 128ll) prefetch_l2(p + o);
        left -= span;
    }
}

// A GEMV of the fused step: one row or four to a warp group (ROWS4), split
// warps a row.
struct StepGemv {
    int split, rows4;
    __device__ int per() const { return STEP_WARPS / split * (rows4 ? 4 : 1); }
};

template <int MAXB, int UNROLL, class T>
__device__ __forceinline__ void fused_gemv(StepGemv g, const float *x, int ldx, const float *normw, float eps,
                                           const T *W, const float *bias, float *out, int ldo, int accumulate, int B,
                                           int K, int rows) {
    if (g.rows4)
        gemv_rows<4, MAXB, UNROLL, true>(x, ldx, normw, eps, W, bias, out, ldo, accumulate, B, K, rows, g.split);
    else
        gemv_rows<1, MAXB, UNROLL, true>(x, ldx, normw, eps, W, bias, out, ldo, accumulate, B, K, rows, g.split);
}

// step_layers: every layer of the step, then the LM head. h [B, d] holds the
// embedded tokens and ends as the last layer's output; conv_state and
// ssm_state are the State's buffers (layer l's window at l * B * E * K, its
// SSM state at l * B * E * N); logits [B, V]. The four GEMVs (in_proj with
// the conv, x_proj, out_proj, the LM head) each take split warps a row, and
// four rows to a group where rows4 has their bit (1, 2, 4, 8). bar is two
// zeroed words the launches of one engine share (grid_sync, grid_done).
template <int MAXB, int UNROLL, class T>
__device__ void step_layers(const StepLayer *__restrict__ layers, int L, float *h, float *xz, float *dbl, float *y,
                            float *conv_state, float *ssm_state, const float *__restrict__ norm_f,
                            const T *__restrict__ head, float *logits, int B, int d, int E, int R, int N, int K,
                            int V, float eps, float mixer_eps, int falcon, int split_in, int split_x,
                            int split_out, int split_head, int rows4, int prefetch, unsigned *bar) {
    if (B > MAXB) __trap();  // as in gemv
    StepGemv g_in{split_in, rows4 & 1}, g_x{split_x, rows4 & 2}, g_out{split_out, rows4 & 4},
        g_head{split_head, rows4 & 8};
    int ldd = R + 2 * N, warp = threadIdx.x >> 5;
    unsigned k = 0;
    for (int l = 0; l < L; l++) {
        const StepLayer &w = layers[l];
        const T *w_in = static_cast<const T *>(w.in_proj), *w_x = static_cast<const T *>(w.x_proj),
                *w_out = static_cast<const T *>(w.out_proj);
        float *win = conv_state + (size_t)l * B * E * K, *state = ssm_state + (size_t)l * B * E * N;
        if (g_in.rows4)
            step_in_rows<4, MAXB, UNROLL, true>(h, w.norm, eps, w_in, w.in_bias, w.conv, w.conv_bias, win, xz, B, d,
                                                E, K, g_in.split);
        else
            step_in_rows<1, MAXB, UNROLL, true>(h, w.norm, eps, w_in, w.in_bias, w.conv, w.conv_bias, win, xz, B, d,
                                                E, K, g_in.split);
        prefetch_rows(w_x, E, ldd, g_x.per(), prefetch);
        grid_sync(bar, ++k);
        fused_gemv<MAXB, UNROLL>(g_x, xz, 2 * E, nullptr, 0.f, w_x, nullptr, dbl, ldd, 0, B, E, ldd);
        grid_sync(bar, ++k);
        for (int j = blockIdx.x * STEP_WARPS + warp; j < E * B; j += gridDim.x * STEP_WARPS) {
            if (falcon)
                scan_one<true, true>(j % E, j / E, dbl, ldd, R, w.dt_proj, w.dt_bias, w.a2, w.d, xz, state, y, E, N,
                                     mixer_eps);
            else
                scan_one<true, false>(j % E, j / E, dbl, ldd, R, w.dt_proj, w.dt_bias, w.a2, w.d, xz, state, y, E, N,
                                      mixer_eps);
        }
        prefetch_rows(w_out, E, d, g_out.per(), prefetch);
        grid_sync(bar, ++k);
        fused_gemv<MAXB, UNROLL>(g_out, y, E, nullptr, 0.f, w_out, w.out_bias, h, d, 1, B, E, d);
        if (l + 1 < L)
            prefetch_rows(static_cast<const T *>(layers[l + 1].in_proj), d, 2 * E, g_in.per(), prefetch);
        else
            prefetch_rows(head, d, V, g_head.per(), prefetch);
        grid_sync(bar, ++k);
    }
    fused_gemv<MAXB, UNROLL>(g_head, h, d, norm_f, eps, head, nullptr, logits, V, 0, B, d, V);
    grid_done(bar);
}

#define STEP_LAYERS_PARAMS(T)                                                                                   \
    const StepLayer *__restrict__ layers, int L, float *h, float *xz, float *dbl, float *y, float *conv_state,  \
        float *ssm_state, const float *__restrict__ norm_f, const T *__restrict__ head, float *logits, int B,   \
        int d, int E, int R, int N, int K, int V, float eps, float mixer_eps, int falcon, int split_in,         \
        int split_x, int split_out, int split_head, int rows4, int prefetch, unsigned *bar
#define STEP_LAYERS_ARGS                                                                                        \
    layers, L, h, xz, dbl, y, conv_state, ssm_state, norm_f, head, logits, B, d, E, R, N, K, V, eps, mixer_eps, \
        falcon, split_in, split_x, split_out, split_head, rows4, prefetch, bar
#define STEP_LAYERS(sfx, T)                                                                                     \
    extern "C" __global__ void __launch_bounds__(32 * STEP_WARPS, 2) step_layers_##sfx(STEP_LAYERS_PARAMS(T)) {    \
        step_layers<STEP_MAXB, 1, T>(STEP_LAYERS_ARGS);                                                         \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(32 * STEP_WARPS, 2) step_layers_b1_##sfx(STEP_LAYERS_PARAMS(T)) { \
        step_layers<1, STEP_UNROLL_B1, T>(STEP_LAYERS_ARGS);                                                    \
    }
EACH_DTYPE(STEP_LAYERS)
