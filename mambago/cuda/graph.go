package cuda

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"slices"
	"unsafe"
)

// Graph is an instantiated CUDA graph, captured from a stream.
type Graph struct {
	graph, exec unsafe.Pointer
	edited      int                          // memset nodes CaptureEditing edited
	folded      int                          // of those, folded into the kernel before them
	args        map[unsafe.Pointer]*nodeArgs // kernel nodes' arguments as Bind's bindings set them
}

// Capture records everything fn queues on s (which must not be the legacy
// default stream) into a graph and instantiates it. Nothing runs during
// capture; Launch replays it.
func Capture(s *Stream, fn func() error) (*Graph, error) { return CaptureEditing(s, nil, fn) }

// CaptureEditing is Capture, then, before instantiating, edits the memset
// nodes ed names (see MemsetEdit); a nil ed edits none, and neither does a
// driver without the graph-edit entry points (CUDA < 12.3).
func CaptureEditing(s *Stream, ed *MemsetEdit, fn func() error) (*Graph, error) {
	const relaxed = 2 // CU_STREAM_CAPTURE_MODE_RELAXED: other threads may keep calling CUDA
	if err := check("cuStreamBeginCapture", C.mg_cuStreamBeginCapture(s.handle(), relaxed)); err != nil {
		return nil, err
	}
	fnErr := fn()
	g := &Graph{}
	endErr := check("cuStreamEndCapture", C.mg_cuStreamEndCapture(s.handle(), &g.graph))
	if fnErr != nil || endErr != nil {
		g.Destroy()
		if fnErr != nil {
			return nil, fnErr
		}
		return nil, endErr
	}
	if ed != nil && GraphEdits() {
		n, folded, err := ed.apply(g.graph)
		if err != nil {
			g.Destroy()
			return nil, fmt.Errorf("cuda: editing memset nodes: %w", err)
		}
		g.edited, g.folded = n, folded
	}
	if err := check("cuGraphInstantiate", C.mg_cuGraphInstantiate(&g.exec, g.graph, 0)); err != nil {
		g.Destroy()
		return nil, err
	}
	return g, nil
}

// Edited is how many memset nodes CaptureEditing edited.
func (g *Graph) Edited() int { return g.edited }

// Folded is how many of the edited memsets MemsetEdit's Fold took into the
// kernel before them.
func (g *Graph) Folded() int { return g.folded }

// MemsetEdit names the memset nodes of a captured graph to edit, and how.
//
// cuBLASLt captures some GEMMs as a memset of its workspace and then the
// kernel. On the H200 a GEMM node after such a memset started about 3 µs
// later than one after a kernel, even when the memset had been done for
// long (bench/graph_trace.py; bench/NOTES.md, session of 2026-12-01 03:39).
//
// The edit applies to a memset node that writes only within [Span,
// Span+Bytes), waits for one kernel of Ours (which never touch that span)
// and has one dependent, which waits for it alone. Fill, when set,
// replaces the memset with a kernel node that writes the same bytes: Fill
// must be memset_rows of kernels/elementwise.cu (dst, pitch, value,
// element size, width, height). Hoist makes the memset (or its kernel)
// wait for what the kernel before it waits for instead of that kernel, and
// the dependent wait for that kernel directly. Every other edge stays, so
// the graph computes the same values: the memset still follows whatever
// came before the kernel (the previous user of the workspace among them)
// and still precedes its GEMM.
//
// Fold names kernels of Ours that can take a memset over: their last three
// arguments are (fill Ptr, word uint32, words int64), and they write words
// copies of word from fill once they have waited for the kernel before
// them (kernels/rmsnorm.cu), which the memset waited for too. Where the
// memset's kernel is one of them, captured with no fill (words 0), and the
// memset writes whole aligned 32-bit words in one run, the kernel is given
// the memset's fill and the memset node goes: its dependent then waits for
// that kernel alone. Elsewhere Fill and Hoist apply as above. Fold needs
// GraphFolds.
type MemsetEdit struct {
	Span  Ptr // what the memsets may write: a library's scratch
	Bytes int
	Ours  []*Function // kernels that never touch the span but through a fill of Fold's
	Fill  *Function
	Hoist bool
	Fold  []*Function
}

// CUgraphNodeType values.
const (
	kernelNode = 0
	memsetNode = 2
)

