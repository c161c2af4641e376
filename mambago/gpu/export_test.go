package gpu

import (
	"fmt"
	"strings"
)

// Placement lists where e's workspace buffers and its first layer's GEMM
// weights sit on the device, for benchmarks that ask whether a prefill's
// speed follows its buffers' addresses.
func (e *Engine) Placement() string {
	ws := &e.ws
	var parts []string
	for _, b := range []struct {
		name string
		p    uint64
	}{{"h", uint64(ws.h.Ptr)}, {"x", uint64(ws.x.Ptr)}, {"xz", uint64(ws.xz.Ptr)}, {"u", uint64(ws.u.Ptr)},
		{"dbl", uint64(ws.dbl.Ptr)}, {"y", uint64(ws.y.Ptr)}, {"in_proj", uint64(e.layers[0].inProj)},
		{"out_proj", uint64(e.layers[0].outProj)}} {
		parts = append(parts, fmt.Sprintf("%s %#x", b.name, b.p))
	}
	return strings.Join(parts, ", ")
}

// WGOutParts is how many blocks out_proj's tiles split k over on the
// warpgroup GEMV under e's settings (wgOutParts), for benchmarks that time
// each split once.
func (e *Engine) WGOutParts() int { return e.wgOutParts() }

// DTProjWGPays is dtProjWGPays, for the tests that need the warpgroup
// dt_proj to run.
var DTProjWGPays = dtProjWGPays

// DTProjShortPays is dtProjShortPays, for the tests that need the short
// dt_proj entries to run.
var DTProjShortPays = dtProjShortPays

// SetDTProjWGFrom makes the engine take the warpgroup dt_proj wherever
// R >= 128 and there are minRows rows or more, whatever dtProjWGPays says,
// and returns a function that puts the rule back: for benchmarks that time
// the entry where the rule leaves it out.
func SetDTProjWGFrom(minRows int) (restore func()) {
	old := dtProjWGTakes
	dtProjWGTakes = func(R, rows, _, _ int) bool { return R >= 128 && rows >= minRows }
	return func() { dtProjWGTakes = old }
}

// StepGraphOf is the step graph a decoder left with st (nil: none).
func StepGraphOf(st *State) *Graph { return st.step }

// HeadPicked reports whether d's greedy steps take their picks from the LM
// head (Decoder.headPicked), for the tests that need that path to run.
func HeadPicked(d *Decoder) bool { return d.headPicked() }
