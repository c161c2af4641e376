// Package bindings is the flat, gopy-safe face of mambago that Python sees,
// and the only package that knows about Python.
//
// gopy's rules shape it (design.md §8): models and states cross as int64
// handles; buffers cross as a uintptr address plus a length, never as slices;
// every function returns (value, error), so gopy raises the error in Python;
// and every function recovers from panics, which would otherwise abort the
// interpreter. An error's message starts with the Python exception type the
// wrapper in python/mambago should raise: "ValueError: ", "TypeError: " or
// "RuntimeError: ".
//
// The Go runtime is entered with the GIL released, so everything here is safe
// under concurrent calls.
package bindings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mambago/mambago/mambago"
	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/safetensors"
)

// handles maps the integers Python holds to Go objects.
type handles[T any] struct {
	mu   sync.Mutex
	next int64
	m    map[int64]T
}

func (h *handles[T]) add(v T) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[int64]T{}
	}
	h.next++
	h.m[h.next] = v
	return h.next
}

func (h *handles[T]) get(id int64, what string) (T, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.m[id]
	if !ok {
		return v, fmt.Errorf("ValueError: %s handle %d is closed or was never opened", what, id)
	}
	return v, nil
}

func (h *handles[T]) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

func (h *handles[T]) drop(id int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.m[id]
	delete(h.m, id)
	return ok
}

// stateOf remembers which model a state was made by.
type stateOf struct {
	model int64
	st    engine.State
}

// graphOf remembers which model a graph was captured on.
type graphOf struct {
	model int64
	g     *gpu.Graph
}

var (
	models handles[*mambago.Model]
	states handles[stateOf]
	graphs handles[graphOf]
	vocabs handles[[][]byte] // tokens' texts, for stop strings (NewVocab)
)

// guard turns a panic into an error and prefixes err with its Python type.
// Every exported function defers it.
func guard(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("RuntimeError: mambago internal error: %v\n%s", r, debug.Stack())
		return
	}
	if *err == nil {
		return
	}
	msg := (*err).Error()
	for _, p := range []string{"ValueError: ", "TypeError: ", "RuntimeError: "} {
		if len(msg) >= len(p) && msg[:len(p)] == p {
			return
		}
	}
	if engine.IsInvalid(*err) {
		*err = fmt.Errorf("ValueError: %w", *err)
	} else {
		*err = fmt.Errorf("RuntimeError: %w", *err)
	}
}

// floats views n float32 values at addr, memory the caller owns for the call.
// The double conversion keeps go vet's unsafeptr check quiet: the address
// comes from a live numpy array, not from Go memory.
func floats(addr uintptr, n int) []float32 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice(*(**float32)(unsafe.Pointer(&addr)), n)
}

// halves views n 16-bit values (bfloat16 or float16 bits) at addr.
func halves(addr uintptr, n int) []uint16 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice(*(**uint16)(unsafe.Pointer(&addr)), n)
}

// int64s views n int64 values at addr.
func int64s(addr uintptr, n int) []int64 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice(*(**int64)(unsafe.Pointer(&addr)), n)
}

// bytesAt views n bytes at addr.
func bytesAt(addr uintptr, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice(*(**byte)(unsafe.Pointer(&addr)), n)
}

// int32s views n int32 values at addr.
func int32s(addr uintptr, n int) []int32 {
	if n == 0 {
		return nil
	}
	return unsafe.Slice(*(**int32)(unsafe.Pointer(&addr)), n)
}

func checkBuf(name string, addr uintptr, n int) error {
	if n < 0 || (addr == 0 && n > 0) {
		return fmt.Errorf("ValueError: %s: bad buffer (address %#x, %d values)", name, addr, n)
	}
	return nil
}

// Version returns the mambago version.
func Version() (string, error) { return mambago.Version, nil }

// GPUStatus returns "" when the CUDA engine can run here, else the reason it cannot.
func GPUStatus() (reason string, err error) {
	defer guard(&err)
	if e := mambago.GPUUsable(); e != nil {
		return e.Error(), nil
	}
	return "", nil
}

// PreferOwnGEMM reports whether the CPU engine's own GEMMs run faster on
// this CPU than numpy's OpenBLAS (mambago.PreferOwnGEMM): blas="auto" then
// loads no library.
func PreferOwnGEMM() (own bool, err error) {
	defer guard(&err)
	return mambago.PreferOwnGEMM(), nil
}

// NumThreads sets how many threads run the CPU engine's work at once (Go's
// GOMAXPROCS, which its goroutines and its calls of a single-threaded
// OpenBLAS share) to n where 1 <= n <= maxThreads(), and returns the count
// before; n = 0 only reads it.
func NumThreads(n int) (prev int, err error) {
	defer guard(&err)
	if n < 0 {
		return 0, fmt.Errorf("ValueError: the thread count must be at least 1, got %d", n)
	}
	if most := maxThreads(); n > most {
		return 0, fmt.Errorf("ValueError: the thread count must be at most %d (this machine has %d CPUs), got %d",
			most, runtime.NumCPU(), n)
	}
	return runtime.GOMAXPROCS(n), nil
}

// maxThreads is the most threads NumThreads accepts: 1024, or the
// machine's CPUs where it has more. Go's runtime gives each of GOMAXPROCS
// an OS thread and its own caches, and ends the process (it cannot be
// caught) past 10,000 threads: set_num_threads(10**9) took the Python
// process with it.
func maxThreads() int { return max(1024, runtime.NumCPU()) }

// LoadNotice returns the line to show before loading the checkpoint folder
// path ("" for a state dict) on device when that takes a while (a big
// checkpoint, or the first load on a machine, which compiles the CUDA
// kernels), else "" (mambago.LoadNotice).
func LoadNotice(path, device string) (notice string, err error) {
	defer guard(&err)
	return mambago.LoadNotice(path, device), nil
}

