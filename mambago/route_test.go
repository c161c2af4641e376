package mambago

import (
	"strings"
	"testing"

	"github.com/mambago/mambago/mambago/engine"
)

// fullDecoder is every entry the CUDA engine's decoder has.
type fullDecoder interface {
	engine.ProcessingDecoder
	engine.TopKDecoder
}

// Stand-ins for decoders of each kind: routeFor only asks what they are
// (and the queue's k), so their other methods are never called.
type (
	plainDecoder struct{ engine.Decoder }
	topKDecoder  struct{ engine.TopKDecoder }
	cudaDecoder  struct{ fullDecoder }
)

func (cudaDecoder) TopKQueueMax() int { return 1024 }

// names lists the entries r calls.
func (r decodeRoute) names() string {
	var on []string
	for _, e := range []struct {
		name string
		on   bool
	}{{"greedy", r.greedy}, {"topKQueue", r.topKQueue != nil}, {"topK", r.topK != nil}, {"topP", r.topP != nil},
		{"queue", r.queue != nil}, {"proc", r.proc != nil}} {
		if e.on {
			on = append(on, e.name)
		}
	}
	if on == nil {
		return "host"
	}
	return strings.Join(on, " ")
}

// TestRouteFor checks which of a decoder's entries Generate takes for
// each kind of sampling, with the logits processors and without: the
// table in routeFor's words.
func TestRouteFor(t *testing.T) {
	const V = 5000
	greedy := Sampling{TopP: 1}
	topK := Sampling{Temperature: 0.8, TopK: 50, TopP: 0.9, MinP: 0.05}
	wideK := Sampling{Temperature: 0.8, TopK: 2000, TopP: 1}
	nucleus := Sampling{Temperature: 0.8, TopP: 0.9}
	typicalK := Sampling{Temperature: 0.8, TopK: 50, TopP: 1, Warpers: Warpers{TypicalP: 0.9}}
	typical := Sampling{Temperature: 0.8, TopP: 1, Warpers: Warpers{EtaCutoff: 1e-3}}
	for _, c := range []struct {
		dec       engine.Decoder
		s         Sampling
		processes bool
		want      string
	}{
		{cudaDecoder{}, greedy, false, "greedy queue"},
		{cudaDecoder{}, greedy, true, "greedy queue proc"},
		{cudaDecoder{}, topK, false, "topKQueue topK queue"},
		{cudaDecoder{}, topK, true, "topKQueue topK queue proc"},
		{cudaDecoder{}, wideK, false, "topK"},
		{cudaDecoder{}, wideK, true, "topK proc"},
		{cudaDecoder{}, nucleus, false, "topP queue"},
		{cudaDecoder{}, nucleus, true, "topP queue proc"},
		{cudaDecoder{}, typicalK, false, "topK"},
		{cudaDecoder{}, typicalK, true, "topK proc"},
		{cudaDecoder{}, typical, false, "host"},
		{cudaDecoder{}, typical, true, "host"},
		{topKDecoder{}, topK, false, "topK"},
		{topKDecoder{}, typicalK, false, "topK"},
		{topKDecoder{}, topK, true, "host"},
		{topKDecoder{}, greedy, false, "greedy"},
		{plainDecoder{}, greedy, false, "greedy"},
		{plainDecoder{}, greedy, true, "host"},
		{plainDecoder{}, topK, false, "host"},
		{nil, greedy, false, "host"},
	} {
		if got := routeFor(c.dec, c.s, V, c.processes, 8).names(); got != c.want {
			t.Errorf("%T, %+v, processors %v: %s, want %s", c.dec, c.s, c.processes, got, c.want)
		}
	}
}
