package kernels_test

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
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

// topkBuild is one build of topk.cu: its name in BenchmarkTopKRows' lines
// ("" for this tree's) and its kernels by name (nil for one it lacks).
type topkBuild struct {
	name string
	fn   func(string) *cuda.Function
}

// BenchmarkTopKRows times topk_rows_f32 and topp_draw_f32 (and
// topp_draw_x8_f32 on sm_90a) (CUDA events,
// the median of 50 launches) on rows of 50280 logits of a random model's spread, at B = 1
// and 8 and k = 50 and 1000, beside argmax_rows_f32 on the same rows: what
// ranking the candidates adds to a sampled step over a greedy one. Also on
// rows packed into one narrow range ("narrow": each round reads the row),
// and, where $MAMBAGO_TOPK_BASE names other builds' topk.cu (a list split
// by ':'), those builds' kernels on the same rows (named by their files;
// argmax_rows_f32 too where the file has pool.cu's appended; their
// topp_draw_f32 must take min_p, as this one does from 2026-12-07).
func BenchmarkTopKRows(b *testing.B) {
	d, fn, s, _, timer := kernelBench(b, "topk.cu")
	toppBuilds := toppKernels(b)
	builds := []topkBuild{{"", fn}}
	if paths := os.Getenv("MAMBAGO_TOPK_BASE"); paths != "" {
		for _, path := range strings.Split(paths, ":") {
			text, err := os.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			src, err := kernels.SourceOf("topk.cu", string(text))
			if err != nil {
				b.Fatal(err)
			}
			m := loadSourceFor(b, kernels.Target("topk.cu", d.Arch()), src, filepath.Base(path))
			builds = append(builds, topkBuild{filepath.Base(path) + " ", func(name string) *cuda.Function {
				f, err := m.Function(name)
				if err != nil {
					return nil
				}
				return f
			}})
		}
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
		for _, build := range builds {
			f := build.fn("argmax_rows_f32")
			if f == nil {
				continue
			}
			argmax := func() error {
				return f.Launch(cuda.D1(B), cuda.D1(1024), 0, s, rows[""].Ptr, picks.Ptr, int32(V), cuda.Ptr(0))
			}
			b.Logf("B=%d %sargmax_rows_f32: %.1f µs", B, build.name, 1e3*gputest.Median(timer.turns(b, []func() error{argmax}, 1, 50)[0]))
		}
		u, err := cuda.Alloc(8 * B)
		if err != nil {
			b.Fatal(err)
		}
		defer u.Free()
		if err := cuda.CopyIn(u.Ptr, slices.Repeat([]float64{0.5}, B), s); err != nil {
			b.Fatal(err)
		}
		for _, rowsName := range []string{"", "narrow "} {
			for _, k := range toppBuilds {
				for _, build := range builds {
					topp := func() error {
						return build.fn(k.name).Launch(cuda.D1(k.group*B), cuda.D1(1024), 0, s, rows[rowsName].Ptr, int32(V), float32(1/0.8), 0.95, 0.0, u.Ptr, picks.Ptr, cuda.Ptr(0))
					}
					b.Logf("B=%d %s%s%s T=0.8 p=0.95: %.1f µs", B, build.name, rowsName, k.name,
						1e3*gputest.Median(timer.turns(b, []func() error{topp}, 1, 50)[0]))
				}
			}
		}
		for _, rowsName := range []string{"", "narrow "} {
			for _, k := range []int{50, 1000} {
				for _, build := range builds {
					topk := func() error {
						return build.fn("topk_rows_f32").Launch(cuda.D1(B), cuda.D1(1024), 0, s, rows[rowsName].Ptr, int32(V), int32(k), ids.Ptr, vals.Ptr)
					}
					b.Logf("B=%d %s%stopk_rows_f32 k=%d: %.1f µs", B, build.name, rowsName, k,
						1e3*gputest.Median(timer.turns(b, []func() error{topk}, 1, 50)[0]))
				}
			}
		}
	}
}

