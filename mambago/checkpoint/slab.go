package checkpoint

import (
	"slices"
	"unsafe"

	"github.com/mambago/mambago/mambago/internal/hugemem"
	"github.com/mambago/mambago/mambago/safetensors"
)

// slab holds a file load's weight matrices (the tensors a spec narrows:
// the embeddings, the LM head, input_proj and each layer's four
// projections) side by side in one buffer from hugemem.Bytes, so that a
// decode step, which streams them whole, may read them from huge pages.
// Each starts on a 64-byte line.
type slab struct {
	buf  []byte
	at   map[string]int // each matrix's offset in buf
	size map[string]int // and its count of values
}

// newSlab lays out the matrices of specs found in tensors with their
// expected shape, as float32 or, with narrow, 16-bit values; nil where a
// tensor cannot be read into place (a state dict's, which the Weights
// keep as given) or there is no matrix.
func newSlab(specs []spec, tensors map[string]tensor, narrow safetensors.DType) *slab {
	elem := 4
	if narrow != "" {
		elem = 2
	}
	s := &slab{at: map[string]int{}, size: map[string]int{}}
	total := 0
	for _, sp := range specs {
		t, ok := tensors[sp.name]
		if sp.dst16 == nil || !ok || !slices.Equal(t.shape, sp.shape) {
			continue
		}
		if t.readInto == nil || t.read16Into == nil {
			return nil
		}
		n := 1
		for _, d := range sp.shape {
			n *= d
		}
		s.at[sp.name], s.size[sp.name] = total, n
		total = (total + n*elem + 63) &^ 63
	}
	if total == 0 {
		return nil
	}
	s.buf = hugemem.Bytes(total)
	return s
}

// has reports that the slab holds the matrix name.
func (s *slab) has(name string) bool {
	if s == nil {
		return false
	}
	_, ok := s.at[name]
	return ok
}

// floats is the matrix name's place in the slab as float32 values.
func (s *slab) floats(name string) []float32 {
	if s.size[name] == 0 {
		return []float32{}
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&s.buf[s.at[name]])), s.size[name])
}

// bits is the matrix name's place in the slab as 16-bit values.
func (s *slab) bits(name string) []uint16 {
	if s.size[name] == 0 {
		return []uint16{}
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&s.buf[s.at[name]])), s.size[name])
}
