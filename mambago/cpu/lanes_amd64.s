#include "textflag.h"

#include "lanes_amd64.h"

// LOADK loads the constants every exp2 needs, from laneK at R13, into
// Y8-Y12: -126, 1/2, ln 2, 1 and 127 (as int32).
#define LOADK \
	VMOVUPS K_CLAMP(R13), Y8; \
	VMOVUPS K_HALF(R13), Y9; \
	VMOVUPS K_LN2(R13), Y10; \
	VMOVUPS K_ONE(R13), Y11; \
	VMOVUPS K_127(R13), Y12

// EXP2NEG sets P to 2^X for X <= 0 in eight lanes, as exp2neg (mathx.go)
// does: X clamped to -126, k = trunc(X - 1/2), a degree-6 polynomial of
// (X - k)·ln 2, times 2^k. It overwrites X, K and F.
#define EXP2NEG(X, K, F, P) \
	VMAXPS Y8, X, X; \
	VSUBPS Y9, X, K; \
	VCVTTPS2DQ K, K; \
	VCVTDQ2PS K, F; \
	VSUBPS F, X, X; \
	VMULPS Y10, X, X; \
	VMOVUPS K_P6(R13), P; \
	VFMADD213PS K_P5(R13), X, P; \
	VFMADD213PS K_P4(R13), X, P; \
	VFMADD213PS K_P3(R13), X, P; \
	VFMADD213PS Y9, X, P; \
	VFMADD213PS Y11, X, P; \
	VFMADD213PS Y11, X, P; \
	VPADDD Y12, K, K; \
	VPSLLD $23, K, K; \
	VMULPS K, P, P

// NEGEXP sets P to e^-|X| in eight lanes, through EXP2NEG; it keeps X and
// overwrites T, K and F.
#define NEGEXP(X, T, K, F, P) \
	VANDPS K_ABS(R13), X, T; \
	VMULPS K_LOG2E(R13), T, T; \
	VXORPS P, P, P; \
	VSUBPS T, P, T; \
	EXP2NEG(T, K, F, P)

// SILU sets S to silu(X) = (X ≥ 0 ? X : X·e)/(1 + e), e = e^-|X|, in eight
// lanes, as silu (mathx.go) does; it keeps X and overwrites A, B and C.
#define SILU(X, A, B, C, S) \
	NEGEXP(X, A, B, C, S); \
	VADDPS Y11, S, B; \
	VMULPS S, X, C; \
	VXORPS A, A, A; \
	VCMPPS $0x1d, A, X, A; \
	VBLENDVPS A, X, C, C; \
	VDIVPS B, C, S

// func scanLanesAVX2(a *laneScan)
//
// For each of a.T positions, in eight channels (lanes) at once:
//   dt  = softplus(delta + dt_bias)               (x above 20 taken as is)
//   s_n = 2^(dt·a2_n)·s_n + dt·u·B_n, acc = Σ_n s_n·C_n   for n < N
//   y   = (acc + D·u)·silu(z)
// as scan's scalar loop computes each channel (mixer.go).
TEXT ·scanLanesAVX2(SB), NOSPLIT, $0-8
	SCANARGS
	TESTQ CX, CX
	JLE done
	LOADK