// memsetParams is a memset node's CUDA_MEMSET_NODE_PARAMS.
type memsetParams struct {
	dst                  Ptr
	pitch, width, height uint64
	value                uint32
	element              int32
}

// bytes is the extent the memset writes from dst.
func (m memsetParams) bytes() uint64 {
	row := m.width * uint64(m.element)
	if m.height > 1 {
		return m.pitch*(m.height-1) + row
	}
	return row
}

// words is the memset as a fill of 32-bit words: the word, how many, and
// whether it is one (an aligned run of whole words).
func (m memsetParams) words() (word uint32, n int64, ok bool) {
	size := uint64(m.element)
	row := m.width * size
	if m.height > 1 && m.pitch != row || m.dst%4 != 0 || row*max(m.height, 1)%4 != 0 {
		return 0, 0, false
	}
	switch size {
	case 1:
		word = (m.value & 0xff) * 0x01010101
	case 2:
		word = (m.value & 0xffff) * 0x00010001
	case 4:
		word = m.value
	default:
		return 0, 0, false
	}
	return word, int64(row * max(m.height, 1) / 4), true
}

// memsetSite is an editable memset node m: its parameters, the kernel p it
// waits for (by the edge pe; fn its function) and the node g that waits
// for it.
type memsetSite struct {
	m, p, g unsafe.Pointer
	fn      unsafe.Pointer
	pe      C.mg_edge
	params  memsetParams
}

// apply edits the memsets of graph it may, and returns how many, and how
// many of those it folded.
func (ed *MemsetEdit) apply(graph unsafe.Pointer) (edited, folded int, err error) {
	ours := map[unsafe.Pointer]bool{}
	for _, f := range ed.Ours {
		ours[f.h] = true
	}
	nodes, err := graphNodes(graph)
	if err != nil {
		return 0, 0, err
	}
	for _, m := range nodes {
		site, ok, err := ed.editable(m, ours)
		if err != nil {
			return edited, folded, err
		}
		if !ok {
			continue
		}
		fold, err := ed.fold(graph, site) // else Fill and Hoist
		if err == nil && !fold {
			err = ed.edit(graph, site)
		}
		if err != nil {
			return edited, folded, err
		}
		edited++
		if fold {
			folded++
		}
	}
	return edited, folded, nil
}

// edit applies Fill and Hoist to one site.
func (ed *MemsetEdit) edit(graph unsafe.Pointer, site memsetSite) error {
	m, p, g, pe := site.m, site.p, site.g, site.pe
	if ed.Fill != nil {
		k, err := ed.fillNode(graph, site.params, p)
		if err != nil {
			return err
		}
		if err := addEdges(graph, []unsafe.Pointer{k}, g); err != nil {
			return err
		}
		if err := check("cuGraphDestroyNode", C.mg_cuGraphDestroyNode(m)); err != nil {
			return err
		}
		m, pe = k, C.mg_edge{}
	}
	if !ed.Hoist {
		return nil
	}
	before, _, err := nodeEdges(p, false)
	if err != nil {
		return err
	}
	// g waits for p directly, then m stops waiting for p and waits for p's
	// own predecessors (default edges: full completion).
	if err := addEdges(graph, []unsafe.Pointer{p}, g); err != nil {
		return err
	}
	if err := check("cuGraphRemoveDependencies", C.mg_cuGraphRemoveDependencies(graph,
		(*unsafe.Pointer)(unsafe.Pointer(&p)), (*unsafe.Pointer)(unsafe.Pointer(&m)), &pe, 1)); err != nil {
		return err
	}
	return addEdges(graph, before, m)
}

