package gpu

import (
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
)

// PrefillDevice is Prefill on caller-owned device memory, with no copy
// through the host:
//
//   - in holds int64 [B, T] token ids (kind "ids"), f32 [B, T, d] embeddings
//     ("embeds") or f32 [B, T, F] features ("features"), C-contiguous;
//   - out receives f32 [B, d] (last, sum, mean) or [B, T, d] (all);
//   - the work is queued on stream (e.g. torch.cuda.current_stream().cuda_stream;
//     0 is the legacy default stream, where PyTorch works unless told
//     otherwise), after what the caller queued there before, and the call
//     returns without waiting for it, like any CUDA launch.
//
// The buffers must stay allocated until the work is done. Ids are not range
// checked on the host (that would need a copy); the kernel clamps them into
// the vocabulary. The whole prompt runs as one chunk.
func (e *Engine) PrefillDevice(st engine.State, kind string, in uintptr, B, T int, pool engine.Pool, out, stream uintptr) error {
	s, err := e.own(st)
	if err != nil {
		return err
	}
	switch {
	case B != s.batch:
		return engine.Invalid("state holds %d sequences, input has batch size %d", s.batch, B)
	case T < 1:
		return engine.Invalid("input length T = %d, want at least 1", T)
	case in == 0 || out == 0:
		return engine.Invalid("null device pointer (input %#x, output %#x)", in, out)
	case kind == "features" && e.cfg.InputDim == 0:
		return engine.Invalid("features given, but the checkpoint has no input_proj.weight")
	case kind != "ids" && kind != "embeds" && kind != "features":
		return engine.Invalid("input kind %q, want 'ids', 'embeds' or 'features'", kind)
	}
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	if e.graphCap > 0 && B*T <= e.ChunkRows {
		g, err := e.cachedPrefill(graphKey{s: s, kind: kind, B: B, T: T, pool: pool})
		if err != nil {
			return err
		}
		return e.onStream(cuda.WrapStream(stream), func() error { return g.replayDevice(cuda.Ptr(in), cuda.Ptr(out)) })
	}
	return e.onStream(cuda.WrapStream(stream), func() error {
		return e.run(s, source{in: engine.Input{B: B, T: T}, dev: cuda.Ptr(in), kind: kind}, pool, cuda.Ptr(out))
	})
}
