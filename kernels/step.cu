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
#define STEP_PREK 4  // the longest conv whose taps step_in loads early (Mamba's is 4)

// The GEMVs' entries come in two widths: for up to STEP_MAXB sequences, and,
// with _b1 in their names, for one. A lane keeps ROWS x MAXB sums, so the
// one-sequence entries need fewer registers (step_in_r4 72 against 120 on
// sm_90: more warps an SM) and walk their slices of k STEP_UNROLL_B1 at a
// time, every weight load of those slices in flight together. Per sequence their arithmetic is the same
// as the wide entries', in the same order: the same bits.
#ifndef STEP_UNROLL_B1
#define STEP_UNROLL_B1 2
#endif
// The tensor-core entries' slices of k a warp loads at once (group_tile).
#ifndef STEP_TILE_U
#define STEP_TILE_U 2
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

// Sums of ROWS consecutive output rows n0 .. n0 + ROWS - 1 (those below
// rows) over a warp's slices of k: dot[r][b] = sum W[n0 + r, k] * x[b, k] *
// normw[k] (normw may be nullptr, meaning 1), and, when normw is set, ss[b]
// = sum x[b, k]^2 over the same k, for b < B <= MAXB. Each slice of x and
// normw is read once for the ROWS rows, whose weight loads are all in
// flight before the FMAs (those of UNROLL slices at a time). Lanes hold
// partial sums.
template <int ROWS, int MAXB, int UNROLL, class T>
__device__ __forceinline__ void rows_dot(const T *__restrict__ W, int n0, int rows, int K, const float *x,
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
                    for (int i = 0; i < V; i += 4) unpack(x + (size_t)b * ldx + k + i, xv + i);
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
                    float xv = x[(size_t)b * ldx + k];
                    ss[b] += xv * xv;
#pragma unroll
                    for (int r = 0; r < ROWS; r++) dot[r][b] += wv[r] * (xv * nw);
                }
        }
    }
}

// group_rows runs body(n, b, r, v) for every output row n = n0 + r < rows of
// the block's rows and sequence b < B <= MAXB, with v = sum_k W[n, k] *
// x'[b, k] (x' is x, or rmsnorm(x) * normw with a norm weight), in lane b of
// the first warp of the row's group. A group of split warps shares ROWS
// consecutive rows n0 .. n0 + ROWS - 1 (rows_dot). load(n0), called in
// every lane of the group's first warp before its weight loads, queues
// asynchronous copies (cp.async, a few a lane) of what the body reads
// besides v into shared memory, where the body finds them: those reads
// share the weights' round trip instead of starting one of their own after
// the sums, and hold no registers meanwhile. The loop over rows has the
// same trip count in every warp, for the barrier that joins a group's
// partial sums.
template <int ROWS, int MAXB, int UNROLL, class T, class Load, class Body>
__device__ __forceinline__ void group_rows(const T *__restrict__ W, int K, const float *x, int ldx,
                                           const float *__restrict__ normw, float eps, int B, int rows, int split,
                                           Load load, Body body) {
    __shared__ float part[STEP_WARPS][ROWS][MAXB], sqpart[STEP_WARPS][MAXB];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, per = STEP_WARPS / split * ROWS;
    int slice = warp % split, first = warp - slice;
    for (int base = blockIdx.x * per; base < rows; base += gridDim.x * per) {
        int n0 = base + warp / split * ROWS;
        float dot[ROWS][MAXB] = {}, ss[MAXB] = {};  // stay 0 in a group past the last row
        bool live = n0 < rows;
        if (live && slice == 0) load(n0);
        cp_async_commit();
        if (live) rows_dot<ROWS, MAXB, UNROLL>(W, n0, rows, K, x, ldx, normw, B, slice, split, dot, ss);
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
        cp_async_wait<0>();  // load's copies, seen by the whole warp
        __syncwarp();
        if (slice == 0 && lane < B) {
            float scale = normw ? rsqrtf(q / K + eps) : 1.f;
            // The scaled sum rounded on its own (__fmul_rn), so that ptxas
            // cannot fuse it into the body's bias add in one entry and not
            // in another: every width and unrolling gives the same bits.
#pragma unroll
            for (int r = 0; r < ROWS; r++)
                if (n0 + r < rows) body(n0 + r, lane, r, normw ? __fmul_rn(v[r], scale) : v[r]);
        }
        __syncwarp();  // the body's reads of load's copies before the next rows' copies
    }
}

// split3 writes the pair (a, b) as three pairs of bf16, hi + mid + lo,
// each packed as a tensor-core operand (a in the low half). Each part is
// its value's top 16 bits (a truncation: no conversion instruction), and
// what it leaves is exact in f32, so the three parts carry all 24 of a's
// significant bits: what hi leaves has at most 16 and what mid leaves at
// most 8, which bf16 holds exactly.
__device__ __forceinline__ void split3(float a, float b, unsigned &hi, unsigned &mid, unsigned &lo) {
    unsigned *part[3] = {&hi, &mid, &lo};
#pragma unroll
    for (int i = 0; i < 3; i++) {
        unsigned ua = __float_as_uint(a), ub = __float_as_uint(b);
        *part[i] = __byte_perm(ua, ub, 0x7632);
        a -= __uint_as_float(ua & 0xffff0000u), b -= __uint_as_float(ub & 0xffff0000u);
    }
}

// STEP_TILE_MAXW: the most warps a tensor-core GEMV's block may have.
#define STEP_TILE_MAXW 16
// The TILE argument of gemv and step_in: rows to warp groups (group_rows),
// whole tiles on the tensor cores, or tiles split along k over gridDim.y
// blocks (group_tile).
#define TILE_NONE 0
#define TILE_WHOLE 1
#define TILE_SPLIT 2
// STEP_TILE_PART: the floats a tile's part takes in TileParts.scratch:
// its 16 rows by 8 sequences of sums, then 8 sequences' sums of squares.
#define STEP_TILE_PART 144

// TileParts is the scratch of a tensor-core GEMV whose tiles are split
// along k over gridDim.y blocks: scratch [tiles][gridDim.y][STEP_TILE_PART]
// f32 and count [tiles], counters that are zero between launches. The
// whole-tile entries take none.
struct TileParts {
    float *scratch;
    unsigned *count;
};

// tile_kspan is the block's part of k in a tensor-core GEMV: with SPLIT,
// split along k over gridDim.y blocks (part blockIdx.y), kbeg .. kend - 1,
// whole slices of 32 as evenly as they go; else all of it.
template <bool SPLIT>
__device__ __forceinline__ void tile_kspan(int K, int &kbeg, int &kend) {
    if constexpr (!SPLIT) {
        kbeg = 0, kend = K;
        return;
    }
    int per = ((K + 31) / 32 + gridDim.y - 1) / gridDim.y;
    kbeg = min(K, 32 * per * (int)blockIdx.y), kend = min(K, kbeg + 32 * per);
}

