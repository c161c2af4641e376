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
	} {
		k, rows := c.p.entry()
		if k != c.kernel || rows != c.rowsPerBlock || c.p.Kernel() != k {
			t.Errorf("%s: entry %s, %d rows a block (Kernel %s); want %s, %d", c.name, k, rows, c.p.Kernel(),
				c.kernel, c.rowsPerBlock)
		}
	}
}
