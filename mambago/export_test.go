package mambago

import "math/rand/v2"

// SetOnePrefillPads makes PrefillSpans and StartSpans run a padded batch as one prefill
// (one) or a prefill a row length, whatever the engine, until the returned
// function restores the engine's own choice.
func SetOnePrefillPads(one bool) (restore func()) {
	saved := onePrefillPads
	onePrefillPads = func(*Model) bool { return one }
	return func() { onePrefillPads = saved }
}

// IdleState returns the state Generate keeps for its next call, or nil.
func IdleState(m *Model) any {
	m.gen.mu.Lock()
	defer m.gen.mu.Unlock()
	if m.gen.st == nil {
		return nil
	}
	return m.gen.st
}

// DrawTopK is the host's draw from row's s.TopK best (0 < TopK < len(row))
// with the uniform u (a multiple of 2^-53, as the sampler's random stream
// gives them), token for token as Generate draws on the host: for a
// stand-in of an engine.TopKQueueDecoder. -1 for a row with NaN.
func DrawTopK(row []float32, s Sampling, u float64) int64 {
	sp := newSampler(s, 0)
	sp.rng = rand.New(uniformSource(u * (1 << 53)))
	id, err := sp.next(row)
	if err != nil {
		return -1
	}
	return id
}

// uniformSource is a rand.Source whose every Uint64 is the same m: a
// rand.Rand over it draws Float64() = m / 2^53 for m < 2^53.
type uniformSource uint64

// Uint64 returns m.
func (m uniformSource) Uint64() uint64 { return uint64(m) }

// FallbackNote is fallbackNote, for the external tests.
var FallbackNote = fallbackNote

// Unusable marks err as why a GPU the driver sees cannot run the CUDA
// engine, as gpuUsable does.
func Unusable(err error) error { return unusableGPU{err} }

// StopHits reports whether a row of tokens seq (its prompt all but the
// last) ends with its last token under ss, as Generate tells it.
func StopHits(ss StopStrings, seq []int64) bool {
	n := len(seq) - 1
	return newStopTexts(ss, seq[:n], 1, n, nil).hits(0, seq[n])
}
