package gpu

import (
	"errors"
	"fmt"
	"math"

	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
)

// Decoder steps one state on the GPU (engine.QueueDecoder), eagerly or
// through a captured step graph. Its greedy steps pick each row's most
// likely token on the device (ranked in the LM head where Engine.HeadPicks
// applies, else by argmax_rows_f32 in kernels/pool.cu) and hand back B
// ids; its Logits copy the logits into page-locked memory it owns; its
// TopK copy back only each row's k best (topk_rows_f32 in
// kernels/topk.cu), its TopKLogProbs those of each row's log
// probabilities, processed there (beam search's), and its TopP draw from
// each row's nucleus there (topp_draw_f32).
//
// Greedy and TopP steps can also be queued ahead (QueueGreedy, QueueTopP,
// then Picks): a step's picks go where the next step reads its ids (the
// graph's input buffer, or pick), so a queued step is fed on the device,
// and the stream runs it while the host reads the picks of the one before.
// The pick kernels also write them to page-locked memory (their mirror),
// where the host reads them without a copy, and the nucleus draw reads its
// uniforms from there. Greedy and TopP are a queued step and its Picks.
type Decoder struct {
	e    *Engine
	s    *State
	g    *Graph           // the captured step, or nil: eager steps
	pick *cuda.Buffer     // int64 [B]: the eager steps' feed (feed); nil once closed
	host *cuda.HostBuffer // f32 [B, V], page-locked: Logits' result; made by the first call

	// The queue: ring holds queueDepth slots (ringSlot), page-locked, at
	// ringDev on the device; each slot's picks are written by a pick kernel
	// that events[slot] follows; head is the oldest waiting step's slot and
	// queued how many wait. fed says the feed holds the picks of the last
	// step. Made by the first queued step.
	ring         *cuda.HostBuffer
	ringDev      cuda.Ptr
	events       []*cuda.Event
	head, queued int
	fed          bool

	// TopK's candidates for k = candK: int32 ids [B, k], then f32 logits
	// [B, k], on the device and page-locked on the host; made by the first
	// call for a k.
	cand     *cuda.Buffer
	candHost *cuda.HostBuffer
	candK    int

	proc *processing // the queued steps' logits processors (Process), or nil
}

// keptStep returns the step graph kept with s, capturing one once the
// steps asked of s (its decoders', StepDevice's) reach n (> 0:
// DecoderGraphSteps or StepDeviceGraphSteps), or nil where s's steps run
// eagerly. A kept graph costs nothing more to replay, whatever the steps;
// a new one pays once enough steps were asked, so that repeated short runs
// (Generate's 20 tokens) capture too. A kept graph that can no longer
// replay (the workspace grew, or the GEMM mode changed) is destroyed first.
func (e *Engine) keptStep(s *State, n int) (*Graph, error) {
	if s.step != nil && s.step.check() != nil {
		if err := s.step.Destroy(); err != nil {
			return nil, err
		}
		s.step = nil
	}
	if n <= 0 || s.step == nil && s.decoded < n {
		return nil, nil
	}
	if s.step == nil {
		g, err := e.CaptureStep(s)
		if err != nil {
			return nil, err
		}
		s.step = g
	}
	return s.step, nil
}

// NewDecoder returns a decoder for st that will run about steps steps: with
// a step graph when steps reaches DecoderGraphSteps (> 0). The graph stays
// with st for its next decoder, until st is freed: a decoder captures one
// only where st has none that can still replay (the workspace has not
// grown, nor the GEMM mode changed, since its capture).
func (e *Engine) NewDecoder(st engine.State, steps int) (engine.Decoder, error) {
	s, err := e.own(st)
	if err != nil {
		return nil, err
	}
	d := &Decoder{e: e, s: s}
	s.decoded += min(max(steps, 0), math.MaxInt-s.decoded) // saturates
	if d.g, err = e.keptStep(s, e.DecoderGraphSteps); err != nil {
		return nil, err
	}
	done, err := e.bind()
	if err != nil {
		return nil, errors.Join(err, d.Close())
	}
	d.pick, err = cuda.Alloc(8 * s.batch)
	done() // before Close, which binds again
	if err != nil {
		return nil, errors.Join(err, d.Close())
	}
	return d, nil
}

// Graphed says whether d steps by a captured graph.
func (d *Decoder) Graphed() bool { return d.g != nil }

