package cpu

// SetLanes turns the AVX2 lanes (scanLanes, convLanes and gemmRows) on or off
// for the external tests and returns the function that restores them.
func SetLanes(on bool) (restore func()) {
	was := useLanes
	useLanes = on && hasAVX2
	return func() { useLanes = was }
}
