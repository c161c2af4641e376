package cpu

import (
	"math"
)

// scanRow advances one channel's SSM state by one position and returns its
// contribution to y:
//
//	s[n] = exp2(dt·a2[n])·s[n] + dtu·b[n],   acc = Σ_n s[n]·c[n]
//
// with a2 = A·log2(e) and dtu = dt·u. It is the scan's inner loop: on CPUs
// with AVX2 and FMA, eight n at a time in assembly (scanrow_amd64.s).
func scanRow(s, a2, b, c []float32, dt, dtu float32) float32 {
	a2, b, c = a2[:len(s)], b[:len(s)], c[:len(s)]
	var acc float32
	n := 0
	if useAVX2 && len(s) >= 8 {
		n = len(s) &^ 7
		acc = scanRowAVX2(&s[0], &a2[0], &b[0], &c[0], n, dt, dtu, &scanConsts)
	}
	var acc0, acc1 float32 // two chains, so the adds overlap
	for ; n+1 < len(s); n += 2 {
		s0 := exp2neg(dt*a2[n])*s[n] + dtu*b[n]
		s1 := exp2neg(dt*a2[n+1])*s[n+1] + dtu*b[n+1]
		s[n], s[n+1] = s0, s1
		acc0 += s0 * c[n]
		acc1 += s1 * c[n+1]
	}
	if n < len(s) {
		s[n] = exp2neg(dt*a2[n])*s[n] + dtu*b[n]
		acc0 += s[n] * c[n]
	}
	return acc + acc0 + acc1
}

// useAVX2 selects the assembly kernel; tests turn it off to check the Go loop.
var useAVX2 = hasAVX2

// useLanes runs the scan eight channels at a time (scanLanes); tests turn
// it off to check it against the channel-at-a-time loop.
var useLanes = hasAVX2

// useWideLanes runs the scan's lanes sixteen channels at a time where the
// CPU has AVX-512F (scanLanesAVX512, with useLanes); tests turn it off to
// check it against the eight-channel kernel, bit for bit.
var useWideLanes = hasAVX512

// scanConsts are exp2neg's constants, as the assembly kernel loads them:
// the clamp, 1/2, ln 2, the polynomial from x^6 down to x^0, and 127 (as bits).
var scanConsts = [11]float32{
	-126, 0.5, math.Ln2,
	1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1, 1,
	math.Float32frombits(127),
}