// Step feeds ids [B] and writes the next-token logits [B, V]: Graph.Step
// or Engine.Step, bit for bit the same.
func (d *Decoder) Step(ids []int64, logits []float32) error {
	if d.pick == nil {
		return engine.Invalid("decoder is closed")
	}
	d.fed = false // the graph's input buffer takes ids
	if d.g != nil {
		return d.g.Step(ids, logits)
	}
	return d.e.Step(d.s, ids, logits)
}

// check refuses a closed decoder and ids that are not B valid tokens.
func (d *Decoder) check(ids []int64) error {
	if d.pick == nil {
		return engine.Invalid("decoder is closed")
	}
	if len(ids) != d.s.batch {
		return engine.Invalid("decoder for B=%d: got %d ids", d.s.batch, len(ids))
	}
	return engine.CheckIDs("token_ids", ids, d.e.cfg.Vocab)
}

// stepThen steps on ids (nil: the ids in the feed), through the graph or
// eagerly, then runs out on the logits [B, V] the step left on the device,
// and waits for both when wait is set.
func (d *Decoder) stepThen(ids []int64, out func(logits cuda.Ptr) error, wait bool) error {
	d.fed = false
	if d.g != nil {
		return d.g.stepThen(ids, out, wait)
	}
	src := source{in: engine.Input{B: d.s.batch, T: 1, IDs: ids}}
	if ids == nil {
		src.dev, src.kind = d.pick.Ptr, "ids"
	}
	return d.e.stepThen(d.s, src, out, wait)
}

// feed is where a step fed on the device reads its ids, and so where
// queued steps leave their picks: the graph's input buffer, or pick.
func (d *Decoder) feed() cuda.Ptr {
	if d.g != nil {
		return d.g.in.Ptr
	}
	return d.pick.Ptr
}

// Logits feeds ids [B] and returns the next-token logits [B, V] (the same
// bits as Step) in the decoder's page-locked host memory, valid until its
// next call or Close. The copy runs at the bus's speed: 1.6 MB (130m, B=8)
// takes tens of µs where a copy into pageable memory is staged.
func (d *Decoder) Logits(ids []int64) ([]float32, error) {
	e, B, V := d.e, d.s.batch, d.e.cfg.Vocab
	if err := errors.Join(d.check(ids), d.idle()); err != nil {
		return nil, err
	}
	if d.host == nil {
		done, err := e.bind()
		if err != nil {
			return nil, err
		}
		d.host, err = cuda.AllocHost(4 * B * V)
		done()
		if err != nil {
			return nil, fmt.Errorf("gpu: decoder's logits: %w", err)
		}
	}
	logits := cuda.HostSlice[float32](d.host, 0, B*V)
	if err := d.stepThen(ids, func(dev cuda.Ptr) error { return cuda.CopyOut(logits, dev, e.stream) }, true); err != nil {
		return nil, err
	}
	return logits, nil
}

// TopK feeds ids [B] and returns each sequence's k best-ranked next tokens
// and their logits, [B, k] each, every row in no particular order (a row
// with NaN: every token -1), in the decoder's page-locked host memory,
// valid until its next call or Close. topk_rows_f32 ranks them on the
// device, after the step and after the processors where Process asked
// (process_rows_f32, as for a queued step), and 8·B·k bytes come back.
func (d *Decoder) TopK(ids []int64, k int) ([]int32, []float32, error) {
	tokens, logits, _, err := d.topK(ids, k, func(logits cuda.Ptr) error { return d.processFed(ids, logits) }, false)
	return tokens, logits, err
}

// TopKNorms is TopK that also returns each row's log-softmax normalizers
// (engine.BeamDecoder; row_norms_f32): norms [B, 2], each row's largest
// logit and the log of its sum of exp(logit − largest).
func (d *Decoder) TopKNorms(ids []int64, k int) (tokens []int32, logits, norms []float32, err error) {
	return d.topK(ids, k, func(logits cuda.Ptr) error { return d.processFed(ids, logits) }, true)
}

// processFed processes the logits of a step fed ids as Process asked, if
// it did. process_rows_f32 reads the fed ids at the feed, which an eager
// step fed from the host does not write: they are copied there first.
func (d *Decoder) processFed(ids []int64, logits cuda.Ptr) error {
	if d.proc == nil {
		return nil
	}
	if d.g == nil {
		if err := cuda.CopyIn(d.pick.Ptr, ids, d.e.stream); err != nil {
			return err
		}
	}
	return d.process(logits)
}

