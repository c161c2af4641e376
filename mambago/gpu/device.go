package gpu

import (
	"math"

	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
)

// Output is a device entry's caller-owned output buffer: Ptr, a device
// address, receives elements of Type (F32, BF16 or F16). With Logits set it
// receives the LM head's logits of the pooled hidden states (f32, rounded to
// Type) instead of the states: [B, V] for Last, [B, T, V] for All. Layers,
// where not 0 (All only), is a second device address that receives
// transformers' hidden_states as f32 [L+1, B, T, d]: the residual stream
// after each of the L layers, then the final norm's output (the states All
// gives), each zero at the padding.
type Output struct {
	Ptr    uintptr
	Type   cuda.DType
	Logits bool
	Layers uintptr
}

// PrefillDevice is Prefill on caller-owned device memory, with no copy
// through the host:
//
//   - in holds int64 [B, T] token ids (kind "ids"), [B, T, d] embeddings
//     ("embeds") or [B, T, F] features ("features"), C-contiguous; inType is
//     the float type of embeddings and features (f32, bf16 or f16), whatever
//     the engine's own;
//   - out receives [B, d] (last, sum, mean) or [B, T, d] (all) of out.Type,
//     or with out.Logits the logits of those states, [B, V] or [B, T, V]
//     (last or all only);
//   - the work is queued on stream (e.g. torch.cuda.current_stream().cuda_stream;
//     0 is the legacy default stream, where PyTorch works unless told
//     otherwise), after what the caller queued there before, and the call
//     returns without waiting for it, like any CUDA launch.
//
// bf16/f16 inputs widen to f32 exactly; outputs are computed in f32 and
// rounded to out.Type at the end. The buffers must stay allocated until the
// work is done. Ids are not range checked on the host (that would need a
// copy); the kernel clamps them into the vocabulary. The whole prompt runs
// as one chunk.
func (e *Engine) PrefillDevice(st engine.State, kind string, in uintptr, inType cuda.DType, B, T int, pool engine.Pool,
	out Output, stream uintptr) error {
	return e.prefillDevice(st, kind, in, inType, engine.Input{B: B, T: T}, pool, out, stream)
}

// PrefillDevicePadded is PrefillDevice for a left-padded batch
// (engine.Input.Pad): row b of the input opens with pad[b] positions of
// padding, B = len(pad), and each row continues from its row of st as its
// tokens alone would (Reset st first for new sequences). The padding
// reaches neither a state nor an output: Last is position T-1, Sum and
// Mean run over each row's tokens, and All (its logits too) is zero at the
// padding. It runs eagerly, never as a cached graph.
func (e *Engine) PrefillDevicePadded(st engine.State, kind string, in uintptr, inType cuda.DType, T int, pad []int,
	pool engine.Pool, out Output, stream uintptr) error {
	shape := engine.Input{B: len(pad), T: T, Pad: pad}
	if err := engine.CheckPad(shape); err != nil {
		return err
	}
	return e.prefillDevice(st, kind, in, inType, shape, pool, out, stream)
}

// StepDevice is Step on caller-owned device memory, with no copy through
// the host: int64 token ids [B] at ids in (B = st's batch; clamped into the
// vocabulary on the device, not checked), float32 logits [B, V] to logits,
// queued on stream after what it holds, without waiting, like
// PrefillDevice. It replays the step graph kept with st (keptStep: once
// the steps asked of st reach StepDeviceGraphSteps), and runs the step's
// kernels eagerly before that; either way the logits are the same bits as
// Step's.
func (e *Engine) StepDevice(st engine.State, ids, logits, stream uintptr) error {
	s, err := e.own(st)
	if err != nil {
		return err
	}
	if ids == 0 || logits == 0 {
		return engine.Invalid("null device pointer (ids %#x, logits %#x)", ids, logits)
	}
	s.decoded += min(1, math.MaxInt-s.decoded) // saturates
	g, err := e.keptStep(s, e.StepDeviceGraphSteps)
	if err != nil {
		return err
	}
	if g != nil {
		return g.StepDevice(ids, logits, stream)
	}
	B, V := s.batch, e.cfg.Vocab
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	if err := e.checkBuffers(callerBuffer{"ids", ids, 8 * B}, callerBuffer{"logits", logits, 4 * B * V}); err != nil {
		return err
	}
	if err := e.ensureOut(B * e.cfg.Hidden); err != nil {
		return err
	}
	if err := e.ensureLogits(B * V); err != nil {
		return err
	}
	return e.onStream(cuda.WrapStream(stream), func() error {
		src := source{in: engine.Input{B: B, T: 1}, kind: "ids", dev: cuda.Ptr(ids)}
		if err := e.stepDevice(s, src, e.ws.out.Ptr, e.ws.logits.Ptr); err != nil {
			return err
		}
		return cuda.Copy(cuda.Ptr(logits), e.ws.logits.Ptr, 4*B*V, e.stream)
	})
}

