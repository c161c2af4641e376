// Sampled decoding's candidates, where the logits are:
//
//   topk_rows_f32: ids[b, 0 .. k) and vals[b, 0 .. k) = the k best-ranked
//                  tokens of logits[b, 0 .. V) and their logits, in no
//                  particular order; or every id -1 when the row holds NaN.
//
// Tokens rank as the host's sampler ranks them (mambago/sample.go): by
// logit, the lower id first among equal logits, -0 equal to +0. 1 <= k <= V.
//
// Grid (B), one block a row, TOPK_THREADS threads. A radix select over the
// logits' order-preserving 32-bit keys (topk_key) finds the k-th largest key
// T in three passes over the row, of its top 12 bits, then 10 and 10, each a
// histogram in shared memory of the keys that match the digits found so far.
// Every token with a key above T is a candidate, and `tied` of those with
// key T, the lowest ids: where more than `tied` share T, each warp counts
// them in its own contiguous run of ids, and a warp's tokens take the ranks
// after the runs before it (two more passes); otherwise one.

#define TOPK_THREADS 1024
#define TOPK_WARPS (TOPK_THREADS / 32)
#define TOPK_BINS 4096  // the first pass's 12 bits

// topk_key: a key whose unsigned order is v's order, -0 the same as +0.
__device__ __forceinline__ unsigned topk_key(float v) {
    unsigned u = __float_as_uint(v);
    if (u == 0x80000000u) u = 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// topk_scan_down: each thread's count of the keys in bins above its own
// (thread 0 holds the top bins), over the block: the exclusive prefix sum of
// mine in thread order. Every thread must call it.
__device__ __forceinline__ unsigned topk_scan_down(unsigned mine, unsigned *warp_sums) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    unsigned incl = mine;
    for (int off = 1; off < 32; off <<= 1) {
        unsigned up = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += up;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        unsigned w = warp_sums[lane], wincl = w;  // TOPK_WARPS = 32: one a lane
        for (int off = 1; off < 32; off <<= 1) {
            unsigned up = __shfl_up_sync(0xffffffffu, wincl, off);
            if (lane >= off) wincl += up;
        }
        warp_sums[lane] = wincl - w;
    }
    __syncthreads();
    unsigned before = warp_sums[warp] + incl - mine;
    __syncthreads();  // warp_sums is reused
    return before;
}

extern "C" __global__ void __launch_bounds__(TOPK_THREADS)
    topk_rows_f32(const float *__restrict__ logits, int V, int k, int *__restrict__ ids, float *__restrict__ vals) {
    __shared__ unsigned hist[TOPK_BINS];
    __shared__ unsigned warp_sums[TOPK_WARPS];
    __shared__ unsigned found_digit, found_above, taken;
    const float *row = logits + (long long)blockIdx.x * V;
    int *out_ids = ids + (long long)blockIdx.x * k;
    float *out_vals = vals + (long long)blockIdx.x * k;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

    // The radix select. Invariant: the keys that match prefix on mask
    // number at least want, and want of them (the largest) are still to
    // be placed among the candidates.
    unsigned prefix = 0, mask = 0, want = k, at_t = 0;
    for (int pass = 0; pass < 3; pass++) {
        const int shift = pass == 0 ? 20 : 10 * (2 - pass), bins = pass == 0 ? TOPK_BINS : 1024;
        for (int i = threadIdx.x; i < bins; i += TOPK_THREADS) hist[i] = 0;
        if (threadIdx.x == 0) taken = 0;
        __syncthreads();
        bool nan = false;
        for (int i = threadIdx.x; i < V; i += TOPK_THREADS) {
            float v = row[i];
            if (v != v) {
                nan = true;
                continue;
            }
            unsigned key = topk_key(v);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & (bins - 1)], 1u);
        }
        if (pass == 0 && __syncthreads_or(nan)) {
            for (int i = threadIdx.x; i < k; i += TOPK_THREADS) out_ids[i] = -1;
            return;
        }
        __syncthreads();
        // Thread t holds bins [bins - (t+1) per, bins - t per): the top ones first.
        const int per = bins / TOPK_THREADS, hi = bins - threadIdx.x * per;
        unsigned mine = 0;
        for (int d = hi - 1; d >= hi - per; d--) mine += hist[d];
        unsigned above = topk_scan_down(mine, warp_sums);
        if (above < want && above + mine >= want) {  // one thread: the bin where the count reaches want
            for (int d = hi - 1; d >= hi - per; d--) {
                if (above + hist[d] >= want) {
                    found_digit = d, found_above = above;
                    break;
                }
                above += hist[d];
            }
        }
        __syncthreads();
        prefix |= found_digit << shift;
        mask |= (unsigned)(bins - 1) << shift;
        want -= found_above;
        at_t = hist[found_digit];
        __syncthreads();  // hist and found_* are rewritten by the next pass
    }
    // prefix is T; at_t keys equal it, of which the want lowest ids are taken.
    const unsigned T = prefix, tied = want;
    const unsigned above_t = k - tied;  // slots [0, above_t) for keys above T
    if (tied == at_t) {  // every key >= T is a candidate: one pass, any order
        for (int i = threadIdx.x; i < V; i += TOPK_THREADS) {
            float v = row[i];
            unsigned key = topk_key(v);
            if (key >= T) {
                unsigned slot = atomicAdd(&taken, 1u);
                out_ids[slot] = i, out_vals[slot] = v;
            }
        }
        return;
    }
    // Ties past the quota: ranks among the keys equal to T by id. Warp w
    // walks ids [w run, (w + 1) run), 32 at a time.
    const int run = (V + TOPK_WARPS - 1) / TOPK_WARPS, lo = warp * run, end = min(V, lo + run);
    unsigned count = 0;
    for (int base = lo; base < end; base += 32) {
        int i = base + lane;
        count += __popc(__ballot_sync(0xffffffffu, i < end && topk_key(row[i]) == T));
    }
    unsigned rank = topk_scan_down(lane == 0 ? count : 0, warp_sums);  // ties in the runs before this warp's
    rank = __shfl_sync(0xffffffffu, rank, 0);
    for (int base = lo; base < end; base += 32) {
        int i = base + lane;
        float v = i < end ? row[i] : 0.f;
        unsigned key = topk_key(v);
        bool tie = i < end && key == T;
        unsigned ties = __ballot_sync(0xffffffffu, tie);
        if (i < end && key > T) {
            unsigned slot = atomicAdd(&taken, 1u);
            out_ids[slot] = i, out_vals[slot] = v;
        } else if (tie) {
            unsigned r = rank + __popc(ties & ((1u << lane) - 1));
            if (r < tied) out_ids[above_t + r] = i, out_vals[above_t + r] = v;
        }
        rank += __popc(ties);
    }
}
