package gpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
)

// TestOnePassStates pins OnePassStates to the cases it was measured on (an
// H200: 132 SMs), as its comment gives them, and to one below its bound.
func TestOnePassStates(t *testing.T) {
	for _, c := range []struct {
		name               string
		B, T, E, want, sms int
	}{
		{"130m B=1 T=2048", 1, 2048, 1536, 2, 132},
		{"130m B=1 T=8192", 1, 8192, 1536, 2, 132},
		{"130m B=8 T=2048", 8, 2048, 1536, 4, 132},
		{"370m B=1 T=2048", 1, 2048, 2048, 2, 132},
		{"370m B=1 T=8192", 1, 8192, 2048, 2, 132},
		{"130m B=1 T=2048 on 200 SMs", 1, 2048, 1536, 0, 200}, // 0.48 warps a scheduler
		{"1.4b B=1 T=2048", 1, 2048, 4096, 2, 132},
		{"1.4b B=1 T=8192", 1, 8192, 4096, 2, 132},
		{"1.4b B=8 T=2048", 8, 2048, 4096, 4, 132},
		{"2.8b B=8 T=8192", 8, 8192, 5120, 4, 132},
	} {
		if got := OnePassStates(c.B, c.E, c.sms); got != c.want {
			t.Errorf("%s: OnePassStates = %d, want %d", c.name, got, c.want)
		}
	}
}

// TestScanTMAApplies pins, without a GPU, where the scan's tiles come
// through the copy engine (Scan.TMA): the engine's bf16 scan at B=1 of the
// 130m and 370m shapes as the prefill lays it out, not at B=8, nor with
// d_state 8, nor without the time step in the scan's tiles.
func TestScanTMAApplies(t *testing.T) {
	const ptr = cuda.Ptr(1 << 20) // any 16-byte-aligned address
	scan := func(B, E, R, N, products int) Scan {
		return Scan{DBL: ptr, LDD: R + 2*N, R: R, U: ptr, Z: ptr + cuda.Ptr(4*E), LDZ: 2 * E, B: B, T: 2048, E: E, N: N,
			DType: cuda.BF16, OnePass: OnePassStates(B, E, 132), Helpers: true, SMs: 132, DTProducts: products, TMA: true}
	}
	for _, c := range []struct {
		name string
		s    Scan
		want bool
	}{
		{"130m B=1", scan(1, 1536, 48, 16, 1), true},
		{"370m B=1", scan(1, 2048, 64, 16, 1), true},
		{"130m B=1, f16's three products", scan(1, 1536, 48, 16, 3), true},
		{"130m B=8", scan(8, 1536, 48, 16, 1), false},
		{"130m B=1, d_state 8", scan(1, 1536, 48, 8, 1), false},
		{"130m B=1, dt_proj's own kernel", scan(1, 1536, 48, 16, 0), false},
		{"1.4b B=1 (dt_rank 128)", scan(1, 4096, 128, 16, 1), false},
	} {
		if got := c.s.TMAApplies(); got != c.want {
			t.Errorf("%s: TMAApplies = %v, want %v", c.name, got, c.want)
		}
		off := c.s
		off.TMA = false
		if off.TMAApplies() {
			t.Errorf("%s: applies with TMA off", c.name)
		}
	}
}

// TestWantedKernelsAreEntries checks, without a GPU, that every kernel the
// engine looks up is an entry of some unit in kernels/ (loadKernels fails
// otherwise).
func TestWantedKernelsAreEntries(t *testing.T) {
	entries := map[string]bool{}
	for _, u := range kernels.Units() {
		for _, k := range u.Entries() {
			entries[k] = true
		}
	}
	for _, k := range wantedKernels() {
		if !entries[k] {
			t.Errorf("kernel %s is in no source of kernels/", k)
		}
	}
}

