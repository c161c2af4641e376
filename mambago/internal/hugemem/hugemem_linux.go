package hugemem

import (
	"bufio"
	"os"

	"golang.org/x/sys/unix"
)

// advise asks for huge pages under b (2 MiB-aligned, whole pages). It is
// advice: a kernel without transparent huge pages ignores it.
func advise(b []byte) { _ = unix.Madvise(b, unix.MADV_HUGEPAGE) }

// freeBlocks counts the free 2 MiB blocks of every memory zone in
// /proc/buddyinfo (a free block of order o ≥ 9 holds 2^(o-9) of them); 0
// where it cannot be read.
func freeBlocks() int {
	f, err := os.Open("/proc/buddyinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	return countBlocks(bufio.NewScanner(f))
}
