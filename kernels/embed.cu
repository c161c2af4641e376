// Embedding lookup: the first stage of a prefill from token ids.
//
//   h[r, :] = E[ids[r], :]        r < rows, ids [rows] int64, E [V, d] (storage type T), h [rows, d] f32
//
// Grid (rows), block up to 256 threads striding over d. Ids are checked on the
// host before the launch; an id outside [0, V) is clamped here so that a bad
// value can never read outside E.

template <class T>
__device__ void embed(const long long *__restrict__ ids, const T *__restrict__ E, float *__restrict__ h, int V, int d) {
    long long id = ids[blockIdx.x];
    id = id < 0 ? 0 : (id >= V ? V - 1 : id);
    const T *src = E + (size_t)id * d;
    float *dst = h + (size_t)blockIdx.x * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) dst[i] = to_f32(src[i]);
}

#define EMBED(sfx, T)                                                                                        \
    extern "C" __global__ void embed_##sfx(const long long *__restrict__ ids, const T *__restrict__ E,          \
                                           float *__restrict__ h, int V, int d) {                           \
        embed<T>(ids, E, h, V, d);                                                                           \
    }
EACH_DTYPE(EMBED)
