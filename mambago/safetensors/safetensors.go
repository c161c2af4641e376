// Package safetensors reads and writes the safetensors format
// (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length, a JSON header mapping tensor names to dtype, shape and byte range,
// then the raw tensor bytes.
//
// Files are memory-mapped, so reading a large checkpoint never holds a second
// copy of it in memory: a tensor is converted straight from the mapped pages
// into the float32 slice that the engine keeps.
package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"os"
	"sort"
	"syscall"

	"github.com/x448/float16"
)

// DType names a tensor element type as the safetensors header spells it.
type DType string

// The element types this package converts.
const (
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I64  DType = "I64"
	I32  DType = "I32"
)

// size returns the bytes per element of d, or 0 for a type this package cannot read.
func (d DType) size() int {
	switch d {
	case F32, I32:
		return 4
	case F16, BF16:
		return 2
	case I64:
		return 8
	}
	return 0
}

// Info describes one tensor of a file.
type Info struct {
	DType DType
	Shape []int
	data  []byte
}

// Len returns the number of elements of the tensor.
func (t Info) Len() int {
	n := 1
	for _, s := range t.Shape {
		n *= s
	}
	return n
}

// File is an open, memory-mapped safetensors file.
type File struct {
	Path     string
	Metadata map[string]string
	tensors  map[string]Info
	mapped   []byte
}

// maxHeader bounds the JSON header, as the reference implementation does.
const maxHeader = 100 << 20

// Open maps path and parses its header. Close releases the mapping.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("%s: not a safetensors file (%d bytes)", path, size)
	}
	mapped, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%s: mmap: %w", path, err)
	}
	file := &File{Path: path, mapped: mapped}
	if err := file.parse(); err != nil {
		file.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return file, nil
}

func (f *File) parse() error {
	n := binary.LittleEndian.Uint64(f.mapped[:8])
	if n > maxHeader || 8+n > uint64(len(f.mapped)) {
		return fmt.Errorf("header length %d does not fit a file of %d bytes", n, len(f.mapped))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(f.mapped[8:8+n], &raw); err != nil {
		return fmt.Errorf("header: %w", err)
	}
	body := f.mapped[8+n:]
	f.tensors = make(map[string]Info, len(raw))
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &f.Metadata); err != nil {
				return fmt.Errorf("header metadata: %w", err)
			}
			continue
		}
		var h struct {
			DType   DType    `json:"dtype"`
			Shape   []int    `json:"shape"`
			Offsets [2]int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &h); err != nil {
			return fmt.Errorf("tensor %q: %w", name, err)
		}
		info := Info{DType: h.DType, Shape: h.Shape}
		begin, end := h.Offsets[0], h.Offsets[1]
		if begin < 0 || end < begin || end > int64(len(body)) {
			return fmt.Errorf("tensor %q: data offsets %v outside the %d data bytes", name, h.Offsets, len(body))
		}
		// Every shape is checked, whatever its dtype, so that Len never
		// overflows: no tensor holds more elements than the file has bits.
		n, err := elements(h.Shape, 8*uint64(len(f.mapped)))
		if err != nil {
			return fmt.Errorf("tensor %q: %w", name, err)
		}
		if es := h.DType.size(); es != 0 && n*uint64(es) != uint64(end-begin) {
			return fmt.Errorf("tensor %q: %s%v needs %d bytes, offsets give %d", name, h.DType, h.Shape, n*uint64(es), end-begin)
		}
		info.data = body[begin:end]
		f.tensors[name] = info
	}
	return nil
}

// elements returns the element count of shape, refusing a negative
// dimension and a count above limit (so that no product overflows).
func elements(shape []int, limit uint64) (uint64, error) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > limit {
			return 0, fmt.Errorf("shape %v holds more elements than the file can", shape)
		}
		n = lo
	}
	return n, nil
}

// Close unmaps the file. Slices returned earlier by Float32 or Int64 stay valid:
// they are copies.
func (f *File) Close() error {
	if f.mapped == nil {
		return nil
	}
	err := syscall.Munmap(f.mapped)
	f.mapped, f.tensors = nil, nil
	return err
}

