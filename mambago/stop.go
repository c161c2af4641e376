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
	pool engine.Pool, out []float32) (err error) {
	run := func(ctx context.Context) error {
		if spans != nil {
			return m.prefillSpans(ctx, st, in, spans, pool, out, fresh)
		}
		if fresh {
			st.Reset()
		}
		return m.prefill(ctx, st, in, pool, out)
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
// and ctx can be done.
func (m *Model) prefill(ctx context.Context, st engine.State, in engine.Input, pool engine.Pool, out []float32) error {
	if s, ok := m.Engine.(engine.Stopper); ok && ctx.Done() != nil {
		return s.PrefillContext(ctx, st, in, pool, out)
	}
	return m.Prefill(st, in, pool, out)
}
