// Storage types of activations and weights, and their conversions to and from
// f32, in which every kernel computes. kernels.Source puts this file in front
// of every kernel source.
//
// bf16 and f16 are 16-bit patterns, so no CUDA header is needed: a bf16 is
// the top half of an f32, and both convert through PTX (round to nearest
// even; sm_80 and newer).

struct bf16 {
    unsigned short bits;
};
struct f16 {
    unsigned short bits;
};

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(bf16 v) { return __uint_as_float((unsigned)v.bits << 16); }
__device__ __forceinline__ float to_f32(f16 v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
    return f;
}

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
    return v;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float v) {
    bf16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
    return r;
}
template <>
__device__ __forceinline__ f16 from_f32<f16>(float v) {
    f16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
    return r;
}

// store4 writes four consecutive values to p (aligned to four elements) as
// one store.
__device__ __forceinline__ void store4(float *p, float4 v) { *reinterpret_cast<float4 *>(p) = v; }
template <class T>
__device__ __forceinline__ void store4(T *p, float4 v) {
    uint2 u = make_uint2(from_f32<T>(v.x).bits | (unsigned)from_f32<T>(v.y).bits << 16,
                         from_f32<T>(v.z).bits | (unsigned)from_f32<T>(v.w).bits << 16);
    *reinterpret_cast<uint2 *>(p) = u;
}

// load4 reads four consecutive values at p (aligned to four elements) as
// one load, in f32.
__device__ __forceinline__ float4 load4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
template <class T>
__device__ __forceinline__ float4 load4(const T *p) {
    uint2 u = *reinterpret_cast<const uint2 *>(p);
    T a, b, c, d;
    a.bits = u.x & 0xffff, b.bits = u.x >> 16, c.bits = u.y & 0xffff, d.bits = u.y >> 16;
    return make_float4(to_f32(a), to_f32(b), to_f32(c), to_f32(d));
}

// EACH_DTYPE(X) expands X(sfx, T) for every storage type. A kernel file
// defines its typed entries through it, one extern "C" kernel per type named
// <kernel>_##sfx: rmsnorm_f32, rmsnorm_bf16, rmsnorm_f16. kernels.DTypes
// lists the same suffixes. The engine compiles a file with typed entries
// once per type, as parts that NVRTC compiles at once (kernels.Unit):
// DTYPE_ONLY_<sfx> makes EACH_DTYPE expand that type alone.
#if defined(DTYPE_ONLY_f32)
#define EACH_DTYPE(X) X(f32, float)
#elif defined(DTYPE_ONLY_bf16)
#define EACH_DTYPE(X) X(bf16, bf16)
#elif defined(DTYPE_ONLY_f16)
#define EACH_DTYPE(X) X(f16, f16)
#else
#define EACH_DTYPE(X) X(f32, float) X(bf16, bf16) X(f16, f16)
#endif
// PLAIN_ENTRIES is 1 where a program holds its file's plain entries (those
// not made per type): the whole file, and its first type's part, where the
// engine looks them up. A file with typed entries puts its plain ones under
// #if PLAIN_ENTRIES, so the other parts do not compile them again.
#if defined(DTYPE_ONLY_bf16) || defined(DTYPE_ONLY_f16)
#define PLAIN_ENTRIES 0
#else
#define PLAIN_ENTRIES 1
#endif
