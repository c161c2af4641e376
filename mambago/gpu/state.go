package gpu

import (
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
)

// State is the GPU engine's carried state in device memory: per layer, the
// conv window [B, E, K] and the SSM state [B, E, N], f32.
type State struct {
	owner     *Engine
	batch     int
	conv, ssm []*cuda.Buffer
}

// NewState returns a zeroed state for batch sequences.
func (e *Engine) NewState(batch int) (engine.State, error) {
	if batch < 1 || batch > 65535 {
		return nil, engine.Invalid("batch_size = %d, want 1..65535 (a CUDA grid dimension)", batch)
	}
	done, err := e.bind()
	if err != nil {
		return nil, err
	}
	defer done()
	c := e.cfg
	s := &State{owner: e, batch: batch}
	for l := 0; l < c.Layers; l++ {
		for _, n := range []int{batch * c.Inner * c.ConvKernel, batch * c.Inner * c.State} {
			b, err := cuda.Alloc(4 * n)
			if err != nil {
				s.free()
				return nil, err
			}
			if err := cuda.Fill32(b.Ptr, 0, n, e.stream); err != nil {
				s.free()
				return nil, err
			}
			if len(s.conv) == l {
				s.conv = append(s.conv, b)
			} else {
				s.ssm = append(s.ssm, b)
			}
		}
	}
	return s, e.stream.Synchronize()
}

func (s *State) free() {
	for _, b := range append(s.conv, s.ssm...) {
		b.Free()
	}
	s.conv, s.ssm = nil, nil
}

// Batch returns the number of sequences the state holds.
func (s *State) Batch() int { return s.batch }

// Reset zeroes the state.
func (s *State) Reset() {
	e := s.owner
	done, err := e.bind()
	if err != nil {
		return
	}
	defer done()
	for l := range s.conv {
		cuda.Fill32(s.conv[l].Ptr, 0, s.conv[l].Bytes/4, e.stream)
		cuda.Fill32(s.ssm[l].Ptr, 0, s.ssm[l].Bytes/4, e.stream)
	}
	e.stream.Synchronize()
}

// ConvState returns a copy of layer's conv window, [B, E, K].
func (s *State) ConvState(layer int) ([]float32, error) { return s.get(s.conv, layer) }

// SSMState returns a copy of layer's SSM state, [B, E, N].
func (s *State) SSMState(layer int) ([]float32, error) { return s.get(s.ssm, layer) }

// SetConvState overwrites layer's conv window, [B, E, K].
func (s *State) SetConvState(layer int, v []float32) error {
	return s.set(s.conv, layer, v, "conv state")
}

// SetSSMState overwrites layer's SSM state, [B, E, N].
func (s *State) SetSSMState(layer int, v []float32) error { return s.set(s.ssm, layer, v, "ssm state") }

func (s *State) get(all []*cuda.Buffer, layer int) ([]float32, error) {
	e := s.owner
	if err := engine.CheckLayer(e.cfg, layer); err != nil {
		return nil, err
	}
	done, err := e.bind()
	if err != nil {
		return nil, err
	}
	defer done()
	out := make([]float32, all[layer].Bytes/4)
	if err := cuda.CopyOut(out, all[layer].Ptr, e.stream); err != nil {
		return nil, err
	}
	return out, e.stream.Synchronize()
}

func (s *State) set(all []*cuda.Buffer, layer int, v []float32, what string) error {
	e := s.owner
	if err := engine.CheckLayer(e.cfg, layer); err != nil {
		return err
	}
	if len(v) != all[layer].Bytes/4 {
		return engine.Invalid("%s of layer %d needs %d values, got %d", what, layer, all[layer].Bytes/4, len(v))
	}
	if err := engine.CheckFinite(what, v); err != nil {
		return err
	}
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	if err := cuda.CopyIn(all[layer].Ptr, v, e.stream); err != nil {
		return err
	}
	return e.stream.Synchronize()
}

// own returns st as a *State of e.
func (e *Engine) own(st engine.State) (*State, error) {
	s, ok := st.(*State)
	if !ok || s == nil {
		return nil, engine.Invalid("state was not made by this GPU engine (%T)", st)
	}
	if s.owner != e {
		return nil, engine.Invalid("state belongs to another model")
	}
	return s, nil
}