// OpenHandles returns how many models, states, graphs, stop signals and
// vocabularies are open, as JSON ({"models": 1, ...}): what a test of Python's releases
// counts.
func OpenHandles() (js string, err error) {
	defer guard(&err)
	b, err := json.Marshal(map[string]int{"models": models.len(), "states": states.len(), "graphs": graphs.len(),
		"stops": stops.len(), "vocabs": vocabs.len()})
	return string(b), err
}

// LoadModel opens the checkpoint folder path on device ("auto", "cpu",
// "cuda", "cuda:N") with compute dtype ("" for the engine's default) and returns a
// model handle. blasPath names a CBLAS library for the CPU engine's GEMMs
// ("" for the CPU engine's own SGEMM).
func LoadModel(path, device, dtype, blasPath string) (h int64, err error) {
	defer guard(&err)
	m, err := mambago.Open(path, mambago.Options{Device: device, DType: dtype, BLAS: blasPath})
	if err != nil {
		return 0, err
	}
	return models.add(m), nil
}

// LoadStateDict opens a model from tensors in memory, as a PyTorch
// state_dict holds them: configJSON is the model's config (config.json's
// contents), and tensorsJSON lists [{"name", "shape", "addr", "dtype"}],
// each addr the start of that tensor's values, C-contiguous, owned by the
// caller for the call: float32, or with dtype "bfloat16" or "float16"
// their 16-bit bits (the GPU engine uploads them, the CPU engine copies
// them: mambago.OpenStateDict). device, dtype and blasPath are as for
// LoadModel.
func LoadStateDict(configJSON, tensorsJSON, device, dtype, blasPath string) (h int64, err error) {
	defer guard(&err)
	cfg, err := checkpoint.ParseConfig([]byte(configJSON))
	if err != nil {
		return 0, fmt.Errorf("ValueError: config: %w", err)
	}
	var list []struct {
		Name  string  `json:"name"`
		Shape []int   `json:"shape"`
		Addr  uintptr `json:"addr"`
		DType string  `json:"dtype"` // "float32" (or ""), "bfloat16" or "float16": the bits at Addr
	}
	if err := json.Unmarshal([]byte(tensorsJSON), &list); err != nil {
		return 0, fmt.Errorf("ValueError: state dict: %w", err)
	}
	tensors := make(map[string]checkpoint.Tensor, len(list))
	for _, t := range list {
		n := 1
		for _, d := range t.Shape {
			if d < 0 || d > 1<<40 || n > (1<<40)/max(d, 1) {
				return 0, fmt.Errorf("ValueError: state dict: %s: bad shape %v", t.Name, t.Shape)
			}
			n *= d
		}
		if err := checkBuf("state dict: "+t.Name, t.Addr, n); err != nil {
			return 0, err
		}
		switch t.DType {
		case "", "float32":
			tensors[t.Name] = checkpoint.Tensor{Shape: t.Shape, Data: floats(t.Addr, n)}
		case "bfloat16":
			tensors[t.Name] = checkpoint.Tensor{Shape: t.Shape, Bits: halves(t.Addr, n), DType: safetensors.BF16}
		case "float16":
			tensors[t.Name] = checkpoint.Tensor{Shape: t.Shape, Bits: halves(t.Addr, n), DType: safetensors.F16}
		default:
			return 0, fmt.Errorf("ValueError: state dict: %s: dtype %q", t.Name, t.DType)
		}
	}
	m, err := mambago.OpenStateDict(cfg, tensors, mambago.Options{Device: device, DType: dtype, BLAS: blasPath})
	if err != nil {
		return 0, err
	}
	return models.add(m), nil
}

// FreeModel releases a model handle. States made from it stop working.
func FreeModel(model int64) (ok bool, err error) {
	defer guard(&err)
	m, err := models.get(model, "model")
	if err != nil {
		return false, nil
	}
	models.drop(model)
	return true, m.Close()
}

// ModelInfo returns the model's configuration and device as JSON.
func ModelInfo(model int64) (js string, err error) {
	defer guard(&err)
	m, err := models.get(model, "model")
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(map[string]any{"config": m.Config(), "device": m.Device(), "device_index": m.DeviceIndex(),
		"dtype": m.DType(), "backend": m.Backend()})
	return string(b), err
}

// NewState returns a handle to a zeroed state for batch sequences.
func NewState(model int64, batch int) (h int64, err error) {
	defer guard(&err)
	m, err := models.get(model, "model")
	if err != nil {
		return 0, err
	}
	st, err := m.NewState(batch)
	if err != nil {
		return 0, err
	}
	return states.add(stateOf{model, st}), nil
}

// CloneState returns a handle to a new state of state's model holding the
// same values.
func CloneState(state int64) (h int64, err error) {
	defer guard(&err)
	s, err := states.get(state, "state")
	if err != nil {
		return 0, err
	}
	m, err := models.get(s.model, "model")
	if err != nil {
		return 0, err
	}
	st, err := m.CloneState(s.st)
	if err != nil {
		return 0, err
	}
	return states.add(stateOf{s.model, st}), nil
}

// FreeState releases a state handle and the state's device memory, if any.
func FreeState(state int64) (ok bool, err error) {
	defer guard(&err)
	s, err := states.get(state, "state")
	if err != nil {
		return false, nil
	}
	states.drop(state)
	if f, ok := s.st.(interface{ Free() error }); ok {
		return true, f.Free()
	}
	return true, nil
}

