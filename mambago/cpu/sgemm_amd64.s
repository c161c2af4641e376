#include "textflag.h"
#include "lanes_amd64.h"

// The micro-kernels of the engine's SGEMM (sgemm.go). Each keeps an mr × nr
// block of C in registers and walks k over mr rows of A (lda bytes apart,
// each read in place, a value at a time, broadcast) and a W micro-panel
// [k][nr] (a row of it a step, from L1), then stores the sums into C or
// adds them to it.

// SGEMMARGS loads the arguments: k into CX, A's first row into SI and its
// row stride in bytes into R11, the W panel into DI, C into R8 and its row
// stride in bytes into R9, and add into R10.
#define SGEMMARGS \
	MOVQ k+0(FP), CX; \
	MOVQ a+8(FP), SI; \
	MOVQ lda+16(FP), R11; \
	SHLQ $2, R11; \
	MOVQ w+24(FP), DI; \
	MOVQ c+32(FP), R8; \
	MOVQ ldc+40(FP), R9; \
	SHLQ $2, R9; \
	MOVBQZX add+48(FP), R10

// NEXTROWS3 points R to the row of A three rows after the one at FROM.
#define NEXTROWS3(FROM, R) \
	LEAQ (FROM)(R11*2), R; \
	ADDQ R11, R

// ROW16 adds A's value at MEM, broadcast into T, times the W panel's row
// (Y12, Y13) to one row of sums, S0 and S1.
#define ROW16(MEM, T, S0, S1) \
	VBROADCASTSS MEM, T; \
	VFMADD231PS T, Y12, S0; \
	VFMADD231PS T, Y13, S1

// ROW32 is ROW16 for sixteen-lane registers: the panel's row in Z24, Z25.
#define ROW32(MEM, T, S0, S1) \
	VBROADCASTSS MEM, T; \
	VFMADD231PS T, Z24, S0; \
	VFMADD231PS T, Z25, S1

// PUT stores a row of sums, S0 and S1 (W bytes each), into C at R8 and
// moves R8 to the next row; ADDPUT adds C's row to them first.
#define PUT(W, S0, S1) \
	VMOVUPS S0, (R8); \
	VMOVUPS S1, W(R8); \
	ADDQ R9, R8
#define ADDPUT(W, S0, S1) \
	VADDPS (R8), S0, S0; \
	VADDPS W(R8), S1, S1; \
	PUT(W, S0, S1)

// The sums of each kernel's rows, for PUT and ADDPUT.
#define ROWS6(OP) \
	OP(32, Y0, Y1); OP(32, Y2, Y3); OP(32, Y4, Y5); \
	OP(32, Y6, Y7); OP(32, Y8, Y9); OP(32, Y10, Y11)
#define ROWS12(OP) \
	OP(64, Z0, Z1); OP(64, Z2, Z3); OP(64, Z4, Z5); \
	OP(64, Z6, Z7); OP(64, Z8, Z9); OP(64, Z10, Z11); \
	OP(64, Z12, Z13); OP(64, Z14, Z15); OP(64, Z16, Z17); \
	OP(64, Z18, Z19); OP(64, Z20, Z21); OP(64, Z22, Z23)

// TRANSPOSE_ARGS loads transpose16's and transpose8's arguments: src into
// R10, lds into R9, kind into AX (compared with WK_BF16 for the jumps that
// follow), dst into DI and ldd into R11.
#define TRANSPOSE_ARGS \
	MOVQ src+0(FP), R10; \
	MOVQ lds+8(FP), R9; \
	MOVQ kind+16(FP), AX; \
	MOVQ dst+24(FP), DI; \
	MOVQ ldd+32(FP), R11; \
	CMPQ AX, $WK_BF16

// func sgemmAVX2(k int, a *float32, lda int, w, c *float32, ldc int, add bool)
//
// A 6 × 16 block of C: Y0-Y11 hold the sums, two registers a row; Y12 and
// Y13 a row of the W panel, Y14 and Y15 A's values broadcast. A's rows 0-2
// are read from SI, 3-5 from R12, each advancing by a float a step.
TEXT ·sgemmAVX2(SB), NOSPLIT, $0-49
	SGEMMARGS
	NEXTROWS3(SI, R12)
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

