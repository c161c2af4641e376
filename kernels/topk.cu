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

// topk_value: the logit whose key is key (-0 comes back as +0).
__device__ __forceinline__ float topk_value(unsigned key) {
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// topk_scan_down: the exclusive prefix sum of mine over the block's threads
// in thread order (counts, or fixed-point masses: integers, so every order
// of the sums gives the same bits), and, where total is not null, the sum
// of all into *total (shared memory). Every thread must call it.
template <typename T>
__device__ __forceinline__ T topk_scan_down(T mine, T *warp_sums, T *total = nullptr) {
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
        if (total && lane == 31) *total = wincl;
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

// topk_narrow: a radix round's bookkeeping once its histogram hist[0 ..
// bins) of the keys that match prefix on mask is whole: the digit at shift
// where the sum from the top reaches want narrows prefix and mask, want
// loses the sum above it, and at_t becomes the digit's count. Every thread
// must call it; hist and the found digit may be rewritten after it returns.
template <typename T>
__device__ __forceinline__ void topk_narrow(const T *hist, int bins, int shift, T *warp_sums, unsigned *digit, T *above,
                                            unsigned &prefix, unsigned &mask, T &want, T &at_t) {
    topk_digit<T>(hist, bins, want, warp_sums, digit, above);
    prefix |= *digit << shift;
    mask |= (bins - 1u) << shift;
    want -= *above;
    at_t = hist[*digit];
    __syncthreads();
}

// topk_emit: candidate value v (token i) into the next free slot.
__device__ __forceinline__ void topk_emit(unsigned *taken, int *out_ids, float *out_vals, int i, float v) {
    unsigned slot = atomicAdd(taken, 1u);
    out_ids[slot] = i, out_vals[slot] = v;
}

// TopkShared is topk_rows's shared memory.
struct TopkShared {
    unsigned hist[TOPK_BINS];
    unsigned bin_keys[TOPK_CAP];
    int bin_ids[TOPK_CAP];
    unsigned warp_sums[TOPK_WARPS];
    unsigned found_digit, found_above, taken, gathered;
};

// topk_rows: topk_rows_f32's work for one row (the block's), into out_ids
// and out_vals [k]. Every thread of the block returns from it at the same
// point.
__device__ __forceinline__ void topk_rows(TopkShared &sm, const float *__restrict__ row, int V, int k, int *out_ids,
                                          float *out_vals) {
    unsigned *hist = sm.hist, *bin_keys = sm.bin_keys, *warp_sums = sm.warp_sums;
    int *bin_ids = sm.bin_ids;
    unsigned &found_digit = sm.found_digit, &found_above = sm.found_above, &taken = sm.taken, &gathered = sm.gathered;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

    // Round 1, over the row: the top 12 bits.
    for (int i = threadIdx.x; i < TOPK_BINS; i += TOPK_THREADS) hist[i] = 0;
    if (threadIdx.x == 0) taken = 0, gathered = 0;
    __syncthreads();
    bool nan = false;
    row_each(row, V, [&](int, float v) {
        if (v != v) {
            nan = true;
            return;
        }
        atomicAdd(&hist[topk_key(v) >> 20], 1u);
    });
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
        row_each(row, V, [&](int i, float v) {
            unsigned key = topk_key(v);
            if ((key >> 20) > bin) {
                topk_emit(&taken, out_ids, out_vals, i, v);
            } else if ((key >> 20) == bin) {
                unsigned at = atomicAdd(&gathered, 1u);
                bin_keys[at] = key, bin_ids[at] = i;
            }
        });
    }
    __syncthreads();  // hist is read above (in_bin) and rewritten below

    // Rounds 2 and 3: 10 bits each, over the gathered keys or the row.
    unsigned at_t = in_bin;
    for (int shift = 10; shift >= 0; shift -= 10) {
        for (int i = threadIdx.x; i < 1024; i += TOPK_THREADS) hist[i] = 0;
        __syncthreads();
        auto count = [&](unsigned key) {
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 1023], 1u);
        };
        if (local) {
            for (int i = threadIdx.x; i < in_bin; i += TOPK_THREADS) count(bin_keys[i]);
        } else {
            row_each(row, V, [&](int, float v) { count(topk_key(v)); });
        }
        __syncthreads();
        topk_narrow<unsigned>(hist, 1024, shift, warp_sums, &found_digit, &found_above, prefix, mask, want, at_t);
    }
    // prefix is T; at_t keys equal it, of which the want lowest ids are taken.
    const unsigned T = prefix, tied = want;
    if (tied == at_t) {  // every key >= T is a candidate: one pass, any order
        if (local) {
            for (int i = threadIdx.x; i < in_bin; i += TOPK_THREADS) {
                if (bin_keys[i] >= T) topk_emit(&taken, out_ids, out_vals, bin_ids[i], row[bin_ids[i]]);
            }
        } else {
            row_each(row, V, [&](int i, float v) {
                if (topk_key(v) >= T) topk_emit(&taken, out_ids, out_vals, i, v);
            });
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

extern "C" __global__ void __launch_bounds__(TOPK_THREADS)
    topk_rows_f32(const float *__restrict__ logits, int V, int k, int *__restrict__ ids, float *__restrict__ vals) {
    __shared__ TopkShared sm;
    const long long b = blockIdx.x;
    topk_rows(sm, logits + b * V, V, k, ids + b * k, vals + b * k);
}

// Beam search's log-softmax normalizers, beside topk_rows_f32's candidates,
// and its log probabilities, where logits processors need them whole:
//
//   row_norms_f32:        norms[b, 0] = the largest of logits[b, 0 .. V), m, and
//                         norms[b, 1] = log of the sum over v of exp(logits[b, v] - m),
//                         the differences in float32 and their exps summed in double,
//                         so that a token's log probability is logit - m - norms[b, 1]
//                         in float32, as the host's log_softmax gives it
//                         (mambago/beam.go). Both NaN where the row holds NaN.
//   log_softmax_rows_f32: logits[b, v] = logits[b, v] - m - norms[b, 1] in place, in
//                         float32 in that order, the host's log_softmax bits but for
//                         the last bit of a sum summed in another order; a row holding
//                         NaN becomes all NaN, and so does one of -inf alone, unless
//                         keep_empty is set (renormalizing what the processors left:
//                         such a row stays as it is).
//
// Grid (B), one block a row, NORMS_THREADS threads (at 1024 the double
// exps spill).

#define NORMS_THREADS 256
#define NORMS_WARPS (NORMS_THREADS / 32)

// row_norm leaves row's m and its log-sum in norms[0] and norms[1], NaN
// both where the row holds NaN, written by thread 0; every thread of the
// block calls it.
__device__ void row_norm(const float *__restrict__ row, int V, float *norms) {
    __shared__ float warp_max[NORMS_WARPS];
    __shared__ double warp_sum[NORMS_WARPS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float m = __int_as_float(0xff800000);  // -inf
    bool nan = false;
    row_each(row, V, [&](int, float v) {
        nan |= v != v;
        m = fmaxf(m, v);
    });
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) warp_max[warp] = m;
    nan = __syncthreads_or(nan);
    for (int w = 0; w < NORMS_WARPS; w++) m = fmaxf(m, warp_max[w]);
    double sum = 0;
    row_each(row, V, [&](int, float v) { sum += exp(-(double)(m - v)); });
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) warp_sum[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0;
        for (int w = 0; w < NORMS_WARPS; w++) total += warp_sum[w];
        const float bad = __int_as_float(0x7fc00000);
        norms[0] = nan ? bad : m;
        norms[1] = nan ? bad : (float)log(total);
    }
}

extern "C" __global__ void __launch_bounds__(NORMS_THREADS)
    row_norms_f32(const float *__restrict__ logits, int V, float *__restrict__ norms) {
    row_norm(logits + (long long)blockIdx.x * V, V, norms + 2 * blockIdx.x);
}

extern "C" __global__ void __launch_bounds__(NORMS_THREADS)
    log_softmax_rows_f32(float *__restrict__ logits, int V, int keep_empty) {
    __shared__ float norms[2];
    float *row = logits + (long long)blockIdx.x * V;
    row_norm(row, V, norms);
    __syncthreads();
    const float m = norms[0], lse = norms[1];
    if (keep_empty && m == __int_as_float(0xff800000)) return;
    for (int i = threadIdx.x; i < V; i += NORMS_THREADS) row[i] = __fsub_rn(__fsub_rn(row[i], m), lse);
}

// Sampled decoding's draw from the k best, where the logits are:
//
//   topk_draw_f32: next[b] (and mirror[b] where mirror is not null) = the
//                  token of row b that mambago's host sampler draws from
//                  the row's k best with u[b] as its uniform, token for
//                  token (mambago/sample.go, sampler.fromBest): the k best
//                  as topk_rows_f32 finds them (into ids and vals [B, k],
//                  scratch), ranked best first; their weights w_i =
//                  exp_neg((best - logit_i) * inv_temp); the nucleus, the
//                  shortest best-first run whose running sum reaches p of
//                  the sum of all k, less its last tokens while their
//                  weight is below min_p (the best's is 1; 0: none, as
//                  mambago's min_p, after the nucleus); r = u[b] * its sum,
//                  and the first
//                  token where r minus the running sum goes below 0 (the
//                  last of the nucleus where rounding leaves none). A row
//                  whose best logit is infinite gives its best token; a row
//                  with NaN gives -1. 1 <= k <= TOPK_DRAW_MAX.
//
// Every float64 operation of that rule is rounded on its own
// (__dmul_rn and friends, which the compiler never fuses), as the host
// rounds them, so both get the same bits, and the sums run in the host's
// order, on one thread. The ranking sorts the candidates' 64-bit keys (the
// logit's order bits inverted above the id, the host's rankKey) in shared
// memory (a bitonic sort of k rounded up to a power of two).
#define TOPK_DRAW_MAX 1024

typedef unsigned long long u64;

// TopkDrawShared is topk_draw_f32's shared memory after topk_rows is done
// with its own.
struct TopkDrawShared {
    u64 keys[TOPK_DRAW_MAX];    // the candidates' rank keys, then sorted
    double w[TOPK_DRAW_MAX];    // their weights, best first
    double sums[TOPK_DRAW_MAX]; // the weights' running sums
};

// exp_neg: e^-z for z >= 0, mambago's expNeg (sample.go) operation for
// operation: e^-z = 2^k e^r, k the integer nearest -z log2(e), r by seven
// terms of the series; 0 past z = 708.
__device__ __forceinline__ double exp_neg(double z) {
    if (!(z <= 708.0)) return 0.0;
    const double log2e = __longlong_as_double(0x3FF71547652B82FEll);  // math.Log2E
    const double ln2_hi = __longlong_as_double(0x3FE62E42FEE00000ll);  // ln2Hi
    const double ln2_lo = __longlong_as_double(0x3DEA39EF35793C76ll);  // ln2Lo
    const double k = floor(__dsub_rn(0.5, __dmul_rn(z, log2e)));
    const double r = __dsub_rn(__dsub_rn(-z, __dmul_rn(k, ln2_hi)), __dmul_rn(k, ln2_lo));
    double t = __dmul_rn(r, 1.0 / 5040);
    t = __dmul_rn(r, __dadd_rn(1.0 / 720, t));
    t = __dmul_rn(r, __dadd_rn(1.0 / 120, t));
    t = __dmul_rn(r, __dadd_rn(1.0 / 24, t));
    t = __dmul_rn(r, __dadd_rn(1.0 / 6, t));
    t = __dmul_rn(r, __dadd_rn(1.0 / 2, t));
    t = __dmul_rn(r, __dadd_rn(1.0, t));
    const double p = __dadd_rn(1.0, t);
    return __dmul_rn(p, __longlong_as_double((long long)((long long)k + 1023) << 52));
}

extern "C" __global__ void __launch_bounds__(TOPK_THREADS)
    topk_draw_f32(const float *__restrict__ logits, int V, int k, int *ids, float *vals, double inv_temp, double p,
                  double min_p, const double *__restrict__ u, long long *__restrict__ next, long long *__restrict__ mirror) {
    __shared__ union {
        TopkShared rows;
        TopkDrawShared draw;
    } sm;
    const int b = blockIdx.x;
    int *row_ids = ids + (long long)b * k;  // plain pointers: read back below, after other threads wrote them
    float *row_vals = vals + (long long)b * k;
    topk_rows(sm.rows, logits + (long long)b * V, V, k, row_ids, row_vals);
    __syncthreads();  // the candidates are written; sm.rows is no longer read
    if (row_ids[0] < 0) {  // NaN (uniform: every thread reads the same id)
        if (threadIdx.x == 0) put_pick(next, mirror, b, -1);
        return;
    }
    u64 *keys = sm.draw.keys;
    int n = 1;
    while (n < k) n <<= 1;
    for (int i = threadIdx.x; i < n; i += TOPK_THREADS)
        keys[i] = i < k ? (u64)(~topk_key(row_vals[i])) << 32 | (unsigned)row_ids[i] : ~0ull;
    for (int size = 2; size <= n; size <<= 1) {  // ascending: the best first
        for (int stride = size / 2; stride > 0; stride /= 2) {
            __syncthreads();
            for (int i = threadIdx.x; i < n; i += TOPK_THREADS) {
                const int j = i ^ stride;
                if (j > i) {
                    const u64 a = keys[i], c = keys[j];
                    if ((a > c) == ((i & size) == 0)) keys[i] = c, keys[j] = a;
                }
            }
        }
    }
    __syncthreads();
    const double top = (double)topk_value(~(unsigned)(keys[0] >> 32));
    if (isinf(top)) {  // an infinite best takes all the weight (or none has any)
        if (threadIdx.x == 0) put_pick(next, mirror, b, (int)(unsigned)keys[0]);
        return;
    }
    for (int i = threadIdx.x; i < k; i += TOPK_THREADS)
        sm.draw.w[i] = exp_neg(__dmul_rn(__dsub_rn(top, (double)topk_value(~(unsigned)(keys[i] >> 32))), inv_temp));
    __syncthreads();
    if (threadIdx.x == 0) {
        const double *w = sm.draw.w;
        double *sums = sm.draw.sums, sum = 0;
        for (int i = 0; i < k; i++) sums[i] = sum = __dadd_rn(sum, w[i]);
        const double target = __dmul_rn(p, sum);
        int keep = k;
        for (int i = 0; i < k; i++) {
            if (sums[i] >= target) {
                keep = i + 1;
                break;
            }
        }
        while (keep > 1 && w[keep - 1] < min_p) keep--;  // the sum of the rest is sums[keep - 1], as the host's
        double r = __dmul_rn(u[b], sums[keep - 1]);
        int at = keep - 1;
        for (int i = 0; i < keep; i++) {
            r = __dsub_rn(r, w[i]);
            if (r < 0) {
                at = i;
                break;
            }
        }
        put_pick(next, mirror, b, (int)(unsigned)keys[at]);
    }
}

// Sampled decoding's draw from a nucleus, where the logits are:
//
//   topp_draw_f32: next[b] = a token of row b drawn with probability
//                  proportional to w_i = exp((logit_i - max) * inv_temp)
//                  among the nucleus: the shortest best-first run of
//                  tokens (ranked as above) whose weight reaches p of the
//                  row's, less those whose weight is below min_p (the
//                  best's is 1; 0 <= min_p <= 1, 0: none, as mambago's
//                  min_p, after the nucleus); u[b] in [0, 1) is the draw. A
//                  row whose best logit is infinite gives that token (the
//                  lowest id), and a row with NaN gives -1. 0 < p <= 1.
//                  mirror[b] too where mirror is not null (put_pick).
//   topp_draw_x8_f32: the same, each row split over a cluster of
//                  TOPP_CLUSTER blocks (sm_90a; elsewhere it traps).
//
// The weights are fixed point, q_i = w_i 2^TOPP_BITS truncated to an
// integer (w_i by expf; a token more than 27.7 / inv_temp below the best
// weighs 0), so that every sum, in any order, is exact: the nucleus and the
// draw are the rule's over the q_i, and the same for any split of the row.
// Each warp adds its lanes' weights of one bin together (topp_add) before
// the histogram's atomics.
//
// Grid (S B), block TOPK_THREADS: S blocks a row (a row group: S = 1, or a
// cluster of TOPP_CLUSTER), block s of the group the row's ids [s n, (s +
// 1) n), n = ceil(V / S). Warp w of a block takes the run [lo + w run, lo
// + (w + 1) run) of the block's ids [lo, hi), 32 at a time (topp_each), and
// each lane keeps its first C chunks in registers from the first pass on
// (C = 0: every pass reads the row; past C chunks each pass reads it
// again). The group's blocks add up what they find through each other's
// shared memory (group_reduce, group_prefix). The passes:
//   1. the best logit, and NaN;
//   2. each token's q into the histogram of its key's top 12 bits, the
//      row's total Q; the nucleus must reach ceil(p Q);
//   3. as topk_rows_f32's rounds, with q for counts: the key T of the
//      nucleus's last token, the weight above it, and how many of the
//      tokens at T it takes (the lowest ids; all of them when none are left);
//   4. each warp sums the nucleus's q over its run, less the q below
//      min_p 2^TOPP_BITS (ceil); the warp whose share
//      holds r = floor(u M) (M: the nucleus's weight; the shares in id
//      order) walks its run in order, 32 tokens at a time, to the token
//      where r falls. The token is the first in id order where the
//      nucleus's weight up to it passes r, whatever S.

#define TOPP_BITS 40
#define TOPP_CLUSTER 8
#ifndef TOPP_KEPT
// topp_draw_x8_f32's chunks of 32 ids a lane keeps in registers: all of a
// row of up to 57344 tokens (50280 in the models here).
#define TOPP_KEPT 7
#endif

// topp_weight: q of logit v, the row's best logit top (expf: 2 ulp, and
// the same bits every time, which is what the sums need).
__device__ __forceinline__ u64 topp_weight(float top, float v, float inv_temp) {
    float z = (top - v) * inv_temp;
    if (!(z <= 27.8f)) return 0;  // below 2^-40 (and -inf)
    return (u64)(expf(-z) * (float)(1ull << TOPP_BITS));
}

// topp_atomic_add: *at += v, atomically, in shared memory. A 64-bit
// shared atomic add is a compare-and-swap loop on sm_80 and sm_90
// (ATOMS.CAST.SPIN.64; ncu counted 5-6 tries a call in the weights'
// histogram), so this adds the low words with one native 32-bit atomic and
// then the high words with the low word's carry: the sum is exact, in any
// order.
__device__ __forceinline__ void topp_atomic_add(u64 *at, u64 v) {
    unsigned *word = reinterpret_cast<unsigned *>(at);  // little-endian: the low word first
    const unsigned lo = (unsigned)v, was = atomicAdd(word, lo);
    const unsigned hi = (unsigned)(v >> 32) + (was + lo < was);  // + 1 when the low word wrapped
    if (hi) atomicAdd(word + 1, hi);
}

// topp_add: hist[bin] += q for each lane of the warp (every lane calls it;
// q = 0 adds nothing). Lanes with the same bin add their sum once, through
// the warp's slots in shared memory: atomics on one address queue one
// behind another, and a bin can hold most of a row.
__device__ __forceinline__ void topp_add(u64 *hist, unsigned bin, u64 q, u64 *slots) {
    int lane = threadIdx.x % 32;
    unsigned want = __ballot_sync(0xffffffffu, q != 0);
    if (!want) return;
    unsigned same = __match_any_sync(0xffffffffu, q ? bin : 0xffffffffu) & want;
    slots[lane] = q;
    __syncwarp();
    if (q && lane == __ffs(same) - 1) {
        u64 sum = 0;
        for (unsigned m = same; m; m &= m - 1) sum += slots[__ffs(m) - 1];
        topp_atomic_add(&hist[bin], sum);
    }
    __syncwarp();  // slots are rewritten by the next call
}

// topp_warp_scan: the inclusive prefix sum of v over the warp.
__device__ __forceinline__ u64 topp_warp_scan(u64 v) {
    int lane = threadIdx.x % 32;
    for (int off = 1; off < 32; off <<= 1) {
        u64 up = __shfl_up_sync(0xffffffffu, v, off);
        if (lane >= off) v += up;
    }
    return v;
}

// The row group of S blocks: group_rank is the block's rank in it;
// group_sync a barrier of all its threads that orders their shared-memory
// accesses, each block's against the others' (__syncthreads when S = 1);
// group_load reads the 32- or 64-bit integer in block r's shared memory at
// the address that p has in this block's. S > 1 needs clusters (sm_90a).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GROUP_CLUSTERS 1
#else
#define GROUP_CLUSTERS 0
#endif
template <int S>
__device__ __forceinline__ unsigned group_rank() {
#if GROUP_CLUSTERS
    if (S > 1) return cluster_rank();
#endif
    return 0;
}
template <int S>
__device__ __forceinline__ void group_sync() {
#if GROUP_CLUSTERS
    if (S > 1) return cluster_sync();
#endif
    __syncthreads();
}
template <int S, typename T>
__device__ __forceinline__ T group_load(const T *p, unsigned r) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "group_load reads 32 or 64 bits");
#if GROUP_CLUSTERS
    if (S > 1) {
        const unsigned at = cluster_map(shared_addr(p), r);
        return sizeof(T) == 8 ? (T)cluster_ld_u64(at) : (T)cluster_ld_u32(at);
    }