// Reserve sizes the model's workspace for prefills of up to batch sequences
// of T positions and steps of up to batch sequences, so they allocate nothing
// (CUDA engine; a no-op on the CPU).
func Reserve(model int64, batch, T int) (ok bool, err error) {
	defer guard(&err)
	m, err := models.get(model, "model")
	if err != nil {
		return false, err
	}
	return true, m.Reserve(batch, T)
}

// ResetState zeroes a state.
func ResetState(state int64) (ok bool, err error) {
	defer guard(&err)
	s, err := states.get(state, "state")
	if err != nil {
		return false, err
	}
	s.st.Reset()
	return true, nil
}

// model returns the model and state of a (model, state) pair, checking they belong together.
func modelState(model, state int64) (*mambago.Model, engine.State, error) {
	m, err := models.get(model, "model")
	if err != nil {
		return nil, nil, err
	}
	s, err := states.get(state, "state")
	if err != nil {
		return nil, nil, err
	}
	if s.model != model {
		return nil, nil, fmt.Errorf("ValueError: state was made by another model")
	}
	return m, s.st, nil
}

// CopyState copies layer's conv ("conv", [B, E, K]) or SSM ("ssm", [B, E, N])
// state to the n float32 values at out (toGo false), or from them into the
// state (toGo true). It returns the number of values copied.
func CopyState(state int64, which string, layer int, buf uintptr, n int, toGo bool) (copied int, err error) {
	defer guard(&err)
	s, err := states.get(state, "state")
	if err != nil {
		return 0, err
	}
	if err := checkBuf("state buffer", buf, n); err != nil {
		return 0, err
	}
	v := floats(buf, n)
	switch {
	case which == "conv" && toGo:
		return n, s.st.SetConvState(layer, v)
	case which == "ssm" && toGo:
		return n, s.st.SetSSMState(layer, v)
	}
	var src []float32
	switch which {
	case "conv":
		src, err = s.st.ConvState(layer)
	case "ssm":
		src, err = s.st.SSMState(layer)
	default:
		return 0, fmt.Errorf("ValueError: state kind %q, want 'conv' or 'ssm'", which)
	}
	if err != nil {
		return 0, err
	}
	if len(src) != n {
		return 0, fmt.Errorf("ValueError: %s state of layer %d has %d values, buffer has %d", which, layer, len(src), n)
	}
	return copy(v, src), nil
}

// Prefill runs a prompt of B sequences of T positions through the model,
// continuing from state. kind says what the input buffer holds: "ids"
// (int64 [B, T]), "embeds" (float32 [B, T, d]) or "features" (float32
// [B, T, F]); output is "last", "all", "sum" or "mean" and out receives
// float32 [B, d] or [B, T, d]. spans, when nSpans > 0, holds int64 [B, 2]:
// each row's first token and token count in a padded batch
// (mambago.Model.PrefillSpans; with fresh, the state is new: StartSpans).
// stop, when not 0, is a signal (NewStop) that stops the prefill where the
// engine can (mambago.Model.PrefillContext), with an error. It returns the
// number of values written.
func Prefill(model, state int64, kind string, in uintptr, inLen, B, T int, output string, out uintptr, outLen int,
	spans uintptr, nSpans int, fresh bool, stop int64) (written int, err error) {
	defer guard(&err)
	m, st, sig, err := modelStateStop(model, state, stop)
	if err != nil {
		return 0, err
	}
	pool, err := engine.ParsePool(output)
	if err != nil {
		return 0, err
	}
	input, dst, err := hostIO(kind, in, inLen, B, T, out, outLen)
	if err != nil {
		return 0, err
	}
	rows, err := spanList(spans, nSpans, B)
	if err != nil {
		return 0, err
	}
	switch {
	case stop != 0:
		return outLen, m.PrefillContext(sig.ctx, st, input, rows, fresh, pool, dst)
	case rows == nil:
		return outLen, m.Prefill(st, input, pool, dst)
	case fresh:
		return outLen, m.StartSpans(st, input, rows, pool, dst)
	}
	return outLen, m.PrefillSpans(st, input, rows, pool, dst)
}

// PrefillLayers is Prefill with every position's output ("all") that also
// writes, to layers (layersLen float32 values: [L, B, T, d]), the residual
// stream after each layer (mambago.Model.PrefillLayers); spans, fresh and
// stop as Prefill's. It returns the number of values written to out.
func PrefillLayers(model, state int64, kind string, in uintptr, inLen, B, T int, out uintptr, outLen int,
	layers uintptr, layersLen int, spans uintptr, nSpans int, fresh bool, stop int64) (written int, err error) {
	defer guard(&err)
	m, st, sig, err := modelStateStop(model, state, stop)
	if err != nil {
		return 0, err
	}
	input, dst, err := hostIO(kind, in, inLen, B, T, out, outLen)
	if err != nil {
		return 0, err
	}
	if err := checkBuf("layers", layers, layersLen); err != nil {
		return 0, err
	}
	rows, err := spanList(spans, nSpans, B)
	if err != nil {
		return 0, err
	}
	return outLen, m.PrefillLayers(sig.ctx, st, input, rows, fresh, dst, floats(layers, layersLen))
}

// modelStateStop is modelState and the stop signal of a handle (stopFor).
func modelStateStop(model, state, stop int64) (*mambago.Model, engine.State, stopSignal, error) {
	m, st, err := modelState(model, state)
	if err != nil {
		return nil, nil, stopSignal{}, err
	}
	sig, err := stopFor(stop)
	return m, st, sig, err
}

