package cuda

import "testing"

// TestLaunchLayout checks the shim's copy of cuLaunchKernelEx's structs
// against cuda.h's layout on 64-bit Linux: CUlaunchAttribute is a 4-byte id
// padded to 8 and a 64-byte value union; CUlaunchConfig is seven unsigned
// ints, then the stream, the attribute pointer and their count.
func TestLaunchLayout(t *testing.T) {
	want := [6]int{72, 8, 56, 32, 40, 48}
	if got := launchLayout(); got != want {
		t.Fatalf("launch struct layout %v, want %v (attr size, value offset, config size, stream, attrs, nattrs)", got, want)
	}
}
