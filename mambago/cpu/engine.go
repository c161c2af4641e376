package cpu

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/mambago/mambago/mambago/blas"
	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/safetensors"
)

// Engine is the pure-Go engine. It holds the weights read-only, so its
// methods are safe for concurrent use; each State is locked by the call using it.
type Engine struct {
	// w holds the weights the engine reads as float32: all of them for
	// Float32 storage; otherwise all but the matrices, which are in mats,
	// emb, head and inputProj alone.
	w       *checkpoint.Weights
	cfg     checkpoint.Config
	storage Storage
	mats    []layerMats
	// emb, head and inputProj are the embeddings [V, d], the LM head [V,
	// d] (the same matrix where the checkpoint ties them) and input_proj
	// [d, F] (the zero matrix without one).
	emb, head, inputProj matrix
	a2                   [][]float32 // per layer, A·log2(e) [E, N]: the scan's exp as exp2
	a2t                  [][]float32 // per layer, a2 [E, N] in lane blocks of sixteen channels (laneBlock), as the states
	// convT is each layer's conv weights [E, K] in lane blocks of eight
	// channels (convLanes).
	convT [][]float32
	// ChunkRows bounds B·T per pass; longer prompts run in chunks along T.
	ChunkRows int
	// BLAS, when set, runs the GEMMs (e.g. numpy's OpenBLAS); nil uses the
	// engine's own SGEMM (sgemm.go), or gonum's on a CPU without AVX2.
	// Set it before the first call.
	BLAS *blas.Lib
	// Timer, when set, accumulates the wall time of each stage (for
	// profiling; it serialises nothing but costs a clock read per stage).
	Timer *StageTimer
}

var _ engine.Engine = (*Engine)(nil)

// layerMats are a layer's weight matrices as the engine keeps them.
type layerMats struct {
	inProj, xProj, dtProj, outProj matrix
}

// New returns an engine over w, keeping its weights as they are (float32).
func New(w *checkpoint.Weights) *Engine { return NewStored(w, Float32) }

// NewStored returns an engine over w that keeps the weight matrices in st
// (Storage): for BFloat16 and Float16 rounded copies, after which the
// engine holds no reference to w's float32 matrices, so their memory is
// freed once the caller drops w. Matrices that w holds narrowed
// (checkpoint.LoadNarrowed) are kept as they are where st is their type,
// and converted otherwise.
func NewStored(w *checkpoint.Weights, st Storage) *Engine {
	c := w.Config
	E, R, N := c.Inner, c.DTRank, c.State
	e := &Engine{cfg: c, storage: st, ChunkRows: 4096}
	n := w.Narrowed
	if n == nil {
		n = &checkpoint.Narrowed{Layers: make([]checkpoint.NarrowedLayer, len(w.Layers))}
	}
	from := Float16
	if n.DType == safetensors.BF16 {
		from = BFloat16
	}
	keep := func(v []float32, bits []uint16, rows, cols int) matrix {
		if v == nil && bits != nil {
			if from == st {
				return matrix{h: bits, st: st, rows: rows, cols: cols}
			}
			v = make([]float32, len(bits))
			widenInto(v, bits, from)
		}
		return newMatrix(v, rows, cols, st)
	}
	e.emb = keep(w.Embeddings, n.Embeddings, c.Vocab, c.Hidden)
	e.head = e.emb
	if !w.Tied() && (w.Narrowed == nil || !n.Tied()) {
		e.head = keep(w.LMHead, n.LMHead, c.Vocab, c.Hidden)
	}
	e.inputProj = keep(w.InputProj, n.InputProj, c.Hidden, c.InputDim)
	kept := *w // what the engine reads as float32
	kept.Narrowed = nil
	kept.Layers = slices.Clone(w.Layers)
	for i := range kept.Layers {
		l, l16 := &kept.Layers[i], n.Layers[i]
		e.mats = append(e.mats, layerMats{
			inProj:  keep(l.InProj, l16.InProj, 2*E, c.Hidden),
			xProj:   keep(l.XProj, l16.XProj, R+2*N, E),
			dtProj:  keep(l.DTProj, l16.DTProj, E, R),
			outProj: keep(l.OutProj, l16.OutProj, c.Hidden, E),
		})
		if st != Float32 {
			l.InProj, l.XProj, l.DTProj, l.OutProj = nil, nil, nil, nil
		}
	}
	if st != Float32 {
		kept.Embeddings, kept.LMHead, kept.InputProj = nil, nil, nil
	}
	e.w = &kept
	for _, l := range w.Layers {
		a2 := make([]float32, len(l.A))
		for i, a := range l.A {
			a2[i] = a * math.Log2E
		}
		e.a2 = append(e.a2, a2)
		e.a2t = append(e.a2t, transposeLanes(a2, w.Config.Inner, w.Config.State, wideLanes))
		e.convT = append(e.convT, transposeLanes(l.Conv, w.Config.Inner, w.Config.ConvKernel, laneWidth))
	}
	return e
}

