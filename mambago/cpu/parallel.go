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
