package cpu

import (
	"sync"
	"unsafe"

	"github.com/mambago/mambago/mambago/safetensors"
)

// Storage is the type the engine keeps its weight matrices in (in_proj,
// x_proj, dt_proj, out_proj, the embeddings, the LM head and input_proj).
// The engine computes in float32 whatever the storage: a 16-bit matrix is
// widened exactly as it is read, so a model loaded from a bf16 checkpoint
// into BFloat16 storage gives what Float32 storage of the same checkpoint
// gives, in half the memory. A decode step, which reads every weight once
// and is bound by memory, takes about half the time; a prefill widens each
// matrix once a chunk before its SGEMM.
type Storage uint8

const (
	// Float32 keeps the weights as loaded (the default).
	Float32 Storage = iota
	// BFloat16 rounds them to bfloat16 (nearest, ties to even).
	BFloat16
	// Float16 rounds them to IEEE half precision (nearest, ties to even).
	Float16
)

// String returns the storage's name as torch spells the type: "float32",
// "bfloat16" or "float16".
func (s Storage) String() string {
	switch s {
	case BFloat16:
		return "bfloat16"
	case Float16:
		return "float16"
	}
	return "float32"
}

// matrix is a row-major weight matrix [rows, cols] as the engine keeps it:
// the float32 values (f32), or their 16-bit bits (h) in the storage st.
type matrix struct {
	f32        []float32
	h          []uint16
	st         Storage
	rows, cols int
}

// newMatrix keeps v [rows, cols] in st: v itself for Float32, else a
// rounded copy. A nil v gives the zero matrix (a weight the checkpoint
// lacks).
func newMatrix(v []float32, rows, cols int, st Storage) matrix {
	m := matrix{st: st, rows: rows, cols: cols}
	switch {
	case v == nil:
		return matrix{}
	case st == Float32:
		m.f32 = v
		return m
	}
	m.h = make([]uint16, len(v))
	parallelRows(len(v), 1<<16, func(lo, hi int) { safetensors.NarrowInto(m.h[lo:hi], v[lo:hi], st.dtype()) })
	return m
}

// widen is the float32 of 16-bit value bits in st, exactly.
func widen(bits uint16, st Storage) float32 { return safetensors.From16(bits, st.dtype()) }

// dtype is st's safetensors type: BF16 or F16 (F32 for Float32).
func (s Storage) dtype() safetensors.DType {
	switch s {
	case BFloat16:
		return safetensors.BF16
	case Float16:
		return safetensors.F16
	}
	return safetensors.F32
}

// at is m's value at row r, column k.
func (m matrix) at(r, k int) float32 {
	if m.f32 != nil {
		return m.f32[r*m.cols+k]
	}
	return widen(m.h[r*m.cols+k], m.st)
}

// raw returns where m's values start and the bytes each takes (4, or 2 in
// 16 bits), for the assembly kernels that read m in place. It checks that
// m holds all rows·cols values.
func (m matrix) raw() (base unsafe.Pointer, size int) {
	if m.h != nil {
		_ = m.h[m.rows*m.cols-1]
		return unsafe.Pointer(unsafe.SliceData(m.h)), 2
	}
	_ = m.f32[m.rows*m.cols-1]
	return unsafe.Pointer(unsafe.SliceData(m.f32)), 4
}

// row widens row r of m into dst [cols].
func (m matrix) row(dst []float32, r int) {
	if m.f32 != nil {
		copy(dst, m.f32[r*m.cols:(r+1)*m.cols])
		return
	}
	for i, b := range m.h[r*m.cols : (r+1)*m.cols] {
		dst[i] = widen(b, m.st)
	}
}

// widened returns m's values as float32: m.f32 itself, or a copy widened
// into a buffer from widePool that the caller gives back with release.
func (m matrix) widened() (v []float32, release func()) {
	if m.f32 != nil {
		return m.f32, func() {}
	}
	n := len(m.h)
	buf, _ := widePool.Get().(*[]float32)
	if buf == nil || cap(*buf) < n {
		b := make([]float32, n)
		buf = &b
	}
	v = (*buf)[:n]
	parallelRows(n, 1<<15, func(lo, hi int) { widenInto(v[lo:hi], m.h[lo:hi], m.st) })
	return v, func() { widePool.Put(buf) }
}

// widePool holds the float32 buffers that a prefill's SGEMMs widen 16-bit
// matrices into, so that each chunk does not allocate (and zero) them anew.
var widePool sync.Pool

// widenInto widens src's 16-bit values in st into dst (of src's length).
func widenInto(dst []float32, src []uint16, st Storage) {
	if useLanes && len(src) >= 8 {
		n8 := len(src) &^ 7
		widenAVX2(&dst[0], &src[0], n8, st == Float16)
		dst, src = dst[n8:], src[n8:]
	}
	for i, b := range src {
		dst[i] = widen(b, st)
	}
}
