package cuda

import (
	"slices"
	"testing"
)

// TestLaunchLayout checks the shim's copy of cuLaunchKernelEx's structs
// against cuda.h's layout on 64-bit Linux: CUlaunchAttribute is a 4-byte id
// padded to 8 and a 64-byte value union; CUlaunchConfig is seven unsigned
// ints, then the stream, the attribute pointer and their count.
func TestLaunchLayout(t *testing.T) {
	want := []int{72, 8, 56, 32, 40, 48}
	if got := launchLayout(); !slices.Equal(got, want) {
		t.Fatalf("launch struct layout %v, want %v (attr size, value offset, config size, stream, attrs, nattrs)", got, want)
	}
}

// TestLtLayout checks the shim's copy of cublasLtMatmulHeuristicResult_t
// against cublasLt.h's: a 64-byte algorithm, the workspace size, the
// status, the waves count and four reserved ints.
func TestLtLayout(t *testing.T) {
	want := []int{96, 64, 72, 76}
	if got := ltLayout(); !slices.Equal(got, want) {
		t.Fatalf("heuristic result layout %v, want %v (size, workspace, state, waves)", got, want)
	}
}

// TestGraphLayout checks the shim's copies of the graph-edit structs
// against cuda.h's on 64-bit Linux: CUgraphEdgeData is 8 bytes;
// CUDA_KERNEL_NODE_PARAMS_v2 is the function, seven unsigned ints, the
// two argument pointers, the CUkernel and the context (72 bytes);
// CUDA_MEMSET_NODE_PARAMS is the address, the pitch, the value and element
// size, the width and the height (40 bytes); CUDA_MEMCPY3D is four
// size_t, the memory type, host pointer, device pointer, array, a
// reserved pointer and two size_t for each side, then the width, height
// and depth (200 bytes).
func TestGraphLayout(t *testing.T) {
	want := []int{8, 40, 56, 64, 72, 16, 24, 32, 40, 48, 120, 136, 200}
	if got := graphLayout(); !slices.Equal(got, want) {
		t.Fatalf("graph struct layout %v, want %v (edge size; kernel node params, kern, ctx, end; memset node value, width, height, end; "+
			"copy node source address, destination type and address, size)", got, want)
	}
}
