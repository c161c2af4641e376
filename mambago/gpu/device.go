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
//   - with stream != 0 (e.g. torch.cuda.current_stream().cuda_stream) the work
//     is queued on that stream, after what the caller queued before, and the
//     call returns without waiting; with stream == 0 it runs on the engine's
//     stream and returns when out is written (the caller must have finished
//     writing in).
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
	err = e.onStream(stream, func() error {
		return e.run(s, source{in: engine.Input{B: B, T: T}, dev: cuda.Ptr(in), kind: kind}, pool, cuda.Ptr(out))
	})
	if err == nil && stream == 0 {
		err = e.stream.Synchronize()
	}
	return err
}
