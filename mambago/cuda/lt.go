package cuda

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"
)

// GemmAlgo is how BLAS.Gemm runs a GEMM with bf16 or f16 inputs.
type GemmAlgo int

const (
	// GemmEx runs cublasGemmEx, with cuBLAS's own choice of kernel.
	GemmEx GemmAlgo = iota
	// GemmLt runs cuBLASLt with the first algorithm of its heuristic, a
	// plan (descriptors and algorithm) cached per shape.
	GemmLt
	// GemmLtTuned runs cuBLASLt with the fastest of the heuristic's first
	// ltCandidates algorithms, each timed (GPU time, TimeGraph) on the
	// GEMM's own inputs the first time the process meets its shape; the choice is
	// shared by every handle of the process, so two engines give the same
	// bits. Where the first meeting is inside a stream capture, which
	// cannot time, the heuristic's first algorithm is taken (and kept).
	GemmLtTuned
)

// gemmAlgoNames are the algorithms' names, as String gives them and
// ParseGemmAlgo reads them.
var gemmAlgoNames = [...]string{GemmEx: "cublas", GemmLt: "cublaslt", GemmLtTuned: "cublaslt-tuned"}

// String names the algorithm: "cublas", "cublaslt" or "cublaslt-tuned".
func (a GemmAlgo) String() string {
	if a >= 0 && int(a) < len(gemmAlgoNames) {
		return gemmAlgoNames[a]
	}
	return fmt.Sprintf("GemmAlgo(%d)", int(a))
}

// ParseGemmAlgo reads an algorithm's name (String's).
func ParseGemmAlgo(name string) (GemmAlgo, bool) {
	for a, n := range gemmAlgoNames {
		if n == name {
			return GemmAlgo(a), true
		}
	}
	return GemmEx, false
}

const (
	// ltWorkspace is each handle's cuBLASLt workspace, as cuBLAS advises
	// for Hopper; algorithms that need more are never picked.
	ltWorkspace = 32 << 20
	// ltTimedRuns is the runs of each of the tuning's timings (GemmLtTuned,
	// ltCandidates below) and ltRounds the timings of each (fastest).
	// One round: on the H200, 12 repeats of each 130m and 370m prefill
	// GEMM's tuning picked the same candidate every time with one round as
	// with three, and three took up to 2.4 times as long (BenchmarkLtTuning,
	// bench/results/2026-12-01-tuning-embednorm.md).
	ltTimedRuns = 5
	ltRounds    = 1
	// ltPlans bounds the plans a handle caches (one per shape met; a
	// prefill meets three or four a chunk length): the oldest goes first.
	ltPlans = 256
)

// ltCandidates bounds the algorithms GemmLtTuned times (the heuristic's
// first, best first): 8 unless SetGemmCandidates changed it.
var ltCandidates atomic.Int64

func init() { ltCandidates.Store(8) }

// SetGemmCandidates makes the tuning of GEMM shapes met from now on time up
// to n of cuBLASLt's candidates (the default is 8; n is clamped to 1-64),
// and PinGemmCandidate index into as many; it returns the bound before. A
// measuring tool, as PinGemmCandidate is: plans made before keep their
// choice.
func SetGemmCandidates(n int) int {
	return int(ltCandidates.Swap(int64(min(max(n, 1), 64))))
}

var (
	cublasLtOnce sync.Once
	cublasLtErr  error
)

// loadCuBLASLt loads libcublasLt.so.13, then .so.12.
func loadCuBLASLt() error {
	cublasLtOnce.Do(func() {
		cublasLtErr = loadLibrary("cuBLASLt", []string{"libcublasLt.so.13", "libcublasLt.so.12"},
			func(p *C.char) *C.char { return C.mg_load_cublaslt(p) })
	})
	return cublasLtErr
}

// gemmKey is a GEMM's device, shape and types, as Gemm is called.
type gemmKey struct {
	dev               int // the CUdevice of the handle's context
	M, N, K, lda, ldc int
	ab, c             DType
	accumulate        bool // beta != 0
	tuned             bool
}