// spanList reads nSpans int64 pairs (first token, token count) at addr,
// one a row of B; nil where nSpans is 0 (no padding).
func spanList(addr uintptr, nSpans, B int) ([]mambago.Span, error) {
	if nSpans == 0 {
		return nil, nil
	}
	if nSpans != B {
		return nil, fmt.Errorf("ValueError: %d spans for a batch of %d rows", nSpans, B)
	}
	if err := checkBuf("spans", addr, 2*nSpans); err != nil {
		return nil, err
	}
	raw := int64s(addr, 2*nSpans)
	rows := make([]mambago.Span, nSpans)
	for b := range rows {
		rows[b] = mambago.Span{Start: int(raw[2*b]), Len: int(raw[2*b+1])}
	}
	return rows, nil
}

// hostIO checks and views a prompt's buffers: the inLen values at in as B
// sequences of T positions of kind "ids", "embeds" or "features", and the
// outLen float32 values at out.
func hostIO(kind string, in uintptr, inLen, B, T int, out uintptr, outLen int) (engine.Input, []float32, error) {
	input := engine.Input{B: B, T: T}
	if err := checkBuf("input", in, inLen); err != nil {
		return input, nil, err
	}
	if err := checkBuf("output", out, outLen); err != nil {
		return input, nil, err
	}
	switch kind {
	case "ids":
		input.IDs = int64s(in, inLen)
	case "embeds":
		input.Embeds = floats(in, inLen)
	case "features":
		input.Features = floats(in, inLen)
	default:
		return input, nil, fmt.Errorf("ValueError: input kind %q, want 'ids', 'embeds' or 'features'", kind)
	}
	return input, floats(out, outLen), nil
}

// stepIO checks and views a step's host buffers: B int64 token ids at ids
// and outLen float32 logits at out.
func stepIO(ids uintptr, B int, out uintptr, outLen int) ([]int64, []float32, error) {
	if err := checkBuf("token_ids", ids, B); err != nil {
		return nil, nil, err
	}
	if err := checkBuf("logits", out, outLen); err != nil {
		return nil, nil, err
	}
	return int64s(ids, B), floats(out, outLen), nil
}

// devicePrefiller is an engine that takes device pointers (the CUDA engine).
type devicePrefiller interface {
	PrefillDevice(st engine.State, kind string, in uintptr, inType cuda.DType, B, T int, pool engine.Pool,
		out gpu.Output, stream uintptr) error
	PrefillDevicePadded(st engine.State, kind string, in uintptr, inType cuda.DType, T int, pad []int, pool engine.Pool,
		out gpu.Output, stream uintptr) error
}

var _ devicePrefiller = (*gpu.Engine)(nil)

// PrefillDevice is Prefill on caller-owned device memory: in holds the input
// (int64 [B, T] for "ids"; [B, T, d] for "embeds" and [B, T, F] for
// "features", of inType: "float32", "bfloat16" or "float16"), out receives
// [B, d] or [B, T, d] of outType (with logits set, the logits of those
// states, [B, V] or [B, T, V]), layers, where not 0, receives
// transformers' hidden_states (f32 [L+1, B, T, d]: gpu.Output.Layers), and
// the work is queued on stream (0: the legacy default stream) without
// waiting. CUDA engine only. pad, when nPad > 0, holds int64 [B]: the
// positions of padding that open each row of a left-padded batch
// (gpu.Engine.PrefillDevicePadded).
func PrefillDevice(model, state int64, kind string, in uintptr, inType string, B, T int, output string, out uintptr,
	outType string, logits bool, layers uintptr, stream uintptr, pad uintptr, nPad int) (ok bool, err error) {
	defer guard(&err)
	m, st, err := modelState(model, state)
	if err != nil {
		return false, err
	}
	pool, err := engine.ParsePool(output)
	if err != nil {
		return false, err
	}
	it, ok1 := cuda.ParseDType(inType)
	ot, ok2 := cuda.ParseDType(outType)
	if !ok1 || !ok2 {
		return false, fmt.Errorf("ValueError: input and output types must be float32, bfloat16 or float16, got %q and %q", inType, outType)
	}
	dp, isGPU := m.Engine.(devicePrefiller)
	if !isGPU {
		return false, fmt.Errorf("ValueError: prefill_ptr needs the CUDA engine; this model runs on %s", m.Device())
	}
	dst := gpu.Output{Ptr: out, Type: ot, Logits: logits, Layers: layers}
	if nPad == 0 {
		return true, dp.PrefillDevice(st, kind, in, it, B, T, pool, dst, stream)
	}
	if nPad != B {
		return false, fmt.Errorf("ValueError: padding given for %d rows, want B = %d", nPad, B)
	}
	if err := checkBuf("pad", pad, nPad); err != nil {
		return false, err
	}
	counts := make([]int, nPad)
	for b, n := range int64s(pad, nPad) {
		counts[b] = int(n)
	}
	return true, dp.PrefillDevicePadded(st, kind, in, it, T, counts, pool, dst, stream)
}

// deviceStepper is the CUDA engine's decode step on caller-owned device
// memory (gpu.Engine.StepDevice).
type deviceStepper interface {
	StepDevice(st engine.State, ids, logits, stream uintptr) error
}

var _ deviceStepper = (*gpu.Engine)(nil)

// StepDevice feeds one token per sequence of state (int64 [B] at the device
// address ids) and writes the logits, float32 [B, V], to the device address
// logits, queued on stream without waiting (gpu.Engine.StepDevice).
func StepDevice(model, state int64, ids, logits, stream uintptr) (ok bool, err error) {
	defer guard(&err)
	m, st, err := modelState(model, state)
	if err != nil {
		return false, err
	}
	ds, isGPU := m.Engine.(deviceStepper)
	if !isGPU {
		return false, fmt.Errorf("ValueError: step_ptr needs the CUDA engine; this model runs on %s", m.Device())
	}
	return true, ds.StepDevice(st, ids, logits, stream)
}

