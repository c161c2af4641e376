// The C side of package cuda: dlopen'd entry points of the CUDA driver and
// NVRTC, with our own minimal prototypes (no NVIDIA headers). Every wrapper
// returns the library's status code; 0 is success.
#ifndef MAMBAGO_CUDA_SHIM_H
#define MAMBAGO_CUDA_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef int mg_result;
typedef unsigned long long mg_devptr;

// Loading. Each returns NULL on success, else dlerror()'s message.
const char *mg_load_driver(const char *path);
const char *mg_load_nvrtc(const char *path);
// mg_preload dlopens a library globally (NVRTC's builtins, so that NVRTC's
// own dlopen of them by name finds them); NULL on success.
const char *mg_preload(const char *path);
// mg_missing names the first entry point a loaded library lacked, or NULL.
const char *mg_missing(void);

// Driver API.
mg_result mg_cuInit(unsigned flags);
mg_result mg_cuDriverGetVersion(int *v);
mg_result mg_cuDeviceGetCount(int *n);
mg_result mg_cuDeviceGet(int *dev, int ordinal);
mg_result mg_cuDeviceGetName(char *name, int len, int dev);
mg_result mg_cuDeviceGetAttribute(int *v, int attr, int dev);
mg_result mg_cuDeviceTotalMem(size_t *bytes, int dev);
mg_result mg_cuDevicePrimaryCtxRetain(void **ctx, int dev);
mg_result mg_cuDevicePrimaryCtxRelease(int dev);
mg_result mg_cuCtxSetCurrent(void *ctx);
mg_result mg_cuCtxGetCurrent(void **ctx);
mg_result mg_cuCtxSynchronize(void);
mg_result mg_cuMemAlloc(mg_devptr *p, size_t bytes);
mg_result mg_cuMemFree(mg_devptr p);
mg_result mg_cuMemAllocHost(void **p, size_t bytes);
mg_result mg_cuMemFreeHost(void *p);
mg_result mg_cuMemHostGetDevicePointer(mg_devptr *d, void *p);
// What the driver knows of an address (cuPointerGetAttributes): its memory
// type (0: none CUDA knows; 1 host, 2 device, 4 unified), the ordinal of
// the GPU it was allocated on, whether it is managed, and the allocation
// holding it. Every field is zero where the driver does not say.
typedef struct {
	unsigned type;
	int ordinal;
	unsigned long long managed, start, size;
} mg_pointer_info;
mg_result mg_pointer_info_of(mg_devptr p, mg_pointer_info *out);
mg_result mg_cuMemcpyHtoDAsync(mg_devptr dst, const void *src, size_t bytes, void *stream);
mg_result mg_cuMemcpyDtoHAsync(void *dst, mg_devptr src, size_t bytes, void *stream);
mg_result mg_cuMemcpyDtoDAsync(mg_devptr dst, mg_devptr src, size_t bytes, void *stream);
mg_result mg_cuMemsetD32Async(mg_devptr dst, unsigned v, size_t n, void *stream);
mg_result mg_cuStreamCreate(void **s, unsigned flags);
mg_result mg_cuStreamDestroy(void *s);
mg_result mg_cuStreamSynchronize(void *s);
mg_result mg_cuEventCreate(void **e, unsigned flags);
mg_result mg_cuEventDestroy(void *e);
mg_result mg_cuEventRecord(void *e, void *s);
mg_result mg_cuEventSynchronize(void *e);
mg_result mg_cuEventElapsedTime(float *ms, void *start, void *end);
mg_result mg_cuStreamWaitEvent(void *s, void *e, unsigned flags);
mg_result mg_cuModuleLoadData(void **m, const void *image);
mg_result mg_cuModuleUnload(void *m);
mg_result mg_cuModuleGetFunction(void **f, void *m, const char *name);
mg_result mg_cuModuleGetGlobal(mg_devptr *p, size_t *bytes, void *m, const char *name);
mg_result mg_cuFuncSetAttribute(void *f, int attr, int v);
mg_result mg_cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shmem, void *stream, void *args, const int *offsets, int nargs);
mg_result mg_cuLaunchKernelPDL(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shmem, void *stream, void *args, const int *offsets, int nargs);
void mg_launch_layout(int *out);
mg_result mg_cuStreamBeginCapture(void *s, int mode);
mg_result mg_cuStreamEndCapture(void *s, void **graph);
mg_result mg_cuGraphInstantiate(void **exec, void *graph, unsigned long long flags);
mg_result mg_cuGraphLaunch(void *exec, void *s);
mg_result mg_cuGraphExecDestroy(void *exec);
mg_result mg_cuGraphDestroy(void *graph);
const char *mg_cuErrorName(mg_result r);

