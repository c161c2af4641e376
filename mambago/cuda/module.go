package cuda

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"
)

// Compile compiles CUDA C source with NVRTC to a CUBIN for arch (e.g.
// "sm_90"). On a compile error the returned error holds NVRTC's log.
func Compile(src, name, arch string, options ...string) ([]byte, error) {
	cubin, _, err := CompileLog(src, name, arch, options...)
	return cubin, err
}

// CompileLog is Compile that also returns NVRTC's log of a successful
// compilation (with --ptxas-options=-v, the registers, stack and spills of
// every kernel).
func CompileLog(src, name, arch string, options ...string) (cubin []byte, log string, err error) {
	if err := LoadNVRTC(); err != nil {
		return nil, "", err
	}
	csrc, cname := C.CString(src), C.CString(name)
	defer C.free(unsafe.Pointer(csrc))
	defer C.free(unsafe.Pointer(cname))
	var prog unsafe.Pointer
	if err := checkNVRTC("nvrtcCreateProgram", C.mg_nvrtcCreateProgram(&prog, csrc, cname)); err != nil {
		return nil, "", err
	}
	defer C.mg_nvrtcDestroyProgram(&prog)
	opts := append([]string{"--gpu-architecture=" + arch}, options...)
	copts := make([]*C.char, len(opts))
	for i, o := range opts {
		copts[i] = C.CString(o)
		defer C.free(unsafe.Pointer(copts[i]))
	}
	// The option pointers live in C memory; the array of them is passed for the call only.
	arr := (**C.char)(C.malloc(C.size_t(len(copts)) * C.size_t(unsafe.Sizeof(copts[0]))))
	defer C.free(unsafe.Pointer(arr))
	copy(unsafe.Slice(arr, len(copts)), copts)
	compileErr := checkNVRTC("nvrtcCompileProgram", C.mg_nvrtcCompileProgram(prog, C.int(len(opts)), arr))
	var clog *C.char
	C.mg_nvrtcGetProgramLog(prog, &clog)
	defer C.free(unsafe.Pointer(clog))
	log = C.GoString(clog)
	if compileErr != nil {
		return nil, log, fmt.Errorf("%w compiling %s for %s:\n%s", compileErr, name, arch, log)
	}
	var ccubin *C.char
	var size C.size_t
	if err := checkNVRTC("nvrtcGetCUBIN", C.mg_nvrtcGetCUBIN(prog, &ccubin, &size)); err != nil {
		return nil, log, err
	}
	defer C.free(unsafe.Pointer(ccubin))
	return C.GoBytes(unsafe.Pointer(ccubin), C.int(size)), log, nil
}

// Module is loaded device code.
type Module struct{ h unsafe.Pointer }

// LoadModule loads a CUBIN into the current context.
func LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, fmt.Errorf("cuda: LoadModule: empty image")
	}
	cimg := C.CBytes(image)
	defer C.free(cimg)
	m := &Module{}
	return m, check("cuModuleLoadData", C.mg_cuModuleLoadData(&m.h, cimg))
}

// Unload releases the module.
func (m *Module) Unload() error {
	if m == nil || m.h == nil {
		return nil
	}
	h := m.h
	m.h = nil
	return check("cuModuleUnload", C.mg_cuModuleUnload(h))
}

// Function is a kernel of a loaded module.
type Function struct {
	Name      string
	h         unsafe.Pointer
	maxShared int          // the largest SetMaxDynamicShared so far
	nargs     atomic.Int32 // its arguments, counted at each launch (Graph.Bind reads as many)
}

// Function looks up the kernel name (declare it extern "C" in the source).
func (m *Module) Function(name string) (*Function, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	f := &Function{Name: name}
	if err := check("cuModuleGetFunction", C.mg_cuModuleGetFunction(&f.h, m.h, cname)); err != nil {
		return nil, fmt.Errorf("%w (kernel %s)", err, name)
	}
	return f, nil
}

// Global is the address and size in bytes of the module's __device__
// variable name (declare it extern "C", or look it up by its mangled name).
func (m *Module) Global(name string) (Ptr, int, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var p C.mg_devptr
	var bytes C.size_t
	if err := check("cuModuleGetGlobal", C.mg_cuModuleGetGlobal(&p, &bytes, m.h, cname)); err != nil {
		return 0, 0, fmt.Errorf("%w (variable %s)", err, name)
	}
	return Ptr(p), int(bytes), nil
}

// SetMaxDynamicShared lets the kernel use up to bytes of dynamic shared
// memory. A call for no more than an earlier one allowed does nothing, so
// launch paths may call it every time.
func (f *Function) SetMaxDynamicShared(bytes int) error {
	if bytes <= f.maxShared {
		return nil
	}
	const maxDynamicSharedSizeBytes = 8 // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
	if err := check("cuFuncSetAttribute", C.mg_cuFuncSetAttribute(f.h, maxDynamicSharedSizeBytes, C.int(bytes))); err != nil {
		return fmt.Errorf("%w (kernel %s, %d bytes of shared memory)", err, f.Name, bytes)
	}
	f.maxShared = bytes
	return nil
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z int }

