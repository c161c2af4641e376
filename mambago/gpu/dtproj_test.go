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
