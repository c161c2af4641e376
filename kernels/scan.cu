// Selective scan with the D skip and the silu(z) gate fused in, continuing
// from and writing back the carried SSM state. Its time step dt comes from
// dt_proj_f32 (dtproj.cu), softplus and bias applied.
//
//   s_t[n] = exp(dt_t * A[c,n]) * s_{t-1}[n] + dt_t * B[b,t,n] * u[b,t,c]
//   y[b,t,c] = (sum_n s_t[n] * C[b,t,n] + D[c] * u[b,t,c]) * silu(z[b,t,c])
//
// dt, u, y [B, T, E]; B and C are columns of x_proj's output dbl
// [B, T, R + 2N] (row stride ldd, B at column R, C at R + N); z is the second
// half of in_proj's output (row stride ldz); A2 [E, N] holds A * log2(e), so
// exp is exp2; state [B, E, N] f32. u and y (a GEMM's input and the next
// GEMM's input) have the entry's storage type T; dt, dbl, z, A2, D, the
// state and all arithmetic are f32.
//
// The recurrence is linear in s, so T splits into nch chunks of L positions
// that run in parallel, in three launches:
//
//   1. scan_chunk_sum_f32: every chunk but the last runs from s = 0 and
//      writes its end state to chunk_state [B, nch, E, N] and the sum of its
//      dt to sumdt [B, nch, E]. Its decay over the chunk is then
//      prod_t exp2(dt_t * A2) = exp2(A2 * sum dt).
//   2. scan_carry_f32: one thread per (b, c, n) walks the chunks in order,
//      s_start[k+1] = exp2(A2 * sumdt[k]) * s_start[k] + end[k], seeded from
//      the carried state, and overwrites chunk_state with each chunk's start.
//   3. scan_chunk_out_f32: every chunk runs again from its start state,
//      writing y; the last chunk writes the final state back.
//
// A prompt of one chunk (decode steps, short prompts) skips 1 and 2 and runs
// 3 from the carried state itself (start = state, nch = 1).
//
// A thread owns one channel c of one chunk and NS = 16 of its states in
// registers, so a warp reads 32 consecutive channels of delta, u and z (one
// coalesced row segment) and every lane the same B and C values, which the
// block stages in shared memory SUB positions at a time. A model with
// N > NS runs G = ceil(N / NS) state groups: launch 1 covers them all
// (blockIdx.y = chunk * G + g); launch 3 runs once per group in order, each
// adding its part of sum_n into part [B, T, E] f32, the last one adding the
// D skip and the gate and writing y. Grid (ceil(E / blockDim.x), chunks [* G], B); blockDim.x <= 128.

#define NS 16     // states per thread
#define SUB 32    // positions of B and C staged in shared memory at a time
#define STEPS 8   // positions whose loads are issued together
#define MAXB 128  // most channels per block

// scan_begin loads a thread's decay rates A2[c, n0 ..] and, in the output
// pass, its starting states (from start, [B, nch, E, N] at cs).
template <bool OUT>
__device__ __forceinline__ void scan_begin(const float *__restrict__ A2, const float *start, int c, bool on, int n0,
                                           int N, size_t cs, float a[NS], float s[NS]) {
#pragma unroll
    for (int i = 0; i < NS; i++) {
        bool live = on && n0 + i < N;
        a[i] = live ? A2[(size_t)c * N + n0 + i] : 0.f;
        s[i] = OUT && live ? start[cs + i] : 0.f;
    }
}

// scan_end writes a thread's states back: the output pass's last chunk to
// the carried state, the summary pass's every chunk to chunk_state with the
// chunk's sum of dt.
template <bool OUT>
__device__ __forceinline__ void scan_end(const float s[NS], float total, float *state, float *chunk_state,
                                         float *__restrict__ sumdt, int b, int c, int E, int N, int n0, size_t cs,
                                         int nch, int ch, int g) {
    if (OUT) {
        if (ch == nch - 1)
#pragma unroll
            for (int i = 0; i < NS; i++)
                if (n0 + i < N) state[((size_t)b * E + c) * N + n0 + i] = s[i];
    } else {
#pragma unroll
        for (int i = 0; i < NS; i++)
            if (n0 + i < N) chunk_state[cs + i] = s[i];
        if (g == 0) sumdt[(size_t)(b * nch + ch) * E + c] = total;
    }
}

