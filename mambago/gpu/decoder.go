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
	defer done()
	if d.pick, err = cuda.Alloc(8 * s.batch); err != nil {
		done()
		return nil, errors.Join(err, d.Close())
	}
	return d, nil
}

// Graphed says whether d steps by a captured graph.
func (d *Decoder) Graphed() bool { return d.g != nil }

// Step feeds ids [B] and writes the next-token logits [B, V], as the
// engine's Step does, bit for bit.
func (d *Decoder) Step(ids []int64, logits []float32) error {
	if err := d.check(ids, len(logits), d.e.cfg.Vocab); err != nil {
		return err
	}
	return d.step(ids, func(dev cuda.Ptr) error { return cuda.CopyOut(logits, dev, d.e.stream) })
}

// Greedy feeds ids [B] and writes each sequence's most likely next token to
// next [B]. Logits that hold NaN are an error.
func (d *Decoder) Greedy(ids, next []int64) error {
	e := d.e
	if err := d.check(ids, len(next), 1); err != nil {
		return err
	}
	err := d.step(ids, func(logits cuda.Ptr) error {
		if err := e.launch("argmax_rows_f32", cuda.D1(d.s.batch), cuda.D1(1024), 0, logits, d.pick.Ptr, e.cfg.Vocab); err != nil {
			return err
		}
		return cuda.CopyOut(next, d.pick.Ptr, e.stream)
	})
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

// check validates a step's ids and the length of its output, per sequence.
func (d *Decoder) check(ids []int64, outLen, perSeq int) error {
	B := d.s.batch
	if d.pick == nil {
		return engine.Invalid("decoder is closed")
	}
	if len(ids) != B || outLen != B*perSeq {
		return engine.Invalid("decoder for B=%d: got %d ids and an output of %d (want %d)", B, len(ids), outLen, B*perSeq)
	}
	return engine.CheckIDs("token_ids", ids, d.e.cfg.Vocab)
}

// step runs one step on ids and then out on the device logits it left,
// and waits for both.
func (d *Decoder) step(ids []int64, out func(logits cuda.Ptr) error) error {
	e, B := d.e, d.s.batch
	if d.g != nil {
		upload := func() error {
			if err := d.g.ownBuffers(); err != nil {
				return err
			}
			return cuda.CopyIn(d.g.in.Ptr, ids, e.stream)
		}
		return d.g.replay(nil, upload, func() error { return out(d.g.logit.Ptr) }, true)
	}
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	if err := e.ensureOut(B * e.cfg.Hidden); err != nil {
		return err
	}
	if err := e.ensureLogits(B * e.cfg.Vocab); err != nil {
		return err
	}
	return e.onStream(nil, func() error {
		in := engine.Input{B: B, T: 1, IDs: ids}
		if err := e.stepDevice(d.s, source{in: in}, e.ws.out.Ptr, e.ws.logits.Ptr); err != nil {
			return err
		}
		if err := out(e.ws.logits.Ptr); err != nil {
			return err
		}
		return e.stream.Synchronize()
	})
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
