package cuda

// TimeLtCandidates times, for tests and benchmarks, each of cuBLASLt's
// first want algorithms for a bf16 GEMM (Gemm's arguments, beta = 0, into
// C) as graphs of runs runs each (TimeGraph), and returns their
// milliseconds a run, in the heuristic's order.
func (b *BLAS) TimeLtCandidates(M, N, K int, A Ptr, lda int, W, C Ptr, ldc, want, runs int) ([]float32, error) {
	l, err := b.ltSide()
	if err != nil {
		return nil, err
	}
	k := gemmKey{M: M, N: N, K: K, lda: lda, ldc: ldc, ab: BF16, c: F32}
	desc, err := l.descriptors(k)
	if err != nil {
		return nil, err
	}
	defer freePlan(desc)
	algos, err := l.heuristics(desc, want)
	if err != nil {
		return nil, err
	}
	var ms []float32
	for i := range algos {
		t, err := TimeGraph(b.s, runs, func() error { return l.matmul(desc, &algos[i], A, W, C, 0, b.s.handle()) })
		if err != nil {
			return nil, err
		}
		ms = append(ms, t)
	}
	return ms, nil
}

// TuneLt runs the tuning a tuned bf16 GEMM runs the first time the process
// meets its shape (Gemm's arguments; C is the tuning's own scratch), in
// rounds rounds, and returns the candidate it picks and every candidate's
// median, in milliseconds a run.
func (b *BLAS) TuneLt(M, N, K int, A Ptr, lda int, W Ptr, ldc int, beta float32, rounds int) (int, []float32, error) {
	l, err := b.ltSide()
	if err != nil {
		return 0, nil, err
	}
	k := gemmKey{M: M, N: N, K: K, lda: lda, ldc: ldc, ab: BF16, c: F32, accumulate: beta != 0, tuned: true}
	desc, err := l.descriptors(k)
	if err != nil {
		return 0, nil, err
	}
	defer freePlan(desc)
	algos, err := l.heuristics(desc, int(ltCandidates.Load()))
	if err != nil {
		return 0, nil, err
	}
	return l.fastest(desc, algos, k, A, W, b.s, rounds)
}
