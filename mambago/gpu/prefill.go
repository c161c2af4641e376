package gpu

import (
	"context"
	"math"
	"slices"

	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
)

// Prefill runs in through the model on the GPU, continuing from st and
// leaving the final state in it, and writes pool's output (after norm_f) to out.
func (e *Engine) Prefill(st engine.State, in engine.Input, pool engine.Pool, out []float32) error {
	s, err := e.own(st)
	if err != nil {
		return err
	}
	if err := engine.CheckPrefill(e.cfg, in, s.batch, pool, out); err != nil {
		return err
	}
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	if err := e.ensureOut(pool.OutLen(in.B, in.T, e.cfg.Hidden)); err != nil {
		return err
	}
	return e.onStream(nil, func() error {
		if err := e.run(s, source{in: in}, pool, e.ws.out.Ptr, 0); err != nil {
			return err
		}
		if err := cuda.CopyOut(out, e.ws.out.Ptr, e.stream); err != nil {
			return err
		}
		return e.stream.Synchronize()
	})
}

// PrefillLayers is Prefill with every position's output that also writes
// each layer's residual stream, f32 as the engine keeps it, to layers [L,
// B, T, d], zero at the padding (engine.LayerPrefiller). The layers pass
// through a device buffer of their size, allocated for the call. A CUDA
// prefill runs to its end: ctx is not read.
func (e *Engine) PrefillLayers(_ context.Context, st engine.State, in engine.Input, out, layers []float32) error {
	s, err := e.own(st)
	if err != nil {
		return err
	}
	if err := engine.CheckPrefillLayers(e.cfg, in, s.batch, out, layers); err != nil {
		return err
	}
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	if err := e.ensureOut(len(out)); err != nil {
		return err
	}
	taps, err := cuda.Alloc(4 * len(layers))
	if err != nil {
		return err
	}
	defer taps.Free()
	err = e.onStream(nil, func() error {
		if err := e.run(s, source{in: in}, engine.All, e.ws.out.Ptr, taps.Ptr); err != nil {
			return err
		}
		if err := cuda.CopyOut(out, e.ws.out.Ptr, e.stream); err != nil {
			return err
		}
		if err := cuda.CopyOut(layers, taps.Ptr, e.stream); err != nil {
			return err
		}
		return e.stream.Synchronize()
	})
	if err != nil {
		return err
	}
	d, rows := e.cfg.Hidden, in.B*in.T
	for l := range e.cfg.Layers { // the padding's rows hold what the engine left there
		for b := range in.B {
			at := (l*rows + b*in.T) * d
			clear(layers[at : at+in.Padding(b)*d])
		}
	}
	return nil
}

// Step feeds one token per sequence and writes the next-token logits [B, V].
func (e *Engine) Step(st engine.State, ids []int64, logits []float32) error {
	s, err := e.own(st)
	if err != nil {
		return err
	}
	in := engine.Input{B: len(ids), T: 1, IDs: ids}
	if err := engine.CheckInput(e.cfg, in, s.batch); err != nil {
		return err
	}
	if B, V := s.batch, e.cfg.Vocab; len(logits) != B*V {
		return engine.Invalid("logits buffer has %d values, want B*V = %d", len(logits), B*V)
	}
	return e.stepThen(s, source{in: in}, func(dev cuda.Ptr) error { return cuda.CopyOut(logits, dev, e.stream) }, true)
}

// stepThen runs one eager decode step of s on src's B ids (host ids
// checked, or on the device), then out on the logits [B, V] it left on the
// device, and waits for both when wait is set.
func (e *Engine) stepThen(s *State, src source, out func(logits cuda.Ptr) error, wait bool) error {
	B := s.batch
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	if err := e.ensureOut(B * e.cfg.Hidden); err != nil {
		return err
	}
	if err := e.ensureLogits(B * e.cfg.Vocab); err != nil {
		return err
	}
	return e.onStream(nil, func() error {
		if err := e.stepDevice(s, src, e.ws.out.Ptr, e.ws.logits.Ptr); err != nil {
			return err
		}
		if err := out(e.ws.logits.Ptr); err != nil || !wait {
			return err
		}
		return e.stream.Synchronize()
	})
}

