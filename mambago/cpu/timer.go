package cpu

import (
	"sync"
	"time"

	"github.com/mambago/mambago/mambago/engine"
)

// StageTimer accumulates wall time per stage across calls. A nil *StageTimer
// records nothing, so the engine calls it unconditionally.
type StageTimer struct {
	mu sync.Mutex
	d  map[string]time.Duration
}

func (s *StageTimer) start() time.Time {
	if s == nil {
		return time.Time{}
	}
	return time.Now()
}

// lap adds the time since t to stage and returns now.
func (s *StageTimer) lap(t time.Time, stage string) time.Time {
	if s == nil {
		return t
	}
	now := time.Now()
	s.mu.Lock()
	if s.d == nil {
		s.d = map[string]time.Duration{}
	}
	s.d[stage] += now.Sub(t)
	s.mu.Unlock()
	return now
}

// String lists the stages by time spent, with shares of the total.
func (s *StageTimer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := make(map[string]float64, len(s.d))
	for n, d := range s.d {
		ms[n] = d.Seconds() * 1e3
	}
	return engine.StageTable(ms)
}