// TestTopPDrawKernel checks topp_draw_f32's odds against the nucleus rule
// written plainly (a stable sort by logit, weights exp((logit - max) /
// temperature), the shortest best-first run reaching p of the weight):
// 4096 copies of a row drawn 50 times each with fresh uniforms, every
// token's count within 5σ of its exact probability and none outside the
// nucleus; on rows with ties where the nucleus ends, a flat wide row (a
// nucleus of most of 60000 tokens: the ten best's share and the nucleus's
// edge; longer than topp_draw_x8_f32 keeps in registers, so it reads its
// last chunks from the row), rows shorter than a cluster, and rows of +inf,
// -inf and NaN.
// On sm_90a, topp_draw_x8_f32 (a row split over a cluster of 8 blocks)
// must draw the very tokens topp_draw_f32 draws for the same uniforms. The
// output is poisoned first.
// With -test.short (as the sanitizers run it) each row is drawn in 2
// launches of at most 16 copies (the wide row in one launch of 2), not 50
// (or 40) of 4096 (or 64).
func TestTopPDrawKernel(t *testing.T) {
	fn, s := gpu(t)
	builds := toppKernels(t)
	few := make([]float32, 40) // ties: the nucleus ends inside a run of equal logits
	for i := range few {
		few[i] = float32(rand.IntN(4))
	}
	for _, tc := range []struct {
		row              []float32
		temp, topP, minP float64
	}{
		{randn(60, 2), 0.8, 0.9, 0},
		{randn(60, 2), 1.5, 1, 0},
		{randn(60, 1), 1, 0.3, 0},
		{few, 1, 0.5, 0},
		{few, 0.7, 0.95, 0},
		{randn(60000, 1), 1, 0.95, 0},
		{randn(5, 1), 1, 0.9, 0}, // fewer tokens than a cluster's blocks
		{randn(1, 1), 1, 0.5, 0},
		{randn(60, 2), 1.5, 1, 0.05},     // min_p cuts the row
		{randn(60, 2), 1.2, 0.9, 0.2},    // the nucleus, then min_p
		{few, 1, 0.95, 0.4},              // a cut between runs of equal logits
		{randn(60000, 1), 1, 0.95, 0.02}, // the wide row
		{randn(60, 1), 1, 1, 1},          // the best alone
	} {
		V, B, launches := len(tc.row), 4096, 50
		if V > 1000 {
			B, launches = 64, 40
		}
		began := time.Now()
		if testing.Short() { // under the sanitizers: the same checks on fewer draws
			B, launches = min(B, 16), 1
			if V > 1000 { // the wide row is slow under racecheck: once, without min_p
				if tc.minP > 0 {
					continue
				}
				B, launches = 2, 1
			}
		}
		probs := nucleusOdds(tc.row, tc.temp, tc.topP, tc.minP)
		counts := make([]int, V)
		in := upload(t, s, slices.Repeat(tc.row, B))
		for range launches {
			u := make([]float64, B)
			for i := range u {
				u[i] = rand.Float64()
			}
			next := drawTopP(t, fn, builds[0], s, in, B, V, tc.temp, tc.topP, tc.minP, u)
			for _, k := range builds[1:] { // the same token for the same draw, whatever the split of the row
				if got := drawTopP(t, fn, k, s, in, B, V, tc.temp, tc.topP, tc.minP, u); !slices.Equal(got, next) {
					b := 0
					for got[b] == next[b] {
						b++
					}
					t.Fatalf("V=%d T=%v p=%v min_p=%v, u=%v: %s drew %d, %s %d", V, tc.temp, tc.topP, tc.minP, u[b], k.name, got[b], builds[0].name, next[b])
				}
			}
			for b, id := range next {
				if id < 0 || int(id) >= V {
					t.Fatalf("V=%d T=%v p=%v min_p=%v: draw %d gave token %d", V, tc.temp, tc.topP, tc.minP, b, id)
				}
				counts[id]++
			}
		}
		t.Logf("V=%d T=%v p=%v min_p=%v: %d draws in %v", V, tc.temp, tc.topP, tc.minP, B*launches, time.Since(began).Round(time.Millisecond))
		n := float64(B * launches)
		var topTen, topTenP float64
		order := rankOrder(tc.row)
		for r, id := range order {
			c, p := float64(counts[id]), probs[id]
			if p == 0 && c > 0 {
				t.Fatalf("V=%d T=%v p=%v min_p=%v: token %d (rank %d) is outside the nucleus, drawn %v times", V, tc.temp, tc.topP, tc.minP, id, r, c)
			}
			if r < 10 {
				topTen, topTenP = topTen+c, topTenP+p
			}
			if V <= 1000 && math.Abs(c-n*p) > 5*math.Sqrt(n*p*(1-p))+1 {
				t.Errorf("V=%d T=%v p=%v min_p=%v: token %d drawn %v times, expected %.1f", V, tc.temp, tc.topP, tc.minP, id, c, n*p)
			}
		}
		if math.Abs(topTen-n*topTenP) > 5*math.Sqrt(n*topTenP*(1-topTenP))+1 {
			t.Errorf("V=%d T=%v p=%v min_p=%v: the ten best drawn %v times, expected %.1f", V, tc.temp, tc.topP, tc.minP, topTen, n*topTenP)
		}
	}
	// Rows an infinite or NaN logit decides: +inf (twice: the lower id), all
	// -inf (token 0), NaN (-1).
	const V = 300
	inf := randn(V, 1)
	inf[200], inf[77] = float32(math.Inf(1)), float32(math.Inf(1))
	neg := make([]float32, V)
	for i := range neg {
		neg[i] = float32(math.Inf(-1))
	}
	nanRow := randn(V, 1)
	nanRow[123] = float32(math.NaN())
	in := upload(t, s, slices.Concat(inf, neg, nanRow))
	for _, k := range builds {
		if got := drawTopP(t, fn, k, s, in, 3, V, 1, 0.9, 0.1, []float64{0.5, 0.5, 0.5}); !slices.Equal(got, []int64{77, 0, -1}) {
			t.Errorf("%s: rows of +inf, -inf and NaN gave %v, want [77 0 -1]", k.name, got)
		}
	}
}