// Step feeds one token per sequence (int64 [B] at ids) and writes the logits,
// float32 [B, V], to out.
func Step(model, state int64, ids uintptr, B int, out uintptr, outLen int) (written int, err error) {
	defer guard(&err)
	m, st, err := modelState(model, state)
	if err != nil {
		return 0, err
	}
	tokens, logits, err := stepIO(ids, B, out, outLen)
	if err != nil {
		return 0, err
	}
	return outLen, m.Step(st, tokens, logits)
}

// Logits writes hidden (float32 [B, d]) @ lm_head^T, float32 [B, V], to out.
func Logits(model int64, hidden uintptr, B, hiddenLen int, out uintptr, outLen int) (written int, err error) {
	defer guard(&err)
	m, err := models.get(model, "model")
	if err != nil {
		return 0, err
	}
	if err := checkBuf("hidden", hidden, hiddenLen); err != nil {
		return 0, err
	}
	if err := checkBuf("logits", out, outLen); err != nil {
		return 0, err
	}
	return outLen, m.Logits(floats(hidden, hiddenLen), B, floats(out, outLen))
}

// stopSignal ends an interruptible call early: Python raises it on Ctrl-C.
// It also counts what the call has done so far (Generate: the columns of
// tokens written), for Python to read while the call runs.
type stopSignal struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   *atomic.Int64
}

var stops handles[stopSignal]

// errInterrupted is the cause that a call ended by Stop wraps.
var errInterrupted = errors.New("interrupted (KeyboardInterrupt)")

// NewStop returns a handle to a new stop signal for one interruptible call
// (the stop argument of Generate and Prefill); FreeStop releases it.
func NewStop() (h int64, err error) {
	defer guard(&err)
	ctx, cancel := context.WithCancelCause(context.Background())
	return stops.add(stopSignal{ctx, cancel, new(atomic.Int64)}), nil
}

// StopProgress returns how much the call holding stop signal h has done:
// for Generate, the columns of tokens already in its output, which Python
// may read while it runs.
func StopProgress(h int64) (n int, err error) {
	defer guard(&err)
	s, err := stops.get(h, "stop")
	if err != nil {
		return 0, err
	}
	return int(s.done.Load()), nil
}

// Stop raises stop signal h: the call holding it ends at its next check,
// with an error.
func Stop(h int64) (ok bool, err error) {
	defer guard(&err)
	s, err := stops.get(h, "stop")
	if err != nil {
		return false, err
	}
	s.cancel(errInterrupted)
	return true, nil
}

// FreeStop releases stop signal h once its call has returned.
func FreeStop(h int64) (ok bool, err error) {
	defer guard(&err)
	s, err := stops.get(h, "stop")
	if err != nil {
		return false, err
	}
	stops.drop(h)
	s.cancel(nil)
	return true, nil
}

// stopFor returns stop signal h, or, for 0, one never raised.
func stopFor(h int64) (stopSignal, error) {
	if h == 0 {
		return stopSignal{ctx: context.Background(), done: new(atomic.Int64)}, nil
	}
	return stops.get(h, "stop")
}

// Generate continues the prompts ids (int64 [B, T]) by up to maxNew tokens
// and writes them, int64 [B, maxNew], to out. It returns how many columns
// were generated; rows that emitted eos (≥ 0), or one of the nMoreEOS
// further ids at moreEOS (int64), are padded with eos. repetitionPenalty
// is Sampling.RepetitionPenalty (1 for none), minP Sampling.MinP, minNew
// Sampling.MinNew, noRepeat Sampling.NoRepeatNGram. spans, when
// nSpans > 0, places each row's prompt in a padded batch, as for Prefill.
// processors, where not empty, is a JSON object of the further logits
// processors, sampling warpers and max_time (processorSettings).
// stop, when not 0, is a signal (NewStop) that ends the call before its
// next token, with an error; the call then writes each column of tokens to
// out as it is taken, and counts them in the signal (StopProgress).
func Generate(model int64, ids uintptr, B, T, maxNew int, temperature float64, topK int, topP, minP, repetitionPenalty float64,
	minNew, noRepeat int, seed, eos int64,
	moreEOS uintptr, nMoreEOS int, out uintptr, outLen int, spans uintptr, nSpans int, processors string,
	stop int64) (n int, err error) {
	defer guard(&err)
	set, err := parseProcessors(processors)
	if err != nil {
		return 0, err
	}
	if set.beam != nil || set.renorm {
		return 0, fmt.Errorf("ValueError: beam_sampling and renormalize_logits are for BeamSearch (generate's " +
			"tokens are the same without renormalize_logits)")
	}
	m, err := models.get(model, "model")
	if err != nil {
		return 0, err
	}
	sig, err := stopFor(stop)
	if err != nil {
		return 0, err
	}
	if B < 1 || T < 1 {
		return 0, fmt.Errorf("ValueError: input_ids shape (%d, %d): both must be at least 1", B, T)
	}
	if err := checkBuf("input_ids", ids, B*T); err != nil {
		return 0, err
	}
	if maxNew < 0 || outLen != B*maxNew {
		return 0, fmt.Errorf("ValueError: output buffer has %d values, want B*max_new_tokens = %d", outLen, B*maxNew)
	}
	if err := checkBuf("output", out, outLen); err != nil {
		return 0, err
	}
	rows, err := spanList(spans, nSpans, B)
	if err != nil {
		return 0, err
	}
	var more []int64
	if nMoreEOS > 0 {
		if err := checkBuf("eos ids", moreEOS, nMoreEOS); err != nil {
			return 0, err
		}
		more = int64s(moreEOS, nMoreEOS)
	}
	dst := int64s(out, outLen)
	emit := func(n int, col []int64) {
		for b, id := range col {
			dst[b*maxNew+n] = id
		}
		sig.done.Store(int64(n + 1)) // after the column: a reader that sees n+1 finds it written
	}
	// emit has written every column taken to out.
	_, n, err = m.GenerateEach(sig.ctx, int64s(ids, B*T), B, T, rows, maxNew, mambago.Sampling{
		Temperature: temperature, TopK: topK, TopP: topP, Seed: uint64(seed), EOS: eos, MoreEOS: more,
		MinP: minP, RepetitionPenalty: repetitionPenalty, MinNew: minNew, NoRepeatNGram: noRepeat,
		Processors: set.procs, Warpers: set.warpers,
	}, emit)
	return n, err
}

