// Package mambago runs Mamba-1 (selective state-space) language models and
// sequence classifiers trained in PyTorch, from Hugging Face checkpoints.
//
// Open loads a checkpoint onto an engine; the Model then prefills whole
// prompts in one parallel pass, continues them one token at a time with Step,
// and generates text:
//
//	m, err := mambago.Open("path/to/mamba-130m", mambago.Options{})
//	st, _ := m.NewState(1)
//	hidden := make([]float32, m.Config().Hidden)
//	err = m.Prefill(st, engine.Input{B: 1, T: len(ids), IDs: ids}, engine.Last, hidden)
//
// The engines live in sub-packages: cpu (pure Go, the reference) and gpu
// (CUDA, f32). The engine package defines the interface they share.
package mambago

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mambago/mambago/mambago/blas"
	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cpu"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/safetensors"
)

// Options selects the engine a model runs on.
type Options struct {
	// Device is "auto" (or empty), "cpu", "cuda" (GPU 0) or "cuda:N" (GPU N,
	// as the driver numbers them; CUDA_VISIBLE_DEVICES applies). "auto"
	// picks the CUDA engine on GPU 0 when it is usable and the CPU engine
	// otherwise; "cuda" without a usable GPU is an error that says why. A GPU older than compute capability
	// gpu.MinMajor.0, or one without cuBLAS and NVRTC to load, is not usable:
	// "auto" then runs on the CPU engine, and LoadNotice says so.
	Device string
	// DType is "" or "float32", "bfloat16" or "float16". On the CUDA
	// engine the 16-bit types are mixed precision, where the big GEMMs take
	// weights and inputs in that type and accumulate in f32, and the
	// residual stream, the scan and the carried state stay f32
	// (gpu.Engine). On the CPU engine they are the weight matrices'
	// storage (cpu.Storage), widened exactly as they are read: it computes
	// in float32 on those values, so a 16-bit checkpoint gives what float32
	// gives, in half the memory. "auto" takes the type the checkpoint's
	// config names (checkpoint.Config.DType), and float32 where it names none.
	DType string
	// BLAS is the path of a CBLAS shared library (e.g. numpy's OpenBLAS) for
	// the CPU engine's GEMMs; empty uses the engine's own SGEMM (Go and
	// assembly; gonum's pure-Go BLAS on a CPU without AVX2).
	BLAS string
	// Progress, if set, receives a line before and after long work
	// (LoadNotice): reading a checkpoint of a GB or more, or the first load
	// on a machine, which compiles the CUDA kernels for its GPU (3 s on the
	// H200 host with 16 cores, 15 s on 2; then read from the disk cache).
	Progress io.Writer
}

// bigCheckpoint is the size from which LoadNotice announces a checkpoint's
// read (a 1.4 GB checkpoint loads in about 3 s on 2 cores).
const bigCheckpoint = 1 << 30

// LoadNotice returns the line to show a user before a model opens from the
// checkpoint folder path ("" for weights already in memory) on device (as
// Options.Device) when that takes a while: reading a checkpoint of a GB or
// more, or compiling the CUDA kernels because the disk cache
// (cuda.CacheDir) holds none yet for this GPU's architecture. It also says
// when "auto" runs on the CPU engine although the driver sees a GPU (too old
// a GPU, or cuBLAS or NVRTC missing). Otherwise it returns "". Open writes it to
// Options.Progress itself, and "mambago: loaded in <seconds> s" after.
func LoadNotice(path, device string) string {
	var work []string
	kind, ordinal, err := parseDevice(device)
	gpuAsked := err == nil && kind != "cpu"
	var usable error
	if gpuAsked {
		usable = gpuUsable(ordinal)
	}
	if c := fallbackNote(device, usable); c != "" {
		work = append(work, c)
	}
	if n := checkpointBytes(path); n >= bigCheckpoint {
		work = append(work, fmt.Sprintf("reading %.1f GB of weights from %s", float64(n)/1e9, path))
	}
	if gpuAsked && usable == nil {
		if c := compileWork(ordinal); c != "" {
			work = append(work, c)
		}
	}
	if len(work) == 0 {
		return ""
	}
	return "mambago: " + strings.Join(work, "; ") + " ..."
}

