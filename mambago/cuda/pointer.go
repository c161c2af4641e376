package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
)

// MemoryKind says what the driver knows an address to be.
type MemoryKind int

// The kinds of memory Locate tells apart.
const (
	// UnknownMemory is an address CUDA did not allocate or register:
	// pageable host memory (a numpy array's, a CPU tensor's), or nothing.
	UnknownMemory MemoryKind = iota
	// HostMemory is page-locked host memory (cuMemAllocHost, a pinned
	// tensor's).
	HostMemory
	// DeviceMemory is memory on one GPU (cuMemAlloc, a CUDA tensor's).
	DeviceMemory
	// ManagedMemory is unified memory that migrates between the host and
	// the GPUs (cuMemAllocManaged).
	ManagedMemory
)

// String names the kind as an error message does.
func (k MemoryKind) String() string {
	return [...]string{"memory CUDA does not know", "page-locked host memory", "device memory", "managed memory"}[k]
}

// Region is what the driver knows of an address: its kind, the GPU it was
// allocated on (device memory), and the allocation that holds it (Start,
// Bytes; zero where the driver does not say).
type Region struct {
	Kind    MemoryKind
	Ordinal int
	Start   Ptr
	Bytes   int
}

// Locate asks the driver about address p (cuPointerGetAttributes). It
// neither reads the memory nor needs a current context.
func Locate(p Ptr) (Region, error) {
	var info C.mg_pointer_info
	if err := check("cuPointerGetAttributes", C.mg_pointer_info_of(C.mg_devptr(p), &info)); err != nil {
		return Region{}, err
	}
	r := Region{Ordinal: int(info.ordinal), Start: Ptr(info.start), Bytes: int(info.size)}
	switch {
	case info.managed != 0:
		r.Kind = ManagedMemory
	case info._type == 1:
		r.Kind = HostMemory
	case info._type == 2 || info._type == 4:
		r.Kind = DeviceMemory
	}
	return r, nil
}

// ErrBadBuffer is wrapped by CheckBuffer's errors.
var ErrBadBuffer = errors.New("not a buffer this GPU can use")

// CheckBuffer returns an error wrapping ErrBadBuffer, naming what, unless
// the bytes bytes at p are memory d's kernels may read and write: device
// memory of d's GPU or managed memory, within one allocation where the
// driver gives the allocation's extent, and mapped up to its last byte. A kernel given any other address
// would fault, and a fault ends the CUDA context for everyone in the
// process (PyTorch too), so the device entries check before they launch.
func (d *Device) CheckBuffer(what string, p Ptr, bytes int) error {
	r, err := Locate(p)
	if err != nil {
		return fmt.Errorf("%w: %s at %#x: %w", ErrBadBuffer, what, uint64(p), err)
	}
	switch {
	case r.Kind == UnknownMemory || r.Kind == HostMemory:
		return fmt.Errorf("%w: %s at %#x is %s, not device memory (a CPU tensor's or a numpy array's address?)",
			ErrBadBuffer, what, uint64(p), r.Kind)
	case r.Kind == DeviceMemory && r.Ordinal != d.Ordinal:
		return fmt.Errorf("%w: %s at %#x is on GPU %d; this model runs on GPU %d", ErrBadBuffer, what, uint64(p),
			r.Ordinal, d.Ordinal)
	case r.Bytes > 0 && uint64(p)+uint64(bytes) > uint64(r.Start)+uint64(r.Bytes):
		return fmt.Errorf("%w: %s at %#x needs %d bytes, but its allocation ends %d bytes after it (a buffer too small?)",
			ErrBadBuffer, what, uint64(p), bytes, uint64(r.Start)+uint64(r.Bytes)-uint64(p))
	}
	// Where the allocation is a reservation mapped in pieces (PyTorch's
	// expandable segments: its extent is the whole reservation), the last
	// byte must be mapped too.
	if bytes > 1 {
		end := p + Ptr(bytes-1)
		if last, err := Locate(end); err != nil || last.Kind != r.Kind || last.Ordinal != r.Ordinal {
			return fmt.Errorf("%w: %s at %#x needs %d bytes, but the memory at its last byte (%#x) is not the same "+
				"mapped memory (a buffer too small?)", ErrBadBuffer, what, uint64(p), bytes, uint64(end))
		}
	}
	return nil
}
