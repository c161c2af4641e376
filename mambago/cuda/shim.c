// See shim.h. Entry points are looked up once, at load, by their versioned
// names (the _v2 symbols the CUDA 12/13 headers map the plain names to).
#include "shim.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const char *missing;

const char *mg_missing(void) { return missing; }

const char *mg_preload(const char *path) { return dlopen(path, RTLD_NOW | RTLD_GLOBAL) ? NULL : dlerror(); }

static void *sym(void *lib, const char *name) {
	void *p = dlsym(lib, name);
	if (!p && !missing) missing = name;
	return p;
}

#define FN(ret, name, args) static ret(*p_##name) args
FN(int, cuInit, (unsigned));
FN(int, cuDriverGetVersion, (int *));
FN(int, cuDeviceGetCount, (int *));
FN(int, cuDeviceGet, (int *, int));
FN(int, cuDeviceGetName, (char *, int, int));
FN(int, cuDeviceGetAttribute, (int *, int, int));
FN(int, cuDeviceTotalMem, (size_t *, int));
FN(int, cuDevicePrimaryCtxRetain, (void **, int));
FN(int, cuDevicePrimaryCtxRelease, (int));
FN(int, cuCtxSetCurrent, (void *));
FN(int, cuCtxGetCurrent, (void **));
FN(int, cuCtxSynchronize, (void));
FN(int, cuMemAlloc, (mg_devptr *, size_t));
FN(int, cuMemFree, (mg_devptr));
FN(int, cuMemAllocHost, (void **, size_t));
FN(int, cuMemFreeHost, (void *));
FN(int, cuMemHostGetDevicePointer, (mg_devptr *, void *, unsigned));
FN(int, cuPointerGetAttributes, (unsigned, int *, void **, mg_devptr));
FN(int, cuMemcpyHtoDAsync, (mg_devptr, const void *, size_t, void *));
FN(int, cuMemcpyDtoHAsync, (void *, mg_devptr, size_t, void *));
FN(int, cuMemcpyDtoDAsync, (mg_devptr, mg_devptr, size_t, void *));
FN(int, cuMemsetD32Async, (mg_devptr, unsigned, size_t, void *));
FN(int, cuStreamCreate, (void **, unsigned));
FN(int, cuStreamDestroy, (void *));
FN(int, cuStreamSynchronize, (void *));
FN(int, cuEventCreate, (void **, unsigned));
FN(int, cuEventDestroy, (void *));
FN(int, cuEventRecord, (void *, void *));
FN(int, cuEventSynchronize, (void *));
FN(int, cuEventElapsedTime, (float *, void *, void *));
FN(int, cuStreamWaitEvent, (void *, void *, unsigned));
FN(int, cuModuleLoadData, (void **, const void *));
FN(int, cuModuleUnload, (void *));
FN(int, cuModuleGetFunction, (void **, void *, const char *));
FN(int, cuModuleGetGlobal, (mg_devptr *, size_t *, void *, const char *));
FN(int, cuFuncSetAttribute, (void *, int, int));
FN(int, cuLaunchKernel, (void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                         void **, void **));
// cuLaunchKernelEx's configuration, laid out as cuda.h declares it: one
// attribute is an id padded to 8 bytes and a 64-byte value union.
typedef struct {
	int id;
	char pad[4];
	union {
		char raw[64];
		int i;
	} value;
} mg_launch_attr;
typedef struct {
	unsigned gx, gy, gz, bx, by, bz, shmem;
	void *stream;
	mg_launch_attr *attrs;
	unsigned nattrs;
} mg_launch_config;
FN(int, cuLaunchKernelEx, (const mg_launch_config *, void *, void **, void **));
FN(int, cuStreamBeginCapture, (void *, int));
FN(int, cuStreamEndCapture, (void *, void **));
FN(int, cuGraphInstantiateWithFlags, (void **, void *, unsigned long long));
FN(int, cuGraphLaunch, (void *, void *));
FN(int, cuGraphExecDestroy, (void *));
FN(int, cuGraphDestroy, (void *));
FN(int, cuGetErrorName, (int, const char **));
// Graph edits (optional). The kernel and memset node parameters as cuda.h
// lays them out (CUDA_KERNEL_NODE_PARAMS_v2, CUDA_MEMSET_NODE_PARAMS);
// mg_graph_layout reports them for a test.
typedef struct {
	void *func;
	unsigned gx, gy, gz, bx, by, bz, shmem;
	void **params, **extra;
	void *kern, *ctx;
	char tail[64]; // room, should a driver's struct ever grow
} mg_kernel_node;
typedef struct {
	mg_devptr dst;
	size_t pitch;
	unsigned value, element;
	size_t width, height;
	char tail[64];
} mg_memset_node;
FN(int, cuGraphGetNodes, (void *, void **, size_t *));
FN(int, cuGraphNodeGetType, (void *, int *));
FN(int, cuGraphNodeGetDependencies, (void *, void **, mg_edge *, size_t *));
FN(int, cuGraphNodeGetDependentNodes, (void *, void **, mg_edge *, size_t *));
FN(int, cuGraphAddDependencies, (void *, void **, void **, const mg_edge *, size_t));
FN(int, cuGraphRemoveDependencies, (void *, void **, void **, const mg_edge *, size_t));
FN(int, cuGraphKernelNodeGetParams, (void *, mg_kernel_node *));
FN(int, cuGraphMemsetNodeGetParams, (void *, mg_memset_node *));
FN(int, cuGraphAddKernelNode, (void **, void *, void **, size_t, const mg_kernel_node *));
FN(int, cuGraphDestroyNode, (void *));
// Rebinding a graph's buffers (optional: CUDA >= 12.4 for the parameter
// info; mg_graph_rebinds says whether they all loaded). cuda.h's
// CUDA_MEMCPY3D, the fields a copy node's check reads.
typedef struct {
	size_t srcX, srcY, srcZ, srcLOD;
	int srcType;
	const void *srcHost;
	mg_devptr srcDevice;
	void *srcArray, *reserved0;
	size_t srcPitch, srcHeight;
	size_t dstX, dstY, dstZ, dstLOD;
	int dstType;
	void *dstHost;
	mg_devptr dstDevice;
	void *dstArray, *reserved1;
	size_t dstPitch, dstHeight;
	size_t width, height, depth;
} mg_memcpy3d;
FN(int, cuFuncGetParamInfo, (void *, size_t, size_t *, size_t *));
FN(int, cuKernelGetParamInfo, (void *, size_t, size_t *, size_t *));
FN(int, cuGraphExecKernelNodeSetParams, (void *, void *, const mg_kernel_node *));
FN(int, cuGraphKernelNodeSetParams, (void *, const mg_kernel_node *));
FN(int, cuGraphExecMemsetNodeSetParams, (void *, void *, const mg_memset_node *, void *));
FN(int, cuGraphMemcpyNodeGetParams, (void *, mg_memcpy3d *));
FN(int, cuCtxGetCurrent, (void **));
FN(int, cuTensorMapEncodeTiled, (void *, int, unsigned, mg_devptr, const uint64_t *, const uint64_t *, const unsigned *,
                                 const unsigned *, int, int, int, int));