loop6:
	VMOVUPS (DI), Y12
	VMOVUPS 32(DI), Y13
	ROW16((SI), Y14, Y0, Y1)
	ROW16((SI)(R11*1), Y15, Y2, Y3)
	ROW16((SI)(R11*2), Y14, Y4, Y5)
	ROW16((R12), Y15, Y6, Y7)
	ROW16((R12)(R11*1), Y14, Y8, Y9)
	ROW16((R12)(R11*2), Y15, Y10, Y11)
	ADDQ $4, SI
	ADDQ $4, R12
	ADDQ $64, DI
	DECQ CX
	JNZ loop6

	TESTQ R10, R10
	JNZ add6
	ROWS6(PUT)
	VZEROUPPER
	RET

add6:
	ROWS6(ADDPUT)
	VZEROUPPER
	RET

// func sgemmAVX512(k int, a *float32, lda int, w, c *float32, ldc int, add bool)
//
// A 12 × 32 block of C: Z0-Z23 hold the sums, two registers a row; Z24 and
// Z25 a row of the W panel, Z26-Z31 A's values broadcast, in turn. A's rows
// are read three from each of SI, R12, R13 and R14.
TEXT ·sgemmAVX512(SB), NOSPLIT, $0-49
	SGEMMARGS
	NEXTROWS3(SI, R12)
	NEXTROWS3(R12, R13)
	NEXTROWS3(R13, R14)
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

loop12:
	VMOVUPS (DI), Z24
	VMOVUPS 64(DI), Z25
	ROW32((SI), Z26, Z0, Z1)
	ROW32((SI)(R11*1), Z27, Z2, Z3)
	ROW32((SI)(R11*2), Z28, Z4, Z5)
	ROW32((R12), Z29, Z6, Z7)
	ROW32((R12)(R11*1), Z30, Z8, Z9)
	ROW32((R12)(R11*2), Z31, Z10, Z11)
	ROW32((R13), Z26, Z12, Z13)
	ROW32((R13)(R11*1), Z27, Z14, Z15)
	ROW32((R13)(R11*2), Z28, Z16, Z17)
	ROW32((R14), Z29, Z18, Z19)
	ROW32((R14)(R11*1), Z30, Z20, Z21)
	ROW32((R14)(R11*2), Z31, Z22, Z23)
	ADDQ $4, SI
	ADDQ $4, R12
	ADDQ $4, R13
	ADDQ $4, R14
	ADDQ $128, DI
	DECQ CX
	JNZ loop12

	TESTQ R10, R10
	JNZ add12
	ROWS12(PUT)
	VZEROUPPER
	RET

add12:
	ROWS12(ADDPUT)
	VZEROUPPER
	RET

// transpose16's steps: rows r0-r15 in Z0-Z15 become columns c0-c15 in
// Z0-Z15. TR_STAGE1 interleaves row pairs' floats (Z16-Z31), TR_STAGE2
// their pairs of floats, so that Z(4g+c) holds, in each 128-bit lane L,
// rows 4g..4g+3 of column 4L+c; TR_STAGE3 and TR_STAGE4 gather the four
// lanes of each column from the four row groups.
#define TR_STAGE1 \
	VUNPCKLPS Z1, Z0, Z16; \
	VUNPCKHPS Z1, Z0, Z17; \
	VUNPCKLPS Z3, Z2, Z18; \
	VUNPCKHPS Z3, Z2, Z19; \
	VUNPCKLPS Z5, Z4, Z20; \
	VUNPCKHPS Z5, Z4, Z21; \
	VUNPCKLPS Z7, Z6, Z22; \
	VUNPCKHPS Z7, Z6, Z23; \
	VUNPCKLPS Z9, Z8, Z24; \
	VUNPCKHPS Z9, Z8, Z25; \
	VUNPCKLPS Z11, Z10, Z26; \
	VUNPCKHPS Z11, Z10, Z27; \
	VUNPCKLPS Z13, Z12, Z28; \
	VUNPCKHPS Z13, Z12, Z29; \
	VUNPCKLPS Z15, Z14, Z30; \
	VUNPCKHPS Z15, Z14, Z31
