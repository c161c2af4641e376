// Small element-wise stages.
//
//   add_bias_f32:  x[r, i] += bias[i]        x [rows, n] with row stride ld, bias [n]
//   scale_f32:     x[i] *= s                 x [n] f32
//   to_<T>:        y[i] = x[i]               x [n] f32, y [n] of storage type T (rounded to nearest)
//   from_<T>:      y[i] = x[i]               x [n] of storage type T, y [n] f32 (exact)
//   copy_rows_f32: row (s, i) of dst = row (s, rows[i]) of src, rows of n floats, for each of the
//                  grid's z segments (a state's layers): dst holds B rows a segment, src srcB
//                  (beam search's reordered states). Grid (any, B, segments).
//   copy_rows_u8:  the same, rows of n bytes (beam search's logits processors, reordered with
//                  their beams)
//   memset_rows:   what a graph's memset node writes, as a kernel (cuda.MemsetEdit): height rows
//                  of width elements of size bytes (1, 2 or 4), pitch bytes apart, each value's
//                  low size bytes
//
// All take a 1-D grid of any size and stride over the elements.

#define GRID_STRIDE(i, total)                                                      \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (total); \
         i += (long long)gridDim.x * blockDim.x)

#if PLAIN_ENTRIES
extern "C" __global__ void add_bias_f32(float *x, int ld, const float *__restrict__ bias, long long rows, int n) {
    GRID_STRIDE(i, rows * n) {
        long long r = i / n;
        int c = (int)(i - r * n);
        x[r * ld + c] += bias[c];
    }
}
#endif

#define TO(sfx, T)                                                                                  \
    extern "C" __global__ void to_##sfx(const float *__restrict__ x, T *__restrict__ y, long long n) { \
        GRID_STRIDE(i, n) y[i] = from_f32<T>(x[i]);                                                 \
    }
EACH_DTYPE(TO)

#define FROM(sfx, T)                                                                                  \
    extern "C" __global__ void from_##sfx(const T *__restrict__ x, float *__restrict__ y, long long n) { \
        GRID_STRIDE(i, n) y[i] = to_f32(x[i]);                                                        \
    }
EACH_DTYPE(FROM)

#if PLAIN_ENTRIES
extern "C" __global__ void scale_f32(float *x, long long n, float s) {
    GRID_STRIDE(i, n) x[i] *= s;
}

template <typename T>
__device__ void copy_rows(T *__restrict__ dst, const T *__restrict__ src, const int *__restrict__ rows, long long n,
                          int B, int srcB) {
    int i = blockIdx.y, seg = blockIdx.z;
    const T *from = src + ((long long)seg * srcB + rows[i]) * n;
    T *to = dst + ((long long)seg * B + i) * n;
    for (long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x; j < n; j += (long long)gridDim.x * blockDim.x)
        to[j] = from[j];
}

extern "C" __global__ void copy_rows_f32(float *__restrict__ dst, const float *__restrict__ src,
                                          const int *__restrict__ rows, long long n, int B, int srcB) {
    copy_rows(dst, src, rows, n, B, srcB);
}

extern "C" __global__ void copy_rows_u8(unsigned char *__restrict__ dst, const unsigned char *__restrict__ src,
                                         const int *__restrict__ rows, long long n, int B, int srcB) {
    copy_rows(dst, src, rows, n, B, srcB);
}

extern "C" __global__ void memset_rows(unsigned char *dst, unsigned long long pitch, unsigned value, int size,
                                       long long width, long long height) {
    GRID_STRIDE(i, width * height) {
        long long r = i / width, c = i - r * width;
        unsigned char *p = dst + r * pitch + c * size;
        if (size == 4)
            *reinterpret_cast<unsigned *>(p) = value;
        else if (size == 2)
            *reinterpret_cast<unsigned short *>(p) = (unsigned short)value;
        else
            *p = (unsigned char)value;
    }
}
#endif
