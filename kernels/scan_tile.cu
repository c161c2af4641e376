// Selective scan in one pass, a warp per channel: the same math and layouts
// as scan.cu (see there), computed work-efficiently.
//
//   dt_t = softplus(delta[b,t,c] + dt_bias[c])
//   s_t[n] = exp2(dt_t * A2[c,n]) * s_{t-1}[n] + dt_t * B[b,t,n] * u[b,t,c]
//   y[b,t,c] = (sum_n s_t[n] * C[b,t,n] + D[c] * u[b,t,c]) * silu(z[b,t,c])
//
// Each step is an affine map s -> a*s + b, and affine maps compose
// associatively: (a1, b1) then (a2, b2) is (a1*a2, a2*b1 + b2). A block of
// CH warps takes CH consecutive channels of one batch row and walks T in
// tiles of TILE = 32 * ITEMS positions. In a tile, lane l owns positions
// l*ITEMS .. l*ITEMS + ITEMS-1 of its warp's channel, and for each state n:
//   1. composes its ITEMS maps in registers (one exp2 per position and state,
//      kept for step 3);
//   2. scans the 32 lanes' maps with warp shuffles, and applies the exclusive
//      prefix to the state carried into the tile;
//   3. walks its positions again from that state, adding s_t[n] * C[t, n]
//      into its outputs; lane 31's end state carries into the next tile.
// So every exp2 is computed once (scan.cu computes each twice), and nothing
// goes through global memory between passes.
//
// The tile's delta, u and z (CH channels, coalesced rows of CH values) and B
// and C (NS states) are staged in shared memory. Lanes read positions ITEMS
// apart, so each row of ITEMS positions is padded by one float, which puts
// the 32 lanes on 32 different banks.
//
// N > NS states run as G = ceil(N / NS) launches, one per group g of NS
// states, in order; each adds its part of sum_n into part [B, T, E] f32, and
// the last adds the D skip and the gate and writes y. u and y have the
// entry's storage type T; everything else is f32. Grid (ceil(E / CH), B),
// block CH * 32 threads.

#define TS_NS 16                             // states per launch (group)
#define ITEMS 4                              // positions per lane in a tile
#define TILE (32 * ITEMS)                    // positions per tile
#define CH 8                                 // channels (warps) per block
#define ROW (TILE + TILE / ITEMS + 1)        // padded stride of a staged channel or state row
#define AT(p) ((p) + (p) / ITEMS)            // padded index of position p in a row

__device__ __forceinline__ float ts_softplus(float x) { return x > 20.f ? x : log1pf(__expf(x)); }

__device__ __forceinline__ float ts_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

