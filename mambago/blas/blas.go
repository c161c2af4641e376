// Package blas calls SGEMM (and SGEMV) in a CBLAS shared library that it loads at run
// time with dlopen: typically the OpenBLAS that numpy ships, which the Python
// package finds and passes in. Nothing is linked at build time, so the CPU
// engine builds with gcc and Go alone and falls back to gonum's pure-Go BLAS
// when no library is given. It is the only package that knows the CBLAS C ABI.
//
// It accepts the plain (LP64) names, and the ILP64 builds whose symbols end in
// "64_" (numpy 2 ships scipy-openblas64, with scipy_cblas_sgemm64_).
package blas

/*
#cgo CFLAGS: -O2 -fno-fast-math
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

enum { RowMajor = 101, NoTrans = 111, Trans = 112 };

typedef void (*sgemm32)(int, int, int, int32_t, int32_t, int32_t, float, const float *, int32_t,
                        const float *, int32_t, float, float *, int32_t);
typedef void (*sgemm64)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t,
                        const float *, int64_t, float, float *, int64_t);

typedef void (*sgemv32)(int, int, int32_t, int32_t, float, const float *, int32_t, const float *, int32_t, float,
                        float *, int32_t);
typedef void (*sgemv64)(int, int, int64_t, int64_t, float, const float *, int64_t, const float *, int64_t, float,
                        float *, int64_t);

typedef int (*set_threads_local)(int);

// mg_sgemm calls SGEMM; with set_local (OpenBLAS's openblas_set_num_threads_local)
// it runs on the calling thread alone and restores the thread's setting after.
static void mg_sgemm(void *fn, void *set_local, int ilp64, int transB, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
	int tb = transB ? Trans : NoTrans;
	int prev = set_local ? ((set_threads_local)set_local)(1) : 0;
	if (ilp64) {
		((sgemm64)fn)(RowMajor, NoTrans, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
	} else {
		((sgemm32)fn)(RowMajor, NoTrans, tb, (int32_t)m, (int32_t)n, (int32_t)k, alpha, a, (int32_t)lda,
		              b, (int32_t)ldb, beta, c, (int32_t)ldc);
	}
	if (set_local) ((set_threads_local)set_local)(prev);
}

// mg_sgemv calls SGEMV (y = alpha·A·x + beta·y, A row-major [m, n]), on the
// calling thread alone where set_local is given, as mg_sgemm does.
static void mg_sgemv(void *fn, void *set_local, int ilp64, int64_t m, int64_t n, float alpha, const float *a,
                     int64_t lda, const float *x, float beta, float *y) {
	int prev = set_local ? ((set_threads_local)set_local)(1) : 0;
	if (ilp64) {
		((sgemv64)fn)(RowMajor, NoTrans, m, n, alpha, a, lda, x, 1, beta, y, 1);
	} else {
		((sgemv32)fn)(RowMajor, NoTrans, (int32_t)m, (int32_t)n, alpha, a, (int32_t)lda, x, 1, beta, y, 1);
	}
	if (set_local) ((set_threads_local)set_local)(prev);
}

static void *mg_open(const char *path) { return dlopen(path, RTLD_NOW | RTLD_LOCAL); }
static const char *mg_error(void) { const char *e = dlerror(); return e ? e : "unknown dlopen error"; }
static void *mg_sym(void *h, const char *name) { return dlsym(h, name); }
*/
import "C"

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"unsafe"
)

// Lib is a loaded CBLAS library.
type Lib struct {
	Path   string
	Symbol string // the sgemm entry point found
	// SingleThreaded reports that each Sgemm call runs on the calling thread
	// alone (OpenBLAS's openblas_set_num_threads_local was found), so callers
	// can run several at once; otherwise the library uses its own threads.
	SingleThreaded bool
	fn             unsafe.Pointer
	gemv           unsafe.Pointer // the SGEMV beside it (its name with sgemv for sgemm), or nil
	setLocal       unsafe.Pointer
	ilp64          bool
}

// candidates are the SGEMM entry points tried, in order.
var candidates = []string{"cblas_sgemm", "scipy_cblas_sgemm64_", "cblas_sgemm64_", "scipy_cblas_sgemm"}

