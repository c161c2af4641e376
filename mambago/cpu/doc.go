// Package cpu is mambago's pure-Go engine: the embedded default, and the
// reference the CUDA engine is tested against.
//
// A prefill runs the whole prompt through each layer at once: the projections
// are GEMMs over all B·T rows (a CBLAS library such as numpy's OpenBLAS, or
// the engine's own SGEMM in sgemm.go, on every core), and the
// conv and the selective scan run in parallel over (batch row, channel block).
// Long prompts are cut into chunks along T; since each chunk continues from the
// carried state, the result is the same as one pass, with bounded scratch.
//
// The stages carry the names the CUDA engine uses: rmsnorm, in_proj, conv,
// x_proj, scan, out_proj, residual. mixer.go holds the model's math.
package cpu
