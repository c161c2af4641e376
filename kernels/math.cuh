// Device helpers every kernel source shares; kernels.Source puts this file,
// after dtype.cuh, in front of each.

// warp_sum returns the sum of v over the warp, in every lane.
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// softplus as PyTorch computes it, with its threshold 20.
__device__ __forceinline__ float softplus_f(float x) { return x > 20.f ? x : log1pf(__expf(x)); }

// exp2 on the special function unit, results below 2^-126 flushed to zero (a
// decay that small is zero to the state); relative error 2^-22.
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float silu_f(float z) { return __fdividef(z, 1.f + __expf(-z)); }
