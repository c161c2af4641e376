// Package gpu is mambago's CUDA engine in f32: the CPU engine's stages
// (rmsnorm, in_proj, conv, x_proj, scan, out_proj, residual) as NVRTC-compiled
// kernels from kernels/ and cuBLAS GEMMs in true FP32 (TF32 on request), on
// one stream per engine, with the carried state in device memory.
//
// Every prefill entry (ids, embeddings or features; last, all, sum or mean)
// runs from host buffers or, through PrefillDevice, from caller-owned device
// buffers on the caller's stream. The scan is chunked and parallel over T
// (Scan). CaptureStep and CapturePrefill record a whole step or prefill as a
// CUDA graph whose replays are bit-identical to the eager calls. Reserve sizes
// the workspace up front, after which the calls it covers allocate nothing.
// StageTimer times each stage with CUDA events.
package gpu
