// Device helpers every kernel source shares; kernels.Source puts this file,
// after dtype.cuh, in front of each.

// warp_sum returns the sum of v over the warp, in every lane.
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// block_sum returns the sum of v over the block, in every thread.
__device__ float block_sum(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    int warps = (blockDim.x + 31) >> 5;
    v = threadIdx.x < warps ? part[threadIdx.x] : 0.f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) part[0] = v;
    __syncthreads();
    float total = part[0];
    __syncthreads();  // part is reused by the next call
    return total;
}

// argmax_better: whether (v, i) ranks before (best, at): a larger value, or
// an equal one at a lower index (the host's argmax rule).
__device__ __forceinline__ bool argmax_better(float v, int i, float best, int at) {
    return v > best || (v == best && i < at);
}

// argmax_warp: lane 0's (best, at) becomes the best of the warp's.
__device__ __forceinline__ void argmax_warp(float &best, int &at) {
    for (int off = 16; off > 0; off >>= 1) {
        float v = __shfl_down_sync(0xffffffffu, best, off);
        int i = __shfl_down_sync(0xffffffffu, at, off);
        if (argmax_better(v, i, best, at)) best = v, at = i;
    }
}

// argmax_block: every thread's (best, at) becomes the best of the block's
// (blockDim.x a multiple of 32, at most 1024), through warp_vals and
// warp_ats in shared memory, one a warp. Every thread must call it.
__device__ __forceinline__ void argmax_block(float &best, int &at, float *warp_vals, int *warp_ats) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    argmax_warp(best, at);
    if (lane == 0) warp_vals[warp] = best, warp_ats[warp] = at;
    __syncthreads();
    const bool held = lane < blockDim.x / 32;
    best = held ? warp_vals[lane] : __int_as_float(0xff800000), at = held ? warp_ats[lane] : 0x7fffffff;
    argmax_warp(best, at);
    best = __shfl_sync(0xffffffffu, best, 0), at = __shfl_sync(0xffffffffu, at, 0);
    __syncthreads();  // warp_vals and warp_ats are free again
}

// put_pick: row b's picked token id to ids[b] and, where mirror is not
// null, to mirror[b] too: page-locked host memory (gpu.Decoder's queue),
// which the host reads once the kernel is done, without a copy.
__device__ __forceinline__ void put_pick(long long *ids, long long *mirror, int b, long long id) {
    ids[b] = id;
    if (mirror) mirror[b] = id;
}

// exp2 on the special function unit, results below 2^-126 flushed to zero (a
// decay that small is zero to the state); relative error 2^-22.
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// softplus(x) = log(1 + e^x), as max(x, 0) + log1p(e^-|x|), and log1p(v)
// for v in (0, 1] as 2 atanh(q) = 2 (q + q^3/3 + q^5/5 + ...) with
// q = v / (2 + v) <= 1/3: six terms leave a truncation error under 2^-26.
// Against float64, relative error below 2e-6 (the rounding of -|x| log2(e),
// as in __expf); above 20 it rounds to x, PyTorch's threshold. e^-|x|
// comes from ex2 (FTZ), which is __expf's value wherever that is a normal
// number; below x = -87 it gives 0 where softplus(x) is under 2^-126. About
// 12 instructions against about 40 for log1pf(__expf(x)).
__device__ __forceinline__ float softplus_f(float x) {
    float v = ex2(-1.44269504088896341f * fabsf(x)), q = __fdividef(v, 2.f + v), w = q * q;
    float p = 1.f / 11;
    p = p * w + 1.f / 9;
    p = p * w + 1.f / 7;
    p = p * w + 1.f / 5;
    p = p * w + 1.f / 3;
    p = p * w + 1.f;
    return fmaxf(x, 0.f) + 2.f * q * p;
}

// silu(z) = z / (1 + e^-z). e^-z through ex2 (FTZ): a result under 2^-126
// adds nothing to 1 either way, so this is __expf's value in two
// instructions instead of five.
__device__ __forceinline__ float silu_f(float z) { return __fdividef(z, 1.f + ex2(-1.44269504088896341f * z)); }

// store_parts writes v as three bf16 parts, hi + mid + lo (each the top
// 16 bits of what is left: a truncation, and what it leaves is exact in
// f32, so the parts carry all 24 significant bits), into parts [3][8][K]
// at column k of row 8 p + b: the x operand of the warpgroup GEMVs
// (gemv_wg.cu), each part a row of eight sequences' k.
__device__ __forceinline__ void store_parts(bf16 *parts, int K, int b, int k, float v) {
#pragma unroll
    for (int p = 0; p < 3; p++) {
        unsigned u = __float_as_uint(v) & 0xffff0000u;
        parts[(size_t)(8 * p + b) * K + k] = bf16{(unsigned short)(u >> 16)};
        v -= __uint_as_float(u);
    }
}