#define TR_STAGE2 \
	VUNPCKLPD Z18, Z16, Z0; \
	VUNPCKHPD Z18, Z16, Z1; \
	VUNPCKLPD Z19, Z17, Z2; \
	VUNPCKHPD Z19, Z17, Z3; \
	VUNPCKLPD Z22, Z20, Z4; \
	VUNPCKHPD Z22, Z20, Z5; \
	VUNPCKLPD Z23, Z21, Z6; \
	VUNPCKHPD Z23, Z21, Z7; \
	VUNPCKLPD Z26, Z24, Z8; \
	VUNPCKHPD Z26, Z24, Z9; \
	VUNPCKLPD Z27, Z25, Z10; \
	VUNPCKHPD Z27, Z25, Z11; \
	VUNPCKLPD Z30, Z28, Z12; \
	VUNPCKHPD Z30, Z28, Z13; \
	VUNPCKLPD Z31, Z29, Z14; \
	VUNPCKHPD Z31, Z29, Z15
#define TR_STAGE3 \
	VSHUFF32X4 $0x44, Z4, Z0, Z16; \
	VSHUFF32X4 $0xEE, Z4, Z0, Z17; \
	VSHUFF32X4 $0x44, Z12, Z8, Z18; \
	VSHUFF32X4 $0xEE, Z12, Z8, Z19; \
	VSHUFF32X4 $0x44, Z5, Z1, Z20; \
	VSHUFF32X4 $0xEE, Z5, Z1, Z21; \
	VSHUFF32X4 $0x44, Z13, Z9, Z22; \
	VSHUFF32X4 $0xEE, Z13, Z9, Z23; \
	VSHUFF32X4 $0x44, Z6, Z2, Z24; \
	VSHUFF32X4 $0xEE, Z6, Z2, Z25; \
	VSHUFF32X4 $0x44, Z14, Z10, Z26; \
	VSHUFF32X4 $0xEE, Z14, Z10, Z27; \
	VSHUFF32X4 $0x44, Z7, Z3, Z28; \
	VSHUFF32X4 $0xEE, Z7, Z3, Z29; \
	VSHUFF32X4 $0x44, Z15, Z11, Z30; \
	VSHUFF32X4 $0xEE, Z15, Z11, Z31
#define TR_STAGE4 \
	VSHUFF32X4 $0x88, Z18, Z16, Z0; \
	VSHUFF32X4 $0xDD, Z18, Z16, Z4; \
	VSHUFF32X4 $0x88, Z19, Z17, Z8; \
	VSHUFF32X4 $0xDD, Z19, Z17, Z12; \
	VSHUFF32X4 $0x88, Z22, Z20, Z1; \
	VSHUFF32X4 $0xDD, Z22, Z20, Z5; \
	VSHUFF32X4 $0x88, Z23, Z21, Z9; \
	VSHUFF32X4 $0xDD, Z23, Z21, Z13; \
	VSHUFF32X4 $0x88, Z26, Z24, Z2; \
	VSHUFF32X4 $0xDD, Z26, Z24, Z6; \
	VSHUFF32X4 $0x88, Z27, Z25, Z10; \
	VSHUFF32X4 $0xDD, Z27, Z25, Z14; \
	VSHUFF32X4 $0x88, Z30, Z28, Z3; \
	VSHUFF32X4 $0xDD, Z30, Z28, Z7; \
	VSHUFF32X4 $0x88, Z31, Z29, Z11; \
	VSHUFF32X4 $0xDD, Z31, Z29, Z15

// LOAD_F32, LOAD_BF16 and LOAD_F16 load the row of sixteen values at R10
// into Z as float32 (the 16-bit ones widened exactly), and move R10 on by
// R9 bytes; PUTROW stores Z at DI and moves DI on by R11 bytes.
#define LOAD_F32(Z) WIDEN_F32((R10), Z); ADDQ R9, R10
#define LOAD_BF16(Z) WIDEN_BF16((R10), Z); ADDQ R9, R10
#define LOAD_F16(Z) WIDEN_F16((R10), Z); ADDQ R9, R10
#define PUTROW(Z) VMOVUPS Z, (DI); ADDQ R11, DI