// tile_parts_last, in a tile's first warp, stores this block's part p of
// tile's sums (v and q as group_tile's first warp holds them) and counts
// it in. For the tile's last block to count in, it then sums the parts in
// order 0 .. parts - 1 into v and q (the same bits whichever block is
// last), resets the counter and returns true; other blocks return false.
__device__ __forceinline__ bool tile_parts_last(const TileParts &tp, int tile, int parts, int p, int lane,
                                                float (&v)[4], float (&q)[2]) {
    const int g = lane >> 2, t = lane & 3;
    float *mine = tp.scratch + ((size_t)tile * parts + p) * STEP_TILE_PART;
#pragma unroll
    for (int i = 0; i < 4; i++) mine[32 * i + lane] = v[i];
    if (g == 0) mine[128 + 2 * t] = q[0], mine[129 + 2 * t] = q[1];
    __threadfence();  // the part before the count
    __syncwarp();
    unsigned last = 0;
    if (lane == 0) last = atomicAdd(tp.count + tile, 1u) == (unsigned)parts - 1;
    if (!__shfl_sync(0xffffffffu, last, 0)) return false;
    __threadfence();  // every part counted in before this is seen
    const float *all = tp.scratch + (size_t)tile * parts * STEP_TILE_PART;
    v[0] = v[1] = v[2] = v[3] = q[0] = q[1] = 0.f;
    for (int j = 0; j < parts; j++, all += STEP_TILE_PART) {
#pragma unroll
        for (int i = 0; i < 4; i++) v[i] += __ldcg(all + 32 * i + lane);
        q[0] += __ldcg(all + 128 + 2 * t), q[1] += __ldcg(all + 129 + 2 * t);
    }
    if (lane == 0) tp.count[tile] = 0;  // for the next launch
    return true;
}

// group_tile is group_rows on the tensor cores, for a batch of sequences
// (the _tc entries; Engine.GEMVTensorCores): the block's warps (split of
// them, 32 * split threads, split up to STEP_TILE_MAXW) share 16
// consecutive rows n0 .. n0 + 15, warp w taking every split-th 32-wide
// slice of k from 32 w, and end with body(n, b, r, v) as group_rows does,
// in the first warp. In a slice, lane (g = lane / 4, t = lane % 4) loads
// 16 bytes of rows n0 + g and n0 + g + 8 at k + 8 t and the same 8 values
// of sequence g's x, the fragments of two m16n8k16 products (rows by
// sequences) whose k order is a permutation of the slice's, the same in
// both operands. A warp issues the loads of STEP_TILE_U slices, weights
// and x, before their first product. x stays f32 to the products: split3's
// three parts go through the tensor cores in turn, each product of a
// weight and a part is exact, and the tensor cores sum in f32 (two
// accumulators, even and odd slices, so that half the products wait on
// each other), so the sums are those of the FMA entries to f32 rounding
// (not their bits). K must be a multiple of 8 and ldx of 4, with W and x
// 16-byte aligned (gemvPlan picks these entries only then). For the 512
// weights of 16 rows and a slice a warp issues six products, where the
// FMA entries spend an FMA a weight and sequence (4096 at B = 8) besides
// widening each weight. With SPLIT (the _tc_split entries) a block takes
// only part blockIdx.y of k (tile_kspan), and the tile's last block to
// finish sums the parts in tp and runs the body (tile_parts_last); without
// it gridDim.y must be 1, and tp is unused.
template <bool SPLIT, class T, class Load, class Body>
__device__ __forceinline__ void group_tile(const T *__restrict__ W, int K, const float *x, int ldx,
                                           const float *__restrict__ normw, float eps, int B, int rows, int split,
                                           const TileParts &tp, Load load, Body body) {
    static_assert(sizeof(T) == 2, "the tensor-core GEMV takes 16-bit weights");
    if (K % 8 != 0 || ldx % 4 != 0 || B > 8 || split > STEP_TILE_MAXW || 32 * split != blockDim.x) __trap();
    __shared__ float part[STEP_TILE_MAXW][4][32], sqpart[STEP_TILE_MAXW][8];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int parts = gridDim.y, p = blockIdx.y;
    int kbeg, kend;
    tile_kspan<SPLIT>(K, kbeg, kend);
    if (SPLIT ? tp.scratch == nullptr || tp.count == nullptr : parts != 1) __trap();
    for (int n0 = blockIdx.x * 16; n0 < rows; n0 += gridDim.x * 16) {
        if (warp == 0) load(n0);
        cp_async_commit();
        bool row0 = n0 + g < rows, row1 = n0 + g + 8 < rows, seq = g < B;
        const T *w0 = W + (size_t)(n0 + g) * K, *w1 = w0 + (size_t)8 * K;
        const float *xg = x + (size_t)g * ldx;
        float acc[2][4] = {}, ss = 0.f;
        // k0 is the same in every lane of a warp, and so is the trip count:
        // mma.sync needs the whole warp.
        for (int k0 = kbeg + 32 * warp; k0 < kend; k0 += 32 * split * STEP_TILE_U) {
            uint4 wa[STEP_TILE_U], wb[STEP_TILE_U];
            float4 xv[STEP_TILE_U][2];
#pragma unroll
            for (int u = 0; u < STEP_TILE_U; u++) {
                int k = k0 + 32 * split * u + 8 * t;
                bool in = k < kend;
                wa[u] = row0 && in ? *reinterpret_cast<const uint4 *>(w0 + k) : make_uint4(0, 0, 0, 0);
                wb[u] = row1 && in ? *reinterpret_cast<const uint4 *>(w1 + k) : make_uint4(0, 0, 0, 0);
                xv[u][0] = seq && in ? *reinterpret_cast<const float4 *>(xg + k) : make_float4(0.f, 0.f, 0.f, 0.f);
                xv[u][1] = seq && in ? *reinterpret_cast<const float4 *>(xg + k + 4) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int u = 0; u < STEP_TILE_U; u++) {
                int k = k0 + 32 * split * u + 8 * t;
                float v[8] = {xv[u][0].x, xv[u][0].y, xv[u][0].z, xv[u][0].w,
                              xv[u][1].x, xv[u][1].y, xv[u][1].z, xv[u][1].w};
                if (normw) {
                    float nw[8] = {};
                    if (k < kend) {
                        unpack(normw + k, nw);
                        unpack(normw + k + 4, nw + 4);
                    }
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        ss += v[i] * v[i];
                        v[i] *= nw[i];
                    }
                }
                unsigned hi[4], mid[4], lo[4];
#pragma unroll
                for (int i = 0; i < 4; i++) split3(v[2 * i], v[2 * i + 1], hi[i], mid[i], lo[i]);
                const unsigned a0[4] = {wa[u].x, wb[u].x, wa[u].y, wb[u].y};
                const unsigned a1[4] = {wa[u].z, wb[u].z, wa[u].w, wb[u].w};
                float(&c)[4] = acc[u % 2];
                mma16816<T>(c, a0, lo[0], lo[1]), mma16816<T>(c, a1, lo[2], lo[3]);
                mma16816<T>(c, a0, mid[0], mid[1]), mma16816<T>(c, a1, mid[2], mid[3]);
                mma16816<T>(c, a0, hi[0], hi[1]), mma16816<T>(c, a1, hi[2], hi[3]);
            }
        }
        // acc[.][i] is row g + 8 (i / 2), sequence 2 t + i % 2; ss, summed
        // over the four lanes of g, is sequence g's.
        ss += __shfl_xor_sync(0xffffffffu, ss, 1);
        ss += __shfl_xor_sync(0xffffffffu, ss, 2);
#pragma unroll
        for (int i = 0; i < 4; i++) part[warp][i][lane] = acc[0][i] + acc[1][i];
        if (t == 0) sqpart[warp][g] = ss;
        __syncthreads();
        float v[4] = {0.f, 0.f, 0.f, 0.f}, q[2] = {0.f, 0.f};
        if (warp == 0) {
            for (int j = 0; j < split; j++) {
#pragma unroll
                for (int i = 0; i < 4; i++) v[i] += part[j][i][lane];
                q[0] += sqpart[j][2 * t], q[1] += sqpart[j][2 * t + 1];
            }
        }
        __syncthreads();  // part is free for the next rows
        cp_async_wait<0>();  // load's copies, seen by the whole warp
        __syncwarp();
        // Split along k, the tile's last block to finish sums the parts.
        if (warp == 0 && (!SPLIT || tile_parts_last(tp, n0 / 16, parts, p, lane, v, q))) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int r = g + 8 * (i / 2), b = 2 * t + i % 2;
                float scale = normw ? rsqrtf(q[i % 2] / K + eps) : 1.f;
                if (n0 + r < rows && b < B) body(n0 + r, b, r, normw ? __fmul_rn(v[i], scale) : v[i]);
            }
        }
        __syncwarp();  // the body's reads of load's copies before the next rows' copies
    }
}