// TopKLogProbs reorders the rows of the processors (Process) as parents
// says, steps on ids, and returns each row's k best log probabilities,
// processed (engine.BeamProcessingDecoder): log_softmax_rows_f32 turns the
// logits into them in place, process_rows_f32 processes them as it does a
// queued step's logits, log_softmax_rows_f32 renormalizes them where asked,
// and topk_rows_f32 ranks them. 8·B·k bytes come back.
func (d *Decoder) TopKLogProbs(ids []int64, parents []int, k int, renormalize bool) ([]int32, []float32, error) {
	e, B, V := d.e, d.s.batch, d.e.cfg.Vocab
	if parents != nil && len(parents) != B {
		return nil, nil, engine.Invalid("decoder for B=%d: got %d parent rows", B, len(parents))
	}
	for i, r := range parents {
		if r < 0 || r >= B {
			return nil, nil, engine.Invalid("row %d's parent %d is outside [0, %d)", i, r, B)
		}
	}
	logSoftmax := func(logits cuda.Ptr, keepEmpty int) error {
		return e.launch("log_softmax_rows_f32", cuda.D1(B), cuda.D1(256), 0, logits, V, keepEmpty)
	}
	prepare := func(logits cuda.Ptr) error {
		if d.proc != nil {
			if err := d.proc.reorder(e, B, parents); err != nil {
				return err
			}
		}
		if err := logSoftmax(logits, 0); err != nil {
			return err
		}
		if err := d.processFed(ids, logits); err != nil {
			return err
		}
		if renormalize {
			return logSoftmax(logits, 1)
		}
		return nil
	}
	tokens, logp, _, err := d.topK(ids, k, prepare, false)
	return tokens, logp, err
}

// topK steps on ids, runs prepare (where not nil) on the logits, and ranks
// each row's k best (topk_rows_f32), with its normalizers where norms is
// set (row_norms_f32), in the decoder's page-locked memory.
func (d *Decoder) topK(ids []int64, k int, prepare func(logits cuda.Ptr) error, norms bool) ([]int32, []float32, []float32, error) {
	e, B, V := d.e, d.s.batch, d.e.cfg.Vocab
	if err := errors.Join(d.check(ids), d.idle()); err != nil {
		return nil, nil, nil, err
	}
	if k < 1 || k > V {
		return nil, nil, nil, engine.Invalid("top_k = %d, want 1 ≤ k ≤ vocabulary (%d)", k, V)
	}
	if k != d.candK {
		if err := d.allocCandidates(k); err != nil {
			return nil, nil, nil, err
		}
	}
	bytes := 8 * B * k
	if norms {
		bytes += 8 * B
	}
	out := func(logits cuda.Ptr) error {
		if prepare != nil {
			if err := prepare(logits); err != nil {
				return err
			}
		}
		if err := e.launch("topk_rows_f32", cuda.D1(B), cuda.D1(1024), 0, logits, V, k, d.cand.Ptr, d.cand.Offset(4*B*k)); err != nil {
			return err
		}
		if norms {
			if err := e.launch("row_norms_f32", cuda.D1(B), cuda.D1(256), 0, logits, V, d.cand.Offset(8*B*k)); err != nil {
				return err
			}
		}
		return cuda.CopyOut(cuda.HostSlice[uint8](d.candHost, 0, bytes), d.cand.Ptr, e.stream)
	}
	if err := d.stepThen(ids, out, true); err != nil {
		return nil, nil, nil, err
	}
	var got []float32
	if norms {
		got = cuda.HostSlice[float32](d.candHost, 8*B*k, 2*B)
	}
	return cuda.HostSlice[int32](d.candHost, 0, B*k), cuda.HostSlice[float32](d.candHost, 4*B*k, B*k), got, nil
}

// allocCandidates replaces TopK's buffers with ones for k.
func (d *Decoder) allocCandidates(k int) error {
	done, err := d.e.bind()
	if err != nil {
		return err
	}
	defer done()
	err = errors.Join(d.cand.Free(), d.candHost.Free())
	d.cand, d.candHost, d.candK = nil, nil, 0
	if err != nil {
		return err
	}
	bytes := 8*d.s.batch*k + 8*d.s.batch // the candidates, then TopKNorms' norms
	if d.cand, err = cuda.Alloc(bytes); err != nil {
		return fmt.Errorf("gpu: decoder's top-%d candidates: %w", k, err)
	}
	if d.candHost, err = cuda.AllocHost(bytes); err != nil {
		return errors.Join(fmt.Errorf("gpu: decoder's top-%d candidates: %w", k, err), d.cand.Free())
	}
	d.candK = k
	return nil
}

