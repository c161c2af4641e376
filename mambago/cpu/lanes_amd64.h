// Definitions shared by lanes_amd64.s and lanes512_amd64.s.

// laneScan's fields (lanes.go; TestLaneScanLayout pins them).
#define DELTA 0
#define U 8
#define Z 16
#define Y 24
#define BC 32
#define A2T 40
#define STATE 48
#define KONST 56
#define POSITIONS 64
#define NBYTES 72
#define ROWE 80
#define ROWZ 88
#define ROWBC 96
#define ROWN 104
#define ROWSTATE 112
#define DTBIAS 120
#define DSKIP 184

// SCANARGS loads a scan lane call's laneScan (the argument a) into AX, its
// pointers into DI (delta), SI (u), R8 (z), R9 (y), R10 (B, C), R11 (a2t),
// R12 (the states) and R13 (laneK), and its positions into CX.
#define SCANARGS \
	MOVQ a+0(FP), AX; \
	MOVQ DELTA(AX), DI; \
	MOVQ U(AX), SI; \
	MOVQ Z(AX), R8; \
	MOVQ Y(AX), R9; \
	MOVQ BC(AX), R10; \
	MOVQ A2T(AX), R11; \
	MOVQ STATE(AX), R12; \
	MOVQ KONST(AX), R13; \
	MOVQ POSITIONS(AX), CX

// NEXTPOSITION moves SCANARGS' row pointers on by one position, and the
// states' by rowState (the next sequence's, in a step of several).
#define NEXTPOSITION \
	ADDQ ROWSTATE(AX), R12; \
	ADDQ ROWE(AX), DI; \
	ADDQ ROWE(AX), SI; \
	ADDQ ROWE(AX), R9; \
	ADDQ ROWZ(AX), R8; \
	ADDQ ROWBC(AX), R10

// laneK's rows (lanes.go), as offsets from R13; each holds one constant.
#define K_CLAMP 0
#define K_HALF 32
#define K_LN2 64
#define K_P6 96
#define K_P5 128
#define K_P4 160
#define K_P3 192
#define K_ONE 224
#define K_127 256
#define K_LOG2E 288
#define K_ABS 320
#define K_TWO 352
#define K_TWENTY 384
#define K_S11 416
#define K_S9 448
#define K_S7 480
#define K_S5 512
#define K_S3 544

// The lane kernels ask for their rows a few positions ahead: the rows of
// the activations lie 6 KB or more apart (at 130m), past the hardware
// streams' page, so that only the L1 stride prefetcher followed them, one
// row ahead. SCAN_AHEAD and CONV_AHEAD are log2 of how many positions.
#define SCAN_AHEAD 2
#define CONV_AHEAD 3

// AHEAD sets DX to the bytes of 2^SHIFT positions of a row stride, the
// struct field at FIELD(AX).
#define AHEAD(FIELD, SHIFT) \
	MOVQ FIELD(AX), DX; \
	SHLQ $SHIFT, DX

// SCANAHEAD asks for delta, u and y (DI, SI, R9), z (R8) and B/C (R10)
// SCAN_AHEAD positions ahead; it overwrites DX.
#define SCANAHEAD \
	AHEAD(ROWE, SCAN_AHEAD); \
	PREFETCHT0 (DI)(DX*1); \
	PREFETCHT0 (SI)(DX*1); \
	PREFETCHT0 (R9)(DX*1); \
	AHEAD(ROWZ, SCAN_AHEAD); \
	PREFETCHT0 (R8)(DX*1); \
	AHEAD(ROWBC, SCAN_AHEAD); \
	PREFETCHT0 (R10)(DX*1)

// rowsGemm's fields (lanes.go; TestLaneScanLayout pins them).
#define RG_A 0
#define RG_W 8
#define RG_OUT 16
#define RG_N 24
#define RG_KBYTES 32
#define RG_LDW 40
#define RG_WKIND 48
#define RG_ROWS 56

// ROWSARGS loads a rowsGemm (the argument a) into AX, and its fields into
// SI (A), DI (W), R8 (out), CX (the groups), R9 (4·K8), R10 (W's row
// stride) and R11 (W's kind).
#define ROWSARGS \
	MOVQ a+0(FP), AX; \
	MOVQ RG_A(AX), SI; \
	MOVQ RG_W(AX), DI; \
	MOVQ RG_OUT(AX), R8; \
	MOVQ RG_N(AX), CX; \
	MOVQ RG_KBYTES(AX), R9; \
	MOVQ RG_LDW(AX), R10; \
	MOVQ RG_WKIND(AX), R11

// FOURROWS points R12, R13 and AX at the three rows of W after DI's, and
// R14 at the next group's first row.
#define FOURROWS \
	LEAQ (DI)(R10*1), R12; \
	LEAQ (DI)(R10*2), R13; \
	LEAQ (R12)(R10*2), AX; \
	LEAQ (AX)(R10*1), R14

// Weight kinds (rowsGemm.wkind).
#define WK_F32 0
#define WK_BF16 1

// ROWS_SUM adds each of Y0-Y7 across its lanes and stores the eight sums
// side by side at R8, then moves R8 past them: pairwise adds give each
// sum's lower and upper halves, which the two permutes line up.
#define ROWS_SUM \
	VHADDPS Y1, Y0, Y0; \
	VHADDPS Y3, Y2, Y2; \
	VHADDPS Y5, Y4, Y4; \
	VHADDPS Y7, Y6, Y6; \
	VHADDPS Y2, Y0, Y0; \
	VHADDPS Y6, Y4, Y4; \
	VPERM2F128 $0x20, Y4, Y0, Y1; \
	VPERM2F128 $0x31, Y4, Y0, Y2; \
	VADDPS Y2, Y1, Y1; \
	VMOVUPS Y1, (R8); \
	ADDQ $32, R8

// W16_AHEAD is how far ahead in W the one-row loops prefetch (16-bit W;
// dotRowsAVX512's any): 2 KB rather than 512 bytes took a bfloat16 decode
// GEMV from 7.3 to 6.4 ms and the eight-row loop from 18 to 13-14 ms
// (BenchmarkGemmRows, 2 cores).
#define W16_AHEAD 2048

// WIDEN_BF16(mem, reg) loads bfloat16 values at mem into reg as float32
// (bfloat16 is float32's upper half), as many as reg holds: eight into a Y
// register, sixteen into a Z one (an EVEX Y one zeroes Z's upper half).
// WIDEN_F16 loads float16 ones, and WIDEN_F32 float32 ones as they are.
#define WIDEN_BF16(mem, reg) VPMOVZXWD mem, reg; VPSLLD $16, reg, reg
#define WIDEN_F16(mem, reg) VCVTPH2PS mem, reg
#define WIDEN_F32(mem, reg) VMOVUPS mem, reg