// Graph edits between capture and instantiation (optional entry points:
// CUDA >= 12.3; mg_graph_edits says whether they all loaded). An edge's
// data is CUgraphEdgeData's 8 bytes; a default edge is all zeros.
typedef struct {
	unsigned char from_port, to_port, type, reserved[5];
} mg_edge;
int mg_graph_edits(void);
mg_result mg_cuGraphGetNodes(void *graph, void **nodes, size_t *n);
mg_result mg_cuGraphNodeGetType(void *node, int *type);
mg_result mg_cuGraphNodeGetDependencies(void *node, void **deps, mg_edge *edges, size_t *n);
mg_result mg_cuGraphNodeGetDependentNodes(void *node, void **deps, mg_edge *edges, size_t *n);
mg_result mg_cuGraphAddDependencies(void *graph, void **from, void **to, const mg_edge *edges, size_t n);
mg_result mg_cuGraphRemoveDependencies(void *graph, void **from, void **to, const mg_edge *edges, size_t n);
// mg_cuGraphKernelNodeFunction gives a kernel node's CUfunction (NULL for
// a kernel given as a CUkernel).
mg_result mg_cuGraphKernelNodeFunction(void *node, void **fn);
// mg_cuGraphMemsetNodeParams gives a memset node's parameters.
mg_result mg_cuGraphMemsetNodeParams(void *node, mg_devptr *dst, size_t *pitch, unsigned *value, unsigned *element,
                                     size_t *width, size_t *height);
// mg_cuGraphAddKernelNode adds a node launching f on a 1-D grid of gx
// blocks of bx threads, arguments packed as for mg_cuLaunchKernel, after
// deps; mg_cuGraphDestroyNode removes a node and its edges.
mg_result mg_cuGraphAddKernelNode(void **node, void *graph, void **deps, size_t ndeps, void *f, unsigned gx, unsigned bx,
                                  void *args, const int *offsets, int nargs);
mg_result mg_cuGraphDestroyNode(void *node);
// Rebinding a graph's buffers after instantiation (optional entry points:
// CUDA >= 12.4; mg_graph_rebinds says whether they all loaded).
int mg_graph_rebinds(void);
// mg_cuGraphKernelNodeArgs reads a kernel node's first count arguments:
// each one's offset and size in the kernel's parameter block, and their
// bytes at those offsets in buf (cap bytes). CUDA_ERROR_NOT_SUPPORTED (801)
// for a node whose arguments were passed as one buffer.
mg_result mg_cuGraphKernelNodeArgs(void *node, int count, unsigned char *buf, size_t cap, int *offsets, int *sizes);
// mg_cuGraphExecKernelNodeSetArgs gives node, in exec, the n arguments at
// offsets in buf, the rest of its launch as captured.
mg_result mg_cuGraphExecKernelNodeSetArgs(void *exec, void *node, unsigned char *buf, const int *offsets, int n);
// Giving a captured kernel node other arguments before instantiation
// (cuda.MemsetEdit's Fold; mg_graph_folds says whether the entry points
// loaded): mg_cuGraphKernelNodeSetArgs gives node the n arguments at
// offsets in buf, the rest of its launch as captured.
int mg_graph_folds(void);
mg_result mg_cuGraphKernelNodeSetArgs(void *node, unsigned char *buf, const int *offsets, int n);
// mg_cuGraphExecMemsetNodeSetDst points memset node, in exec, at dst, the
// rest of its parameters as captured.
mg_result mg_cuGraphExecMemsetNodeSetDst(void *exec, void *node, mg_devptr dst);
// mg_cuGraphMemcpyNodeSpans gives a copy node's device source and
// destination (0 where a side is not device memory) and, in bytes[0] and
// bytes[1], extents that cover what each side touches.
mg_result mg_cuGraphMemcpyNodeSpans(void *node, mg_devptr *src, mg_devptr *dst, size_t *bytes);
// mg_cuTensorMapEncodeTiled encodes a TMA tensor map (map: 128 bytes,
// 64-aligned) as cuTensorMapEncodeTiled does (CUDA >= 12.0; 500 without it).
mg_result mg_cuTensorMapEncodeTiled(void *map, int dtype, unsigned rank, mg_devptr addr, const uint64_t *dims,
                                    const uint64_t *strides, const unsigned *box, const unsigned *estrides, int interleave,
                                    int swizzle, int l2promotion, int oobfill);
