package kernels_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/x448/float16"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	gpuengine "github.com/mambago/mambago/mambago/gpu"
)

// TestConvXProjKernel checks the fused conv and x_proj (kernels/conv_xproj.cu)
// in bf16 and f16: u and the updated windows must be the same bits as
// conv_silu's, dbl within 1e-5 (of its largest value) of float64 sums of
// the products of that u and W as stored, and the tiles' counters back at
// zero (a second launch on them must give the same bits). The shapes take both entries
// (J up to 80 and up to 96), partial tiles of positions, prompts shorter
// than the conv, E not a multiple of the cluster's channels (whole slices
// then idle), and 1 to 4 taps.
func TestConvXProjKernel(t *testing.T) {
	fn, s := gpu(t)
	if d := gputest.Device(t); d.Major < 8 {
		t.Skipf("conv_xproj needs sm_80 or newer; this GPU is sm_%d%d", d.Major, d.Minor)
	}
	for _, dt := range []cuda.DType{cuda.BF16, cuda.F16} {
		for _, tc := range []struct{ B, T, E, K, J int }{
			{1, 1, 64, 4, 80}, {2, 37, 96, 3, 20}, {1, 130, 1536, 4, 80}, {2, 300, 2048, 4, 96},
			{3, 65, 520, 2, 44}, {2, 2, 64, 4, 16}, {1, 64, 512, 1, 8},
		} {
			B, T, E, K, J := tc.B, tc.T, tc.E, tc.K, tc.J
			rows := B * T
			xz, win, w, bias := randn(rows*2*E, 1), randn(B*E*K, 1), randn(E*K, 0.5), randn(E, 0.1)
			wx, wxPacked := pack16(dt, randn(J*E, 0.05))
			bxz, bw, bb, bwx := upload(t, s, xz), upload(t, s, w), upload(t, s, bias), upload(t, s, wxPacked)
			// conv_silu's u and windows
			winRef, uRef := upload(t, s, win), poisoned(t, s, rows*E/2)
			conv := gpuengine.Conv{XZ: bxz.Ptr, LDX: 2 * E, Window: winRef.Ptr, W: bw.Ptr, Bias: bb.Ptr, U: uRef.Ptr,
				B: B, T: T, E: E, K: K, DType: dt}
			if err := conv.Launch(fn, s); err != nil {
				t.Fatal(err)
			}
			// the fused kernel's, twice with the same counters (the second from
			// the same inputs: the same bits, so the first left them at zero)
			count := upload(t, s, make([]float32, gpuengine.ConvXProjCounters(B, T)))
			for run := 0; run < 2; run++ {
				bwin, bu, bdbl := upload(t, s, win), poisoned(t, s, rows*E/2), poisoned(t, s, rows*J)
				part := poisoned(t, s, rows*8*J)
				fused := conv
				fused.Window, fused.U = bwin.Ptr, bu.Ptr
				cx := gpuengine.ConvXProj{Conv: fused, XProj: bwx.Ptr, DBL: bdbl.Ptr, J: J, Part: part.Ptr, Count: count.Ptr}
				if err := cx.Launch(fn, s); err != nil {
					t.Fatal(err)
				}
				label := fmt.Sprintf("%s %+v run %d", dt, tc, run)
				wantU := download(t, s, uRef, rows*E/2)
				if i := firstDiff(download(t, s, bu, rows*E/2), wantU); i >= 0 {
					t.Errorf("%s: u differs from conv_silu's at pair %d", label, i)
				}
				if i := firstDiff(download(t, s, bwin, B*E*K), download(t, s, winRef, B*E*K)); i >= 0 {
					t.Errorf("%s: window differs from conv_silu's at %d", label, i)
				}
				u := unpack16(dt, wantU)
				want := gemmNT64(u, E, wx, rows, J, E)
				if e := relErr(download(t, s, bdbl, rows*J), want); !(e <= 1e-5) {
					t.Errorf("%s: dbl rel err %.3g", label, e)
				}
				for i, v := range download(t, s, count, gpuengine.ConvXProjCounters(B, T)) {
					if math.Float32bits(v) != 0 {
						t.Fatalf("%s: counter %d left at %d", label, i, math.Float32bits(v))
					}
				}
			}
			t.Logf("%s %+v ok", dt, tc)
		}
	}
}

// firstDiff returns the first index where a and b differ in bits, or -1.
func firstDiff(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// pack16 rounds v to dt (BF16 or F16) and returns the rounded values and
// their bits packed two to a float32 slot, element 2i in the low half.
func pack16(dt cuda.DType, v []float32) (rounded, packed []float32) {
	if dt == cuda.BF16 {
		return bf16Bits(v)
	}
	rounded, packed = make([]float32, len(v)), make([]float32, (len(v)+1)/2)
	words := make([]uint32, len(packed))
	for i, x := range v {
		h := float16.Fromfloat32(x)
		rounded[i] = h.Float32()
		words[i/2] |= uint32(h.Bits()) << (16 * (i % 2))
	}
	for i, w := range words {
		packed[i] = math.Float32frombits(w)
	}
	return rounded, packed
}

// unpack16 is the values of dt elements packed two to a float32 slot.
func unpack16(dt cuda.DType, packed []float32) []float32 {
	if dt == cuda.BF16 {
		return bf16Unpack(packed)
	}
	v := make([]float32, 2*len(packed))
	for i, p := range packed {
		w := math.Float32bits(p)
		v[2*i], v[2*i+1] = float16.Frombits(uint16(w)).Float32(), float16.Frombits(uint16(w>>16)).Float32()
	}
	return v
}
