package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Graph is an instantiated CUDA graph, captured from a stream.
type Graph struct {
	graph, exec unsafe.Pointer
	hoisted     int // memset nodes CaptureHoisting moved
}

// Capture records everything fn queues on s (which must not be the legacy
// default stream) into a graph and instantiates it. Nothing runs during
// capture; Launch replays it.
func Capture(s *Stream, fn func() error) (*Graph, error) { return CaptureHoisting(s, nil, fn) }

// CaptureHoisting is Capture, then, before instantiating, lets the memset
// nodes h names start early (see Hoist); a nil h moves none, and neither
// does a driver without the graph-edit entry points (CUDA < 12.3).
func CaptureHoisting(s *Stream, h *Hoist, fn func() error) (*Graph, error) {
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
	if h != nil && GraphEdits() {
		n, err := h.apply(g.graph)
		if err != nil {
			g.Destroy()
			return nil, fmt.Errorf("cuda: hoisting memsets: %w", err)
		}
		g.hoisted = n
	}
	if err := check("cuGraphInstantiate", C.mg_cuGraphInstantiate(&g.exec, g.graph, 0)); err != nil {
		g.Destroy()
		return nil, err
	}
	return g, nil
}

// Hoisted is how many memset nodes CaptureHoisting moved.
func (g *Graph) Hoisted() int { return g.hoisted }

// Hoist names the memset nodes a captured graph may start early.
//
// cuBLASLt captures some GEMMs as a memset of its workspace and then the
// kernel. In the graph the memset waits for the node before it and the
// kernel for the memset, so two node transitions lie between the kernel
// before and the GEMM instead of one. (On the H200, a bf16 130m prefill's
// in_proj: 0.8 µs of memset, 4.9 µs from the RMSNorm's end to the GEMM's
// start, against about 0.1 µs for a GEMM without one; bench/graph_trace.py.)
//
// A memset node that writes only within [Span, Span+Bytes) and waits only
// for a kernel of Ours, which never touches that span, need not wait for
// that kernel: Hoist makes it wait for what the kernel waits for instead,
// and makes its one dependent, if that waits for nothing else, wait for
// the kernel directly. Every other node keeps its edges, so the graph
// computes the same values: the memset still follows whatever came before
// the kernel (the previous user of the workspace among them) and still
// precedes its GEMM.
type Hoist struct {
	Span  Ptr // what the memsets may write: a library's scratch
	Bytes int
	Ours  []*Function // kernels that never touch the span
}

// CUgraphNodeType values.
const (
	kernelNode = 0
	memsetNode = 2
)

// apply hoists the memsets of graph it may, and returns how many.
func (h *Hoist) apply(graph unsafe.Pointer) (int, error) {
	ours := map[unsafe.Pointer]bool{}
	for _, f := range h.Ours {
		ours[f.h] = true
	}
	nodes, err := graphNodes(graph)
	if err != nil {
		return 0, err
	}
	moved := 0
	for _, m := range nodes {
		ok, err := h.hoistable(m, ours)
		if err != nil {
			return moved, err
		}
		if !ok {
			continue
		}
		pred, predEdge, _ := nodeEdges(m, false)
		succ, _, _ := nodeEdges(m, true)
		p, g := pred[0], succ[0]
		before, _, err := nodeEdges(p, false)
		if err != nil {
			return moved, err
		}
		// g waits for p directly, then m stops waiting for p and waits for
		// p's own predecessors (default edges: full completion).
		if err := addEdges(graph, []unsafe.Pointer{p}, g); err != nil {
			return moved, err
		}
		if err := check("cuGraphRemoveDependencies", C.mg_cuGraphRemoveDependencies(graph,
			(*unsafe.Pointer)(unsafe.Pointer(&pred[0])), (*unsafe.Pointer)(unsafe.Pointer(&m)), &predEdge[0], 1)); err != nil {
			return moved, err
		}
		if err := addEdges(graph, before, m); err != nil {
			return moved, err
		}
		moved++
	}
	return moved, nil
}

// hoistable says whether memset node m may be hoisted: a memset within
// the span, after one kernel of ours, before one node that waits for m
// alone.
func (h *Hoist) hoistable(m unsafe.Pointer, ours map[unsafe.Pointer]bool) (bool, error) {
	if t, err := nodeType(m); err != nil || t != memsetNode {
		return false, err
	}
	var dst C.mg_devptr
	var bytes C.size_t
	if err := check("cuGraphMemsetNodeGetParams", C.mg_cuGraphMemsetNodeSpan(m, &dst, &bytes)); err != nil {
		return false, err
	}
	if Ptr(dst) < h.Span || uint64(dst)+uint64(bytes) > uint64(h.Span)+uint64(h.Bytes) {
		return false, nil
	}
	pred, _, err := nodeEdges(m, false)
	if err != nil || len(pred) != 1 {
		return false, err
	}
	if t, err := nodeType(pred[0]); err != nil || t != kernelNode {
		return false, err
	}
	var fn unsafe.Pointer
	if err := check("cuGraphKernelNodeGetParams", C.mg_cuGraphKernelNodeFunction(pred[0], &fn)); err != nil {
		return false, err
	}
	if fn == nil || !ours[fn] {
		return false, nil
	}
	succ, _, err := nodeEdges(m, true)
	if err != nil || len(succ) != 1 {
		return false, err
	}
	waits, _, err := nodeEdges(succ[0], false)
	return err == nil && len(waits) == 1, err
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
func graphLayout() [9]int {
	var out [9]C.int
	C.mg_graph_layout(&out[0])
	var r [9]int
	for i, v := range out {
		r[i] = int(v)
	}
	return r
}

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
// CaptureHoisting edits graphs with (CUDA >= 12.3).
func GraphEdits() bool { return C.mg_graph_edits() != 0 }
