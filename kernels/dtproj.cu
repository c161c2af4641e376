// dt_proj and the time step: the low-rank projection, a GEMM with a short
// inner dimension R (dt_rank, d/16) that cuBLAS runs at a fraction of the
// FP32 rate (23 us a layer for the 130m shape at T=2048, 13 TFLOP/s), then
// the bias and softplus, once per (r, c) rather than in each scan pass.
//
//   dt[r, c] = softplus(sum_{k < R} dbl[r, k] * W[c, k] + bias[c])   r < rows, c < E
//
// dbl [rows, ldd] f32 (x_proj's output; dt_low is its first R columns),
// W [E, R] f32, bias [E] f32, dt [rows, E] f32; exact f32 products and sums,
// softplus with PyTorch's threshold 20.
//
// dt_proj_f32: grid (ceil(E / DT_CH), ceil(rows / DT_ROWS)), block
// DT_THREADS. Each thread sums a DT_TM x DT_TN tile of dt in registers:
// DT_TN consecutive channels (lane) by DT_TM consecutive rows (warp). Per
// stage of DT_K columns the block stages the tile's dt_low rows and its
// channels' weights in shared memory, both transposed to [k][row or
// channel] and both read from global memory in whole row segments; then for
// each k a thread reads its DT_TN weights (one 16-byte load, consecutive
// across the warp) and its DT_TM dt_low values (16-byte loads, the same for
// the whole warp) and does DT_TM * DT_TN FMAs. Rows of the staged arrays
// are padded by 4 floats, which keeps 16-byte alignment and spreads the
// transposing stores over the banks. Each row's DT_TN channels are stored as
// one float4. On the H200 this takes 20.7 us a layer (130m, T=2048). One
// channel per thread, with the weights in registers, needed a shared-memory
// read per FMA and took 30-37 us; 4-byte stores at a 16-byte stride kept it
// at 30 us.

#define DT_TN 4                                    // channels per thread
#define DT_TM 8                                    // rows per thread
#define DT_CH (32 * DT_TN)                         // channels per block: a warp's lanes
#define DT_WARPS 8                                 // warps per block, each DT_TM rows
#define DT_ROWS (DT_WARPS * DT_TM)                 // rows per block
#define DT_THREADS (32 * DT_WARPS)
#define DT_K 16                                    // columns of dt_low per stage
static_assert(DT_TN == 4, "a thread's channels are stored as one float4");

extern "C" __global__ void __launch_bounds__(DT_THREADS)
    dt_proj_f32(const float *__restrict__ dbl, int ldd, int R, const float *__restrict__ W,
                const float *__restrict__ bias, float *__restrict__ dt, int rows, int E) {
    __shared__ __align__(16) float sx[DT_K][DT_ROWS + 4];
    __shared__ __align__(16) float sw[DT_K][DT_CH + 4];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int c0 = blockIdx.x * DT_CH, r0 = blockIdx.y * DT_ROWS;
    float acc[DT_TM][DT_TN];
#pragma unroll
    for (int i = 0; i < DT_TM; i++)
#pragma unroll
        for (int j = 0; j < DT_TN; j++) acc[i][j] = 0.f;
    for (int k0 = 0; k0 < R; k0 += DT_K) {
        __syncthreads();  // the previous stage's columns are consumed
        for (int i = threadIdx.x; i < DT_ROWS * DT_K; i += DT_THREADS) {
            int r = r0 + i / DT_K, k = k0 + i % DT_K;
            sx[i % DT_K][i / DT_K] = r < rows && k < R ? dbl[(size_t)r * ldd + k] : 0.f;
        }
        for (int i = threadIdx.x; i < DT_CH * DT_K; i += DT_THREADS) {
            int c = c0 + i / DT_K, k = k0 + i % DT_K;
            sw[i % DT_K][i / DT_K] = c < E && k < R ? W[(size_t)c * R + k] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < DT_K; k++) {
            float4 w = *reinterpret_cast<const float4 *>(&sw[k][lane * DT_TN]);
            float wv[DT_TN] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int i = 0; i < DT_TM; i += 4) {
                float4 x = *reinterpret_cast<const float4 *>(&sx[k][warp * DT_TM + i]);
                float xv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
                for (int ii = 0; ii < 4; ii++)
#pragma unroll
                    for (int j = 0; j < DT_TN; j++) acc[i + ii][j] += xv[ii] * wv[j];
            }
        }
    }
    // A row's DT_TN channels go out as one 16-byte store where they can
    // (a warp then writes 512 contiguous bytes), else one by one.
    int c = c0 + lane * DT_TN;
    float b[DT_TN];
#pragma unroll
    for (int j = 0; j < DT_TN; j++) b[j] = c + j < E ? bias[c + j] : 0.f;
#pragma unroll
    for (int i = 0; i < DT_TM; i++) {
        int r = r0 + warp * DT_TM + i;
        if (r >= rows) break;
        float v[DT_TN];
#pragma unroll
        for (int j = 0; j < DT_TN; j++) v[j] = softplus_f(acc[i][j] + b[j]);
        float *o = dt + (size_t)r * E + c;
        if (E % DT_TN == 0 && c + DT_TN <= E) {
            *reinterpret_cast<float4 *>(o) = make_float4(v[0], v[1], v[2], v[3]);
        } else {
#pragma unroll
            for (int j = 0; j < DT_TN; j++)
                if (c + j < E) o[j] = v[j];
        }
    }
}