// checkpointBytes is the size of the weight files in the folder path
// (safetensors, or PyTorch's pickles); 0 where there are none.
func checkpointBytes(path string) int64 {
	if path == "" {
		return 0
	}
	var n int64
	for _, pattern := range []string{"*.safetensors", "*.bin"} {
		files, _ := filepath.Glob(filepath.Join(path, pattern))
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil {
				n += fi.Size()
			}
		}
	}
	return n
}

// fallbackNote says, for device "auto", that the model runs on the CPU
// engine although the driver sees a GPU, and why (usable, what gpuUsable
// returned, is an unusableGPU: too old a GPU, or a CUDA library missing);
// else "". Device "cuda" fails in Open with the same reason instead.
func fallbackNote(device string, usable error) string {
	if kind, _, err := parseDevice(device); err != nil || kind != "auto" {
		return ""
	}
	var u unusableGPU
	if !errors.As(usable, &u) {
		return ""
	}
	return "running on the CPU engine: " + usable.Error()
}

// compileWork says what loading on GPU ordinal, which the CUDA engine can
// use, will compile ("compiling 15 CUDA kernel sources for sm_90 ..."), or
// "" where every kernel is already in the disk cache.
func compileWork(ordinal int) string {
	arch, pending, err := gpu.PendingKernels(ordinal)
	if err != nil || len(pending) == 0 {
		return ""
	}
	cache := "; cached in " + cuda.CacheDir() + " for later loads"
	if cuda.CacheDir() == "" {
		cache = "; with no cache directory every load compiles them (set MAMBAGO_KERNEL_CACHE)"
	}
	return fmt.Sprintf("compiling %d CUDA kernel sources for %s (up to half a minute%s)", len(pending), arch, cache)
}

// GPUUsable reports why the CUDA engine cannot run on GPU 0, or nil when
// it can.
func GPUUsable() error { return gpuUsable(0) }

// PreferOwnGEMM reports whether the CPU engine's own GEMMs (Options.BLAS
// empty) run faster on this CPU than numpy's OpenBLAS (cpu.PreferOwnGEMM):
// what Python's blas="auto" asks.
func PreferOwnGEMM() bool { return cpu.PreferOwnGEMM() }

// gpuUsable reports why the CUDA engine cannot run on GPU ordinal, or nil.
func gpuUsable(ordinal int) error {
	if err := cuda.Init(); err != nil {
		return err
	}
	n, err := cuda.DeviceCount()
	switch {
	case err != nil:
		return err
	case n == 0:
		return fmt.Errorf("the driver sees no CUDA device")
	case ordinal >= n:
		return fmt.Errorf("the driver sees %d CUDA device(s), numbered from 0, so there is no GPU %d", n, ordinal)
	}
	if err := gpu.DeviceSupported(ordinal); err != nil {
		return unusableGPU{err}
	}
	if err := cuda.LoadLibraries(); err != nil {
		return unusableGPU{fmt.Errorf("%w\n%s", err, libraryHint())}
	}
	return nil
}

// unusableGPU is why a GPU that the driver sees cannot run the CUDA engine:
// too old a GPU (gpu.ErrOldGPU), or cuBLAS or NVRTC missing. Device "auto"
// then runs on the CPU engine, and LoadNotice says why.
type unusableGPU struct{ error }

func (u unusableGPU) Unwrap() error { return u.error }

