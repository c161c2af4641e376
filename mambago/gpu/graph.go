package gpu

import (
	"errors"
	"fmt"

	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
)

// Graph is a captured prefill or decode step for one state and one shape:
// every launch of the eager path recorded once and replayed as a CUDA graph,
// reading its input from and writing its output to buffers of its own (the
// intermediate workspace is the engine's). A replay gives bit for bit what
// the eager call gives.
type Graph struct {
	e              *Engine
	s              *State
	g              *cuda.Graph
	in, out, logit *cuda.Buffer
	// inBind and outBind, where the capture could find them, let a
	// device-pointer replay read its token ids from, and write its output
	// to, the caller's memory in place (bindTo); nil: it copies.
	inBind, outBind *cuda.Binding
	unbound         error // why a buffer has no binding, for InPlace's callers
	generation      int   // the workspace it points into
	tf32            bool  // the GEMM mode it was captured with
	step            bool
	headPicks       bool // a step whose LM head ranks the greedy picks (Engine.headPicks at the capture)
	kind            string
	B, T            int
	pool            engine.Pool
}

// CaptureStep captures the decode step for st: token ids [B] in, logits [B, V] out.
func (e *Engine) CaptureStep(st engine.State) (*Graph, error) {
	s, err := e.own(st)
	if err != nil {
		return nil, err
	}
	return e.capture(&Graph{s: s, step: true, headPicks: e.headPicks(s.batch), kind: "ids", B: s.batch, T: 1,
		pool: engine.Last})
}

// CapturePrefill captures a prefill of B = st.Batch() sequences of T
// positions from kind ("ids", "embeds" or "features") with output pool.
func (e *Engine) CapturePrefill(st engine.State, kind string, T int, pool engine.Pool) (*Graph, error) {
	s, err := e.own(st)
	if err != nil {
		return nil, err
	}
	if T < 1 || s.batch*T > e.ChunkRows {
		return nil, engine.Invalid("captured prefills run as one chunk: B*T = %d*%d must be in 1..%d", s.batch, T, e.ChunkRows)
	}
	if kind != "ids" && kind != "embeds" && kind != "features" || kind == "features" && e.cfg.InputDim == 0 {
		return nil, engine.Invalid("input kind %q is not one this model takes", kind)
	}
	return e.capture(&Graph{s: s, kind: kind, B: s.batch, T: T, pool: pool})
}

// body queues the graph's work: the device part of a prefill or step.
func (g *Graph) body() error {
	e := g.e
	src := source{in: engine.Input{B: g.B, T: g.T}, kind: g.kind, dev: g.in.Ptr}
	if g.step {
		return e.stepDevice(g.s, src, g.out.Ptr, g.logit.Ptr)
	}
	return e.run(g.s, src, g.pool, g.out.Ptr, 0)
}

// alloc gives g its input, output and logits buffers.
func (g *Graph) alloc() error {
	c, rows := g.e.cfg, g.B*g.T
	inBytes := map[string]int{"ids": 8 * rows, "embeds": 4 * rows * c.Hidden, "features": 4 * rows * max(1, c.InputDim)}[g.kind]
	for _, b := range []struct {
		dst   **cuda.Buffer
		bytes int
	}{{&g.in, inBytes}, {&g.out, 4 * g.pool.OutLen(g.B, g.T, c.Hidden)}, {&g.logit, 4 * g.B * c.Vocab}} {
		buf, err := cuda.Alloc(b.bytes)
		if err != nil {
			return err
		}
		*b.dst = buf
	}
	return nil
}

func (g *Graph) free() {
	for _, b := range []*cuda.Buffer{g.in, g.out, g.logit} {
		b.Free()
	}
	if g.g != nil {
		g.g.Destroy()
		g.g = nil
	}
}

func (e *Engine) capture(g *Graph) (*Graph, error) {
	done, err := e.bind()
	if err != nil {
		return nil, err
	}
	defer done()
	return e.captureBound(g)
}