// ltPlan is a shape's descriptors (C memory) and the algorithm that runs
// it, made while the pins were at generation pins.
type ltPlan struct {
	p    *C.mg_lt_plan
	algo C.mg_lt_algo
	pins int64
}

// ltChoice is the algorithm chosen for a shape, process-wide (GemmLtTuned),
// and its place among the heuristic's candidates.
var ltChoice = struct {
	sync.Mutex
	m     map[gemmKey]C.mg_lt_algo
	index map[gemmKey]int
}{m: map[gemmKey]C.mg_lt_algo{}, index: map[gemmKey]int{}}

// ltPins are the candidates PinGemmCandidate pinned, by shape (M, N, K),
// process-wide; gen counts their changes, so that handles remake the plans
// they made before one. gen is written under the lock and read without it,
// so that a GEMM whose plan is cached takes no lock.
var ltPins = struct {
	sync.Mutex
	m   map[[3]int]int
	gen atomic.Int64
}{m: map[[3]int]int{}}

// ErrNoCandidate is the error of a GEMM whose shape is pinned to a
// candidate cuBLASLt's heuristic does not offer it.
var ErrNoCandidate = errors.New("cuda: no such cuBLASLt candidate")

// PinGemmCandidate makes every tuned cuBLASLt GEMM (GemmLtTuned) of shape
// M x N x K, as BLAS.Gemm is called, run candidate i of the heuristic's
// first ltCandidates (0 is its first) in place of the fastest one timed;
// a negative i takes the pin away. A GEMM pinned to a candidate the
// heuristic does not offer fails with ErrNoCandidate. The tuning times each
// candidate alone, back to back, with its operands in L2; a pin lets each be
// timed where the GEMM really runs, inside a prefill graph (gpu's
// BenchmarkGemmCandidates). Graphs captured before keep their kernels.
func PinGemmCandidate(M, N, K, i int) {
	ltPins.Lock()
	defer ltPins.Unlock()
	if i < 0 {
		delete(ltPins.m, [3]int{M, N, K})
	} else {
		ltPins.m[[3]int{M, N, K}] = i
	}
	ltPins.gen.Add(1)
}

// TunedGemmCandidate reports which of the heuristic's candidates the tuning
// chose for shape M x N x K (the first key met with that shape), if it has.
func TunedGemmCandidate(M, N, K int) (int, bool) {
	ltChoice.Lock()
	defer ltChoice.Unlock()
	for k, i := range ltChoice.index {
		if k.M == M && k.N == N && k.K == K {
			return i, true
		}
	}
	return 0, false
}

// pinOf returns k's pinned candidate (or -1) and the pins' generation.
func pinOf(k gemmKey) (pin int, gen int64) {
	ltPins.Lock()
	defer ltPins.Unlock()
	pin, ok := ltPins.m[[3]int{k.M, k.N, k.K}]
	if !ok || !k.tuned {
		pin = -1
	}
	return pin, ltPins.gen.Load()
}

// lt is a BLAS handle's cuBLASLt side: its handle, workspace and plans,
// and the stream it times candidates on.
type lt struct {
	dev   int // the CUdevice current when it was created
	h     unsafe.Pointer
	ws    *Buffer
	tune  *Stream // created on the first tuning
	plans map[gemmKey]*ltPlan
	order []gemmKey // oldest first
}

// newLt creates the cuBLASLt side of a handle.
func newLt() (*lt, error) {
	if err := loadCuBLASLt(); err != nil {
		return nil, err
	}
	l := &lt{plans: map[gemmKey]*ltPlan{}}
	var dev C.int
	if err := check("cuCtxGetDevice", C.mg_cuCtxGetDevice(&dev)); err != nil {
		return nil, err
	}
	l.dev = int(dev)
	if err := checkBLAS("cublasLtCreate", C.mg_ltCreate(&l.h)); err != nil {
		return nil, err
	}
	ws, err := Alloc(ltWorkspace)
	if err != nil {
		l.destroy()
		return nil, err
	}
	l.ws = ws
	return l, nil
}

