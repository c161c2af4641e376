// Package blastest opens the CBLAS library the Go tests and benchmarks run
// against: the one $MAMBAGO_TEST_BLAS names (scripts/test.sh sets it to
// numpy's OpenBLAS).
package blastest

import (
	"os"
	"testing"

	"github.com/mambago/mambago/mambago/blas"
)

// Env is the variable that names the library.
const Env = "MAMBAGO_TEST_BLAS"

// Need returns the library, skipping the test, saying why, where none is
// named.
func Need(tb testing.TB) *blas.Lib {
	tb.Helper()
	lib := Maybe(tb)
	if lib == nil {
		tb.Skip(Env + " is not set: no CBLAS library to test (scripts/test.sh sets it to numpy's OpenBLAS)")
	}
	return lib
}

// Maybe returns the library, or nil where none is named (the caller then
// runs without one). A library that does not open fails the test.
func Maybe(tb testing.TB) *blas.Lib {
	tb.Helper()
	path := os.Getenv(Env)
	if path == "" {
		return nil
	}
	lib, err := blas.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	return lib
}
