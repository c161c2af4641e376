package gpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/safetensors"
)

// TestDeviceEntryLogits asks the device entry for logits (Output.Logits):
// eagerly and from the graph cache, new and left-padded, into an f32 buffer
// as the engine's own are aligned (written in place), 4 and 16 bytes off
// (through the engine's), and a bf16 one, each poisoned first. Every call
// gives the host entries' logits (Prefill, then Logits) to the bit, rounded
// to bf16 where asked, with the padding's rows zero; a pooled sum or mean
// is an input error.
func TestDeviceEntryLogits(t *testing.T) {
	gputest.Device(t)
	const V, dm, B, T = 101, 64, 3, 23 // V odd: rows of logits not 16-byte aligned
	seed := rand.Uint64()
	ids := make([]int64, B*T)
	for i := range ids {
		ids[i] = rand.Int64N(V)
	}
	pad := []int{0, 5, T - 1}
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16} {
		e, st := smallEngine(t, dm, V, seed, dt, B)
		din := gputest.Alloc(t, 8*B*T)
		if err := cuda.CopyIn(din.Ptr, ids, nil); err != nil {
			t.Fatal(err)
		}
		for _, padded := range []bool{false, true} {
			in := engine.Input{B: B, T: T, IDs: ids}
			if padded {
				in.Pad = pad
			}
			for _, pool := range []engine.Pool{engine.Last, engine.All} {
				rows := pool.OutLen(B, T, dm) / dm
				hidden := make([]float32, rows*dm)
				want := make([]float32, rows*V)
				st.Reset()
				if err := e.Prefill(st, in, pool, hidden); err != nil {
					t.Fatal(err)
				}
				if err := e.Logits(hidden, rows, want); err != nil {
					t.Fatal(err)
				}
				buf := gputest.Alloc(t, 4*rows*V+16)
				for _, graphs := range []int{0, 4} {
					if err := e.SetPrefillGraphs(graphs); err != nil {
						t.Fatal(err)
					}
					for _, out := range []Output{{Ptr: uintptr(buf.Ptr), Type: cuda.F32}, {Ptr: uintptr(buf.Ptr) + 4, Type: cuda.F32},
						{Ptr: uintptr(buf.Ptr) + 16, Type: cuda.F32}, {Ptr: uintptr(buf.Ptr), Type: cuda.BF16}} {
						where := func() string {
							return dt.String() + " " + out.Type.String() + map[bool]string{true: " padded", false: ""}[padded] +
								map[engine.Pool]string{engine.Last: " last", engine.All: " all"}[pool] +
								map[bool]string{true: " graphs", false: " eager"}[graphs > 0]
						}
						if err := cuda.Fill32(buf.Ptr, math.Float32bits(float32(math.NaN())), buf.Bytes/4, nil); err != nil {
							t.Fatal(err)
						}
						st.Reset()
						out.Logits = true
						var err error
						if padded {
							err = e.PrefillDevicePadded(st, "ids", uintptr(din.Ptr), cuda.F32, T, pad, pool, out, 0)
						} else {
							err = e.PrefillDevice(st, "ids", uintptr(din.Ptr), cuda.F32, B, T, pool, out, 0)
						}
						if err != nil {
							t.Fatalf("%s: %v", where(), err)
						}
						if err := cuda.Synchronize(); err != nil {
							t.Fatal(err)
						}
						checkLogits(t, where(), buf, int(out.Ptr-uintptr(buf.Ptr)), out.Type, want)
						if padded && pool == engine.All { // the output is want's bits: its padding rows must be zero
							for b, p := range pad {
								for i := b * T * V; i < (b*T+p)*V; i++ {
									if want[i] != 0 {
										t.Fatalf("%s: the padding's logit [%d] = %v, want 0", where(), i, want[i])
									}
								}
							}
						}
					}
				}
			}
		}
		for _, pool := range []engine.Pool{engine.Sum, engine.Mean} {
			out := gputest.Alloc(t, 4*B*V)
			err := e.PrefillDevice(st, "ids", uintptr(din.Ptr), cuda.F32, B, T, pool, Output{Ptr: uintptr(out.Ptr), Type: cuda.F32, Logits: true}, 0)
			if !engine.IsInvalid(err) {
				t.Fatalf("%s pool %d with logits: %v, want an input error", dt, pool, err)
			}
		}
	}
}

// checkLogits fails t unless buf holds want at byte offset at, as f32 bits
// or rounded to bf16, and the f32 words around it are still NaN.
func checkLogits(t *testing.T, where string, buf *cuda.Buffer, at int, ot cuda.DType, want []float32) {
	t.Helper()
	words := make([]float32, buf.Bytes/4)
	if err := cuda.CopyOut(words, buf.Ptr, nil); err != nil {
		t.Fatal(err)
	}
	first, n := at/4, len(want)
	if ot == cuda.BF16 {
		n = (len(want) + 1) / 2
	}
	for i, w := range words {
		if (i < first || i >= first+n) && !math.IsNaN(float64(w)) {
			t.Fatalf("%s: word %d outside the output was written: %v", where, i, w)
		}
	}
	for i, v := range want {
		switch ot {
		case cuda.F32:
			if got := math.Float32bits(words[first+i]); got != math.Float32bits(v) {
				t.Fatalf("%s: logit %d = %v, the host entries give %v", where, i, words[first+i], v)
			}
		case cuda.BF16:
			word := math.Float32bits(words[first+i/2])
			got := uint16(word >> (16 * (i % 2))) // little-endian halves
			if got != safetensors.BF16Bits(v) {
				t.Fatalf("%s: logit %d = bf16 %#04x, the host entries give %v (bf16 %#04x)", where, i, got, v,
					safetensors.BF16Bits(v))
			}
		}
	}
}
