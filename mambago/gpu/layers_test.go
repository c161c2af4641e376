package gpu_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestDeviceEntryLayers: the device entry's hidden_states (Output.Layers,
// f32 [L+1, B, T, d]) are the host entry's (PrefillLayers) bits, layer by
// layer, then its states: fresh prompts and a left-padded batch (zero at
// the padding), f32 and bf16, with states and with logits as the output
// (whose bits are those of the same call without layers). A buffer filled
// with NaN first shows any element left unwritten. Layers with an output
// other than all, a misaligned buffer and one a slab short are input
// errors.
func TestDeviceEntryLayers(t *testing.T) {
	gputest.Need(t)
	gputest.Device(t)
	w := fixtureWeights(t, "base")
	const B, T = 3, 29
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16} {
		e := newEngine(t, w, dt)
		c := e.Config()
		L, d := c.Layers, c.Hidden
		ids := make([]int64, B*T)
		for i := range ids {
			ids[i] = rand.Int64N(int64(c.Vocab))
		}
		for _, pad := range [][]int{nil, {rand.IntN(T), 0, T - 1}} {
			in := engine.Input{B: B, T: T, IDs: ids, Pad: pad}
			st, _ := e.NewState(B)
			states, layers := fixture.NaNs(B*T*d), fixture.NaNs(L*B*T*d)
			if err := e.PrefillLayers(context.Background(), st, in, states, layers); err != nil {
				t.Fatal(err)
			}
			want := append(layers, states...)
			din := deviceInput(t, in)
			for _, logits := range []bool{false, true} {
				width := d
				if logits {
					width = c.Vocab
				}
				dout, dlayers := nanBuffer(t, B*T*width), nanBuffer(t, len(want))
				prefill := func(out gpu.Output) error {
					st, _ := e.NewState(B)
					if pad == nil {
						return e.PrefillDevice(st, "ids", uintptr(din.Ptr), cuda.F32, B, T, engine.All, out, 0)
					}
					return e.PrefillDevicePadded(st, "ids", uintptr(din.Ptr), cuda.F32, T, pad, engine.All, out, 0)
				}
				out := gpu.Output{Ptr: uintptr(dout.Ptr), Type: cuda.F32, Logits: logits, Layers: uintptr(dlayers.Ptr)}
				if err := prefill(out); err != nil {
					t.Fatal(err)
				}
				got := download(t, dlayers, len(want))
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						l, at := i/(B*T*d), i%(B*T*d)
						t.Fatalf("%v, pad %v, logits %v: hidden state %d, row %d, position %d, unit %d: %v, host entry gives %v",
							dt, pad, logits, l, at/(T*d), at/d%T, at%d, got[i], want[i])
					}
				}
				withLayers := download(t, dout, B*T*width)
				plain := nanBuffer(t, B*T*width)
				out.Ptr, out.Layers = uintptr(plain.Ptr), 0
				if err := prefill(out); err != nil {
					t.Fatal(err)
				}
				for i, v := range download(t, plain, B*T*width) {
					if math.Float32bits(v) != math.Float32bits(withLayers[i]) {
						t.Fatalf("%v, pad %v, logits %v: out[%d] = %v with layers, %v without", dt, pad, logits, i, withLayers[i], v)
					}
				}
			}
		}
		// Refused before anything runs.
		din := deviceInput(t, engine.Input{B: B, T: T, IDs: ids})
		dout, dlayers := nanBuffer(t, B*T*d), nanBuffer(t, (L+1)*B*T*d)
		// L slabs' room at the end of an allocation of 2 MB (a multiple of the
		// driver's granularity, so its extent is exactly that): one short.
		const tail = 2 << 20
		short := gputest.Alloc(t, tail).Offset(tail - 4*L*B*T*d)
		st, _ := e.NewState(B)
		for _, bad := range []struct {
			what   string
			pool   engine.Pool
			layers uintptr
		}{
			{"last", engine.Last, uintptr(dlayers.Ptr)},
			{"sum", engine.Sum, uintptr(dlayers.Ptr)},
			{"misaligned", engine.All, uintptr(dlayers.Ptr) + 2},
			{"a slab short", engine.All, uintptr(short)},
		} {
			out := gpu.Output{Ptr: uintptr(dout.Ptr), Type: cuda.F32, Layers: bad.layers}
			if err := e.PrefillDevice(st, "ids", uintptr(din.Ptr), cuda.F32, B, T, bad.pool, out, 0); !engine.IsInvalid(err) {
				t.Errorf("%v, %s: got %v, want an input error", dt, bad.what, err)
			}
		}
	}
}

// nanBuffer returns a device buffer of n float32s, each NaN.
func nanBuffer(t *testing.T, n int) *cuda.Buffer {
	t.Helper()
	b := gputest.Alloc(t, 4*n)
	if err := cuda.Fill32(b.Ptr, math.Float32bits(float32(math.NaN())), n, nil); err != nil {
		t.Fatal(err)
	}
	return b
}

// download copies n float32s of b to the host, after the work queued on the
// default stream.
func download(t *testing.T, b *cuda.Buffer, n int) []float32 {
	t.Helper()
	got := make([]float32, n)
	if err := cuda.CopyOut(got, b.Ptr, nil); err != nil {
		t.Fatal(err)
	}
	return got
}