// libraryHint says where to get the CUDA libraries for this driver.
func libraryHint() string {
	wheels := "nvidia-cublas nvidia-cuda-nvrtc" // CUDA 13's wheels
	if v, err := cuda.DriverVersion(); err == nil && v < 13000 {
		wheels = "nvidia-cublas-cu12 nvidia-cuda-nvrtc-cu12"
	}
	return "NVIDIA's pip wheels provide them (pip install " + wheels + "; PyTorch's CUDA builds bring them), as does a CUDA toolkit"
}

// Model is a loaded model on one engine.
type Model struct {
	engine.Engine
	gen idleState // the state Generate's last call left, for its next
}

// idleState keeps the state of Generate's last call for a next call of the
// same batch size. The CUDA engine's decoder leaves its step graph with
// the state (gpu.Engine.NewDecoder), so that call captures none: one state
// and one graph at most, freed by Close.
type idleState struct {
	mu sync.Mutex
	st engine.State
}

// take returns the idle state, zeroed, where it holds B sequences, or a new
// state.
func (p *idleState) take(m *Model, B int) (engine.State, error) {
	p.mu.Lock()
	st := p.st
	if st != nil && st.Batch() == B {
		p.st = nil
	}
	p.mu.Unlock()
	if st == nil || st.Batch() != B {
		return m.NewState(B)
	}
	st.Reset()
	return st, nil
}

// put keeps st as the idle state, freeing the one it replaces.
func (p *idleState) put(st engine.State) error {
	p.mu.Lock()
	old := p.st
	p.st = st
	p.mu.Unlock()
	return freeState(old)
}

// Close frees the state Generate keeps, then the engine.
func (m *Model) Close() error {
	return errors.Join(m.gen.put(nil), m.Engine.Close())
}

// freeState releases a state that holds memory outside Go's heap (the CUDA
// engine's device memory) at once; a state of Go memory is left to the
// collector.
func freeState(st engine.State) error {
	if f, ok := st.(interface{ Free() error }); ok {
		return f.Free()
	}
	return nil
}

// Open loads the checkpoint folder path (config.json plus safetensors files)
// onto the engine opts selects.
func Open(path string, opts Options) (*Model, error) {
	t, err := opts.engine()
	if err != nil {
		return nil, err
	}
	done := opts.announce(path)
	var narrow safetensors.DType
	if cfg, err := checkpoint.ReadConfig(path); err == nil { // else Load reports it
		narrow = t.narrowing(cfg)
	}
	w, err := checkpoint.LoadNarrowed(path, narrow)
	if err != nil {
		// A checkpoint that cannot be read is the caller's input: Python raises ValueError.
		return nil, engine.Invalid("open %s: %v", path, err)
	}
	m, err := start(w, t, opts, path)
	if err == nil {
		done()
	}
	return m, err
}

// OpenWeights runs weights already in memory (checkpoint.FromTensors, for
// a PyTorch state_dict) on the engine opts selects. The CPU engine keeps w.
func OpenWeights(w *checkpoint.Weights, opts Options) (*Model, error) {
	return openWeights(w, opts, false)
}

// OpenBorrowed is OpenWeights for weights whose memory the caller owns only
// for the call (a Python caller's arrays): the GPU engine uploads them as
// they are, and the CPU engine keeps a copy (checkpoint.Weights.Clone), so
// only that engine pays for one.
func OpenBorrowed(w *checkpoint.Weights, opts Options) (*Model, error) {
	return openWeights(w, opts, true)
}

// OpenStateDict is OpenBorrowed of the weights that tensors and cfg make
// (checkpoint.FromTensors): a PyTorch state_dict's tensors, in memory the
// caller owns for the call only, as float32 or 16-bit values. Where the CPU
// engine keeps its matrices in 16 bits they go straight into them
// (checkpoint.FromTensorsNarrowed), never widened to float32. A state dict
// that does not match cfg is an input error.
func OpenStateDict(cfg checkpoint.Config, tensors map[string]checkpoint.Tensor, opts Options) (*Model, error) {
	t, err := opts.engine()
	if err != nil {
		return nil, err
	}
	w, err := checkpoint.FromTensorsNarrowed(cfg, tensors, t.narrowing(cfg))
	if err != nil {
		return nil, engine.Invalid("%v", err)
	}
	return openWeights(w, opts, true)
}