void mg_graph_layout(int *out);

// cuBLAS (column-major, as its API is).
const char *mg_load_cublas(const char *path);
mg_result mg_cublasCreate(void **h);
mg_result mg_cublasDestroy(void *h);
mg_result mg_cublasSetStream(void *h, void *stream);
mg_result mg_cublasSetMathMode(void *h, int mode);
mg_result mg_cublasSgemm(void *h, int ta, int tb, int m, int n, int k, const float *alpha, mg_devptr A, int lda,
                         mg_devptr B, int ldb, const float *beta, mg_devptr C, int ldc);
mg_result mg_cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const float *alpha, mg_devptr A, int atype,
                          int lda, mg_devptr B, int btype, int ldb, const float *beta, mg_devptr C, int ctype, int ldc,
                          int compute);
const char *mg_cublasStatus(mg_result r);

// cuBLASLt: a GEMM's descriptors (matmul and layouts; C doubles as D),
// created once per shape, and the heuristic's algorithms for it.
typedef struct {
	uint64_t data[8];
} mg_lt_algo;
typedef struct {
	mg_lt_algo algo;
	size_t workspace;
	int state;
	float waves;
	int reserved[4];
} mg_lt_heuristic;
typedef struct {
	void *desc, *a, *b, *c;
} mg_lt_plan;
const char *mg_load_cublaslt(const char *path);
mg_result mg_ltCreate(void **h);
mg_result mg_ltDestroy(void *h);
mg_result mg_ltPlanCreate(mg_lt_plan *p, int ta, int tb, int m, int n, int k, int atype, int lda, int btype, int ldb,
                          int ctype, int ldc, int compute);
void mg_ltPlanDestroy(mg_lt_plan *p);
mg_result mg_ltHeuristics(void *h, const mg_lt_plan *p, size_t workspace, int want, mg_lt_heuristic *out, int *got);
mg_result mg_ltMatmul(void *h, const mg_lt_plan *p, const float *alpha, mg_devptr A, mg_devptr B, const float *beta,
                      mg_devptr C, const mg_lt_algo *algo, mg_devptr workspace, size_t wsbytes, void *stream);
void mg_lt_layout(int *out);
mg_result mg_cuStreamIsCapturing(void *s, int *status);
mg_result mg_cuCtxGetDevice(int *dev);

// NVRTC.
mg_result mg_nvrtcVersion(int *major, int *minor);
mg_result mg_nvrtcCreateProgram(void **prog, const char *src, const char *name);
mg_result mg_nvrtcCompileProgram(void *prog, int n, const char *const *opts);
mg_result mg_nvrtcGetProgramLog(void *prog, char **log);   // *log is malloc'd; free it
mg_result mg_nvrtcGetCUBIN(void *prog, char **cubin, size_t *size); // *cubin is malloc'd
mg_result mg_nvrtcDestroyProgram(void **prog);
const char *mg_nvrtcErrorString(mg_result r);

#endif