FN(int, cublasCreate, (void **));
FN(int, cublasDestroy, (void *));
FN(int, cublasSetStream, (void *, void *));
FN(int, cublasSetMathMode, (void *, int));
FN(int, cublasSgemm, (void *, int, int, int, int, int, const float *, mg_devptr, int, mg_devptr, int, const float *,
                      mg_devptr, int));
FN(int, cublasGemmEx, (void *, int, int, int, int, int, const void *, mg_devptr, int, int, mg_devptr, int, int,
                       const void *, mg_devptr, int, int, int, int));
FN(const char *, cublasGetStatusString, (int));

FN(int, cublasLtCreate, (void **));
FN(int, cublasLtDestroy, (void *));
FN(int, cublasLtMatmulDescCreate, (void **, int, int));
FN(int, cublasLtMatmulDescDestroy, (void *));
FN(int, cublasLtMatmulDescSetAttribute, (void *, int, const void *, size_t));
FN(int, cublasLtMatrixLayoutCreate, (void **, int, uint64_t, uint64_t, int64_t));
FN(int, cublasLtMatrixLayoutDestroy, (void *));
FN(int, cublasLtMatmulPreferenceCreate, (void **));
FN(int, cublasLtMatmulPreferenceDestroy, (void *));
FN(int, cublasLtMatmulPreferenceSetAttribute, (void *, int, const void *, size_t));
FN(int, cublasLtMatmulAlgoGetHeuristic, (void *, void *, void *, void *, void *, void *, void *, int, mg_lt_heuristic *,
                                         int *));
FN(int, cublasLtMatmul, (void *, void *, const void *, mg_devptr, void *, mg_devptr, void *, const void *, mg_devptr,
                         void *, mg_devptr, void *, const mg_lt_algo *, mg_devptr, size_t, void *));
FN(int, cuStreamIsCapturing, (void *, int *));
FN(int, cuCtxGetDevice, (int *));

FN(int, nvrtcVersion, (int *, int *));
FN(int, nvrtcCreateProgram, (void **, const char *, const char *, int, const char *const *, const char *const *));
FN(int, nvrtcCompileProgram, (void *, int, const char *const *));
FN(int, nvrtcGetProgramLogSize, (void *, size_t *));
FN(int, nvrtcGetProgramLog, (void *, char *));
FN(int, nvrtcGetCUBINSize, (void *, size_t *));
FN(int, nvrtcGetCUBIN, (void *, char *));
FN(int, nvrtcDestroyProgram, (void **));
FN(const char *, nvrtcGetErrorString, (int));

#define LOAD(lib, name, symname) p_##name = sym(lib, symname)