// Programmatic dependent launch (sm_90 and newer; no-ops before). A kernel
// launched with PDL (cuda.Function.LaunchMaybePDL) may start while the
// previous kernel on its stream runs: pdl_release lets the next kernel start
// early, and pdl_wait blocks until the previous kernel has finished and its
// writes are visible. Before pdl_wait a kernel may only read what no kernel
// in flight writes (weights). Launched the ordinary way, both return at once.
//
// Read what the previous kernel writes through plain pointers, never
// const __restrict__ ones: through those the compiler may use the
// non-coherent path (LDG.CONSTANT), which assumes the bytes never change
// while the kernel runs, and ptxas then hoists such loads above
// griddepcontrol.wait. The decode step's scan read x_proj's output that
// way; a change elsewhere in the kernel moved seven of its loads above the
// wait, and the step read stale rows (bench/NOTES.md, 2026-12-03 18:14).
__device__ __forceinline__ void pdl_release() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// lo32 is the low 32 bits of a pointer, for folding it into a value.
__device__ __forceinline__ unsigned lo32(const void *p) { return (unsigned)(size_t)p; }

// row_quads: quad(i, row[i .. i + 4)) for each aligned 16 bytes of row[0
// .. n) and one(i, row[i]) for each id before and after them, split over the
// block's threads. Each thread meets its ids in increasing order. It has
// ROW_EACH_DEPTH float4 loads in flight before it uses any: a block that
// waits on one 4-byte load a thread at a time is bound by their latency
// (topk_rows_f32, whose passes put shared atomics between its loads: 25.5
// µs a row of 50280 that way, 19.2 with this).
#define ROW_EACH_DEPTH 4
template <typename Q, typename F>
__device__ __forceinline__ void row_quads(const float *__restrict__ row, int n, Q &&quad, F &&one) {
    const int head = min(n, (int)((16 - lo32(row) % 16) % 16 / 4));  // ids before the first 16-byte boundary
    for (int i = threadIdx.x; i < head; i += blockDim.x) one(i, row[i]);
    const float4 *body = reinterpret_cast<const float4 *>(row + head);
    const int quads = (n - head) / 4;
    for (int q0 = threadIdx.x; q0 < quads; q0 += ROW_EACH_DEPTH * blockDim.x) {
        float4 v[ROW_EACH_DEPTH];
#pragma unroll
        for (int d = 0; d < ROW_EACH_DEPTH; d++) {
            const int q = q0 + d * blockDim.x;
            if (q < quads) v[d] = __ldg(body + q);
        }
#pragma unroll
        for (int d = 0; d < ROW_EACH_DEPTH; d++) {
            const int q = q0 + d * blockDim.x;
            if (q < quads) quad(head + 4 * q, v[d]);
        }
    }
    for (int i = head + 4 * quads + threadIdx.x; i < n; i += blockDim.x) one(i, row[i]);
}

// row_each: f(i, row[i]) for each i in [0, n), as row_quads reads them.
template <typename F>
__device__ __forceinline__ void row_each(const float *__restrict__ row, int n, F &&f) {
    row_quads(
        row, n, [&](int i, float4 v) { f(i, v.x), f(i + 1, v.y), f(i + 2, v.z), f(i + 3, v.w); }, f);
}

// AFTER_DEP(d) opens an inline-PTX block that sets the predicate p to
// d != ~d, which always holds: an instruction under @p then comes after
// everything the register d depends on, where an empty asm that only uses d
// emits nothing for ptxas to order. The block ends with "}".
#define AFTER_DEP(d) "{\n\t.reg .pred p;\n\t.reg .b32 n;\n\tnot.b32 n, " d ";\n\tsetp.ne.b32 p, " d ", n;\n\t"

// pdl_wait_after is pdl_wait once dep has been computed. ptxas schedules a
// plain pdl_wait as early as it can, ahead of arithmetic and loads written
// before it that do not touch memory the wait guards; this one comes after
// everything dep depends on (fold the values to be ready into dep).
__device__ __forceinline__ void pdl_wait_after(unsigned dep) {
#if __CUDA_ARCH__ >= 900
    asm volatile(AFTER_DEP("%0") "@p griddepcontrol.wait;\n\t}" ::"r"(dep) : "memory");
#endif
}

// timeline_store stores t as event of this block's row in tl (events a
// row, the first limit blocks by their linear index): the diagnostic
// timelines of scan_onepass.cu (OP_TIMELINE) and xproj.cu (XP_TIMELINE).
__device__ __forceinline__ void timeline_store(unsigned long long *tl, int events, int limit, int event,
                                               unsigned long long t) {
    const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    if (block < limit) tl[block * events + event] = t;
}

