//go:build !linux

package hugemem

// advise does nothing off Linux.
func advise([]byte) {}

// freeBlocks is 0 off Linux: nothing is advised.
func freeBlocks() int { return 0 }
