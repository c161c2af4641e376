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
// T in three rounds, of its top 12 bits, then 10 and 10, each a histogram in
// shared memory of the keys that match the digits found so far.
//
// The first round reads the row. Its histogram gives the 12-bit bin where T
// lies; every key in a bin above it is a candidate. When that bin holds at
// most TOPK_CAP keys, one more pass over the row writes the candidates above
// it and gathers the bin's keys into shared memory, and the other two rounds
// and the choice among the bin's keys run there: two passes over the row in
// all. Otherwise (a bin of more keys) each round reads the row again.
//
// Every key above T is a candidate, and `tied` of those equal to T, the
// lowest ids. Where more than `tied` keys equal T, the candidates are
// written again from the row: each warp counts the ties in its own
// contiguous run of ids, and a warp's ties take the ranks after the runs
// before it.

#define TOPK_THREADS 1024
#define TOPK_WARPS (TOPK_THREADS / 32)
#define TOPK_BINS 4096  // the first round's 12 bits
#define TOPK_CAP 3072   // the keys of T's 12-bit bin gathered in shared memory

// topk_key: a key whose unsigned order is v's order, -0 the same as +0.
__device__ __forceinline__ unsigned topk_key(float v) {
    unsigned u = __float_as_uint(v);
    if (u == 0x80000000u) u = 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// topk_scan_down: the exclusive prefix sum of mine over the block's threads
// in thread order (counts, or fixed-point masses: integers, so every order
// of the sums gives the same bits). Every thread must call it.
template <typename T>
__device__ __forceinline__ T topk_scan_down(T mine, T *warp_sums) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    T incl = mine;
    for (int off = 1; off < 32; off <<= 1) {
        T up = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += up;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        T w = warp_sums[lane], wincl = w;  // TOPK_WARPS = 32: one a lane
        for (int off = 1; off < 32; off <<= 1) {
            T up = __shfl_up_sync(0xffffffffu, wincl, off);
            if (lane >= off) wincl += up;
        }
        warp_sums[lane] = wincl - w;
    }
    __syncthreads();
    T before = warp_sums[warp] + incl - mine;
    __syncthreads();  // warp_sums is reused
    return before;
}

// topk_digit: over a round's histogram hist[0 .. bins), the bin where the
// sum from the top reaches want (*digit) and the sum of the bins above it
// (*above). Thread t sums bins [bins - (t+1) per, bins - t per), the top
// ones first. Every thread must call it; the results are in shared memory
// after it returns.
template <typename T>
__device__ __forceinline__ void topk_digit(const T *hist, int bins, T want, T *warp_sums, unsigned *digit, T *above) {
    const int per = bins / TOPK_THREADS, hi = bins - threadIdx.x * per;
    T mine = 0;
    for (int d = hi - 1; d >= hi - per; d--) mine += hist[d];
    T before = topk_scan_down(mine, warp_sums);
    if (before < want && before + mine >= want) {  // one thread: the bin where the sum reaches want
        for (int d = hi - 1; d >= hi - per; d--) {
            if (before + hist[d] >= want) {
                *digit = d, *above = before;
                break;
            }
            before += hist[d];
        }
    }
    __syncthreads();
}

// topk_emit: candidate value v (token i) into the next free slot.
__device__ __forceinline__ void topk_emit(unsigned *taken, int *out_ids, float *out_vals, int i, float v) {
    unsigned slot = atomicAdd(taken, 1u);
    out_ids[slot] = i, out_vals[slot] = v;
}