#endif
    return *p;
}

// group_reduce: every block's hist[0 .. bins) becomes the sum of the
// group's blocks' (block s adds up bins [s bins / S, (s + 1) bins / S) into
// part, then every block copies the parts). Every thread of the group must
// call it, after its block's last write to hist; hist is whole in every
// block after it returns.
template <int S>
__device__ __forceinline__ void group_reduce(u64 *hist, int bins, u64 *part) {
    if (S > 1) {
        const int per = bins / S;
        const unsigned rank = group_rank<S>();
        group_sync<S>();  // every block's histogram is whole
        for (int i = threadIdx.x; i < per; i += TOPK_THREADS) {
            u64 sum = 0;
            for (unsigned r = 0; r < S; r++) sum += group_load<S>(hist + rank * per + i, r);
            part[i] = sum;
        }
        group_sync<S>();  // every block's part is whole, and hist is no longer read
        for (int i = threadIdx.x; i < bins; i += TOPK_THREADS) hist[i] = group_load<S>(part + i % per, i / per);
    }
    __syncthreads();
}

// group_prefix: from *mine, each block's value (in shared memory, written
// before the call), the sum of the blocks' before this one in the group
// (*before) and, where total is not null, of all (*total), in every
// thread. Every thread of the group must call it; *mine is read by the other
// blocks until the group's next group_sync.
template <int S>
__device__ __forceinline__ void group_prefix(const u64 *mine, u64 *before, u64 *total) {
    group_sync<S>();
    const int lane = threadIdx.x % 32;
    u64 v = lane < S ? group_load<S>(mine, lane) : 0;
    u64 incl = topp_warp_scan(v);
    *before = __shfl_sync(0xffffffffu, incl - v, group_rank<S>());
    const u64 all = __shfl_sync(0xffffffffu, incl, S - 1);
    if (total) *total = all;
}

