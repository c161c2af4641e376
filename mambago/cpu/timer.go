package cpu

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
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
	var total time.Duration
	names := make([]string, 0, len(s.d))
	for n, d := range s.d {
		names = append(names, n)
		total += d
	}
	sort.Slice(names, func(i, j int) bool { return s.d[names[i]] > s.d[names[j]] })
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%-18s %9.1f ms %5.1f%%\n", n, s.d[n].Seconds()*1e3, 100*s.d[n].Seconds()/total.Seconds())
	}
	return b.String()
}
