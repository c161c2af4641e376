package cpu

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// hasAVX2 reports that this CPU (and its OS) runs AVX2, FMA and F16C, which the
// assembly kernels below (scanrow_amd64.s, lanes_amd64.s) need; without it
// the engine runs its Go loops.
var hasAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA && hasF16C()

// hasAVX512 reports that this CPU (and its OS) also runs AVX-512F, which
// scanLanesAVX512 (lanes512_amd64.s) needs.
var hasAVX512 = hasAVX2 && cpu.X86.HasAVX512F

// hasF16C reads CPUID's F16C bit (leaf 1, ECX bit 29: VCVTPH2PS), which
// golang.org/x/sys/cpu does not report. Every CPU with AVX2 has it so far.
func hasF16C() bool

// scanRowAVX2 is scanRow's loop over n = 0..count-1 (count a multiple of 8)
// in AVX2/FMA; k points at scanConsts. It returns Σ s[n]·c[n].
//
//go:noescape
func scanRowAVX2(s, a2, b, c *float32, count int, dt, dtu float32, k *[11]float32) float32

// scanLanesAVX2 runs a lane call of the scan (lanes.go) in AVX2/FMA.
//
//go:noescape
func scanLanesAVX2(a *laneScan)

// convLanesAVX2 runs a lane call of the conv (lanes.go) in AVX2/FMA.
//
//go:noescape
func convLanesAVX2(a *laneConv)

// gemmRowsAVX2 runs gemmRows' dot products (lanes.go) in AVX2/FMA.
//
//go:noescape
func gemmRowsAVX2(a *rowsGemm)

// dotRowsAVX2 runs gemmRows' dot products for one row of A against W of
// any Storage (lanes.go) in AVX2/FMA/F16C.
//
//go:noescape
func dotRowsAVX2(a *rowsGemm)

// widenAVX2 widens n (a positive multiple of 8) bfloat16 or (f16) float16
// values at src to float32 at dst (storage.go), in AVX2/F16C.
//
//go:noescape
func widenAVX2(dst *float32, src *uint16, n int, f16 bool)

// scanLanesAVX512 runs a lane call of the scan on sixteen channels
// (lanes.go) in AVX-512F.
//
//go:noescape
func scanLanesAVX512(a *laneScan)

// gemmRowsAVX512 runs gemmRows' dot products for eight rows of A, four rows
// of W a group, in AVX-512F (lanes512_amd64.s): gemmRowsAVX2's sums, bit
// for bit, at twice the FMAs a cycle.
//
//go:noescape
func gemmRowsAVX512(a *rowsGemm)

// dotRowsAVX512 runs gemmRows' dot products for one row of A against W of
// any Storage, four rows of W a group, in AVX-512F (lanes512_amd64.s).
//
//go:noescape
func dotRowsAVX512(a *rowsGemm)

// sgemmAVX2 is sgemm's 6 × 16 micro-kernel in AVX2/FMA (sgemm_amd64.s):
// the sums of k products of six rows of A at a (lda floats apart) and the
// W panel [k][16], stored into C at c (rows ldc floats apart), or added to
// it where add.
//
//go:noescape
func sgemmAVX2(k int, a *float32, lda int, w, c *float32, ldc int, add bool)

// sgemmAVX512 is sgemm's 12 × 32 micro-kernel in AVX-512F, as sgemmAVX2.
//
//go:noescape
func sgemmAVX512(k int, a *float32, lda int, w, c *float32, ldc int, add bool)

// transpose16 writes the 16 × 16 block at src (rows lds bytes apart, of
// float32, bfloat16 or float16 values as the Storage kind says) transposed,
// as float32, to dst (rows ldd bytes apart), in AVX-512F
// (sgemm_amd64.s): packPanel's inner step.
//
//go:noescape
func transpose16(src unsafe.Pointer, lds, kind int, dst *float32, ldd int)

// transpose8 is transpose16 for an 8 × 8 block, in AVX2/F16C: packPanel's
// inner step where the AVX2 micro-kernel runs (sgemm_amd64.s).
//
//go:noescape
func transpose8(src unsafe.Pointer, lds, kind int, dst *float32, ldd int)

// prefetchRows asks L2 for lines 64-byte cache lines of each of rows rows,
// the first at p and each stride bytes after the one before (rows and
// lines at least 1): sgemmTile's request for the next micro-panel's rows of
// W while it multiplies this one (sgemm_amd64.s).
//
//go:noescape
func prefetchRows(p unsafe.Pointer, stride, rows, lines int)
