package cpu

// SetLanes turns the AVX2 lanes (scanLanes, convLanes and gemmRows) on or off
// for the external tests and returns the function that restores them.
func SetLanes(on bool) (restore func()) {
	was := useLanes
	useLanes = on && hasAVX2
	return func() { useLanes = was }
}

// HasLanes reports that this CPU runs the AVX2 lanes.
var HasLanes = hasAVX2

// RowsMax is the most rows gemmRows takes: a decode step of up to RowsMax
// sequences runs its GEMMs there.
const RowsMax = rowsMax
