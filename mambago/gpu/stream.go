package gpu

import "github.com/mambago/mambago/mambago/cuda"

// onStream runs fn with the engine's work queued on s (nil: the engine's own
// stream), after all earlier work of the engine (the state and workspace are
// shared), and leaves an event that later calls order after. The caller
// holds e.mu and the bound thread.
func (e *Engine) onStream(s *cuda.Stream, fn func() error) error {
	own := e.stream
	if s == nil {
		s = own
	}
	if err := s.Wait(e.last); err != nil {
		return err
	}
	if s != own {
		if err := e.blas.SetStream(s); err != nil {
			return err
		}
		e.stream = s
		defer func() {
			e.stream = own
			e.blas.SetStream(own)
		}()
	}
	if err := fn(); err != nil {
		return err
	}
	return e.last.Record(s)
}