// toppKernel is a build of the top-p draw: its entry, and how many blocks
// a row it launches.
type toppKernel struct {
	name  string
	group int
}

// toppKernels returns the builds of the top-p draw this GPU runs:
// topp_draw_f32 (one block a row), then, on sm_90a, topp_draw_x8_f32 (a
// cluster of 8), whose absence elsewhere it logs.
func toppKernels(t testing.TB) []toppKernel {
	builds := []toppKernel{{"topp_draw_f32", 1}}
	if d := gputest.Device(t); d.Major != 9 || d.Minor != 0 {
		t.Logf("topp_draw_x8_f32 not run: it needs sm_90a's clusters; this GPU is sm_%d%d", d.Major, d.Minor)
		return builds
	}
	return append(builds, toppKernel{"topp_draw_x8_f32", 8})
}

// drawTopP runs build k of the top-p draw over B rows of V at in with
// uniforms u (drawn).
func drawTopP(t *testing.T, fn func(string) *cuda.Function, k toppKernel, s *cuda.Stream, in *cuda.Buffer, B, V int,
	temp, topP, minP float64, u []float64) []int64 {
	t.Helper()
	return drawn(t, k.name, s, u, func(next, un, mirror cuda.Ptr) error {
		return fn(k.name).Launch(cuda.D1(k.group*B), cuda.D1(1024), 0, s, in.Ptr, int32(V), float32(1/temp), topP, minP, un,
			next, mirror)
	})
}

