package gpu

import (
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
)

// StageTimer accumulates GPU time per stage of the layers, measured with a
// pair of CUDA events around each stage's launches. Set Engine.Timer to use
// it; the events add a little launch overhead, so it is for profiling runs.
// A nil *StageTimer records nothing.
type StageTimer struct {
	pending []mark
	ms      map[string]float64
}

type mark struct {
	stage      string
	start, end *cuda.Event
}

// time runs fn between two events recorded on s, under stage.
func (t *StageTimer) time(stage string, s *cuda.Stream, fn func() error) error {
	if t == nil {
		return fn()
	}
	m := mark{stage: stage}
	var err error
	if m.start, err = cuda.NewEvent(); err != nil {
		return err
	}
	if m.end, err = cuda.NewEvent(); err != nil {
		m.start.Destroy()
		return err
	}
	t.pending = append(t.pending, m)
	if err := m.start.Record(s); err != nil {
		return err
	}
	if err := fn(); err != nil {
		return err
	}
	return m.end.Record(s)
}

// flush waits for the recorded events and adds up their times.
func (t *StageTimer) flush() error {
	if t.ms == nil {
		t.ms = map[string]float64{}
	}
	for _, m := range t.pending {
		if err := m.end.Synchronize(); err != nil {
			return err
		}
		ms, err := cuda.Elapsed(m.start, m.end)
		if err != nil {
			return err
		}
		t.ms[m.stage] += float64(ms)
		m.start.Destroy()
		m.end.Destroy()
	}
	t.pending = t.pending[:0]
	return nil
}

// Report waits for the engine's pending work and lists the stages by time
// spent, with shares of the total. The engine e must be the one t timed.
func (t *StageTimer) Report(e *Engine) (string, error) {
	done, err := e.bind()
	if err != nil {
		return "", err
	}
	defer done()
	if err := t.flush(); err != nil {
		return "", err
	}
	return engine.StageTable(t.ms), nil
}