// TopP feeds ids [B] and draws each sequence's next token into next [B]
// from its nucleus on the device (engine.TopPDecoder; topp_draw_f32, or
// topp_draw_x8_f32 with Engine.TopPClusters), with
// uniforms [B] as the draws; B ids come back, -1 for a row with NaN.
func (d *Decoder) TopP(ids []int64, temperature, p, minP float64, uniforms []float64, next []int64) error {
	if err := d.unqueued(ids, next); err != nil {
		return err
	}
	if err := d.QueueTopP(ids, temperature, p, minP, uniforms); err != nil {
		return err
	}
	return d.Picks(next)
}

// Greedy feeds ids [B] and writes each sequence's most likely next token to
// next [B]. Logits that hold NaN are an error.
func (d *Decoder) Greedy(ids, next []int64) error {
	if err := d.unqueued(ids, next); err != nil {
		return err
	}
	if err := d.QueueGreedy(ids); err != nil {
		return err
	}
	if err := d.Picks(next); err != nil {
		return err
	}
	for b, id := range next {
		if id < 0 {
			return fmt.Errorf("gpu: greedy step: the logits of sequence %d hold NaN", b)
		}
	}
	return nil
}

// idle refuses a step that waits for its own output (Logits, TopK, Greedy,
// TopP) on a decoder with steps queued, whose picks would come back first.
func (d *Decoder) idle() error {
	if d.queued > 0 {
		return engine.Invalid("decoder has %d steps queued: take their picks first", d.queued)
	}
	return nil
}

// unqueued refuses what idle refuses, and ids or room for next that are
// not B long.
func (d *Decoder) unqueued(ids, next []int64) error {
	if err := d.idle(); err != nil {
		return err
	}
	switch B := d.s.batch; {
	case ids == nil:
		return engine.Invalid("decoder for B=%d: got no ids", B)
	case len(next) != B:
		return engine.Invalid("decoder for B=%d: room for %d tokens", B, len(next))
	}
	return nil
}

// QueueDepth is the most steps that may wait for their Picks: two, so that
// the device runs a step while the host reads the picks of the one before.
func (d *Decoder) QueueDepth() int { return queueDepth }

const queueDepth = 2

// QueueGreedy queues a step fed ids [B] (nil: the picks of the step queued
// before) that picks each sequence's most likely next token, the lowest id
// among equal logits, and returns without waiting. Where the step's LM head
// ranked them (headPicked), head_picks_i64 reads its B keys; else
// argmax_rows_f32 reads the logits.
func (d *Decoder) QueueGreedy(ids []int64) error {
	e, B := d.e, d.s.batch
	if d.headPicked() && d.proc == nil { // the picks of processed logits are argmax_rows_f32's
		return d.queue(ids, nil, func(_, to cuda.Ptr, s ringSlot) error {
			return e.launch("head_picks_i64", cuda.D1(1), cuda.D1(32), 0, e.ws.headPick.Ptr, to, B, s.picksAt)
		})
	}
	return d.queue(ids, nil, func(logits, to cuda.Ptr, s ringSlot) error {
		return e.launch("argmax_rows_f32", cuda.D1(B), cuda.D1(1024), 0, logits, to, e.cfg.Vocab, s.picksAt)
	})
}

// headPicked reports whether d's steps leave their greedy picks ranked in
// the workspace (Engine.headPicks): as its graph was captured, or as an eager
// step would run now.
func (d *Decoder) headPicked() bool {
	if d.g != nil {
		return d.g.headPicks
	}
	return d.e.headPicks(d.s.batch)
}

// QueueTopP queues a step fed ids [B] (nil: the picks of the step queued
// before) that draws each sequence's next token from its nucleus as TopP
// does, with uniforms [B] as the draws (copied before it returns), and
// returns without waiting. The kernel reads them from the ring's
// page-locked memory: no copy in on the stream.
func (d *Decoder) QueueTopP(ids []int64, temperature, p, minP float64, uniforms []float64) error {
	e, B := d.e, d.s.batch
	if err := d.checkDraw(temperature, p, minP, uniforms); err != nil {
		return err
	}
	return d.queue(ids, uniforms, func(logits, to cuda.Ptr, s ringSlot) error {
		kernel, group := "topp_draw_f32", 1
		if e.TopPClusters && sm90a(e.dev) { // elsewhere the cluster entry traps
			kernel, group = "topp_draw_x8_f32", 8
		}
		return e.launch(kernel, cuda.D1(group*B), cuda.D1(1024), 0, logits, e.cfg.Vocab, float32(1/temperature), p,
			minP, s.drawsAt, to, s.picksAt)
	})
}