// timeline_mark stores %globaltimer's nanoseconds (timeline_store).
__device__ __forceinline__ void timeline_mark(unsigned long long *tl, int events, int limit, int event) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    timeline_store(tl, events, limit, event, t);
}

// timeline_mark_after is timeline_mark once dep has been computed: the
// timer is read under AFTER_DEP, so not before the loads dep folds land.
__device__ __forceinline__ void timeline_mark_after(unsigned long long *tl, int events, int limit, int event,
                                                    unsigned dep) {
    unsigned long long t;
    asm volatile(AFTER_DEP("%1") "mov.u64 %0, 0;\n\t@p mov.u64 %0, %%globaltimer;\n\t}" : "=l"(t) : "r"(dep) : "memory");
    timeline_store(tl, events, limit, event, t);
}

// prefetch_l2 asks for the 128-byte line holding p in L2, without waiting.
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// prefetch_bulk_l2 asks L2 for the n bytes at p (both multiples of 16)
// as one bulk prefetch, without waiting (sm_90 and newer; a no-op before).
__device__ __forceinline__ void prefetch_bulk_l2(const void *p, unsigned n) {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
#endif
}

// prefetch_share asks L2 for the calling block's share of the n bytes at p,
// without waiting: the grid's blocks split the span into slices of whole
// 16-byte pieces, and each block's first thread queues its slice as one
// bulk prefetch (sm_90 and newer; a no-op before, and for a null p). p is
// 16-byte aligned.
__device__ __forceinline__ void prefetch_share(const void *p, long long n) {
#if __CUDA_ARCH__ >= 900
    if (p == nullptr || threadIdx.x + threadIdx.y + threadIdx.z != 0) return;
    long long blocks = (long long)gridDim.x * gridDim.y * gridDim.z;
    long long b = blockIdx.x + gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
    long long pieces = n >> 4, per = (pieces + blocks - 1) / blocks, lo = b * per, hi = min(pieces, lo + per);
    if (lo < hi) prefetch_bulk_l2((const char *)p + 16 * lo, (unsigned)(16 * (hi - lo)));
#endif
}

// Asynchronous copies from global to shared memory (cp.async, sm_80 and
// newer; before that a plain load and store). A copy of n bytes (4, 8 or 16;
// the addresses aligned to n) reads src only when full is set, else fills
// zeros. Copies issued between two cp_async_commit calls form a group;
// cp_async_wait<k>() waits until at most k groups are in flight, and a
// barrier after it makes every thread's copies visible to the block.
__device__ __forceinline__ unsigned shared_addr(const void *p) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
// cp_async_s copies to a shared-memory address (shared_addr's), so a caller
// that keeps its destinations as 32-bit offsets does no 64-bit address
// arithmetic; cp_async takes a pointer to shared memory instead.
template <int n>
__device__ __forceinline__ void cp_async_s(unsigned dst, const void *src, bool full) {
    static_assert(n == 4 || n == 8 || n == 16, "cp.async copies 4, 8 or 16 bytes");
#if __CUDA_ARCH__ >= 800
    if (n == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(full ? 16 : 0) : "memory");
    else if (n == 8)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src), "r"(full ? 8 : 0) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(full ? 4 : 0) : "memory");
#else
    if (n == 16) {
        uint4 v = full ? *reinterpret_cast<const uint4 *>(src) : make_uint4(0, 0, 0, 0);
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                     : "memory");
    } else if (n == 8) {
        uint2 v = full ? *reinterpret_cast<const uint2 *>(src) : make_uint2(0, 0);
        asm volatile("st.shared.v2.u32 [%0], {%1, %2};" ::"r"(dst), "r"(v.x), "r"(v.y) : "memory");
    } else {
        unsigned v = full ? *reinterpret_cast<const unsigned *>(src) : 0u;
        asm volatile("st.shared.u32 [%0], %1;" ::"r"(dst), "r"(v) : "memory");
    }
#endif
}
template <int n>
__device__ __forceinline__ void cp_async(void *dst, const void *src, bool full) {
    cp_async_s<n>(shared_addr(dst), src, full);
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int k>
__device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(k) : "memory");
#endif
}

// each_copy calls f(i) for this thread's share of i < COUNT, COUNT copies
// spread over a block of THREADS threads: a loop of compile-time length, so
// the divisions in f are shifts and ptxas keeps what does not change from
// one call to the next out of the caller's loop. (Written as loops over i
// with a stride of blockDim.x, the staged scan's copies cost about 22
// instructions a position, a fifth of the pass.)
template <int THREADS, int COUNT, class F>
__device__ __forceinline__ void each_copy(F f) {
#pragma unroll
    for (int it = 0; it < (COUNT + THREADS - 1) / THREADS; it++) {
        int i = it * THREADS + threadIdx.x;
        if (COUNT % THREADS == 0 || i < COUNT) f(i);
    }
}