// topp_each: f(i, v) for each of a warp's ids i = first + 32 c + lane in
// turn, until found (whole warps: v is -inf for i >= end), v from kept for
// c < C, else from the row.
template <int C, typename F>
__device__ __forceinline__ void topp_each(const float *__restrict__ row, const float (&kept)[C > 0 ? C : 1], int first,
                                          int end, const bool &found, F &&f) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int c = 0; c < C; c++)
        if (!found && first + 32 * c < end) f(first + 32 * c + lane, kept[c]);
    for (int base = first + 32 * C; !found && base < end; base += 32) {
        int i = base + lane;
        f(i, i < end ? row[i] : __int_as_float(0xff800000));
    }
}

template <int S, int C>
__device__ __forceinline__ void topp_draw(const float *__restrict__ logits, int V, float inv_temp, double p,
                                          double min_p, const double *__restrict__ u,
                                          long long *__restrict__ next, long long *__restrict__ mirror) {
    __shared__ u64 mass[TOPK_BINS];
    __shared__ u64 part[S > 1 ? TOPK_BINS / S : 1];  // group_reduce's
    __shared__ u64 warp_sums[TOPK_WARPS];
    __shared__ u64 slots[TOPK_WARPS][32];  // topp_add's
    __shared__ float best_vals[TOPK_WARPS];
    __shared__ int best_ats[TOPK_WARPS];
    __shared__ unsigned block_best, block_at, block_nan;  // this block's, for the group: the best logit's bits, its id, NaN
    __shared__ unsigned found_digit;
    __shared__ u64 found_above, block_total, block_ties, block_share;
    const int b = blockIdx.x / S, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const unsigned rank = group_rank<S>();
    const float *row = logits + (long long)b * V;
    const int n = (V + S - 1) / S, lo = min(V, (int)rank * n), hi = min(V, lo + n);  // this block's ids
    const int run = (hi - lo + TOPK_WARPS - 1) / TOPK_WARPS, first = min(hi, lo + warp * run),
              end = min(hi, first + run);  // this warp's
    float kept[C > 0 ? C : 1];
    bool found = false;  // the draw's walk has found its token

    // 1. The best logit (the lowest id among equals), and NaN.
#pragma unroll
    for (int c = 0; c < C; c++) {
        int i = first + 32 * c + lane;
        kept[c] = i < end ? row[i] : __int_as_float(0xff800000);
    }
    float best = __int_as_float(0xff800000);  // -inf
    int at = 0x7fffffff;
    bool nan = false;
    topp_each<C>(row, kept, first, end, found, [&](int i, float v) {
        if (i >= end) return;
        nan |= v != v;
        if (argmax_better(v, i, best, at)) best = v, at = i;
    });
    nan = __syncthreads_or(nan);
    argmax_block(best, at, best_vals, best_ats);
    if (threadIdx.x == 0) block_best = __float_as_uint(best), block_at = at, block_nan = nan;
    group_sync<S>();
    best = lane < S ? __uint_as_float(group_load<S>(&block_best, lane)) : __int_as_float(0xff800000);
    at = lane < S ? (int)group_load<S>(&block_at, lane) : 0x7fffffff;
    nan = __any_sync(0xffffffffu, lane < S && group_load<S>(&block_nan, lane));
    argmax_warp(best, at);
    const float top = __shfl_sync(0xffffffffu, best, 0);
    const int top_at = __shfl_sync(0xffffffffu, at, 0);
    if (nan || isinf(top)) {  // an infinite best takes all the weight (or none has any)
        if (threadIdx.x == 0 && rank == 0) put_pick(next, mirror, b, nan ? -1 : top_at);
        if (S > 1) group_sync<S>();  // no block leaves while another reads its best
        return;
    }

    // 2. The weights' histogram over the keys' top 12 bits, and the total.
    for (int i = threadIdx.x; i < TOPK_BINS; i += TOPK_THREADS) mass[i] = 0;
    __syncthreads();
    topp_each<C>(row, kept, first, end, found, [&](int, float v) {
        topp_add(mass, topk_key(v) >> 20, topp_weight(top, v, inv_temp), slots[warp]);
    });
    group_reduce<S>(mass, TOPK_BINS, part);
    u64 mine = 0;
    for (int i = threadIdx.x; i < TOPK_BINS; i += TOPK_THREADS) mine += mass[i];
    topk_scan_down<u64>(mine, warp_sums, &block_total);
    const u64 Q = block_total;
    u64 want = p >= 1 ? Q : (u64)ceil(p * (double)Q);
    want = want < 1 ? 1 : (want > Q ? Q : want);

    // 3. The nucleus's last key T: three rounds, as topk_rows_f32's.
    unsigned prefix = 0, mask = 0;
    u64 at_t;
    topk_narrow<u64>(mass, TOPK_BINS, 20, warp_sums, &found_digit, &found_above, prefix, mask, want, at_t);
    for (int shift = 10; shift >= 0; shift -= 10) {
        for (int i = threadIdx.x; i < 1024; i += TOPK_THREADS) mass[i] = 0;
        __syncthreads();
        topp_each<C>(row, kept, first, end, found, [&](int, float v) {
            unsigned key = topk_key(v);
            u64 q = (key & mask) == prefix ? topp_weight(top, v, inv_temp) : 0;
            topp_add(mass, (key >> shift) & 1023, q, slots[warp]);
        });
        group_reduce<S>(mass, 1024, part);
        topk_narrow<u64>(mass, 1024, shift, warp_sums, &found_digit, &found_above, prefix, mask, want, at_t);
    }
    const unsigned T = prefix;
    const u64 q_t = topp_weight(top, topk_value(T), inv_temp);  // every token at T weighs the same
    const u64 count_t = at_t / q_t, take_t = (want + q_t - 1) / q_t;  // want > 0, so q_t > 0
    const bool all_t = take_t == count_t;  // the same in every block of the group

    // 4. The draw, each warp over its run in id order. A token at T is in
    // the nucleus when its rank among them by id is below take_t: the ties
    // in the blocks and the runs before the warp's, then its own.
    u64 tie_base = 0;
    if (!all_t) {
        unsigned count = 0;
        topp_each<C>(row, kept, first, end, found, [&](int i, float v) {
            count += __popc(__ballot_sync(0xffffffffu, i < end && topk_key(v) == T));
        });
        u64 in_block = __shfl_sync(0xffffffffu, topk_scan_down<u64>(lane == 0 ? count : 0, warp_sums, &block_ties), 0);
        u64 before_block;
        group_prefix<S>(&block_ties, &before_block, nullptr);
        tie_base = before_block + in_block;
    }
    // chunk: each lane's token i (logit v)'s q if it is in the nucleus, else
    // 0 (and for i >= end); ties counts the tokens at T of the warp's run
    // before this chunk, and then those of this chunk too.
    const u64 q_min = (u64)ceil(min_p * (double)(1ull << TOPP_BITS));  // at most the best's q: min_p <= 1
    auto chunk = [&](int i, float v, u64 &ties) -> u64 {
        unsigned key = topk_key(v);
        bool tie = i < end && key == T;
        unsigned tied = __ballot_sync(0xffffffffu, tie);
        bool in = i < end && (key > T || (tie && (all_t || tie_base + ties + __popc(tied & ((1u << lane) - 1)) < take_t)));
        ties += __popc(tied);
        const u64 q = in ? topp_weight(top, v, inv_temp) : 0;
        return q >= q_min ? q : 0;
    };
    u64 share = 0, ties = 0;
    topp_each<C>(row, kept, first, end, found, [&](int i, float v) { share += chunk(i, v, ties); });
    for (int off = 16; off > 0; off >>= 1) share += __shfl_xor_sync(0xffffffffu, share, off);
    // The shares in id order: the blocks' before this one, then the warps'.
    u64 warp_before = __shfl_sync(0xffffffffu, topk_scan_down<u64>(lane == 0 ? share : 0, warp_sums, &block_share), 0);
    u64 block_before, M;
    group_prefix<S>(&block_share, &block_before, &M);
    if (S > 1) group_sync<S>();  // the group's shared memory is read for the last time above
    warp_before += block_before;
    double drawn = u[b] * (double)M;
    u64 r = drawn < (double)M ? (u64)drawn : M - 1;
    if (r < warp_before || r >= warp_before + share) return;  // not this warp's share
    u64 walked = warp_before;
    ties = 0;
    topp_each<C>(row, kept, first, end, found, [&](int i, float v) {
        u64 incl = topp_warp_scan(chunk(i, v, ties));
        unsigned hit = __ballot_sync(0xffffffffu, walked + incl > r);
        if (hit && lane == __ffs(hit) - 1) put_pick(next, mirror, b, i);
        found = hit != 0;
        walked += __shfl_sync(0xffffffffu, incl, 31);
    });
}

#define TOPP_PARAMS                                                                                   \
    const float *__restrict__ logits, int V, float inv_temp, double p, double min_p,                 \
        const double *__restrict__ u, long long *__restrict__ next, long long *__restrict__ mirror
extern "C" __global__ void __launch_bounds__(TOPK_THREADS) topp_draw_f32(TOPP_PARAMS) {
    topp_draw<1, 0>(logits, V, inv_temp, p, min_p, u, next, mirror);
}
// topp_draw_x8_f32: a cluster a row on sm_90a (gpu.Decoder launches it only
// there); a trap elsewhere.
#if GROUP_CLUSTERS
#define TOPP_CLUSTER_DIMS __cluster_dims__(TOPP_CLUSTER, 1, 1)
#define TOPP_CLUSTER_BODY topp_draw<TOPP_CLUSTER, TOPP_KEPT>(logits, V, inv_temp, p, min_p, u, next, mirror);
#else
#define TOPP_CLUSTER_DIMS
#define TOPP_CLUSTER_BODY __trap();
#endif
extern "C" __global__ void TOPP_CLUSTER_DIMS __launch_bounds__(TOPK_THREADS) topp_draw_x8_f32(TOPP_PARAMS) {
    TOPP_CLUSTER_BODY
}