// Logits computes logits [B, V] = hidden [B, d] @ lm_head^T.
func (e *Engine) Logits(hidden []float32, batch int, logits []float32) error {
	d, V := e.cfg.Hidden, e.cfg.Vocab
	if err := engine.CheckLogits(e.cfg, hidden, batch, logits); err != nil {
		return err
	}
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	if err := e.ensureOut(batch * d); err != nil {
		return err
	}
	return e.onStream(nil, func() error {
		if err := cuda.CopyIn(e.ws.out.Ptr, hidden, e.stream); err != nil {
			return err
		}
		return e.logits(e.ws.out.Ptr, batch, V, logits)
	})
}

// logits multiplies hidden [B, d] on the device by lm_head^T into
// ws.logits and copies the [B, V] result to the host.
func (e *Engine) logits(hidden cuda.Ptr, B, V int, out []float32) error {
	if err := e.ensureLogits(B * V); err != nil {
		return err
	}
	if err := e.logitsDevice(hidden, B, e.ws.logits.Ptr); err != nil {
		return err
	}
	if err := cuda.CopyOut(out, e.ws.logits.Ptr, e.stream); err != nil {
		return err
	}
	return e.stream.Synchronize()
}

// logitsDevice writes logits [B, V] f32 = hidden [B, d] f32 · lm_headᵀ to
// out on the device. In bf16/f16 the hidden states are rounded to the
// storage type first (into ws.x), as lm_head is stored in it.
func (e *Engine) logitsDevice(hidden cuda.Ptr, B int, out cuda.Ptr) error {
	c := e.cfg
	d, V := c.Hidden, c.Vocab
	if e.dt == cuda.F32 {
		return e.blas.GemmNT(B, V, d, hidden, d, e.lmHead, out, V, 0)
	}
	if err := e.ensure(B); err != nil {
		return err
	}
	if err := e.launch(e.typed("to"), grid1(B*d), cuda.D1(256), 0, hidden, e.ws.x.Ptr, int64(B*d)); err != nil {
		return err
	}
	return e.blas.Gemm(B, V, d, e.ws.x.Ptr, d, e.lmHead, out, V, 0, e.dt, cuda.F32)
}

// source is a prefill's input: host slices in in, or, when dev is set, a
// device buffer holding what in.IDs, in.Embeds or in.Features would (kind
// "ids", "embeds" or "features"), read in place.
type source struct {
	in   engine.Input
	dev  cuda.Ptr
	kind string
}

// run writes pool's output for src to the device buffer out, chunk by chunk
// along T (a device source runs as one chunk). Where layers is not 0 (and
// pool is All), it also copies the residual stream after each layer there:
// f32 [L, B, T, d], zero at the padding where the prompt runs as one chunk
// (a chunked prompt's padding rows hold what the engine left there).
func (e *Engine) run(s *State, src source, pool engine.Pool, out, layers cuda.Ptr) error {
	c := e.cfg
	B, T, d := src.in.B, src.in.T, c.Hidden
	tc := e.chunkLen(B, T)
	if src.dev != 0 {
		tc = T
	}
	outLen := pool.OutLen(B, T, d)
	if err := e.ensure(B * tc); err != nil {
		return err
	}
	ws := &e.ws
	if err := e.poison(out, outLen); err != nil {
		return err
	}
	pad, err := e.startPadded(src.in)
	if err != nil {
		return err
	}
	for t0 := 0; t0 < T; t0 += tc {
		n := min(tc, T-t0)
		gather, err := e.embed(src, t0, n, e.EmbedNorm)
		if err != nil {
			return err
		}
		pad := pad.chunk(t0, n)
		// Pooled to the last position, only the last chunk's last position
		// of each sequence reaches the output: the last layer's out_proj and
		// the final norm run on those B rows alone (the layers' carried
		// states need every position of the rest).
		lastOnly := pool == engine.Last && t0+n == T
		for l := range e.layers {
			ids := cuda.Ptr(0)
			if l == 0 {
				ids = gather
			}
			if err := e.block(l, B, n, s, lastOnly && l == len(e.layers)-1, ids, pad); err != nil {
				return err
			}
			if layers != 0 { // the residual stream, ws.h's B·n rows, into layer l's [B, T, d] at t0
				if err := e.tapLayer(layers+cuda.Ptr(4*l*B*T*d), B, T, t0, n, pad); err != nil {
					return err
				}
			}
		}
		if pool == engine.Last && !lastOnly {
			continue // an earlier chunk: nothing of it is pooled
		}
		// The final norm writes the output itself where the output is its
		// rows (each sequence's last position, or every position of a
		// prompt run as one chunk); otherwise it writes ws.x, pooled into out.
		h, ldh, rows := ws.h.Ptr, d, B*n
		if lastOnly {
			h, ldh = lastRows(h, n, d, 4)
			rows = B
		}
		direct := lastOnly || pool == engine.All && n == T
		normed := ws.x.Ptr
		if direct {
			normed = out
		}
		if err := e.rmsnormRows("rmsnorm_f32", false, h, e.normF, normed, rows, d, ldh, d, c.Eps); err != nil {
			return err
		}
		if !lastOnly { // All writes zeros at the padding, and Sum adds none
			if err := e.zeroPadding(pad, normed, 2*d, 2*d, B, n); err != nil {
				return err
			}
		}
		if direct {
			continue
		}
		grid := cuda.Dim3{X: (d + 255) / 256, Y: B, Z: 1}
		if pool == engine.All {
			err = e.launch("pool_f32", grid, cuda.D1(256), 0, ws.x.Ptr, out, n, d, 2, 0, T, t0)
		} else { // Sum and Mean
			acc := 0
			if t0 > 0 {
				acc = 1
			}
			err = e.launch("pool_f32", grid, cuda.D1(256), 0, ws.x.Ptr, out, n, d, 1, acc, T, t0)
		}
		if err != nil {
			return err
		}
	}
	if pool == engine.Mean && pad.pad != 0 { // over each row's tokens
		return e.launch("mean_rows_f32", cuda.Dim3{X: (d + 255) / 256, Y: B, Z: 1}, cuda.D1(256), 0, out, d, pad.pad, T)
	}
	if pool == engine.Mean {
		return e.launch("scale_f32", grid1(B*d), cuda.D1(256), 0, out, int64(B*d), float32(1/float64(T)))
	}
	return nil
}