// group runs a GEMV's rows as group_rows does, ROWS to a warp group, or,
// with TILE (TILE_WHOLE or TILE_SPLIT), as group_tile does (ROWS is then
// 16, the tile's, split the block's warps, and tp the scratch of its parts
// along k).
template <int ROWS, int MAXB, int UNROLL, int TILE, class T, class Load, class Body>
__device__ __forceinline__ void group(const T *__restrict__ W, int K, const float *x, int ldx,
                                      const float *__restrict__ normw, float eps, int B, int rows, int split,
                                      const TileParts &tp, Load load, Body body) {
    if constexpr (TILE) {
        static_assert(ROWS == 16, "a tile is 16 rows");
        group_tile<TILE == TILE_SPLIT, T>(W, K, x, ldx, normw, eps, B, rows, split, tp, load, body);
    } else {
        group_rows<ROWS, MAXB, UNROLL>(W, K, x, ldx, normw, eps, B, rows, split, load, body);
    }
}

// pdl_start begins a kernel that may run under programmatic dependent
// launch: it lets the next kernel start, asks L2 for the weights of the
// warp's first row (read-only, so safe before the wait), then waits for the
// previous kernel's results.
// With TILE (group_tile's blocks) it asks for the block's first 16 rows,
// with TILE_SPLIT only its part of k in them.
template <int ROWS, int TILE, class T>
__device__ __forceinline__ void pdl_start(const T *W, int K, int rows, int split) {
    pdl_release();
    constexpr size_t LINE = 128 / sizeof(T);  // weights to a 128-byte line
    if constexpr (TILE == TILE_WHOLE) {
        size_t n0 = (size_t)blockIdx.x * 16, end = min((size_t)rows, n0 + 16) * K;
        for (size_t i = n0 * K + threadIdx.x * LINE; i < end; i += blockDim.x * LINE) prefetch_l2(W + i);
    } else if constexpr (TILE == TILE_SPLIT) {
        int kbeg, kend;
        tile_kspan<true>(K, kbeg, kend);
        int span = (kend - kbeg + (int)LINE - 1) / (int)LINE;  // lines a row
        for (int i = threadIdx.x; i < 16 * span; i += blockDim.x) {
            size_t n = (size_t)blockIdx.x * 16 + i / span;
            if (n < (size_t)rows) prefetch_l2(W + n * K + kbeg + (size_t)(i % span) * LINE);
        }
    } else {
        int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        int n = blockIdx.x * (STEP_WARPS / split * ROWS) + warp / split * ROWS;
        if (n < rows)
            for (int k = (warp % split * 32 + lane) * LINE; k < K; k += 32 * split * LINE) prefetch_l2(W + (size_t)n * K + k);
    }
    pdl_wait();
}

// gemv: out[b, n] (+)= sum_k W[n, k] * x'[b, k] + bias[n] for n < rows, with
// x' as in group_rows; bias may be nullptr; accumulate adds to out.
template <int ROWS, int MAXB, int UNROLL, int TILE, class T>
__device__ void gemv(const float *x, int ldx, const float *__restrict__ normw, float eps, const T *__restrict__ W,
                     const float *__restrict__ bias, float *out, int ldo, int accumulate, int B, int K, int rows,
                     int split, TileParts tp = {}) {
    if (B > MAXB) __trap();  // gpu's gemvPlan picks a one-sequence entry only for B = 1
    pdl_start<ROWS, TILE>(W, K, rows, split);
    // The group's copies: mine[b][r] = {bias[n], out[b, n] when
    // accumulating} for its rows n = n0 + r (zeros where absent); a tile's
    // block has one group.
    __shared__ float pre[TILE ? 1 : STEP_WARPS][MAXB][ROWS][2];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    auto &mine = pre[TILE ? 0 : warp];
    auto load = [&](int n0) {
#pragma unroll
        for (int i = lane; i < MAXB * ROWS * 2; i += 32) {
            int b = i / (ROWS * 2), r = i / 2 % ROWS, kind = i % 2, n = n0 + r;
            bool full = b < B && n < rows && (kind == 0 ? bias != nullptr : accumulate != 0);
            const float *src = !full ? out : kind == 0 ? bias + n : out + (size_t)b * ldo + n;
            cp_async<4>(&mine[b][r][kind], src, full);
        }
    };
    group<ROWS, MAXB, UNROLL, TILE>(W, K, x, ldx, normw, eps, B, rows, split, tp, load, [&](int n, int b, int r, float v) {
        v += mine[b][r][0];
        out[(size_t)b * ldo + n] = accumulate ? mine[b][r][1] + v : v;
    });
}