// openWeights is OpenWeights, copying w first for the CPU engine where
// borrowed.
func openWeights(w *checkpoint.Weights, opts Options, borrowed bool) (*Model, error) {
	t, err := opts.engine()
	if err != nil {
		return nil, err
	}
	switch {
	case borrowed && !t.gpu && t.resolved(w.Config).dt != cuda.F32:
		w = w.CloneSmall() // the engine keeps 16-bit copies of the matrices
	case borrowed && !t.gpu:
		w = w.Clone()
	}
	done := opts.announce("")
	m, err := start(w, t, opts, "the weights")
	if err == nil {
		done()
	}
	return m, err
}

// announce writes LoadNotice(path, opts.Device) to opts.Progress, where
// both are there, and returns what writes the closing line.
func (opts Options) announce(path string) (done func()) {
	if opts.Progress == nil {
		return func() {}
	}
	notice := LoadNotice(path, opts.Device)
	if notice == "" {
		return func() {}
	}
	fmt.Fprintln(opts.Progress, notice)
	begin := time.Now()
	return func() { fmt.Fprintf(opts.Progress, "mambago: loaded in %.1f s\n", time.Since(begin).Seconds()) }
}

// target is the engine Options pick: the CUDA engine on GPU ordinal in dt,
// or the CPU engine (gpu false).
type target struct {
	gpu     bool
	ordinal int
	dt      cuda.DType
	autoDT  bool // dt is the checkpoint's own (Options.DType "auto"), read once it is loaded
}

// parseDevice reads Options.Device: the engine it asks for ("auto", "cpu"
// or "cuda") and the GPU's ordinal (N for "cuda:N", else 0).
func parseDevice(device string) (kind string, ordinal int, err error) {
	d := strings.ToLower(strings.TrimSpace(device))
	switch d {
	case "", "auto":
		return "auto", 0, nil
	case "cpu":
		return "cpu", 0, nil
	case "cuda", "gpu":
		return "cuda", 0, nil
	}
	if head, num, ok := strings.Cut(d, ":"); ok && (head == "cuda" || head == "gpu") {
		if n, err := strconv.Atoi(num); err == nil && n >= 0 {
			return "cuda", n, nil
		}
	}
	return "", 0, engine.Invalid("device %q: want \"auto\", \"cpu\", \"cuda\" or \"cuda:N\"", device)
}

// engine says which engine opts pick.
func (opts Options) engine() (target, error) {
	kind, ordinal, err := parseDevice(opts.Device)
	if err != nil {
		return target{}, err
	}
	var t target
	switch kind {
	case "auto":
		t.gpu = gpuUsable(0) == nil
	case "cuda":
		if err := gpuUsable(ordinal); err != nil {
			return target{}, engine.Invalid("device %q: no usable GPU: %v", opts.Device, err)
		}
		t.gpu, t.ordinal = true, ordinal
	}
	if strings.EqualFold(opts.DType, "auto") {
		t.autoDT = true
		return t, nil
	}
	dt, ok := cuda.ParseDType(opts.DType)
	if !ok && opts.DType != "" {
		return target{}, engine.Invalid("dtype %q: want None, \"auto\", \"float32\", \"bfloat16\" or \"float16\"", opts.DType)
	}
	t.dt = dt
	return t, nil
}

// narrowing is the 16-bit type that the CPU engine keeps the weight
// matrices of a model of config cfg in (for "auto", the one cfg names), so
// that they load straight into it (checkpoint.LoadNarrowed,
// FromTensorsNarrowed); "" for float32, and for the CUDA engine, which
// uploads from float32.
func (t target) narrowing(cfg checkpoint.Config) safetensors.DType {
	if t.gpu {
		return ""
	}
	switch t.resolved(cfg).dt {
	case cuda.BF16:
		return safetensors.BF16
	case cuda.F16:
		return safetensors.F16
	}
	return ""
}