// padding is a padded batch's Pad (engine.Input.Pad) on the device, as a
// chunk of positions sees it.
type padding struct {
	pad  cuda.Ptr // int32 [B], or 0 for a batch without padding
	most int      // the most positions of padding that open a row
	t0   int      // the chunk's first position
	rows int      // the most padding rows a sequence has in the chunk (0: none)
}

// chunk is p for the chunk of n positions from t0.
func (p padding) chunk(t0, n int) padding {
	p.t0, p.rows = t0, min(n, max(0, p.most-t0))
	return p
}

// startPadded readies a prefill of in: for a padded batch it puts in.Pad
// in ws.pad.
func (e *Engine) startPadded(in engine.Input) (padding, error) {
	if in.Pad == nil {
		return padding{}, nil
	}
	pad := make([]int32, len(in.Pad))
	for b, n := range in.Pad {
		pad[b] = int32(n)
	}
	return padding{pad: e.ws.pad.Ptr, most: slices.Max(in.Pad)}, cuda.CopyIn(e.ws.pad.Ptr, pad, e.stream)
}

// tapLayer copies the residual stream, ws.h's B·n rows of positions
// t0..t0+n-1, into a layer's f32 [B, T, d] at at. A prompt run as one
// chunk is the same layout: one copy, at the copy engine's rate, and its
// padding rows zeroed after; a chunk's rows go by pool_f32 (B·d threads
// walking the positions).
func (e *Engine) tapLayer(at cuda.Ptr, B, T, t0, n int, pad padding) error {
	d := e.cfg.Hidden
	if n < T {
		return e.launch("pool_f32", cuda.Dim3{X: (d + 255) / 256, Y: B, Z: 1}, cuda.D1(256), 0, e.ws.h.Ptr, at,
			n, d, 2, 0, T, t0)
	}
	if err := cuda.Copy(at, e.ws.h.Ptr, 4*B*T*d, e.stream); err != nil {
		return err
	}
	return e.zeroPadding(pad, at, 2*d, 2*d, B, n)
}

// zeroPadding zeroes the first width 2-byte units of each padding row of the
// chunk of B sequences of n rows in m, rows ld units apart.
func (e *Engine) zeroPadding(p padding, m cuda.Ptr, ld, width, B, n int) error {
	if p.rows == 0 {
		return nil
	}
	return e.launch("zero_padding", cuda.Dim3{X: p.rows, Y: B, Z: 1}, cuda.D1(128), 0, m, int64(ld), width, n, p.pad, p.t0)
}

