#include "textflag.h"

// The scan's lane kernel in AVX-512F, sixteen channels a call (lanes.go).
// It keeps its constants in Z8-Z29; VZEROUPPER clears Z0-Z15's upper
// halves at its end, and Z16-Z31 have no SSE encodings to slow.

#include "lanes_amd64.h"

// EXP2NEG16 sets P to 2^X for X <= 0 in sixteen lanes, with the steps of
// lanes_amd64.s's EXP2NEG (so the same bits): X clamped to -126,
// k = trunc(X - 1/2), a degree-6 polynomial of (X - k)·ln 2, scaled by 2^k
// (VSCALEFPS). Constants: Z8 -126, Z9 1/2, Z10 ln 2, Z11 1, Z14-Z17 the
// polynomial's x^6 to x^3. It overwrites X and K.
#define EXP2NEG16(X, K, P) \
	VMAXPS Z8, X, X; \
	VSUBPS Z9, X, K; \
	VRNDSCALEPS $11, K, K; \
	VSUBPS K, X, X; \
	VMULPS Z10, X, X; \
	VMOVAPS Z14, P; \
	VFMADD213PS Z15, X, P; \
	VFMADD213PS Z16, X, P; \
	VFMADD213PS Z17, X, P; \
	VFMADD213PS Z9, X, P; \
	VFMADD213PS Z11, X, P; \
	VFMADD213PS Z11, X, P; \
	VSCALEFPS K, P, P

// NEGEXP16 sets P to e^-|X| in sixteen lanes; it keeps X and overwrites T
// and K. Z18 holds log2(e), Z19 the sign mask, Z27 zero.
#define NEGEXP16(X, T, K, P) \
	VPANDD Z19, X, T; \
	VMULPS Z18, T, T; \
	VSUBPS T, Z27, T; \
	EXP2NEG16(T, K, P)

// SILU16 sets S to silu(X) = (X ≥ 0 ? X : X·e)/(1 + e), e = e^-|X|, in
// sixteen lanes; it keeps X and overwrites A, B and C (and K1).
#define SILU16(X, A, B, C, S) \
	NEGEXP16(X, A, B, S); \
	VADDPS Z11, S, B; \
	VMULPS S, X, C; \
	VCMPPS $0x1d, Z27, X, K1; \
	VMOVAPS X, K1, C; \
	VDIVPS B, C, S

// func scanLanesAVX512(a *laneScan)
//
// scanLanesAVX2 in sixteen channels at once, a whole lane block of a.a2t
// and a.state ([N][16]); a.dtBias and a.d hold sixteen values.
TEXT ·scanLanesAVX512(SB), NOSPLIT, $0-8
	SCANARGS
	TESTQ CX, CX
	JLE done
	VBROADCASTSS K_CLAMP(R13), Z8
	VBROADCASTSS K_HALF(R13), Z9
	VBROADCASTSS K_LN2(R13), Z10
	VBROADCASTSS K_ONE(R13), Z11
	VBROADCASTSS K_P6(R13), Z14
	VBROADCASTSS K_P5(R13), Z15
	VBROADCASTSS K_P4(R13), Z16
	VBROADCASTSS K_P3(R13), Z17
	VBROADCASTSS K_LOG2E(R13), Z18
	VBROADCASTSS K_ABS(R13), Z19
	VBROADCASTSS K_TWO(R13), Z20
	VBROADCASTSS K_TWENTY(R13), Z21
	VBROADCASTSS K_S11(R13), Z22
	VBROADCASTSS K_S9(R13), Z23
	VBROADCASTSS K_S7(R13), Z24
	VBROADCASTSS K_S5(R13), Z25
	VBROADCASTSS K_S3(R13), Z26
	VPXORD Z27, Z27, Z27
	VMOVUPS DTBIAS(AX), Z28
	VMOVUPS DSKIP(AX), Z29

position:
	SCANAHEAD
	// dt = softplus(delta + dt_bias), as scanLanesAVX2.
	VADDPS (DI), Z28, Z3
	NEGEXP16(Z3, Z4, Z6, Z5)    // Z5 = y
	VADDPS Z20, Z5, Z6
	VDIVPS Z6, Z5, Z6           // sv
	VMULPS Z6, Z6, Z7           // sv²
	VMOVAPS Z22, Z4
	VFMADD213PS Z23, Z7, Z4
	VFMADD213PS Z24, Z7, Z4
	VFMADD213PS Z25, Z7, Z4
	VFMADD213PS Z26, Z7, Z4
	VFMADD213PS Z11, Z7, Z4     // the series
	VADDPS Z6, Z6, Z6           // 2·sv
	VMULPS Z4, Z6, Z6           // log1p(y)
	VMAXPS Z27, Z3, Z4          // max(x, 0)
	VADDPS Z6, Z4, Z0
	VCMPPS $0x1e, Z21, Z3, K1   // x > 20
	VMOVAPS Z3, K1, Z0          // dt
	VMOVUPS (SI), Z13           // u
	VMULPS Z13, Z0, Z1          // dt·u
	VPXORD Z2, Z2, Z2           // acc
	MOVQ R10, DX
	ADDQ NBYTES(AX), DX         // this position's C
	XORQ BX, BX                 // 4·n
	XORQ R14, R14               // n·rowN, in a2t and the states

state:
	VMULPS (R11)(R14*1), Z0, Z3 // dt·a2_n
	EXP2NEG16(Z3, Z4, Z5)
	VMULPS (R12)(R14*1), Z5, Z6 // 2^(dt·a2_n)·s_n
	VBROADCASTSS (R10)(BX*1), Z7
	VFMADD231PS Z7, Z1, Z6      // + dt·u·B_n
	VMOVUPS Z6, (R12)(R14*1)
	VBROADCASTSS (DX)(BX*1), Z7
	VFMADD231PS Z7, Z6, Z2      // acc += s_n·C_n
	ADDQ $4, BX
	ADDQ ROWN(AX), R14
	CMPQ BX, NBYTES(AX)
	JLT state

	// y = (acc + D·u)·silu(z)
	VFMADD231PS Z29, Z13, Z2
	VMOVUPS (R8), Z3
	SILU16(Z3, Z4, Z6, Z7, Z5)
	VMULPS Z5, Z2, Z2
	VMOVUPS Z2, (R9)
	NEXTPOSITION
	DECQ CX
	JNZ position

done:
	VZEROUPPER
	RET