// captureBound captures g; the caller holds e.mu and the bound thread.
func (e *Engine) captureBound(g *Graph) (*Graph, error) {
	g.e = e
	timer := e.Timer // events of a timer have no place in a graph
	e.Timer = nil
	defer func() { e.Timer = timer }()
	if err := e.ensure(g.B * g.T); err != nil {
		return nil, err
	}
	if err := g.alloc(); err != nil {
		g.free()
		return nil, err
	}
	// One eager run first, on a copy of the state, so that cuBLAS has picked
	// and set up its kernels before the capture.
	if err := e.onStream(nil, func() error { return e.warmUp(g) }); err != nil {
		g.free()
		return nil, err
	}
	err := e.onStream(nil, func() error {
		var cerr error
		g.g, cerr = cuda.CaptureEditing(e.stream, e.memsetEdit(), g.body)
		return cerr
	})
	if err != nil {
		g.free()
		return nil, fmt.Errorf("gpu: capture: %w", err)
	}
	g.generation, g.tf32 = e.ws.generation, e.blas.TF32
	g.bind()
	return g, nil
}

// bind finds, in the captured graph, the uses of the buffers a device
// replay may point at the caller's memory instead: token ids, which only
// the engine's own kernels read, and a prefill's output, which only they
// write (with the NaN poison's memset, under Engine.PoisonOutputs). A
// decode step's logits come from cuBLAS and are always copied. A buffer
// cuda.Graph.Bind refuses, or fails to bind, is copied through as before;
// g.unbound says why.
func (g *Graph) bind() {
	ours := g.e.ownKernels()
	find := func(buf *cuda.Buffer, what string) *cuda.Binding {
		b, err := g.g.Bind(buf.Ptr, buf.Bytes, ours)
		if err != nil {
			g.unbound = errors.Join(g.unbound, fmt.Errorf("%s: %w", what, err))
		}
		return b
	}
	if g.kind == "ids" {
		g.inBind = find(g.in, "token ids")
	}
	if !g.step {
		g.outBind = find(g.out, "output")
	}
}

// bindTo points b's uses at the caller's buffer p when the replay can use
// it in place (b found, direct: the caller's type is the graph's, and p
// aligned to align bytes, as the kernels' vector loads and stores need),
// and says whether it did; otherwise, or where the driver refuses p (a
// memset node moves only within its context), it points them back at the
// graph's own buffer, own, through which the caller's data is copied.
func bindTo(b *cuda.Binding, p, own cuda.Ptr, direct bool, align int) (bool, error) {
	if b == nil {
		return false, nil
	}
	if direct && p%cuda.Ptr(align) == 0 && b.Rebind(p) == nil {
		return true, nil
	}
	return false, b.Rebind(own)
}

// ownBuffers points every rebound use back at the graph's own buffers, for
// a replay that copies through them.
func (g *Graph) ownBuffers() error {
	if g.inBind != nil {
		if err := g.inBind.Rebind(g.in.Ptr); err != nil {
			return err
		}
	}
	if g.outBind != nil {
		return g.outBind.Rebind(g.out.Ptr)
	}
	return nil
}

// InPlace says whether device-pointer replays of g can read their token
// ids and write their output in place (each where the caller's buffer is
// of the graph's type and aligned: ids to 8 bytes, the output to 16), and
// why a buffer that could not be bound was not (nil when none failed).
func (g *Graph) InPlace() (ids, out bool, why error) {
	return g.inBind != nil, g.outBind != nil, g.unbound
}

// Edited is how many of cuBLASLt's memset nodes the capture edited
// (Engine.MemsetKernels, Engine.HoistMemsets, Engine.FoldMemsets), and how
// many of those it folded into the RMSNorm before them.
func (g *Graph) Edited() (edited, folded int) {
	if g.g == nil {
		return 0, 0
	}
	return g.g.Edited(), g.g.Folded()
}

