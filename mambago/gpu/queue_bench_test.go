package gpu

import (
	"fmt"
	"testing"
	"time"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// BenchmarkQueueParts places a greedy token's time on a graphed decoder
// (bf16, random weights; 130m at B=1 and 8, 1.4b at B=1), with the picks
// taken by argmax_rows_f32 over the logits and, beside it on a state of
// its own, taken in the LM head (Engine.HeadPicks, a graph captured with
// it): the GPU's time a token, from CUDA events around 50 tokens queued
// back to back, for each step graph alone, then with the argmax into the
// feed, or with the argmax writing the picks to page-locked memory too
// (its mirror) and an event, or for the head's graph with head_picks_i64
// doing that; and the host's wall time a token for the decoders' queue two
// deep (QueueGreedy, Picks) and for Greedy one step at a time. Medians of
// 5 rounds, in µs.
func BenchmarkQueueParts(b *testing.B) {
	gputest.Need(b)
	const tokens, rounds = 50, 5
	for _, sh := range []struct {
		name      string
		d, layers int
		batches   []int
	}{{"130m", 768, 24, []int{1, 8}}, {"1.4b", 2048, 48, []int{1}}} {
		e, err := New(fixture.RandomWeights(fixture.Shape(sh.d, sh.layers, 50280), 1), 0, cuda.BF16)
		if err != nil {
			b.Fatal(err)
		}
		var free []func() error // the decoders, then their states, before the engine closes
		for _, B := range sh.batches {
			ids, next := make([]int64, B), make([]int64, B)
			decoders := make([]*Decoder, 2) // argmax_rows_f32's, the head's
			for i := range decoders {
				st, err := e.NewState(B)
				if err != nil {
					b.Fatal(err)
				}
				e.HeadPicks = i == 1
				dec, err := e.NewDecoder(st, 32)
				if err != nil {
					b.Fatal(err)
				}
				d := dec.(*Decoder)
				free = append(free, d.Close, st.(*State).Free)
				if d.headPicked() != (i == 1) {
					b.Fatalf("%s B=%d: decoder %d's head picks: %v", sh.name, B, i, d.headPicked())
				}
				if err := d.Greedy(ids, next); err != nil { // the ring, and a first replay
					b.Fatal(err)
				}
				decoders[i] = d
			}
			d, h := decoders[0], decoders[1]
			graph := func(d *Decoder) func() error { return func() error { return d.g.g.Launch(e.stream) } }
			argmax := func(mirror cuda.Ptr) func() error {
				return func() error {
					return e.launch("argmax_rows_f32", cuda.D1(B), cuda.D1(1024), 0, d.g.logit.Ptr, d.feed(), e.cfg.Vocab, mirror)
				}
			}
			put := func() error {
				return e.launch("head_picks_i64", cuda.D1(1), cuda.D1(32), 0, e.ws.headPick.Ptr, h.feed(), B, h.ringDev)
			}
			event := func(d *Decoder) func() error { return func() error { return d.events[0].Record(e.stream) } }
			gpuParts := []struct {
				name  string
				parts []func() error
			}{{"graph", []func() error{graph(d)}}, {"+argmax", []func() error{graph(d), argmax(0)}},
				{"+mirror", []func() error{graph(d), argmax(d.ringDev), event(d)}},
				{"head graph", []func() error{graph(h)}}, {"+put", []func() error{graph(h), put, event(h)}}}
			names := []string{}
			for _, p := range gpuParts {
				names = append(names, p.name)
			}
			times := make([][]float64, len(gpuParts)+4)
			for range rounds {
				for v, p := range gpuParts {
					us, err := e.gpuPerToken(tokens, p.parts)
					if err != nil {
						b.Fatal(err)
					}
					times[v] = append(times[v], us)
				}
				for i, d := range decoders {
					e.HeadPicks = i == 1 // as the graph was captured
					v := len(gpuParts) + 2*i
					times[v] = append(times[v], queued(b, d, tokens, ids, next))
					t0 := time.Now()
					for range tokens {
						if err := d.Greedy(ids, next); err != nil {
							b.Fatal(err)
						}
					}
					times[v+1] = append(times[v+1], time.Since(t0).Seconds()/tokens*1e6)
				}
			}
			names = append(names, "queue (host)", "one at a time (host)", "head queue (host)", "head one at a time (host)")
			line := fmt.Sprintf("%s B=%d, µs a token:", sh.name, B)
			for v, name := range names {
				line += fmt.Sprintf(" %s %.1f", name, gputest.Median(times[v]))
			}
			b.Log(line)
		}
		for _, f := range free {
			if err := f(); err != nil {
				b.Fatal(err)
			}
		}
		if err := e.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// queued runs tokens greedy steps on d, queued two deep (QueueGreedy, then
// Picks), from ids, and returns the host's wall time a token in µs.
func queued(b *testing.B, d *Decoder, tokens int, ids, next []int64) float64 {
	t0 := time.Now()
	for k := range tokens {
		fed := ids
		if k > 0 {
			fed = nil
		}
		if err := d.QueueGreedy(fed); err != nil {
			b.Fatal(err)
		}
		if k > 0 {
			if err := d.Picks(next); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := d.Picks(next); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0).Seconds() / float64(tokens) * 1e6
}

// gpuPerToken queues parts tokens times on e's stream, back to back, and
// returns the GPU's µs a token between events around them all.
func (e *Engine) gpuPerToken(tokens int, parts []func() error) (float64, error) {
	done, err := e.bind()
	if err != nil {
		return 0, err
	}
	defer done()
	start, err := cuda.NewEvent()
	if err != nil {
		return 0, err
	}
	defer start.Destroy()
	end, err := cuda.NewEvent()
	if err != nil {
		return 0, err
	}
	defer end.Destroy()
	if err := start.Record(e.stream); err != nil {
		return 0, err
	}
	for range tokens {
		for _, p := range parts {
			if err := p(); err != nil {
				return 0, err
			}
		}
	}
	if err := end.Record(e.stream); err != nil {
		return 0, err
	}
	if err := e.stream.Synchronize(); err != nil {
		return 0, err
	}
	ms, err := cuda.Elapsed(start, end)
	return float64(ms) * 1e3 / float64(tokens), err
}