const char *mg_load_driver(const char *path) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) return dlerror();
	LOAD(h, cuInit, "cuInit");
	LOAD(h, cuDriverGetVersion, "cuDriverGetVersion");
	LOAD(h, cuDeviceGetCount, "cuDeviceGetCount");
	LOAD(h, cuDeviceGet, "cuDeviceGet");
	LOAD(h, cuDeviceGetName, "cuDeviceGetName");
	LOAD(h, cuDeviceGetAttribute, "cuDeviceGetAttribute");
	LOAD(h, cuDeviceTotalMem, "cuDeviceTotalMem_v2");
	LOAD(h, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	LOAD(h, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
	LOAD(h, cuCtxSetCurrent, "cuCtxSetCurrent");
	LOAD(h, cuCtxGetCurrent, "cuCtxGetCurrent");
	LOAD(h, cuCtxSynchronize, "cuCtxSynchronize");
	LOAD(h, cuMemAlloc, "cuMemAlloc_v2");
	LOAD(h, cuMemFree, "cuMemFree_v2");
	LOAD(h, cuMemAllocHost, "cuMemAllocHost_v2");
	LOAD(h, cuMemFreeHost, "cuMemFreeHost");
	LOAD(h, cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
	LOAD(h, cuPointerGetAttributes, "cuPointerGetAttributes");
	LOAD(h, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
	LOAD(h, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
	LOAD(h, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
	LOAD(h, cuMemsetD32Async, "cuMemsetD32Async");
	LOAD(h, cuStreamCreate, "cuStreamCreate");
	LOAD(h, cuStreamDestroy, "cuStreamDestroy_v2");
	LOAD(h, cuStreamSynchronize, "cuStreamSynchronize");
	LOAD(h, cuEventCreate, "cuEventCreate");
	LOAD(h, cuEventDestroy, "cuEventDestroy_v2");
	LOAD(h, cuEventRecord, "cuEventRecord");
	LOAD(h, cuEventSynchronize, "cuEventSynchronize");
	p_cuEventElapsedTime = dlsym(h, "cuEventElapsedTime_v2"); // CUDA >= 12.8
	if (!p_cuEventElapsedTime) LOAD(h, cuEventElapsedTime, "cuEventElapsedTime");
	LOAD(h, cuStreamWaitEvent, "cuStreamWaitEvent");
	LOAD(h, cuModuleLoadData, "cuModuleLoadData");
	LOAD(h, cuModuleUnload, "cuModuleUnload");
	LOAD(h, cuModuleGetFunction, "cuModuleGetFunction");
	LOAD(h, cuModuleGetGlobal, "cuModuleGetGlobal_v2");
	LOAD(h, cuFuncSetAttribute, "cuFuncSetAttribute");
	LOAD(h, cuLaunchKernel, "cuLaunchKernel");
	LOAD(h, cuStreamBeginCapture, "cuStreamBeginCapture_v2");
	LOAD(h, cuStreamEndCapture, "cuStreamEndCapture");
	LOAD(h, cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
	LOAD(h, cuGraphLaunch, "cuGraphLaunch");
	LOAD(h, cuGraphExecDestroy, "cuGraphExecDestroy");
	LOAD(h, cuGraphDestroy, "cuGraphDestroy");
	LOAD(h, cuGetErrorName, "cuGetErrorName");
	LOAD(h, cuStreamIsCapturing, "cuStreamIsCapturing");
	LOAD(h, cuCtxGetDevice, "cuCtxGetDevice");
	p_cuLaunchKernelEx = dlsym(h, "cuLaunchKernelEx"); // optional: CUDA >= 11.8; mg_cuLaunchKernelPDL says so
	// Optional: graph edits (CUDA >= 12.3, the edge-data entry points); mg_graph_edits says so.
	p_cuGraphGetNodes = dlsym(h, "cuGraphGetNodes");
	p_cuGraphNodeGetType = dlsym(h, "cuGraphNodeGetType");
	p_cuGraphNodeGetDependencies = dlsym(h, "cuGraphNodeGetDependencies_v2");
	p_cuGraphNodeGetDependentNodes = dlsym(h, "cuGraphNodeGetDependentNodes_v2");
	p_cuGraphAddDependencies = dlsym(h, "cuGraphAddDependencies_v2");
	p_cuGraphRemoveDependencies = dlsym(h, "cuGraphRemoveDependencies_v2");
	p_cuGraphKernelNodeGetParams = dlsym(h, "cuGraphKernelNodeGetParams_v2");
	p_cuGraphMemsetNodeGetParams = dlsym(h, "cuGraphMemsetNodeGetParams");
	p_cuGraphAddKernelNode = dlsym(h, "cuGraphAddKernelNode_v2");
	p_cuGraphDestroyNode = dlsym(h, "cuGraphDestroyNode");
	// Optional: rebinding (CUDA >= 12.4); mg_graph_rebinds says so.
	p_cuFuncGetParamInfo = dlsym(h, "cuFuncGetParamInfo");
	p_cuKernelGetParamInfo = dlsym(h, "cuKernelGetParamInfo");
	p_cuGraphExecKernelNodeSetParams = dlsym(h, "cuGraphExecKernelNodeSetParams_v2");
	p_cuGraphKernelNodeSetParams = dlsym(h, "cuGraphKernelNodeSetParams_v2");
	p_cuGraphExecMemsetNodeSetParams = dlsym(h, "cuGraphExecMemsetNodeSetParams");
	p_cuGraphMemcpyNodeGetParams = dlsym(h, "cuGraphMemcpyNodeGetParams");
	p_cuCtxGetCurrent = dlsym(h, "cuCtxGetCurrent");
	p_cuTensorMapEncodeTiled = dlsym(h, "cuTensorMapEncodeTiled"); // optional: CUDA >= 12.0
	return NULL;
}

const char *mg_load_cublas(const char *path) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) return dlerror();
	LOAD(h, cublasCreate, "cublasCreate_v2");
	LOAD(h, cublasDestroy, "cublasDestroy_v2");
	LOAD(h, cublasSetStream, "cublasSetStream_v2");
	LOAD(h, cublasSetMathMode, "cublasSetMathMode");
	LOAD(h, cublasSgemm, "cublasSgemm_v2");
	LOAD(h, cublasGemmEx, "cublasGemmEx");
	LOAD(h, cublasGetStatusString, "cublasGetStatusString");
	return NULL;
}

const char *mg_load_cublaslt(const char *path) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) return dlerror();
	LOAD(h, cublasLtCreate, "cublasLtCreate");
	LOAD(h, cublasLtDestroy, "cublasLtDestroy");
	LOAD(h, cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate");
	LOAD(h, cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy");
	LOAD(h, cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute");
	LOAD(h, cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate");
	LOAD(h, cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy");
	LOAD(h, cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate");
	LOAD(h, cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy");
	LOAD(h, cublasLtMatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
	LOAD(h, cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic");
	LOAD(h, cublasLtMatmul, "cublasLtMatmul");
	return NULL;
}

const char *mg_load_nvrtc(const char *path) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) return dlerror();
	LOAD(h, nvrtcVersion, "nvrtcVersion");
	LOAD(h, nvrtcCreateProgram, "nvrtcCreateProgram");
	LOAD(h, nvrtcCompileProgram, "nvrtcCompileProgram");
	LOAD(h, nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize");
	LOAD(h, nvrtcGetProgramLog, "nvrtcGetProgramLog");
	LOAD(h, nvrtcGetCUBINSize, "nvrtcGetCUBINSize");
	LOAD(h, nvrtcGetCUBIN, "nvrtcGetCUBIN");
	LOAD(h, nvrtcDestroyProgram, "nvrtcDestroyProgram");
	LOAD(h, nvrtcGetErrorString, "nvrtcGetErrorString");
	return NULL;
}

// A call through an entry point that failed to load reports CUDA_ERROR_NOT_FOUND (500).
#define CALL(name, ...) return p_##name ? p_##name(__VA_ARGS__) : 500

mg_result mg_cuInit(unsigned f) { CALL(cuInit, f); }
mg_result mg_cuDriverGetVersion(int *v) { CALL(cuDriverGetVersion, v); }
mg_result mg_cuDeviceGetCount(int *n) { CALL(cuDeviceGetCount, n); }
mg_result mg_cuDeviceGet(int *d, int o) { CALL(cuDeviceGet, d, o); }
mg_result mg_cuDeviceGetName(char *s, int n, int d) { CALL(cuDeviceGetName, s, n, d); }
mg_result mg_cuDeviceGetAttribute(int *v, int a, int d) { CALL(cuDeviceGetAttribute, v, a, d); }
mg_result mg_cuDeviceTotalMem(size_t *b, int d) { CALL(cuDeviceTotalMem, b, d); }
mg_result mg_cuDevicePrimaryCtxRetain(void **c, int d) { CALL(cuDevicePrimaryCtxRetain, c, d); }
mg_result mg_cuDevicePrimaryCtxRelease(int d) { CALL(cuDevicePrimaryCtxRelease, d); }
mg_result mg_cuCtxSetCurrent(void *c) { CALL(cuCtxSetCurrent, c); }
mg_result mg_cuCtxGetCurrent(void **c) { CALL(cuCtxGetCurrent, c); }
mg_result mg_cuCtxSynchronize(void) { return p_cuCtxSynchronize ? p_cuCtxSynchronize() : 500; }
mg_result mg_cuMemAlloc(mg_devptr *p, size_t b) { CALL(cuMemAlloc, p, b); }
mg_result mg_cuMemFree(mg_devptr p) { CALL(cuMemFree, p); }
mg_result mg_cuMemAllocHost(void **p, size_t b) { CALL(cuMemAllocHost, p, b); }
mg_result mg_cuMemFreeHost(void *p) { CALL(cuMemFreeHost, p); }
mg_result mg_cuMemHostGetDevicePointer(mg_devptr *d, void *p) { CALL(cuMemHostGetDevicePointer, d, p, 0); }
mg_result mg_pointer_info_of(mg_devptr p, mg_pointer_info *out) {
	// CUpointer_attribute: MEMORY_TYPE 2, IS_MANAGED 8, DEVICE_ORDINAL 9,
	// RANGE_START_ADDR 11, RANGE_SIZE 12. The managed flag is a bool the
	// driver writes into the low byte of a zeroed 8-byte slot.
	int attrs[5] = {2, 8, 9, 11, 12};
	void *data[5] = {&out->type, &out->managed, &out->ordinal, &out->start, &out->size};
	memset(out, 0, sizeof *out);
	CALL(cuPointerGetAttributes, 5, attrs, data, p);
}
mg_result mg_cuMemcpyHtoDAsync(mg_devptr d, const void *s, size_t b, void *st) { CALL(cuMemcpyHtoDAsync, d, s, b, st); }
mg_result mg_cuMemcpyDtoHAsync(void *d, mg_devptr s, size_t b, void *st) { CALL(cuMemcpyDtoHAsync, d, s, b, st); }
mg_result mg_cuMemcpyDtoDAsync(mg_devptr d, mg_devptr s, size_t b, void *st) { CALL(cuMemcpyDtoDAsync, d, s, b, st); }
mg_result mg_cuMemsetD32Async(mg_devptr d, unsigned v, size_t n, void *st) { CALL(cuMemsetD32Async, d, v, n, st); }
mg_result mg_cuStreamCreate(void **s, unsigned f) { CALL(cuStreamCreate, s, f); }
mg_result mg_cuStreamDestroy(void *s) { CALL(cuStreamDestroy, s); }
mg_result mg_cuStreamSynchronize(void *s) { CALL(cuStreamSynchronize, s); }
mg_result mg_cuEventCreate(void **e, unsigned f) { CALL(cuEventCreate, e, f); }
mg_result mg_cuEventDestroy(void *e) { CALL(cuEventDestroy, e); }
mg_result mg_cuEventRecord(void *e, void *s) { CALL(cuEventRecord, e, s); }
mg_result mg_cuEventSynchronize(void *e) { CALL(cuEventSynchronize, e); }
mg_result mg_cuEventElapsedTime(float *ms, void *a, void *b) { CALL(cuEventElapsedTime, ms, a, b); }
mg_result mg_cuStreamWaitEvent(void *s, void *e, unsigned f) { CALL(cuStreamWaitEvent, s, e, f); }
mg_result mg_cuModuleLoadData(void **m, const void *img) { CALL(cuModuleLoadData, m, img); }
mg_result mg_cuModuleUnload(void *m) { CALL(cuModuleUnload, m); }
mg_result mg_cuModuleGetFunction(void **f, void *m, const char *n) { CALL(cuModuleGetFunction, f, m, n); }
mg_result mg_cuModuleGetGlobal(mg_devptr *p, size_t *bytes, void *m, const char *n) {
	CALL(cuModuleGetGlobal, p, bytes, m, n);
}
mg_result mg_cuFuncSetAttribute(void *f, int a, int v) { CALL(cuFuncSetAttribute, f, a, v); }
mg_result mg_cuStreamBeginCapture(void *s, int mode) { CALL(cuStreamBeginCapture, s, mode); }
mg_result mg_cuStreamEndCapture(void *s, void **g) { CALL(cuStreamEndCapture, s, g); }
mg_result mg_cuGraphInstantiate(void **e, void *g, unsigned long long f) { CALL(cuGraphInstantiateWithFlags, e, g, f); }
mg_result mg_cuGraphLaunch(void *e, void *s) { CALL(cuGraphLaunch, e, s); }
mg_result mg_cuGraphExecDestroy(void *e) { CALL(cuGraphExecDestroy, e); }
mg_result mg_cuGraphDestroy(void *g) { CALL(cuGraphDestroy, g); }

int mg_graph_edits(void) {
	return p_cuGraphGetNodes && p_cuGraphNodeGetType && p_cuGraphNodeGetDependencies &&
	       p_cuGraphNodeGetDependentNodes && p_cuGraphAddDependencies && p_cuGraphRemoveDependencies &&
	       p_cuGraphKernelNodeGetParams && p_cuGraphMemsetNodeGetParams && p_cuGraphAddKernelNode &&
	       p_cuGraphDestroyNode;
}
mg_result mg_cuGraphGetNodes(void *g, void **nodes, size_t *n) { CALL(cuGraphGetNodes, g, nodes, n); }
mg_result mg_cuGraphNodeGetType(void *node, int *t) { CALL(cuGraphNodeGetType, node, t); }
mg_result mg_cuGraphNodeGetDependencies(void *node, void **deps, mg_edge *e, size_t *n) {
	CALL(cuGraphNodeGetDependencies, node, deps, e, n);
}
mg_result mg_cuGraphNodeGetDependentNodes(void *node, void **deps, mg_edge *e, size_t *n) {
	CALL(cuGraphNodeGetDependentNodes, node, deps, e, n);
}
mg_result mg_cuGraphAddDependencies(void *g, void **from, void **to, const mg_edge *e, size_t n) {
	CALL(cuGraphAddDependencies, g, from, to, e, n);
}
mg_result mg_cuGraphRemoveDependencies(void *g, void **from, void **to, const mg_edge *e, size_t n) {
	CALL(cuGraphRemoveDependencies, g, from, to, e, n);
}
mg_result mg_cuGraphKernelNodeFunction(void *node, void **fn) {
	mg_kernel_node p;
	memset(&p, 0, sizeof p);
	if (!p_cuGraphKernelNodeGetParams) return 500;
	int r = p_cuGraphKernelNodeGetParams(node, &p);
	*fn = r ? NULL : p.func;
	return r;
}
mg_result mg_cuGraphMemsetNodeParams(void *node, mg_devptr *dst, size_t *pitch, unsigned *value, unsigned *element,
                                     size_t *width, size_t *height) {
	mg_memset_node p;
	memset(&p, 0, sizeof p);
	if (!p_cuGraphMemsetNodeGetParams) return 500;
	int r = p_cuGraphMemsetNodeGetParams(node, &p);
	if (r) return r;
	*dst = p.dst, *pitch = p.pitch, *value = p.value, *element = p.element, *width = p.width, *height = p.height;
	return 0;
}
mg_result mg_cuGraphDestroyNode(void *node) { CALL(cuGraphDestroyNode, node); }

static int kernel_params(void **params, void *args, const int *offsets, int nargs);

int mg_graph_rebinds(void) {
	return mg_graph_edits() && p_cuFuncGetParamInfo && p_cuKernelGetParamInfo && p_cuGraphExecKernelNodeSetParams &&
	       p_cuGraphExecMemsetNodeSetParams && p_cuGraphMemcpyNodeGetParams && p_cuCtxGetCurrent;
}

// param_info is cuFuncGetParamInfo, or cuKernelGetParamInfo for a node
// that names its kernel as a CUkernel.
static int param_info(const mg_kernel_node *p, size_t i, size_t *off, size_t *size) {
	if (p->func) return p_cuFuncGetParamInfo ? p_cuFuncGetParamInfo(p->func, i, off, size) : 500;
	return p_cuKernelGetParamInfo ? p_cuKernelGetParamInfo(p->kern, i, off, size) : 500;
}

mg_result mg_cuGraphKernelNodeArgs(void *node, int count, unsigned char *buf, size_t cap, int *offsets, int *sizes) {
	mg_kernel_node p;
	memset(&p, 0, sizeof p);
	if (!p_cuGraphKernelNodeGetParams) return 500;
	int r = p_cuGraphKernelNodeGetParams(node, &p);
	if (r) return r;
	if (!p.params) return 801; // CUDA_ERROR_NOT_SUPPORTED: arguments passed as one buffer (`extra`)
	for (int i = 0; i < count; i++) {
		size_t off = 0, size = 0;
		r = param_info(&p, (size_t)i, &off, &size);
		if (r) return r;
		if (off + size > cap) return 1;
		memcpy(buf + off, p.params[i], size);
		offsets[i] = (int)off, sizes[i] = (int)size;
	}
	return 0;
}

// node_with_args fills *p with kernel node's launch as captured, but for
// its arguments: the n at offsets in buf, through params (64 slots).
static int node_with_args(mg_kernel_node *p, void **params, void *node, unsigned char *buf, const int *offsets, int n) {
	if (kernel_params(params, buf, offsets, n)) return 1;
	memset(p, 0, sizeof *p);
	if (!p_cuGraphKernelNodeGetParams) return 500;
	int r = p_cuGraphKernelNodeGetParams(node, p);
	if (r) return r;
	p->params = params, p->extra = NULL;
	return 0;
}

mg_result mg_cuGraphExecKernelNodeSetArgs(void *exec, void *node, unsigned char *buf, const int *offsets, int n) {
	void *params[64];
	mg_kernel_node p;
	if (!p_cuGraphExecKernelNodeSetParams) return 500;
	int r = node_with_args(&p, params, node, buf, offsets, n);
	return r ? r : p_cuGraphExecKernelNodeSetParams(exec, node, &p);
}

int mg_graph_folds(void) { return mg_graph_rebinds() && p_cuGraphKernelNodeSetParams; }

mg_result mg_cuGraphKernelNodeSetArgs(void *node, unsigned char *buf, const int *offsets, int n) {
	void *params[64];
	mg_kernel_node p;
	if (!p_cuGraphKernelNodeSetParams) return 500;
	int r = node_with_args(&p, params, node, buf, offsets, n);
	return r ? r : p_cuGraphKernelNodeSetParams(node, &p);
}

mg_result mg_cuGraphExecMemsetNodeSetDst(void *exec, void *node, mg_devptr dst) {
	mg_memset_node p;
	memset(&p, 0, sizeof p);
	void *ctx = NULL;
	if (!p_cuGraphMemsetNodeGetParams || !p_cuGraphExecMemsetNodeSetParams || !p_cuCtxGetCurrent) return 500;
	int r = p_cuGraphMemsetNodeGetParams(node, &p);
	if (!r) r = p_cuCtxGetCurrent(&ctx);
	if (r) return r;
	p.dst = dst;
	return p_cuGraphExecMemsetNodeSetParams(exec, node, &p, ctx);
}

mg_result mg_cuGraphMemcpyNodeSpans(void *node, mg_devptr *src, mg_devptr *dst, size_t *bytes) {
	mg_memcpy3d p;
	memset(&p, 0, sizeof p);
	if (!p_cuGraphMemcpyNodeGetParams) return 500;
	int r = p_cuGraphMemcpyNodeGetParams(node, &p);
	if (r) return r;
	// Each side's extent as a superset: its origin's offset, then every row
	// of every slice at the larger of its pitch and the width.
	size_t h = p.height ? p.height : 1, d = p.depth ? p.depth : 1;
	size_t sp = p.srcPitch > p.width ? p.srcPitch : p.width, dp = p.dstPitch > p.width ? p.dstPitch : p.width;
	size_t sh = p.srcHeight > h ? p.srcHeight : h, dh = p.dstHeight > h ? p.dstHeight : h;
	*src = p.srcDevice ? p.srcDevice + p.srcX + sp * (p.srcY + sh * p.srcZ) : 0;
	*dst = p.dstDevice ? p.dstDevice + p.dstX + dp * (p.dstY + dh * p.dstZ) : 0;
	bytes[0] = sp * sh * d, bytes[1] = dp * dh * d;
	return 0;
}
// mg_graph_layout reports the edge's size and the offsets in the node
// parameter structs as the shim lays them out: kernel node (params, kern,
// ctx, the end of cuda.h's struct), memset node (value, width, height, end).
void mg_graph_layout(int *out) {
	out[0] = sizeof(mg_edge);
	out[1] = offsetof(mg_kernel_node, params);
	out[2] = offsetof(mg_kernel_node, kern);
	out[3] = offsetof(mg_kernel_node, ctx);
	out[4] = offsetof(mg_kernel_node, tail);
	out[5] = offsetof(mg_memset_node, value);
	out[6] = offsetof(mg_memset_node, width);
	out[7] = offsetof(mg_memset_node, height);
	out[8] = offsetof(mg_memset_node, tail);
	out[9] = offsetof(mg_memcpy3d, srcDevice);
	out[10] = offsetof(mg_memcpy3d, dstType);
	out[11] = offsetof(mg_memcpy3d, dstDevice);
	out[12] = sizeof(mg_memcpy3d);
}

// kernel_params points params[i] at argument i of one packed buffer: it
// lives at args + offsets[i], so arguments of any width pass intact.
static int kernel_params(void **params, void *args, const int *offsets, int nargs) {
	if (nargs > 64) return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < nargs; i++) params[i] = (char *)args + offsets[i];
	return 0;
}

mg_result mg_cuGraphAddKernelNode(void **node, void *graph, void **deps, size_t ndeps, void *f, unsigned gx, unsigned bx,
                                  void *args, const int *offsets, int nargs) {
	void *params[64];
	if (kernel_params(params, args, offsets, nargs)) return 1;
	mg_kernel_node p;
	memset(&p, 0, sizeof p);
	p.func = f, p.gx = gx, p.gy = p.gz = 1, p.bx = bx, p.by = p.bz = 1, p.params = params;
	CALL(cuGraphAddKernelNode, node, graph, deps, ndeps, &p);
}

mg_result mg_cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned shmem, void *stream, void *args, const int *offsets, int nargs) {
	void *params[64];
	if (kernel_params(params, args, offsets, nargs)) return 1;
	if (!p_cuLaunchKernel) return 500;
	return p_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, NULL);
}

// mg_cuLaunchKernelPDL is mg_cuLaunchKernel with programmatic stream
// serialization allowed (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
// id 6): the kernel may start before the previous one in the stream ends,
// and must wait for it (griddepcontrol.wait) before it reads its results.
mg_result mg_cuLaunchKernelPDL(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned shmem, void *stream, void *args, const int *offsets, int nargs) {
	void *params[64];
	if (kernel_params(params, args, offsets, nargs)) return 1;
	if (!p_cuLaunchKernelEx) return 500;
	mg_launch_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.id = 6;
	attr.value.i = 1;
	mg_launch_config cfg = {gx, gy, gz, bx, by, bz, shmem, stream, &attr, 1};
	return p_cuLaunchKernelEx(&cfg, f, params, NULL);
}

// mg_launch_layout reports the launch structs' layout, for a test against
// cuda.h's: attribute size and value offset, config size, and the offsets
// of its stream, attrs and nattrs.
void mg_launch_layout(int *out) {
	out[0] = sizeof(mg_launch_attr);
	out[1] = offsetof(mg_launch_attr, value);
	out[2] = sizeof(mg_launch_config);
	out[3] = offsetof(mg_launch_config, stream);
	out[4] = offsetof(mg_launch_config, attrs);
	out[5] = offsetof(mg_launch_config, nattrs);
}

const char *mg_cuErrorName(mg_result r) {
	const char *s = NULL;
	if (p_cuGetErrorName && p_cuGetErrorName(r, &s) == 0 && s) return s;
	return "CUDA_ERROR_UNKNOWN_CODE";
}

mg_result mg_cublasCreate(void **h) { CALL(cublasCreate, h); }
mg_result mg_cublasDestroy(void *h) { CALL(cublasDestroy, h); }
mg_result mg_cublasSetStream(void *h, void *s) { CALL(cublasSetStream, h, s); }
mg_result mg_cublasSetMathMode(void *h, int m) { CALL(cublasSetMathMode, h, m); }
mg_result mg_cublasSgemm(void *h, int ta, int tb, int m, int n, int k, const float *alpha, mg_devptr A, int lda,
                         mg_devptr B, int ldb, const float *beta, mg_devptr C, int ldc) {
	CALL(cublasSgemm, h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
mg_result mg_cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const float *alpha, mg_devptr A, int atype,
                          int lda, mg_devptr B, int btype, int ldb, const float *beta, mg_devptr C, int ctype, int ldc,
                          int compute) {
	CALL(cublasGemmEx, h, ta, tb, m, n, k, alpha, A, atype, lda, B, btype, ldb, beta, C, ctype, ldc, compute,
	     -1 /* CUBLAS_GEMM_DEFAULT */);
}
const char *mg_cublasStatus(mg_result r) {
	return p_cublasGetStatusString ? p_cublasGetStatusString(r) : "CUBLAS_STATUS_UNKNOWN";
}

mg_result mg_cuStreamIsCapturing(void *s, int *status) { CALL(cuStreamIsCapturing, s, status); }
mg_result mg_cuCtxGetDevice(int *dev) { CALL(cuCtxGetDevice, dev); }

mg_result mg_ltCreate(void **h) { CALL(cublasLtCreate, h); }
mg_result mg_ltDestroy(void *h) { CALL(cublasLtDestroy, h); }

// cuBLASLt's attribute ids (cublasLt.h): the matmul's transposes, and the
// preference's workspace bound.
enum { LT_DESC_TRANSA = 3, LT_DESC_TRANSB = 4, LT_PREF_MAX_WORKSPACE_BYTES = 1 };
enum { CUDA_R_32F_ = 0 };

mg_result mg_ltPlanCreate(mg_lt_plan *p, int ta, int tb, int m, int n, int k, int atype, int lda, int btype, int ldb,
                          int ctype, int ldc, int compute) {
	memset(p, 0, sizeof *p);
	if (!p_cublasLtMatmulDescCreate || !p_cublasLtMatrixLayoutCreate) return 500;
	int r = p_cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F_);
	if (!r) r = p_cublasLtMatmulDescSetAttribute(p->desc, LT_DESC_TRANSA, &ta, sizeof ta);
	if (!r) r = p_cublasLtMatmulDescSetAttribute(p->desc, LT_DESC_TRANSB, &tb, sizeof tb);
	// Column-major layouts of A, B and C as stored: op(A) is m x k, op(B) k x n.
	if (!r) r = p_cublasLtMatrixLayoutCreate(&p->a, atype, ta ? k : m, ta ? m : k, lda);
	if (!r) r = p_cublasLtMatrixLayoutCreate(&p->b, btype, tb ? n : k, tb ? k : n, ldb);
	if (!r) r = p_cublasLtMatrixLayoutCreate(&p->c, ctype, m, n, ldc);
	if (r) mg_ltPlanDestroy(p);
	return r;
}

void mg_ltPlanDestroy(mg_lt_plan *p) {
	if (p->desc && p_cublasLtMatmulDescDestroy) p_cublasLtMatmulDescDestroy(p->desc);
	void *layouts[] = {p->a, p->b, p->c};
	for (int i = 0; i < 3; i++)
		if (layouts[i] && p_cublasLtMatrixLayoutDestroy) p_cublasLtMatrixLayoutDestroy(layouts[i]);
	memset(p, 0, sizeof *p);
}

mg_result mg_ltHeuristics(void *h, const mg_lt_plan *p, size_t workspace, int want, mg_lt_heuristic *out, int *got) {
	*got = 0;
	if (!p_cublasLtMatmulPreferenceCreate || !p_cublasLtMatmulAlgoGetHeuristic) return 500;
	void *pref = NULL;
	int r = p_cublasLtMatmulPreferenceCreate(&pref);
	if (!r) r = p_cublasLtMatmulPreferenceSetAttribute(pref, LT_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
	if (!r) r = p_cublasLtMatmulAlgoGetHeuristic(h, p->desc, p->a, p->b, p->c, p->c, pref, want, out, got);
	if (pref) p_cublasLtMatmulPreferenceDestroy(pref);
	return r;
}

mg_result mg_ltMatmul(void *h, const mg_lt_plan *p, const float *alpha, mg_devptr A, mg_devptr B, const float *beta,
                      mg_devptr C, const mg_lt_algo *algo, mg_devptr workspace, size_t wsbytes, void *stream) {
	CALL(cublasLtMatmul, h, p->desc, alpha, A, p->a, B, p->b, beta, C, p->c, C, p->c, algo, workspace, wsbytes, stream);
}

// mg_lt_layout reports the heuristic result's layout, for a test against
// cublasLt.h's: its size and the offsets of workspace, state and waves.
void mg_lt_layout(int *out) {
	out[0] = sizeof(mg_lt_heuristic);
	out[1] = offsetof(mg_lt_heuristic, workspace);
	out[2] = offsetof(mg_lt_heuristic, state);
	out[3] = offsetof(mg_lt_heuristic, waves);
}

mg_result mg_nvrtcVersion(int *maj, int *min) { CALL(nvrtcVersion, maj, min); }
mg_result mg_nvrtcCreateProgram(void **p, const char *src, const char *name) {
	CALL(nvrtcCreateProgram, p, src, name, 0, NULL, NULL);
}
mg_result mg_nvrtcCompileProgram(void *p, int n, const char *const *o) { CALL(nvrtcCompileProgram, p, n, o); }
mg_result mg_nvrtcGetProgramLog(void *p, char **log) {
	size_t n = 0;
	*log = NULL;
	if (!p_nvrtcGetProgramLogSize || !p_nvrtcGetProgramLog) return 500;
	int r = p_nvrtcGetProgramLogSize(p, &n);
	if (r) return r;
	*log = malloc(n + 1);
	if (!*log) return 1;
	(*log)[n] = 0;
	return p_nvrtcGetProgramLog(p, *log);
}
mg_result mg_nvrtcGetCUBIN(void *p, char **cubin, size_t *size) {
	*cubin = NULL;
	if (!p_nvrtcGetCUBINSize || !p_nvrtcGetCUBIN) return 500;
	int r = p_nvrtcGetCUBINSize(p, size);
	if (r) return r;
	*cubin = malloc(*size ? *size : 1);
	if (!*cubin) return 1;
	return p_nvrtcGetCUBIN(p, *cubin);
}
mg_result mg_nvrtcDestroyProgram(void **p) { CALL(nvrtcDestroyProgram, p); }
const char *mg_nvrtcErrorString(mg_result r) {
	return p_nvrtcGetErrorString ? p_nvrtcGetErrorString(r) : "NVRTC_ERROR_UNKNOWN";
}

mg_result mg_cuTensorMapEncodeTiled(void *map, int dtype, unsigned rank, mg_devptr addr, const uint64_t *dims,
                                    const uint64_t *strides, const unsigned *box, const unsigned *estrides, int interleave,
                                    int swizzle, int l2promotion, int oobfill) {
	CALL(cuTensorMapEncodeTiled, map, dtype, rank, addr, dims, strides, box, estrides, interleave, swizzle, l2promotion,
	     oobfill);
}
