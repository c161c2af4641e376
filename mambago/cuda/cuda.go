// Package cuda is mambago's thin binding to the CUDA driver API and NVRTC,
// and the only package that knows CUDA's C ABI.
//
// It dlopens libcuda.so.1 and libnvrtc.so.13 (then .so.12) at run time, with
// its own minimal prototypes (shim.h), so building needs only gcc and Go, and
// importing it on a machine without a GPU works: Init then returns an error
// that says what is missing. Every call's status is checked and turned into
// an *Error that names the call. design.md §4 says why this is not
// gorgonia.org/cu.
//
// Driver calls act on the calling OS thread's current context: a goroutine
// that makes them locks itself to its thread (runtime.LockOSThread) and calls
// Device.Bind first, once per sequence of calls.
package cuda

/*
#cgo CFLAGS: -O2 -fno-fast-math
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"
)

// Error is a failed CUDA driver or NVRTC call.
type Error struct {
	Call string // e.g. "cuMemAlloc"
	Code int
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
}

// Error names the call and its status.
func (e *Error) Error() string { return fmt.Sprintf("cuda: %s: %s (%d)", e.Call, e.Name, e.Code) }

// check turns a driver status into an error naming the call.
func check(call string, r C.mg_result) error {
	if r == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(r), Name: C.GoString(C.mg_cuErrorName(r))}
}

// checkNVRTC turns an NVRTC status into an error naming the call.
func checkNVRTC(call string, r C.mg_result) error {
	if r == 0 {
		return nil
	}
	return &Error{Call: call, Code: int(r), Name: C.GoString(C.mg_nvrtcErrorString(r))}
}

var (
	driverOnce, nvrtcOnce sync.Once
	driverErr, nvrtcErr   error
)

// loadLibrary dlopens the first of names that loads, with load.
func loadLibrary(what string, names []string, load func(*C.char) *C.char) error {
	var msgs []string
	for _, n := range names {
		cn := C.CString(n)
		msg := load(cn)
		C.free(unsafe.Pointer(cn))
		if msg == nil {
			if m := C.mg_missing(); m != nil {
				return fmt.Errorf("cuda: %s (%s) lacks %s: too old a version", what, n, C.GoString(m))
			}
			return nil
		}
		msgs = append(msgs, C.GoString(msg))
	}
	return fmt.Errorf("cuda: cannot load %s: %v", what, msgs)
}

// Init loads the driver and initialises it. It is safe to call many times;
// on a machine without an NVIDIA driver it returns an error and nothing else
// happens.
func Init() error {
	driverOnce.Do(func() {
		driverErr = loadLibrary("the CUDA driver", []string{"libcuda.so.1", "libcuda.so"},
			func(p *C.char) *C.char { return C.mg_load_driver(p) })
		if driverErr == nil {
			driverErr = check("cuInit", C.mg_cuInit(0))
		}
	})
	return driverErr
}

// LoadNVRTC loads NVRTC: the library named by $MAMBAGO_NVRTC if set, else
// libnvrtc.so.13, then libnvrtc.so.12. It needs no GPU. With an explicit
// path (e.g. the nvidia-cuda-nvrtc wheel's), the libnvrtc-builtins beside it
// are loaded first, since NVRTC opens them by name.
func LoadNVRTC() error {
	nvrtcOnce.Do(func() {
		names := []string{"libnvrtc.so.13", "libnvrtc.so.12"}
		if p := os.Getenv("MAMBAGO_NVRTC"); p != "" {
			names = []string{p}
			builtins, _ := filepath.Glob(filepath.Join(filepath.Dir(p), "libnvrtc-builtins.so*"))
			for _, b := range builtins {
				cb := C.CString(b)
				C.mg_preload(cb)
				C.free(unsafe.Pointer(cb))
			}
		}
		nvrtcErr = loadLibrary("NVRTC", names, func(p *C.char) *C.char { return C.mg_load_nvrtc(p) })
	})
	return nvrtcErr
}

// LoadLibraries loads what the CUDA engine needs besides the driver: NVRTC,
// cuBLASLt and cuBLAS. The error names each library that does not load.
func LoadLibraries() error { return errors.Join(LoadNVRTC(), loadCuBLASLt(), loadCuBLAS()) }

// DriverVersion returns the driver's CUDA version, e.g. 13000 for 13.0.
func DriverVersion() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var v C.int
	return int(v), check("cuDriverGetVersion", C.mg_cuDriverGetVersion(&v))
}

// NVRTCVersion returns NVRTC's version as major, minor.
func NVRTCVersion() (int, int, error) {
	if err := LoadNVRTC(); err != nil {
		return 0, 0, err
	}
	var maj, min C.int
	return int(maj), int(min), checkNVRTC("nvrtcVersion", C.mg_nvrtcVersion(&maj, &min))
}

// DeviceCount returns the number of CUDA devices.
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var n C.int
	return int(n), check("cuDeviceGetCount", C.mg_cuDeviceGetCount(&n))
}
