package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// parallelFor calls fn(i) for every i in [0, n), spread over GOMAXPROCS
// goroutines, each taking the indices of a run of its own first
// (task.take): the caller's and the team's workers where the team is free;
// a fork-join within another, or beside another goroutine's, starts
// goroutines of its own.
func parallelFor(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	if useTeam && crew.acquire(workers) {
		crew.run(n, workers, fn)
		crew.busy.Store(false)
		return
	}
	j := newTask(n, workers, fn)
	var wg sync.WaitGroup
	wg.Add(workers)
	for w := 0; w < workers; w++ {
		go func() {
			defer wg.Done()
			j.take(w)
		}()
	}
	wg.Wait()
}

// A fork-join that starts its goroutines afresh waits for the runtime to
// wake a second OS thread, which took about 10 µs on the 2-core build
// machine: a task of 14 µs a core took 38 µs on two (BenchmarkForkJoin),
// and a decode step holds about fifty fork-joins of a few hundred µs
// each. The team's workers stay awake, spinning, for teamSpin after their
// last task, so that the fork-joins of a step find them running; then
// they sleep until the next.

// teamSpin is how long a worker spins for its next task before it sleeps.
const teamSpin = 2 * time.Millisecond

// useTeam runs fork-joins on the team; tests turn it off to compare.
var useTeam = true

// team is the workers parallelFor shares a fork-join with.
type team struct {
	busy    atomic.Bool          // a fork-join holds the team
	job     atomic.Pointer[task] // the newest fork-join's
	gen     atomic.Uint64        // counts the fork-joins handed out
	asleep  atomic.Int32         // workers waiting on wake
	mu      sync.Mutex
	wake    *sync.Cond
	started int // workers running (under busy)
}

// task is one fork-join: fn over [0, n), by the caller and the workers
// numbered under workers-1. [0, n) is cut into a run of consecutive indices
// a taker (the caller's first, then worker id's as id+1), so that each
// goroutine walks neighbouring data: a core's channel blocks then lie side
// by side in every row, where one shared counter handed the cores
// neighbouring blocks in turn, each 64-byte block of a row on the other
// core from the one beside it. A taker done with its own run takes from
// the front of the others', so a late core holds up a fork-join no more
// than with one counter. On the 2-core build machine the scan stage of a
// 130m prefill went 1.15x faster and the conv's 1.07x; with each run's
// owner swapped every other fork-join, so that a stage's blocks sat on the
// other core from the stage before's, the scan kept most of that
// (results/2026-12-06-cpu-runs.md).
type task struct {
	workers int
	fn      func(int)
	runs    []run        // one a taker
	active  atomic.Int32 // workers inside the task
}

// run is a taker's share of a task: the indices from next up to end, taken
// from the front by its owner and by takers done with their own.
type run struct {
	next atomic.Int64
	end  int64
	_    [48]byte // 64 bytes a run: each taker writes its own next
}

// newTask cuts [0, n) into workers runs of n/workers indices or one more,
// or leaves it one run that every taker shares where there are no more
// indices than takers: with an index or none a taker, runs keep nothing
// together, and on 16 cores their lines cost a one-sequence decode step
// (a fork-join for each GEMV, a block a worker) about 3%.
func newTask(n, workers int, fn func(int)) *task {
	parts := workers
	if n <= workers {
		parts = 1
	}
	j := &task{workers: workers, fn: fn, runs: make([]run, parts)}
	for k := range j.runs {
		j.runs[k].next.Store(int64(k * n / parts))
		j.runs[k].end = int64((k + 1) * n / parts)
	}
	return j
}

// crew is the process's team.
var crew = func() *team {
	t := &team{}
	t.wake = sync.NewCond(&t.mu)
	return t
}()

// acquire takes the team for a fork-join of workers goroutines (the
// caller's among them), starting workers it lacks; false if another
// fork-join holds it.
func (t *team) acquire(workers int) bool {
	if !t.busy.CompareAndSwap(false, true) {
		return false
	}
	for ; t.started < workers-1; t.started++ {
		go t.work(t.started, t.gen.Load())
	}
	return true
}