// destroy releases the plans, the workspace and the handle.
func (l *lt) destroy() error {
	if l == nil {
		return nil
	}
	for _, p := range l.plans {
		freePlan(p.p)
	}
	l.plans, l.order = nil, nil
	err := l.ws.Free()
	if e := l.tune.Destroy(); err == nil {
		err = e
	}
	if l.h != nil {
		if e := checkBLAS("cublasLtDestroy", C.mg_ltDestroy(l.h)); err == nil {
			err = e
		}
		l.h = nil
	}
	return err
}

// descriptors creates k's descriptors: for row-major C = A·Wᵀ, in
// cuBLAS's column-major terms Cᵀ [N, M] = op(W)·Aᵀ with op = transpose.
func (l *lt) descriptors(k gemmKey) (*C.mg_lt_plan, error) {
	const opN, opT = 0, 1
	const compute32F = 68 // CUBLAS_COMPUTE_32F
	p := (*C.mg_lt_plan)(C.calloc(1, C.size_t(unsafe.Sizeof(C.mg_lt_plan{}))))
	if p == nil {
		return nil, fmt.Errorf("cuda: out of host memory for a cuBLASLt plan")
	}
	if err := checkBLAS("cublasLtMatmulDescCreate", C.mg_ltPlanCreate(p, opT, opN, C.int(k.N), C.int(k.M), C.int(k.K),
		C.int(k.ab.dataType()), C.int(k.K), C.int(k.ab.dataType()), C.int(k.lda), C.int(k.c.dataType()),
		C.int(k.ldc), compute32F)); err != nil {
		C.free(unsafe.Pointer(p))
		return nil, err
	}
	return p, nil
}

// freePlan releases descriptors made by descriptors.
func freePlan(p *C.mg_lt_plan) {
	C.mg_ltPlanDestroy(p)
	C.free(unsafe.Pointer(p))
}

// heuristics returns up to want of cuBLASLt's algorithms for p, best
// first, each within the workspace.
func (l *lt) heuristics(p *C.mg_lt_plan, want int) ([]C.mg_lt_algo, error) {
	res := make([]C.mg_lt_heuristic, want)
	var got C.int
	if err := checkBLAS("cublasLtMatmulAlgoGetHeuristic", C.mg_ltHeuristics(l.h, p, ltWorkspace, C.int(want),
		&res[0], &got)); err != nil {
		return nil, err
	}
	var algos []C.mg_lt_algo
	for _, r := range res[:got] {
		if r.state == 0 && r.workspace <= ltWorkspace {
			algos = append(algos, r.algo)
		}
	}
	if len(algos) == 0 {
		return nil, fmt.Errorf("cuda: cuBLASLt has no algorithm for this GEMM")
	}
	return algos, nil
}

// matmul queues C = A·Wᵀ + beta·C on stream with algo.
func (l *lt) matmul(p *C.mg_lt_plan, algo *C.mg_lt_algo, A, W, Cp Ptr, beta float32, s unsafe.Pointer) error {
	alpha, bt := C.float(1), C.float(beta)
	return checkBLAS("cublasLtMatmul", C.mg_ltMatmul(l.h, p, &alpha, C.mg_devptr(W), C.mg_devptr(A), &bt,
		C.mg_devptr(Cp), algo, C.mg_devptr(l.ws.Ptr), ltWorkspace, s))
}