// TopKQueueMax is the largest k QueueTopK takes (kernels/topk.cu's
// TOPK_DRAW_MAX).
func (d *Decoder) TopKQueueMax() int { return topKDrawMax }

// topKDrawMax is kernels/topk.cu's TOPK_DRAW_MAX: topk_draw_f32 ranks up to
// that many candidates in shared memory.
const topKDrawMax = 1024

// QueueTopK queues a step fed ids [B] (nil: the picks of the step queued
// before) that draws each sequence's next token from its k best
// (engine.TopKQueueDecoder: mambago's host rule, token for token, min_p
// included) with uniforms [B] as the draws (copied before it returns), and returns
// without waiting. topk_draw_f32 ranks the k best and draws there, after
// the step.
func (d *Decoder) QueueTopK(ids []int64, k int, temperature, p, minP float64, uniforms []float64) error {
	e, B, V := d.e, d.s.batch, d.e.cfg.Vocab
	if k < 1 || k > min(V, topKDrawMax) {
		return engine.Invalid("top_k = %d, want 1 ≤ k ≤ %d", k, min(V, topKDrawMax))
	}
	if err := d.checkDraw(temperature, p, minP, uniforms); err != nil {
		return err
	}
	if k != d.candK {
		if d.queued > 0 { // the steps queued read the candidates' buffers
			return engine.Invalid("decoder has %d steps queued with top_k = %d: take their picks before top_k = %d",
				d.queued, d.candK, k)
		}
		if err := d.allocCandidates(k); err != nil {
			return err
		}
	}
	return d.queue(ids, uniforms, func(logits, to cuda.Ptr, s ringSlot) error {
		return e.launch("topk_draw_f32", cuda.D1(B), cuda.D1(1024), 0, logits, V, k, d.cand.Ptr, d.cand.Offset(4*B*k),
			1/temperature, p, minP, s.drawsAt, to, s.picksAt)
	})
}

// checkDraw refuses a sampled step's temperature (finite, > 0), top p (in
// (0, 1]), min p (in [0, 1]) or uniforms (B of them, each in [0, 1)) out of
// range.
func (d *Decoder) checkDraw(temperature, p, minP float64, uniforms []float64) error {
	switch B := d.s.batch; {
	case len(uniforms) != B:
		return engine.Invalid("decoder for B=%d: got %d uniforms", B, len(uniforms))
	case !(temperature > 0) || math.IsInf(temperature, 0):
		return engine.Invalid("temperature = %v, want > 0", temperature)
	case !(p > 0 && p <= 1):
		return engine.Invalid("top_p = %v, want in (0, 1]", p)
	case !(minP >= 0 && minP <= 1):
		return engine.Invalid("min_p = %v, want it in [0, 1]", minP)
	}
	for b, u := range uniforms {
		if !(u >= 0 && u < 1) {
			return engine.Invalid("uniform %d = %v, want in [0, 1)", b, u)
		}
	}
	return nil
}

// queue queues a step fed ids (checked; nil: the picks in the feed) whose
// pick writes B ids from its logits to the feed and to the picks of s, the
// ring's next slot, then that slot's event. uniforms, where not nil, go to
// the slot's draws first.
func (d *Decoder) queue(ids []int64, uniforms []float64, pick func(logits, to cuda.Ptr, s ringSlot) error) error {
	e := d.e
	if ids != nil {
		if err := d.check(ids); err != nil {
			return err
		}
	}
	switch {
	case d.pick == nil:
		return engine.Invalid("decoder is closed")
	case d.queued == queueDepth:
		return engine.Invalid("decoder has %d steps queued: take their picks first", d.queued)
	case ids == nil && !d.fed:
		return engine.Invalid("decoder has no picks to feed a step: queue one with ids first")
	}
	if d.ring == nil {
		if err := d.allocRing(); err != nil {
			return err
		}
	}
	if ids != nil && d.proc != nil && d.g == nil {
		// process_rows_f32 reads the ids a step is fed at the feed: an
		// eager step reads them from there too.
		done, err := e.bind()
		if err != nil {
			return err
		}
		err = cuda.CopyIn(d.pick.Ptr, ids, e.stream)
		done()
		if err != nil {
			return err
		}
		ids = nil
	}
	i := (d.head + d.queued) % queueDepth
	s := d.slot(i)
	copy(s.draws, uniforms) // the step that used the slot before is done: its Picks came back
	out := func(logits cuda.Ptr) error {
		if err := d.process(logits); err != nil {
			return err
		}
		// A copy out instead of the mirror cost 8 µs more a token (BenchmarkQueueParts).
		if err := pick(logits, d.feed(), s); err != nil {
			return err
		}
		return d.events[i].Record(e.stream)
	}
	if err := d.stepThen(ids, out, false); err != nil {
		return err
	}
	d.queued++
	d.fed = true
	return nil
}

