package gpu

import (
	"errors"
	"fmt"

	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
)

// Decoder steps one state on the GPU (engine.Decoder), eagerly or through a
// captured step graph. Its greedy steps pick each row's most likely token
// on the device (argmax_rows_f32 in kernels/pool.cu) and copy back B ids.
type Decoder struct {
	e    *Engine
	s    *State
	g    *Graph       // the captured step, or nil: eager steps
	pick *cuda.Buffer // int64 [B]: each row's pick
}

// NewDecoder returns a decoder for st that will run about steps steps: with
// a step graph when steps reaches DecoderGraphSteps (> 0).
func (e *Engine) NewDecoder(st engine.State, steps int) (engine.Decoder, error) {
	s, err := e.own(st)
	if err != nil {
		return nil, err
	}
	d := &Decoder{e: e, s: s}
	if n := e.DecoderGraphSteps; n > 0 && steps >= n {
		if d.g, err = e.CaptureStep(st); err != nil {
			return nil, err
		}
	}
	done, err := e.bind()
	if err != nil {
		return nil, errors.Join(err, d.Close())
	}
	d.pick, err = cuda.Alloc(8 * s.batch)
	done() // before Close, which binds again
	if err != nil {
		return nil, errors.Join(err, d.Close())
	}
	return d, nil
}

// Graphed says whether d steps by a captured graph.
func (d *Decoder) Graphed() bool { return d.g != nil }

// Step feeds ids [B] and writes the next-token logits [B, V]: Graph.Step
// or Engine.Step, bit for bit the same.
func (d *Decoder) Step(ids []int64, logits []float32) error {
	switch {
	case d.pick == nil:
		return engine.Invalid("decoder is closed")
	case d.g != nil:
		return d.g.Step(ids, logits)
	}
	return d.e.Step(d.s, ids, logits)
}

// Greedy feeds ids [B] and writes each sequence's most likely next token to
// next [B]. Logits that hold NaN are an error.
func (d *Decoder) Greedy(ids, next []int64) error {
	e, B := d.e, d.s.batch
	if d.pick == nil {
		return engine.Invalid("decoder is closed")
	}
	if len(ids) != B || len(next) != B {
		return engine.Invalid("decoder for B=%d: got %d ids and room for %d tokens", B, len(ids), len(next))
	}
	if err := engine.CheckIDs("token_ids", ids, e.cfg.Vocab); err != nil {
		return err
	}
	pick := func(logits cuda.Ptr) error {
		if err := e.launch("argmax_rows_f32", cuda.D1(B), cuda.D1(1024), 0, logits, d.pick.Ptr, e.cfg.Vocab); err != nil {
			return err
		}
		return cuda.CopyOut(next, d.pick.Ptr, e.stream)
	}
	var err error
	if d.g != nil {
		err = d.g.stepThen(ids, pick)
	} else {
		err = e.stepThen(d.s, ids, pick)
	}
	if err != nil {
		return err
	}
	for b, id := range next {
		if id < 0 {
			return fmt.Errorf("gpu: greedy step: the logits of sequence %d hold NaN", b)
		}
	}
	return nil
}

// Close releases the decoder's graph and buffer (not its state).
func (d *Decoder) Close() error {
	var err error
	if d.g != nil {
		err = d.g.Destroy()
		d.g = nil
	}
	if d.pick != nil {
		done, berr := d.e.bind()
		if berr != nil {
			return errors.Join(err, berr)
		}
		defer done()
		d.pick.Free()
		d.pick = nil
	}
	return err
}