// Config returns the model's configuration.
func (e *Engine) Config() checkpoint.Config { return e.cfg }

// Storage returns the type the engine keeps its weight matrices in.
func (e *Engine) Storage() Storage { return e.storage }

// Device returns "cpu".
func (e *Engine) Device() string { return "cpu" }

// Backend names what runs the prefill's GEMMs: the CBLAS library's entry
// point and path, the engine's own SGEMM ("go sgemm (avx512)" or "go sgemm
// (avx2)"), or "gonum" on a CPU without AVX2.
func (e *Engine) Backend() string {
	if e.BLAS != nil {
		return e.BLAS.Symbol + " (" + e.BLAS.Path + ")"
	}
	if s, ok := sgemmKernel(); ok {
		return s.name
	}
	return "gonum"
}

// Close releases nothing: the weights are ordinary Go memory.
func (e *Engine) Close() error { return nil }

// Prefill runs in through the model, continuing from st and leaving the final
// state in it, and writes pool's output (after norm_f) to out.
func (e *Engine) Prefill(st engine.State, in engine.Input, pool engine.Pool, out []float32) error {
	return e.PrefillContext(context.Background(), st, in, pool, out)
}

// PrefillContext is Prefill that stops before its next layer once ctx is
// done (engine.Stopper), returning an error that wraps ctx's cause and
// leaving st partly advanced.
func (e *Engine) PrefillContext(ctx context.Context, st engine.State, in engine.Input, pool engine.Pool, out []float32) error {
	s, err := e.own(st)
	if err != nil {
		return err
	}
	if err := engine.CheckPrefill(e.cfg, in, s.batch, pool, out); err != nil {
		return err
	}
	return offCaller(func() error { return e.prefill(ctx, s, in, pool, out, nil) })
}

// PrefillLayers is PrefillContext with every position's output that also
// writes each layer's residual stream to layers (engine.LayerPrefiller).
func (e *Engine) PrefillLayers(ctx context.Context, st engine.State, in engine.Input, out, layers []float32) error {
	s, err := e.own(st)
	if err != nil {
		return err
	}
	if err := engine.CheckPrefillLayers(e.cfg, in, s.batch, out, layers); err != nil {
		return err
	}
	return offCaller(func() error { return e.prefill(ctx, s, in, engine.All, out, layers) })
}

