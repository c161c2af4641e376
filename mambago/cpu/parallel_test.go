package cpu

import (
	"errors"
	"testing"
)

// TestOffCaller checks that offCaller hands back fn's error, and that a
// panic in fn goes on up in the caller with its value (the bindings turn a
// panic into a Python exception only on the caller's goroutine).
func TestOffCaller(t *testing.T) {
	want := errors.New("fn's error")
	if err := offCaller(func() error { return want }); err != want {
		t.Fatalf("offCaller returned %v, want %v", err, want)
	}
	if err := offCaller(func() error { return nil }); err != nil {
		t.Fatalf("offCaller returned %v, want nil", err)
	}
	defer func() {
		if r := recover(); r != "boom" {
			t.Fatalf("recovered %v, want the panic's value \"boom\"", r)
		}
	}()
	_ = offCaller(func() error { panic("boom") })
	t.Fatal("offCaller returned after fn panicked")
}