// step_in: the block's first stages, from the residual stream h to xz.
template <int ROWS, int MAXB, int UNROLL, int TILE, class T>
__device__ void step_in(const float *h, const float *__restrict__ normw, float eps,
                        const T *__restrict__ W, const float *__restrict__ in_bias, const float *__restrict__ conv_w,
                        const float *__restrict__ conv_b, float *__restrict__ win, float *__restrict__ xz, int B,
                        int d, int E, int K, int split, TileParts tp = {}) {
    if (B > MAXB) __trap();  // as in gemv
    pdl_start<ROWS, TILE>(W, d, 2 * E, split);
    // The group's copies for sequence b and row n = n0 + r: in_bias[n], and
    // for a channel (n < E) conv_b[n] and, when the conv has up to STEP_PREK
    // taps, its weights and the sequence's window (zeros where absent; each
    // row of taps one 16-byte copy where it can be); a longer conv reads
    // those in the body. Four copies (kinds) a row and sequence.
    struct alignas(16) Pre {
        float cw[STEP_PREK], wd[STEP_PREK], bias, cb;
    };
    __shared__ Pre pre[TILE ? 1 : STEP_WARPS][MAXB][ROWS];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    auto &mine = pre[TILE ? 0 : warp];
    bool taps = K <= STEP_PREK;
    auto load = [&](int n0) {
#pragma unroll 1  // unrolled, the wide entries' copies held their addresses at once
        for (int i = lane; i < MAXB * ROWS * 4; i += 32) {
            int b = i / (ROWS * 4), r = i / 4 % ROWS, kind = i % 4, n = n0 + r;
            bool conv = b < B && n < E;
            Pre &p = mine[b][r];
            if (kind == 0) cp_async<4>(&p.bias, in_bias ? in_bias + n : win, b < B && n < 2 * E && in_bias);
            else if (kind == 1) cp_async<4>(&p.cb, conv_b ? conv_b + n : win, conv && conv_b);
            else {
                const float *src = kind == 2 ? conv_w + (size_t)n * K : win + ((size_t)b * E + n) * K;
                float *dst = kind == 2 ? p.cw : p.wd;
                if (K == STEP_PREK && (reinterpret_cast<size_t>(src) & 15) == 0) cp_async<16>(dst, conv ? src : win, conv);
                else
                    for (int k = 0; k < STEP_PREK; k++) cp_async<4>(dst + k, conv && taps && k < K ? src + k : win, conv && taps && k < K);
            }
        }
    };
    group<ROWS, MAXB, UNROLL, TILE>(W, d, h, d, normw, eps, B, 2 * E, split, tp, load, [&](int n, int b, int r, float v) {
        const Pre &p = mine[b][r];
        v += p.bias;
        float *row = xz + (size_t)b * 2 * E;
        if (n >= E) {
            row[n] = v;  // z
            return;
        }
        // The conv step of channel n: the window takes v as its newest input.
        float *wnd = win + ((size_t)b * E + n) * K;
        float sum = p.cb;
        if (taps) {
#pragma unroll
            for (int k = 0; k < STEP_PREK; k++) {
                if (k < K) {
                    float in = k + 1 < K ? p.wd[k + 1 < STEP_PREK ? k + 1 : 0] : v;
                    sum += p.cw[k] * in;
                    wnd[k] = in;
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < STEP_MAXK; k++) {
                if (k < K) {
                    float in = k + 1 < K ? wnd[k + 1] : v;
                    sum += conv_w[(size_t)n * K + k] * in;
                    wnd[k] = in;
                }
            }
        }
        row[n] = sum / (1.f + __expf(-sum));  // silu, as conv.cu computes it
    });
}

// The streaming one-sequence GEMV (gemv_sb1_). gemv_ gives a block of 8
// warps 16 rows (4 a warp at split 2): a block's loads come in two or
// three rounds, its warps meet at a barrier to add their parts, and the
// grid runs in waves. Here the grid is STREAM_BLOCKS blocks an SM, every
// warp takes an equal run of whole rows, and each lane walks its k slices
// of one row, then the next's, a batch of 16-byte weight loads at a time,
// with the next batch in flight while one is added (stream_whole where K
// is whole slices, stream_any elsewhere; the loads pinned where written
// by load_pinned); the first batch is issued before the PDL wait, where
// the warp may also ask L2 for its rows (prefetch). A warp holds a row's
// SPLIT slice sums apart, as the split warps of group_rows do, and adds
// them in the same order, so each row's sum has the same bits as the other
// entries' (one sequence, B = 1, and the vector path: K a multiple of 16
// bytes of T; gpu.Engine falls back to them elsewhere). x' (x * normw,
// each product rounded as group_rows rounds it) is staged in shared
// memory, and the norm's scale computed once a warp. Grid (SMs *
// STREAM_BLOCKS), block STREAM_THREADS, K * 4 bytes of dynamic shared
// memory (twice that with a norm weight); x and normw 16-byte aligned;
// split 1, 2 or 4. Measured on the H200 (BenchmarkDecodeStream, bf16 B=1
// step graphs, 2026-12-04): out_proj 0.9 µs a 2.8b layer faster and 2 µs
// a 370m layer (0.4 more with prefetch), the LM head 6-9 µs; in_proj as
// a streaming step_in was 0.4-2.8 µs a layer slower (its norm's prologue
// before the first sums, on the any-K walk), so step_in keeps group_rows.
// stream_any's loads a batch (stream_whole takes 4 or 5, whichever
// divides a row's slices).
#ifndef STREAM_DEPTH
#define STREAM_DEPTH 4
#endif
#define STREAM_THREADS 256
#ifndef STREAM_BLOCKS
#define STREAM_BLOCKS 3
#endif
// With STREAM_DOUBLE, a batch's loads are issued before the one before it
// is added (two rings; stream_any).
#ifndef STREAM_DOUBLE
#define STREAM_DOUBLE 1
#endif
// STREAM_WHOLE=0 walks every K as any K (stream_any; BenchmarkReadFloor
// times both).
#ifndef STREAM_WHOLE
#define STREAM_WHOLE 1
#endif

// load_pinned loads 16 read-only bytes where the code asks for them. A
// plain load of a const __restrict__ pointer is free to move, and the
// compiler sank the next batch's loads below the sums of the batch before
// (to where that batch's registers free up), leaving a warp one batch in
// flight, not two; a volatile load with a memory clobber stays ahead of
// the sums' shared-memory reads.
// STREAM_PINNED=0 gives the plain load back (BenchmarkReadFloor times both).
#ifndef STREAM_PINNED
#define STREAM_PINNED 1
#endif
__device__ __forceinline__ uint4 load_pinned(const void *p) {
#if !STREAM_PINNED
    return *reinterpret_cast<const uint4 *>(p);
#else
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
#endif
}

// row_total returns a row's sum from its lanes' SPLIT slice sums, added as
// group_rows adds its split warps' parts, and zeroes them for the next row.
template <int SPLIT>
__device__ __forceinline__ float row_total(float (&acc)[SPLIT]) {
    float v = SPLIT > 1 ? 0.f : warp_sum(acc[0]);
    if (SPLIT > 1)
#pragma unroll
        for (int sl = 0; sl < SPLIT; sl++) v += warp_sum(acc[sl]);
#pragma unroll
    for (int sl = 0; sl < SPLIT; sl++) acc[sl] = 0.f;
    return v;
}

// stream_stage stages x (and normw) in shared memory as xs, after the PDL
// wait, and returns the norm's scale (1 without normw), leaving x' = x *
// normw in xs: the sum of squares by slice in each lane, as group_rows sums
// it, then each product rounded as group_rows rounds it. cpr is a lane's
// slices a row.
template <int SPLIT, class T>
__device__ __forceinline__ float stream_stage(float *xs, const float *x, const float *__restrict__ normw, float eps,
                                              int K, int cpr, int lane) {
    constexpr int V = 16 / sizeof(T);
    for (int i = threadIdx.x; i < K / 4; i += blockDim.x) {
        cp_async<16>(xs + 4 * i, x + 4 * i, true);
        if (normw) cp_async<16>(xs + K + 4 * i, normw + 4 * i, true);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    if (!normw) return 1.f;
    float ss[SPLIT] = {};
    for (int c0 = 0; c0 < cpr; c0 += SPLIT) {
#pragma unroll
        for (int sl = 0; sl < SPLIT; sl++) {
            int k = ((c0 + sl) * 32 + lane) * V;
            if (k < K) {
                float xv[V], sq = 0.f;
#pragma unroll
                for (int i = 0; i < V; i += 4) unpack(xs + k + i, xv + i);
#pragma unroll
                for (int i = 0; i < V; i++) sq += xv[i] * xv[i];
                ss[sl] += sq;
            }
        }
    }
    float q = row_total(ss);  // the lanes' split sums, added as a row's are
    __syncthreads();          // every warp's sums read x
    for (int k = threadIdx.x; k < K; k += blockDim.x) xs[k] *= xs[K + k];
    __syncthreads();
    return rsqrtf(q / K + eps);
}

// slice_dot is one 16-byte slice's sum, w's V weights times x' at xp, in
// the other entries' order.
template <class T>
__device__ __forceinline__ float slice_dot(uint4 w, const float *xp) {
    constexpr int V = 16 / sizeof(T);
    float xv[V], wv[V], sum = 0.f;
#pragma unroll
    for (int i = 0; i < V; i += 4) {
        float4 q = *reinterpret_cast<const float4 *>(xp + i);
        xv[i] = q.x, xv[i + 1] = q.y, xv[i + 2] = q.z, xv[i + 3] = q.w;
    }
    widen(w, static_cast<const T *>(nullptr), wv);
#pragma unroll
    for (int i = 0; i < V; i++) sum += wv[i] * xv[i];
    return sum;
}

// stream_any is stream_rows for any K (a multiple of V): the lane's items
// in order, item i being slice i % cpr of row r0 + i / cpr, loaded D at a
// time into ring, and all D added before the next D are asked for (loads
// refilled one at a time share the warp's few scoreboards, so a wait for
// the oldest waits for the newest). Slices past K load and add +0, which
// changes no sum (none is -0).
template <int SPLIT, class T, class Pre, class Body>
__device__ __forceinline__ void stream_any(const T *__restrict__ W, int K, const float *x,
                                           const float *__restrict__ normw, float eps, int r0, int r1, int cpr,
                                           Pre pre, Body body) {
    constexpr int V = 16 / sizeof(T), D = STREAM_DEPTH;
    static_assert(D % SPLIT == 0, "a ring slot's slice is its index's");
    extern __shared__ __align__(16) float xs[];
    int lane = threadIdx.x & 31;
    int items = (r1 - r0) * cpr;
    uint4 ring[D];
    int in = r0, ic = 0;  // the next item to load
    auto issue = [&](uint4(&to)[D]) {
#pragma unroll
        for (int u = 0; u < D; u++) {
            int k = (ic * 32 + lane) * V;
            to[u] = in < r1 && k < K ? load_pinned(W + (size_t)in * K + k) : make_uint4(0, 0, 0, 0);
            if (++ic == cpr) ic = 0, in++;
        }
    };
    pdl_release();
    issue(ring);  // read-only weights: safe before the wait
    pdl_wait();
    float scale = stream_stage<SPLIT, T>(xs, x, normw, eps, K, cpr, lane);
    // Each batch: the D items' sums, independent chains with no branch
    // between them, then added in order, a row finished where its last
    // slice lands.
    float acc[SPLIT] = {};
    decltype(pre(0)) p{};
    if (lane == 0 && r0 < r1) p = pre(r0);
    int cn = r0, cc = 0;  // the next item to add
    for (int t = 0; t < items; t += D) {
#if STREAM_DOUBLE
        uint4 next[D];
        if (t + D < items) issue(next);
#endif
        float part[D];
#pragma unroll
        for (int u = 0, c = cc; u < D; u++, c = c + 1 == cpr ? 0 : c + 1) {
            int k = (c * 32 + lane) * V;
            part[u] = k < K ? slice_dot<T>(ring[u], xs + k) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < D; u++) {
            if (t + u < items) {
                acc[u % SPLIT] += part[u];  // cc % SPLIT: rows start at multiples of cpr, t at D's
                if (++cc == cpr) {
                    float v = row_total(acc);
                    if (lane == 0) body(cn, normw ? __fmul_rn(v, scale) : v, p);
                    cc = 0, cn++;
                    if (lane == 0 && cn < r1) p = pre(cn);
                }
            }
        }
#if STREAM_DOUBLE
#pragma unroll
        for (int u = 0; u < D; u++) ring[u] = next[u];
#else
        if (t + D < items) issue(ring);
#endif
    }
}

// stream_whole is stream_rows where a row is cpr whole slices a lane (K =
// cpr * 32 * V) and D divides cpr: a warp's run of rows is then one span of
// (r1 - r0) * cpr 512-byte slices, each lane's at a fixed stride, every
// batch of D falls in one row, and the walk needs no bounds but the run's
// end: its loads take immediate offsets from one pointer, its x' reads
// from one per batch, and a row ends only at a batch's end (about a third
// of stream_any's instructions a slice, which issued for most of its time:
// ncu at 2026-12-04). Two rings take turns, the next batch in flight while
// one is added. Where D is not a multiple of SPLIT, a batch's slot u holds
// split (c0 + u) % SPLIT: acc is kept rotated so that acc[u % SPLIT] is
// that split's, and is back in order at each row's end (cpr is a multiple
// of SPLIT).
template <int SPLIT, int D, class T, class Pre, class Body>
__device__ __forceinline__ void stream_whole(const T *__restrict__ W, int K, const float *x,
                                             const float *__restrict__ normw, float eps, int r0, int r1, int cpr,
                                             Pre pre, Body body) {
    constexpr int V = 16 / sizeof(T), STEP = 32 * V;  // a slice's elements across the warp
    extern __shared__ __align__(16) float xs[];
    int lane = threadIdx.x & 31;
    int batches = (r1 - r0) * (cpr / D);
    const T *w = W + (size_t)r0 * K + lane * V;
    auto issue = [&](uint4(&to)[D]) {
#pragma unroll
        for (int u = 0; u < D; u++) to[u] = load_pinned(w + u * STEP);
        w += D * STEP;
    };
    uint4 ring0[D], ring1[D];
    pdl_release();
    if (batches > 0) issue(ring0);  // read-only weights: safe before the wait
    pdl_wait();
    float scale = stream_stage<SPLIT, T>(xs, x, normw, eps, K, cpr, lane);
    float acc[SPLIT] = {};
    decltype(pre(0)) p{};
    if (lane == 0 && r0 < r1) p = pre(r0);
    int n = r0, c0 = 0;  // the row and slice the next batch starts at
    auto add = [&](const uint4(&ring)[D]) {
        const float *xp = xs + c0 * STEP + lane * V;
        float part[D];
#pragma unroll
        for (int u = 0; u < D; u++) part[u] = slice_dot<T>(ring[u], xp + u * STEP);
#pragma unroll
        for (int u = 0; u < D; u++) acc[u % SPLIT] += part[u];
        if constexpr (D % SPLIT != 0) {
            float was[SPLIT];
#pragma unroll
            for (int sl = 0; sl < SPLIT; sl++) was[sl] = acc[sl];
#pragma unroll
            for (int sl = 0; sl < SPLIT; sl++) acc[sl] = was[(sl + D) % SPLIT];
        }
        if ((c0 += D) == cpr) {
            float v = row_total(acc);
            if (lane == 0) body(n, normw ? __fmul_rn(v, scale) : v, p);
            c0 = 0, n++;
            if (lane == 0 && n < r1) p = pre(n);
        }
    };
    for (int b = 0; b < batches; b += 2) {
        if (b + 1 < batches) issue(ring1);
        add(ring0);
        if (b + 1 == batches) break;
        if (b + 2 < batches) issue(ring0);
        add(ring1);
    }
}

// stream_rows runs body(n, v, pre(n)) in lane 0 for every row n < rows of
// the warp's run, with v = sum_k W[n, k] * x'[k]. pre(n), called in lane 0
// as the row's first slice is added, loads what the body reads besides v.
// A nonzero prefetch asks L2 for the run's weights first (below).
// It walks whole slices (stream_whole) where K allows, any K otherwise.
template <int SPLIT, class T, class Pre, class Body>
__device__ __forceinline__ void stream_rows(const T *__restrict__ W, int K, const float *x,
                                            const float *__restrict__ normw, float eps, int rows, int prefetch,
                                            Pre pre, Body body) {
    constexpr int V = 16 / sizeof(T);
    int warps = blockDim.x >> 5;
    long long wi = (long long)blockIdx.x * warps + (threadIdx.x >> 5), nw = (long long)gridDim.x * warps;
    int r0 = (int)(wi * rows / nw), r1 = (int)((wi + 1) * rows / nw);
    // With prefetch set, the warp asks L2 for its whole run (one bulk
    // prefetch) before the PDL wait: where the step launches this kernel
    // early, its weights stream in while the kernels before it finish.
    if (prefetch && (threadIdx.x & 31) == 0 && r1 > r0)
        prefetch_bulk_l2(W + (size_t)r0 * K, (unsigned)((size_t)(r1 - r0) * K * sizeof(T)));
    int cpr = ((K / V + 31) / 32 + SPLIT - 1) / SPLIT * SPLIT;  // a lane's slices a row, whole splits
#if STREAM_WHOLE
    if (cpr * 32 * V == K && cpr % 4 == 0)
        return stream_whole<SPLIT, 4>(W, K, x, normw, eps, r0, r1, cpr, pre, body);
    if (cpr * 32 * V == K && cpr % 5 == 0)
        return stream_whole<SPLIT, 5>(W, K, x, normw, eps, r0, r1, cpr, pre, body);
#endif
    stream_any<SPLIT>(W, K, x, normw, eps, r0, r1, cpr, pre, body);
}

// GemvPre: the bias and the output's old value of a gemv row (0 where absent).
struct GemvPre {
    float bias, old;
};

template <int SPLIT, class T>
__device__ void gemv_stream(const float *x, const float *__restrict__ normw, float eps, const T *__restrict__ W,
                            const float *__restrict__ bias, float *out, int accumulate, int K, int rows,
                            int prefetch) {
    stream_rows<SPLIT>(
        W, K, x, normw, eps, rows, prefetch,
        [&](int n) { return GemvPre{bias ? bias[n] : 0.f, accumulate ? out[n] : 0.f}; },
        [&](int n, float v, const GemvPre &p) {
            v += p.bias;
            out[n] = accumulate ? p.old + v : v;
        });
}

// STREAM_SPLIT(f, T, args) calls f<S, T> args for the run-time split S of
// 1, 2 or 4 (gpu.Engine launches the streaming entry at no other).
#define STREAM_SPLIT(f, T, args)      \
    switch (split) {                  \
    case 1: f<1, T> args; break;      \
    case 2: f<2, T> args; break;      \
    case 4: f<4, T> args; break;      \
    default: __trap();                \
    }

// Each GEMV has four entries: one row per warp group (gemv_, step_in_) and
// four (gemv_r4_, step_in_r4_), each for up to STEP_MAXB sequences and, with
// _b1, for one; and, for bf16 weights, a fifth on the tensor cores for up to
// STEP_MAXB sequences (gemv_tc_, step_in_tc_; group_tile).
#define GEMV_PARAMS(T)                                                                                         \
    const float *x, int ldx, const float *__restrict__ normw, float eps, const T *__restrict__ W,             \
        const float *__restrict__ bias, float *out, int ldo, int accumulate, int B, int K, int rows, int split
#define GEMV_ARGS x, ldx, normw, eps, W, bias, out, ldo, accumulate, B, K, rows, split
#define STEP_IN_PARAMS(T)                                                                                      \
    const float *h, const float *__restrict__ normw, float eps, const T *__restrict__ W,                       \
        const float *__restrict__ in_bias, const float *__restrict__ conv_w, const float *__restrict__ conv_b, \
        float *__restrict__ win, float *__restrict__ xz, int B, int d, int E, int K, int split
#define STEP_IN_ARGS h, normw, eps, W, in_bias, conv_w, conv_b, win, xz, B, d, E, K, split
#define STEP_GEMV(sfx, T)                                                                                        \
    extern "C" __global__ void gemv_##sfx(GEMV_PARAMS(T)) { gemv<1, STEP_MAXB, 1, TILE_NONE, T>(GEMV_ARGS); }    \
    extern "C" __global__ void gemv_r4_##sfx(GEMV_PARAMS(T)) { gemv<4, STEP_MAXB, 1, TILE_NONE, T>(GEMV_ARGS); } \
    extern "C" __global__ void gemv_b1_##sfx(GEMV_PARAMS(T)) {                                                   \
        gemv<1, 1, STEP_UNROLL_B1, TILE_NONE, T>(GEMV_ARGS);                                                     \
    }                                                                                                            \
    extern "C" __global__ void gemv_r4_b1_##sfx(GEMV_PARAMS(T)) {                                                \
        gemv<4, 1, STEP_UNROLL_B1, TILE_NONE, T>(GEMV_ARGS);                                                     \
    }                                                                                                            \
    extern "C" __global__ void step_in_##sfx(STEP_IN_PARAMS(T)) {                                                \
        step_in<1, STEP_MAXB, 1, TILE_NONE, T>(STEP_IN_ARGS);                                                    \
    }                                                                                                            \
    extern "C" __global__ void step_in_r4_##sfx(STEP_IN_PARAMS(T)) {                                             \
        step_in<4, STEP_MAXB, 1, TILE_NONE, T>(STEP_IN_ARGS);                                                    \
    }                                                                                                            \
    extern "C" __global__ void step_in_b1_##sfx(STEP_IN_PARAMS(T)) {                                             \
        step_in<1, 1, STEP_UNROLL_B1, TILE_NONE, T>(STEP_IN_ARGS);                                               \
    }                                                                                                            \
    extern "C" __global__ void step_in_r4_b1_##sfx(STEP_IN_PARAMS(T)) {                                          \
        step_in<4, 1, STEP_UNROLL_B1, TILE_NONE, T>(STEP_IN_ARGS);                                               \
    }
