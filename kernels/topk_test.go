package kernels_test

import (
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
)

// TestTopKRowsKernel checks topk_rows_f32 against the host sampler's rule
// written plainly (a stable sort by logit, the lower id first among equal
// logits, -0 equal to +0): on fresh rows of several widths and k from 1 to V,
// the candidates must be that rule's first k ids, each once, with their own
// logits. The rows hold ties at and across the k-th logit (a few values
// repeated over the whole row), values packed into one narrow range, signed
// zeros, -inf, +inf, and NaN (every id -1), so that both of the kernel's
// ways (the k-th logit's bin gathered in shared memory, or not) meet ties
// and none. Outputs are poisoned first.
func TestTopKRowsKernel(t *testing.T) {
	fn, s := gpu(t)
	for _, V := range []int{1, 7, 1000, 1025, 50280, 50281} {
		rows := [][]float32{randn(V, 3), randn(V, 0.01), randn(V, 0)} // randn(V, 0): all zeros
		// Five values, each many times: ties wherever k falls.
		few := make([]float32, V)
		for i := range few {
			few[i] = float32(rand.IntN(5)) - 2
		}
		// Every value in one bin of the kernel's first round ([1, 1.125)), more
		// than it gathers in shared memory once V > 3072: each round reads the row.
		narrow := make([]float32, V)
		for i := range narrow {
			narrow[i] = 1 + 0.12*rand.Float32()
		}
		rows = append(append(rows, few, narrow), specialRows(V)...) // the last with NaN
		B := len(rows)
		flat := make([]float32, 0, B*V)
		for _, r := range rows {
			flat = append(flat, r...)
		}
		in := upload(t, s, flat)
		for _, k := range slices.Compact([]int{1, min(5, V), min(50, V), min(1000, V), V/2 + 1, V}) {
			ids, vals := poisoned(t, s, B*k), poisoned(t, s, B*k) // ids: NaN's bits, not an id
			if err := fn("topk_rows_f32").Launch(cuda.D1(B), cuda.D1(1024), 0, s, in.Ptr, int32(V), int32(k), ids.Ptr, vals.Ptr); err != nil {
				t.Fatal(err)
			}
			gotVals := download(t, s, vals, B*k)
			gotIDs := make([]int32, B*k)
			if err := cuda.CopyOut(gotIDs, ids.Ptr, s); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			for b, r := range rows {
				got, gv := gotIDs[b*k:(b+1)*k], gotVals[b*k:(b+1)*k]
				if b == len(rows)-1 { // the row with NaN
					if slices.ContainsFunc(got, func(id int32) bool { return id != -1 }) {
						t.Errorf("V=%d k=%d: the row with NaN gave ids %v, want all -1", V, k, got[:min(k, 8)])
					}
					continue
				}
				want := hostTopK(r, k)
				for n, id := range got {
					if id < 0 || int(id) >= V {
						t.Fatalf("V=%d k=%d row %d: candidate %d is id %d", V, k, b, n, id)
					}
					if math.Float32bits(gv[n]) != math.Float32bits(r[id]) {
						t.Fatalf("V=%d k=%d row %d: id %d's logit %v, the row's %v", V, k, b, id, gv[n], r[id])
					}
				}
				if sorted := slices.Sorted(slices.Values(got)); !slices.Equal(sorted, want) {
					t.Errorf("V=%d k=%d row %d: candidates (sorted by id) %v, want %v", V, k, b, head(sorted), head(want))
				}
			}
		}
	}
}

// hostTopK returns the k best-ranked ids of v (by value, the lower id first
// among equals, -0 equal to +0), sorted by id.
func hostTopK(v []float32, k int) []int32 {
	ids := make([]int32, len(v))
	for i := range ids {
		ids[i] = int32(i)
	}
	sort.SliceStable(ids, func(a, b int) bool { return v[ids[a]] > v[ids[b]] })
	return slices.Sorted(slices.Values(ids[:k]))
}

func head(v []int32) []int32 { return v[:min(len(v), 12)] }

// BenchmarkTopKRows times topk_rows_f32 (CUDA events, the median of 50
// launches) on rows of 50280 logits of a random model's spread, at B = 1
// and 8 and k = 50 and 1000, beside argmax_rows_f32 on the same rows: what
// ranking the candidates adds to a sampled step over a greedy one. Also on
// rows packed into one narrow range ("narrow": each round reads the row),
// and, where $MAMBAGO_TOPK_BASE names another build's topk.cu, that
// build's kernel on the same rows ("base").
func BenchmarkTopKRows(b *testing.B) {
	d, fn, s, _, timer := kernelBench(b, "topk.cu")
	builds := map[string]*cuda.Function{"": fn("topk_rows_f32")}
	if path := os.Getenv("MAMBAGO_TOPK_BASE"); path != "" {
		src, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		builds["base "] = functions(b, loadSource(b, d, string(src), "topk_base.cu"))("topk_rows_f32")
	}
	const V = 50280
	for _, B := range []int{1, 8} {
		narrow := make([]float32, B*V)
		for i := range narrow {
			narrow[i] = 1 + 0.12*rand.Float32()
		}
		rows := map[string]*cuda.Buffer{"": upload(b, s, randn(B*V, 3)), "narrow ": upload(b, s, narrow)}
		ids, vals := poisoned(b, s, B*1000), poisoned(b, s, B*1000)
		picks := poisoned(b, s, 2*B)
		argmax := func() error {
			return fn("argmax_rows_f32").Launch(cuda.D1(B), cuda.D1(1024), 0, s, rows[""].Ptr, picks.Ptr, int32(V))
		}
		b.Logf("B=%d argmax_rows_f32: %.1f µs", B, 1e3*gputest.Median(timer.turns(b, []func() error{argmax}, 1, 50)[0]))
		for _, rowsName := range []string{"", "narrow "} {
			for _, k := range []int{50, 1000} {
				for _, build := range []string{"", "base "} {
					f := builds[build]
					if f == nil {
						continue
					}
					topk := func() error {
						return f.Launch(cuda.D1(B), cuda.D1(1024), 0, s, rows[rowsName].Ptr, int32(V), int32(k), ids.Ptr, vals.Ptr)
					}
					b.Logf("B=%d %s%stopk_rows_f32 k=%d: %.1f µs", B, build, rowsName, k,
						1e3*gputest.Median(timer.turns(b, []func() error{topk}, 1, 50)[0]))
				}
			}
		}
	}
}
