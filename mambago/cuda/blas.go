package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

var (
	cublasOnce sync.Once
	cublasErr  error
)

// loadCuBLAS loads libcublas.so.13, then .so.12.
func loadCuBLAS() error {
	cublasOnce.Do(func() {
		cublasErr = loadLibrary("cuBLAS", []string{"libcublas.so.13", "libcublas.so.12"},
			func(p *C.char) *C.char { return C.mg_load_cublas(p) })
	})
	return cublasErr
}

func checkBLAS(call string, r C.mg_result) error {
	if r == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(r), Name: C.GoString(C.mg_cublasStatus(r))}
}

// BLAS is a cuBLAS handle bound to one stream.
type BLAS struct {
	h unsafe.Pointer
	s *Stream
	// TF32 records whether FP32 GEMMs may use TF32 tensor cores (an explicit
	// opt-in); by default they run in true FP32.
	TF32 bool
	// Algo is how GEMMs with bf16 or f16 inputs run (f32 ones always go
	// through cublasSgemm); GemmEx unless set.
	Algo GemmAlgo
	lt   *lt // created on the first cuBLASLt GEMM
}

// cuBLAS math modes.
const (
	pedanticMath = 2 // CUBLAS_PEDANTIC_MATH: true FP32, no TF32 or other shortcuts
	tf32Math     = 3 // CUBLAS_TF32_TENSOR_OP_MATH
)

// NewBLAS creates a handle whose work goes to s, in true FP32 unless tf32.
func NewBLAS(s *Stream, tf32 bool) (*BLAS, error) {
	if err := loadCuBLAS(); err != nil {
		return nil, err
	}
	b := &BLAS{TF32: tf32, s: s}
	if err := checkBLAS("cublasCreate", C.mg_cublasCreate(&b.h)); err != nil {
		return nil, err
	}
	mode := pedanticMath
	if tf32 {
		mode = tf32Math
	}
	if err := checkBLAS("cublasSetMathMode", C.mg_cublasSetMathMode(b.h, C.int(mode))); err != nil {
		b.Destroy()
		return nil, err
	}
	if err := checkBLAS("cublasSetStream", C.mg_cublasSetStream(b.h, s.handle())); err != nil {
		b.Destroy()
		return nil, err
	}
	return b, nil
}

// SetTF32 switches between TF32 tensor-core and true FP32 GEMMs.
func (b *BLAS) SetTF32(on bool) error {
	mode := pedanticMath
	if on {
		mode = tf32Math
	}
	if err := checkBLAS("cublasSetMathMode", C.mg_cublasSetMathMode(b.h, C.int(mode))); err != nil {
		return err
	}
	b.TF32 = on
	return nil
}

// SetStream sends the handle's later work to s.
func (b *BLAS) SetStream(s *Stream) error {
	if err := checkBLAS("cublasSetStream", C.mg_cublasSetStream(b.h, s.handle())); err != nil {
		return err
	}
	b.s = s
	return nil
}

// GemmNT computes, for row-major f32 matrices, C = A·Wᵀ + beta·C with A
// [M, K] (row stride lda), W [N, K] (row stride K) and C [M, N] (row stride
// ldc): a linear layer. In cuBLAS's column-major terms that is Cᵀ = op(W)·Aᵀ.
// It runs through cublasSgemm: true FP32, or TF32 when the handle allows it.
func (b *BLAS) GemmNT(M, N, K int, A Ptr, lda int, W Ptr, C Ptr, ldc int, beta float32) error {
	return b.Gemm(M, N, K, A, lda, W, C, ldc, beta, F32, F32)
}

// Gemm is GemmNT with A and W stored as ab and C as c. Anything but f32
// throughout runs with f32 accumulation (CUBLAS_COMPUTE_32F), on tensor
// cores for bf16 and f16, through cublasGemmEx or cuBLASLt as b.Algo says.
func (b *BLAS) Gemm(M, N, K int, A Ptr, lda int, W Ptr, C Ptr, ldc int, beta float32, ab, c DType) error {
	if M == 0 || N == 0 {
		return nil
	}
	const opN, opT = 0, 1
	const compute32F = 68 // CUBLAS_COMPUTE_32F
	alpha, bt := C.float(1), C.float(beta)
	var err error
	switch {
	case ab != F32 && b.Algo != GemmEx:
		err = b.gemmLt(gemmKey{M: M, N: N, K: K, lda: lda, ldc: ldc, ab: ab, c: c, accumulate: beta != 0,
			tuned: b.Algo == GemmLtTuned}, A, W, C, beta)
	case ab == F32 && c == F32:
		err = checkBLAS("cublasSgemm", C.mg_cublasSgemm(b.h, opT, opN, C.int(N), C.int(M), C.int(K), &alpha,
			C.mg_devptr(W), C.int(K), C.mg_devptr(A), C.int(lda), &bt, C.mg_devptr(C), C.int(ldc)))
	default:
		err = checkBLAS("cublasGemmEx", C.mg_cublasGemmEx(b.h, opT, opN, C.int(N), C.int(M), C.int(K), &alpha,
			C.mg_devptr(W), C.int(ab.dataType()), C.int(K), C.mg_devptr(A), C.int(ab.dataType()), C.int(lda), &bt,
			C.mg_devptr(C), C.int(c.dataType()), C.int(ldc), compute32F))
	}
	if err != nil {
		return fmt.Errorf("%w (M=%d N=%d K=%d, %s -> %s)", err, M, N, K, ab, c)
	}
	return nil
}

// LtWorkspace is the device memory the handle's cuBLASLt GEMMs use as
// their workspace (empty until the first one runs): nothing but those
// GEMMs, and the memsets cuBLASLt queues before some of them, touches it
// (in a captured graph, a kernel that MemsetEdit's Fold gave such a memset
// writes its bytes instead).
func (b *BLAS) LtWorkspace() Buffer {
	if b.lt == nil || b.lt.ws == nil {
		return Buffer{}
	}
	return *b.lt.ws
}

// ltSide returns the handle's cuBLASLt side, creating it the first time.
func (b *BLAS) ltSide() (*lt, error) {
	if b.lt == nil {
		l, err := newLt()
		if err != nil {
			return nil, err
		}
		b.lt = l
	}
	return b.lt, nil
}

// gemmLt runs k through cuBLASLt with its cached plan.
func (b *BLAS) gemmLt(k gemmKey, A, W, Cp Ptr, beta float32) error {
	l, err := b.ltSide()
	if err != nil {
		return err
	}
	p, err := l.plan(k, A, W, b.s)
	if err != nil {
		return err
	}
	return l.matmul(p.p, &p.algo, A, W, Cp, beta, b.s.handle())
}

// Destroy releases the handle.
func (b *BLAS) Destroy() error {
	if b == nil || b.h == nil {
		return nil
	}
	h := b.h
	b.h = nil
	err := b.lt.destroy()
	b.lt = nil
	if e := checkBLAS("cublasDestroy", C.mg_cublasDestroy(h)); err == nil {
		err = e
	}
	return err
}