// drawn runs a draw kernel's launch for len(u) rows with uniforms u (on
// the device at un) into next, poisoned first, and its mirror in
// page-locked memory, which must hold the same draws; it returns them.
func drawn(t *testing.T, name string, s *cuda.Stream, u []float64, launch func(next, un, mirror cuda.Ptr) error) []int64 {
	t.Helper()
	B := len(u)
	next, err := cuda.Alloc(8 * B)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Free()
	un, err := cuda.Alloc(8 * B)
	if err != nil {
		t.Fatal(err)
	}
	defer un.Free()
	got := slices.Repeat([]int64{-7}, B) // not an answer
	if err := cuda.CopyIn(next.Ptr, got, s); err != nil {
		t.Fatal(err)
	}
	if err := cuda.CopyIn(un.Ptr, u, s); err != nil {
		t.Fatal(err)
	}
	mirror, at := mirrored(t, B)
	if err := launch(next.Ptr, un.Ptr, at); err != nil {
		t.Fatal(err)
	}
	if err := cuda.CopyOut(got, next.Ptr, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(mirror, got) {
		t.Fatalf("%s: mirrored %v, drew %v", name, mirror, got)
	}
	return got
}

// rankOrder returns the ids of row best first (the lower id first among
// equal logits).
func rankOrder(row []float32) []int {
	ids := make([]int, len(row))
	for i := range ids {
		ids[i] = i
	}
	sort.SliceStable(ids, func(a, b int) bool { return row[ids[a]] > row[ids[b]] })
	return ids
}

// nucleusOdds returns each token's probability of being drawn under the
// nucleus rule: weights exp((logit - max) / temp), the shortest best-first
// run whose weight reaches topP of the row's, less those of it below minP
// (the best weighs 1), drawn in proportion.
func nucleusOdds(row []float32, temp, topP, minP float64) []float64 {
	order := rankOrder(row)
	top := float64(row[order[0]])
	w := make([]float64, len(row))
	var total float64
	for i, v := range row {
		w[i] = math.Exp((float64(v) - top) / temp)
		total += w[i]
	}
	probs := make([]float64, len(row))
	var mass float64
	keep := len(order)
	for n, id := range order {
		if mass += w[id]; mass >= topP*total {
			keep = n + 1
			break
		}
	}
	for keep > 1 && w[order[keep-1]] < minP {
		keep--
		mass -= w[order[keep]]
	}
	for _, id := range order[:keep] {
		probs[id] = w[id] / mass
	}
	return probs
}

// TestTopKDrawKernelEdges checks topk_draw_f32 where no weight decides the
// token: a row with NaN gives -1; rows whose best logit is +inf (twice:
// the lower id), or all -inf, give their best-ranked token; k = 1 gives
// the row's best for any uniform; and a nucleus of p → 0 keeps only the
// best. Each for k up to TOPK_DRAW_MAX, its pick mirrored into page-locked
// memory. (That its draws are the host sampler's, token for token, is
// mambago's TestQueueTopKMatchesHost.)
func TestTopKDrawKernelEdges(t *testing.T) {
	fn, s := gpu(t)
	const V = 2000
	inf := randn(V, 1)
	inf[1500], inf[77] = float32(math.Inf(1)), float32(math.Inf(1))
	neg := slices.Repeat([]float32{float32(math.Inf(-1))}, V)
	nanRow := randn(V, 1)
	nanRow[123] = float32(math.NaN())
	plain := randn(V, 2)
	best := int64(rankOrder(plain)[0])
	in := upload(t, s, slices.Concat(inf, neg, nanRow, plain))
	for _, k := range []int{1, 2, 50, 1000, 1024} {
		ids, vals := poisoned(t, s, 4*k), poisoned(t, s, 4*k)
		for _, c := range []struct {
			temp, p float64
			u       float64
		}{{1, 1, 0.999}, {0.5, 1e-9, 0.7}, {2, 0.9, 0}} {
			want := []int64{77, 0, -1, -2} // -2: the plain row, whose draw only k = 1 or p → 0 decides
			if k == 1 || c.p < 1e-6 {
				want[3] = best
			}
			got := drawTopK(t, fn, s, in, 4, V, k, ids, vals, c.temp, c.p, slices.Repeat([]float64{c.u}, 4))
			for b := range want {
				if want[b] != -2 && got[b] != want[b] {
					t.Errorf("k=%d T=%v p=%v u=%v, row %d: drew %d, want %d", k, c.temp, c.p, c.u, b, got[b], want[b])
				}
			}
			if k > 1 && c.p == 1 && !slices.Contains(rankOrder(plain)[:k], int(got[3])) {
				t.Errorf("k=%d: drew %d, not among the row's %d best", k, got[3], k)
			}
		}
		ids.Free()
		vals.Free()
	}
}

// drawTopK runs topk_draw_f32 over B rows of V at in with uniforms u (B of
// them) and candidate scratch ids and vals [B, k].
func drawTopK(t *testing.T, fn func(string) *cuda.Function, s *cuda.Stream, in *cuda.Buffer, B, V, k int,
	ids, vals *cuda.Buffer, temp, topP float64, u []float64) []int64 {
	t.Helper()
	return drawn(t, "topk_draw_f32", s, u[:B], func(next, un, mirror cuda.Ptr) error {
		return fn("topk_draw_f32").Launch(cuda.D1(B), cuda.D1(1024), 0, s, in.Ptr, int32(V), int32(k), ids.Ptr, vals.Ptr,
			1/temp, topP, 0.0, un, next, mirror)
	})
}
