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

// The eight-row GEMM of a decode step (gemmRows, lanes.go) in AVX-512F.
// gemmRowsAVX2's eight-row loop does eight FMAs of 256 bits for each load
// of W, and the two FMA ports bound it under the memory's rate (bfloat16 W
// at 12.5 GB/s on 2 cores, against 17 for four rows). Here each FMA is 512
// bits wide, two rows of W side by side in a register (row n in the lower
// half, row n+1 in the upper), against one row of A's eight columns
// broadcast to both halves. Each half then takes the steps of the AVX2
// loop for its row, lane for lane, and ROWS_SUM adds up each half as that
// loop does: the same bits. A float32 W gains nothing here: its eight-row
// loop is bound by the memory, not the FMAs, and a float32 decode step of
// 8 sequences took 1.1x longer on this kernel (why was not measured; the
// 512-bit FMAs' lower clock is a suspect), so it is for 16-bit W only.

// WIDE_ZERO clears the sums, Z16-Z31.
#define WIDE_ZERO \
	VPXORD Z16, Z16, Z16; \
	VPXORD Z17, Z17, Z17; \
	VPXORD Z18, Z18, Z18; \
	VPXORD Z19, Z19, Z19; \
	VPXORD Z20, Z20, Z20; \
	VPXORD Z21, Z21, Z21; \
	VPXORD Z22, Z22, Z22; \
	VPXORD Z23, Z23, Z23; \
	VPXORD Z24, Z24, Z24; \
	VPXORD Z25, Z25, Z25; \
	VPXORD Z26, Z26, Z26; \
	VPXORD Z27, Z27, Z27; \
	VPXORD Z28, Z28, Z28; \
	VPXORD Z29, Z29, Z29; \
	VPXORD Z30, Z30, Z30; \
	VPXORD Z31, Z31, Z31

// WIDE_ROW adds Z8 and Z9 (rows n, n+1 and n+2, n+3 of W at eight columns)
// times row M of A at those columns, broadcast into T, to the sums S8 and S9.
#define WIDE_ROW(M, T, S8, S9) \
	VBROADCASTF64X4 (M*32)(SI)(DX*8), T; \
	VFMADD231PS T, Z8, S8; \
	VFMADD231PS T, Z9, S9

// WIDE_FMA runs WIDE_ROW for the eight interleaved rows of A (8·DX bytes
// into A): rows n and n+1 of W sum into Z16-Z23, rows n+2 and n+3 into
// Z24-Z31, a register for each row of A.
#define WIDE_FMA \
	WIDE_ROW(0, Z10, Z16, Z24); \
	WIDE_ROW(1, Z11, Z17, Z25); \
	WIDE_ROW(2, Z12, Z18, Z26); \
	WIDE_ROW(3, Z13, Z19, Z27); \
	WIDE_ROW(4, Z14, Z20, Z28); \
	WIDE_ROW(5, Z15, Z21, Z29); \
	WIDE_ROW(6, Z10, Z22, Z30); \
	WIDE_ROW(7, Z11, Z23, Z31)

// WIDE_PAIR16_BF16 and WIDE_PAIR16_F16 load eight 16-bit columns of two
// rows of W, at A and B, into Z's lower and upper halves as float32
// (X and Y are Z's lower quarter and half): bfloat16 widened by VPMOVZXWD
// and a shift, float16 by VCVTPH2PS, as WIDEN_BF16 and WIDEN_F16 do.
#define WIDE_PAIR16_BF16(A, B, X, Y, Z) \
	VMOVDQU A, X; \
	VINSERTI128 $1, B, Y, Y; \
	VPMOVZXWD Y, Z; \
	VPSLLD $16, Z, Z

#define WIDE_PAIR16_F16(A, B, X, Y, Z) \
	VMOVDQU A, X; \
	VINSERTI128 $1, B, Y, Y; \
	VCVTPH2PS Y, Z

// WIDE_STEP16 takes the next eight columns of the four 16-bit rows of W,
// prefetching as many bytes of the next group, then moves on.
#define WIDE_STEP16(PAIR) \
	PREFETCHT0 (R14)(BX*4); \
	PAIR((DI)(BX*1), (R12)(BX*1), X8, Y8, Z8); \
	PAIR((R13)(BX*1), (AX)(BX*1), X9, Y9, Z9); \
	WIDE_FMA; \
	ADDQ $16, BX; \
	ADDQ $32, DX; \
	CMPQ DX, R9

// WIDE_HALF_SUM runs ROWS_SUM over one half of the eight sums S0-S7,
// moved into Y0-Y7 by MOVE: WIDE_LOW for the lower halves, WIDE_HIGH for
// the upper ones.
#define WIDE_LOW(S, D) VMOVAPS S, D
#define WIDE_HIGH(S, D) VEXTRACTF64X4 $1, S, D
#define WIDE_HALF_SUM(MOVE, S0, S1, S2, S3, S4, S5, S6, S7) \
	MOVE(S0, Y0); \
	MOVE(S1, Y1); \
	MOVE(S2, Y2); \
	MOVE(S3, Y3); \
	MOVE(S4, Y4); \
	MOVE(S5, Y5); \
	MOVE(S6, Y6); \
	MOVE(S7, Y7); \
	ROWS_SUM