position:
	SCANAHEAD
	// dt = softplus(x), x = delta + dt_bias: max(x, 0) + log1p(y) with
	// y = e^-|x|, log1p(y) = 2·sv·(1 + sv²/3 + ... + sv^10/11), sv = y/(2+y).
	VMOVUPS (DI), Y3
	VADDPS DTBIAS(AX), Y3, Y3
	NEGEXP(Y3, Y4, Y6, Y7, Y5)  // Y5 = y
	VADDPS K_TWO(R13), Y5, Y6
	VDIVPS Y6, Y5, Y6           // sv
	VMULPS Y6, Y6, Y7           // sv²
	VMOVUPS K_S11(R13), Y4
	VFMADD213PS K_S9(R13), Y7, Y4
	VFMADD213PS K_S7(R13), Y7, Y4
	VFMADD213PS K_S5(R13), Y7, Y4
	VFMADD213PS K_S3(R13), Y7, Y4
	VFMADD213PS Y11, Y7, Y4     // the series
	VADDPS Y6, Y6, Y6           // 2·sv
	VMULPS Y4, Y6, Y6           // log1p(y)
	VXORPS Y4, Y4, Y4
	VMAXPS Y4, Y3, Y4           // max(x, 0)
	VADDPS Y6, Y4, Y0
	VCMPPS $0x1e, K_TWENTY(R13), Y3, Y4 // x > 20
	VBLENDVPS Y4, Y3, Y0, Y0    // dt
	VMOVUPS (SI), Y13           // u
	VMULPS Y13, Y0, Y1          // dt·u
	VXORPS Y2, Y2, Y2           // acc
	MOVQ R10, DX
	ADDQ NBYTES(AX), DX         // this position's C
	XORQ BX, BX                 // 4·n
	XORQ R14, R14               // n·rowN

state:
	VMULPS (R11)(R14*1), Y0, Y3 // dt·a2_n
	EXP2NEG(Y3, Y4, Y7, Y5)
	VMULPS (R12)(R14*1), Y5, Y6 // 2^(dt·a2_n)·s_n
	VBROADCASTSS (R10)(BX*1), Y7
	VFMADD231PS Y7, Y1, Y6      // + dt·u·B_n
	VMOVUPS Y6, (R12)(R14*1)
	VBROADCASTSS (DX)(BX*1), Y7
	VFMADD231PS Y7, Y6, Y2      // acc += s_n·C_n
	ADDQ $4, BX
	ADDQ ROWN(AX), R14
	CMPQ BX, NBYTES(AX)
	JLT state

	// y = (acc + D·u)·silu(z)
	VFMADD231PS DSKIP(AX), Y13, Y2
	VMOVUPS (R8), Y3
	SILU(Y3, Y4, Y6, Y7, Y5)
	VMULPS Y5, Y2, Y2
	VMOVUPS Y2, (R9)
	NEXTPOSITION
	DECQ CX
	JNZ position

done:
	VZEROUPPER
	RET

// laneConv's fields (lanes.go; TestLaneScanLayout pins them).
#define CONV_XS 0
#define CONV_U 8
#define CONV_WIN 16
#define CONV_W 24
#define CONV_KONST 32
#define CONV_POSITIONS 40
#define CONV_KM1BYTES 48
#define CONV_ROWX 56
#define CONV_ROWU 64
#define CONV_ROWWIN 72
#define CONV_BIAS 80

// func convLanesAVX2(a *laneConv)
//
// For each of a.T positions, in eight channels (lanes) at once: the window
// [K][8] slides by one, taking the position's input as its newest entry
// (then the windows move on by a.rowWin bytes: the next sequence's, in a
// step of several);
// u = silu(bias + Σ_k w_k·window_k), summed from the oldest entry, as
// conv's scalar loop computes each channel (mixer.go).
TEXT ·convLanesAVX2(SB), NOSPLIT, $0-8
	MOVQ a+0(FP), AX
	MOVQ CONV_XS(AX), DI
	MOVQ CONV_U(AX), SI
	MOVQ CONV_WIN(AX), R11
	MOVQ CONV_W(AX), R12
	MOVQ CONV_KONST(AX), R13
	MOVQ CONV_POSITIONS(AX), CX
	TESTQ CX, CX
	JLE convdone
	LOADK

convposition:
	AHEAD(CONV_ROWX, CONV_AHEAD)
	PREFETCHT0 (DI)(DX*1)
	AHEAD(CONV_ROWU, CONV_AHEAD)
	PREFETCHT0 (SI)(DX*1)
	VMOVUPS CONV_BIAS(AX), Y2
	XORQ BX, BX           // 32·k

