package cpu

import (
	"fmt"
	"sync"

	"github.com/mambago/mambago/mambago/engine"
)

// State is the CPU engine's carried state: per layer, the conv window
// [B, E, K] and the SSM state [B, E, N], both float32. The engine keeps
// each sequence's SSM state [E, N] in lane blocks (laneBlock), which its
// scan kernels update in place; SSMState and SetSSMState convert.
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
	return s.get(s.conv, layer, false)
}

// SSMState returns a copy of layer's SSM state, [B, E, N].
func (s *State) SSMState(layer int) ([]float32, error) {
	return s.get(s.ssm, layer, true)
}

// SetConvState overwrites layer's conv window, [B, E, K].
func (s *State) SetConvState(layer int, v []float32) error {
	return s.set(s.conv, layer, v, "conv state", false)
}

// SetSSMState overwrites layer's SSM state, [B, E, N].
func (s *State) SetSSMState(layer int, v []float32) error {
	return s.set(s.ssm, layer, v, "ssm state", true)
}

// get returns a copy of layer's values in all, from lane blocks (each
// sequence's [E, N]) where blocks is set.
func (s *State) get(all [][]float32, layer int, blocks bool) ([]float32, error) {
	if err := engine.CheckLayer(s.owner.cfg, layer); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !blocks {
		return append([]float32(nil), all[layer]...), nil
	}
	E, N := s.owner.cfg.Inner, s.owner.cfg.State
	out := make([]float32, len(all[layer]))
	for b := range s.batch {
		blocksToRows(out[b*E*N:(b+1)*E*N], all[layer][b*E*N:], 0, E, E, N, wideLanes)
	}
	return out, nil
}

// set overwrites layer's values in all with v, into lane blocks (each
// sequence's [E, N]) where blocks is set.
func (s *State) set(all [][]float32, layer int, v []float32, what string, blocks bool) error {
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
	if !blocks {
		copy(all[layer], v)
		return nil
	}
	E, N := s.owner.cfg.Inner, s.owner.cfg.State
	for b := range s.batch {
		rowsToBlocks(all[layer][b*E*N:], v[b*E*N:(b+1)*E*N], 0, E, E, N, wideLanes)
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
