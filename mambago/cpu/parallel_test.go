package cpu

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestOffCaller checks that offCaller hands back fn's error, and that a
// panic in fn goes on up in the caller with its value (the bindings turn a
// panic into a Python exception only on the caller's goroutine).
func TestOffCaller(t *testing.T) {
	want := errors.New("fn's error")
	if err := offCaller(func() error { return want }); err != want {
		t.Fatalf("offCaller returned %v, want %v", err, want)
	}
	if err := offCaller(func() error { return nil }); err != nil {
		t.Fatalf("offCaller returned %v, want nil", err)
	}
	defer func() {
		if r := recover(); r != "boom" {
			t.Fatalf("recovered %v, want the panic's value \"boom\"", r)
		}
	}()
	_ = offCaller(func() error { panic("boom") })
	t.Fatal("offCaller returned after fn panicked")
}

// TestParallelForEveryIndexOnce runs parallelFor on the team and without
// it, over counts from 0 to past the workers, at several GOMAXPROCS (the
// team's size changing between calls), nested in another fork-join, and
// from several goroutines at once: every index is called exactly once,
// and each call has returned when parallelFor does.
func TestParallelForEveryIndexOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	defer func() { useTeam = true }()
	check := func(t *testing.T, n int) {
		calls := make([]atomic.Int32, n)
		parallelFor(n, func(i int) {
			if i%7 == 0 {
				time.Sleep(50 * time.Microsecond) // some tasks long, so that the workers share them
			}
			calls[i].Add(1)
		})
		for i := range calls {
			if c := calls[i].Load(); c != 1 {
				t.Fatalf("n=%d: index %d called %d times", n, i, c)
			}
		}
	}
	for _, team := range []bool{true, false} {
		useTeam = team
		for _, procs := range []int{1, 2, 5, 3} {
			runtime.GOMAXPROCS(procs)
			for _, n := range []int{0, 1, 2, 3, 8, 61} {
				check(t, n)
			}
			parallelFor(4, func(int) { check(t, 9) }) // nested: the inner ones start goroutines
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for _, n := range []int{5, 33} {
						check(t, n)
					}
				}()
			}
			wg.Wait()
		}
	}
}

// TestTaskRuns checks newTask's runs and take's order: the runs cut [0, n)
// into consecutive pieces whose lengths differ by at most one, a piece a
// taker, or one shared run where n is no more than the takers; a taker walks
// its own run first, in order, and a taker alone takes every index once,
// the others' runs from their fronts.
func TestTaskRuns(t *testing.T) {
	for _, c := range []struct{ n, workers int }{{1, 1}, {5, 2}, {96, 2}, {96, 16}, {61, 5}, {7, 7}, {2, 2}, {16, 16}, {17, 16}} {
		parts := c.workers
		if c.n <= c.workers {
			parts = 1 // one shared run
		}
		j := newTask(c.n, c.workers, nil)
		if len(j.runs) != parts {
			t.Fatalf("n=%d workers=%d: %d runs, want %d", c.n, c.workers, len(j.runs), parts)
		}
		at := int64(0)
		for k := range j.runs {
			r := &j.runs[k]
			if r.next.Load() != at || r.end-at < int64(c.n/parts) || r.end-at > int64(c.n/parts+1) {
				t.Fatalf("n=%d workers=%d: run %d is [%d, %d), want it from %d and %d or %d long",
					c.n, c.workers, k, r.next.Load(), r.end, at, c.n/parts, c.n/parts+1)
			}
			at = r.end
		}
		if at != int64(c.n) {
			t.Fatalf("n=%d workers=%d: the runs end at %d", c.n, c.workers, at)
		}
		for k := range c.workers {
			var order []int
			j := newTask(c.n, c.workers, func(i int) { order = append(order, i) })
			j.take(k)
			want := make([]int, 0, c.n)
			for r := range parts {
				run := (k + r) % parts
				for i := run * c.n / parts; i < (run+1)*c.n/parts; i++ {
					want = append(want, i)
				}
			}
			if !slices.Equal(order, want) {
				t.Fatalf("n=%d workers=%d: taker %d alone took %v, want %v", c.n, c.workers, k, order, want)
			}
		}
	}
}

// BenchmarkForkJoin times parallelFor over two tasks of no work, about 1.4
// µs and about 14 µs of work, on the team and with goroutines started
// afresh: the fork-join's own cost, and whether the two tasks overlap.
func BenchmarkForkJoin(b *testing.B) {
	defer func() { useTeam = true }()
	var sums [2 * 16]float32 // a cache line a task
	for _, team := range []bool{false, true} {
		for _, work := range []int{0, 10_000, 100_000} {
			b.Run(fmt.Sprintf("team=%v/work=%d", team, work), func(b *testing.B) {
				useTeam = team
				for b.Loop() {
					parallelFor(2, func(i int) {
						s := float32(1)
						for range work {
							s = s*0.999 + 0.001
						}
						sums[i*16] += s
					})
				}
			})
		}
	}
}