// localThreads are OpenBLAS's per-thread thread-count setters.
var localThreads = []string{"openblas_set_num_threads_local", "scipy_openblas_set_num_threads_local64_"}

var (
	mu     sync.Mutex
	opened = map[string]*Lib{}
)

// Open loads the library at path (once per path) and finds its SGEMM.
func Open(path string) (*Lib, error) {
	mu.Lock()
	defer mu.Unlock()
	if l, ok := opened[path]; ok {
		return l, nil
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	h := C.mg_open(cpath)
	if h == nil {
		return nil, fmt.Errorf("blas: dlopen %s: %s", path, C.GoString(C.mg_error()))
	}
	for _, name := range candidates {
		cname := C.CString(name)
		fn := C.mg_sym(h, cname)
		C.free(unsafe.Pointer(cname))
		if fn != nil {
			l := &Lib{Path: path, Symbol: name, fn: fn, ilp64: strings.HasSuffix(name, "64_")}
			cgemv := C.CString(strings.Replace(name, "sgemm", "sgemv", 1))
			l.gemv = C.mg_sym(h, cgemv)
			C.free(unsafe.Pointer(cgemv))
			for _, set := range localThreads {
				cset := C.CString(set)
				l.setLocal = C.mg_sym(h, cset)
				C.free(unsafe.Pointer(cset))
				if l.setLocal != nil {
					l.SingleThreaded = true
					break
				}
			}
			opened[path] = l
			return l, nil
		}
	}
	return nil, fmt.Errorf("blas: %s has none of the SGEMM entry points %v", path, candidates)
}

// Sgemm computes C = alpha·A·op(B) + beta·C for row-major A [m, k] (row
// stride lda), B [k, n] or, with transB, [n, k] (row stride ldb), and C [m, n]
// (row stride ldc). The slices must hold the elements the strides reach.
func (l *Lib) Sgemm(transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if !l.ilp64 && max(m, n, k, lda, ldb, ldc) > math.MaxInt32 {
		panic(fmt.Sprintf("blas: %s takes 32-bit dimensions; got m=%d n=%d k=%d", l.Symbol, m, n, k))
	}
	tb := C.int(0)
	if transB {
		tb = 1
	}
	ilp := C.int(0)
	if l.ilp64 {
		ilp = 1
	}
	C.mg_sgemm(l.fn, l.setLocal, ilp, tb, C.int64_t(m), C.int64_t(n), C.int64_t(k), C.float(alpha),
		(*C.float)(unsafe.Pointer(&a[0])), C.int64_t(lda), (*C.float)(unsafe.Pointer(&b[0])), C.int64_t(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.int64_t(ldc))
}

// HasSgemv reports whether the library has the SGEMV that Sgemv calls.
func (l *Lib) HasSgemv() bool { return l.gemv != nil }

// Sgemv computes y = alpha·A·x + beta·y for row-major A [m, n] (row stride
// lda), x [n] and y [m]: a GEMM of one row against Aᵀ, which streams A once
// where SGEMM would pack it first. It panics where HasSgemv is false. The
// slices must hold the elements the strides reach.
func (l *Lib) Sgemv(m, n int, alpha float32, a []float32, lda int, x []float32, beta float32, y []float32) {
	if l.gemv == nil {
		panic("blas: " + l.Path + " has no SGEMV")
	}
	if m == 0 || n == 0 {
		return
	}
	if !l.ilp64 && max(m, n, lda) > math.MaxInt32 {
		panic(fmt.Sprintf("blas: %s takes 32-bit dimensions; got m=%d n=%d", l.Symbol, m, n))
	}
	ilp := C.int(0)
	if l.ilp64 {
		ilp = 1
	}
	_, _, _ = a[(m-1)*lda+n-1], x[n-1], y[m-1]
	C.mg_sgemv(l.gemv, l.setLocal, ilp, C.int64_t(m), C.int64_t(n), C.float(alpha),
		(*C.float)(unsafe.Pointer(&a[0])), C.int64_t(lda), (*C.float)(unsafe.Pointer(&x[0])), C.float(beta),
		(*C.float)(unsafe.Pointer(&y[0])))
}
