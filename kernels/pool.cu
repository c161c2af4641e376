// Pooling over the positions of a chunk of the normed hidden states, the
// masks of a padded batch (below pool_f32), greedy decoding's pick, and a
// queued generation step's logits processors (last).
//
//   mode 1 (sum):   out[b, i] (+)= sum_t h[b, t, i]      ('+=' when accumulate, for later chunks)
//   mode 2 (all):   out[b, t0 + t, i] = h[b, t, i]        (out holds [B, T, d], the chunk starts at t0)
//
// h [B, n, d] is one chunk of n positions. Mean is sum followed by scale_f32.
// (The last position, and every position of a prompt run as one chunk, need
// no pooling: the final RMSNorm writes them to out itself.)
// Grid (ceil(d / blockDim.x), B); each thread owns one column i and walks t,
// so a warp reads 32 consecutive floats of a row at each step.

extern "C" __global__ void pool_f32(const float *__restrict__ h, float *__restrict__ out, int n, int d, int mode,
                                    int accumulate, int T, int t0) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
    if (i >= d) return;
    const float *rows = h + (size_t)b * n * d + i;
    if (mode == 1) {
        double acc = accumulate ? out[(size_t)b * d + i] : 0.0;  // f64: T may reach the thousands
#pragma unroll 8
        for (int t = 0; t < n; t++) acc += rows[(size_t)t * d];
        out[(size_t)b * d + i] = (float)acc;
    } else {
#pragma unroll 8
        for (int t = 0; t < n; t++) out[((size_t)b * T + t0 + t) * d + i] = rows[(size_t)t * d];
    }
}

// A left-padded batch (engine.Input.Pad): pad [B] counts the positions of
// padding that open each sequence.
//
//   zero_padding:  the first width 2-byte units of row (b, t) of a chunk of n
//                  positions a sequence, starting at p + (b n + t) ld units, are
//                  zeroed where t0 + t < pad[b] (the chunk holds positions
//                  t0 .. t0 + n - 1). Grid (rows, B), rows covering every
//                  padding row of the chunk; a block strides over a row.
//   mean_rows_f32: out[b, i] *= 1 / (T - pad[b]), a sum over each row's tokens
//                  made their mean (rounded as scale_f32's 1 / T is).

extern "C" __global__ void zero_padding(unsigned short *p, long long ld, int width, int n, const int *__restrict__ pad,
                                        int t0) {
    int t = blockIdx.x, b = blockIdx.y;
    if (t >= n || t0 + t >= pad[b]) return;
    unsigned short *row = p + ((long long)b * n + t) * ld;
    for (int i = threadIdx.x; i < width; i += blockDim.x) row[i] = 0;
}

extern "C" __global__ void mean_rows_f32(float *out, int d, const int *__restrict__ pad, int T) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
    if (i < d) out[(long long)b * d + i] *= (float)(1.0 / (double)(T - pad[b]));
}

// Greedy decoding's pick, where the logits are:
//
//   argmax_rows_f32: ids[b] = the index of the largest of logits[b, 0 .. V),
//                    the lowest among equal values (as the host's argmax
//                    does), or -1 when the row holds NaN; mirror[b] too
//                    where mirror is not null (put_pick).
//
// Grid (B), one block a row, ARGMAX_THREADS threads reading it (row_quads);
// each keeps its best (value, index), then the block reduces them
// (argmax_better and argmax_block, math.cuh).

#define ARGMAX_THREADS 1024

extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS)
    argmax_rows_f32(const float *__restrict__ logits, long long *__restrict__ ids, int V, long long *__restrict__ mirror) {
    const float *row = logits + (long long)blockIdx.x * V;
    float best = __int_as_float(0xff800000);  // -inf
    int at = 0x7fffffff;  // beaten by any index: a row of -inf picks index 0
    bool nan = false;
    // A thread meets its ids in increasing order, so a strictly larger value
    // is the only one that beats its best (or any value, before its first).
    auto one = [&](int i, float v) {
        nan |= v != v;
        if (v > best || at == 0x7fffffff) best = v, at = i;
    };
    row_quads(
        row, V,
        [&](int i, float4 v) {  // the quad's largest first, then its lowest id that holds it
            nan |= v.x != v.x || v.y != v.y || v.z != v.z || v.w != v.w;
            const float m = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
            if (m > best || at == 0x7fffffff) best = m, at = i + (v.x == m ? 0 : v.y == m ? 1 : v.z == m ? 2 : 3);
        },
        one);
    __shared__ float bests[ARGMAX_THREADS / 32];
    __shared__ int ats[ARGMAX_THREADS / 32];
    nan = __syncthreads_or(nan);
    argmax_block(best, at, bests, ats);
    if (threadIdx.x == 0) put_pick(ids, mirror, blockIdx.x, nan ? -1 : at);
}

// head_picks_i64: ids[b] = the greedy pick lm_head_wg_bf16's keys[b] says
// for b < B (the key's id, -1 for NaN), and mirror[b] too where mirror is
// not null (put_pick): the LM head's picks, handed on as argmax_rows_f32
// hands its own. Grid 1, block of B threads or more.
extern "C" __global__ void head_picks_i64(const unsigned long long *__restrict__ keys, long long *__restrict__ ids,
                                          int B, long long *__restrict__ mirror) {
    const int b = threadIdx.x;
    if (b >= B) return;
    const unsigned long long k = keys[b];
    put_pick(ids, mirror, b, k == ~0ull ? -1 : (long long)(0xffffffffu - (unsigned)k));
}