// func gemmRowsAVX512(a *rowsGemm)
//
// gemmRowsAVX2 with a.rows 8 and a 16-bit W, four rows of W a group: a.N
// counts the groups, and each stores its rows' eight sums one row after
// another.
TEXT ·gemmRowsAVX512(SB), NOSPLIT, $0-8
	ROWSARGS
	TESTQ CX, CX
	JLE widedone

widegroup: // rows of W at DI and R12 (Z8), R13 and AX (Z9)
	WIDE_ZERO
	XORQ DX, DX // 4·k; A's block of these eight columns is at 8·DX
	XORQ BX, BX // 2·k: the columns' offset in a 16-bit row of W
	FOURROWS
	CMPQ R11, $WK_BF16
	JGT widef16

widebf16:
	WIDE_STEP16(WIDE_PAIR16_BF16)
	JLT widebf16
	JMP widesum

widef16:
	WIDE_STEP16(WIDE_PAIR16_F16)
	JLT widef16

widesum:
	WIDE_HALF_SUM(WIDE_LOW, Y16, Y17, Y18, Y19, Y20, Y21, Y22, Y23)
	WIDE_HALF_SUM(WIDE_HIGH, Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23)
	WIDE_HALF_SUM(WIDE_LOW, Y24, Y25, Y26, Y27, Y28, Y29, Y30, Y31)
	WIDE_HALF_SUM(WIDE_HIGH, Z24, Z25, Z26, Z27, Z28, Z29, Z30, Z31)
	LEAQ (DI)(R10*4), DI
	DECQ CX
	JNZ widegroup

widedone:
	VZEROUPPER
	RET

// DOT_SUM adds Z0's sixteen lanes and stores the sum at (R8).
#define DOT_SUM \
	VEXTRACTF64X4 $1, Z0, Y4; \
	VADDPS Y4, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X4; \
	VADDPS X4, X0, X0; \
	VHADDPS X0, X0, X0; \
	VHADDPS X0, X0, X0; \
	VMOVSS X0, (R8)

// DOT_ROWS(LOAD, SCALE, STEP, labels) runs dotRowsAVX512's rows of one
// kind: for each, Z0 = the FMAs of A's columns and the row's at DI (LOAD
// reads them), sixteen a step while DX < BX (DX the offset into the row,
// A's DX·SCALE; STEP the row's bytes of sixteen columns), prefetching
// W16_AHEAD bytes on, then the last eight if DX < R9; then its sum to out.
#define DOT_ROWS(LOAD, SCALE, STEP, row, loop, tail, sum) \
row: \
	VPXORD Z0, Z0, Z0; \
	XORQ DX, DX; \
loop: \
	CMPQ DX, BX; \
	JGE tail; \
	PREFETCHT0 W16_AHEAD(DI)(DX*1); \
	VMOVUPS (SI)(DX*SCALE), Z16; \
	LOAD((DI)(DX*1), Z17); \
	VFMADD231PS Z17, Z16, Z0; \
	ADDQ $STEP, DX; \
	JMP loop; \
tail: \
	CMPQ DX, R9; \
	JGE sum; \
	VMOVUPS (SI)(DX*SCALE), Y16; \
	LOAD((DI)(DX*1), Y17); \
	VFMADD231PS Z17, Z16, Z0; \
sum: \
	DOT_SUM; \
	ADDQ $4, R8; \
	ADDQ R10, DI; \
	DECQ CX; \
	JNZ row

// func dotRowsAVX512(a *rowsGemm)
//
// gemmRows' dot products for one row of A (a decode step of one sequence)
// against W of any kind, in AVX-512F: A's row is plain (a.a its first K8
// columns), and each of a.N rows of W gets one sum over those columns,
// stored as out's next float32. The rows go one after another, so W
// streams from memory in order: on the 2-core build machine that read it
// 1.1-1.3x faster than four rows at a time sharing A's loads.
TEXT ·dotRowsAVX512(SB), NOSPLIT, $0-8
	ROWSARGS
	TESTQ CX, CX
	JLE dot512done
	CMPQ R11, $WK_F32
	JEQ dotf32
	SHRQ $1, R9 // 2·K8: a 16-bit row's bytes of K8 columns
	MOVQ R9, BX
	ANDQ $-32, BX // 2·K16
	CMPQ R11, $WK_BF16
	JEQ dotbf16
	DOT_ROWS(WIDEN_F16, 2, 32, dotf16row, dotf16loop, dotf16tail, dotf16sum)
	JMP dot512done

dotbf16:
	DOT_ROWS(WIDEN_BF16, 2, 32, dotbf16row, dotbf16loop, dotbf16tail, dotbf16sum)
	JMP dot512done

dotf32:
	MOVQ R9, BX
	ANDQ $-64, BX // 4·K16
	DOT_ROWS(WIDEN_F32, 1, 64, dotf32row, dotf32loop, dotf32tail, dotf32sum)

dot512done:
	VZEROUPPER
	RET