EACH_DTYPE(STEP_GEMV)

// The streaming entry: gemv_sb1_ takes gemv_'s parameters (B must be 1;
// ldx unused) and prefetch: nonzero, each warp asks L2 for its rows before
// its PDL wait (Engine.GEMVStreamPrefetch).
#define STREAM_GEMV(sfx, T)                                                                                     \
    extern "C" __global__ void __launch_bounds__(STREAM_THREADS, STREAM_BLOCKS)                                 \
        gemv_sb1_##sfx(GEMV_PARAMS(T), int prefetch) {                                                          \
        if (B != 1) __trap();                                                                                   \
        STREAM_SPLIT(gemv_stream, T, (x, normw, eps, W, bias, out, accumulate, K, rows, prefetch))              \
    }
EACH_DTYPE(STREAM_GEMV)

// The tensor-core entries, bf16 only: split3's parts of x in f16 would
// overflow past 65504, and x here is the residual stream before its norm.
// Grid ceil(rows / 16), block 32 * split (split up to STEP_TILE_MAXW
// warps; gpu.Engine.GEMVTileWarps). The _tc_split entries take a grid
// (ceil(rows / 16), parts): each tile's k split over parts blocks, which
// sum through scratch and count (TileParts; gpu.Engine.GEMVTileParts).
// STEP_TILE_THREADS and STEP_TILE_MINB bound their blocks (threads, and
// blocks an SM, so registers a thread).
#ifndef STEP_TILE_THREADS
#define STEP_TILE_THREADS (32 * STEP_TILE_MAXW)
#endif
#ifndef STEP_TILE_MINB
#define STEP_TILE_MINB 2
#endif
#if PLAIN_ENTRIES  // the plain entries, to the end of the file: the tensor-core GEMVs, the scan steps
extern "C" __global__ void __launch_bounds__(STEP_TILE_THREADS, STEP_TILE_MINB) gemv_tc_bf16(GEMV_PARAMS(bf16)) {
    gemv<16, STEP_MAXB, 1, TILE_WHOLE, bf16>(GEMV_ARGS);
}
extern "C" __global__ void __launch_bounds__(STEP_TILE_THREADS, STEP_TILE_MINB) step_in_tc_bf16(STEP_IN_PARAMS(bf16)) {
    step_in<16, STEP_MAXB, 1, TILE_WHOLE, bf16>(STEP_IN_ARGS);
}
extern "C" __global__ void __launch_bounds__(STEP_TILE_THREADS, STEP_TILE_MINB)
    gemv_tc_split_bf16(GEMV_PARAMS(bf16), float *scratch, unsigned *count) {
    gemv<16, STEP_MAXB, 1, TILE_SPLIT, bf16>(GEMV_ARGS, TileParts{scratch, count});
}
extern "C" __global__ void __launch_bounds__(STEP_TILE_THREADS, STEP_TILE_MINB)
    step_in_tc_split_bf16(STEP_IN_PARAMS(bf16), float *scratch, unsigned *count) {
    step_in<16, STEP_MAXB, 1, TILE_SPLIT, bf16>(STEP_IN_ARGS, TileParts{scratch, count});
}