// fold gives site's kernel the memset's fill, where Fold allows it, and
// removes the memset; it reports whether it did.
func (ed *MemsetEdit) fold(graph unsafe.Pointer, site memsetSite) (bool, error) {
	i := slices.IndexFunc(ed.Fold, func(f *Function) bool { return f.h == site.fn })
	word, words, ok := site.params.words()
	if i < 0 || !ok || !GraphFolds() {
		return false, nil
	}
	f := ed.Fold[i]
	n := int(f.nargs.Load())
	if n < 3 {
		return false, fmt.Errorf("kernel %s: %d arguments, no fill", f.Name, n)
	}
	args := make([]byte, maxArgBytes)
	offsets, sizes, err := readKernelArgs(site.p, n, args)
	if err != nil {
		return false, fmt.Errorf("reading the arguments of kernel %s: %w", f.Name, err)
	}
	at := func(k int) []byte { return args[offsets[n-3+k]:] }
	if sizes[n-3] != 8 || sizes[n-2] != 4 || sizes[n-1] != 8 {
		return false, fmt.Errorf("kernel %s: its last three arguments are no fill (sizes %v)", f.Name, sizes[n-3:n])
	}
	if binary.LittleEndian.Uint64(at(2)) != 0 {
		return false, nil // it fills for another memset already
	}
	binary.LittleEndian.PutUint64(at(0), uint64(site.params.dst))
	binary.LittleEndian.PutUint32(at(1), word)
	binary.LittleEndian.PutUint64(at(2), uint64(words))
	if err := check("cuGraphKernelNodeSetParams", C.mg_cuGraphKernelNodeSetArgs(site.p, (*C.uchar)(unsafe.Pointer(&args[0])),
		(*C.int)(unsafe.Pointer(&offsets[0])), C.int(n))); err != nil {
		return false, err
	}
	if err := addEdges(graph, []unsafe.Pointer{site.p}, site.g); err != nil {
		return false, err
	}
	return true, check("cuGraphDestroyNode", C.mg_cuGraphDestroyNode(site.m))
}

// GraphFolds says whether the loaded driver has the entry points
// MemsetEdit's Fold uses (those of GraphRebinds, and setting a captured
// kernel node's arguments).
func GraphFolds() bool { return C.mg_graph_folds() != 0 }

// editable returns memset node m's site and whether the edit applies: a
// memset within the span, after one kernel of ours, before one node that
// waits for m alone.
func (ed *MemsetEdit) editable(m unsafe.Pointer, ours map[unsafe.Pointer]bool) (memsetSite, bool, error) {
	site := memsetSite{m: m}
	if t, err := nodeType(m); err != nil || t != memsetNode {
		return site, false, err
	}
	mp, err := nodeMemset(m)
	if err != nil {
		return site, false, err
	}
	site.params = mp
	if mp.dst < ed.Span || uint64(mp.dst)+mp.bytes() > uint64(ed.Span)+uint64(ed.Bytes) {
		return site, false, nil
	}
	pred, pe, err := nodeEdges(m, false)
	if err != nil || len(pred) != 1 {
		return site, false, err
	}
	site.p, site.pe = pred[0], pe[0]
	if t, err := nodeType(site.p); err != nil || t != kernelNode {
		return site, false, err
	}
	if site.fn, err = kernelFunction(site.p); err != nil {
		return site, false, err
	}
	if site.fn == nil || !ours[site.fn] {
		return site, false, nil
	}
	succ, _, err := nodeEdges(m, true)
	if err != nil || len(succ) != 1 {
		return site, false, err
	}
	site.g = succ[0]
	waits, _, err := nodeEdges(site.g, false)
	return site, err == nil && len(waits) == 1, err
}

// fillNode adds a node launching ed.Fill to write what mp would, after
// dep, and returns it.
func (ed *MemsetEdit) fillNode(graph unsafe.Pointer, mp memsetParams, dep unsafe.Pointer) (unsafe.Pointer, error) {
	n := mp.width * mp.height
	blocks := max(1, min((n+255)/256, 1024))
	buf, offsets, err := packArgs([]any{mp.dst, mp.pitch, mp.value, mp.element, int64(mp.width), int64(mp.height)})
	if err != nil {
		return nil, err
	}
	ed.Fill.nargs.Store(int32(len(offsets)))
	bufp := C.CBytes(buf)
	defer C.free(bufp)
	var node unsafe.Pointer
	err = check("cuGraphAddKernelNode", C.mg_cuGraphAddKernelNode(&node, graph, (*unsafe.Pointer)(unsafe.Pointer(&dep)), 1,
		ed.Fill.h, C.uint(blocks), 256, bufp, (*C.int)(unsafe.Pointer(&offsets[0])), C.int(len(offsets))))
	return node, err
}

// graphNodes lists graph's nodes.
func graphNodes(graph unsafe.Pointer) ([]unsafe.Pointer, error) {
	var n C.size_t
	if err := check("cuGraphGetNodes", C.mg_cuGraphGetNodes(graph, nil, &n)); err != nil || n == 0 {
		return nil, err
	}
	nodes := make([]unsafe.Pointer, n)
	return nodes[:n], check("cuGraphGetNodes", C.mg_cuGraphGetNodes(graph, (*unsafe.Pointer)(unsafe.Pointer(&nodes[0])), &n))
}

