package cuda_test

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
)

// TestCheckBuffer checks what the device entries accept as a caller's
// buffer: device memory of this GPU within its allocation, and nothing
// else (a Go slice, page-locked host memory, a null address, a buffer that
// runs past its allocation).
func TestCheckBuffer(t *testing.T) {
	d := gputest.Device(t)
	const n = 1 << 20
	b, err := cuda.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	r, err := cuda.Locate(b.Offset(4096))
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != cuda.DeviceMemory || r.Ordinal != d.Ordinal || r.Start != b.Ptr || r.Bytes < n {
		t.Errorf("Locate(a device buffer + 4096) = %+v, want device memory of GPU %d from %#x, at least %d bytes",
			r, d.Ordinal, uint64(b.Ptr), n)
	}
	for _, ok := range []struct {
		p     cuda.Ptr
		bytes int
	}{{b.Ptr, n}, {b.Offset(n / 2), n / 2}, {b.Offset(n - 4), 4}} {
		if err := d.CheckBuffer("buffer", ok.p, ok.bytes); err != nil {
			t.Errorf("CheckBuffer(%d bytes at +%d) = %v, want nil", ok.bytes, ok.p-b.Ptr, err)
		}
	}
	host, err := cuda.AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Free()
	hostDev, err := host.Device()
	if err != nil {
		t.Fatal(err)
	}
	goSlice := make([]float32, n/4)
	for name, bad := range map[string]struct {
		p     cuda.Ptr
		bytes int
	}{
		"past its allocation": {b.Offset(n / 2), 1 << 30},
		"a Go slice":          {cuda.Ptr(uintptr(unsafe.Pointer(&goSlice[0]))), n},
		"page-locked host":    {hostDev, n},
		"null":                {0, 4},
	} {
		err := d.CheckBuffer("output", bad.p, bad.bytes)
		if !errors.Is(err, cuda.ErrBadBuffer) {
			t.Errorf("%s: CheckBuffer = %v, want an error wrapping ErrBadBuffer", name, err)
			continue
		}
		t.Logf("%s: %v", name, err)
	}
}

// BenchmarkCheckBuffer times one check, the cost each device entry adds
// per buffer.
func BenchmarkCheckBuffer(b *testing.B) {
	d := gputest.Device(b)
	buf, err := cuda.Alloc(1 << 20)
	if err != nil {
		b.Fatal(err)
	}
	defer buf.Free()
	for b.Loop() {
		if err := d.CheckBuffer("buffer", buf.Offset(4096), 4096); err != nil {
			b.Fatal(err)
		}
	}
}