convtap:
	CMPQ BX, CONV_KM1BYTES(AX)
	JGE convnewest
	VMOVUPS 32(R11)(BX*1), Y3
	VMOVUPS Y3, (R11)(BX*1)        // window_k = window_{k+1}
	VFMADD231PS (R12)(BX*1), Y3, Y2 // acc += w_k·window_k
	ADDQ $32, BX
	JMP convtap

convnewest:
	VMOVUPS (DI), Y3
	VMOVUPS Y3, (R11)(BX*1)
	VFMADD231PS (R12)(BX*1), Y3, Y2
	SILU(Y2, Y4, Y6, Y7, Y5)       // u
	VMOVUPS Y5, (SI)
	ADDQ CONV_ROWX(AX), DI
	ADDQ CONV_ROWU(AX), SI
	ADDQ CONV_ROWWIN(AX), R11
	DECQ CX
	JNZ convposition

convdone:
	VZEROUPPER
	RET

// ROWS_ZERO clears the eight sums.
#define ROWS_ZERO \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7

// ROWS_FMA adds Y8 (eight columns of one row of W) times the eight
// interleaved rows of A at those columns (8·DX bytes into A) to Y0-Y7.
#define ROWS_FMA \
	VFMADD231PS 0(SI)(DX*8), Y8, Y0; \
	VFMADD231PS 32(SI)(DX*8), Y8, Y1; \
	VFMADD231PS 64(SI)(DX*8), Y8, Y2; \
	VFMADD231PS 96(SI)(DX*8), Y8, Y3; \
	VFMADD231PS 128(SI)(DX*8), Y8, Y4; \
	VFMADD231PS 160(SI)(DX*8), Y8, Y5; \
	VFMADD231PS 192(SI)(DX*8), Y8, Y6; \
	VFMADD231PS 224(SI)(DX*8), Y8, Y7

// ROWS4_FMA adds Y8 and Y9 (eight columns of two rows of W) times the four
// interleaved rows of A at those columns (4·DX bytes into A): the first
// row's sums to Y0-Y3, the second's to Y4-Y7, each load of A serving both.
#define ROWS4_FMA \
	VMOVUPS 0(SI)(DX*4), Y10; \
	VMOVUPS 32(SI)(DX*4), Y11; \
	VMOVUPS 64(SI)(DX*4), Y12; \
	VMOVUPS 96(SI)(DX*4), Y13; \
	VFMADD231PS Y10, Y8, Y0; \
	VFMADD231PS Y11, Y8, Y1; \
	VFMADD231PS Y12, Y8, Y2; \
	VFMADD231PS Y13, Y8, Y3; \
	VFMADD231PS Y10, Y9, Y4; \
	VFMADD231PS Y11, Y9, Y5; \
	VFMADD231PS Y12, Y9, Y6; \
	VFMADD231PS Y13, Y9, Y7

// NEXT_COLS16 moves on eight columns (16 bytes of a 16-bit row, 32 of A's)
// and compares the columns done with K8.
#define NEXT_COLS16 \
	ADDQ $16, BX; \
	ADDQ $32, DX; \
	CMPQ DX, R9

// ROWS_STEP16 and ROWS4_STEP16 take the next eight columns of one or two
// 16-bit rows of W, widened by WIDEN (WIDEN_BF16 or WIDEN_F16), into the
// sums, then NEXT_COLS16: the loops of the two groupings, one for each
// 16-bit kind.
#define ROWS_STEP16(WIDEN) \
	PREFETCHT0 W16_AHEAD(DI)(BX*1); \
	WIDEN((DI)(BX*1), Y8); \
	ROWS_FMA; \
	NEXT_COLS16

#define ROWS4_STEP16(WIDEN) \
	PREFETCHT0 (R14)(BX*2); \
	WIDEN((DI)(BX*1), Y8); \
	WIDEN((R12)(BX*1), Y9); \
	ROWS4_FMA; \
	NEXT_COLS16