template <class Tv>
__device__ void scan_tile(const float *__restrict__ delta, const float *__restrict__ dt_bias,
                          const float *__restrict__ A2, const float *__restrict__ dbl, int ldd, int R,
                          const Tv *__restrict__ u, const float *__restrict__ Dskip, const float *__restrict__ z,
                          int ldz, float *state, Tv *__restrict__ y, float *part, int T, int E, int N, int g, int G) {
    __shared__ float sD[CH][ROW], sU[CH][ROW], sZ[CH][ROW], sB[TS_NS][ROW], sC[TS_NS][ROW];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int c0 = blockIdx.x * CH, c = c0 + warp, b = blockIdx.y, n0 = g * TS_NS;
    bool on = c < E, last = g == G - 1;
    float carry[TS_NS], a[TS_NS];
#pragma unroll
    for (int n = 0; n < TS_NS; n++) {
        bool live = on && n0 + n < N;
        a[n] = live ? A2[(size_t)c * N + n0 + n] : 0.f;
        carry[n] = live ? state[((size_t)b * E + c) * N + n0 + n] : 0.f;
    }
    float bias = on ? dt_bias[c] : 0.f;
    for (int t0 = 0; t0 < T; t0 += TILE) {
        int cnt = min(TILE, T - t0);
        __syncthreads();  // the previous tile's staged values are consumed
        for (int i = threadIdx.x; i < TILE * CH; i += blockDim.x) {
            int p = i / CH, ch = i % CH;
            size_t r = (size_t)b * T + t0 + p;
            bool ok = p < cnt && c0 + ch < E;
            sD[ch][AT(p)] = ok ? delta[r * E + c0 + ch] : 0.f;
            sU[ch][AT(p)] = ok ? to_f32(u[r * E + c0 + ch]) : 0.f;
            if (last) sZ[ch][AT(p)] = ok ? z[r * ldz + c0 + ch] : 0.f;
        }
        for (int i = threadIdx.x; i < TILE * TS_NS; i += blockDim.x) {
            int p = i / TS_NS, n = i % TS_NS;
            size_t r = (size_t)b * T + t0 + p;
            bool ok = p < cnt && n0 + n < N;
            sB[n][AT(p)] = ok ? dbl[r * ldd + R + n0 + n] : 0.f;
            sC[n][AT(p)] = ok ? dbl[r * ldd + R + N + n0 + n] : 0.f;
        }
        __syncthreads();
        // This lane's positions: dt and dt * u (dt = 0 past the end leaves the state as it is).
        float dt[ITEMS], du[ITEMS], acc[ITEMS];
#pragma unroll
        for (int j = 0; j < ITEMS; j++) {
            int p = lane * ITEMS + j;
            dt[j] = on && p < cnt ? ts_softplus(sD[warp][AT(p)] + bias) : 0.f;
            du[j] = dt[j] * sU[warp][AT(p)];
            acc[j] = 0.f;
        }
#pragma unroll
        for (int n = 0; n < TS_NS; n++) {  // fully unrolled: carry and a stay in registers
            float dA[ITEMS], bu[ITEMS], ma = 1.f, mb = 0.f;  // this lane's composed map
#pragma unroll
            for (int j = 0; j < ITEMS; j++) {
                dA[j] = ts_ex2(dt[j] * a[n]);
                bu[j] = du[j] * sB[n][AT(lane * ITEMS + j)];
                ma *= dA[j];
                mb = dA[j] * mb + bu[j];
            }
            // Inclusive scan of the lanes' maps, lane 0 first.
#pragma unroll
            for (int off = 1; off < 32; off <<= 1) {
                float pa = __shfl_up_sync(0xffffffffu, ma, off), pb = __shfl_up_sync(0xffffffffu, mb, off);
                if (lane >= off) mb = ma * pb + mb, ma *= pa;
            }
            // The state entering this lane's positions: the lanes before it applied to the carry.
            float ea = __shfl_up_sync(0xffffffffu, ma, 1), eb = __shfl_up_sync(0xffffffffu, mb, 1);
            if (lane == 0) ea = 1.f, eb = 0.f;
            float s = ea * carry[n] + eb;
            carry[n] = __shfl_sync(0xffffffffu, ma, 31) * carry[n] + __shfl_sync(0xffffffffu, mb, 31);
#pragma unroll
            for (int j = 0; j < ITEMS; j++) {
                s = dA[j] * s + bu[j];
                acc[j] += s * sC[n][AT(lane * ITEMS + j)];
            }
        }
        // Outputs, staged through sD (this warp's own row) so the stores are coalesced.
#pragma unroll
        for (int j = 0; j < ITEMS; j++) sD[warp][AT(lane * ITEMS + j)] = acc[j];
        __syncthreads();
        for (int i = threadIdx.x; i < TILE * CH; i += blockDim.x) {
            int p = i / CH, ch = i % CH;
            if (p >= cnt || c0 + ch >= E) continue;
            size_t r = ((size_t)b * T + t0 + p) * E + c0 + ch;
            float v = sD[ch][AT(p)] + (g > 0 ? part[r] : 0.f);
            if (last) {
                float zv = sZ[ch][AT(p)];
                y[r] = from_f32<Tv>((v + Dskip[c0 + ch] * sU[ch][AT(p)]) * __fdividef(zv, 1.f + __expf(-zv)));
            } else {
                part[r] = v;
            }
        }
    }
    if (on && lane == 0)
#pragma unroll
        for (int n = 0; n < TS_NS; n++)
            if (n0 + n < N) state[((size_t)b * E + c) * N + n0 + n] = carry[n];
}

#define SCAN_TILE(sfx, T)                                                                                      \
    extern "C" __global__ void __launch_bounds__(CH * 32)                                                      \
        scan_tile_##sfx(const float *__restrict__ delta, const float *__restrict__ dt_bias,                    \
                        const float *__restrict__ A2, const float *__restrict__ dbl, int ldd, int R,           \
                        const T *__restrict__ u, const float *__restrict__ Dskip, const float *__restrict__ z, \
                        int ldz, float *state, T *__restrict__ y, float *part, int T_, int E, int N, int g,    \
                        int G) {                                                                               \
        scan_tile<T>(delta, dt_bias, A2, dbl, ldd, R, u, Dskip, z, ldz, state, y, part, T_, E, N, g, G);       \
    }
EACH_DTYPE(SCAN_TILE)
