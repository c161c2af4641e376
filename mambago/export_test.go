package mambago

// SetOnePrefillPads makes PrefillSpans and StartSpans run a padded batch as one prefill
// (one) or a prefill a row length, whatever the engine, until the returned
// function restores the engine's own choice.
func SetOnePrefillPads(one bool) (restore func()) {
	saved := onePrefillPads
	onePrefillPads = func(*Model) bool { return one }
	return func() { onePrefillPads = saved }
}

// IdleState returns the state Generate keeps for its next call, or nil.
func IdleState(m *Model) any {
	m.gen.mu.Lock()
	defer m.gen.mu.Unlock()
	if m.gen.st == nil {
		return nil
	}
	return m.gen.st
}