// func gemmRowsAVX2(a *rowsGemm)
//
// Eight sums at a time over the first K8 columns (Y0-Y7, eight lanes each),
// added up across their lanes and stored side by side in out: with a.rows
// 8, one row of W against the eight interleaved rows of A; with 4, two rows
// of W against four rows of A (two or three rows of A, zero-padded, too).
// a.N counts those groups of rows of W. Fewer rows of A take fewer FMAs
// per byte of W, which bounds the eight-row loop (in L2 it runs about as
// fast as two four-row passes). A group's rows are separate streams, which
// the hardware prefetcher leaves short of the memory's rate: each step of a
// group prefetches as many bytes of the next group as it reads of its own,
// so that the next group is on its way whole; that alone took a bfloat16
// loop of four rows of W from 8 to 19 GB/s on one core. Four streams a
// group are still too many: a loop of four rows of W against two of A ran
// a 130m step of two sequences 1.08-1.12x slower than this one's two
// (out_proj's rows, 3 KB each, 2.9-3.3 against 2.2 ms), so it went.
// W's rows hold float32
// values, or 16-bit ones (bfloat16 or float16, as a.wkind says) that each
// load widens exactly; one loop a kind, picked once a group.
TEXT ·gemmRowsAVX2(SB), NOSPLIT, $0-8
	ROWSARGS
	MOVQ RG_ROWS(AX), AX
	TESTQ CX, CX
	JLE rowsdone
	CMPQ AX, $4
	JEQ rows4group

rowsrow:
	ROWS_ZERO
	XORQ DX, DX // 4·k; A's block of these eight columns is at 8·DX
	XORQ BX, BX // 2·k: the columns' offset in a 16-bit row of W
	CMPQ R11, $WK_BF16
	JEQ rowsbf16
	JGT rowsf16

rowscol:
	PREFETCHT0 1024(DI)(DX*1) // a kilobyte ahead in W: about 8% faster
	VMOVUPS (DI)(DX*1), Y8
	ROWS_FMA
	ADDQ $32, DX
	CMPQ DX, R9
	JLT rowscol
	JMP rowssum

rowsbf16:
	ROWS_STEP16(WIDEN_BF16)
	JLT rowsbf16
	JMP rowssum

rowsf16:
	ROWS_STEP16(WIDEN_F16)
	JLT rowsf16

rowssum:
	ROWS_SUM
	ADDQ R10, DI
	DECQ CX
	JNZ rowsrow
	JMP rowsdone

rows4group: // two rows of W, at DI and R12
	ROWS_ZERO
	XORQ DX, DX
	XORQ BX, BX
	LEAQ (DI)(R10*1), R12
	LEAQ (R12)(R10*1), R14 // the next group's rows
	CMPQ R11, $WK_BF16
	JEQ rows4bf16
	JGT rows4f16

rows4f32:
	PREFETCHT0 (R14)(DX*2)
	VMOVUPS (DI)(DX*1), Y8
	VMOVUPS (R12)(DX*1), Y9
	ROWS4_FMA
	ADDQ $32, DX
	CMPQ DX, R9
	JLT rows4f32
	JMP rows4sum

rows4bf16:
	ROWS4_STEP16(WIDEN_BF16)
	JLT rows4bf16
	JMP rows4sum

rows4f16:
	ROWS4_STEP16(WIDEN_F16)
	JLT rows4f16

rows4sum:
	ROWS_SUM
	LEAQ (DI)(R10*2), DI
	DECQ CX
	JNZ rows4group

rowsdone:
	VZEROUPPER
	RET

// func dotRowsAVX2(a *rowsGemm)
//
// gemmRowsAVX2 for one row of A (a decode step of one sequence), given
// plain (a.a is the row's first K8 columns), against W of any kind: for
// each of a.N rows of W one sum over the first K8 columns, stored as out's
// next float32. Two sums a row take turns on sixteen columns so that each
// FMA waits on the one before last.
TEXT ·dotRowsAVX2(SB), NOSPLIT, $0-8
	ROWSARGS
	MOVQ R9, R12
	ANDQ $-64, R12 // 4·k of the last whole pair of eight columns
	TESTQ CX, CX
	JLE dotdone