// resolved is t with dtype "auto" read from cfg: the type it names, else
// float32.
func (t target) resolved(cfg checkpoint.Config) target {
	if t.autoDT {
		t.dt, _ = cuda.ParseDType(cfg.DType)
	}
	return t
}

// start puts w on the engine t names; what names the weights in errors.
func start(w *checkpoint.Weights, t target, opts Options, what string) (*Model, error) {
	t = t.resolved(w.Config)
	if t.gpu {
		g, err := gpu.New(w, t.ordinal, t.dt)
		if err != nil {
			return nil, fmt.Errorf("open %s on the GPU: %w", what, err)
		}
		return &Model{Engine: g}, nil
	}
	e := cpu.NewStored(w, storage(t.dt))
	if opts.BLAS != "" {
		var err error
		if e.BLAS, err = blas.Open(opts.BLAS); err != nil {
			return nil, engine.Invalid("%v", err)
		}
	}
	return &Model{Engine: e}, nil
}

// DeviceIndex returns the GPU m runs on, as the driver numbers them, or -1
// on the CPU engine.
func (m *Model) DeviceIndex() int {
	if g, ok := m.Engine.(*gpu.Engine); ok {
		return g.Ordinal()
	}
	return -1
}

// CloneState returns a new state of m's engine holding st's values, its
// conv windows and SSM states layer by layer: the same sequences, to be
// continued two ways or come back to. st must be a state of m's shape.
func (m *Model) CloneState(st engine.State) (engine.State, error) {
	out, err := m.NewState(st.Batch())
	if err != nil {
		return nil, err
	}
	if err := copyLayers(out, st, m.Config().Layers); err != nil {
		return nil, errors.Join(fmt.Errorf("clone state: %w", err), freeState(out))
	}
	return out, nil
}

// copyLayers copies the conv windows and SSM states of layers layers from
// src to dst, states of the same shape.
func copyLayers(dst, src engine.State, layers int) error {
	for layer := range layers {
		conv, err := src.ConvState(layer)
		if err == nil {
			err = dst.SetConvState(layer, conv)
		}
		if err != nil {
			return fmt.Errorf("layer %d: %w", layer, err)
		}
		ssm, err := src.SSMState(layer)
		if err == nil {
			err = dst.SetSSMState(layer, ssm)
		}
		if err != nil {
			return fmt.Errorf("layer %d: %w", layer, err)
		}
	}
	return nil
}

// Reserve sizes the engine's workspace up front for prefills of up to batch
// sequences of T positions and decode steps of up to batch sequences, so
// those calls allocate no device memory (CUDA engine). The CPU engine has no
// workspace to size and returns nil.
func (m *Model) Reserve(batch, T int) error {
	if r, ok := m.Engine.(interface{ Reserve(batch, T int) error }); ok {
		return r.Reserve(batch, T)
	}
	if batch < 1 || T < 1 {
		return engine.Invalid("reserve: batch_size = %d and seq_len = %d must be positive", batch, T)
	}
	return nil
}

// DType names the type of the model's GEMM weights: "float32", "bfloat16"
// or "float16" (Options.DType). On the CUDA engine the GEMMs' inputs take
// it too; the CPU engine computes in float32.
func (m *Model) DType() string {
	switch e := m.Engine.(type) {
	case *gpu.Engine:
		return e.DType().String()
	case *cpu.Engine:
		return e.Storage().String()
	}
	return "float32"
}

// storage is the CPU engine's weight storage for the type dt.
func storage(dt cuda.DType) cpu.Storage {
	switch dt {
	case cuda.BF16:
		return cpu.BFloat16
	case cuda.F16:
		return cpu.Float16
	}
	return cpu.Float32
}