extern "C" __global__ void __launch_bounds__(TOPK_THREADS)
    topk_rows_f32(const float *__restrict__ logits, int V, int k, int *__restrict__ ids, float *__restrict__ vals) {
    __shared__ unsigned hist[TOPK_BINS];
    __shared__ unsigned bin_keys[TOPK_CAP];
    __shared__ int bin_ids[TOPK_CAP];
    __shared__ unsigned warp_sums[TOPK_WARPS];
    __shared__ unsigned found_digit, found_above, taken, gathered;
    const float *row = logits + (long long)blockIdx.x * V;
    int *out_ids = ids + (long long)blockIdx.x * k;
    float *out_vals = vals + (long long)blockIdx.x * k;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

    // Round 1, over the row: the top 12 bits.
    for (int i = threadIdx.x; i < TOPK_BINS; i += TOPK_THREADS) hist[i] = 0;
    if (threadIdx.x == 0) taken = 0, gathered = 0;
    __syncthreads();
    bool nan = false;
    for (int i = threadIdx.x; i < V; i += TOPK_THREADS) {
        float v = row[i];
        if (v != v) {
            nan = true;
            continue;
        }
        atomicAdd(&hist[topk_key(v) >> 20], 1u);
    }
    if (__syncthreads_or(nan)) {
        for (int i = threadIdx.x; i < k; i += TOPK_THREADS) out_ids[i] = -1;
        return;
    }
    topk_digit<unsigned>(hist, TOPK_BINS, k, warp_sums, &found_digit, &found_above);
    const unsigned bin = found_digit, in_bin = hist[bin];
    // Invariant of the rounds: the keys that match prefix on mask number
    // at least want, and the want largest of them are candidates still to
    // be written.
    unsigned prefix = bin << 20, mask = 0xfff00000u, want = k - found_above;
    const bool local = in_bin <= TOPK_CAP;  // the bin's keys gathered in shared memory
    if (local) {
        for (int i = threadIdx.x; i < V; i += TOPK_THREADS) {
            float v = row[i];
            unsigned key = topk_key(v);
            if ((key >> 20) > bin) {
                topk_emit(&taken, out_ids, out_vals, i, v);
            } else if ((key >> 20) == bin) {
                unsigned at = atomicAdd(&gathered, 1u);
                bin_keys[at] = key, bin_ids[at] = i;
            }
        }
    }
    __syncthreads();  // hist is read above (in_bin) and rewritten below

    // Rounds 2 and 3: 10 bits each, over the gathered keys or the row.
    unsigned at_t = in_bin;
    for (int shift = 10; shift >= 0; shift -= 10) {
        for (int i = threadIdx.x; i < 1024; i += TOPK_THREADS) hist[i] = 0;
        __syncthreads();
        const int n = local ? in_bin : V;
        for (int i = threadIdx.x; i < n; i += TOPK_THREADS) {
            unsigned key = local ? bin_keys[i] : topk_key(row[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 1023], 1u);
        }
        __syncthreads();
        topk_digit<unsigned>(hist, 1024, want, warp_sums, &found_digit, &found_above);
        prefix |= found_digit << shift;
        mask |= 1023u << shift;
        want -= found_above;
        at_t = hist[found_digit];
        __syncthreads();  // hist and found_* are rewritten by the next round
    }
    // prefix is T; at_t keys equal it, of which the want lowest ids are taken.
    const unsigned T = prefix, tied = want;
    if (tied == at_t) {  // every key >= T is a candidate: one pass, any order
        if (local) {
            for (int i = threadIdx.x; i < in_bin; i += TOPK_THREADS) {
                if (bin_keys[i] >= T) topk_emit(&taken, out_ids, out_vals, bin_ids[i], row[bin_ids[i]]);
            }
        } else {
            for (int i = threadIdx.x; i < V; i += TOPK_THREADS) {
                float v = row[i];
                if (topk_key(v) >= T) topk_emit(&taken, out_ids, out_vals, i, v);
            }
        }
        return;
    }
    // Ties past the quota: ranks among the keys equal to T by id, every
    // candidate written again from the row. Warp w walks ids [w run,
    // (w + 1) run), 32 at a time.
    if (threadIdx.x == 0) taken = 0;
    const unsigned above_t = k - tied;  // slots [0, above_t) for keys above T
    const int run = (V + TOPK_WARPS - 1) / TOPK_WARPS, lo = warp * run, end = min(V, lo + run);
    unsigned count = 0;
    for (int base = lo; base < end; base += 32) {
        int i = base + lane;
        count += __popc(__ballot_sync(0xffffffffu, i < end && topk_key(row[i]) == T));
    }
    unsigned rank = topk_scan_down<unsigned>(lane == 0 ? count : 0, warp_sums);  // ties in the runs before this warp's
    rank = __shfl_sync(0xffffffffu, rank, 0);
    for (int base = lo; base < end; base += 32) {
        int i = base + lane;
        float v = i < end ? row[i] : 0.f;
        unsigned key = topk_key(v);
        bool tie = i < end && key == T;
        unsigned ties = __ballot_sync(0xffffffffu, tie);
        if (i < end && key > T) {
            topk_emit(&taken, out_ids, out_vals, i, v);
        } else if (tie) {
            unsigned r = rank + __popc(ties & ((1u << lane) - 1));
            if (r < tied) out_ids[above_t + r] = i, out_vals[above_t + r] = v;
        }
        rank += __popc(ties);
    }
}
