package cuda

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// TensorMap is a TMA tensor map (a CUtensorMap): the 128 bytes the driver
// encodes to describe a tiled view of a matrix in device memory, passed to a
// kernel by value (a __grid_constant__ parameter) for its bulk tensor copies.
type TensorMap [128]byte

// NewTensorMap2D encodes the row-major matrix of rows × cols elements of dt
// at p (rowStride elements from one row to the next) for copies of boxes of
// boxRows × boxCols elements, swizzled in 128-byte rows (the layout wgmma
// reads; boxCols · dt.Size() must be 128 or less). Boxes reaching past the
// matrix read zeros there. It needs p 16-byte aligned, rowStride ·
// dt.Size() a multiple of 16, and CUDA 12 or newer.
func NewTensorMap2D(dt DType, p Ptr, rows, cols, rowStride, boxRows, boxCols int) (TensorMap, error) {
	return newTensorMap2D(dt, p, rows, cols, rowStride, boxRows, boxCols, true)
}

// NewTensorMap2DPlain is NewTensorMap2D without the swizzle: a box lands in
// shared memory as plain rows of boxCols elements, so boxCols may be up to
// 256 elements, its bytes a multiple of 16.
func NewTensorMap2DPlain(dt DType, p Ptr, rows, cols, rowStride, boxRows, boxCols int) (TensorMap, error) {
	return newTensorMap2D(dt, p, rows, cols, rowStride, boxRows, boxCols, false)
}

func newTensorMap2D(dt DType, p Ptr, rows, cols, rowStride, boxRows, boxCols int, swizzled bool) (TensorMap, error) {
	var m TensorMap
	const (
		float16, bfloat16, float32 = 6, 9, 7 // CU_TENSOR_MAP_DATA_TYPE_*
		swizzleNone, swizzle128    = 0, 3    // CU_TENSOR_MAP_SWIZZLE_*
		l2Promote256               = 3       // CU_TENSOR_MAP_L2_PROMOTION_L2_256B
	)
	var code int
	switch dt {
	case F16:
		code = float16
	case BF16:
		code = bfloat16
	case F32:
		code = float32
	default:
		return m, fmt.Errorf("cuda: no tensor map for %s", dt)
	}
	switch {
	case rows < 1 || cols < 1 || rowStride < cols:
		return m, fmt.Errorf("cuda: tensor map of %d x %d elements, rows %d apart", rows, cols, rowStride)
	case uintptr(p)%16 != 0 || rowStride*dt.Size()%16 != 0:
		return m, fmt.Errorf("cuda: tensor map needs 16-byte alignment (address %#x, rows %d bytes apart)", uintptr(p),
			rowStride*dt.Size())
	case swizzled && (boxRows < 1 || boxRows > 256 || boxCols < 1 || boxCols*dt.Size() > 128):
		return m, fmt.Errorf("cuda: tensor map box of %d x %d elements (at most 256 rows of 128 bytes)", boxRows, boxCols)
	case !swizzled && (boxRows < 1 || boxRows > 256 || boxCols < 1 || boxCols > 256 || boxCols*dt.Size()%16 != 0):
		return m, fmt.Errorf("cuda: plain tensor map box of %d x %d elements (at most 256 x 256, rows a multiple of 16 bytes)",
			boxRows, boxCols)
	}
	swizzle := swizzleNone
	if swizzled {
		swizzle = swizzle128
	}
	// The C side's arrays: dims and the box innermost first; one stride (the
	// rows'), in bytes.
	cArr := C.malloc(48)
	defer C.free(cArr)
	dims := (*[2]C.uint64_t)(cArr)
	strides := (*[1]C.uint64_t)(unsafe.Add(cArr, 16))
	box := (*[2]C.uint)(unsafe.Add(cArr, 32))
	estrides := (*[2]C.uint)(unsafe.Add(cArr, 40))
	dims[0], dims[1] = C.uint64_t(cols), C.uint64_t(rows)
	strides[0] = C.uint64_t(rowStride * dt.Size())
	box[0], box[1] = C.uint(boxCols), C.uint(boxRows)
	estrides[0], estrides[1] = 1, 1
	// CUtensorMap is 64-byte aligned: encode into an aligned block of C memory.
	raw := C.malloc(C.size_t(len(m) + 64))
	defer C.free(raw)
	aligned := unsafe.Pointer((uintptr(raw) + 63) &^ 63)
	r := C.mg_cuTensorMapEncodeTiled(aligned, C.int(code), 2, C.mg_devptr(p), &dims[0], &strides[0], &box[0],
		&estrides[0], 0, C.int(swizzle), l2Promote256, 0)
	if err := check("cuTensorMapEncodeTiled", r); err != nil {
		return m, err
	}
	copy(m[:], unsafe.Slice((*byte)(aligned), len(m)))
	return m, nil
}
