package gpu

import "testing"

// TestOnePassStates pins OnePassStates to the cases it was measured on (an
// H200: 132 SMs), as its comment gives them.
func TestOnePassStates(t *testing.T) {
	for _, c := range []struct {
		name          string
		B, T, E, want int
	}{
		{"130m B=1 T=2048", 1, 2048, 1536, 0},
		{"130m B=8 T=2048", 8, 2048, 1536, 4},
		{"370m B=1 T=2048", 1, 2048, 2048, 2},
		{"370m B=1 T=8192", 1, 8192, 2048, 0},
		{"1.4b B=1 T=2048", 1, 2048, 4096, 2},
		{"1.4b B=1 T=8192", 1, 8192, 4096, 2},
		{"1.4b B=8 T=2048", 8, 2048, 4096, 4},
		{"2.8b B=8 T=8192", 8, 8192, 5120, 4},
	} {
		if got := OnePassStates(c.B, c.T, c.E, 132); got != c.want {
			t.Errorf("%s: OnePassStates = %d, want %d", c.name, got, c.want)
		}
	}
}