dotrow:
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ DX, DX // 4·k into A's row (and a float32 W's)
	XORQ BX, BX // 2·k into a 16-bit W's
	CMPQ R11, $WK_BF16
	JEQ dotbf16pairs
	JGT dotf16pairs

dotf32pairs:
	CMPQ DX, R12
	JGE dotf32tail
	PREFETCHT0 W16_AHEAD(DI)(DX*1)
	VMOVUPS (DI)(DX*1), Y8
	VMOVUPS 32(DI)(DX*1), Y9
	VFMADD231PS (SI)(DX*1), Y8, Y0
	VFMADD231PS 32(SI)(DX*1), Y9, Y1
	ADDQ $64, DX
	JMP dotf32pairs

dotf32tail:
	CMPQ DX, R9
	JGE dotsum
	VMOVUPS (DI)(DX*1), Y8
	VFMADD231PS (SI)(DX*1), Y8, Y0
	JMP dotsum

dotbf16pairs:
	CMPQ DX, R12
	JGE dotbf16tail
	PREFETCHT0 W16_AHEAD(DI)(BX*1)
	WIDEN_BF16((DI)(BX*1), Y8)
	WIDEN_BF16(16(DI)(BX*1), Y9)
	VFMADD231PS (SI)(DX*1), Y8, Y0
	VFMADD231PS 32(SI)(DX*1), Y9, Y1
	ADDQ $32, BX
	ADDQ $64, DX
	JMP dotbf16pairs

dotbf16tail:
	CMPQ DX, R9
	JGE dotsum
	WIDEN_BF16((DI)(BX*1), Y8)
	VFMADD231PS (SI)(DX*1), Y8, Y0
	JMP dotsum

dotf16pairs:
	CMPQ DX, R12
	JGE dotf16tail
	PREFETCHT0 W16_AHEAD(DI)(BX*1)
	WIDEN_F16((DI)(BX*1), Y8)
	WIDEN_F16(16(DI)(BX*1), Y9)
	VFMADD231PS (SI)(DX*1), Y8, Y0
	VFMADD231PS 32(SI)(DX*1), Y9, Y1
	ADDQ $32, BX
	ADDQ $64, DX
	JMP dotf16pairs

dotf16tail:
	CMPQ DX, R9
	JGE dotsum
	WIDEN_F16((DI)(BX*1), Y8)
	VFMADD231PS (SI)(DX*1), Y8, Y0

dotsum:
	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSS X0, (R8)
	ADDQ $4, R8
	ADDQ R10, DI
	DECQ CX
	JNZ dotrow

dotdone:
	VZEROUPPER
	RET

// func widenAVX2(dst *float32, src *uint16, n int, f16 bool)
//
// Widens n (a positive multiple of 8) 16-bit values, bfloat16 or (f16)
// float16, to float32, exactly.
TEXT ·widenAVX2(SB), NOSPLIT, $0-25
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVBLZX f16+24(FP), AX
	XORQ DX, DX // 2·i
	SHLQ $1, CX
	TESTQ AX, AX
	JNE widenf16

widenbf16:
	WIDEN_BF16((SI)(DX*1), Y0)
	VMOVUPS Y0, (DI)(DX*2)
	ADDQ $16, DX
	CMPQ DX, CX
	JLT widenbf16
	JMP widendone

widenf16:
	WIDEN_F16((SI)(DX*1), Y0)
	VMOVUPS Y0, (DI)(DX*2)
	ADDQ $16, DX
	CMPQ DX, CX
	JLT widenf16

widendone:
	VZEROUPPER
	RET

// func hasF16C() bool
TEXT ·hasF16C(SB), NOSPLIT, $0-1
	MOVL $1, AX
	XORL CX, CX
	CPUID
	SHRL $29, CX
	ANDL $1, CX
	MOVB CX, ret+0(FP)
	RET
