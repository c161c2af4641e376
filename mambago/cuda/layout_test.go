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

// TestLtLayout checks the shim's copy of cublasLtMatmulHeuristicResult_t
// against cublasLt.h's: a 64-byte algorithm, the workspace size, the
// status, the waves count and four reserved ints.
func TestLtLayout(t *testing.T) {
	want := [4]int{96, 64, 72, 76}
	if got := ltLayout(); got != want {
		t.Fatalf("heuristic result layout %v, want %v (size, workspace, state, waves)", got, want)
	}
}
