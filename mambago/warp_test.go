package mambago

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// BenchmarkWarp times one row of a 130m model's vocabulary (50,280 logits)
// cut by each warper setting, as a host draw does before it picks.
func BenchmarkWarp(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	row := make([]float32, 50280)
	for i := range row {
		row[i] = float32(rng.NormFloat64() * 3)
	}
	z := make([]float32, len(row))
	for _, c := range []struct {
		name string
		s    Sampling
	}{
		{"top_k50", Sampling{Temperature: 0.8, TopK: 50, TopP: 1}},
		{"top_p0.95", Sampling{Temperature: 0.8, TopP: 0.95}},
		{"typical0.9", Sampling{Temperature: 0.8, TopP: 1, Warpers: Warpers{TypicalP: 0.9}}},
		{"top_k50+typical0.9", Sampling{Temperature: 0.8, TopK: 50, TopP: 1, Warpers: Warpers{TypicalP: 0.9}}},
		{"eta0.001", Sampling{Temperature: 0.8, TopP: 1, Warpers: Warpers{EtaCutoff: 1e-3}}},
	} {
		w := newWarper(c.s, 1)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				copy(z, row)
				w.warp(z)
			}
		})
	}
}

// typicalBySort is typical_p as transformers writes it: every token sorted
// by its key, kept up to the one whose probability reaches m, the minKeep
// first kept too.
func typicalBySort(z []float32, m float64, minKeep int) {
	w := newWarper(Sampling{}, minKeep)
	w.softmax(z)
	ent := w.entropy()
	key := func(i int) float64 { return math.Abs(-w.logp[i] - ent) }
	order := make([]int, len(z))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(key(a), key(b)) })
	cum, last := 0.0, 0
	for _, i := range order {
		if cum += w.p[i]; cum < m {
			last++
		}
	}
	cut := key(order[min(last, len(z)-1)])
	for n, i := range order {
		if n >= minKeep && key(i) > cut {
			z[i] = float32(math.Inf(-1))
		}
	}
}

// TestTypicalBinsMatchFullSort: typical_p through the warper's bins keeps
// the tokens a sort of the whole row keeps, over fresh random rows, flat
// and peaked, some already cut, and masses from 0.01 to 0.999.
func TestTypicalBinsMatchFullSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), 0))
	for trial := range 400 {
		V := []int{7, 96, 5000}[trial%3]
		scale := []float64{0.3, 2, 8}[trial/3%3]
		z := make([]float32, V)
		for i := range z {
			z[i] = float32(rng.NormFloat64() * scale)
			if trial%5 == 4 && rng.Float64() < 0.5 && i > 0 {
				z[i] = float32(math.Inf(-1))
			}
		}
		m := []float64{0.01, 0.3, 0.9, 0.999, rng.Float64()}[trial%5]
		minKeep := []int{1, 2, 4}[trial%3]
		got, want := slices.Clone(z), slices.Clone(z)
		newWarper(Sampling{}, minKeep).typical(got, m)
		typicalBySort(want, m, minKeep)
		for i := range got {
			if math.IsInf(float64(got[i]), -1) != math.IsInf(float64(want[i]), -1) {
				t.Fatalf("trial %d (V %d, scale %v, m %v, keep %d): token %d kept %v by bins, %v by the sort",
					trial, V, scale, m, minKeep, i, !math.IsInf(float64(got[i]), -1), !math.IsInf(float64(want[i]), -1))
			}
		}
	}
}

// TestDrawnFills checks beam sampling's draw where the warpers leave fewer
// continuations than a step takes: the drawable ones come first, then the
// others of finite score (a beam scored no, too far below to be drawn)
// by score and place, then the -Inf ones by place; the same from whole
// rows and from the warped rows of ranked candidates.
func TestDrawnFills(t *testing.T) {
	const V = 3
	inf := float32(math.Inf(-1))
	beams := []beamRow{{score: 0}, {score: no}}
	whole := &candidates{logp: []float32{inf, -0.5, -1, -0.1, inf, -2}}
	warped := &candidates{tokens: []int32{1, 2, 0, 2}, logits: []float32{-0.5, -1, -0.1, -2}, warped: 2}
	for keep, want := range map[int][]int{
		2: {1, 2},             // beam 0's two: drawn, best first
		4: {1, 2, 3, 5},       // then beam 1's, tied at no (-1e9 in float32), by place
		6: {1, 2, 3, 5, 0, 4}, // then the -Inf, by place
	} {
		for name, c := range map[string]*candidates{"whole rows": whole, "warped rows": warped} {
			got, err := c.drawn(0, beams, keep, V, rand.New(rand.NewPCG(1, uint64(keep))))
			if err != nil {
				t.Fatalf("%s, keep %d: %v", name, keep, err)
			}
			at := make([]int, len(got))
			for i, x := range got {
				at[i] = x.at
			}
			if !slices.Equal(at, want) {
				t.Errorf("%s, keep %d: drew %v, want %v", name, keep, at, want)
			}
		}
	}
}

// TestSortKeys checks sortKeys against slices.Sort: sizes on both sides of
// radixMin, keys spread over all 64 bits, keys sharing their high bits
// (rankKey's of logits alike), and many equal keys.
func TestSortKeys(t *testing.T) {
	var spare []uint64
	for _, n := range []int{0, 1, 7, radixMin - 1, radixMin, 5000, 50280} {
		for name, key := range map[string]func(i int) uint64{
			"any":    func(int) uint64 { return rand.Uint64() },
			"ranked": func(i int) uint64 { return rankKey(int32(i), float32(rand.NormFloat64())) },
			"equal":  func(int) uint64 { return uint64(rand.IntN(3)) << 40 },
		} {
			keys := make([]uint64, n)
			for i := range keys {
				keys[i] = key(i)
			}
			want := slices.Sorted(slices.Values(keys))
			spare = sortKeys(keys, spare)
			if !slices.Equal(keys, want) {
				t.Errorf("%s, %d keys: not sorted as slices.Sort sorts them", name, n)
			}
		}
	}
}

// BenchmarkSortKeys times a 130m row's rank keys sorted by sortKeys and by
// slices.Sort.
func BenchmarkSortKeys(b *testing.B) {
	keys := make([]uint64, 50280)
	for i := range keys {
		keys[i] = rankKey(int32(i), float32(rand.NormFloat64()*3))
	}
	work := make([]uint64, len(keys))
	var spare []uint64
	b.Run("radix", func(b *testing.B) {
		for b.Loop() {
			copy(work, keys)
			spare = sortKeys(work, spare)
		}
	})
	b.Run("slices.Sort", func(b *testing.B) {
		for b.Loop() {
			copy(work, keys)
			slices.Sort(work)
		}
	})
}

// TestPanicInPartsIsAnError checks that a panic in one of inParts'
// goroutines comes back as an error naming its row, with the others' rows
// done, rather than ending the process.
func TestPanicInPartsIsAnError(t *testing.T) {
	done := make([]bool, 6)
	err := inParts(len(done), 3, "row", func(_, i int) error {
		if i == 2 {
			var m map[int]int
			//lint:ignore SA5000 the panic is the point
			m[i] = i // a nil map: a runtime panic
		}
		done[i] = true
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "row 2: mambago internal error") {
		t.Fatalf("err = %v, want row 2's internal error", err)
	}
	if want := []bool{true, true, false, false, true, true}; !slices.Equal(done, want) {
		t.Errorf("rows done %v, want %v (a part stops at its error)", done, want)
	}
}