// prefillDevice is PrefillDevice of a prompt of shape's B, T and Pad.
func (e *Engine) prefillDevice(st engine.State, kind string, in uintptr, inType cuda.DType, shape engine.Input,
	pool engine.Pool, out Output, stream uintptr) error {
	B, T := shape.B, shape.T
	s, err := e.own(st)
	if err != nil {
		return err
	}
	switch {
	case B != s.batch:
		return engine.Invalid("state holds %d sequences, input has batch size %d", s.batch, B)
	case T < 1:
		return engine.Invalid("input length T = %d, want at least 1", T)
	case in == 0 || out.Ptr == 0:
		return engine.Invalid("null device pointer (input %#x, output %#x)", in, out.Ptr)
	case kind == "features" && e.cfg.InputDim == 0:
		return engine.Invalid("features given, but the checkpoint has no input_proj.weight")
	case kind != "ids" && kind != "embeds" && kind != "features":
		return engine.Invalid("input kind %q, want 'ids', 'embeds' or 'features'", kind)
	case kind == "ids" && inType != cuda.F32:
		return engine.Invalid("token ids are int64; an input type (%s) applies to embeds and features only", inType)
	case out.Logits && pool != engine.Last && pool != engine.All:
		return engine.Invalid("logits are of each position's or the last position's state, not of a pooled sum or mean")
	case out.Layers != 0 && pool != engine.All:
		return engine.Invalid("the layers' hidden states come with every position's output (all), not a pooled or last one")
	case out.Layers%4 != 0:
		return engine.Invalid("layers buffer %#x is not aligned to its float32s", out.Layers)
	}
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	width, inSize := 1, 8 // int64 ids; a row's values and their size in the caller's input
	switch kind {
	case "embeds":
		width, inSize = e.cfg.Hidden, inType.Size()
	case "features":
		width, inSize = e.cfg.InputDim, inType.Size()
	}
	rows := pool.OutLen(B, T, 1) // the pooled states
	hiddenLen, outLen := rows*e.cfg.Hidden, rows*e.cfg.Hidden
	if out.Logits {
		outLen = rows * e.cfg.Vocab
	}
	buffers := []callerBuffer{{"input", in, B * T * width * inSize}, {"output", out.Ptr, outLen * out.Type.Size()}}
	if out.Layers != 0 { // f32 [L+1, B, T, d]
		buffers = append(buffers, callerBuffer{"layers", out.Layers, 4 * (e.cfg.Layers + 1) * B * T * e.cfg.Hidden})
	}
	if err := e.checkBuffers(buffers...); err != nil {
		return err
	}
	io := deviceIO{in: cuda.Ptr(in), inType: inType, out: cuda.Ptr(out.Ptr), outType: out.Type}
	if e.graphCap > 0 && B*T <= e.ChunkRows && shape.Pad == nil && out.Layers == 0 {
		g, err := e.cachedPrefill(graphKey{s: s, kind: kind, B: B, T: T, pool: pool})
		if err != nil {
			return err
		}
		return e.onStream(cuda.WrapStream(stream), func() error {
			if !out.Logits {
				return g.replayDevice(io)
			}
			if err := g.replayDevice(deviceIO{in: io.in, inType: inType}); err != nil { // the states stay in g.out
				return err
			}
			return e.head(g.out.Ptr, rows, out)
		})
	}
	if err := e.ensure(B * T); err != nil {
		return err
	}
	// The kernels write the output in 16-byte pieces and the GEMMs' plans
	// assume aligned operands: other types, and buffers aligned less, go
	// through the engine's own, as do the states that logits are made of.
	stageOut := out.Logits || out.Type != cuda.F32 || io.out%16 != 0
	layers := cuda.Ptr(out.Layers)
	if stageOut {
		if err := e.ensureOut(hiddenLen); err != nil {
			return err
		}
	}
	return e.onStream(cuda.WrapStream(stream), func() error {
		src := source{in: shape, dev: io.in, kind: kind}
		if kind != "ids" && (inType != cuda.F32 || io.in%16 != 0) { // widen into the buffer the f32 input would be read from
			staging := e.ws.h.Ptr
			if kind == "features" {
				staging = e.ws.in.Ptr
			}
			if err := e.convert("from_"+inType.Suffix(), io.in, staging, B*T*width); err != nil {
				return err
			}
			src.dev = staging
		}
		dst := io.out
		if stageOut {
			dst = e.ws.out.Ptr
		}
		if err := e.run(s, src, pool, dst, layers); err != nil {
			return err
		}
		if layers != 0 { // the final norm's output after the layers' residual streams
			final := layers + cuda.Ptr(4*e.cfg.Layers*B*T*e.cfg.Hidden)
			if err := cuda.Copy(final, dst, 4*hiddenLen, e.stream); err != nil {
				return err
			}
		}
		switch {
		case out.Logits:
			return e.head(dst, rows, out)
		case stageOut:
			return e.convert("to_"+out.Type.Suffix(), dst, io.out, outLen)
		}
		return nil
	})
}