// prefill is PrefillContext of checked arguments, also writing each layer's
// residual stream to layers [L, B, T, d] (zero at the padding) where it is
// not nil.
func (e *Engine) prefill(ctx context.Context, s *State, in engine.Input, pool engine.Pool, out, layers []float32) error {
	d := e.cfg.Hidden
	s.mu.Lock()
	defer s.mu.Unlock()

	B, T := in.B, in.T
	tc := max(1, min(T, e.ChunkRows/B)) // positions per chunk
	w := newWork(e.cfg, B, tc)
	var acc []float64 // running sum over positions, for Sum and Mean
	if pool == engine.Sum || pool == engine.Mean {
		acc = make([]float64, B*d)
	}
	for t0 := 0; t0 < T; t0 += tc {
		n := min(tc, T-t0)
		w.resize(e.cfg, B, n)
		w.setPad(in, t0)
		e.embed(w, in, t0)
		for l := range e.w.Layers {
			if ctx.Err() != nil {
				return fmt.Errorf("prefill: stopped at position %d, layer %d: %w", t0, l, context.Cause(ctx))
			}
			e.block(l, w, s.conv[l], s.ssm[l])
			if layers != nil {
				w.tap(layers[l*B*T*d:(l+1)*B*T*d], d, T, t0)
			}
		}
		rmsnorm(w.x, w.h, e.w.NormF, d, e.cfg.Eps) // norm_f of every row of the chunk
		w.zeroPadding(w.x, d, d)                   // All writes zeros there, and Sum adds none
		for b := 0; b < B; b++ {
			rowsB := w.x[b*n*d : (b+1)*n*d]
			switch pool {
			case engine.All:
				copy(out[(b*T+t0)*d:(b*T+t0+n)*d], rowsB)
			case engine.Last:
				if t0+n == T {
					copy(out[b*d:(b+1)*d], rowsB[(n-1)*d:])
				}
			default:
				a := acc[b*d : (b+1)*d]
				for i, v := range rowsB {
					a[i%d] += float64(v)
				}
			}
		}
	}
	if acc != nil {
		for b := range B {
			scale := 1.0
			if pool == engine.Mean {
				scale = 1 / float64(T-in.Padding(b)) // over the row's tokens
			}
			for i, v := range acc[b*d : (b+1)*d] {
				out[b*d+i] = float32(v * scale)
			}
		}
	}
	return nil
}

// embed fills the residual stream of the chunk starting at position t0:
// an embedding lookup, a copy of the given embeddings, or input_proj.
func (e *Engine) embed(w *work, in engine.Input, t0 int) {
	d, n := e.cfg.Hidden, w.T
	for b := 0; b < w.B; b++ {
		src := b*in.T + t0 // first source row of this sequence's chunk
		dst := w.h[b*n*d : (b+1)*n*d]
		switch {
		case in.IDs != nil:
			for t := 0; t < n; t++ {
				e.emb.row(dst[t*d:(t+1)*d], int(in.IDs[src+t]))
			}
		case in.Embeds != nil:
			copy(dst, in.Embeds[src*d:(src+n)*d])
		default:
			F := e.cfg.InputDim
			e.gemm(dst, d, in.Features[src*F:(src+n)*F], F, e.inputProj, n, d, F, 0)
			addBias(dst, e.w.InputBias)
		}
	}
}

// Step feeds one token per sequence and writes the next-token logits [B, V].
func (e *Engine) Step(st engine.State, ids []int64, logits []float32) error {
	s, err := e.own(st)
	if err != nil {
		return err
	}
	B := s.batch
	if len(logits) != B*e.cfg.Vocab {
		return engine.Invalid("logits buffer has %d values, want B*V = %d", len(logits), B*e.cfg.Vocab)
	}
	hidden := make([]float32, B*e.cfg.Hidden)
	in := engine.Input{B: len(ids), T: 1, IDs: ids}
	if err := engine.CheckPrefill(e.cfg, in, B, engine.Last, hidden); err != nil {
		return err
	}
	return offCaller(func() error {
		if err := e.prefill(context.Background(), s, in, engine.Last, hidden, nil); err != nil {
			return err
		}
		e.logits(hidden, B, logits)
		return nil
	})
}

// Logits computes logits [B, V] = hidden [B, d] @ lm_head^T.
func (e *Engine) Logits(hidden []float32, batch int, logits []float32) error {
	if err := engine.CheckLogits(e.cfg, hidden, batch, logits); err != nil {
		return err
	}
	return offCaller(func() error {
		e.logits(hidden, batch, logits)
		return nil
	})
}

// logits is Logits of checked arguments.
func (e *Engine) logits(hidden []float32, batch int, logits []float32) {
	d, V := e.cfg.Hidden, e.cfg.Vocab
	e.gemm(logits, V, hidden, d, e.head, batch, V, d, 0)
}

var _ engine.Stopper = (*Engine)(nil)
