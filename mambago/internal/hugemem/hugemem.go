// Package hugemem allocates the large buffers that a decode step streams
// whole (a model's weight matrices) so that the kernel may back them with
// transparent huge pages. A stream over 4 KiB pages misses the TLB every
// 4 KiB: on the 2-core build machine, whose THP setting is "madvise" (so the
// Go heap gets none unless asked), a 130m decode step ran 1.16-1.23x faster
// with its matrices in 2 MiB pages (bench/NOTES.md, "CPU engine").
package hugemem

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"unsafe"
)

// Page is the size of a transparent huge page on x86-64 (and most arm64
// kernels).
const Page = 1 << 21

// Bytes returns a zeroed buffer of n bytes. From 2 MiB on it starts on a
// 2 MiB boundary, and where the machine has enough free 2 MiB blocks (so
// that no fault has to wait for the kernel to compact memory) its whole
// 2 MiB pages are advised to be huge pages when they are first touched
// (Linux's MADV_HUGEPAGE). The advice costs little then: about 98 ms
// against 78 ms to fault in 256 MiB on the build machine, where waiting
// for compaction took 1.2 s for 512 MiB. Fill the buffer once, in place.
func Bytes(n int) []byte {
	if n < Page {
		return make([]byte, n)
	}
	buf := make([]byte, n+Page)
	off := Page - int(addr(buf)%Page)
	if off == Page {
		off = 0
	}
	b := buf[off : off+n : off+n]
	if whole := n &^ (Page - 1); wanted(whole) {
		advise(b[:whole])
	}
	return b
}

// Env names the variable that turns the advice off: MAMBAGO_HUGEPAGES=0.
// On the build machine (a VM), a second model loaded in one process took
// longer with it (a 370m float32 load after a bf16 one: a median of 2.7 s
// against 1.3 s). That VM reports its free 2 MiB blocks to its host
// (virtio-balloon free page reporting), so a huge page faults on the host
// at its first touch, and the load spends its time zeroing pages
// (bench/results/2026-12-05-second-load.md).
const Env = "MAMBAGO_HUGEPAGES"

// wanted reports that n bytes of whole pages are to be advised: the
// advice is not turned off and the machine has the free blocks for them.
func wanted(n int) bool {
	return os.Getenv(Env) != "0" && freeBlocks() >= need(n)
}

// need is how many free 2 MiB blocks a buffer of n bytes asks for before it
// is advised: its own pages and a quarter more, and 32 blocks for the rest
// of the machine.
func need(n int) int {
	pages := n / Page
	return pages + pages/4 + 32
}

// addr is b's address.
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// countBlocks is freeBlocks of buddyinfo's lines ("Node 0, zone Normal c0
// c1 ... c10": the free blocks of each order).
func countBlocks(sc *bufio.Scanner) int {
	const hugeOrder = 9 // 2^9 pages of 4 KiB
	total := 0
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[2] != "zone" {
			continue
		}
		for order, c := range fields[4:] {
			n, err := strconv.Atoi(c)
			if err != nil || order < hugeOrder {
				continue
			}
			total += n << (order - hugeOrder)
		}
	}
	return total
}
