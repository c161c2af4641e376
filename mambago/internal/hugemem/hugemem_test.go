package hugemem

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBytes checks each size's length, capacity, zeroes, and the 2 MiB
// alignment from 2 MiB on.
func TestBytes(t *testing.T) {
	for _, n := range []int{0, 1, 4095, Page - 1, Page, 3*Page + 5, 40 << 20} {
		b := Bytes(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("Bytes(%d): len %d, cap %d", n, len(b), cap(b))
		}
		if n >= Page && addr(b)%Page != 0 {
			t.Fatalf("Bytes(%d) starts at %#x, not on a 2 MiB boundary", n, addr(b))
		}
		for i, v := range b {
			if v != 0 {
				t.Fatalf("Bytes(%d)[%d] = %d", n, i, v)
			}
		}
	}
}

// TestEnvTurnsItOff: MAMBAGO_HUGEPAGES=0 leaves every buffer in plain
// pages, whatever the machine has free.
func TestEnvTurnsItOff(t *testing.T) {
	t.Setenv(Env, "0")
	if wanted(Page) {
		t.Fatalf("%s=0, and a buffer is still advised", Env)
	}
}

// TestCountBlocks reads a buddyinfo: orders 9 and 10 count 1 and 2 blocks
// each, in every zone; the lower orders none.
func TestCountBlocks(t *testing.T) {
	info := `Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3
Node 0, zone    DMA32      2      4      2      2      1      2      0      3      3      1    753
Node 0, zone   Normal  16124   9676   6555   4419   2784   1545    798    284    189    385   1500
`
	want := (1 + 3*2) + (1 + 753*2) + (385 + 1500*2)
	if got := countBlocks(bufio.NewScanner(strings.NewReader(info))); got != want {
		t.Fatalf("countBlocks = %d, want %d", got, want)
	}
	if got := countBlocks(bufio.NewScanner(strings.NewReader("garbage\n"))); got != 0 {
		t.Fatalf("countBlocks of garbage = %d", got)
	}
}

// TestAdvisedPagesAreHuge checks, where the kernel offers transparent huge
// pages on advice and has free 2 MiB blocks, that a filled 64 MiB buffer
// sits in huge pages: the advice splits the buffer's pages into a mapping
// of their own in /proc/self/smaps (or one merged with a neighbour advised
// before), whose AnonHugePages must cover at least half of it. Another
// process may take the free blocks between the count and the page faults
// (go test ./... runs packages side by side; CI once saw 0 KiB), so a
// buffer that misses is tried again, twice, on a fresh count: advice that
// does not work misses every time.
func TestAdvisedPagesAreHuge(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("huge pages are advised on Linux only")
	}
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(mode), "[never]") {
		t.Skipf("transparent huge pages are off here (%q)", strings.TrimSpace(string(mode)))
	}
	if os.Getenv(Env) == "0" {
		t.Skipf("%s=0 turns the advice off", Env)
	}
	const n = 64 << 20
	var misses []string
	for range 3 {
		if freeBlocks() < need(n) {
			t.Skipf("only %d free 2 MiB blocks here: Bytes gives 4 KiB pages, as it should", freeBlocks())
		}
		b := Bytes(n)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		huge := hugeAt(t, addr(b))
		runtime.KeepAlive(b)
		if huge >= n/2 {
			return
		}
		misses = append(misses, fmt.Sprintf("%d KiB (%d free blocks after)", huge>>10, freeBlocks()))
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("three buffers' mappings had %s in huge pages of %d KiB each", strings.Join(misses, ", "), n>>10)
}

// hugeAt is the AnonHugePages, in bytes, of the mapping in /proc/self/smaps
// that holds a.
func hugeAt(t *testing.T, a uintptr) int {
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	in := false
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			lo, hi, _ := strings.Cut(f[0], "-")
			start, _ := strconv.ParseUint(lo, 16, 64)
			end, _ := strconv.ParseUint(hi, 16, 64)
			in = uintptr(start) <= a && a < uintptr(end)
		case in && f[0] == "AnonHugePages:":
			kb, _ := strconv.Atoi(f[1])
			return kb << 10
		}
	}
	t.Fatalf("no mapping holds %#x", a)
	return 0
}