// memsetEdit is how captures edit cuBLASLt's memsets of its workspace
// after the engine's own kernels; nil when neither setting is on or before
// any cuBLASLt GEMM ran.
func (e *Engine) memsetEdit() *cuda.MemsetEdit {
	ws := e.blas.LtWorkspace()
	if !e.MemsetKernels && !e.HoistMemsets && !e.FoldMemsets || ws.Bytes == 0 {
		return nil
	}
	ed := &cuda.MemsetEdit{Span: ws.Ptr, Bytes: ws.Bytes, Hoist: e.HoistMemsets}
	if e.MemsetKernels {
		ed.Fill = e.fn["memset_rows"]
	}
	if e.FoldMemsets { // the RMSNorms before in_proj
		ed.Fold = []*cuda.Function{e.fn[e.typed("rmsnorm")], e.fn[e.typed("rmsnorm_embed")]}
	}
	ed.Ours = e.ownKernels()
	return ed
}

// ownKernels lists the engine's own kernels: every entry it loaded.
func (e *Engine) ownKernels() []*cuda.Function {
	fns := make([]*cuda.Function, 0, len(e.fn))
	for _, f := range e.fn {
		fns = append(fns, f)
	}
	return fns
}

// warmUp runs g's work eagerly and puts the state back as it was.
func (e *Engine) warmUp(g *Graph) error {
	st := g.s.buf
	saved, err := cuda.Alloc(st.Bytes)
	if err != nil {
		return err
	}
	defer saved.Free()
	if err := cuda.Copy(saved.Ptr, st.Ptr, st.Bytes, e.stream); err != nil {
		return err
	}
	if err := cuda.Fill32(g.in.Ptr, 0, g.in.Bytes/4, e.stream); err != nil { // token 0, or zeros
		return err
	}
	if err := g.body(); err != nil {
		return err
	}
	if err := cuda.Copy(st.Ptr, saved.Ptr, st.Bytes, e.stream); err != nil {
		return err
	}
	return e.stream.Synchronize()
}

// check reports why g can no longer be replayed.
func (g *Graph) check() error {
	e := g.e
	switch {
	case g.g == nil:
		return engine.Invalid("graph is destroyed")
	case g.s.buf == nil:
		return engine.Invalid("the graph's state is freed")
	case g.generation != e.ws.generation:
		return engine.Invalid("the engine's workspace was reallocated since the capture (a larger prefill ran): capture again")
	case g.tf32 != e.blas.TF32:
		return engine.Invalid("the GEMM mode changed since the capture (TF32 %v, now %v): capture again", g.tf32, e.blas.TF32)
	}
	return nil
}

// Step replays a captured decode step: ids [B] in, logits [B, V] out.
func (g *Graph) Step(ids []int64, logits []float32) error {
	e, c := g.e, g.e.cfg
	if !g.step {
		return engine.Invalid("graph captured a prefill, not a step")
	}
	if len(ids) != g.B || len(logits) != g.B*c.Vocab {
		return engine.Invalid("step graph for B=%d: got %d ids and %d logits (want %d)", g.B, len(ids), len(logits), g.B*c.Vocab)
	}
	if err := engine.CheckIDs("token_ids", ids, c.Vocab); err != nil {
		return err
	}
	return g.stepThen(ids, func(dev cuda.Ptr) error { return cuda.CopyOut(logits, dev, e.stream) }, true)
}

// stepThen replays a captured step on ids (checked; nil: the ids already in
// its input buffer, where a Decoder's picks go), then runs out on the
// logits [B, V] it left on the device, and waits for both when wait is set.
func (g *Graph) stepThen(ids []int64, out func(logits cuda.Ptr) error, wait bool) error {
	upload := func() error {
		if err := g.ownBuffers(); err != nil {
			return err
		}
		return cuda.CopyIn(g.in.Ptr, ids, g.e.stream) // nothing for nil ids
	}
	return g.replay(nil, upload, func() error { return out(g.logit.Ptr) }, wait)
}

