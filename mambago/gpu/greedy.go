package gpu

import (
	"errors"
	"fmt"

	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
)

// Greedy is greedy decoding for one state on the GPU (engine.Greedy). Each
// Next runs a decode step, eagerly or as a captured step graph, then picks
// each row's most likely token on the device (argmax_rows_f32 in
// kernels/pool.cu) and copies back B ids.
type Greedy struct {
	e    *Engine
	s    *State
	g    *Graph       // the captured step, or nil: eager steps
	pick *cuda.Buffer // int64 [B]: each row's pick
}

// NewGreedy returns a greedy decoder for st that will run about steps
// steps: with a step graph when steps reaches GreedyGraphSteps (> 0).
func (e *Engine) NewGreedy(st engine.State, steps int) (engine.Greedy, error) {
	s, err := e.own(st)
	if err != nil {
		return nil, err
	}
	d := &Greedy{e: e, s: s}
	if n := e.GreedyGraphSteps; n > 0 && steps >= n {
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
func (d *Greedy) Graphed() bool { return d.g != nil }

// Next feeds ids [B] and writes each sequence's most likely next token to
// next [B]. Logits that hold NaN are an error.
func (d *Greedy) Next(ids, next []int64) error {
	e, B := d.e, d.s.batch
	if d.pick == nil {
		return engine.Invalid("greedy decoder is closed")
	}
	if len(ids) != B || len(next) != B {
		return engine.Invalid("greedy decoder for B=%d: got %d ids and room for %d", B, len(ids), len(next))
	}
	if err := engine.CheckIDs("token_ids", ids, e.cfg.Vocab); err != nil {
		return err
	}
	var err error
	if d.g != nil {
		upload := func() error {
			if err := d.g.ownBuffers(); err != nil {
				return err
			}
			return cuda.CopyIn(d.g.in.Ptr, ids, e.stream)
		}
		err = d.g.replay(nil, upload, func() error { return d.pickTo(d.g.logit.Ptr, next) }, true)
	} else {
		err = d.eager(ids, next)
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

// eager runs Next's step launch by launch.
func (d *Greedy) eager(ids, next []int64) error {
	e, B := d.e, d.s.batch
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
		if err := d.pickTo(e.ws.logits.Ptr, next); err != nil {
			return err
		}
		return e.stream.Synchronize()
	})
}

// pickTo queues each row's argmax of logits [B, V] and its copy to next.
func (d *Greedy) pickTo(logits cuda.Ptr, next []int64) error {
	e := d.e
	if err := e.launch("argmax_rows_f32", cuda.D1(d.s.batch), cuda.D1(1024), 0, logits, d.pick.Ptr, e.cfg.Vocab); err != nil {
		return err
	}
	return cuda.CopyOut(next, d.pick.Ptr, e.stream)
}

// Close releases the decoder's graph and buffer.
func (d *Greedy) Close() error {
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