// step_scan_f32: a warp per (channel c, sequence b); grid (ceil(E /
// STEP_WARPS), B), block 32 * STEP_WARPS. The lanes split dt_proj's R
// products, then the N states, and sum C·s across the warp.
//
//   dt = softplus(dbl[b, :R] · W_dt[c, :] + dt_bias[c])
//   s[n] = exp2(dt * A2[c, n]) * s[n] + dt * B[n] * u       (B, C from dbl)
//   y[b, c] = (sum_n s[n] * C[n] + D[c] * u) * silu(z)
//
// With parts set, y[b, c] also goes there as out_proj's x operand on the
// warpgroup GEMV (store_parts; gemv_wg.cu), rows of E.
//
// Every load is issued before the first result it feeds: the weights
// (W_dt's row, dt_bias, A2's row, D) before the wait, which ptxas would
// otherwise hoist above them (they come from HBM, the activations from L2),
// and the activations and the state right after it. So after the wait a
// warp pays one memory round trip, not four in a row (dt_low, then
// dt_bias, then the state with B and C, then D and z). Ranks up to
// 32 * STEP_RL and states up to 32 * STEP_NL are held in registers; any
// rest is read in a loop. The arithmetic, and its order, is the plain
// loops'.
#define STEP_RL 4
#define STEP_NL 2