// head queues the logits of rows f32 hidden states on the device into out:
// the LM head's GEMM writes an f32 output in place where it is aligned as
// the engine's own buffers are (cuBLASLt's plans are made, at its default
// preference, for 256-byte aligned operands; torch's allocations are), and
// anything else through the engine's logits buffer, rounded to out.Type.
// The caller holds the bound thread and runs it inside onStream.
func (e *Engine) head(hidden cuda.Ptr, rows int, out Output) error {
	n := rows * e.cfg.Vocab
	if out.Type == cuda.F32 && out.Ptr%256 == 0 {
		return e.logitsDevice(hidden, rows, cuda.Ptr(out.Ptr))
	}
	if err := e.ensureLogits(n); err != nil {
		return err
	}
	if err := e.logitsDevice(hidden, rows, e.ws.logits.Ptr); err != nil {
		return err
	}
	return e.convert("to_"+out.Type.Suffix(), e.ws.logits.Ptr, cuda.Ptr(out.Ptr), n)
}

// callerBuffer is a device entry's caller-owned buffer: what the errors
// call it, its address, and the bytes the entry reads or writes there.
type callerBuffer struct {
	what  string
	p     uintptr
	bytes int
}

// checkBuffers returns an input error unless each buffer is memory e's
// kernels may use (cuda.Device.CheckBuffer): a host address or another
// GPU's would fault the kernel reading it, and with it the CUDA context
// that PyTorch shares. It needs e's context current.
func (e *Engine) checkBuffers(bufs ...callerBuffer) error {
	for _, b := range bufs {
		if err := e.dev.CheckBuffer(b.what, cuda.Ptr(b.p), b.bytes); err != nil {
			return engine.Invalid("%v", err)
		}
	}
	return nil
}

// deviceIO is a device entry's caller-owned input and output, with their
// element types.
type deviceIO struct {
	in, out         cuda.Ptr
	inType, outType cuda.DType
}

// convert queues the element-wise type conversion kernel (to_<T> or
// from_<T>) over n elements from src to dst.
func (e *Engine) convert(kernel string, src, dst cuda.Ptr, n int) error {
	return e.launch(kernel, grid1(n), cuda.D1(256), 0, src, dst, int64(n))
}