// nodeType is node's CUgraphNodeType.
func nodeType(node unsafe.Pointer) (int, error) {
	var t C.int
	err := check("cuGraphNodeGetType", C.mg_cuGraphNodeGetType(node, &t))
	return int(t), err
}

// kernelFunction is kernel node's CUfunction, nil for a kernel given as a
// CUkernel (none of ours: Function loads each through cuModuleGetFunction).
func kernelFunction(node unsafe.Pointer) (unsafe.Pointer, error) {
	var fn unsafe.Pointer
	err := check("cuGraphKernelNodeGetParams", C.mg_cuGraphKernelNodeFunction(node, &fn))
	return fn, err
}

// nodeEdges lists the nodes node waits for (or, with out, those that wait
// for it), and the edges' data.
func nodeEdges(node unsafe.Pointer, out bool) ([]unsafe.Pointer, []C.mg_edge, error) {
	get := func(nodes *unsafe.Pointer, edges *C.mg_edge, n *C.size_t) error {
		if out {
			return check("cuGraphNodeGetDependentNodes", C.mg_cuGraphNodeGetDependentNodes(node, nodes, edges, n))
		}
		return check("cuGraphNodeGetDependencies", C.mg_cuGraphNodeGetDependencies(node, nodes, edges, n))
	}
	var n C.size_t
	if err := get(nil, nil, &n); err != nil || n == 0 {
		return nil, nil, err
	}
	nodes, edges := make([]unsafe.Pointer, n), make([]C.mg_edge, n)
	if err := get(&nodes[0], &edges[0], &n); err != nil {
		return nil, nil, err
	}
	return nodes[:n], edges[:n], nil
}

// addEdges makes to wait for each of from, with default edges.
func addEdges(graph unsafe.Pointer, from []unsafe.Pointer, to unsafe.Pointer) error {
	for _, f := range from {
		var e C.mg_edge
		if err := check("cuGraphAddDependencies", C.mg_cuGraphAddDependencies(graph,
			(*unsafe.Pointer)(unsafe.Pointer(&f)), (*unsafe.Pointer)(unsafe.Pointer(&to)), &e, 1)); err != nil {
			return err
		}
	}
	return nil
}

// graphLayout is the shim's layout of the graph-edit structs (see
// mg_graph_layout), for a test without a GPU.
func graphLayout() []int { return shimLayout(13, func(p *C.int) { C.mg_graph_layout(p) }) }

// Launch replays the graph on s.
func (g *Graph) Launch(s *Stream) error {
	return check("cuGraphLaunch", C.mg_cuGraphLaunch(g.exec, s.handle()))
}

// Destroy releases the graph.
func (g *Graph) Destroy() error {
	var err error
	if g.exec != nil {
		err = check("cuGraphExecDestroy", C.mg_cuGraphExecDestroy(g.exec))
		g.exec = nil
	}
	if g.graph != nil {
		if e := check("cuGraphDestroy", C.mg_cuGraphDestroy(g.graph)); err == nil {
			err = e
		}
		g.graph = nil
	}
	return err
}

// TimeGraph captures runs calls of fn on s into a graph, replays it once
// to warm up and once between CUDA events, and returns the milliseconds a
// call: GPU time, without the host's launch overhead. s must not be
// capturing already.
func TimeGraph(s *Stream, runs int, fn func() error) (float32, error) {
	g, err := Capture(s, func() error {
		for range runs {
			if err := fn(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	defer g.Destroy()
	start, err := NewEvent()
	if err != nil {
		return 0, err
	}
	defer start.Destroy()
	end, err := NewEvent()
	if err != nil {
		return 0, err
	}
	defer end.Destroy()
	for _, step := range []func() error{func() error { return g.Launch(s) }, func() error { return start.Record(s) },
		func() error { return g.Launch(s) }, func() error { return end.Record(s) }, end.Synchronize} {
		if err := step(); err != nil {
			return 0, err
		}
	}
	ms, err := Elapsed(start, end)
	return ms / float32(runs), err
}

// GraphEdits says whether the loaded driver has the entry points
// CaptureEditing edits graphs with (CUDA >= 12.3).
func GraphEdits() bool { return C.mg_graph_edits() != 0 }
