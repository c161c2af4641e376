package gpu

import (
	"errors"

	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
)

// State is the GPU engine's carried state in device memory, one allocation:
// every layer's conv window [B, E, K], then every layer's SSM state
// [B, E, N], f32.
type State struct {
	owner           *Engine
	batch           int
	buf             *cuda.Buffer
	convLen, ssmLen int    // floats per layer
	step            *Graph // the step graph a decoder captured for it, kept for the next (NewDecoder)
	decoded         int    // the steps its decoders were made for, summed (NewDecoder)
	// CopyRows' buffers, made at its first call: a copy of buf to read
	// from where the source is the state itself, and the rows as int32.
	scratch, rows *cuda.Buffer
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
	s := &State{owner: e, batch: batch, convLen: batch * c.Inner * c.ConvKernel, ssmLen: batch * c.Inner * c.State}
	n := c.Layers * (s.convLen + s.ssmLen)
	if s.buf, err = cuda.Alloc(4 * n); err != nil {
		return nil, err
	}
	if err := cuda.Fill32(s.buf.Ptr, 0, n, e.stream); err != nil {
		s.buf.Free()
		return nil, err
	}
	return s, e.stream.Synchronize()
}

// conv returns layer l's conv window.
func (s *State) conv(l int) cuda.Ptr { return s.buf.Offset(4 * l * s.convLen) }

// ssm returns layer l's SSM state.
func (s *State) ssm(l int) cuda.Ptr {
	return s.buf.Offset(4 * (s.owner.cfg.Layers*s.convLen + l*s.ssmLen))
}

// Free releases the state's device memory; the state is unusable after.
func (s *State) Free() error {
	if s.buf == nil {
		return nil
	}
	done, err := s.owner.bind()
	if err != nil {
		return err
	}
	defer done()
	s.owner.evictGraphs(func(k graphKey) bool { return k.s == s })
	if s.step != nil {
		s.step.free()
		s.step = nil
	}
	err = errors.Join(s.buf.Free(), s.scratch.Free(), s.rows.Free())
	s.buf, s.scratch, s.rows = nil, nil, nil
	return err
}

// Batch returns the number of sequences the state holds.
func (s *State) Batch() int { return s.batch }

// Reset zeroes the state.
func (s *State) Reset() {
	e := s.owner
	if s.buf == nil {
		return
	}
	done, err := e.bind()
	if err != nil {
		return
	}
	defer done()
	e.onStream(nil, func() error { // after the work queued on callers' streams
		if err := cuda.Fill32(s.buf.Ptr, 0, s.buf.Bytes/4, e.stream); err != nil {
			return err
		}
		return e.stream.Synchronize()
	})
}

// CopyRows makes sequence i of s, in every layer, a copy of src's
// sequence rows[i] (copy_rows_f32, kernels/elementwise.cu); src may be s,
// which is then read through a copy of itself.
func (s *State) CopyRows(src engine.State, rows []int) error {
	e := s.owner
	from, err := e.own(src)
	if err != nil {
		return err
	}
	if s.buf == nil {
		return engine.Invalid("state is freed")
	}
	if err := engine.CheckRows(rows, s.batch, from.batch); err != nil {
		return err
	}
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	if s.rows == nil {
		if s.rows, err = cuda.Alloc(4 * s.batch); err != nil {
			return err
		}
	}
	if from == s && s.scratch == nil {
		if s.scratch, err = cuda.Alloc(s.buf.Bytes); err != nil {
			return err
		}
	}
	idx := make([]int32, len(rows))
	for i, r := range rows {
		idx[i] = int32(r)
	}
	return e.onStream(nil, func() error { // after the work queued on callers' streams
		read := from.buf.Ptr
		if from == s {
			if err := cuda.Copy(s.scratch.Ptr, s.buf.Ptr, s.buf.Bytes, e.stream); err != nil {
				return err
			}
			read = s.scratch.Ptr
		}
		if err := cuda.CopyIn(s.rows.Ptr, idx, e.stream); err != nil {
			return err
		}
		c := e.cfg
		for _, part := range []struct {
			dst, src cuda.Ptr
			n        int // floats a row
		}{
			{s.conv(0), read, c.Inner * c.ConvKernel},
			{s.ssm(0), read + cuda.Ptr(4*c.Layers*from.convLen), c.Inner * c.State},
		} {
			grid := cuda.Dim3{X: min((part.n+255)/256, 64), Y: s.batch, Z: c.Layers}
			if err := e.launch("copy_rows_f32", grid, cuda.D1(256), 0, part.dst, part.src, s.rows.Ptr,
				int64(part.n), s.batch, from.batch); err != nil {
				return err
			}
		}
		return e.stream.Synchronize()
	})
}

// ConvState returns a copy of layer's conv window, [B, E, K].
func (s *State) ConvState(layer int) ([]float32, error) { return s.get(layer, s.conv, s.convLen) }

// SSMState returns a copy of layer's SSM state, [B, E, N].
func (s *State) SSMState(layer int) ([]float32, error) { return s.get(layer, s.ssm, s.ssmLen) }

// SetConvState overwrites layer's conv window, [B, E, K].
func (s *State) SetConvState(layer int, v []float32) error {
	return s.set(layer, s.conv, s.convLen, v, "conv state")
}

// SetSSMState overwrites layer's SSM state, [B, E, N].
func (s *State) SetSSMState(layer int, v []float32) error {
	return s.set(layer, s.ssm, s.ssmLen, v, "ssm state")
}

func (s *State) get(layer int, at func(int) cuda.Ptr, n int) ([]float32, error) {
	e := s.owner
	if err := engine.CheckLayer(e.cfg, layer); err != nil {
		return nil, err
	}
	if s.buf == nil {
		return nil, engine.Invalid("state is freed")
	}
	done, err := e.bind()
	if err != nil {
		return nil, err
	}
	defer done()
	out := make([]float32, n)
	err = e.onStream(nil, func() error { // after the work queued on callers' streams
		if err := cuda.CopyOut(out, at(layer), e.stream); err != nil {
			return err
		}
		return e.stream.Synchronize()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *State) set(layer int, at func(int) cuda.Ptr, n int, v []float32, what string) error {
	e := s.owner
	if err := engine.CheckLayer(e.cfg, layer); err != nil {
		return err
	}
	if len(v) != n {
		return engine.Invalid("%s of layer %d needs %d values, got %d", what, layer, n, len(v))
	}
	if err := engine.CheckFinite(what, v); err != nil {
		return err
	}
	if s.buf == nil {
		return engine.Invalid("state is freed")
	}
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	return e.onStream(nil, func() error { // after the work queued on callers' streams
		if err := cuda.CopyIn(at(layer), v, e.stream); err != nil {
			return err
		}
		return e.stream.Synchronize()
	})
}

// own returns st as a live *State of e.
func (e *Engine) own(st engine.State) (*State, error) {
	s, ok := st.(*State)
	if !ok || s == nil {
		return nil, engine.Invalid("state was not made by this GPU engine (%T)", st)
	}
	if s.owner != e {
		return nil, engine.Invalid("state belongs to another model")
	}
	if s.buf == nil {
		return nil, engine.Invalid("state is freed")
	}
	return s, nil
}