// Release tells the kernel that a tensor's bytes have been read: its whole
// pages leave the process's resident memory (MADV_DONTNEED). They stay in
// the page cache, and a later read maps them in again, so nothing read
// before or after changes; a load that copies each tensor then holds one
// copy of the checkpoint, not the copy and the mapped file.
func (f *File) Release(name string) {
	t, ok := f.tensors[name]
	if !ok || len(t.data) == 0 || f.mapped == nil {
		return
	}
	page := os.Getpagesize()
	start := cap(f.mapped) - cap(t.data) // t.data is f.mapped[start:...]
	lo, hi := (start+page-1)/page*page, (start+len(t.data))/page*page
	if hi > lo {
		_ = syscall.Madvise(f.mapped[lo:hi], syscall.MADV_DONTNEED) // advice: nothing to do if it fails
	}
}

// Names returns the tensor names in sorted order.
func (f *File) Names() []string {
	names := make([]string, 0, len(f.tensors))
	for n := range f.tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Info returns the description of a tensor and whether it exists.
func (f *File) Info(name string) (Info, bool) {
	t, ok := f.tensors[name]
	return t, ok
}

// Float32 converts a floating-point tensor (F32, BF16 or F16) to a new float32 slice.
func (f *File) Float32(name string) ([]float32, error) {
	t, ok := f.tensors[name]
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", f.Path, name)
	}
	out := make([]float32, t.Len())
	if err := f.Float32Into(name, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Float32Into is Float32 into dst, which must hold the tensor's values.
func (f *File) Float32Into(name string, dst []float32) error {
	t, ok := f.tensors[name]
	if !ok {
		return fmt.Errorf("%s: no tensor %q", f.Path, name)
	}
	switch {
	case t.DType != F32 && t.DType != BF16 && t.DType != F16:
		return fmt.Errorf("%s: tensor %q has dtype %s, want F32, BF16 or F16", f.Path, name, t.DType)
	case len(dst) != t.Len():
		return fmt.Errorf("%s: tensor %q has %d values, given room for %d", f.Path, name, t.Len(), len(dst))
	}
	out, b := dst, t.data
	switch t.DType {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
	case F16:
		for i := range out {
			out[i] = float16.Frombits(binary.LittleEndian.Uint16(b[2*i:])).Float32()
		}
	}
	return nil
}

// Bits16 converts a floating-point tensor (F32, BF16 or F16) to a new slice
// of the bits of dt (BF16 or F16), rounding to nearest even where the file
// holds another type and copying where it holds dt. It never holds the
// tensor as float32.
func (f *File) Bits16(name string, dt DType) ([]uint16, error) {
	t, ok := f.tensors[name]
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", f.Path, name)
	}
	out := make([]uint16, t.Len())
	if err := f.Bits16Into(name, dt, out); err != nil {
		return nil, err
	}
	return out, nil
}

// Bits16Into is Bits16 into dst, which must hold the tensor's values.
func (f *File) Bits16Into(name string, dt DType, dst []uint16) error {
	t, ok := f.tensors[name]
	if !ok {
		return fmt.Errorf("%s: no tensor %q", f.Path, name)
	}
	switch {
	case dt != BF16 && dt != F16:
		return fmt.Errorf("%s: tensor %q asked for as %s, want BF16 or F16", f.Path, name, dt)
	case t.DType != F32 && t.DType != BF16 && t.DType != F16:
		return fmt.Errorf("%s: tensor %q has dtype %s, want F32, BF16 or F16", f.Path, name, t.DType)
	}
	if len(dst) != t.Len() {
		return fmt.Errorf("%s: tensor %q has %d values, given room for %d", f.Path, name, t.Len(), len(dst))
	}
	out, b := dst, t.data
	if t.DType == dt {
		for i := range out {
			out[i] = binary.LittleEndian.Uint16(b[2*i:])
		}
		return nil
	}
	switch {
	case t.DType == F32 && dt == BF16: // the common case, its conversion inlined
		for i := range out {
			out[i] = BF16Bits(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		}
	case t.DType == F32:
		for i := range out {
			out[i] = To16(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])), dt)
		}
	default: // the other 16-bit type
		for i := range out {
			out[i] = To16(From16(binary.LittleEndian.Uint16(b[2*i:]), t.DType), dt)
		}
	}
	return nil
}