// BeamSearch continues the prompts ids (int64 [B, T]) by beam search of up
// to maxNew tokens (mambago.Model.BeamSearch): beams a prompt, the best ret
// returned, lengthPenalty, early (0 transformers' False, 1 True, 2
// "never"), eos (-1: none) and the nMoreEOS further ids at moreEOS, fill
// past a row's end, and the processors as Generate's. It writes each
// prompt's ret best beams' tokens (int64 [B·ret, maxNew], columns past the
// longest returned row left as they were), their beam indices (int32, the
// same shape) and scores (float32 [B·ret]), and where stepScores or
// stepLogits is not 0, each step's processed log probabilities or logits
// (float32 [maxNew, B·beams, V], steps past the search's last left as they
// were); counts (int64 [2]) gets the returned columns and the steps. spans,
// processors and stop are as Generate's.
func BeamSearch(model int64, ids uintptr, B, T, maxNew, beams, ret int, lengthPenalty float64, early int,
	eos int64, moreEOS uintptr, nMoreEOS int, fill int64, repetitionPenalty float64, minNew, noRepeat int,
	spans uintptr, nSpans int, tokens, indices, scores, stepScores, stepLogits, counts uintptr, processors string,
	stop int64) (err error) {
	defer guard(&err)
	set, err := parseProcessors(processors)
	if err != nil {
		return err
	}
	var sample mambago.BeamSampling
	if set.beam != nil {
		sample = *set.beam
		sample.Warpers = set.warpers
	} else if set.warpers != (mambago.Warpers{}) {
		return fmt.Errorf("ValueError: beam search takes the sampling warpers (typical_p, epsilon_cutoff, " +
			"eta_cutoff) only when it samples (beam_sampling)")
	}
	m, err := models.get(model, "model")
	if err != nil {
		return err
	}
	sig, err := stopFor(stop)
	if err != nil {
		return err
	}
	if B < 1 || T < 1 {
		return fmt.Errorf("ValueError: input_ids shape (%d, %d): both must be at least 1", B, T)
	}
	bm := mambago.Beams{Width: beams, Return: ret, LengthPenalty: lengthPenalty, EarlyStopping: mambago.EarlyStopping(early),
		EOS: eos, Fill: fill, RepetitionPenalty: repetitionPenalty, MinNew: minNew, NoRepeatNGram: noRepeat,
		Processors: set.procs, Sample: sample, Renormalize: set.renorm, Scores: stepScores != 0, Logits: stepLogits != 0}
	if err := bm.Check(); err != nil {
		return err
	}
	if maxNew < 0 {
		return fmt.Errorf("ValueError: max_new_tokens = %d, want ≥ 0", maxNew)
	}
	R, V := ret, m.Config().Vocab
	for _, buf := range []struct {
		name string
		at   uintptr
		n    int
	}{{"input_ids", ids, B * T}, {"tokens", tokens, B * R * maxNew}, {"beam indices", indices, B * R * maxNew},
		{"scores", scores, B * R}, {"counts", counts, 2}} {
		if err := checkBuf(buf.name, buf.at, buf.n); err != nil {
			return err
		}
	}
	for _, buf := range []struct {
		name string
		at   uintptr
	}{{"step scores", stepScores}, {"step logits", stepLogits}} {
		if buf.at != 0 {
			if err := checkBuf(buf.name, buf.at, maxNew*B*beams*V); err != nil {
				return err
			}
		}
	}
	rows, err := spanList(spans, nSpans, B)
	if err != nil {
		return err
	}
	if nMoreEOS > 0 {
		if err := checkBuf("eos ids", moreEOS, nMoreEOS); err != nil {
			return err
		}
		bm.MoreEOS = int64s(moreEOS, nMoreEOS)
	}
	out, err := m.BeamSearch(sig.ctx, int64s(ids, B*T), B, T, rows, maxNew, bm)
	if err != nil {
		return err
	}
	dstTokens, dstIndices := int64s(tokens, B*R*maxNew), int32s(indices, B*R*maxNew)
	for i := range B * R {
		copy(dstTokens[i*maxNew:], out.Tokens[i*out.N:(i+1)*out.N])
		copy(dstIndices[i*maxNew:], out.Indices[i*out.N:(i+1)*out.N])
	}
	copy(floats(scores, B*R), out.Scores)
	for _, kept := range []struct {
		at    uintptr
		steps [][]float32
	}{{stepScores, out.StepScores}, {stepLogits, out.StepLogits}} {
		if kept.at != 0 {
			dst := floats(kept.at, maxNew*B*beams*V)
			for s, v := range kept.steps {
				copy(dst[s*B*beams*V:], v)
			}
		}
	}
	copy(int64s(counts, 2), []int64{int64(out.N), int64(out.Steps)})
	return nil
}