// At most 40 registers, six blocks an SM: at 48 (five) the 1.4b B=8 step's
// kernel took 9% longer.
extern "C" __global__ void __launch_bounds__(32 * STEP_WARPS, 6)
    step_scan_f32(const float *dbl, int ldd, int R, const float *__restrict__ W_dt,
                  const float *__restrict__ dt_bias, const float *__restrict__ A2, const float *__restrict__ Dskip,
                  const float *xz, float *__restrict__ state, float *__restrict__ y, int E, int N,
                  bf16 *__restrict__ parts) {
    pdl_release();
    int lane = threadIdx.x & 31, c = blockIdx.x * STEP_WARPS + (threadIdx.x >> 5), b = blockIdx.y;
    if (c >= E) return;  // reads nothing, so need not wait
    const float *wdt = W_dt + (size_t)c * R, *a2 = A2 + (size_t)c * N;
    float w[STEP_RL], a[STEP_NL];
#pragma unroll
    for (int i = 0; i < STEP_RL; i++) w[i] = lane + 32 * i < R ? wdt[lane + 32 * i] : 0.f;
#pragma unroll
    for (int i = 0; i < STEP_NL; i++) a[i] = lane + 32 * i < N ? a2[lane + 32 * i] : 0.f;
    float bias = dt_bias[c], dskip = Dskip[c];
    unsigned dep = __float_as_uint(bias) ^ __float_as_uint(dskip);  // the wait after the weights' loads
#pragma unroll
    for (int i = 0; i < STEP_RL; i++) dep ^= __float_as_uint(w[i]);
#pragma unroll
    for (int i = 0; i < STEP_NL; i++) dep ^= __float_as_uint(a[i]);
    pdl_wait_after(dep);

    const float *row = dbl + (size_t)b * ldd;
    float *s = state + ((size_t)b * E + c) * N;
    float lo[STEP_RL], sB[STEP_NL], sC[STEP_NL], sv[STEP_NL];
#pragma unroll
    for (int i = 0; i < STEP_RL; i++) lo[i] = lane + 32 * i < R ? row[lane + 32 * i] : 0.f;
#pragma unroll
    for (int i = 0; i < STEP_NL; i++) {
        int n = lane + 32 * i;
        sB[i] = n < N ? row[R + n] : 0.f;
        sC[i] = n < N ? row[R + N + n] : 0.f;
        sv[i] = n < N ? s[n] : 0.f;
    }
    float u = xz[(size_t)b * 2 * E + c], z = xz[(size_t)b * 2 * E + E + c];

    float dt = 0.f;
#pragma unroll
    for (int i = 0; i < STEP_RL; i++)
        if (lane + 32 * i < R) dt += lo[i] * w[i];
    for (int k = lane + 32 * STEP_RL; k < R; k += 32) dt += row[k] * wdt[k];
    dt = softplus_f(warp_sum(dt) + bias);
    float du = dt * u, acc = 0.f;
#pragma unroll
    for (int i = 0; i < STEP_NL; i++) {
        int n = lane + 32 * i;
        if (n < N) {
            float v = ex2(dt * a[i]) * sv[i] + du * sB[i];
            s[n] = v;
            acc += v * sC[i];
        }
    }
    for (int n = lane + 32 * STEP_NL; n < N; n += 32) {
        float v = ex2(dt * a2[n]) * s[n] + du * row[R + n];
        s[n] = v;
        acc += v * row[R + N + n];
    }
    acc = warp_sum(acc);
    if (lane == 0) {
        float out = (acc + dskip * u) * silu_f(z);
        y[(size_t)b * E + c] = out;
        if (parts) store_parts(parts, E, b, c, out);
    }
}