// Int64 converts an integer tensor (I64 or I32) to a new int64 slice.
func (f *File) Int64(name string) ([]int64, error) {
	t, ok := f.tensors[name]
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", f.Path, name)
	}
	if t.DType != I64 && t.DType != I32 {
		return nil, fmt.Errorf("%s: tensor %q has dtype %s, want I64 or I32", f.Path, name, t.DType)
	}
	out := make([]int64, t.Len())
	switch t.DType {
	case I64:
		for i := range out {
			out[i] = int64(binary.LittleEndian.Uint64(t.data[8*i:]))
		}
	case I32:
		for i := range out {
			out[i] = int64(int32(binary.LittleEndian.Uint32(t.data[4*i:])))
		}
	}
	return out, nil
}

// Tensor is one tensor to write: float32 values stored as DType (F32, BF16 or F16).
type Tensor struct {
	DType DType
	Shape []int
	Data  []float32
}

// Write stores tensors in a new safetensors file at path. BF16 rounds to
// nearest even; F16 rounds as github.com/x448/float16 does.
func Write(path string, tensors map[string]Tensor) error {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var body []byte
	for _, n := range names {
		t := tensors[n]
		es := t.DType.size()
		if es == 0 || t.DType == I64 || t.DType == I32 {
			return fmt.Errorf("%s: tensor %q: cannot write dtype %s", path, n, t.DType)
		}
		if (Info{Shape: t.Shape}).Len() != len(t.Data) {
			return fmt.Errorf("%s: tensor %q: shape %v does not hold %d values", path, n, t.Shape, len(t.Data))
		}
		begin := len(body)
		for _, v := range t.Data {
			switch t.DType {
			case F32:
				body = binary.LittleEndian.AppendUint32(body, math.Float32bits(v))
			case BF16:
				body = binary.LittleEndian.AppendUint16(body, BF16Bits(v))
			case F16:
				body = binary.LittleEndian.AppendUint16(body, float16.Fromfloat32(v).Bits())
			}
		}
		header[n] = map[string]any{"dtype": t.DType, "shape": t.Shape, "data_offsets": []int{begin, len(body)}}
	}
	h, err := json.Marshal(header)
	if err != nil {
		return err
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	out = append(append(out, h...), body...)
	return os.WriteFile(path, out, 0o644)
}

// Widen returns the float32 values of 16-bit values of dt (BF16 or F16),
// exactly.
func Widen(bits []uint16, dt DType) []float32 {
	out := make([]float32, len(bits))
	for i, b := range bits {
		out[i] = From16(b, dt)
	}
	return out
}

// Narrow returns v rounded to dt (BF16 or F16; nearest, ties to even) as
// its bits.
func Narrow(v []float32, dt DType) []uint16 {
	out := make([]uint16, len(v))
	NarrowInto(out, v, dt)
	return out
}

// NarrowInto is Narrow into dst (of v's length). The type is picked once,
// outside the loop: per value, the choice doubled the time of a bf16 load.
func NarrowInto(dst []uint16, v []float32, dt DType) {
	dst = dst[:len(v)]
	if dt == BF16 {
		for i, x := range v {
			dst[i] = BF16Bits(x)
		}
		return
	}
	for i, x := range v {
		dst[i] = float16.Fromfloat32(x).Bits()
	}
}

// From16 is the float32 of the 16-bit value b of dt (BF16 or F16), exactly.
func From16(b uint16, dt DType) float32 {
	if dt == BF16 {
		return math.Float32frombits(uint32(b) << 16)
	}
	return float16.Frombits(b).Float32()
}

// To16 rounds v to dt (BF16 or F16; nearest, ties to even) and returns its
// bits.
func To16(v float32, dt DType) uint16 {
	if dt == BF16 {
		return BF16Bits(v)
	}
	return float16.Fromfloat32(v).Bits()
}

// BF16Bits rounds v to bfloat16 (nearest, ties to even) and returns its bits.
func BF16Bits(v float32) uint16 {
	b := math.Float32bits(v)
	if v != v { // NaN stays a quiet NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
