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
// (bf16, random weights; 130m at B=1 and 8, 1.4b at B=1): the GPU's time
// a token, from CUDA events around 50 tokens queued back to back, for the
// step graph alone, then with the argmax into the feed, then with the
// picks' copy into page-locked memory and an event, or with the argmax
// writing them there itself (its mirror) and an event, as a queued step
// does; and the host's wall time a token for the decoder's queue two
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
		for _, B := range sh.batches {
			st, err := e.NewState(B)
			if err != nil {
				b.Fatal(err)
			}
			dec, err := e.NewDecoder(st, 32)
			if err != nil {
				b.Fatal(err)
			}
			d := dec.(*Decoder)
			ids, next := make([]int64, B), make([]int64, B)
			if err := d.Greedy(ids, next); err != nil { // the ring, and a first replay
				b.Fatal(err)
			}
			graph := func() error { return d.g.g.Launch(e.stream) }
			argmax := func(mirror cuda.Ptr) func() error {
				return func() error {
					return e.launch("argmax_rows_f32", cuda.D1(B), cuda.D1(1024), 0, d.g.logit.Ptr, d.feed(), e.cfg.Vocab, mirror)
				}
			}
			copyOut := func() error {
				return cuda.CopyOut(cuda.HostSlice[int64](d.ring, 0, B), d.feed(), e.stream)
			}
			event := func() error { return d.events[0].Record(e.stream) }
			gpuParts := []struct {
				name  string
				parts []func() error
			}{{"graph", []func() error{graph}}, {"+argmax", []func() error{graph, argmax(0)}},
				{"+copy", []func() error{graph, argmax(0), copyOut, event}}, {"+mirror", []func() error{graph, argmax(d.ringDev), event}}}
			times := make([][]float64, len(gpuParts)+2)
			for range rounds {
				for v, p := range gpuParts {
					us, err := e.gpuPerToken(tokens, p.parts)
					if err != nil {
						b.Fatal(err)
					}
					times[v] = append(times[v], us)
				}
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
				times[len(gpuParts)] = append(times[len(gpuParts)], time.Since(t0).Seconds()/tokens*1e6)
				t0 = time.Now()
				for range tokens {
					if err := d.Greedy(ids, next); err != nil {
						b.Fatal(err)
					}
				}
				times[len(gpuParts)+1] = append(times[len(gpuParts)+1], time.Since(t0).Seconds()/tokens*1e6)
			}
			line := fmt.Sprintf("%s B=%d, µs a token:", sh.name, B)
			for v, name := range []string{"graph", "+argmax", "+copy", "+mirror", "queue (host)", "one at a time (host)"} {
				line += fmt.Sprintf(" %s %.1f", name, gputest.Median(times[v]))
			}
			b.Log(line)
			if err := d.Close(); err != nil {
				b.Fatal(err)
			}
			if err := st.(*State).Free(); err != nil {
				b.Fatal(err)
			}
		}
		if err := e.Close(); err != nil {
			b.Fatal(err)
		}
	}
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
