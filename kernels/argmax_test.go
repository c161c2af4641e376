package kernels_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/mambago/mambago/mambago/cuda"
)

// TestArgmaxRowsKernel checks argmax_rows_f32 against the host's rule (the
// lowest index of the largest value; -1 for a row with NaN) on fresh rows of
// several widths, with the largest value repeated across threads and warps,
// rows of -inf, +inf, signed zeros and NaN; its mirror in page-locked
// memory must hold the same ids.
func TestArgmaxRowsKernel(t *testing.T) {
	fn, s := gpu(t)
	for _, V := range []int{1, 7, 1000, 1025, 50280, 50281} {
		rows := [][]float32{randn(V, 3), randn(V, 3), randn(V, 0)} // the last all zeros
		tied := randn(V, 3)
		top := float32(20)
		for range 5 { // the largest in up to 5 places, far apart
			tied[rand.IntN(V)] = top
		}
		neg := make([]float32, V)
		for i := range neg {
			neg[i] = float32(math.Inf(-1))
		}
		rows = append(append(rows, tied, neg), specialRows(V)...)
		B := len(rows)
		flat := make([]float32, 0, B*V)
		for _, r := range rows {
			flat = append(flat, r...)
		}
		in := upload(t, s, flat)
		ids, err := cuda.Alloc(8 * B)
		if err != nil {
			t.Fatal(err)
		}
		defer ids.Free()
		if err := cuda.CopyIn(ids.Ptr, slices.Repeat([]int64{-7}, B), s); err != nil { // not an answer
			t.Fatal(err)
		}
		mirror, at := mirrored(t, B)
		if err := fn("argmax_rows_f32").Launch(cuda.D1(B), cuda.D1(1024), 0, s, in.Ptr, ids.Ptr, int32(V), at); err != nil {
			t.Fatal(err)
		}
		got := make([]int64, B)
		if err := cuda.CopyOut(got, ids.Ptr, s); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		for b, r := range rows {
			if want := hostArgmax(r); got[b] != want {
				t.Errorf("V=%d row %d: argmax %d, want %d", V, b, got[b], want)
			}
		}
		if !slices.Equal(mirror, got) {
			t.Errorf("V=%d: mirrored %v, want %v", V, mirror, got)
		}
	}
}

// mirrored returns B int64 of page-locked memory (freed by the test's
// cleanup), each -7 (not an answer), and their device address: a pick
// kernel's mirror.
func mirrored(t *testing.T, B int) ([]int64, cuda.Ptr) {
	t.Helper()
	h, err := cuda.AllocHost(8 * B)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Free() })
	at, err := h.Device()
	if err != nil {
		t.Fatal(err)
	}
	mirror := cuda.HostSlice[int64](h, 0, B)
	for i := range mirror {
		mirror[i] = -7
	}
	return mirror, at
}

// specialRows returns rows of V values that rank oddly, for the kernels that
// rank a row: signed zeros at random; -inf in about two places of three
// among random values; one +inf among them; and, last, one NaN among them.
func specialRows(V int) [][]float32 {
	zeros := make([]float32, V)
	for i := range zeros {
		if rand.IntN(2) == 0 {
			zeros[i] = float32(math.Copysign(0, -1))
		}
	}
	neg := randn(V, 3)
	for i := range neg {
		if rand.IntN(3) > 0 {
			neg[i] = float32(math.Inf(-1))
		}
	}
	inf := randn(V, 3)
	inf[rand.IntN(V)] = float32(math.Inf(1))
	nanRow := randn(V, 3)
	nanRow[rand.IntN(V)] = float32(math.NaN())
	return [][]float32{zeros, neg, inf, nanRow}
}

// hostArgmax is the lowest index of the largest value, or -1 when v holds NaN.
func hostArgmax(v []float32) int64 {
	best := 0
	for i, x := range v {
		if x != x {
			return -1
		}
		if x > v[best] {
			best = i
		}
	}
	return int64(best)
}