// step_scan_batch_f32: step_scan_f32 for a batch (2 <= B <= STEP_MAXB) with
// N <= 32, a warp a channel for every sequence; grid (ceil(E /
// STEP_WARPS)), block 32 * STEP_WARPS, dynamic shared memory B (R + 2N)
// floats. A channel's weights are read once, not B times, and the block
// stages the B rows of dbl, which every channel reads, once. A warp's half
// h takes sequences b = 2p + h, lane n = lane % 16 its states n and
// n + 16. The sums are step_scan_f32's, in its order.
extern "C" __global__ void __launch_bounds__(32 * STEP_WARPS)
    step_scan_batch_f32(const float *dbl, int ldd, int R, const float *__restrict__ W_dt,
                        const float *__restrict__ dt_bias, const float *__restrict__ A2,
                        const float *__restrict__ Dskip, const float *xz, float *__restrict__ state,
                        float *__restrict__ y, int E, int N, int B, bf16 *__restrict__ parts) {
    constexpr int PAIRS = STEP_MAXB / 2;
    if (B > STEP_MAXB || N > 32) __trap();  // gpu's decode takes step_scan_f32 then
    pdl_release();
    extern __shared__ float rows[];  // [B][R + 2N]
    int lane = threadIdx.x & 31, c = blockIdx.x * STEP_WARPS + (threadIdx.x >> 5), h = lane >> 4, n = lane & 15;
    int width = R + 2 * N;
    bool live = c < E;
    const float *wdt = W_dt + (size_t)min(c, E - 1) * R, *a2 = A2 + (size_t)min(c, E - 1) * N;
    float w[STEP_RL], a[2];
#pragma unroll
    for (int i = 0; i < STEP_RL; i++) w[i] = lane + 32 * i < R ? wdt[lane + 32 * i] : 0.f;
#pragma unroll
    for (int j = 0; j < 2; j++) a[j] = n + 16 * j < N ? a2[n + 16 * j] : 0.f;
    float bias = dt_bias[min(c, E - 1)], dskip = Dskip[min(c, E - 1)];
    unsigned dep = __float_as_uint(bias) ^ __float_as_uint(dskip) ^ __float_as_uint(a[0]) ^ __float_as_uint(a[1]);
#pragma unroll
    for (int i = 0; i < STEP_RL; i++) dep ^= __float_as_uint(w[i]);
    pdl_wait_after(dep);

    // One round trip: the rows into shared memory, and this lane's states,
    // u and z for each of its sequences into registers.
    for (int i = threadIdx.x; i < B * width; i += blockDim.x)
        cp_async<4>(&rows[i], dbl + (size_t)(i / width) * ldd + i % width, true);
    cp_async_commit();
    float sv[PAIRS][2], u[PAIRS], z[PAIRS];
#pragma unroll
    for (int p = 0; p < PAIRS; p++) {
        int b = 2 * p + h;
        bool mine = live && b < B;
        const float *s = state + ((size_t)b * E + c) * N;
        sv[p][0] = mine && n < N ? s[n] : 0.f;
        sv[p][1] = mine && n + 16 < N ? s[n + 16] : 0.f;
        u[p] = mine ? xz[(size_t)b * 2 * E + c] : 0.f;
        z[p] = mine ? xz[(size_t)b * 2 * E + E + c] : 0.f;
    }
    cp_async_wait<0>();
    __syncthreads();
    if (!live) return;

    // Every sequence's time step, as step_scan_f32 sums it (warp_sum's
    // order), the B sums' chains side by side.
    float dt[STEP_MAXB];
#pragma unroll
    for (int b = 0; b < STEP_MAXB; b++) {
        dt[b] = 0.f;
        if (b < B) {
            const float *row = rows + b * width;
#pragma unroll
            for (int i = 0; i < STEP_RL; i++)
                if (lane + 32 * i < R) dt[b] += row[lane + 32 * i] * w[i];
            for (int k = lane + 32 * STEP_RL; k < R; k += 32) dt[b] += row[k] * wdt[k];
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int b = 0; b < STEP_MAXB; b++) dt[b] += __shfl_xor_sync(0xffffffffu, dt[b], o);
#pragma unroll
    for (int b = 0; b < STEP_MAXB; b++) dt[b] = softplus_f(dt[b] + bias);
    // The states: both halves of the warp run every pair's shuffles, the
    // half past B with nothing to add. C·s sums as step_scan_f32's
    // warp_sum does: the products rounded, n with n + 16, then over 16 lanes.
#pragma unroll
    for (int p = 0; p < PAIRS; p++) {
        if (2 * p >= B) break;
        int b = 2 * p + h;
        bool mine = b < B;
        float step = h ? dt[2 * p + 1] : dt[2 * p], du = step * u[p], cs[2] = {0.f, 0.f};
        const float *row = rows + min(b, B - 1) * width;
        float *s = state + ((size_t)b * E + c) * N;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            if (mine && n + 16 * j < N) {
                float v = ex2(step * a[j]) * sv[p][j] + du * row[R + n + 16 * j];
                s[n + 16 * j] = v;
                cs[j] = __fmul_rn(v, row[R + N + n + 16 * j]);
            }
        }
        float acc = cs[0] + cs[1];
        for (int o = 8; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (mine && n == 0) {
            float out = (acc + dskip * u[p]) * silu_f(z[p]);
            y[(size_t)b * E + c] = out;
            if (parts) store_parts(parts, E, b, c, out);
        }
    }
}
#endif  // PLAIN_ENTRIES