// poison fills n float32s at p with NaN where e.PoisonOutputs asks for it,
// so an element the kernels miss shows as NaN.
func (e *Engine) poison(p cuda.Ptr, n int) error {
	if !e.PoisonOutputs {
		return nil
	}
	return cuda.Fill32(p, math.Float32bits(float32(math.NaN())), n, e.stream)
}

// lastRows is where the last rows of B sequences of n rows each start in p
// ([B, n, width] elements of size bytes), and their stride in elements: B
// rows, n apart.
func lastRows(p cuda.Ptr, n, width, size int) (cuda.Ptr, int) {
	return p + cuda.Ptr((n-1)*width*size), n * width
}

// embed fills the residual stream ws.h [B, n, d] for positions t0..t0+n-1.
// With gather, a prompt of token ids is only put in place: embed returns
// the device ids [B*n], which the first layer's RMSNorm then looks up
// itself (Engine.EmbedNorm); otherwise it returns 0.
func (e *Engine) embed(src source, t0, n int, gather bool) (cuda.Ptr, error) {
	c, ws, in := e.cfg, &e.ws, src.in
	B, d, rows := in.B, c.Hidden, in.B*n
	ids, embeds, features := ws.ids.Ptr, ws.h.Ptr, ws.in.Ptr
	var err error
	switch {
	case src.dev != 0 && src.kind == "ids":
		ids = src.dev
	case src.dev != 0 && src.kind == "embeds":
		embeds = src.dev
	case src.dev != 0:
		features = src.dev
	case in.IDs != nil:
		chunkIDs := make([]int64, 0, rows)
		for b := 0; b < B; b++ {
			chunkIDs = append(chunkIDs, in.IDs[b*in.T+t0:b*in.T+t0+n]...)
		}
		err = cuda.CopyIn(ids, chunkIDs, e.stream)
	case in.Embeds != nil:
		err = cuda.CopyIn(embeds, chunk(in.Embeds, B, in.T, d, t0, n), e.stream)
	default:
		err = cuda.CopyIn(features, chunk(in.Features, B, in.T, c.InputDim, t0, n), e.stream)
	}
	if err != nil {
		return 0, err
	}
	switch {
	case in.IDs != nil || src.kind == "ids":
		if gather {
			return ids, nil
		}
		return 0, e.launch(e.typed("embed"), cuda.D1(rows), cuda.D1(256), 0, ids, e.emb, ws.h.Ptr, c.Vocab, d)
	case in.Embeds != nil || src.kind == "embeds":
		if embeds != ws.h.Ptr {
			return 0, cuda.Copy(ws.h.Ptr, embeds, 4*rows*d, e.stream)
		}
		return 0, nil
	default:
		F := c.InputDim
		if err := e.blas.GemmNT(rows, d, F, features, F, e.inputProj, ws.h.Ptr, d, 0); err != nil {
			return 0, err
		}
		return 0, e.addBias(ws.h.Ptr, d, e.inputBias, rows, d)
	}
}

// chunk returns positions t0..t0+n-1 of every sequence of v [B, T, w].
func chunk(v []float32, B, T, w, t0, n int) []float32 {
	if t0 == 0 && n == T {
		return v
	}
	out := make([]float32, 0, B*n*w)
	for b := 0; b < B; b++ {
		out = append(out, v[(b*T+t0)*w:(b*T+t0+n)*w]...)
	}
	return out
}

// scanPrefetchLead is Scan.PrefetchLead in the prefill: 8 tiles, about 12
// µs before the end of a 130m scan at B=1 (leads of 4, 8 and 16 measured
// the same; asked for at the scan's start, the rows lost 0.8%).
const scanPrefetchLead = 8

// residualRows is the span of the residual stream that out_proj adds
// into after the scan, rows of d f32, where Engine.ResidualPrefetch asks
// for it; with lastOnly out_proj adds into B rows far apart, and nothing
// is asked for.
func (e *Engine) residualRows(rows int, lastOnly bool) L2Span {
	bytes := 4 * rows * e.cfg.Hidden
	if lastOnly || bytes > e.ResidualPrefetch {
		return L2Span{}
	}
	return L2Span{P: e.ws.h.Ptr, Bytes: bytes}
}

// addBias adds bias [n] to every row of x [rows, n] (row stride ld), both
// f32; a zero bias adds nothing.
func (e *Engine) addBias(x cuda.Ptr, ld int, bias cuda.Ptr, rows, n int) error {
	if bias == 0 {
		return nil
	}
	return e.launch("add_bias_f32", grid1(rows*n), cuda.D1(256), 0, x, ld, bias, int64(rows), n)
}