// EIGHT applies OP to Y0-Y7 in order.
#define EIGHT(OP) \
	OP(Y0); OP(Y1); OP(Y2); OP(Y3); OP(Y4); OP(Y5); OP(Y6); OP(Y7)

// SIXTEEN applies OP to Z0-Z15 in order.
#define SIXTEEN(OP) \
	OP(Z0); OP(Z1); OP(Z2); OP(Z3); OP(Z4); OP(Z5); OP(Z6); OP(Z7); \
	OP(Z8); OP(Z9); OP(Z10); OP(Z11); OP(Z12); OP(Z13); OP(Z14); OP(Z15)

// func transpose16(src unsafe.Pointer, lds, kind int, dst *float32, ldd int)
//
// Writes the 16 × 16 block at src (rows lds bytes apart, of float32,
// bfloat16 or float16 values as kind says: a Storage) transposed, as
// float32, to dst (rows ldd bytes apart): dst's row j is src's column j.
TEXT ·transpose16(SB), NOSPLIT, $0-40
	TRANSPOSE_ARGS
	JEQ trbf16
	JGT trf16
	SIXTEEN(LOAD_F32)
	JMP trloaded

trbf16:
	SIXTEEN(LOAD_BF16)
	JMP trloaded

trf16:
	SIXTEEN(LOAD_F16)

trloaded:
	TR_STAGE1
	TR_STAGE2
	TR_STAGE3
	TR_STAGE4
	SIXTEEN(PUTROW)
	VZEROUPPER
	RET

// func transpose8(src unsafe.Pointer, lds, kind int, dst *float32, ldd int)
//
// Writes the 8 × 8 block at src (rows lds bytes apart, of float32,
// bfloat16 or float16 values as kind says: a Storage) transposed, as
// float32, to dst (rows ldd bytes apart), in AVX2/F16C: rows r0-r7 in Y0-Y7;
// VUNPCKLPS/VUNPCKHPS interleave row pairs (Y8-Y15), VSHUFPS gathers four
// rows of one column in each 128-bit lane (Y0-Y7: columns c and c+4 of rows
// 0-3, then of rows 4-7), and VPERM2F128 joins the two halves of each
// column (Y8-Y15: columns 0-7).
TEXT ·transpose8(SB), NOSPLIT, $0-40
	TRANSPOSE_ARGS
	JEQ t8bf16
	JGT t8f16
	EIGHT(LOAD_F32)
	JMP t8loaded

t8bf16:
	EIGHT(LOAD_BF16)
	JMP t8loaded

t8f16:
	EIGHT(LOAD_F16)

t8loaded:
	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VUNPCKLPS Y5, Y4, Y12
	VUNPCKHPS Y5, Y4, Y13
	VUNPCKLPS Y7, Y6, Y14
	VUNPCKHPS Y7, Y6, Y15
	VSHUFPS $0x44, Y10, Y8, Y0
	VSHUFPS $0xEE, Y10, Y8, Y1
	VSHUFPS $0x44, Y11, Y9, Y2
	VSHUFPS $0xEE, Y11, Y9, Y3
	VSHUFPS $0x44, Y14, Y12, Y4
	VSHUFPS $0xEE, Y14, Y12, Y5
	VSHUFPS $0x44, Y15, Y13, Y6
	VSHUFPS $0xEE, Y15, Y13, Y7
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15
	PUTROW(Y8); PUTROW(Y9); PUTROW(Y10); PUTROW(Y11)
	PUTROW(Y12); PUTROW(Y13); PUTROW(Y14); PUTROW(Y15)
	VZEROUPPER
	RET

// func prefetchRows(p unsafe.Pointer, stride, rows, lines int)
//
// Asks L2 (PREFETCHT1) for lines 64-byte lines from each of rows rows, the
// first at p and each stride bytes after the one before. rows and lines
// are at least 1.
TEXT ·prefetchRows(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ stride+8(FP), BX
	MOVQ rows+16(FP), CX
	MOVQ lines+24(FP), DX

pfrow:
	MOVQ SI, DI
	MOVQ DX, AX

pfline:
	PREFETCHT1 (DI)
	ADDQ $64, DI
	DECQ AX
	JNZ pfline
	ADDQ BX, SI
	DECQ CX
	JNZ pfrow
	RET
