package cuda

// TimeLtCandidates times, for tests and benchmarks, each of cuBLASLt's
// first want algorithms for a bf16 GEMM (Gemm's arguments, beta = 0, into
// C) with runs runs each, and returns their milliseconds a run, the
// heuristic's order.
func (b *BLAS) TimeLtCandidates(M, N, K int, A Ptr, lda int, W, C Ptr, ldc, want, runs int) ([]float32, error) {
	if b.lt == nil {
		l, err := newLt()
		if err != nil {
			return nil, err
		}
		b.lt = l
	}
	k := gemmKey{M: M, N: N, K: K, lda: lda, ldc: ldc, ab: BF16, c: F32}
	desc, err := b.lt.descriptors(k)
	if err != nil {
		return nil, err
	}
	defer freePlan(desc)
	algos, err := b.lt.heuristics(desc, want)
	if err != nil {
		return nil, err
	}
	start, err := NewEvent()
	if err != nil {
		return nil, err
	}
	defer start.Destroy()
	end, err := NewEvent()
	if err != nil {
		return nil, err
	}
	defer end.Destroy()
	var ms []float32
	for i := range algos {
		run := func() error { return b.lt.matmul(desc, &algos[i], A, W, C, 0, b.s.handle()) }
		if err := run(); err != nil {
			return nil, err
		}
		if err := start.Record(b.s); err != nil {
			return nil, err
		}
		for range runs {
			if err := run(); err != nil {
				return nil, err
			}
		}
		if err := end.Record(b.s); err != nil {
			return nil, err
		}
		if err := end.Synchronize(); err != nil {
			return nil, err
		}
		t, err := Elapsed(start, end)
		if err != nil {
			return nil, err
		}
		ms = append(ms, t/float32(runs))
	}
	return ms, nil
}
