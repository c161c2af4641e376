package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// Ptr is a device address.
type Ptr uint64

// Buffer is device memory of Bytes bytes.
type Buffer struct {
	Ptr   Ptr
	Bytes int
}

// Alloc allocates bytes of device memory.
func Alloc(bytes int) (*Buffer, error) {
	if bytes <= 0 {
		return nil, fmt.Errorf("cuda: Alloc(%d): size must be positive", bytes)
	}
	var p C.mg_devptr
	if err := check("cuMemAlloc", C.mg_cuMemAlloc(&p, C.size_t(bytes))); err != nil {
		return nil, fmt.Errorf("%w (asked for %d bytes)", err, bytes)
	}
	return &Buffer{Ptr: Ptr(p), Bytes: bytes}, nil
}

// Free releases the buffer; freeing twice is a no-op.
func (b *Buffer) Free() error {
	if b == nil || b.Ptr == 0 {
		return nil
	}
	p := b.Ptr
	b.Ptr = 0
	return check("cuMemFree", C.mg_cuMemFree(C.mg_devptr(p)))
}

// Offset returns the address bytes into the buffer.
func (b *Buffer) Offset(bytes int) Ptr { return b.Ptr + Ptr(bytes) }

// CopyIn copies host values to device memory at dst, ordered on s.
func CopyIn[T float64 | float32 | int64 | int32 | uint16 | uint8](dst Ptr, src []T, s *Stream) error {
	if len(src) == 0 {
		return nil
	}
	n := len(src) * int(unsafe.Sizeof(src[0]))
	return check("cuMemcpyHtoDAsync", C.mg_cuMemcpyHtoDAsync(C.mg_devptr(dst), unsafe.Pointer(&src[0]), C.size_t(n), s.handle()))
}

// CopyOut copies from device memory into host dst, ordered on s. The host
// memory must stay valid until s has reached the copy (Synchronize).
func CopyOut[T float64 | float32 | int64 | int32 | uint16 | uint8](dst []T, src Ptr, s *Stream) error {
	if len(dst) == 0 {
		return nil
	}
	n := len(dst) * int(unsafe.Sizeof(dst[0]))
	return check("cuMemcpyDtoHAsync", C.mg_cuMemcpyDtoHAsync(unsafe.Pointer(&dst[0]), C.mg_devptr(src), C.size_t(n), s.handle()))
}

// Copy copies bytes between device addresses, ordered on s.
func Copy(dst, src Ptr, bytes int, s *Stream) error {
	return check("cuMemcpyDtoDAsync", C.mg_cuMemcpyDtoDAsync(C.mg_devptr(dst), C.mg_devptr(src), C.size_t(bytes), s.handle()))
}

// Fill32 sets n 32-bit words at dst to the bit pattern v (e.g. a NaN, to
// poison an output before a run), ordered on s.
func Fill32(dst Ptr, v uint32, n int, s *Stream) error {
	return check("cuMemsetD32Async", C.mg_cuMemsetD32Async(C.mg_devptr(dst), C.uint(v), C.size_t(n), s.handle()))
}

// HostBuffer is page-locked host memory of Bytes bytes. The GPU copies into
// and out of it directly, at the bus's speed, where a copy to pageable
// memory is staged through a driver buffer; it is also a valid destination
// while a copy is in a graph or still queued.
type HostBuffer struct {
	p     unsafe.Pointer
	Bytes int
}

// AllocHost allocates bytes of page-locked host memory. It needs the
// context current (as Alloc does).
func AllocHost(bytes int) (*HostBuffer, error) {
	if bytes <= 0 {
		return nil, fmt.Errorf("cuda: AllocHost(%d): size must be positive", bytes)
	}
	var p unsafe.Pointer
	if err := check("cuMemAllocHost", C.mg_cuMemAllocHost(&p, C.size_t(bytes))); err != nil {
		return nil, fmt.Errorf("%w (asked for %d bytes of page-locked memory)", err, bytes)
	}
	return &HostBuffer{p: p, Bytes: bytes}, nil
}

// Free releases the buffer; freeing twice is a no-op. Slices of it
// (HostSlice) must not be used after.
func (h *HostBuffer) Free() error {
	if h == nil || h.p == nil {
		return nil
	}
	p := h.p
	h.p = nil
	return check("cuMemFreeHost", C.mg_cuMemFreeHost(p))
}

// Device returns the device's address of h, at which kernels read and
// write it over the bus (under unified addressing, its host address): a
// kernel can leave a few values there for the host to read once the work
// has finished, without a copy.
func (h *HostBuffer) Device() (Ptr, error) {
	if h == nil || h.p == nil {
		return 0, errors.New("cuda: the device address of a freed host buffer")
	}
	var d C.mg_devptr
	if err := check("cuMemHostGetDevicePointer", C.mg_cuMemHostGetDevicePointer(&d, h.p)); err != nil {
		return 0, err
	}
	return Ptr(d), nil
}

// HostSlice returns n elements of h from byte offset off as a Go slice over
// its memory, valid until h.Free. It panics if they do not fit, off is not
// aligned to the element's size, or h is freed.
func HostSlice[T float64 | float32 | int64 | int32 | uint16 | uint8](h *HostBuffer, off, n int) []T {
	var zero T
	size := int(unsafe.Sizeof(zero))
	if h.p == nil || off < 0 || off%size != 0 || n < 0 || off+n*size > h.Bytes {
		panic(fmt.Sprintf("cuda: HostSlice of %d elements of %d bytes from byte %d of a host buffer of %d bytes (freed: %v)",
			n, size, off, h.Bytes, h.p == nil))
	}
	return unsafe.Slice((*T)(unsafe.Add(h.p, off)), n)
}
