package cuda

/*
#include "shim.h"
*/
import "C"

import "unsafe"

// Stream is a CUDA stream. A nil *Stream is the legacy default stream.
type Stream struct {
	h     unsafe.Pointer
	owned bool
}

// NewStream creates a non-blocking stream.
func NewStream() (*Stream, error) {
	s := &Stream{owned: true}
	const nonBlocking = 1
	return s, check("cuStreamCreate", C.mg_cuStreamCreate(&s.h, nonBlocking))
}

// WrapStream adopts a stream handle the caller owns (e.g. PyTorch's
// torch.cuda.current_stream().cuda_stream); Destroy leaves it alone.
func WrapStream(handle uintptr) *Stream {
	return &Stream{h: *(*unsafe.Pointer)(unsafe.Pointer(&handle))}
}

// Handle returns the raw CUstream, as a caller-facing API passes it around.
func (s *Stream) Handle() uintptr { return uintptr(s.handle()) }

func (s *Stream) handle() unsafe.Pointer {
	if s == nil {
		return nil
	}
	return s.h
}

// Synchronize waits until all work queued on s has finished.
func (s *Stream) Synchronize() error {
	return check("cuStreamSynchronize", C.mg_cuStreamSynchronize(s.handle()))
}

// Destroy releases a stream NewStream made.
func (s *Stream) Destroy() error {
	if s == nil || !s.owned || s.h == nil {
		return nil
	}
	h := s.h
	s.h = nil
	return check("cuStreamDestroy", C.mg_cuStreamDestroy(h))
}

// Event marks a point in a stream, for timing.
type Event struct{ h unsafe.Pointer }

// NewEvent creates an event that records timing.
func NewEvent() (*Event, error) {
	e := &Event{}
	return e, check("cuEventCreate", C.mg_cuEventCreate(&e.h, 0))
}

// Record queues the event on s.
func (e *Event) Record(s *Stream) error {
	return check("cuEventRecord", C.mg_cuEventRecord(e.h, s.handle()))
}

// Wait makes later work queued on s wait until the event has completed.
func (s *Stream) Wait(e *Event) error {
	return check("cuStreamWaitEvent", C.mg_cuStreamWaitEvent(s.handle(), e.h, 0))
}

// Synchronize waits for the event.
func (e *Event) Synchronize() error { return check("cuEventSynchronize", C.mg_cuEventSynchronize(e.h)) }

// Elapsed returns the milliseconds between two recorded events.
func Elapsed(start, end *Event) (float32, error) {
	var ms C.float
	err := check("cuEventElapsedTime", C.mg_cuEventElapsedTime(&ms, start.h, end.h))
	return float32(ms), err
}

// Destroy releases the event.
func (e *Event) Destroy() error {
	if e == nil || e.h == nil {
		return nil
	}
	h := e.h
	e.h = nil
	return check("cuEventDestroy", C.mg_cuEventDestroy(h))
}

// Capturing reports whether s is capturing a graph, when nothing may wait
// for it (events cannot be synchronized).
func (s *Stream) Capturing() (bool, error) {
	var status C.int // CUstreamCaptureStatus: 0 none, 1 active, 2 invalidated
	if err := check("cuStreamIsCapturing", C.mg_cuStreamIsCapturing(s.handle(), &status)); err != nil {
		return false, err
	}
	return status != 0, nil
}