template <bool OUT, class Tv>
__device__ __forceinline__ void scan_chunk(const float *__restrict__ dtv, const float *__restrict__ A2, const float *__restrict__ dbl, int ldd,
                                           int R, const Tv *__restrict__ u, const float *__restrict__ Dskip,
                                           const float *__restrict__ z, int ldz, const float *start,
                                           float *chunk_state, float *__restrict__ sumdt, float *state, Tv *y,
                                           float *part,
                                           int T, int E, int N, int L, int nch, int ch, int g, int G) {
    __shared__ float sB[SUB][NS], sC[SUB][NS];
    int c = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.z, n0 = g * NS;
    bool on = c < E;
    float a[NS], s[NS];
    size_t cs = ((size_t)(b * nch + ch) * E + c) * N + n0;  // this thread's states in [B, nch, E, N]
    scan_begin<OUT>(A2, start, c, on, n0, N, cs, a, s);
    float dskip = on ? Dskip[c] : 0.f, total = 0.f;
    int t_end = min(T, (ch + 1) * L);
    for (int t0 = ch * L; t0 < t_end; t0 += SUB) {
        int cnt = min(SUB, t_end - t0);
        __syncthreads();  // the previous positions' B and C are consumed
        for (int i = threadIdx.x; i < SUB * NS; i += blockDim.x) {
            int tt = i / NS, n = n0 + i % NS;
            size_t r = (size_t)b * T + t0 + tt;
            bool ok = tt < cnt && n < N;
            sB[tt][i % NS] = ok ? dbl[r * ldd + R + n] : 0.f;
            if (OUT) sC[tt][i % NS] = ok ? dbl[r * ldd + R + N + n] : 0.f;
        }
        __syncthreads();
        if (!on) continue;
        for (int i0 = 0; i0 < cnt; i0 += STEPS) {
            float dv[STEPS], uv[STEPS], zv[STEPS], yv[STEPS];
#pragma unroll
            for (int i = 0; i < STEPS; i++) {  // issue every load of the group first
                size_t r = (size_t)b * T + t0 + i0 + i;
                bool ok = i0 + i < cnt;
                dv[i] = ok ? dtv[r * E + c] : 0.f;
                uv[i] = ok ? to_f32(u[r * E + c]) : 0.f;
                if (OUT) {
                    zv[i] = ok && g == G - 1 ? z[r * ldz + c] : 0.f;
                    yv[i] = ok && g > 0 ? part[r * E + c] : 0.f;
                }
            }
#pragma unroll
            for (int i = 0; i < STEPS; i++) {  // past the end, dt = 0 leaves s exactly as it is
                bool ok = i0 + i < cnt;
                float dt = dv[i], du = dt * uv[i], acc = 0.f;
                total += dt;
#pragma unroll
                for (int k = 0; k < NS; k++) {
                    s[k] = ex2(dt * a[k]) * s[k] + du * sB[i0 + i][k];
                    if (OUT) acc += s[k] * sC[i0 + i][k];
                }
                if (OUT && ok) {
                    size_t r = (size_t)b * T + t0 + i0 + i;
                    float v = yv[i] + acc;
                    if (g == G - 1)
                        y[r * E + c] = from_f32<Tv>((v + dskip * uv[i]) * silu_f(zv[i]));
                    else
                        part[r * E + c] = v;
                }
            }
        }
    }
    if (on) scan_end<OUT>(s, total, state, chunk_state, sumdt, b, c, E, N, n0, cs, nch, ch, g);
}

// The staged variant (Scan.Staged; E a multiple of 8, 128 threads): the
// block copies each STAGE positions' tiles of dt, u (and z) [STAGE][128
// channels] and their B (and C) values into shared memory with cp.async,
// double-buffered, so the next stage's copies are in flight while the
// current one computes. (In the plain kernel ptxas issues each position's
// loads about one position ahead of their use, whatever order the source
// gives them, which leaves the L2 latency exposed.) Positions past the
// chunk and channels past E are zero-filled: dt = 0 leaves s as it is.
#define STAGE 8

