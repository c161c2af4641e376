#include "textflag.h"

// func scanRowAVX2(s, a2, b, c *float32, count int, dt, dtu float32, k *[11]float32) float32
//
// For eight n at a time: x = max(dt·a2, -126); k = trunc(x - 1/2); r = (x-k)·ln2;
// e = poly(r)·2^k; s = e·s + dtu·b; acc += s·c. Mirrors exp2neg and scanRow.
TEXT ·scanRowAVX2(SB), NOSPLIT, $0-60
	MOVQ s+0(FP), DI
	MOVQ a2+8(FP), SI
	MOVQ b+16(FP), R8
	MOVQ c+24(FP), R9
	MOVQ count+32(FP), CX
	MOVQ k+48(FP), R10
	VBROADCASTSS dt+40(FP), Y0
	VBROADCASTSS dtu+44(FP), Y1
	VXORPS Y2, Y2, Y2
	VBROADCASTSS 0(R10), Y3   // -126
	VBROADCASTSS 4(R10), Y4   // 1/2
	VBROADCASTSS 8(R10), Y5   // ln 2
	VBROADCASTSS 12(R10), Y6  // 1/720
	VBROADCASTSS 16(R10), Y7  // 1/120
	VBROADCASTSS 20(R10), Y8  // 1/24
	VBROADCASTSS 24(R10), Y9  // 1/6
	VBROADCASTSS 28(R10), Y10 // 1/2
	VBROADCASTSS 32(R10), Y11 // 1
	VBROADCASTSS 40(R10), Y12 // 127 (int32)

loop:
	VMOVUPS (SI), Y13
	VMULPS Y0, Y13, Y13       // x = dt·a2
	VMAXPS Y3, Y13, Y13       // x = max(x, -126)
	VSUBPS Y4, Y13, Y14       // x - 1/2
	VCVTTPS2DQ Y14, Y14       // k = trunc(x - 1/2)
	VCVTDQ2PS Y14, Y15
	VSUBPS Y15, Y13, Y13      // f = x - k
	VMULPS Y5, Y13, Y13       // r = f·ln2
	VMOVAPS Y6, Y15           // p = 1/720
	VFMADD213PS Y7, Y13, Y15  // p = p·r + 1/120
	VFMADD213PS Y8, Y13, Y15  // p = p·r + 1/24
	VFMADD213PS Y9, Y13, Y15  // p = p·r + 1/6
	VFMADD213PS Y10, Y13, Y15 // p = p·r + 1/2
	VFMADD213PS Y11, Y13, Y15 // p = p·r + 1
	VFMADD213PS Y11, Y13, Y15 // p = p·r + 1
	VPADDD Y12, Y14, Y14
	VPSLLD $23, Y14, Y14      // 2^k as float bits
	VMULPS Y14, Y15, Y15      // e = p·2^k
	VMOVUPS (DI), Y13
	VMULPS Y15, Y13, Y13      // e·s
	VMOVUPS (R8), Y14
	VFMADD231PS Y14, Y1, Y13  // s = e·s + dtu·b
	VMOVUPS Y13, (DI)
	VMOVUPS (R9), Y14
	VFMADD231PS Y14, Y13, Y2  // acc += s·c
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, R8
	ADDQ $32, R9
	SUBQ $8, CX
	JGT loop

	VEXTRACTF128 $1, Y2, X3
	VADDPS X3, X2, X2
	VHADDPS X2, X2, X2
	VHADDPS X2, X2, X2
	VZEROUPPER
	MOVSS X2, ret+56(FP)
	RET
