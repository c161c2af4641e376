package mambago

import (
	"context"
	"errors"
	"fmt"

	"github.com/mambago/mambago/mambago/engine"
)

// PrefillContext is a prefill that stops early once ctx is done, on an
// engine that can (engine.Stopper: the CPU engine, between layers; a CUDA
// prefill runs to its end). spans nil runs every row whole, as Prefill;
// otherwise it is PrefillSpans, or StartSpans with fresh. A stopped prefill
// returns an error that wraps ctx's cause and leaves st as it was (to
// restore it, it keeps a copy of st while it runs), or zero with fresh.
func (m *Model) PrefillContext(ctx context.Context, st engine.State, in engine.Input, spans []Span, fresh bool,
	pool engine.Pool, out []float32) error {
	return m.prefillStoppable(ctx, st, in, spans, fresh, outputs{pool: pool, out: out})
}

// PrefillLayers is PrefillContext with every position's output (All) that
// also writes, to layers, the residual stream after each of the model's L
// layers: [L, B, T, d], layer after layer, zero at the padding, as
// transformers' hidden_states gives them before the last, which is out
// (norm_f's output). An engine that cannot (no engine.LayerPrefiller) is
// an input error.
func (m *Model) PrefillLayers(ctx context.Context, st engine.State, in engine.Input, spans []Span, fresh bool,
	out, layers []float32) error {
	if _, ok := m.Engine.(engine.LayerPrefiller); !ok {
		return engine.Invalid("the %s engine does not hand out each layer's states", m.Device())
	}
	if err := engine.CheckPrefillLayers(m.Config(), in, st.Batch(), out, layers); err != nil {
		return err
	}
	return m.prefillStoppable(ctx, st, in, spans, fresh, outputs{pool: engine.All, out: out, layers: layers})
}

// outputs is what a prefill writes: pool's output to out and, where layers
// is not nil, the residual stream after each layer ([L, B, T, d], with pool
// All; engine.LayerPrefiller).
type outputs struct {
	pool   engine.Pool
	out    []float32
	layers []float32
}

// prefillStoppable is PrefillContext writing o.
func (m *Model) prefillStoppable(ctx context.Context, st engine.State, in engine.Input, spans []Span, fresh bool,
	o outputs) (err error) {
	run := func(ctx context.Context) error {
		if spans != nil {
			return m.prefillSpans(ctx, st, in, spans, o, fresh)
		}
		if fresh {
			st.Reset()
		}
		return m.prefill(ctx, st, in, o)
	}
	if _, ok := m.Engine.(engine.Stopper); !ok || ctx.Done() == nil {
		return run(context.Background())
	}
	var saved engine.State
	if !fresh {
		if saved, err = m.CloneState(st); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, freeState(saved)) }()
	}
	err = run(ctx)
	if err == nil || ctx.Err() == nil {
		return err
	}
	if saved == nil {
		st.Reset()
		return err
	}
	if rerr := copyLayers(st, saved, m.Config().Layers); rerr != nil {
		return errors.Join(err, fmt.Errorf("restoring the state: %w", rerr))
	}
	return err
}

// prefill is the engine's Prefill, or its PrefillContext where it has one
// and ctx can be done, or its PrefillLayers where o asks for the layers.
func (m *Model) prefill(ctx context.Context, st engine.State, in engine.Input, o outputs) error {
	if o.layers != nil {
		lp, ok := m.Engine.(engine.LayerPrefiller)
		if !ok {
			return engine.Invalid("the %s engine does not hand out each layer's states", m.Device())
		}
		return lp.PrefillLayers(ctx, st, in, o.out, o.layers)
	}
	if s, ok := m.Engine.(engine.Stopper); ok && ctx.Done() != nil {
		return s.PrefillContext(ctx, st, in, o.pool, o.out)
	}
	return m.Prefill(st, in, o.pool, o.out)
}
