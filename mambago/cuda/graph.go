package cuda

/*
#include "shim.h"
*/
import "C"

import "unsafe"

// Graph is an instantiated CUDA graph, captured from a stream.
type Graph struct{ graph, exec unsafe.Pointer }

// Capture records everything fn queues on s (which must not be the legacy
// default stream) into a graph and instantiates it. Nothing runs during
// capture; Launch replays it.
func Capture(s *Stream, fn func() error) (*Graph, error) {
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
	if err := check("cuGraphInstantiate", C.mg_cuGraphInstantiate(&g.exec, g.graph, 0)); err != nil {
		g.Destroy()
		return nil, err
	}
	return g, nil
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
