package checkpoint

import (
	"slices"
	"unsafe"

	"github.com/mambago/mambago/mambago/internal/hugemem"
	"github.com/mambago/mambago/mambago/safetensors"
)

// slab holds a model's weight matrices (the embeddings, the LM head,
// input_proj and each layer's four projections) side by side in one
// buffer from hugemem.Bytes, so that a decode step, which streams them
// whole, may read them from huge pages. Each starts on a 64-byte line.
type slab struct {
	buf      []byte
	at, size []int // each matrix's offset in buf, and its count of values
}

// newSlabOf lays out matrices of the given counts of values, elem bytes
// each.
func newSlabOf(counts []int, elem int) *slab {
	s := &slab{at: make([]int, len(counts)), size: counts}
	total := 0
	for i, n := range counts {
		s.at[i] = total
		total = (total + n*elem + 63) &^ 63
	}
	s.buf = hugemem.Bytes(total)
	return s
}

// floats is matrix i's place in the slab as float32 values.
func (s *slab) floats(i int) []float32 {
	if s.size[i] == 0 {
		return []float32{}
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&s.buf[s.at[i]])), s.size[i])
}

// bits is matrix i's place in the slab as 16-bit values.
func (s *slab) bits(i int) []uint16 {
	if s.size[i] == 0 {
		return []uint16{}
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&s.buf[s.at[i]])), s.size[i])
}

// loadSlab is a load's slab and each matrix's place in it by tensor name.
type loadSlab struct {
	*slab
	slot map[string]int
}

// newLoadSlab lays out the matrices of specs found in tensors with their
// expected shape, as float32 or, with narrow, 16-bit values (every
// tensor reads into place as 16 bits). It holds none where a tensor cannot
// be read into place as float32 (a state dict's, which the Weights keep
// as given).
func newLoadSlab(specs []spec, tensors map[string]tensor, narrow safetensors.DType) loadSlab {
	elem := 4
	if narrow != "" {
		elem = 2
	}
	ls := loadSlab{slot: map[string]int{}}
	var counts []int
	for _, sp := range specs {
		t, ok := tensors[sp.name]
		if sp.dst16 == nil || !ok || !slices.Equal(t.shape, sp.shape) {
			continue
		}
		if narrow == "" && t.readInto == nil || narrow != "" && t.read16Into == nil {
			return loadSlab{}
		}
		n := 1
		for _, d := range sp.shape {
			n *= d
		}
		ls.slot[sp.name], counts = len(counts), append(counts, n)
	}
	ls.slab = newSlabOf(counts, elem)
	return ls
}

// has reports that the slab holds the matrix name, at index i.
func (ls loadSlab) has(name string) (i int, ok bool) {
	i, ok = ls.slot[name]
	return i, ok && ls.slab != nil
}

// matrices points at w's float32 weight matrices that hold values, each
// once (a tied LM head is the embeddings').
func (w *Weights) matrices() []*[]float32 {
	ms := []*[]float32{&w.Embeddings}
	if !w.Tied() {
		ms = append(ms, &w.LMHead)
	}
	ms = append(ms, &w.InputProj)
	for i := range w.Layers {
		l := &w.Layers[i]
		ms = append(ms, &l.InProj, &l.XProj, &l.DTProj, &l.OutProj)
	}
	return slices.DeleteFunc(ms, func(p *[]float32) bool { return len(*p) == 0 })
}

// cloneIntoSlab replaces each of ms with a copy, all of them side by side
// in one slab.
func cloneIntoSlab(ms []*[]float32) {
	counts := make([]int, len(ms))
	for i, p := range ms {
		counts[i] = len(*p)
	}
	s := newSlabOf(counts, 4)
	for i, p := range ms {
		dst := s.floats(i)
		copy(dst, *p)
		*p = dst
	}
}