// plan returns k's plan, creating it (and, for a tuned key met outside a
// capture, timing the candidates on A and W into scratch of C's size) the
// first time.
func (l *lt) plan(k gemmKey, A, W Ptr, s *Stream) (*ltPlan, error) {
	k.dev = l.dev // choices are per device: an algorithm is one GPU's
	if p, ok := l.plans[k]; ok {
		if p.pins == ltPins.gen.Load() {
			return p, nil
		}
		l.drop(k) // made before a pin changed
	}
	pin, gen := pinOf(k)
	desc, err := l.descriptors(k)
	if err != nil {
		return nil, err
	}
	p := &ltPlan{p: desc, pins: gen}
	ok := false
	defer func() {
		if !ok {
			freePlan(desc)
		}
	}()
	ltChoice.Lock()
	algo, chosen := ltChoice.m[k]
	ltChoice.Unlock()
	switch {
	case pin >= 0:
		algos, err := l.heuristics(desc, int(ltCandidates.Load()))
		if err != nil {
			return nil, err
		}
		if pin >= len(algos) {
			return nil, fmt.Errorf("%w: %d of %d", ErrNoCandidate, pin, len(algos))
		}
		p.algo = algos[pin]
	case chosen:
		p.algo = algo
	default:
		want := 1
		if k.tuned {
			want = int(ltCandidates.Load())
		}
		algos, err := l.heuristics(desc, want)
		if err != nil {
			return nil, err
		}
		best := 0
		capturing, err := s.Capturing()
		if err != nil {
			return nil, err
		}
		if len(algos) > 1 && !capturing {
			if best, _, err = l.fastest(desc, algos, k, A, W, s, ltRounds); err != nil {
				return nil, err
			}
		}
		p.algo = algos[best]
		if k.tuned {
			ltChoice.Lock()
			ltChoice.m[k], ltChoice.index[k] = p.algo, best
			ltChoice.Unlock()
		}
	}
	if len(l.order) >= ltPlans {
		l.drop(l.order[0])
	}
	l.plans[k], l.order = p, append(l.order, k)
	ok = true
	return p, nil
}

// drop frees k's cached plan.
func (l *lt) drop(k gemmKey) {
	freePlan(l.plans[k].p)
	delete(l.plans, k)
	l.order = slices.DeleteFunc(l.order, func(o gemmKey) bool { return o == k })
}

// fastest returns the index of the fastest of algos for k, run on A and W
// into scratch the size of k's C: each timed as a graph of ltTimedRuns runs
// (GPU time alone: launched one by one, a small GEMM's time is its host
// overhead's), in rounds rounds, each round in another order, and ranked
// by the median of its rounds (one timing each let noise pick among
// candidates a few percent apart, a different one in each process). The
// graphs run on l's own tuning stream, after the work queued on s (which
// produced A), since s may be one that cannot capture (a caller's legacy
// default stream); it returns when they are done. It also returns every
// candidate's median, in milliseconds a run. Without the device memory for
// the scratch it picks the first and returns no times.
func (l *lt) fastest(p *C.mg_lt_plan, algos []C.mg_lt_algo, k gemmKey, A, W Ptr, s *Stream, rounds int) (int, []float32, error) {
	if l.tune == nil {
		t, err := NewStream()
		if err != nil {
			return 0, nil, err
		}
		l.tune = t
	}
	ready, err := NewEvent()
	if err != nil {
		return 0, nil, err
	}
	defer ready.Destroy()
	if err := ready.Record(s); err != nil {
		return 0, nil, err
	}
	if err := l.tune.Wait(ready); err != nil {
		return 0, nil, err
	}
	scratch, err := Alloc(k.M * k.ldc * k.c.Size())
	if err != nil { // no room to time them: the heuristic's first
		return 0, nil, nil
	}
	defer scratch.Free()
	beta := float32(0)
	if k.accumulate {
		beta = 1
	}
	times := make([][]float32, len(algos))
	for r := range rounds {
		for j := range algos {
			i := (j + r) % len(algos) // each round starts one candidate later
			ms, err := TimeGraph(l.tune, ltTimedRuns, func() error {
				return l.matmul(p, &algos[i], A, W, scratch.Ptr, beta, l.tune.handle())
			})
			if err != nil {
				return 0, nil, err
			}
			times[i] = append(times[i], ms)
		}
	}
	best, medians := fastestOf(times)
	return best, medians, nil
}

// fastestOf returns the index of the candidate whose timings (times[i],
// one or more each) have the least median, the first of equals, and every
// candidate's median (the upper one of an even count).
func fastestOf(times [][]float32) (int, []float32) {
	medians := make([]float32, len(times))
	best := 0
	for i, t := range times {
		t = slices.Sorted(slices.Values(t))
		medians[i] = t[len(t)/2]
		if medians[i] < medians[best] {
			best = i
		}
	}
	return best, medians
}

// ltLayout returns the shim's heuristic result layout (mg_lt_layout): its
// size and the offsets of its workspace, state and waves.
func ltLayout() []int { return shimLayout(4, func(p *C.int) { C.mg_lt_layout(p) }) }
