package cpu

import (
	"fmt"
	"slices"
	"sync"

	"github.com/mambago/mambago/mambago/engine"
)

// State is the CPU engine's carried state: per layer, the conv window
// [B, E, K] and the SSM state [B, E, N], both float32. The engine keeps
// each sequence's windows [E, K] and SSM state [E, N] in lane blocks
// (laneBlock: of eight and sixteen channels), which its conv and scan
// kernels update in place; the accessors convert.
type State struct {
	mu    sync.Mutex // held by every call that reads or writes the state
	owner *Engine
	batch int
	conv  [][]float32
	ssm   [][]float32
}

// Batch returns the number of sequences the state holds.
func (s *State) Batch() int { return s.batch }

// Reset zeroes the state.
func (s *State) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l := range s.conv {
		clear(s.conv[l])
		clear(s.ssm[l])
	}
}

// ConvState returns a copy of layer's conv window, [B, E, K].
func (s *State) ConvState(layer int) ([]float32, error) {
	return s.get(s.conv, layer, laneWidth)
}

// SSMState returns a copy of layer's SSM state, [B, E, N].
func (s *State) SSMState(layer int) ([]float32, error) {
	return s.get(s.ssm, layer, wideLanes)
}

// SetConvState overwrites layer's conv window, [B, E, K].
func (s *State) SetConvState(layer int, v []float32) error {
	return s.set(s.conv, layer, v, "conv state", laneWidth)
}

// SetSSMState overwrites layer's SSM state, [B, E, N].
func (s *State) SetSSMState(layer int, v []float32) error {
	return s.set(s.ssm, layer, v, "ssm state", wideLanes)
}

// CopyRows makes sequence i of s, in every layer, a copy of src's sequence
// rows[i]; src may be s.
func (s *State) CopyRows(src engine.State, rows []int) error {
	from, err := s.owner.own(src)
	if err != nil {
		return err
	}
	if err := engine.CheckRows(rows, s.batch, from.batch); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if from != s {
		from.mu.Lock()
		defer from.mu.Unlock()
	}
	for l := range s.conv {
		copyRows(s.conv[l], from.conv[l], rows, from == s)
		copyRows(s.ssm[l], from.ssm[l], rows, from == s)
	}
	return nil
}

// copyRows sets row i of dst to row rows[i] of src, rows of
// len(dst)/len(rows) values; src is read through a copy where it is dst.
func copyRows(dst, src []float32, rows []int, same bool) {
	if same {
		src = slices.Clone(src)
	}
	n := len(dst) / len(rows)
	for i, r := range rows {
		copy(dst[i*n:(i+1)*n], src[r*n:(r+1)*n])
	}
}

// get returns a copy of layer's values in all, each sequence's [E, n]
// from lane blocks of width channels.
func (s *State) get(all [][]float32, layer, width int) ([]float32, error) {
	if err := engine.CheckLayer(s.owner.cfg, layer); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	E := s.owner.cfg.Inner
	n := len(all[layer]) / (s.batch * E)
	out := make([]float32, len(all[layer]))
	for b := range s.batch {
		blocksToRows(out[b*E*n:(b+1)*E*n], all[layer][b*E*n:], 0, E, E, n, width)
	}
	return out, nil
}

// set overwrites layer's values in all with v, each sequence's [E, n] into
// lane blocks of width channels.
func (s *State) set(all [][]float32, layer int, v []float32, what string, width int) error {
	if err := engine.CheckLayer(s.owner.cfg, layer); err != nil {
		return err
	}
	if len(v) != len(all[layer]) {
		return engine.Invalid("%s of layer %d needs %d values, got %d", what, layer, len(all[layer]), len(v))
	}
	if err := engine.CheckFinite(what, v); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	E := s.owner.cfg.Inner
	n := len(v) / (s.batch * E)
	for b := range s.batch {
		rowsToBlocks(all[layer][b*E*n:], v[b*E*n:(b+1)*E*n], 0, E, E, n, width)
	}
	return nil
}

// own returns st as a *State of e, or an error if it belongs elsewhere.
func (e *Engine) own(st engine.State) (*State, error) {
	s, ok := st.(*State)
	if !ok || s == nil {
		return nil, engine.Invalid("state was not made by this CPU engine (%T)", st)
	}
	if s.owner != e {
		return nil, engine.Invalid("state belongs to another model")
	}
	return s, nil
}

// NewState returns a zeroed state for batch sequences.
func (e *Engine) NewState(batch int) (engine.State, error) {
	if batch < 1 || batch > 1<<16 {
		return nil, engine.Invalid("batch_size = %d, want 1..65536", batch)
	}
	c := e.cfg
	s := &State{owner: e, batch: batch, conv: make([][]float32, c.Layers), ssm: make([][]float32, c.Layers)}
	for l := range s.conv {
		s.conv[l] = make([]float32, batch*c.Inner*c.ConvKernel)
		s.ssm[l] = make([]float32, batch*c.Inner*c.State)
	}
	return s, nil
}

var _ fmt.Stringer = (*State)(nil)

// String describes the state's shape.
func (s *State) String() string {
	c := s.owner.cfg
	return fmt.Sprintf("cpu.State{B=%d layers=%d conv=[%d,%d,%d] ssm=[%d,%d,%d]}",
		s.batch, c.Layers, s.batch, c.Inner, c.ConvKernel, s.batch, c.Inner, c.State)
}