// block runs layer l over the chunk of B sequences of n positions in the
// workspace, continuing from and updating the layer's carried state. With
// lastOnly, out_proj adds into the residual stream at each sequence's last
// position only (the rest of ws.h is then stale). Where ids is set (the
// first layer, Engine.EmbedNorm), its RMSNorm looks the chunk's token ids
// [B*n] up itself and writes the residual stream. The chunk's padding rows
// (pad) reach neither a window nor a state: the conv reads each window
// right before its sequence's first token (pad_window_f32), and the scan
// holds the state through the padding with a time step of 0 (exp(0·A) = 1)
// and u = 0 there.
func (e *Engine) block(l, B, n int, s *State, lastOnly bool, ids cuda.Ptr, pad padding) error {
	c, g, ws := e.cfg, e.layers[l], &e.ws
	rows, d, E, R, N, K, dt := B*n, c.Hidden, c.Inner, c.DTRank, c.State, c.ConvKernel, e.dt
	fused := e.ConvXProjFused() && pad.rows == 0 // the conv stage runs x_proj too (on u before its padding is zeroed)
	ownXProj, xprojTMA, xprojKS := e.xprojRoute(rows)
	spt := e.scanOnePass(B, E)
	scan := Scan{DT: ws.delta.Ptr, A2: g.a2, DBL: ws.dbl.Ptr, LDD: R + 2*N, R: R,
		U: ws.u.Ptr, D: g.d, Z: ws.xz.Offset(4 * E), LDZ: 2 * E, State: s.ssm(l), Y: ws.y.Ptr,
		B: B, T: n, E: E, N: N, DType: dt, Chunk: e.ScanChunk, Scratch: ws.scan.Ptr,
		Staged: e.ScanStaged, OnePass: spt, PDL: e.PrefillPDL, Helpers: e.ScanHelpers && e.helpersFit(false),
		Segments: e.scanSegments(B, n, E, spt), V: ws.xz.Ptr, LDV: 2 * E, SMs: e.dev.SMs, // xz's x half: the conv has read it
		Prefetch: e.residualRows(rows, lastOnly), PrefetchLead: scanPrefetchLead}
	if e.ScanDTProj && e.DTProjTensorCores && e.helpersFit(true) && pad.rows == 0 { // the time step in the scan's tiles (dt_proj's products)
		scan.DTW, scan.DTBias, scan.DTProducts, scan.TMA = g.dtProj, g.dtBias, 3, e.ScanTMA
		if e.DTProjOneTF32Product {
			scan.DTProducts = 1
		}
	}
	fusedDT := scan.FusedDTApplies()
	skinny := e.skinnyApplies(rows)
	stages := []struct {
		name string
		run  func() error
	}{
		{"rmsnorm", func() error {
			if e.outNormFused(l - 1) {
				return nil // the previous layer's out_proj wrote ws.x
			}
			if ids != 0 {
				grid, block := rmsnormGrid(rows)
				return e.fn[e.typed("rmsnorm_embed")].LaunchMaybePDL(e.PrefillPDL, grid, block, 0, e.stream,
					ids, e.emb, c.Vocab, ws.h.Ptr, g.norm, ws.x.Ptr, rows, d, float32(c.Eps), noFill, uint32(0), int64(0))
			}
			return e.rmsnorm(e.typed("rmsnorm"), e.PrefillPDL, ws.h.Ptr, g.norm, ws.x.Ptr, rows, d, c.Eps)
		}},
		{"in_proj", func() error {
			if skinny {
				maps, err := e.warpgroupMaps()
				if err != nil {
					return err
				}
				return e.launchSkinny(maps.in[l], ws.x.Ptr, d, g.inBias, ws.xz.Ptr, 2*E, false, rows, 2*E, d)
			}
			if err := e.blas.Gemm(rows, 2*E, d, ws.x.Ptr, d, g.inProj, ws.xz.Ptr, 2*E, 0, dt, cuda.F32); err != nil {
				return err
			}
			return e.addBias(ws.xz.Ptr, 2*E, g.inBias, rows, 2*E)
		}},
		{"conv", func() error {
			conv := Conv{XZ: ws.xz.Ptr, LDX: 2 * E, Window: s.conv(l), W: g.conv, Bias: g.convBias, U: ws.u.Ptr,
				B: B, T: n, E: E, K: K, DType: dt, PDL: e.PrefillPDL}
			if fused {
				return ConvXProj{Conv: conv, XProj: g.xProj, DBL: ws.dbl.Ptr, J: R + 2*N, // dt's buffer is free until dt_proj
					Part: ws.delta.Ptr, Count: ws.counts.Ptr}.Launch(e.function, e.stream)
			}
			if pad.rows > 0 { // the window moves to right before each sequence's first token
				err := e.launch("pad_window_f32", cuda.Dim3{X: (E + 127) / 128, Y: B, Z: 1}, cuda.D1(128), 0,
					ws.xz.Ptr, 2*E, s.conv(l), n, E, K, pad.pad, pad.t0)
				if err != nil {
					return err
				}
			}
			if err := conv.Launch(e.function, e.stream); err != nil {
				return err
			}
			return e.zeroPadding(pad, ws.u.Ptr, E*dt.Size()/2, E*dt.Size()/2, B, n) // (in units of 2 bytes)
		}},
		{"x_proj", func() error {
			if ownXProj {
				err := XProj{U: ws.u.Ptr, W: g.xProj, DBL: ws.dbl.Ptr, M: rows, E: E, J: R + 2*N, DType: dt,
					PDL: e.PrefillPDL, TMA: xprojTMA, Slices: xprojKS}.Launch(e.function, e.stream)
				if err != nil {
					return err
				}
			} else if !fused {
				if err := e.blas.Gemm(rows, R+2*N, E, ws.u.Ptr, E, g.xProj, ws.dbl.Ptr, R+2*N, 0, dt, cuda.F32); err != nil {
					return err
				}
			}
			if !c.Falcon {
				return nil
			}
			return e.launch("rmsnorm_dbc_f32", cuda.D1(rows), cuda.D1(128), 0, ws.dbl.Ptr, R, N, float32(c.MixerEps))
		}},
		{"dt_proj", func() error { // f32 in every engine: its rounding reaches the state through exp(dt·A)
			if fusedDT {
				return nil // the scan computes it
			}
			wg := e.DTProjWarpgroup && sm90a(e.dev) && dtProjWGTakes(R, rows, E, e.dev.SMs)
			short := e.DTProjShort && dtProjShortPays(R, rows, E, e.dev.SMs, e.dev.MaxSharedOptIn)
			err := DTProj{DBL: ws.dbl.Ptr, LDD: R + 2*N, R: R, W: g.dtProj, Bias: g.dtBias, DT: ws.delta.Ptr,
				Rows: rows, E: E, TensorCores: e.DTProjTensorCores, OneTF32Product: e.DTProjOneTF32Product,
				Warpgroup: wg, Short: short, SMs: e.dev.SMs, PDL: e.PrefillPDL}.Launch(e.function, e.stream)
			if err != nil {
				return err
			}
			return e.zeroPadding(pad, ws.delta.Ptr, 2*E, 2*E, B, n) // a time step of 0 holds the state
		}},
		{"scan", func() error { return scan.Launch(e.function, e.stream) }},
		{"out_proj", func() error { // out_proj, accumulated into the residual stream
			if e.outNormFused(l) { // and the next layer's RMSNorm
				return OutNorm{Y: ws.y.Ptr, LDY: E, W: g.outProj, H: ws.h.Ptr, Norm: e.layers[l+1].norm, X: ws.x.Ptr,
					M: rows, D: d, K: E, Eps: float32(c.Eps), DType: dt, PDL: e.PrefillPDL}.Launch(e.function, e.stream)
			}
			y, h, m, ldy, ldh := ws.y.Ptr, ws.h.Ptr, rows, E, d
			if lastOnly {
				y, ldy = lastRows(y, n, E, dt.Size())
				h, ldh = lastRows(h, n, d, 4)
				m = B
			}
			if skinny {
				maps, err := e.warpgroupMaps()
				if err != nil {
					return err
				}
				return e.launchSkinny(maps.out[l], y, ldy, g.outBias, h, ldh, true, m, d, E)
			}
			if err := e.blas.Gemm(m, d, E, y, ldy, g.outProj, h, ldh, 1, dt, cuda.F32); err != nil {
				return err
			}
			return e.addBias(h, ldh, g.outBias, m, d)
		}},
	}
	for _, st := range stages {
		if err := e.Timer.time(st.name, e.stream, st.run); err != nil {
			return err
		}
	}
	return nil
}
