package cuda

import "testing"

// TestMemsetWords checks which memsets MemsetEdit's Fold can write as
// 32-bit words, and the word and count it writes: each element size's
// value spread over a word, rows that follow each other as one run, and
// no fold for misaligned starts, partial words or rows with gaps between.
func TestMemsetWords(t *testing.T) {
	for _, c := range []struct {
		name   string
		m      memsetParams
		word   uint32
		n      int64
		foldOK bool
	}{
		{"words", memsetParams{dst: 0x1000, width: 256, height: 1, element: 4, value: 0}, 0, 256, true},
		{"a word value", memsetParams{dst: 0x1000, width: 3, height: 1, element: 4, value: 0xdeadbeef}, 0xdeadbeef, 3, true},
		{"bytes", memsetParams{dst: 0x1000, width: 64, height: 1, element: 1, value: 0x1ab}, 0xabababab, 16, true},
		{"halves", memsetParams{dst: 0x1000, width: 6, height: 1, element: 2, value: 0x12345}, 0x23452345, 3, true},
		{"rows back to back", memsetParams{dst: 0x1000, pitch: 64, width: 16, height: 4, element: 4}, 0, 64, true},
		{"rows with gaps", memsetParams{dst: 0x1000, pitch: 128, width: 16, height: 4, element: 4}, 0, 0, false},
		{"a misaligned start", memsetParams{dst: 0x1002, width: 8, height: 1, element: 1}, 0, 0, false},
		{"a partial word", memsetParams{dst: 0x1000, width: 6, height: 1, element: 1}, 0, 0, false},
		{"an odd element size", memsetParams{dst: 0x1000, width: 4, height: 1, element: 8}, 0, 0, false},
	} {
		word, n, ok := c.m.words()
		if ok != c.foldOK || ok && (word != c.word || n != c.n) {
			t.Errorf("%s: words() = %#x, %d, %v; want %#x, %d, %v", c.name, word, n, ok, c.word, c.n, c.foldOK)
		}
	}
}
