// Package gpu is mambago's CUDA engine in f32: the CPU engine's stages
// (rmsnorm, in_proj, conv, x_proj, scan, out_proj, residual) as NVRTC-compiled
// kernels from kernels/ and cuBLAS GEMMs in true FP32, on one stream per
// engine, with the carried state in device memory.
//
// This is the first slice of the engine: every prefill entry and step decode
// through host (numpy) buffers, checked by the same conformance suite as the
// CPU engine. The scan still walks t sequentially (one thread per (b, c, n));
// the chunked parallel scan, CUDA graphs and the device-pointer entry follow.
package gpu