// TF32 on the tensor cores (dt_proj_tc in dtproj.cu, and the time step
// that scan_onepass.cu computes in its tiles).
// split_tf32 returns v's TF32 head, v with its low 13 mantissa bits
// cleared, and the rest, v - hi, which is exact. (Truncating takes one
// integer instruction; cvt.rna.tf32.f32, rounding to nearest, is four on
// sm_90, and they made the kernel bound by the integer pipe: 59 us a 1.4b
// layer, its tensor pipe 37% busy.)
__device__ __forceinline__ void split_tf32(float v, unsigned &hi, unsigned &lo) {
    hi = __float_as_uint(v) & 0xffffe000u;
    lo = __float_as_uint(v - __uint_as_float(hi));
}

// round_tf32 returns v rounded to TF32 to nearest, ties away from zero (as
// cvt.rna.tf32.f32, in two instructions instead of four).
__device__ __forceinline__ unsigned round_tf32(float v) { return (__float_as_uint(v) + 0x1000u) & 0xffffe000u; }

// mma_tf32 adds a (16 x 8, rows) times b (8 x 8, columns) to d, the PTX
// fragment layouts of mma.m16n8k8 .tf32: with g = lane / 4 and q = lane % 4,
// a holds (g, q), (g + 8, q), (g, q + 4), (g + 8, q + 4); b holds (q, g),
// (q + 4, g); d holds (g, 2q), (g, 2q + 1), (g + 8, 2q), (g + 8, 2q + 1).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    __trap();  // gpu.DTProj and gpu.Scan pick these kernels only on sm_80 and newer
#endif
}

// 16-bit tensor-core products (mma.m16n8k16, sm_80 and newer: conv_xproj.cu
// and xproj.cu; they trap before). ldmatrix4 loads four 8x8 tiles of 16-bit
// values from shared memory: lane l gives the address of a row of tile
// l / 8 and receives its share of each tile. ldmatrix2 loads two: lanes
// 0-15 give the addresses, and r[0], r[1] the shares.
__device__ __forceinline__ void ldmatrix4(unsigned addr, unsigned (&r)[4]) {
#if __CUDA_ARCH__ >= 800
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#else
    __trap();
#endif
}
__device__ __forceinline__ void ldmatrix2(unsigned addr, unsigned (&r)[4]) {
#if __CUDA_ARCH__ >= 800
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
#else
    __trap();
#endif
}

// mma16816 is d += a b for a 16x16 tile a (row-major fragments) and a 16x8
// tile b (column-major), in T with f32 accumulation.
template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
#if __CUDA_ARCH__ >= 800
#define MMA16816(T, ptx)                                                                                       \
    template <>                                                                                                \
    __device__ __forceinline__ void mma16816<T>(float(&d)[4], const unsigned(&a)[4], unsigned b0, unsigned b1) { \
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." ptx "." ptx ".f32 {%0, %1, %2, %3}, "             \
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                                            \
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                           \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                           \
    }
#else
#define MMA16816(T, ptx)                                                                                       \
    template <>                                                                                                \
    __device__ __forceinline__ void mma16816<T>(float(&)[4], const unsigned(&)[4], unsigned, unsigned) { __trap(); }
#endif
MMA16816(bf16, "bf16")
MMA16816(f16, "f16")

// mma_k16 adds one k-step of 16 to a warp's NW tiles of 16 x 8: the A
// fragment from ldmatrix4 at aaddr (rows 16, this lane's row and half), and
// each tile's B fragment (8 rows of W, k-major, pitch elements apart) from
// bbase + n 8 pitch elements, two tiles to an ldmatrix4 and the odd one
// last to an ldmatrix2. kbytes is the step's offset in bytes along k, in
// both operands.
template <class T, int NW>
__device__ __forceinline__ void mma_k16(float (&acc)[NW][4], unsigned aaddr, unsigned bbase, int pitch, int kbytes) {
    unsigned a[4];
    ldmatrix4(aaddr + kbytes, a);
#pragma unroll
    for (int n = 0; n < NW; n += 2) {
        unsigned bf[4];
        if (n + 1 < NW) {
            ldmatrix4(bbase + n * 8 * pitch * 2 + kbytes, bf);
            mma16816<T>(acc[n + 1], a, bf[2], bf[3]);
        } else {
            ldmatrix2(bbase + n * 8 * pitch * 2 + kbytes, bf);
        }
        mma16816<T>(acc[n], a, bf[0], bf[1]);
    }
}
