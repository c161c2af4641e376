// Package gputest holds the helpers the GPU tests share.
package gputest

import (
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/mambago/mambago/mambago/cuda"
)

// Need skips the test, saying why, when no GPU is usable.
func Need(t testing.TB) {
	t.Helper()
	if err := cuda.Init(); err != nil {
		t.Skipf("no usable GPU: %v", err)
	}
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no CUDA device (%v)", err)
	}
}

// Device keeps the test on one OS thread with GPU 0's primary context (the
// one the engines use) current, for the test's own launches and copies, or
// skips the test when there is no GPU. The context is released at cleanup.
func Device(t testing.TB) *cuda.Device {
	t.Helper()
	Need(t)
	runtime.LockOSThread()
	d, err := cuda.Open(0)
	if err == nil {
		err = d.Bind()
	}
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		runtime.UnlockOSThread()
	})
	return d
}

// NeedNVRTC loads NVRTC for tests that compile kernels without a GPU, or
// skips the test, saying why, when there is none; with
// MAMBAGO_REQUIRE_NVRTC set (scripts/test.sh, CI) it fails the test
// instead, so a missing library cannot pass as a skip.
func NeedNVRTC(t testing.TB) {
	t.Helper()
	if err := cuda.LoadNVRTC(); err != nil {
		if os.Getenv("MAMBAGO_REQUIRE_NVRTC") != "" {
			t.Fatalf("NVRTC required (MAMBAGO_REQUIRE_NVRTC is set): %v", err)
		}
		t.Skipf("no NVRTC library (set MAMBAGO_NVRTC, or install nvidia-cuda-nvrtc): %v", err)
	}
}

// Median returns the median of v (the upper of the two middle values of an
// even count), sorting v: the benchmarks' summary of repeated timings.
func Median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}

// Alloc returns a device buffer of bytes, freed at cleanup.
func Alloc(t testing.TB, bytes int) *cuda.Buffer {
	t.Helper()
	b, err := cuda.Alloc(bytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	return b
}

// EntryBuffers sets up a device-entry prefill of B sequences of T random
// token ids from a vocabulary of vocab, pooled to the last position of
// width d: a new stream, the ids [B, T] int64 on the device and an f32
// output [B, d], all released at cleanup. It locks the calling goroutine
// to its thread, with the device's primary context current there, until
// cleanup (Device): the caller's own driver calls (its events and copies)
// then run where that context is current. (Without the lock a goroutine
// that moved to another thread between two calls got
// CUDA_ERROR_INVALID_CONTEXT, once, in BenchmarkScanSegments.)
func EntryBuffers(t testing.TB, B, T, d, vocab int) (s *cuda.Stream, in, out *cuda.Buffer) {
	t.Helper()
	Device(t)
	s, err := cuda.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	ids := make([]int64, B*T)
	for i := range ids {
		ids[i] = rand.Int64N(int64(vocab))
	}
	in = Alloc(t, 8*B*T)
	if err := cuda.CopyIn(in.Ptr, ids, nil); err != nil {
		t.Fatal(err)
	}
	return s, in, Alloc(t, 4*B*d)
}
