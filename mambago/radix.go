package mambago

import "slices"

// radixMin is the fewest keys sortKeys sorts by digits: below it a
// comparison sort is as fast.
const radixMin = 1024

// radixBits is the width of a digit: 2048 counts fit in L1 beside the keys.
const radixBits = 11

// sortKeys sorts keys in ascending order, as slices.Sort does, in place: by
// digits (an LSD radix sort, radixBits a pass, passes whose digit every key
// shares skipped) where there are at least radixMin of them. spare is
// scratch space, grown to len(keys) and returned for the next call.
func sortKeys(keys, spare []uint64) []uint64 {
	return sortKeysAbove(keys, spare, 0)
}

// sortKeysAbove is sortKeys for keys whose order their bits from bit low
// up decide: the bits below low are not read where it sorts by digits, so
// keys equal above low may come in any order.
func sortKeysAbove(keys, spare []uint64, low int) []uint64 {
	if len(keys) < radixMin {
		slices.Sort(keys)
		return spare
	}
	spare = slices.Grow(spare[:0], len(keys))[:len(keys)]
	src, dst := keys, spare
	const mask = 1<<radixBits - 1
	var count [1 << radixBits]int
	for shift := low; shift < 64; shift += radixBits {
		clear(count[:])
		for _, k := range src {
			count[k>>shift&mask]++
		}
		if count[src[0]>>shift&mask] == len(src) {
			continue // every key has this digit: the order stands
		}
		at := 0
		for d, c := range count {
			count[d] = at
			at += c
		}
		for _, k := range src {
			d := k >> shift & mask
			dst[count[d]] = k
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &keys[0] {
		copy(keys, src)
	}
	return spare
}
