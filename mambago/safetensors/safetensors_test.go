package safetensors

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/x448/float16"
)

// TestBF16Bits pins bfloat16 rounding bit by bit at the cases IEEE 754's
// round-to-nearest-even decides: exact values, halfway cases both ways,
// values just past halfway, the carry into the exponent, overflow to
// infinity, subnormals, signed zero and NaN.
func TestBF16Bits(t *testing.T) {
	for _, c := range []struct {
		in   uint32 // float32 bits
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0xbf800000, 0xbf80}, // -1
		{0x3f808000, 0x3f80}, // halfway between 0x3f80 and 0x3f81: to the even 0x3f80
		{0x3f818000, 0x3f82}, // halfway between 0x3f81 and 0x3f82: to the even 0x3f82
		{0x3f808001, 0x3f81}, // just past halfway: up
		{0x3f807fff, 0x3f80}, // just below halfway: down
		{0x3fffffff, 0x4000}, // the mantissa's carry moves into the exponent: 2
		{0x7f7fffff, 0x7f80}, // float32's largest rounds past bfloat16's: +inf
		{0x7f800000, 0x7f80}, // +inf
		{0xff800000, 0xff80}, // -inf
		{0x00000000, 0x0000}, // +0
		{0x80000000, 0x8000}, // -0
		{0x00008000, 0x0000}, // the smallest subnormal halfway case: to even, 0
		{0x00018000, 0x0002}, // a subnormal halfway case that rounds up to even
	} {
		if got := BF16Bits(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("BF16Bits(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	for _, in := range []uint32{0x7fc00000, 0x7f800001, 0xff800001, 0x7fbfffff} {
		got := BF16Bits(math.Float32frombits(in))
		if got&0x7f80 != 0x7f80 || got&0x7f == 0 || got>>15 != uint16(in>>31) {
			t.Errorf("BF16Bits(NaN %#08x) = %#04x, want a NaN of the same sign", in, got)
		}
	}
}

// TestWriteReadRoundTrip writes one tensor of each float type and reads it
// back: F32 exactly, BF16 as BF16Bits rounds, F16 as x448/float16 rounds.
func TestWriteReadRoundTrip(t *testing.T) {
	values := []float32{0, -0.5, 1, 3.14159265, -65504, 1e-8, 70000, float32(math.Inf(-1))}
	path := filepath.Join(t.TempDir(), "t.safetensors")
	err := Write(path, map[string]Tensor{
		"w.f32":  {F32, []int{2, 4}, values},
		"w.bf16": {BF16, []int{8}, values},
		"w.f16":  {F16, []int{4, 2}, values},
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, want := f.Names(), []string{"w.bf16", "w.f16", "w.f32"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	if info, ok := f.Info("w.f16"); !ok || info.DType != F16 || !reflect.DeepEqual(info.Shape, []int{4, 2}) ||
		info.Len() != 8 {
		t.Fatalf("Info(w.f16) = %+v, %v", info, ok)
	}
	for name, round := range map[string]func(float32) float32{
		"w.f32":  func(v float32) float32 { return v },
		"w.bf16": func(v float32) float32 { return math.Float32frombits(uint32(BF16Bits(v)) << 16) },
		"w.f16":  func(v float32) float32 { return float16.Fromfloat32(v).Float32() },
	} {
		got, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range values {
			if want := round(v); math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Errorf("%s[%d] = %v, want %v (from %v)", name, i, got[i], want, v)
			}
		}
	}
	// 70000 is past f16's range, 1e-8 below its smallest subnormal.
	if got, _ := f.Float32("w.f16"); !math.IsInf(float64(got[6]), 1) || got[5] != 0 {
		t.Errorf("f16 of 70000 and 1e-8 = %v and %v, want +Inf and 0", got[6], got[5])
	}
}

// TestErrorsNameTheProblem checks that what the package refuses comes back
// as an error naming the file, the tensor and the reason.
func TestErrorsNameTheProblem(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.safetensors")
	if err := Write(path, map[string]Tensor{"x": {F32, []int{3}, []float32{1, 2, 3}}}); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		what string
		err  error
		want []string
	}{
		{"a missing tensor", func() error { _, err := f.Float32("y"); return err }(), []string{path, `"y"`}},
		{"ints of a float tensor", func() error { _, err := f.Int64("x"); return err }(), []string{`"x"`, "F32"}},
		{"a shape that does not hold the values",
			Write(filepath.Join(dir, "bad.safetensors"), map[string]Tensor{"z": {F32, []int{2, 2}, []float32{1}}}),
			[]string{`"z"`, "[2 2]", "1 values"}},
		{"an integer type to write",
			Write(filepath.Join(dir, "int.safetensors"), map[string]Tensor{"i": {I64, []int{1}, []float32{1}}}),
			[]string{`"i"`, "I64"}},
	} {
		if c.err == nil {
			t.Errorf("%s: no error", c.what)
			continue
		}
		for _, s := range c.want {
			if !strings.Contains(c.err.Error(), s) {
				t.Errorf("%s: error %q does not name %s", c.what, c.err, s)
			}
		}
	}
}

// rawFile writes a safetensors file of the given header and data bytes.
func rawFile(t testing.TB, header string, data []byte) string {
	path := filepath.Join(t.TempDir(), "raw.safetensors")
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	if err := os.WriteFile(path, append(append(b, header...), data...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestShapesThatOverflow checks that Open refuses a shape whose element
// count wraps around in 64 bits to the byte count the offsets give (2^62+1
// F32 elements are 4 bytes modulo 2^64), or is too large for the file,
// whatever the dtype: Float32 and Int64 would otherwise try to allocate it.
func TestShapesThatOverflow(t *testing.T) {
	for _, header := range []string{
		`{"x":{"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]}}`,
		`{"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`,
		`{"x":{"dtype":"I64","shape":[2305843009213693953],"data_offsets":[0,8]}}`,
		`{"x":{"dtype":"F64","shape":[68719476736],"data_offsets":[0,8]}}`,
		`{"x":{"dtype":"BF16","shape":[-2,-2],"data_offsets":[0,8]}}`,
	} {
		_, err := Open(rawFile(t, header, make([]byte, 8)))
		if err == nil || !strings.Contains(err.Error(), `"x"`) {
			t.Errorf("%s: got error %v, want one that names the tensor", header, err)
		}
	}
	f, err := Open(rawFile(t, `{"x":{"dtype":"F32","shape":[0,4611686018427387904],"data_offsets":[0,0]}}`, nil))
	if err != nil {
		t.Fatalf("an empty tensor with a large dimension: %v", err)
	}
	defer f.Close()
	if v, err := f.Float32("x"); err != nil || len(v) != 0 {
		t.Errorf("empty tensor: got %d values, %v", len(v), err)
	}
}

// FuzzOpen checks that no file, however malformed, makes Open, Float32 or
// Int64 panic, and that every tensor they return has its shape's length.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	if err := Write(good, map[string]Tensor{
		"a": {F32, []int{2, 3}, []float32{1, 2, 3, 4, 5, 6}},
		"b": {BF16, []int{3}, []float32{1, -2, 0.5}},
		"c": {F16, []int{1, 1}, []float32{7}},
	}); err != nil {
		f.Fatal(err)
	}
	seed, err := os.ReadFile(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add(seed[:20])
	f.Add([]byte{})
	ints := binary.LittleEndian.AppendUint64(nil, 60)
	ints = append(ints, []byte(`{"i":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}     `)...)
	f.Add(append(ints, 1, 0, 0, 0, 255, 255, 255, 255))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f.safetensors")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		file, err := Open(path)
		if err != nil {
			return
		}
		defer file.Close()
		for _, name := range file.Names() {
			info, _ := file.Info(name)
			if v, err := file.Float32(name); err == nil && len(v) != info.Len() {
				t.Errorf("%q: Float32 gave %d values for shape %v", name, len(v), info.Shape)
			}
			if v, err := file.Int64(name); err == nil && len(v) != info.Len() {
				t.Errorf("%q: Int64 gave %d values for shape %v", name, len(v), info.Shape)
			}
		}
	})
}

// TestBits16 reads every float tensor type as bfloat16 and float16 bits:
// the bits of its float32 value rounded to that type (a copy where the file
// holds the type), and an error for a type asked for that is not 16-bit.
func TestBits16(t *testing.T) {
	values := []float32{0, -0.5, 1, 3.14159265, -65504, 1e-8, 70000, float32(math.Inf(-1)), 1.00390625, -2.5e-5}
	path := filepath.Join(t.TempDir(), "t.safetensors")
	err := Write(path, map[string]Tensor{
		"w.f32": {F32, []int{2, 5}, values}, "w.bf16": {BF16, []int{10}, values}, "w.f16": {F16, []int{5, 2}, values},
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	narrow := map[DType]func(float32) uint16{
		BF16: BF16Bits,
		F16:  func(v float32) uint16 { return float16.Fromfloat32(v).Bits() },
	}
	for _, name := range []string{"w.f32", "w.bf16", "w.f16"} {
		wide, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		for dt, round := range narrow {
			got, err := f.Bits16(name, dt)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range wide {
				if want := round(v); got[i] != want {
					t.Errorf("%s as %s: [%d] = %#04x, want %#04x (of %v)", name, dt, i, got[i], want, v)
				}
			}
		}
	}
	if _, err := f.Bits16("w.f32", F32); err == nil || !strings.Contains(err.Error(), "want BF16 or F16") {
		t.Errorf("Bits16 as F32: err = %v", err)
	}
	if _, err := f.Bits16("nope", BF16); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Bits16 of a missing tensor: err = %v", err)
	}
}

// TestReleaseKeepsValues reads tensors that span pages, releases them, and
// reads them again: the same values (the released pages map in again from
// the file). Releasing a missing tensor, or after Close, does nothing.
func TestReleaseKeepsValues(t *testing.T) {
	n := 3*os.Getpagesize()/4 + 5
	a, b := make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], b[i] = float32(i)*0.5, -float32(i)
	}
	path := filepath.Join(t.TempDir(), "t.safetensors")
	if err := Write(path, map[string]Tensor{"a": {F32, []int{n}, a}, "b": {BF16, []int{n}, b}}); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		before, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		f.Release(name)
		after, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("%s changed after Release", name)
		}
	}
	f.Release("missing")
	f.Close()
	f.Release("a")
}