// processorSettings is the JSON form of mambago.Processors,
// mambago.Warpers and (BeamSearch's alone) mambago.BeamSampling that
// Generate and BeamSearch take, in transformers' names: sequence_bias as a
// list of {"tokens", "bias"}, max_time in seconds from the call's start,
// exponential_decay_length_penalty as {"start", "factor"}, beam_sampling
// as {"temperature", "top_k", "top_p", "min_p", "seed"}.
type processorSettings struct {
	SequenceBias []struct {
		Tokens []int64 `json:"tokens"`
		Bias   float64 `json:"bias"`
	} `json:"sequence_bias"`
	BadWords      [][]int64 `json:"bad_words_ids"`
	Suppress      []int64   `json:"suppress_tokens"`
	BeginSuppress []int64   `json:"begin_suppress_tokens"`
	ForcedBOS     []int64   `json:"forced_bos_token_id"`
	ForcedEOS     []int64   `json:"forced_eos_token_id"`
	Decay         *struct {
		Start  int     `json:"start"`
		Factor float64 `json:"factor"`
	} `json:"exponential_decay_length_penalty"`
	MaxTime       *float64 `json:"max_time"`
	TypicalP      float64  `json:"typical_p"`
	EpsilonCutoff float64  `json:"epsilon_cutoff"`
	EtaCutoff     float64  `json:"eta_cutoff"`
	Renormalize   bool     `json:"renormalize_logits"` // BeamSearch's alone
	StopStrings   *struct {
		Strings [][]byte `json:"strings"` // base64
		Vocab   int64    `json:"vocab"`   // NewVocab's handle
		Fill    *int64   `json:"fill"`    // generate's pad id after a stop string
	} `json:"stop_strings"`
	BeamSampling *struct {
		Temperature float64 `json:"temperature"`
		TopK        int     `json:"top_k"`
		TopP        float64 `json:"top_p"`
		MinP        float64 `json:"min_p"`
		Seed        uint64  `json:"seed"`
	} `json:"beam_sampling"`
}

// settings are what processorSettings give Generate and BeamSearch.
type settings struct {
	procs   mambago.Processors
	warpers mambago.Warpers
	beam    *mambago.BeamSampling // BeamSearch's alone
	renorm  bool                  // BeamSearch's alone
}

// parseProcessors reads processorSettings from js ("" for none), its
// deadline counted from now.
func parseProcessors(js string) (settings, error) {
	start := time.Now()
	var out settings
	if js == "" {
		return out, nil
	}
	var set processorSettings
	dec := json.NewDecoder(strings.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&set); err != nil {
		return out, fmt.Errorf("ValueError: logits processors %s: %w", js, err)
	}
	out.warpers = mambago.Warpers{TypicalP: set.TypicalP, EpsilonCutoff: set.EpsilonCutoff, EtaCutoff: set.EtaCutoff}
	out.renorm = set.Renormalize
	p := &out.procs
	for _, b := range set.SequenceBias {
		p.Biases = append(p.Biases, mambago.SequenceBias{Tokens: b.Tokens, Bias: float32(b.Bias)})
	}
	p.Banned, p.Suppress, p.BeginSuppress = set.BadWords, set.Suppress, set.BeginSuppress
	p.ForcedBOS, p.ForcedEOS = set.ForcedBOS, set.ForcedEOS
	if d := set.Decay; d != nil {
		p.Decay = mambago.LengthDecay{Start: d.Start, Factor: d.Factor}
	}
	if t := set.MaxTime; t != nil {
		if !(*t >= 0 && *t < 1e9) {
			return out, fmt.Errorf("ValueError: max_time = %v s, want ≥ 0 and finite", *t)
		}
		p.Deadline = start.Add(time.Duration(*t * float64(time.Second)))
	}
	if ss := set.StopStrings; ss != nil {
		texts, err := vocabs.get(ss.Vocab, "vocabulary")
		if err != nil {
			return out, err
		}
		p.Stop.Texts, p.Stop.Fill = texts, ss.Fill
		for _, str := range ss.Strings {
			p.Stop.Strings = append(p.Stop.Strings, string(str))
		}
	}
	if b := set.BeamSampling; b != nil {
		if !(b.Temperature > 0) {
			return out, fmt.Errorf("ValueError: beam sampling: temperature = %v, want > 0", b.Temperature)
		}
		out.beam = &mambago.BeamSampling{Temperature: b.Temperature, TopK: b.TopK, TopP: b.TopP, MinP: b.MinP,
			Seed: b.Seed}
	}
	return out, nil
}

// NewVocab keeps a vocabulary's texts for stop strings and returns its
// handle: token i's text is the next lengths[i] bytes of data (int64
// lengths [n]; -1 for a token without text), data holding them one after
// another. FreeVocab releases it.
func NewVocab(data uintptr, nData int, lengths uintptr, n int) (h int64, err error) {
	defer guard(&err)
	if err := checkBuf("vocabulary texts", data, nData); err != nil {
		return 0, err
	}
	if err := checkBuf("vocabulary lengths", lengths, n); err != nil {
		return 0, err
	}
	kept := append([]byte(nil), bytesAt(data, nData)...) // data is the caller's for the call only
	texts := make([][]byte, n)
	at := 0
	for i, size := range int64s(lengths, n) {
		if size < 0 {
			continue
		}
		if size > int64(nData-at) {
			return 0, fmt.Errorf("ValueError: vocabulary: token %d's %d bytes run past the %d bytes of texts", i, size, nData)
		}
		texts[i] = kept[at : at+int(size) : at+int(size)]
		at += int(size)
	}
	if at != nData {
		return 0, fmt.Errorf("ValueError: vocabulary: the lengths sum to %d bytes, the texts hold %d", at, nData)
	}
	return vocabs.add(texts), nil
}

// FreeVocab releases vocabulary h.
func FreeVocab(h int64) (ok bool, err error) {
	defer guard(&err)
	return vocabs.drop(h), nil
}

