package mambago

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/mambago/mambago/mambago/engine"
)

// Span is where a row of a padded batch holds its tokens: positions
// [Start, Start+Len) of the row. The positions outside it are padding, on
// the left (a tokenizer's padding_side="left"), on the right, or both.
type Span struct{ Start, Len int }

// PrefillSpans is Prefill for a padded batch: row b holds its tokens at
// spans[b] and padding elsewhere. Each row gets what a prefill of its tokens
// alone would give: the padding reaches neither its state nor any output.
// For a fresh state that is what transformers' Mamba computes for a
// left-padded batch under an attention mask, for models without in_proj
// bias. pool's output:
//   - All: every position, zeros at the padding;
//   - Last: the row's last token;
//   - Sum and Mean: over the row's tokens only.
//
// Each row continues from its row of st. On the CUDA engine the whole
// batch runs as one prefill, each row's tokens moved to the end of a row
// as long as the longest (engine.Input.Pad), so padding costs its
// positions' work but no more prefills. The CPU engine, whose time follows
// the positions it runs, takes a prefill a row length, which skips the
// padding's work (onePrefillPads): with more than one length, the carried
// state is copied through the host between st and each length's own, and
// st is written only once every prefill has run.
func (m *Model) PrefillSpans(st engine.State, in engine.Input, spans []Span, pool engine.Pool, out []float32) error {
	return m.prefillSpans(context.Background(), st, in, spans, outputs{pool: pool, out: out}, false)
}

// StartSpans is PrefillSpans for new sequences: every row starts from a
// zero state, whatever st held (on the CPU engine, with no copies of it).
func (m *Model) StartSpans(st engine.State, in engine.Input, spans []Span, pool engine.Pool, out []float32) error {
	return m.prefillSpans(context.Background(), st, in, spans, outputs{pool: pool, out: out}, true)
}

// onePrefillPads says whether a padded batch runs as one prefill, padding
// included, rather than a prefill a row length. On the
// H200 one prefill was 8.9-97x faster for 130m bf16 batches of 8-49
// lengths (bench/results/2026-12-02-padded-8ed0c89.md): a prefill a length
// costs its launches. On 2 CPU cores it was 0.74-0.88x as fast (B=32 T=256,
// B=16 T=128, B=8 T=512; 130m), and 0.78-0.90x once the conv and the scan
// skipped the padding: the GEMMs still run the padding's rows.
// (A variable, so that the tests run either way on either engine.)
var onePrefillPads = func(m *Model) bool { return m.Device() != "cpu" }

// prefillSpans is PrefillSpans, or with fresh StartSpans, writing o, each
// prefill stopping once ctx is done where the engine can (Model.prefill).
func (m *Model) prefillSpans(ctx context.Context, st engine.State, in engine.Input, spans []Span, o outputs, fresh bool) (err error) {
	cfg := m.Config()
	pool, out := o.pool, o.out
	if err := engine.CheckPrefill(cfg, in, st.Batch(), pool, out); err != nil {
		return err
	}
	if in.Pad != nil {
		return engine.Invalid("give a padded batch's spans or its Pad, not both")
	}
	if len(spans) != in.B {
		return engine.Invalid("%d spans for a batch of %d rows", len(spans), in.B)
	}
	whole := true
	for b, s := range spans {
		if s.Len < 1 || s.Start < 0 || s.Start+s.Len > in.T {
			return engine.Invalid("row %d: tokens at [%d, %d) of %d positions: want at least one token, "+
				"within the row", b, s.Start, s.Start+s.Len, in.T)
		}
		whole = whole && s.Len == in.T
	}
	if fresh {
		st.Reset() // every row starts from zero, whatever st held
	}
	if whole {
		return m.prefill(ctx, st, in, o)
	}
	if onePrefillPads(m) {
		return m.prefillRight(ctx, st, in, spans, o)
	}

	groups := map[int][]int{} // rows by their number of tokens
	for b, s := range spans {
		groups[s.Len] = append(groups[s.Len], b)
	}
	lengths := slices.Sorted(maps.Keys(groups))
	d, L := cfg.Hidden, cfg.Layers
	clear(out)
	clear(o.layers)
	// run prefills rows g, n tokens each, on sub and scatters their outputs
	// (and each layer's).
	run := func(sub engine.State, n int, g []int) error {
		subO := outputs{pool: pool, out: make([]float32, pool.OutLen(len(g), n, d))}
		if o.layers != nil {
			subO.layers = make([]float32, L*len(g)*n*d)
		}
		if err := m.prefill(ctx, sub, gather(in, spans, g, n, d, cfg.InputDim), subO); err != nil {
			return err
		}
		for j, b := range g {
			if pool != engine.All {
				copy(out[b*d:(b+1)*d], subO.out[j*d:(j+1)*d])
				continue
			}
			at := (b*in.T + spans[b].Start) * d
			copy(out[at:at+n*d], subO.out[j*n*d:(j+1)*n*d])
			for l := 0; o.layers != nil && l < L; l++ {
				copy(o.layers[l*in.B*in.T*d+at:][:n*d], subO.layers[(l*len(g)+j)*n*d:][:n*d])
			}
		}
		return nil
	}
	if len(lengths) == 1 { // one length: its rows are the batch, in order, and st their state
		return run(st, lengths[0], groups[lengths[0]])
	}

	subs := make([]engine.State, len(lengths))
	defer func() {
		for _, s := range subs {
			if s != nil {
				err = errors.Join(err, freeState(s))
			}
		}
	}()
	for i, n := range lengths {
		if subs[i], err = m.NewState(len(groups[n])); err != nil {
			return err
		}
	}
	rows := rowCopier{st: st, subs: subs, groups: groups, lengths: lengths, layers: cfg.Layers}
	if !fresh { // new states are zero already
		if err := rows.toGroups(); err != nil {
			return err
		}
	}
	for i, n := range lengths {
		if err := run(subs[i], n, groups[n]); err != nil {
			return err
		}
	}
	return rows.fromGroups()
}

