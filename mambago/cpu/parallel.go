package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// parallelFor calls fn(i) for every i in [0, n), spread over GOMAXPROCS
// goroutines that take indices from a shared counter.
func parallelFor(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	wg.Add(workers)
	for w := 0; w < workers; w++ {
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
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
