package hugemem

import (
	"bufio"
	"os"
	"strconv"
	"strings"

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