// A queued generation step's logits processors, before its pick or draw
// (engine.ProcessingDecoder: mambago's processors as the host applies them,
// in transformers' order, each operation rounded to float32 as there):
//
//   process_rows_f32: in row b of logits [B, V], first the id the step was
//                     fed, fed[b] (the row's latest token), joins the row's
//                     tokens: seen[b, id] = 1 where penalty != 1, and the
//                     row's tail of its last W tokens (tails [B, W], oldest
//                     first, -1 where it has fewer) moves up by one. Then:
//                     the sequence biases: group g raises the logit of token
//                     groups[g, 0] by the sum of its entries e in
//                     [groups[g, 1], + groups[g, 2]) whose prefix
//                     (prefixes[entries[e, 0] ..], entries[e, 1] ids) ends the
//                     tail, biases[e] each, summed in order (-inf bans);
//                     the repetition penalty: each logit whose seen[b, v] is
//                     set divided by penalty where >= 0, multiplied where
//                     below; with ngram n > 0, the fed id is also appended to
//                     the row's history (history [B, room], lengths [B]), and
//                     each token that would close an n-gram the history
//                     holds is -inf; with ban_eos, the eos ids' logits -inf; with
//                     nforced > 0, every logit -inf but those of forced,
//                     which are 0; with decay != 0, each finite eos logit s
//                     becomes s + |s| * decay, id after id; last, the logits
//                     of suppressed[0 .. nsuppressed) -inf.
//
// Grid (B), one block a row; its threads stride over the row. A group is a
// thread's, so a token's biases add up in one order.

extern "C" __global__ void process_rows_f32(float *__restrict__ logits, int V, unsigned char *__restrict__ seen,
                                            const long long *__restrict__ fed, float penalty,
                                            long long *__restrict__ tails, int W, const int *__restrict__ groups,
                                            int ngroups, const int *__restrict__ entries,
                                            const float *__restrict__ biases, const long long *__restrict__ prefixes,
                                            long long *__restrict__ history, int *__restrict__ lengths, int room,
                                            int ngram, const long long *__restrict__ eos, int neos, int ban_eos, float decay,
                                            const long long *__restrict__ forced, int nforced,
                                            const long long *__restrict__ suppressed, int nsuppressed) {
    const float neg_inf = __int_as_float(0xff800000);
    float *row = logits + (long long)blockIdx.x * V;
    unsigned char *mine = seen + (long long)blockIdx.x * V;
    long long *tail = tails + (long long)blockIdx.x * W;
    if (threadIdx.x == 0) {
        const long long id = fed[blockIdx.x];
        if (penalty != 1.f && id >= 0 && id < V) mine[id] = 1;
        for (int i = 0; i + 1 < W; i++) tail[i] = tail[i + 1];
        if (W > 0) tail[W - 1] = id;
        if (ngram > 0) history[(long long)blockIdx.x * room + lengths[blockIdx.x]++] = id;  // the host keeps room
    }
    __syncthreads();
    for (int g = threadIdx.x; g < ngroups; g += blockDim.x) {
        const int token = groups[3 * g], first = groups[3 * g + 1], count = groups[3 * g + 2];
        float sum = 0.f;
        bool hit = false;
        for (int e = first; e < first + count; e++) {
            const int at = entries[2 * e], len = entries[2 * e + 1];
            bool match = len <= W;
            for (int i = 0; match && i < len; i++) match = tail[W - len + i] == prefixes[at + i];
            if (match) {
                sum = __fadd_rn(sum, biases[e]);
                hit = true;
            }
        }
        if (hit) row[token] = __fadd_rn(row[token], sum);
    }
    __syncthreads();  // a biased logit is written before its penalty
    if (penalty != 1.f) {
        for (int i = threadIdx.x; i < V; i += blockDim.x)
            if (mine[i]) {
                const float v = row[i];
                row[i] = v < 0.f ? __fmul_rn(v, penalty) : __fdiv_rn(v, penalty);
            }
        __syncthreads();  // a banned id's penalty is written before its -inf
    }
    if (ngram > 0) {
        const long long *mine_h = history + (long long)blockIdx.x * room;
        const int len = lengths[blockIdx.x], from = len - ngram + 1;  // the run an n-gram would close
        for (int i = threadIdx.x; i + ngram <= len; i += blockDim.x) {
            bool match = true;
            for (int j = 0; match && j < ngram - 1; j++) match = mine_h[i + j] == mine_h[from + j];
            if (match) row[mine_h[i + ngram - 1]] = neg_inf;
        }
        __syncthreads();
    }
    if (ban_eos)
        for (int i = threadIdx.x; i < neos; i += blockDim.x) row[eos[i]] = neg_inf;
    if (nforced > 0) {
        __syncthreads();
        for (int i = threadIdx.x; i < V; i += blockDim.x) row[i] = neg_inf;
        __syncthreads();
        for (int i = threadIdx.x; i < nforced; i += blockDim.x) row[forced[i]] = 0.f;
    }
    __syncthreads();
    if (decay != 0.f && threadIdx.x == 0)
        for (int i = 0; i < neos; i++) {
            const float s = row[eos[i]];
            if (isfinite(s)) row[eos[i]] = __fadd_rn(s, __fmul_rn(fabsf(s), decay));
        }
    __syncthreads();
    for (int i = threadIdx.x; i < nsuppressed; i += blockDim.x) row[suppressed[i]] = neg_inf;
}
