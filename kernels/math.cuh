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

// Programmatic dependent launch (sm_90 and newer; no-ops before). A kernel
// launched with cuda.Function.LaunchPDL may start while the previous kernel
// on its stream runs: pdl_release lets the next kernel start early, and
// pdl_wait blocks until the previous kernel has finished and its writes are
// visible. Before pdl_wait a kernel may only read what no kernel in flight
// writes (weights). Launched the ordinary way, both return at once.
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

// prefetch_l2 asks for the 128-byte line holding p in L2, without waiting.
__device__ __forceinline__ void prefetch_l2(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