// StepDevice replays a captured step on caller-owned device memory: B int64
// token ids at ids in, logits [B, V] f32 out to logits, queued on stream (0:
// the legacy default stream) after the work already there, without waiting.
// Both buffers must stay alive until the stream has run it. Ids are clamped
// into the vocabulary on the device, not checked.
func (g *Graph) StepDevice(ids, logits, stream uintptr) error {
	e := g.e
	if !g.step {
		return engine.Invalid("graph captured a prefill, not a step")
	}
	if ids == 0 || logits == 0 {
		return engine.Invalid("null device pointer (ids %#x, logits %#x)", ids, logits)
	}
	upload := func() error {
		if err := e.checkBuffers(callerBuffer{"ids", ids, 8 * g.B}, callerBuffer{"logits", logits, 4 * g.B * e.cfg.Vocab}); err != nil {
			return err
		}
		inPlace, err := bindTo(g.inBind, cuda.Ptr(ids), g.in.Ptr, e.InPlaceReplays, 8)
		if err != nil || inPlace {
			return err
		}
		return cuda.Copy(g.in.Ptr, cuda.Ptr(ids), 8*g.B, e.stream)
	}
	download := func() error { return cuda.Copy(cuda.Ptr(logits), g.logit.Ptr, 4*g.B*e.cfg.Vocab, e.stream) }
	return g.replay(cuda.WrapStream(stream), upload, download, false)
}

// replay uploads the input, launches the graph and downloads the output on
// stream (nil: the engine's own), after checking the graph is still valid,
// and waits for them when wait is set.
func (g *Graph) replay(stream *cuda.Stream, upload, download func() error, wait bool) error {
	e := g.e
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	if err := g.check(); err != nil {
		return err
	}
	return e.onStream(stream, func() error {
		if err := upload(); err != nil {
			return err
		}
		if err := g.g.Launch(e.stream); err != nil {
			return err
		}
		if err := download(); err != nil {
			return err
		}
		if !wait {
			return nil
		}
		return e.stream.Synchronize()
	})
}

// Prefill replays a captured prefill on the input in (of the captured kind
// and shape) and writes the pooled output to out.
func (g *Graph) Prefill(in engine.Input, out []float32) error {
	e, c := g.e, g.e.cfg
	if g.step {
		return engine.Invalid("graph captured a step, not a prefill")
	}
	if in.B != g.B || in.T != g.T {
		return engine.Invalid("graph captured B=%d T=%d, input has B=%d T=%d", g.B, g.T, in.B, in.T)
	}
	if err := engine.CheckPrefill(c, in, g.B, g.pool, out); err != nil {
		return err
	}
	upload := func() error {
		if err := g.ownBuffers(); err != nil {
			return err
		}
		switch {
		case in.IDs != nil && g.kind == "ids":
			return cuda.CopyIn(g.in.Ptr, in.IDs, e.stream)
		case in.Embeds != nil && g.kind == "embeds":
			return cuda.CopyIn(g.in.Ptr, in.Embeds, e.stream)
		case in.Features != nil && g.kind == "features":
			return cuda.CopyIn(g.in.Ptr, in.Features, e.stream)
		}
		return engine.Invalid("graph captured %s input", g.kind)
	}
	return g.replay(nil, upload, func() error { return cuda.CopyOut(out, g.out.Ptr, e.stream) }, true)
}

// Destroy releases the graph.
func (g *Graph) Destroy() error {
	if g.g == nil {
		return nil
	}
	done, err := g.e.bind()
	if err != nil {
		return err
	}
	defer done()
	g.free()
	return nil
}

// graphKey names a cached prefill graph: its state, input kind, shape and output.
type graphKey struct {
	s    *State
	kind string
	B, T int
	pool engine.Pool
}

// SetPrefillGraphs makes PrefillDevice replay a captured graph of each
// (state, input kind, B, T, output) it sees, capturing it on first use and
// keeping the n most recently used (0, the default, turns the cache off and
// frees it). A graph is captured again when the workspace has grown or the
// GEMM mode changed since. Prompts of more than ChunkRows rows run eagerly.
func (e *Engine) SetPrefillGraphs(n int) error {
	if n < 0 {
		return engine.Invalid("prefill graph cache size %d, want 0 or more", n)
	}
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	e.graphCap = n
	e.evictGraphs(func(graphKey) bool { return len(e.graphOrder) > n })
	return nil
}

