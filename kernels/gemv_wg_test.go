package kernels_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
)

// gemvWG runs kernels/gemv_wg.cu's GEMV: x's three bf16 parts (x_parts_bf16)
// into parts, then gemv_wg_bf16 on W's tensor map (rows x K bf16) and the
// parts'. xmap is the parts' tensor map (newGemvWGParts).
func gemvWG(fn func(string) *cuda.Function, s *cuda.Stream, wmap, xmap cuda.TensorMap, x, parts, bias, out cuda.Ptr,
	ldx, ldo, accumulate, B, K, rows int, withParts bool) error {
	if withParts {
		if err := fn("x_parts_bf16").Launch(cuda.Dim3{X: (K + 255) / 256, Y: 8, Z: 1}, cuda.D1(256), 0, s, x, ldx, B, K,
			parts); err != nil {
			return err
		}
	}
	return fn("gemv_wg_bf16").Launch(cuda.D1((rows+63)/64), cuda.D1(160), gemvWGShared, s, wmap, xmap, bias, out, ldo,
		accumulate, B, K, rows)
}

// gemvWGShared is gemv_wg_shared() at the source's GW_STAGES (8).
var gemvWGShared = gemvWGSharedFor(8)

// gemvWGSharedFor is gemv_wg_shared() for a ring of stages stages: 12 KB
// stages, 1024 bytes of alignment, two barriers a stage.
func gemvWGSharedFor(stages int) int { return stages*(64*64*2+4096) + 1024 + 2*stages*8 }

// needSM90 skips where d is no sm_90 GPU (wgmma and tensor maps need sm_90a).
func needSM90(tb testing.TB) {
	tb.Helper()
	if d := gputest.Device(tb); d.Major != 9 || d.Minor != 0 {
		tb.Skipf("gemv_wg needs sm_90a (wgmma); this GPU is sm_%d%d", d.Major, d.Minor)
	}
}

// TestGEMVWGKernel checks gemv_wg_bf16 (with x_parts_bf16 before it)
// against float64 sums of the stored bf16 weights times x in f32: within
// 1e-5 relative error, over NaNs where it writes and onto random values
// where it accumulates. Shapes: partial blocks of rows and a K that is not
// a multiple of 64 (the tensor maps' zeros past the edges), B = 1, 3, 5 and
// 8, and the 1.4b in_proj size.
func TestGEMVWGKernel(t *testing.T) {
	fn, s := gpu(t)
	needSM90(t)
	if err := fn("gemv_wg_bf16").SetMaxDynamicShared(gemvWGShared); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rows, K, B int
		accu, bias bool
	}{{130, 136, 3, false, true}, {64, 64, 8, true, false}, {200, 1000, 5, true, true}, {8192, 2048, 8, false, true},
		{37, 2560, 1, false, false}} {
		name := fmt.Sprintf("gemv_wg_bf16 %+v", tc)
		ldx := tc.K + 4
		x, W, bias, out0 := randn(tc.B*ldx, 1), randn(tc.rows*tc.K, 0.1), randn(tc.rows, 1), randn(tc.B*tc.rows, 1)
		W, packed := bf16Bits(W)
		bx, bW, bb := upload(t, s, x), upload(t, s, packed), upload(t, s, bias)
		parts := poisoned(t, s, 24*tc.K/2) // 24 rows of K bf16
		bo := poisoned(t, s, tc.B*tc.rows)
		if tc.accu {
			bo = upload(t, s, out0)
		}
		wmap, err := cuda.NewTensorMap2D(cuda.BF16, bW.Ptr, tc.rows, tc.K, tc.K, 64, 64)
		if err != nil {
			t.Fatal(err)
		}
		xmap, err := cuda.NewTensorMap2D(cuda.BF16, parts.Ptr, 24, tc.K, tc.K, 24, 64)
		if err != nil {
			t.Fatal(err)
		}
		bptr, accu := cuda.Ptr(0), 0
		if tc.bias {
			bptr = bb.Ptr
		}
		if tc.accu {
			accu = 1
		}
		if err := gemvWG(fn, s, wmap, xmap, bx.Ptr, parts.Ptr, bptr, bo.Ptr, ldx, tc.rows, accu, tc.B, tc.K, tc.rows,
			true); err != nil {
			t.Fatal(err)
		}
		want := make([]float64, tc.B*tc.rows)
		for b := range tc.B {
			for n := range tc.rows {
				var sum float64
				for k := range tc.K {
					sum += float64(W[n*tc.K+k]) * float64(x[b*ldx+k])
				}
				if tc.bias {
					sum += float64(bias[n])
				}
				if tc.accu {
					sum += float64(out0[b*tc.rows+n])
				}
				want[b*tc.rows+n] = sum
			}
		}
		got := download(t, s, bo, tc.B*tc.rows)
		if e := relErr(got, want); e > 1e-5 || math.IsNaN(e) {
			t.Errorf("%s: rel err %.3g", name, e)
		} else {
			t.Logf("%s: rel err %.3g", name, e)
		}
	}
}