// D1 returns a one-dimensional Dim3.
func D1(x int) Dim3 { return Dim3{x, 1, 1} }

// Launch queues the kernel on s. Arguments may be Ptr, int32, uint32,
// float32, int64, uint64 or int (passed as int32 after a range check); each is
// packed at its natural alignment, so nothing is truncated.
func (f *Function) Launch(grid, block Dim3, shared int, s *Stream, args ...any) error {
	return f.launch(false, grid, block, shared, s, args)
}

// LaunchMaybePDL is Launch, with programmatic dependent launch (sm_90 and
// newer) when pdl is set: the kernel may then start while the previous
// kernel on s is still running, so it must execute griddepcontrol.wait
// (pdl_wait in kernels/math.cuh) before it reads anything that kernel
// writes, or writes anything it reads. Before the wait it may only read data
// no kernel in flight writes, such as weights.
func (f *Function) LaunchMaybePDL(pdl bool, grid, block Dim3, shared int, s *Stream, args ...any) error {
	return f.launch(pdl, grid, block, shared, s, args)
}

func (f *Function) launch(pdl bool, grid, block Dim3, shared int, s *Stream, args []any) error {
	buf, offsets, err := packArgs(args)
	if err != nil {
		return fmt.Errorf("cuda: launch %s: %w", f.Name, err)
	}
	f.nargs.Store(int32(len(args)))
	var bufp unsafe.Pointer
	if len(buf) > 0 {
		bufp = C.CBytes(buf)
		defer C.free(bufp)
	}
	var offp *C.int
	if len(offsets) > 0 {
		offp = (*C.int)(unsafe.Pointer(&offsets[0]))
	}
	gx, gy, gz, bx, by, bz := C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z), C.uint(block.X), C.uint(block.Y), C.uint(block.Z)
	name, r := "cuLaunchKernel", C.mg_result(0)
	if pdl {
		name, r = "cuLaunchKernelEx", C.mg_cuLaunchKernelPDL(f.h, gx, gy, gz, bx, by, bz, C.uint(shared), s.handle(), bufp, offp,
			C.int(len(offsets)))
	} else {
		r = C.mg_cuLaunchKernel(f.h, gx, gy, gz, bx, by, bz, C.uint(shared), s.handle(), bufp, offp, C.int(len(offsets)))
	}
	if err := check(name, r); err != nil {
		return fmt.Errorf("%w (kernel %s, grid %v, block %v, %d B shared)", err, f.Name, grid, block, shared)
	}
	return nil
}

// launchLayout is the shim's layout of cuLaunchKernelEx's structs (see
// mg_launch_layout), for a test without a GPU.
func launchLayout() []int { return shimLayout(6, func(p *C.int) { C.mg_launch_layout(p) }) }

// shimLayout returns the n ints a shim's mg_*_layout function writes: the
// sizes and offsets of its copies of a library's structs.
func shimLayout(n int, fill func(*C.int)) []int {
	out := make([]C.int, n)
	fill(&out[0])
	r := make([]int, n)
	for i, v := range out {
		r[i] = int(v)
	}
	return r
}

// packArgs lays the arguments out as the kernel's parameter buffer.
func packArgs(args []any) ([]byte, []int32, error) {
	var buf []byte
	offsets := make([]int32, 0, len(args))
	put := func(size int, write func([]byte)) {
		for len(buf)%size != 0 {
			buf = append(buf, 0)
		}
		offsets = append(offsets, int32(len(buf)))
		b := make([]byte, size)
		write(b)
		buf = append(buf, b...)
	}
	for i, a := range args {
		switch v := a.(type) {
		case Ptr:
			put(8, func(b []byte) { binary.LittleEndian.PutUint64(b, uint64(v)) })
		case uint64:
			put(8, func(b []byte) { binary.LittleEndian.PutUint64(b, v) })
		case int64:
			put(8, func(b []byte) { binary.LittleEndian.PutUint64(b, uint64(v)) })
		case int32:
			put(4, func(b []byte) { binary.LittleEndian.PutUint32(b, uint32(v)) })
		case uint32:
			put(4, func(b []byte) { binary.LittleEndian.PutUint32(b, v) })
		case float32:
			put(4, func(b []byte) { binary.LittleEndian.PutUint32(b, math.Float32bits(v)) })
		case float64:
			put(8, func(b []byte) { binary.LittleEndian.PutUint64(b, math.Float64bits(v)) })
		case TensorMap:
			put(len(v), func(b []byte) { copy(b, v[:]) })
		case int:
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, nil, fmt.Errorf("argument %d: int %d overflows int32 (pass int64)", i, v)
			}
			put(4, func(b []byte) { binary.LittleEndian.PutUint32(b, uint32(int32(v))) })
		default:
			return nil, nil, fmt.Errorf("argument %d: unsupported type %T", i, a)
		}
	}
	return buf, offsets, nil
}