// evictGraphs frees the cached graphs, least recently used first, for which
// drop says so; the caller holds the bound thread.
func (e *Engine) evictGraphs(drop func(graphKey) bool) {
	kept := e.graphOrder[:0]
	for _, k := range e.graphOrder {
		if drop(k) {
			e.graphs[k].free()
			delete(e.graphs, k)
			continue
		}
		kept = append(kept, k)
	}
	e.graphOrder = kept
}

// cachedPrefill returns the cached graph for k, capturing it when it is
// missing or can no longer replay; the caller holds the bound thread.
func (e *Engine) cachedPrefill(k graphKey) (*Graph, error) {
	if g, ok := e.graphs[k]; ok {
		if g.check() == nil {
			e.touchGraph(k)
			return g, nil
		}
		e.evictGraphs(func(o graphKey) bool { return o == k })
	}
	g, err := e.captureBound(&Graph{s: k.s, kind: k.kind, B: k.B, T: k.T, pool: k.pool})
	if err != nil {
		return nil, err
	}
	if e.graphs == nil {
		e.graphs = map[graphKey]*Graph{}
	}
	e.graphs[k] = g
	e.graphOrder = append(e.graphOrder, k)
	for len(e.graphOrder) > e.graphCap {
		oldest := e.graphOrder[0]
		e.evictGraphs(func(o graphKey) bool { return o == oldest })
	}
	return g, nil
}

// touchGraph moves k to the most recently used end.
func (e *Engine) touchGraph(k graphKey) {
	for i, o := range e.graphOrder {
		if o == k {
			copy(e.graphOrder[i:], e.graphOrder[i+1:])
			e.graphOrder[len(e.graphOrder)-1] = k
			return
		}
	}
}

// replayDevice runs g on caller-owned device memory, all on e.stream: the
// graph reads token ids at io.in in place, and writes an f32 output to
// io.out in place, where the capture found those buffers' uses and the
// caller's are aligned (Graph.InPlace); otherwise the input is copied, or
// widened from io.inType, into g's input buffer, and the output copied, or
// rounded to io.outType, from g's. With io.out 0 the output stays in g.out.
// The caller holds the bound thread and runs it inside onStream.
func (g *Graph) replayDevice(io deviceIO) error {
	e := g.e
	// Buffers that overlap are copied: the output's NaN poison, if on, comes first.
	apart := e.InPlaceReplays && (io.out == 0 || io.in+cuda.Ptr(g.in.Bytes) <= io.out || io.out+cuda.Ptr(g.out.Bytes) <= io.in)
	inPlace, err := bindTo(g.inBind, io.in, g.in.Ptr, apart, 8) // ids (the graph's kind), whose type is always int64
	if err != nil {
		return err
	}
	outPlace, err := bindTo(g.outBind, io.out, g.out.Ptr, apart && io.out != 0 && io.outType == cuda.F32, 16)
	if err != nil {
		return err
	}
	switch {
	case inPlace:
	case io.inType == cuda.F32:
		err = cuda.Copy(g.in.Ptr, io.in, g.in.Bytes, e.stream)
	default:
		err = e.convert("from_"+io.inType.Suffix(), io.in, g.in.Ptr, g.in.Bytes/4)
	}
	if err != nil {
		return err
	}
	if err := g.g.Launch(e.stream); err != nil {
		return err
	}
	switch {
	case outPlace || io.out == 0:
		return nil
	case io.outType == cuda.F32:
		return cuda.Copy(io.out, g.out.Ptr, g.out.Bytes, e.stream)
	}
	return e.convert("to_"+io.outType.Suffix(), g.out.Ptr, io.out, g.out.Bytes/4)
}