// run hands fn over [0, n) to the team's first workers-1 workers, takes
// indices beside them, and returns once every index is done.
func (t *team) run(n, workers int, fn func(int)) {
	j := newTask(n, workers, fn)
	t.job.Store(j)
	t.gen.Add(1)
	if t.asleep.Load() > 0 {
		t.mu.Lock()
		t.wake.Broadcast()
		t.mu.Unlock()
	}
	j.take(0)
	// Every index is taken; the workers that took one have said so in
	// active before taking it.
	for spins := 0; j.active.Load() > 0; spins++ {
		if spins%64 == 63 {
			runtime.Gosched()
		}
	}
	t.job.Store(nil) // fn's closure may hold a model's weights: let them go
}

// take runs fn on the indices of taker k's run, then on those left in the
// runs after it, each from its front, until none are left. It reads a
// run's next before it adds to it, so that a finished run costs the other
// takers a shared read of its line, not an add that takes the line from
// its owner.
func (j *task) take(k int) {
	for r := range j.runs {
		run := &j.runs[(k+r)%len(j.runs)]
		for run.next.Load() < run.end {
			i := run.next.Add(1) - 1
			if i >= run.end {
				break
			}
			j.fn(int(i))
		}
	}
}

// work is worker id's loop: it joins each new fork-join (past seen) that
// counts it among its workers, and between them waits in await. A worker
// past the CPUs' count less one (more threads than CPUs, as
// set_num_threads allows), or one the last fork-join left out (a smaller
// GOMAXPROCS), sleeps at once, so that no spinning worker takes a CPU from
// one with work.
func (t *team) work(id int, seen uint64) {
	spins := id < runtime.NumCPU()-1
	wanted := true
	for {
		t.await(seen, spins && wanted)
		seen = t.gen.Load()
		j := t.job.Load() // nil where the fork-join has ended
		wanted = j == nil || id < j.workers-1
		if j != nil && wanted {
			j.active.Add(1)
			j.take(id + 1)
			j.active.Add(-1)
		}
	}
}

// await returns once a fork-join past seen is handed out, spinning for up
// to teamSpin first if spin.
func (t *team) await(seen uint64, spin bool) {
	idle := time.Now()
	for spins := 0; spin && t.gen.Load() == seen; spins++ {
		if spins%64 == 63 {
			runtime.Gosched()
			if time.Since(idle) >= teamSpin {
				break
			}
		}
	}
	t.mu.Lock()
	t.asleep.Add(1)
	for t.gen.Load() == seen {
		t.wake.Wait()
	}
	t.asleep.Add(-1)
	t.mu.Unlock()
}

// parallelRows calls fn(lo, hi) over [0, n) cut into blocks of at most grain.
func parallelRows(n, grain int, fn func(lo, hi int)) {
	blocks := (n + grain - 1) / grain
	parallelFor(blocks, func(b int) {
		fn(b*grain, min(n, (b+1)*grain))
	})
}

// parallelSplit calls fn(lo, hi) over [0, n) cut into one block a worker
// (GOMAXPROCS of them), each at least minBlock long.
func parallelSplit(n, minBlock int, fn func(lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	parallelRows(n, max(minBlock, (n+workers-1)/workers), fn)
}

// offCaller runs fn on a goroutine of its own and returns what it returns,
// a panic in fn going on up in the caller. A goroutine locked to its OS
// thread, as every call from C is (Python's calls into the bindings), hands
// its P over each time it waits, and the fork-joins above wait about 150
// times a decode step: there, a 130m decode step took 20-23 ms against
// 13-15 ms from an ordinary goroutine (BenchmarkLockedCaller). The engine's
// entry points run their work here, which waits once a call.
func offCaller(fn func() error) error {
	type result struct {
		err      error
		panicked bool
		value    any
	}
	done := make(chan result, 1)
	go func() {
		r := result{panicked: true}
		defer func() {
			if r.panicked {
				r.value = recover()
			}
			done <- r
		}()
		r.err = fn()
		r.panicked = false
	}()
	r := <-done
	if r.panicked {
		panic(r.value)
	}
	return r.err
}
