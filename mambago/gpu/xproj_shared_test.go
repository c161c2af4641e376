package gpu

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
)

// TestXProjSharedMatchesKernel compiles kernels/xproj.cu through NVRTC for
// sm_90a (no GPU needed) with static_asserts that xprojShared and
// xprojTMAShared give the kernel's shared memory for each entry, at the
// widths each serves, and that the tiles, slices and block are Go's.
func TestXProjSharedMatchesKernel(t *testing.T) {
	gputest.NeedNVRTC(t)
	src, err := kernels.Source("xproj.cu")
	if err != nil {
		t.Fatal(err)
	}
	var checks strings.Builder
	fmt.Fprintf(&checks, "static_assert(XP_TM == %d && XP_KS == %d && XP_THREADS == %d && XP_CHUNKS == %d, "+
		"\"gpu's xproj constants differ from the kernel's\");\n", xprojTM, xprojSlices, xprojThreads, xprojChunks)
	for _, nt := range xprojEntries {
		for _, E := range []int{512, 768, 1536, 2048} {
			fmt.Fprintf(&checks, "static_assert(xproj_shared(%d, %d) == %d, \"gpu.xprojShared(%d, %d) differs\");\n",
				nt, E, xprojShared(nt, E), nt, E)
			for _, ks := range xprojTMASliceCounts {
				if !xprojTMAWidth(E, ks) {
					continue
				}
				fmt.Fprintf(&checks, "static_assert(xproj_tma_shared(%d, %d, %d) == %d, "+
					"\"gpu.xprojTMAShared(%d, %d, %d) differs\");\n", nt, E, ks, xprojTMAShared(nt, E, ks), nt, E, ks)
			}
		}
	}
	if _, err := cuda.Compile(src+checks.String(), "xproj.cu", "sm_90a", "--std=c++17"); err != nil {
		t.Fatal(err)
	}
}
