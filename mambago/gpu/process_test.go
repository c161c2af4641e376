package gpu

import (
	"testing"

	"github.com/mambago/mambago/mambago/engine"
)

// TestCheckProcessing refuses, without a GPU, what would make
// process_rows_f32 index outside a row of logits (an id of the n-gram
// history, a bias, a suppressed id outside the vocabulary) or miscount its
// rows, and takes a processing within them.
func TestCheckProcessing(t *testing.T) {
	const B, V = 2, 10
	good := engine.Processing{Penalty: 1.2, Seen: [][]int32{{1}, {2}}, NGram: 2, History: [][]int64{{1, 2}, {3}},
		Steps: 4, Biases: []engine.SequenceBias{{Tokens: []int64{1, 9}, Bias: 2}}, Tails: [][]int64{{1}, {}},
		EOS: []int64{0}, Suppress: []int64{5}, ForcedAt: -1, BeginAt: -1}
	if err := checkProcessing(good, B, V); err != nil {
		t.Fatalf("a processing within range: %v", err)
	}
	for name, change := range map[string]func(p *engine.Processing){
		"history id":     func(p *engine.Processing) { p.History = [][]int64{{1, 10}, {3}} },
		"history rows":   func(p *engine.Processing) { p.History = p.History[:1] },
		"negative steps": func(p *engine.Processing) { p.Steps = -1 },
		"bias id":        func(p *engine.Processing) { p.Biases = []engine.SequenceBias{{Tokens: []int64{-1}, Bias: 1}} },
		"tails rows":     func(p *engine.Processing) { p.Tails = nil },
		"suppressed id":  func(p *engine.Processing) { p.Suppress = []int64{V} },
		"seen id":        func(p *engine.Processing) { p.Seen = [][]int32{{V}, {}} },
		"penalty":        func(p *engine.Processing) { p.Penalty = 0 },
	} {
		p := good
		change(&p)
		if err := checkProcessing(p, B, V); !engine.IsInvalid(err) {
			t.Errorf("%s: err = %v, want an input error", name, err)
		}
	}
}
