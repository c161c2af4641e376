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

// Device attributes (CUdevice_attribute values) this package reads.
const (
	attrMaxThreadsPerBlock     = 1
	attrMaxSharedPerBlock      = 8
	attrMultiprocessorCount    = 16
	attrL2CacheSize            = 38
	attrComputeCapabilityMajor = 75
	attrComputeCapabilityMinor = 76
	attrMaxSharedPerBlockOptin = 97
)

// Device is one GPU with its primary context made current on the calling
// thread by Bind.
type Device struct {
	Ordinal        int
	Name           string
	Major, Minor   int   // compute capability
	SMs            int   // multiprocessors
	TotalMem       int64 // bytes
	MaxSharedOptIn int   // bytes of shared memory a block may opt in to
	L2Bytes        int   // the L2 cache's size
	dev            C.int
	ctx            unsafe.Pointer
}

// Arch returns the compute capability as NVRTC spells it, e.g. "sm_90".
func (d *Device) Arch() string { return archName(d.Major, d.Minor) }

// archName names compute capability major.minor as NVRTC's target: "sm_90".
func archName(major, minor int) string { return fmt.Sprintf("sm_%d%d", major, minor) }

// DeviceArch returns device ordinal's compute architecture ("sm_90")
// without retaining its context, for callers that only need to know what
// the kernels compile for.
func DeviceArch(ordinal int) (string, error) {
	_, major, minor, err := DeviceCapability(ordinal)
	if err != nil {
		return "", err
	}
	return archName(major, minor), nil
}

// DeviceCapability returns device ordinal's name and compute capability
// without retaining its context.
func DeviceCapability(ordinal int) (name string, major, minor int, err error) {
	dev, err := deviceHandle(ordinal)
	if err != nil {
		return "", 0, 0, err
	}
	return capability(dev)
}

// capability reads the driver's device dev's name and compute capability.
func capability(dev C.int) (name string, major, minor int, err error) {
	var cname [256]C.char
	if err := check("cuDeviceGetName", C.mg_cuDeviceGetName(&cname[0], 256, dev)); err != nil {
		return "", 0, 0, err
	}
	var cc [2]C.int
	for i, attr := range []int{attrComputeCapabilityMajor, attrComputeCapabilityMinor} {
		if err := check("cuDeviceGetAttribute", C.mg_cuDeviceGetAttribute(&cc[i], C.int(attr), dev)); err != nil {
			return "", 0, 0, err
		}
	}
	return C.GoString(&cname[0]), int(cc[0]), int(cc[1]), nil
}

// deviceHandle returns the driver's handle of device ordinal, or an error
// naming how many devices there are.
func deviceHandle(ordinal int) (C.int, error) {
	n, err := DeviceCount()
	if err != nil {
		return 0, err
	}
	if ordinal < 0 || ordinal >= n {
		return 0, fmt.Errorf("cuda: device %d does not exist (%d devices)", ordinal, n)
	}
	var dev C.int
	return dev, check("cuDeviceGet", C.mg_cuDeviceGet(&dev, C.int(ordinal)))
}

// Open retains the primary context of device ordinal and reads its
// properties. Bind or Enter make the context current.
func Open(ordinal int) (*Device, error) {
	dev, err := deviceHandle(ordinal)
	if err != nil {
		return nil, err
	}
	d := &Device{Ordinal: ordinal, dev: dev}
	if d.Name, d.Major, d.Minor, err = capability(dev); err != nil {
		return nil, err
	}
	for _, a := range []struct {
		attr int
		dst  *int
	}{
		{attrMultiprocessorCount, &d.SMs}, {attrMaxSharedPerBlockOptin, &d.MaxSharedOptIn},
		{attrL2CacheSize, &d.L2Bytes},
	} {
		var v C.int
		if err := check("cuDeviceGetAttribute", C.mg_cuDeviceGetAttribute(&v, C.int(a.attr), d.dev)); err != nil {
			return nil, err
		}
		*a.dst = int(v)
	}
	var mem C.size_t
	if err := check("cuDeviceTotalMem", C.mg_cuDeviceTotalMem(&mem, d.dev)); err != nil {
		return nil, err
	}
	d.TotalMem = int64(mem)
	if err := check("cuDevicePrimaryCtxRetain", C.mg_cuDevicePrimaryCtxRetain(&d.ctx, d.dev)); err != nil {
		return nil, err
	}
	return d, nil
}

// Bind makes the device's context current on the calling OS thread. Call it
// (with the goroutine locked to its thread) before driver calls on a thread
// that has not bound it yet.
func (d *Device) Bind() error { return check("cuCtxSetCurrent", C.mg_cuCtxSetCurrent(d.ctx)) }

// Enter makes the device's context current on the calling OS thread, as
// Bind does, and returns leave, which makes current again the context that
// was before: a thread that calls in from Python (PyTorch's, on another
// GPU) keeps the one its own CUDA code expects. Where none was, GPU 0's
// primary context stays current, as the CUDA runtime would leave it. Call
// both with the goroutine locked to its thread.
func (d *Device) Enter() (leave func(), err error) {
	var prev unsafe.Pointer
	if err := check("cuCtxGetCurrent", C.mg_cuCtxGetCurrent(&prev)); err != nil {
		return nil, err
	}
	if prev == d.ctx {
		return func() {}, nil
	}
	if err := d.Bind(); err != nil {
		return nil, err
	}
	if prev == nil && d.Ordinal == 0 {
		return func() {}, nil
	}
	return func() { C.mg_cuCtxSetCurrent(prev) }, nil
}

// Close releases the primary context.
func (d *Device) Close() error {
	if d.ctx == nil {
		return nil
	}
	d.ctx = nil
	return check("cuDevicePrimaryCtxRelease", C.mg_cuDevicePrimaryCtxRelease(d.dev))
}

// Synchronize waits for all work on the device's context.
func (d *Device) Synchronize() error { return Synchronize() }

// Synchronize waits for all work on the calling thread's current context.
func Synchronize() error { return check("cuCtxSynchronize", C.mg_cuCtxSynchronize()) }
