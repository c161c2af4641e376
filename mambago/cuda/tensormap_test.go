package cuda

import (
	"strings"
	"testing"
)

// TestTensorMapChecks: NewTensorMap2D refuses, before any driver call (so
// without a GPU), shapes and layouts a tensor map cannot describe.
func TestTensorMapChecks(t *testing.T) {
	for _, tc := range []struct {
		name                                string
		dt                                  DType
		p                                   Ptr
		rows, cols, stride, boxRows, boxCol int
		want                                string
	}{
		{"no rows", BF16, 0x1000, 0, 64, 64, 128, 64, "elements"},
		{"stride under the row", BF16, 0x1000, 8, 64, 32, 128, 64, "elements"},
		{"unaligned address", BF16, 0x1008, 8, 64, 64, 128, 64, "alignment"},
		{"unaligned rows", BF16, 0x1000, 8, 12, 12, 128, 64, "alignment"},
		{"box wider than 128 bytes", BF16, 0x1000, 8, 128, 128, 128, 128, "box"},
		{"box taller than 256 rows", F16, 0x1000, 512, 64, 64, 512, 64, "box"},
	} {
		_, err := NewTensorMap2D(tc.dt, tc.p, tc.rows, tc.cols, tc.stride, tc.boxRows, tc.boxCol)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error about %q", tc.name, err, tc.want)
		}
	}
	// Plain maps take rows wider than 128 bytes, but not past 256
	// elements or off 16 bytes.
	for _, tc := range []struct {
		name             string
		boxRows, boxCols int
	}{{"plain box wider than 256 elements", 128, 512}, {"plain box rows of 12 bytes", 128, 3}, {"plain box of no rows", 0, 96}} {
		_, err := NewTensorMap2DPlain(F32, 0x1000, 2048, 768, 768, tc.boxRows, tc.boxCols)
		if err == nil || !strings.Contains(err.Error(), "plain tensor map box") {
			t.Errorf("%s: got %v, want an error about the box", tc.name, err)
		}
	}
}

// TestPackTensorMap: a TensorMap argument travels whole, 128 bytes at its
// own offset after the arguments before it.
func TestPackTensorMap(t *testing.T) {
	var m TensorMap
	for i := range m {
		m[i] = byte(i + 1)
	}
	buf, offsets, err := packArgs([]any{int32(7), m, Ptr(0x1234)})
	if err != nil {
		t.Fatal(err)
	}
	if len(offsets) != 3 || offsets[1]%128 != 0 || offsets[2] != offsets[1]+128 {
		t.Fatalf("offsets %v: want the map on a 128-byte boundary and the pointer right after it", offsets)
	}
	if got := TensorMap(buf[offsets[1] : offsets[1]+128]); got != m {
		t.Fatalf("the map's bytes changed on the way: %v", got[:8])
	}
}
