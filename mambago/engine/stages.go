package engine

import (
	"fmt"
	"sort"
	"strings"
)

// StageTable lists stages by time spent (ms per stage), longest first, with
// each one's share of the total: the report of the engines' stage timers.
func StageTable(ms map[string]float64) string {
	var total float64
	names := make([]string, 0, len(ms))
	for n, t := range ms {
		names = append(names, n)
		total += t
	}
	sort.Slice(names, func(i, j int) bool { return ms[names[i]] > ms[names[j]] })
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%-18s %9.2f ms %5.1f%%\n", n, ms[n], 100*ms[n]/total)
	}
	return b.String()
}
