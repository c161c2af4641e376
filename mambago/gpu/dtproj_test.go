package gpu

import "testing"

// TestDTProjEntry pins the entry DTProj launches and its rows per block,
// without a GPU: the tall entries (128 rows) only on the tensor cores and
// only where they make three blocks an SM of the H200 (132 SMs).
func TestDTProjEntry(t *testing.T) {
	const aligned = 256 // a 16-byte aligned address
	for _, c := range []struct {
		name         string
		p            DTProj
		kernel       string
		rowsPerBlock int
	}{
		{"R not a multiple of 4", DTProj{DBL: aligned, W: aligned, LDD: 40, R: 6, Rows: 16384, E: 5120, TensorCores: true, SMs: 132},
			"dt_proj_narrow_f32", 64},
		{"CUDA cores", DTProj{DBL: aligned, W: aligned, LDD: 192, R: 160, Rows: 16384, E: 5120, SMs: 132}, "dt_proj_f32", 64},
		{"130m T=2048: 192 tall blocks", DTProj{DBL: aligned, W: aligned, LDD: 80, R: 48, Rows: 2048, E: 1536,
			TensorCores: true, OneTF32Product: true, SMs: 132}, "dt_proj_tc1_f32", 64},
		{"1.4b T=2048: 512 tall blocks", DTProj{DBL: aligned, W: aligned, LDD: 160, R: 128, Rows: 2048, E: 4096,
			TensorCores: true, OneTF32Product: true, SMs: 132}, "dt_proj_tc1_tall_f32", 128},
		{"2.8b B=8, 3xTF32", DTProj{DBL: aligned, W: aligned, LDD: 192, R: 160, Rows: 16384, E: 5120,
			TensorCores: true, SMs: 132}, "dt_proj_tc_tall_f32", 128},
		{"SMs unset", DTProj{DBL: aligned, W: aligned, LDD: 192, R: 160, Rows: 16384, E: 5120, TensorCores: true},
			"dt_proj_tc_f32", 64},
		{"short, one product", DTProj{DBL: aligned, W: aligned, LDD: 160, R: 128, Rows: 256, E: 4096,
			TensorCores: true, OneTF32Product: true, SMs: 132, Short: true, Warpgroup: true}, "dt_proj_tc1_short_f32", 32},
		{"short, 3xTF32", DTProj{DBL: aligned, W: aligned, LDD: 192, R: 160, Rows: 16384, E: 5120, TensorCores: true,
			SMs: 132, Short: true}, "dt_proj_tc_short_f32", 32},
		{"short past its largest R", DTProj{DBL: aligned, W: aligned, LDD: 224, R: 192, Rows: 256, E: 6144,
			TensorCores: true, OneTF32Product: true, Short: true}, "dt_proj_tc1_f32", 64},
		{"short on CUDA cores", DTProj{DBL: aligned, W: aligned, LDD: 160, R: 128, Rows: 256, E: 4096, Short: true},
			"dt_proj_f32", 64},
	} {
		k, rows := c.p.entry()
		if k != c.kernel || rows != c.rowsPerBlock || c.p.Kernel() != k {
			t.Errorf("%s: entry %s, %d rows a block (Kernel %s); want %s, %d", c.name, k, rows, c.p.Kernel(),
				c.kernel, c.rowsPerBlock)
		}
	}
}

// TestDTProjShortPays pins where the engine takes the short entries: on the
// H200 (132 SMs, 227 KB of shared memory a block) 1.4b at 129-256 rows and
// 2.8b at 129-192 (one wave of two blocks an SM); not at 130m's R, and not
// where two blocks do not fit an SM (an A100's 163 KB at R = 160).
func TestDTProjShortPays(t *testing.T) {
	const h200SMs, h200Shared, a100SMs, a100Shared = 132, 232448, 108, 166912
	for _, c := range []struct {
		R, rows, E, sms, shared int
		want                    bool
	}{
		{128, 128, 4096, h200SMs, h200Shared, false}, {128, 129, 4096, h200SMs, h200Shared, true},
		{128, 256, 4096, h200SMs, h200Shared, true}, {128, 257, 4096, h200SMs, h200Shared, false},
		{160, 192, 5120, h200SMs, h200Shared, true}, {160, 256, 5120, h200SMs, h200Shared, false},
		{48, 256, 1536, h200SMs, h200Shared, false}, {160, 160, 5120, a100SMs, a100Shared, false},
		{128, 192, 4096, a100SMs, a100Shared, true},
	} {
		if got := dtProjShortPays(c.R, c.rows, c.E, c.sms, c.shared); got != c.want {
			t.Errorf("dtProjShortPays(R %d, rows %d, E %d, SMs %d, shared %d) = %v, want %v", c.R, c.rows, c.E, c.sms,
				c.shared, got, c.want)
		}
	}
}

// TestDTProjWGPays pins where the engine takes the warpgroup dt_proj on the
// H200's 132 SMs: from R = 128 and 512 rows where the rounds of row groups
// are at least 85% full. 1.4b's 32 channel tiles take 4 blocks each, 2.8b's
// 40 take 3: 768 rows (6 groups) fill 75% at 1.4b and all of 2.8b's, 512
// rows (4 groups) all of 1.4b's and 67% of 2.8b's. With no SM count the
// grid is not capped, so every round is full.
func TestDTProjWGPays(t *testing.T) {
	const sms = 132
	for _, c := range []struct {
		R, rows, E, sms int
		want            bool
	}{
		{48, 4096, 1536, sms, false}, {128, 511, 4096, sms, false}, {128, 512, 4096, sms, true},
		{128, 640, 4096, sms, false}, {128, 768, 4096, sms, false}, {128, 1024, 4096, sms, true},
		{128, 1536, 4096, sms, true}, {128, 2048, 4096, sms, true}, {128, 2100, 4096, sms, true},
		{160, 512, 5120, sms, false}, {160, 768, 5120, sms, true}, {160, 1024, 5120, sms, true},
		{160, 16384, 5120, sms, true}, {128, 640, 4096, 0, true},
	} {
		if got := dtProjWGPays(c.R, c.rows, c.E, c.sms); got != c.want {
			t.Errorf("dtProjWGPays(R %d, rows %d, E %d, SMs %d) = %v, want %v", c.R, c.rows, c.E, c.sms, got, c.want)
		}
	}
}

// TestSkinnyParts pins how many blocks the skinny GEMM splits k over on
// the H200's 132 SMs: none at 1.4b's and 2.8b's in_proj (128 and 160
// tiles), 4 at 1.4b's out_proj (32 tiles), 3 at 2.8b's (40), 2 at 130m's
// in_proj (48 tiles), 4 at its out_proj (12 tiles, capped), and never
// fewer than two steps of k a part (K = 192: 3 steps, one part).
func TestSkinnyParts(t *testing.T) {
	for _, c := range []struct{ N, K, want int }{
		{8192, 2048, 1}, {10240, 2560, 1}, {2048, 4096, 4}, {2560, 5120, 3}, {3072, 768, 2}, {768, 1536, 4},
		{64, 192, 1},
	} {
		if got := skinnyParts(c.N, c.K, 132); got != c.want {
			t.Errorf("skinnyParts(N %d, K %d, 132 SMs) = %d, want %d", c.N, c.K, got, c.want)
		}
	}
}
