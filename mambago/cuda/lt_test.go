package cuda

import (
	"slices"
	"testing"
)

// TestFastestOf checks the tuning's ranking: the least median wins, an
// outlier timing does not, ties go to the heuristic's earlier candidate,
// and the timings are left in the order they were taken.
func TestFastestOf(t *testing.T) {
	for _, c := range []struct {
		name    string
		times   [][]float32
		best    int
		medians []float32
	}{
		{"one round", [][]float32{{3}, {2}, {4}}, 1, []float32{3, 2, 4}},
		{"an outlier's round", [][]float32{{5, 1, 5}, {2, 2, 3}, {4, 4, 4}}, 1, []float32{5, 2, 4}},
		{"ties: the first", [][]float32{{2, 9, 1}, {2, 2, 2}}, 0, []float32{2, 2}},
		{"even count: the upper median", [][]float32{{1, 4}, {3, 3}}, 1, []float32{4, 3}},
	} {
		before := make([][]float32, len(c.times))
		for i, ts := range c.times {
			before[i] = slices.Clone(ts)
		}
		best, medians := fastestOf(c.times)
		if best != c.best || !slices.Equal(medians, c.medians) {
			t.Errorf("%s: best %d, medians %v; want %d, %v", c.name, best, medians, c.best, c.medians)
		}
		for i := range before {
			if !slices.Equal(before[i], c.times[i]) {
				t.Errorf("%s: timings of candidate %d reordered", c.name, i)
			}
		}
	}
}