// scan_stage_copy queues, as one cp.async group, the copies of positions
// t0 .. t0 + STAGE - 1 (those below t_end) into one buffer of the staged
// scan: dt, u and, with zgate, z for channels c0 .. c0 + MAXB - 1, and the B
// (and, in the output pass, C) values of states n0 .. n0 + NS - 1. The
// block has MAXB threads.
template <bool OUT, class Tv>
__device__ __forceinline__ void scan_stage_copy(float (*sdt)[MAXB], Tv (*su)[MAXB], float (*sz)[MAXB], float (*sB)[NS],
                                                float (*sC)[NS], const float *dtv, const Tv *u, const float *z, int ldz,
                                                const float *dbl, int ldd, int R, int b, int T, int E, int N, int n0,
                                                int c0, int t0, int t_end, bool zgate) {
    constexpr int F = MAXB / 4, UV = 16 / sizeof(Tv), FU = MAXB / UV;  // 16-byte pieces of a row
    // Each copy reads at a stage base (the same for the whole block) plus an
    // offset that does not change from stage to stage; a copy that reads
    // nothing reads at the base, which exists (t0 < t_end).
    size_t r = (size_t)b * T + t0;
    const float *dt0 = dtv + r * E + c0, *z0 = z + r * ldz + c0, *bc0 = dbl + r * ldd + R + n0;
    const Tv *u0 = u + r * E + c0;
    each_copy<MAXB, STAGE * F>([&](int i) {
        int tt = i / F, cc = i % F * 4;
        bool ok = t0 + tt < t_end && c0 + cc < E;
        cp_async<16>(&sdt[tt][cc], dt0 + (ok ? tt * E + cc : 0), ok);
        if (OUT && zgate) cp_async<16>(&sz[tt][cc], z0 + (ok ? tt * ldz + cc : 0), ok);
    });
    each_copy<MAXB, STAGE * FU>([&](int i) {
        int tt = i / FU, cc = i % FU * UV;
        bool ok = t0 + tt < t_end && c0 + cc < E;
        cp_async<16>(&su[tt][cc], u0 + (ok ? tt * E + cc : 0), ok);
    });
    each_copy<MAXB, STAGE * NS>([&](int i) {
        int tt = i / NS, n = i % NS;
        bool ok = t0 + tt < t_end && n0 + n < N;
        const float *p = bc0 + (ok ? tt * ldd + n : 0);
        cp_async<4>(&sB[tt][n], p, ok);
        if (OUT) cp_async<4>(&sC[tt][n], p + (ok ? N : 0), ok);
    });
    cp_async_commit();
}

template <bool OUT, class Tv>
__device__ __forceinline__ void scan_chunk_staged(const float *__restrict__ dtv, const float *__restrict__ A2,
                                                  const float *__restrict__ dbl, int ldd, int R,
                                                  const Tv *__restrict__ u, const float *__restrict__ Dskip,
                                                  const float *__restrict__ z, int ldz, const float *start,
                                                  float *chunk_state, float *__restrict__ sumdt, float *state, Tv *y,
                                                  float *part, int T, int E, int N, int L, int nch, int ch, int g,
                                                  int G) {
    __shared__ __align__(16) float sdt[2][STAGE][MAXB];
    __shared__ __align__(16) Tv su[2][STAGE][MAXB];
    __shared__ __align__(16) float sz[2][OUT ? STAGE : 1][MAXB];
    __shared__ float sB[2][STAGE][NS], sC[2][OUT ? STAGE : 1][NS];
    int c0 = blockIdx.x * MAXB, c = c0 + threadIdx.x, b = blockIdx.z, n0 = g * NS;
    bool on = c < E;
    float a[NS], s[NS];
    size_t cs = ((size_t)(b * nch + ch) * E + c) * N + n0;
    scan_begin<OUT>(A2, start, c, on, n0, N, cs, a, s);
    float dskip = on ? Dskip[c] : 0.f, total = 0.f;
    int t_begin = ch * L, t_end = min(T, (ch + 1) * L), stages = (t_end - t_begin + STAGE - 1) / STAGE;
    auto issue = [&](int st, int buf) {
        scan_stage_copy<OUT>(sdt[buf], su[buf], sz[OUT ? buf : 0], sB[buf], sC[OUT ? buf : 0], dtv, u, z, ldz, dbl, ldd,
                             R, b, T, E, N, n0, c0, t_begin + st * STAGE, t_end, g == G - 1);
    };
    if (stages > 0) issue(0, 0);
    for (int st = 0; st < stages; st++) {
        int buf = st & 1;
        if (st + 1 < stages) {
            issue(st + 1, buf ^ 1);
            cp_async_wait<1>();  // this stage's group is in; the next one may be in flight
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();  // every thread's copies of this stage are visible
        if (on) {
            int t0 = t_begin + st * STAGE;
#pragma unroll
            for (int i = 0; i < STAGE; i++) {
                float dt = sdt[buf][i][threadIdx.x], uv = to_f32(su[buf][i][threadIdx.x]), du = dt * uv, acc = 0.f;
                total += dt;
#pragma unroll
                for (int k = 0; k < NS; k++) {
                    s[k] = ex2(dt * a[k]) * s[k] + du * sB[buf][i][k];
                    if (OUT) acc += s[k] * sC[buf][i][k];
                }
                if (OUT && t0 + i < t_end) {
                    size_t r = (size_t)b * T + t0 + i;
                    float v = (g > 0 ? part[r * E + c] : 0.f) + acc;
                    if (g == G - 1)
                        y[r * E + c] = from_f32<Tv>((v + dskip * uv) * silu_f(sz[buf][i][threadIdx.x]));
                    else
                        part[r * E + c] = v;
                }
            }
        }
        __syncthreads();  // this buffer is read before the next issue refills it
    }
    if (on) scan_end<OUT>(s, total, state, chunk_state, sumdt, b, c, E, N, n0, cs, nch, ch, g);
}

// Each pass has two entries per storage type: the plain kernel and the
// staged one (_st_).
#define SCAN_SUM_PARAMS(T)                                                                                   \
    const float *__restrict__ dt, const float *__restrict__ A2, const float *__restrict__ dbl, int ldd, int R,   \
        const T *__restrict__ u, float *chunk_state, float *__restrict__ sumdt, int T_, int E, int N, int L,     \
        int nch, int G
#define SCAN_SUM_ARGS                                                                                        \
    dt, A2, dbl, ldd, R, u, nullptr, nullptr, 0, nullptr, chunk_state, sumdt, nullptr, nullptr, nullptr, T_, E, \
        N, L, nch, blockIdx.y / G, blockIdx.y % G, G
#define SCAN_SUM(sfx, T)                                                                                     \
    extern "C" __global__ void __launch_bounds__(MAXB) scan_chunk_sum_##sfx(SCAN_SUM_PARAMS(T)) {           \
        scan_chunk<false, T>(SCAN_SUM_ARGS);                                                                 \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(MAXB) scan_chunk_sum_st_##sfx(SCAN_SUM_PARAMS(T)) {        \
        scan_chunk_staged<false, T>(SCAN_SUM_ARGS);                                                          \
    }
