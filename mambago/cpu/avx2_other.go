//go:build !amd64

package cpu

import "unsafe"

// hasAVX2 is false off amd64: the engine runs its Go loops, and the
// assembly kernels' stand-ins below are never called.
const hasAVX2 = false

// hasAVX512 is false off amd64, as hasAVX2.
const hasAVX512 = false

func scanRowAVX2(s, a2, b, c *float32, count int, dt, dtu float32, k *[11]float32) float32 {
	panic("unreachable")
}

func scanLanesAVX2(a *laneScan) { panic("unreachable") }

func scanLanesAVX512(a *laneScan) { panic("unreachable") }

func convLanesAVX2(a *laneConv) { panic("unreachable") }

func gemmRowsAVX2(a *rowsGemm) { panic("unreachable") }

func dotRowsAVX2(a *rowsGemm) { panic("unreachable") }

func gemmRowsAVX512(a *rowsGemm) { panic("unreachable") }

func dotRowsAVX512(a *rowsGemm) { panic("unreachable") }

func widenAVX2(dst *float32, src *uint16, n int, f16 bool) { panic("unreachable") }

func sgemmAVX2(k int, a *float32, lda int, w, c *float32, ldc int, add bool) { panic("unreachable") }

func sgemmAVX512(k int, a *float32, lda int, w, c *float32, ldc int, add bool) { panic("unreachable") }

func transpose16(src unsafe.Pointer, lds, kind int, dst *float32, ldd int) { panic("unreachable") }

func transpose8(src unsafe.Pointer, lds, kind int, dst *float32, ldd int) { panic("unreachable") }

func prefetchRows(p unsafe.Pointer, stride, rows, lines int) { panic("unreachable") }