// TestOnePassSharedMatchesKernel compiles, through NVRTC (no GPU needed),
// static_asserts that onePassShared gives the sizes kernels/scan_onepass.cu
// computes for its entries' tiles and rings, helpersShared those of the
// entry whose warps specialize (a kernel launched with less traps), and
// that scan_fixup's block, blocks an SM and shared memory are Go's.
func TestOnePassSharedMatchesKernel(t *testing.T) {
	gputest.NeedNVRTC(t)
	src, err := kernels.Source("scan_onepass.cu")
	if err != nil {
		t.Fatal(err)
	}
	var checks strings.Builder
	for _, spt := range []int{2, 4} {
		for _, size := range []int{4, 2} {
			fmt.Fprintf(&checks, "static_assert(onepass_shared(%d, onepass_config<%d>::TL, onepass_config<%d>::BUF, %d) == %d, "+
				"\"gpu.onePassShared(%d, %d) differs from the kernel's size\");\n", spt, spt, spt, size,
				onePassShared(spt, size), spt, size)
		}
	}
	for _, size := range []int{4, 2} { // the entries whose warps specialize (helpersKernel)
		for _, dtf := range []bool{false, true} {
			fmt.Fprintf(&checks, "static_assert(onepass_ws_shared(2, onepass_config<2>::TL, OP_WS_BUF, %d, %v) == %d && "+
				"OP_DL == %d && OP_RMAX == %d, \"gpu.helpersShared(%d, %v) or onePassDL differs from the kernel's\");\n",
				size, dtf, helpersShared(size, dtf), onePassDL, onePassRMax, size, dtf)
		}
	}
	fmt.Fprintf(&checks, "static_assert(OP_WS_BUF == %d && OP_WS_SP == %d, \"gpu.helpersRing or helpersSums differs\");\n",
		helpersRing, helpersSums)
	for _, size := range []int{4, 2} { // the segmented walk's entry (segmentKernel)
		fmt.Fprintf(&checks, "static_assert(onepass_shared(2, OP_TLS, OP_BUFS, %d) == %d && OP_TLS == %d, "+
			"\"gpu.segmentShared(%d) or segmentAlign differs from the kernel's\");\n", size, segmentShared(size),
			segmentAlign, size)
	}
	fmt.Fprintf(&checks, "static_assert(FX_WARPS * 32 == %d && FX_BLOCKS == %d && FX_SEGS == %d, "+
		"\"gpu.fixupThreads, fixupBlocksPerSM or maxSegments differs from the kernel's\");\n", fixupThreads,
		fixupBlocksPerSM, maxSegments)
	for S := 2; S <= maxSegments; S++ {
		fmt.Fprintf(&checks, "static_assert(fixup_shared(%d) == %d, \"gpu.fixupShared(%d) differs from the kernel's\");\n",
			S, fixupShared(S), S)
	}
	if _, err := cuda.Compile(src+checks.String(), "scan_onepass.cu", "sm_90", "--std=c++17"); err != nil {
		t.Fatal(err)
	}
	// A build with other tiles and rings (the tuning knobs) against
	// OnePassShared.
	checks.Reset()
	for _, spt := range []int{2, 4} {
		fmt.Fprintf(&checks, "static_assert(onepass_shared(%d, onepass_config<%d>::TL, onepass_config<%d>::BUF, 2) == %d, "+
			"\"gpu.OnePassShared differs from the kernel's size\");\n", spt, spt, spt, OnePassShared(spt, 16*spt, 6-spt, 2))
	}
	if _, err := cuda.Compile(src+checks.String(), "scan_onepass.cu", "sm_90", "--std=c++17",
		"-DOP_TL2=32", "-DOP_BUF2=4", "-DOP_TL4=64", "-DOP_BUF4=2"); err != nil {
		t.Fatal(err)
	}
	// And the warps that specialize with another ring and tiles of partial
	// sums (OP_WS_BUF, OP_WS_SP) against HelpersShared.
	checks.Reset()
	for _, dtf := range []bool{false, true} {
		fmt.Fprintf(&checks, "static_assert(onepass_ws_shared(2, onepass_config<2>::TL, OP_WS_BUF, 2, %v) == %d, "+
			"\"gpu.HelpersShared differs from the kernel's size\");\n", dtf, HelpersShared(3, 3, 2, dtf))
	}
	if _, err := cuda.Compile(src+checks.String(), "scan_onepass.cu", "sm_90", "--std=c++17",
		"-DOP_WS_BUF=3", "-DOP_WS_SP=3"); err != nil {
		t.Fatal(err)
	}
}

// TestSegments pins OnePassSegments to the shapes it was written for (an
// H200: 132 SMs) and segmentLen to whole, nonempty segments.
func TestSegments(t *testing.T) {
	for _, c := range []struct {
		name               string
		B, T, E, spt, want int
	}{
		{"130m B=1 T=2048", 1, 2048, 1536, 2, 4},
		{"130m B=1 T=8192", 1, 8192, 1536, 2, 4},
		{"130m B=1 T=512", 1, 512, 1536, 2, 2},
		{"130m B=1 T=300", 1, 300, 1536, 2, 1},
		{"130m B=2 T=2048", 2, 2048, 1536, 2, 2},
		{"370m B=1 T=2048", 1, 2048, 2048, 2, 3},
		{"1.4b B=1 T=2048", 1, 2048, 4096, 2, 1},
		{"130m B=8 T=2048", 8, 2048, 1536, 4, 1},
	} {
		if got := OnePassSegments(c.B, c.T, c.E, c.spt, 132); got != c.want {
			t.Errorf("%s: OnePassSegments = %d, want %d", c.name, got, c.want)
		}
	}
	for T := 1; T <= 3000; T++ {
		for S := 0; S <= 12; S++ {
			Ts, n := segmentLen(T, S)
			if n < 1 || n > max(1, min(S, maxSegments)) || (n > 1 && Ts%segmentAlign != 0) || (n-1)*Ts >= T || n*Ts < T {
				t.Fatalf("segmentLen(%d, %d) = %d, %d", T, S, Ts, n)
			}
		}
	}
}

// TestScanScratchBound checks, without a GPU, that the workspace's scan
// scratch (scanScratchBound) holds what every split of its rows into B
// sequences of T positions asks for: the chunked scan's summaries, and
// with segments on, every walk in segments' end states.
func TestScanScratchBound(t *testing.T) {
	const E, N = 64, 16
	for rows := 1; rows <= 1200; rows++ {
		plain, seg := scanScratchBound(rows, E, N, 0, false), scanScratchBound(rows, E, N, 0, true)
		for B := 1; B <= rows; B++ {
			if rows%B != 0 {
				continue
			}
			T := rows / B
			if n := (Scan{B: B, T: T, E: E, N: N, LDZ: 2 * E}).ScratchFloats(); n > plain {
				t.Fatalf("rows %d, B=%d T=%d: the chunked scan needs %d floats, the bound is %d", rows, B, T, n, plain)
			}
			for S := 2; S <= 12; S++ {
				s := Scan{B: B, T: T, E: E, N: N, LDZ: 2 * E, OnePass: 2, Segments: S}
				if n := s.ScratchFloats(); n > seg {
					t.Fatalf("rows %d, B=%d T=%d, %d segments: %d floats, the bound is %d", rows, B, T, S, n, seg)
				}
			}
		}
	}
}