EACH_DTYPE(SCAN_SUM)

#if PLAIN_ENTRIES
extern "C" __global__ void scan_carry_f32(const float *__restrict__ A2, const float *__restrict__ sumdt,
                                          float *__restrict__ chunk_state, const float *__restrict__ state, int B,
                                          int E, int N, int nch) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * E * N) return;
    int n = i % N, c = (i / N) % E, b = i / ((size_t)E * N);
    float a = A2[(size_t)c * N + n], s = state[i];
    for (int k0 = 0; k0 < nch; k0 += STEPS) {
        float end[STEPS], sd[STEPS];
#pragma unroll
        for (int j = 0; j < STEPS; j++) {  // the loads first; they do not depend on s
            int k = k0 + j;
            bool ok = k < nch - 1;
            end[j] = ok ? chunk_state[((size_t)(b * nch + k) * E + c) * N + n] : 0.f;
            sd[j] = ok ? sumdt[(size_t)(b * nch + k) * E + c] : 0.f;
        }
#pragma unroll
        for (int j = 0; j < STEPS; j++) {
            int k = k0 + j;
            if (k >= nch) break;
            chunk_state[((size_t)(b * nch + k) * E + c) * N + n] = s;
            s = ex2(a * sd[j]) * s + end[j];
        }
    }
}
#endif

#define SCAN_OUT_PARAMS(T)                                                                                   \
    const float *__restrict__ dt, const float *__restrict__ A2, const float *__restrict__ dbl, int ldd, int R,   \
        const T *__restrict__ u, const float *__restrict__ Dskip, const float *__restrict__ z, int ldz,          \
        const float *start, float *state, T *y, float *part, int T_, int E, int N, int L, int nch, int g, int G
#define SCAN_OUT_ARGS                                                                                        \
    dt, A2, dbl, ldd, R, u, Dskip, z, ldz, start, nullptr, nullptr, state, y, part, T_, E, N, L, nch,          \
        blockIdx.y, g, G
#define SCAN_OUT(sfx, T)                                                                                     \
    extern "C" __global__ void __launch_bounds__(MAXB) scan_chunk_out_##sfx(SCAN_OUT_PARAMS(T)) {           \
        scan_chunk<true, T>(SCAN_OUT_ARGS);                                                                  \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(MAXB) scan_chunk_out_st_##sfx(SCAN_OUT_PARAMS(T)) {        \
        scan_chunk_staged<true, T>(SCAN_OUT_ARGS);                                                           \
    }
EACH_DTYPE(SCAN_OUT)
