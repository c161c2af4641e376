package cpu

// SetLanes turns the AVX2 lanes (scanLanes, convLanes and gemmRows) on or off
// for the external tests and returns the function that restores them.
func SetLanes(on bool) (restore func()) {
	was := useLanes
	useLanes = on && hasAVX2
	return func() { useLanes = was }
}

// HasLanes reports that this CPU runs the AVX2 lanes.
var HasLanes = hasAVX2

// RowsMax is the most rows gemmRows takes: a decode step of up to RowsMax
// sequences runs its GEMMs there.
const RowsMax = rowsMax

// ChunkedRows is the most rows gemm runs in gemmRows, whole or in chunks,
// with this process's workers: a decode step of up to that many sequences.
func ChunkedRows() int { return chunkedRows() }

// SetWideKernels turns the AVX-512 kernels (the scan's lanes of sixteen,
// the eight-row GEMM and the SGEMM's micro-kernel) on or off where the CPU
// has AVX-512F, for the external tests, and returns the function that
// restores them.
func SetWideKernels(on bool) (restore func()) {
	lanes, rows, sg := useWideLanes, useWideRows, useWideSgemm
	useWideLanes, useWideRows, useWideSgemm = on && hasAVX512, on && hasAVX512, on && hasAVX512
	return func() { useWideLanes, useWideRows, useWideSgemm = lanes, rows, sg }
}

// HasWideKernels reports that this CPU runs the AVX-512 kernels.
var HasWideKernels = hasAVX512