// gpuEngine returns the model's CUDA engine, or a ValueError naming what needs it.
func gpuEngine(m *mambago.Model, what string) (*gpu.Engine, error) {
	g, ok := m.Engine.(*gpu.Engine)
	if !ok {
		return nil, fmt.Errorf("ValueError: %s needs the CUDA engine; this model runs on %s", what, m.Device())
	}
	return g, nil
}

// CaptureStep captures the decode step of state (B = its batch) as a CUDA
// graph and returns its handle.
func CaptureStep(model, state int64) (h int64, err error) {
	defer guard(&err)
	return capture(model, state, "capture_step", func(e *gpu.Engine, st engine.State) (*gpu.Graph, error) {
		return e.CaptureStep(st)
	})
}

// CapturePrefill captures a prefill of state's B sequences of T positions of
// input kind ("ids", "embeds" or "features") with output ("last", "all",
// "sum" or "mean") as a CUDA graph and returns its handle.
func CapturePrefill(model, state int64, kind string, T int, output string) (h int64, err error) {
	defer guard(&err)
	pool, err := engine.ParsePool(output)
	if err != nil {
		return 0, err
	}
	return capture(model, state, "capture_prefill", func(e *gpu.Engine, st engine.State) (*gpu.Graph, error) {
		return e.CapturePrefill(st, kind, T, pool)
	})
}

// capture runs fn on the model's CUDA engine and state (what names the
// caller in errors) and returns a handle to the graph it captures.
func capture(model, state int64, what string, fn func(*gpu.Engine, engine.State) (*gpu.Graph, error)) (int64, error) {
	m, st, err := modelState(model, state)
	if err != nil {
		return 0, err
	}
	e, err := gpuEngine(m, what)
	if err != nil {
		return 0, err
	}
	g, err := fn(e, st)
	if err != nil {
		return 0, err
	}
	return graphs.add(graphOf{model, g}), nil
}

// GraphStep replays a captured step: B token ids (int64) at ids in, float32
// [B, V] logits to out. It returns the number of values written.
func GraphStep(graph int64, ids uintptr, B int, out uintptr, outLen int) (written int, err error) {
	defer guard(&err)
	g, err := graphs.get(graph, "graph")
	if err != nil {
		return 0, err
	}
	tokens, logits, err := stepIO(ids, B, out, outLen)
	if err != nil {
		return 0, err
	}
	return outLen, g.g.Step(tokens, logits)
}

// GraphStepDevice replays a captured step on caller-owned device memory: B
// int64 token ids at ids, float32 [B, V] logits to logits, queued on stream
// (0: the legacy default stream) without waiting.
func GraphStepDevice(graph int64, ids, logits, stream uintptr) (ok bool, err error) {
	defer guard(&err)
	g, err := graphs.get(graph, "graph")
	if err != nil {
		return false, err
	}
	return true, g.g.StepDevice(ids, logits, stream)
}

// GraphPrefill replays a captured prefill on the input at in (kind and shape
// as captured; inLen values) and writes its output (outLen float32 values) to
// out. It returns the number of values written.
func GraphPrefill(graph int64, kind string, in uintptr, inLen, B, T int, out uintptr, outLen int) (written int, err error) {
	defer guard(&err)
	g, err := graphs.get(graph, "graph")
	if err != nil {
		return 0, err
	}
	input, dst, err := hostIO(kind, in, inLen, B, T, out, outLen)
	if err != nil {
		return 0, err
	}
	return outLen, g.g.Prefill(input, dst)
}

// FreeGraph releases a graph handle and the graph's device memory.
func FreeGraph(graph int64) (ok bool, err error) {
	defer guard(&err)
	g, err := graphs.get(graph, "graph")
	if err != nil {
		return false, nil
	}
	graphs.drop(graph)
	return true, g.g.Destroy()
}

// SetTF32 switches the CUDA engine's FP32 GEMMs to TF32 tensor cores (on) or
// back to true FP32. The model's backend string records the mode.
func SetTF32(model int64, on bool) (ok bool, err error) {
	defer guard(&err)
	m, err := models.get(model, "model")
	if err != nil {
		return false, err
	}
	e, err := gpuEngine(m, "set_tf32")
	if err != nil {
		return false, err
	}
	return true, e.SetTF32(on)
}

// SetGemm picks how the CUDA engine's bf16/f16 GEMMs run: "cublas"
// (cublasGemmEx), "cublaslt" (cuBLASLt, its heuristic's first algorithm)
// or "cublaslt-tuned" (the fastest of its first algorithms, timed once per
// shape: the default). The model's backend string names it.
func SetGemm(model int64, algo string) (ok bool, err error) {
	defer guard(&err)
	m, err := models.get(model, "model")
	if err != nil {
		return false, err
	}
	a, known := cuda.ParseGemmAlgo(algo)
	if !known {
		return false, fmt.Errorf("ValueError: unknown GEMM algorithm %q: want cublas, cublaslt or cublaslt-tuned", algo)
	}
	e, err := gpuEngine(m, "set_gemm")
	if err != nil {
		return false, err
	}
	return true, e.SetGemmAlgo(a)
}

// SetPrefillGraphs makes PrefillDevice replay a cached CUDA graph per
// (state, input kind, shape, output), keeping the n most recently used (0
// turns the cache off).
func SetPrefillGraphs(model int64, n int) (ok bool, err error) {
	defer guard(&err)
	m, err := models.get(model, "model")
	if err != nil {
		return false, err
	}
	e, err := gpuEngine(m, "set_prefill_graphs")
	if err != nil {
		return false, err
	}
	return true, e.SetPrefillGraphs(n)
}
