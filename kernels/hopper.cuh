// Hopper's (sm_90a) pieces shared by the kernels that use the copy engine
// (TMA), mbarriers, clusters and wgmma: gemm_tma.cu and out_norm.cu, and
// the mbarriers of scan_onepass.cu's warps that specialize.
// kernels.Source puts this file in front of every source, after dtype.cuh
// and math.cuh. The tensor map type exists on every target; the mbarriers
// from sm_90 on (traps before); the rest only where __CUDA_ARCH_FEAT_SM90_ALL
// is defined (compiled for sm_90a), so a kernel that uses those must compile
// to something else (a trap) elsewhere.

// A CUtensorMap as the driver encodes it: 128 opaque bytes.
struct __align__(64) tensor_map {
    unsigned long long v[16];
};

#if __CUDA_ARCH__ >= 900
// mbarriers in the block's shared memory, and the copy engine's 2-D copies
// (sm_90: the scan's warps that specialize use them too, compiled for
// sm_90). mbar_arrive releases the
// thread's earlier accesses and mbar_wait acquires them, at block scope;
// mbar_arrive_copies arrives once the thread's earlier cp.async copies
// have landed (counted in the barrier's init count: .noinc).
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n .reg .pred p;\n GT_WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n @!p bra GT_WAIT_%=;\n}" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// mbar_wait_hint is mbar_wait whose every try may suspend the thread up to
// ns nanoseconds (the hardware wakes it when the phase completes): for
// warps that wait long and should leave the issue slots to others.
__device__ __forceinline__ void mbar_wait_hint(unsigned bar, unsigned parity, unsigned ns) {
    asm volatile(
        "{\n .reg .pred p;\n GT_WAITH_%=:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1, %2;\n @!p bra GT_WAITH_%=;\n}" ::"r"(bar),
        "r"(parity), "r"(ns)
        : "memory");
}
// mbar_test reports whether the phase of parity parity has completed, at
// once.
__device__ __forceinline__ bool mbar_test(unsigned bar, unsigned parity) {
    unsigned ok;
    asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return ok;
}
__device__ __forceinline__ void mbar_arrive_copies(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// bar_sync_named is a barrier of the n threads (whole warps) that name
// barrier id (1-15; __syncthreads is 0), ordering their shared-memory
// accesses before it against those after it.
__device__ __forceinline__ void bar_sync_named(unsigned id, unsigned n) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
// tma_load copies the box at (x, y) (x along K) of map into shared memory at
// dst, completing on bar.
__device__ __forceinline__ void tma_load(unsigned dst, const tensor_map *map, unsigned bar, int x, int y) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
        "l"(map), "r"(bar), "r"(x), "r"(y)
        : "memory");
}
// fence_proxy_async orders this thread's earlier writes to shared memory
// before later copy-engine (async proxy) accesses to it that a barrier
// orders after them: a slot written in place, then refilled by tma_load.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// mbar_add_tx adds bytes to the copies the current phase of bar waits for,
// without arriving (mbar_expect_tx arrives too).
__device__ __forceinline__ void mbar_add_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
#else
// Before sm_90 the same names trap, so that a kernel using them compiles on
// every target and is never run where it cannot (its launcher checks).
__device__ __forceinline__ void mbar_init(unsigned, unsigned) { __trap(); }
__device__ __forceinline__ void mbar_arrive(unsigned) { __trap(); }
__device__ __forceinline__ void mbar_wait(unsigned, unsigned) { __trap(); }
__device__ __forceinline__ void mbar_wait_hint(unsigned, unsigned, unsigned) { __trap(); }
__device__ __forceinline__ bool mbar_test(unsigned, unsigned) {
    __trap();
    return false;
}
__device__ __forceinline__ void mbar_arrive_copies(unsigned) { __trap(); }
__device__ __forceinline__ void bar_sync_named(unsigned, unsigned) { __trap(); }
__device__ __forceinline__ void tma_load(unsigned, const tensor_map *, unsigned, int, int) { __trap(); }
__device__ __forceinline__ void mbar_add_tx(unsigned, unsigned) { __trap(); }
__device__ __forceinline__ void fence_proxy_async() { __trap(); }
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// bulk_load copies bytes (a multiple of 16; both addresses 16-byte
// aligned) from global memory at src to shared memory at dst on the copy
// engine, completing on bar (as tma_load's, counted by mbar_expect_tx).
__device__ __forceinline__ void bulk_load(unsigned dst, const void *src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
// mbar_wait_cluster is mbar_wait acquiring at cluster scope: for a barrier
// that other blocks of the cluster arrive on (mbar_arrive_cluster).
__device__ __forceinline__ void mbar_wait_cluster(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n .reg .pred p;\n GT_WAITC_%=:\n mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n @!p bra GT_WAITC_%=;\n}" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// tma_prefetch_map asks for map's descriptor ahead of its first copy.
__device__ __forceinline__ void tma_prefetch_map(const tensor_map *map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(map) : "memory");
}
// wg_desc is the wgmma descriptor of a K-major tile at shared address addr,
// 128-byte rows swizzled in groups of 8 rows (1024 bytes apart).
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
__device__ __forceinline__ void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory"); }