// prefillRight runs checked spans as one prefill: each row's tokens at the
// end of a row of the longest row's length, after padding the engine keeps
// out of every state and output (engine.Input.Pad).
func (m *Model) prefillRight(ctx context.Context, st engine.State, in engine.Input, spans []Span, o outputs) error {
	T := slices.MaxFunc(spans, func(a, b Span) int { return a.Len - b.Len }).Len
	d, F := m.Config().Hidden, m.Config().InputDim
	right := engine.Input{B: in.B, T: T, Pad: make([]int, in.B)}
	for b, s := range spans {
		right.Pad[b] = T - s.Len
	}
	switch {
	case in.IDs != nil:
		right.IDs = alignRight(in.IDs, in.T, spans, T, 1) // token 0 at the padding, which nothing reads
	case in.Embeds != nil:
		right.Embeds = alignRight(in.Embeds, in.T, spans, T, d)
	default:
		right.Features = alignRight(in.Features, in.T, spans, T, F)
	}
	if o.pool != engine.All {
		return m.prefill(ctx, st, right, o)
	}
	// Every position's outputs (and each layer's) go back to the rows and
	// positions they were taken from.
	L := m.Config().Layers
	all := outputs{pool: engine.All, out: make([]float32, in.B*T*d)}
	if o.layers != nil {
		all.layers = make([]float32, L*in.B*T*d)
	}
	if err := m.prefill(ctx, st, right, all); err != nil {
		return err
	}
	clear(o.out)
	clear(o.layers)
	for b, s := range spans {
		at, from := (b*in.T+s.Start)*d, (b*T+right.Pad[b])*d
		copy(o.out[at:at+s.Len*d], all.out[from:from+s.Len*d])
		for l := 0; o.layers != nil && l < L; l++ {
			copy(o.layers[l*in.B*in.T*d+at:][:s.Len*d], all.layers[l*in.B*T*d+from:][:s.Len*d])
		}
	}
	return nil
}

// alignRight copies each row's span out of src, rows of T positions of w
// values each, to the end of a row of n positions, zeros before it.
func alignRight[V any](src []V, T int, spans []Span, n, w int) []V {
	dst := make([]V, len(spans)*n*w)
	for b, s := range spans {
		at := (b*T + s.Start) * w
		copy(dst[((b+1)*n-s.Len)*w:(b+1)*n*w], src[at:at+s.Len*w])
	}
	return dst
}

// gather returns the input of rows g, n tokens each from their spans.
func gather(in engine.Input, spans []Span, g []int, n, d, F int) engine.Input {
	sub := engine.Input{B: len(g), T: n}
	switch {
	case in.IDs != nil:
		sub.IDs = pickSpans(in.IDs, in.T, spans, g, n, 1)
	case in.Embeds != nil:
		sub.Embeds = pickSpans(in.Embeds, in.T, spans, g, n, d)
	default:
		sub.Features = pickSpans(in.Features, in.T, spans, g, n, F)
	}
	return sub
}

// pickSpans copies rows g's n positions from their spans out of src, rows
// of T positions of w values each.
func pickSpans[V any](src []V, T int, spans []Span, g []int, n, w int) []V {
	dst := make([]V, 0, len(g)*n*w)
	for _, b := range g {
		at := (b*T + spans[b].Start) * w
		dst = append(dst, src[at:at+n*w]...)
	}
	return dst
}

// rowCopier moves a batch state's rows to and from the states of its
// groups of rows (subs[i] holds rows groups[lengths[i]], in order), a
// layer at a time.
type rowCopier struct {
	st      engine.State
	subs    []engine.State
	groups  map[int][]int
	lengths []int
	layers  int
}

// layerParts are the two parts of a layer's state, read and written whole.
var layerParts = []struct {
	get func(engine.State, int) ([]float32, error)
	set func(engine.State, int, []float32) error
}{
	{engine.State.ConvState, engine.State.SetConvState},
	{engine.State.SSMState, engine.State.SetSSMState},
}

// toGroups copies each row of st into its group's state.
func (r rowCopier) toGroups() error {
	for l := range r.layers {
		for _, p := range layerParts {
			full, err := p.get(r.st, l)
			if err != nil {
				return err
			}
			w := len(full) / r.st.Batch()
			for i, n := range r.lengths {
				g := r.groups[n]
				part := make([]float32, 0, len(g)*w)
				for _, b := range g {
					part = append(part, full[b*w:(b+1)*w]...)
				}
				if err := p.set(r.subs[i], l, part); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// fromGroups copies each group's rows back into st.
func (r rowCopier) fromGroups() error {
	for l := range r.layers {
		for _, p := range layerParts {
			var full []float32
			for i, n := range r.lengths {
				part, err := p.get(r.subs[i], l)
				if err != nil {
					return err
				}
				g := r.groups[n]
				w := len(part) / len(g)
				if full == nil {
					full = make([]float32, r.st.Batch()*w)
				}
				for j, b := range g {
					copy(full[b*w:(b+1)*w], part[j*w:(j+1)*w])
				}
			}
			if err := p.set(r.st, l, full); err != nil {
				return err
			}
		}
	}
	return nil
}