// ringSlot is a queued step's share of the ring: B picks (int64) and B
// draws (float64) in page-locked memory, each at the device's address of
// the same memory too.
type ringSlot struct {
	picks            []int64
	draws            []float64
	picksAt, drawsAt cuda.Ptr
}

// slot returns the ring's slot i: the picks of every slot, then the draws.
func (d *Decoder) slot(i int) ringSlot {
	B := d.s.batch
	picks, draws := 8*B*i, 8*B*(queueDepth+i)
	return ringSlot{
		picks: cuda.HostSlice[int64](d.ring, picks, B), draws: cuda.HostSlice[float64](d.ring, draws, B),
		picksAt: d.ringDev + cuda.Ptr(picks), drawsAt: d.ringDev + cuda.Ptr(draws),
	}
}

// allocRing makes the queue's page-locked slots and their events.
func (d *Decoder) allocRing() error {
	done, err := d.e.bind()
	if err != nil {
		return err
	}
	defer done()
	ring, err := cuda.AllocHost(16 * queueDepth * d.s.batch)
	if err != nil {
		return fmt.Errorf("gpu: decoder's queue: %w", err)
	}
	ringDev, err := ring.Device()
	if err != nil {
		return errors.Join(fmt.Errorf("gpu: decoder's queue: %w", err), ring.Free())
	}
	events := make([]*cuda.Event, queueDepth)
	for i := range events {
		if events[i], err = cuda.NewEvent(); err != nil {
			for _, ev := range events[:i] {
				err = errors.Join(err, ev.Destroy())
			}
			return errors.Join(fmt.Errorf("gpu: decoder's queue: %w", err), ring.Free())
		}
	}
	d.ring, d.ringDev, d.events = ring, ringDev, events
	return nil
}

// Picks waits for the oldest queued step and writes its picks to next [B]:
// -1 for a sequence whose logits held NaN.
func (d *Decoder) Picks(next []int64) error {
	switch B := d.s.batch; {
	case d.pick == nil:
		return engine.Invalid("decoder is closed")
	case d.queued == 0:
		return engine.Invalid("decoder has no step queued")
	case len(next) != B:
		return engine.Invalid("decoder for B=%d: room for %d tokens", B, len(next))
	}
	done, err := d.e.bind()
	if err != nil {
		return err
	}
	err = d.events[d.head].Synchronize()
	done()
	if err != nil {
		return err
	}
	copy(next, d.slot(d.head).picks)
	d.head, d.queued = (d.head+1)%queueDepth, d.queued-1
	return nil
}

// Close releases the decoder's buffers (not its state, nor the step graph
// the state keeps). Slices that Logits returned must not be used after.
func (d *Decoder) Close() error {
	d.g = nil // the state's, which keeps it for its next decoder
	var err error
	if d.pick != nil {
		done, berr := d.e.bind()
		if berr != nil {
			return berr
		}
		defer done()
		if d.queued > 0 { // their copies still write the ring
			err = errors.Join(err, d.e.stream.Synchronize())
		}
		for _, ev := range d.events {
			err = errors.Join(err, ev.Destroy())
		}
		err = errors.Join(err, d.pick.Free(), d.host.Free(), d.cand.Free(), d.candHost.Free(), d.ring.Free(), d.proc.free())
		d.pick, d.host, d.cand, d.candHost, d.candK, d.proc = nil, nil, nil, nil, 0, nil
		d.ring, d.ringDev, d.events, d.head, d.queued, d.fed = nil, 0, nil, 0, 0, false
	}
	return err
}