// Clusters (sm_90). cluster_rank is the block's rank in its cluster;
// cluster_sync is a barrier of every thread of every block of the cluster,
// ordering each thread's memory accesses before it against those after it
// on every block (release, then acquire); cluster_map is the shared::cluster
// address of the shared::cta address addr in the block of rank r.
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// cluster_sync_relaxed is cluster_sync without the release: for the last
// barrier before a block exits, once its reads of other blocks' shared
// memory have returned (their values consumed), where nothing written
// before it need be seen by another block after it.
__device__ __forceinline__ void cluster_sync_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n barrier.cluster.wait.aligned;" ::: "memory");
}
__device__ __forceinline__ unsigned cluster_map(unsigned addr, unsigned r) {
    unsigned out;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(addr), "r"(r));
    return out;
}
// cluster_ld reads the f32 at a shared::cluster address (cluster_map's).
__device__ __forceinline__ float cluster_ld(unsigned addr) {
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
    return v;
}
// cluster_ld_u32 and cluster_ld_u64 read the 32- or 64-bit integer at a
// shared::cluster address.
__device__ __forceinline__ unsigned cluster_ld_u32(unsigned addr) {
    unsigned v;
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ unsigned long long cluster_ld_u64(unsigned addr) {
    unsigned long long v;
    asm volatile("ld.shared::cluster.u64 %0, [%1];" : "=l"(v) : "r"(addr) : "memory");
    return v;
}
// cluster_ld4 reads the four f32 at a 16-byte aligned shared::cluster
// address.
__device__ __forceinline__ float4 cluster_ld4(unsigned addr) {
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}
// mbar_arrive_cluster arrives on the mbarrier at a shared::cluster address
// (another block's, through cluster_map), releasing this thread's earlier
// accesses at cluster scope.
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(bar) : "memory");
}
// tma_load_multicast is tma_load into the same shared address of every block
// of the cluster in mask (bit r: rank r), each completing on its own barrier
// at bar's address.
__device__ __forceinline__ void tma_load_multicast(unsigned dst, const tensor_map *map, unsigned bar, int x, int y,
                                                   unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
        "l"(map), "r"(bar), "r"(x), "r"(y), "h"(mask)
        : "memory");
}

// wg_mma runs D (+)= A · Bᵀ for a 64 x N x 16 step of a warpgroup (N = 80,
// 96, 128 or 256: D holds N / 2 floats a thread; A and B from shared memory
// through wg_desc's descriptors); scale 0 overwrites D.
#define WG_MMA80(TY) __device__ __forceinline__ void wg_mma(TY, float (&d)[40], unsigned long long da, unsigned long long db, int scale) { asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %42, 0;\n" " wgmma.mma_async.sync.aligned.m64n80k16.f32." #TY "." #TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, %40, %41, p, 1, 1, 0, 0;\n}" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]) : "l"(da), "l"(db), "r"(scale)); }
WG_MMA80(bf16)
WG_MMA80(f16)
#define WG_MMA96(TY) __device__ __forceinline__ void wg_mma(TY, float (&d)[48], unsigned long long da, unsigned long long db, int scale) { asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %50, 0;\n" " wgmma.mma_async.sync.aligned.m64n96k16.f32." #TY "." #TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, %48, %49, p, 1, 1, 0, 0;\n}" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]) : "l"(da), "l"(db), "r"(scale)); }
WG_MMA96(bf16)
WG_MMA96(f16)
#define WG_MMA128(TY) __device__ __forceinline__ void wg_mma(TY, float (&d)[64], unsigned long long da, unsigned long long db, int scale) { asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n" " wgmma.mma_async.sync.aligned.m64n128k16.f32." #TY "." #TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) : "l"(da), "l"(db), "r"(scale)); }
WG_MMA128(bf16)
WG_MMA128(f16)
#define WG_MMA256(TY) __device__ __forceinline__ void wg_mma(TY, float (&d)[128], unsigned long long da, unsigned long long db, int scale) { asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n" " wgmma.mma_async.sync.aligned.m64n256k16.f32." #TY "." #TY " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) : "l"(da), "l"(db), "r"(scale)); }
WG_MMA256(bf16)
WG_MMA256(f16)
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
