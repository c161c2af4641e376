// Package engine defines what every mambago engine (the pure-Go CPU engine
// and the CUDA engine) provides, and the input checks they share, so that the
// public API and the Python bindings work with either.
package engine

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/mambago/mambago/mambago/checkpoint"
)

// Pool selects what a prefill writes to its output.
type Pool int

// The prefill outputs. Every one is taken after norm_f.
const (
	Last Pool = iota // the last position's hidden state   [B, d]
	All              // every position's hidden state       [B, T, d]
	Sum              // the sum over positions              [B, d]
	Mean             // the mean over positions             [B, d]
)

// ParsePool maps "last", "all", "sum" and "mean" to a Pool.
func ParsePool(s string) (Pool, error) {
	switch s {
	case "last":
		return Last, nil
	case "all":
		return All, nil
	case "sum":
		return Sum, nil
	case "mean":
		return Mean, nil
	}
	return 0, Invalid("output must be 'last', 'all', 'sum' or 'mean', got %q", s)
}

// OutLen returns the number of float32 values a prefill of shape (B, T) writes.
func (p Pool) OutLen(B, T, d int) int {
	if p == All {
		return B * T * d
	}
	return B * d
}

// Input is one prefill's input: exactly one of IDs, Embeds or Features is set.
type Input struct {
	B, T     int
	IDs      []int64   // [B, T] token ids
	Embeds   []float32 // [B, T, d] embeddings, fed in place of the embedding lookup
	Features []float32 // [B, T, F] raw features, fed through input_proj

	// Pad, when set ([B]), opens row b with Pad[b] positions of padding,
	// 0 <= Pad[b] < T: a left-padded batch in one prefill. The padding
	// reaches neither a row's state nor its tokens' outputs: each row
	// continues from its row of the state as a prefill of its tokens alone
	// would (Reset the state first for new sequences), Last is position
	// T-1, Sum and Mean run over the row's tokens, and All is zero at the
	// padding.
	Pad []int
}

// Padding is how many positions of padding open row b (Input.Pad).
func (in Input) Padding(b int) int {
	if in.Pad == nil {
		return 0
	}
	return in.Pad[b]
}

// State is the carried state of one batch of sequences: per layer, the conv
// window [B, E, K] (the last K inputs of the conv, as Hugging Face keeps it)
// and the SSM state [B, E, N] in float32. A prefill or step updates it in place.
type State interface {
	// Batch returns the number of sequences B the state holds.
	Batch() int
	// Reset zeroes the state, as for fresh sequences.
	Reset()
	// ConvState returns a copy of layer's conv window, [B, E, K].
	ConvState(layer int) ([]float32, error)
	// SSMState returns a copy of layer's SSM state, [B, E, N].
	SSMState(layer int) ([]float32, error)
	// SetConvState overwrites layer's conv window with v, [B, E, K].
	SetConvState(layer int, v []float32) error
	// SetSSMState overwrites layer's SSM state with v, [B, E, N].
	SetSSMState(layer int, v []float32) error
	// CopyRows makes sequence i of this state, in every layer, a copy of
	// sequence rows[i] of src (len(rows) = Batch(); each in [0,
	// src.Batch())), as beam search reorders its beams. src is a state of
	// the same engine and may be this one: every row is read as it was
	// before the call.
	CopyRows(src State, rows []int) error
}

// CheckRows reports rows that CopyRows cannot take into a state of batch
// sequences from one of srcBatch.
func CheckRows(rows []int, batch, srcBatch int) error {
	if len(rows) != batch {
		return Invalid("copy rows: %d rows for a state of %d sequences", len(rows), batch)
	}
	for i, r := range rows {
		if r < 0 || r >= srcBatch {
			return Invalid("copy rows: row %d takes sequence %d of a state of %d", i, r, srcBatch)
		}
	}
	return nil
}

// Engine runs a model. Its methods are safe for concurrent use, as long as
// concurrent calls do not share a State.
type Engine interface {
	// Config returns the model's configuration.
	Config() checkpoint.Config
	// Device names where the engine computes, e.g. "cpu".
	Device() string
	// Backend describes the libraries doing the heavy lifting, e.g. the BLAS.
	Backend() string
	// NewState returns a zeroed state for batch sequences.
	NewState(batch int) (State, error)
	// Prefill runs the whole input through the model in one pass, continuing
	// from st and leaving the final state in it, and writes pool's output to out.
	Prefill(st State, in Input, pool Pool, out []float32) error
	// Step feeds one token per sequence (ids [B]) and writes logits [B, V].
	Step(st State, ids []int64, logits []float32) error
	// Logits computes hidden [B, d] @ lm_head^T into logits [B, V].
	Logits(hidden []float32, batch int, logits []float32) error
	// Close releases the engine's resources.
	Close() error
}

// Stopper is an engine whose prefill can stop partway (the CPU engine,
// whose long prompts take seconds; a CUDA prefill runs to its end).
type Stopper interface {
	// PrefillContext is Prefill that checks ctx as it goes: once ctx is
	// done it returns an error wrapping ctx's cause and leaves st partly
	// advanced, for the caller to restore or reset.
	PrefillContext(ctx context.Context, st State, in Input, pool Pool, out []float32) error
}

// LayerPrefiller is an engine whose prefill can also hand out the residual
// stream after each layer, as transformers' hidden_states gives them
// before the final norm.
type LayerPrefiller interface {
	// PrefillLayers is Prefill with every position's output (All) that
	// also writes, to layers, the residual stream after each of the model's
	// L layers: [L, B, T, d], layer after layer, zero at the padding (Pad).
	// Where the engine is a Stopper it stops as PrefillContext does.
	PrefillLayers(ctx context.Context, st State, in Input, out, layers []float32) error
}

// Decoder steps one state on an engine that can do better than a Step a
// call: the CUDA engine replays a captured step graph, and picks greedy
// tokens where the logits are, so that a token costs the host B ids
// rather than B×V logits.
type Decoder interface {
	// Logits feeds one token a sequence (ids [B]) and returns the next-token
	// logits [B, V], as Engine.Step computes them, in host memory the
	// decoder owns: valid until its next call or Close.
	Logits(ids []int64) ([]float32, error)
	// Greedy feeds one token a sequence (ids [B]) and writes each sequence's
	// most likely next token, the lowest id among equal logits, to next [B].
	Greedy(ids, next []int64) error
	// Close releases what the decoder holds (not its state).
	Close() error
}

// TopKDecoder is a Decoder that also ranks each sequence's best tokens
// where the logits are (the CUDA engine, topk_rows_f32), so that a sampled
// token from the k best costs the host 2·B·k numbers rather than B×V.
type TopKDecoder interface {
	Decoder
	// TopK feeds one token a sequence (ids [B]) and returns each sequence's
	// k best-ranked next tokens (by logit, the lower id first among equal
	// logits; 1 ≤ k ≤ V): tokens [B, k] and their logits [B, k], each row
	// in no particular order, in host memory the decoder owns, valid until
	// its next call or Close. A row whose logits hold NaN has every token -1.
	TopK(ids []int64, k int) (tokens []int32, logits []float32, err error)
}

// BeamDecoder is a TopKDecoder that also hands back each row's log-softmax
// normalizers with its k best (the CUDA engine, row_norms_f32), so that a
// step of beam search costs the host 2·B·k numbers and 2·B more rather
// than B×V logits.
type BeamDecoder interface {
	TopKDecoder
	// TopKNorms is TopK that also returns norms [B, 2]: each row's largest
	// logit m and the log of its sum of exp(logit − m) (summed in
	// float64), so that a token's log probability is logit − m − norms[b,
	// 1] in float32; NaN for a row whose logits hold NaN. In the decoder's
	// memory, as TopK's.
	TopKNorms(ids []int64, k int) (tokens []int32, logits, norms []float32, err error)
}

// BeamProcessingDecoder is a BeamDecoder that also log-softmaxes and
// processes each row where the logits are (the CUDA engine,
// log_softmax_rows_f32 and process_rows_f32), as beam search's logits
// processors need, so that a step of beam search under them costs the host
// 2·B·k numbers rather than B×V log probabilities.
type BeamProcessingDecoder interface {
	BeamDecoder
	// Process makes each TopKLogProbs step after it process its rows' log
	// probabilities as p says (p's steps, the ids fed joining each row's
	// tokens, as ProcessingDecoder's queued steps do), the first such step
	// being p's step 0.
	Process(p Processing) error
	// TopKLogProbs first makes the processors' row i hold what their row
	// parents[i] held (beam search's reordered beams; nil: none moves),
	// then feeds one token a sequence (ids [B]) and returns each
	// sequence's k best next tokens (1 ≤ k ≤ V) by log probability, each
	// the token's logit − m − log Σ exp(logit − m) in float32 (as
	// TopKNorms gives it), processed as Process asked and then, where
	// renormalize is set, log-softmaxed once more (a row of -Inf alone
	// kept): tokens [B, k] and logp [B, k], each row in no particular
	// order, in the decoder's memory, as TopK's. A row whose logits hold
	// NaN has every token -1.
	TopKLogProbs(ids []int64, parents []int, k int, renormalize bool) (tokens []int32, logp []float32, err error)
}

// TopPDecoder is a Decoder that also draws from a nucleus where the logits
// are (the CUDA engine, topp_draw_f32), so that a sampled token without a
// top-k costs the host B ids rather than B×V logits.
type TopPDecoder interface {
	Decoder
	// TopP feeds one token a sequence (ids [B]) and draws each sequence's
	// next token into next [B]: with probability ∝ exp((logit − max) /
	// temperature) among the nucleus, the shortest best-first run of tokens
	// (the lower id first among equal logits) whose probability reaches p,
	// less those of it less than minP times as likely as the best (0:
	// none), with uniforms[b] ∈ [0, 1) as sequence b's draw. Weights below
	// 2^-40 of the best count as 0. A row whose logits hold NaN gets -1.
	TopP(ids []int64, temperature, p, minP float64, uniforms []float64, next []int64) error
}

// QueueDecoder is a TopPDecoder that also queues steps ahead of the host:
// a queued step picks each sequence's next token where the logits are, and
// the step queued after it is fed those picks there, so that the device
// runs the next step while the host reads the last one's picks. Every
// queued step's picks come back through Picks, in order; a step queued
// with ids nil needs a step queued before it.
type QueueDecoder interface {
	TopPDecoder
	// QueueDepth is the most steps that may wait for their Picks.
	QueueDepth() int
	// QueueGreedy queues a step fed ids [B] (nil: the previous queued step's
	// picks) that picks as Greedy does, and returns without waiting.
	QueueGreedy(ids []int64) error
	// QueueTopP queues a step fed ids [B] (nil: the previous queued step's
	// picks) that draws as TopP does, and returns without waiting.
	QueueTopP(ids []int64, temperature, p, minP float64, uniforms []float64) error
	// Picks waits for the oldest queued step and writes its picks to next
	// [B]: -1 for a sequence whose logits held NaN.
	Picks(next []int64) error
}

// TopKQueueDecoder is a QueueDecoder that also queues steps that draw from
// each sequence's k best where the logits are (the CUDA engine,
// topk_draw_f32), so that a sampled token from the k best costs the host
// B ids and waits for no host draw. The draw is mambago's host rule
// (mambago.Sampling), computed in the same float64 operations: the same
// uniform gives the same token as the host's draw from the same logits.
type TopKQueueDecoder interface {
	QueueDecoder
	// TopKQueueMax is the largest k that QueueTopK takes.
	TopKQueueMax() int
	// QueueTopK queues a step fed ids [B] (nil: the previous queued step's
	// picks) that draws each sequence's next token from its k best (1 ≤ k
	// ≤ TopKQueueMax) with probability ∝ exp((logit − best) / temperature)
	// among the shortest best-first run of them whose probability reaches
	// p, less those of that run less than minP times as likely as the best
	// (0: none), uniforms[b] ∈ [0, 1) as sequence b's draw, and returns
	// without waiting. A row whose logits hold NaN gets -1.
	QueueTopK(ids []int64, k int, temperature, p, minP float64, uniforms []float64) error
}

// ProcessingDecoder is a TopKQueueDecoder that also changes the logits of
// its queued steps before their pick or draw, as transformers' logits
// processors do (Processing).
type ProcessingDecoder interface {
	TopKQueueDecoder
	// Process makes each step queued after it process its logits as p
	// says before its pick or draw, and so each TopK step after it (where
	// the decoder is a TopKDecoder) before its ranking, the first such step
	// being p's step 0.
	Process(p Processing) error
}

// SequenceBias is one of transformers' sequence_bias entries: Bias is added
// to the logit of the last of Tokens wherever a row's tokens end with the
// others (always, for one token).
type SequenceBias struct {
	Tokens []int64
	Bias   float32 // finite; -Inf bans the sequence (bad words)
}

// Processing is what a ProcessingDecoder's queued steps do to each row's
// logits, in transformers' order: the sequence biases, the repetition
// penalty, the n-gram ban, the eos ban, the forced ids, the length decay,
// the suppressed ids. A row's tokens are its tokens before step 0 (Seen,
// Tails, History) and then the id each step is fed, which joins them
// before the step's processing.
// Steps count from 0; every arithmetic step rounds to float32 as the
// host's does. Ids are in [0, V).
type Processing struct {
	// Penalty scales the logit of each token a row holds, divided by it
	// where ≥ 0 and multiplied where below (1: none). Seen [B] are each
	// row's ids before step 0 (needed where Penalty is not 1).
	Penalty float32
	Seen    [][]int32
	// Biases add to the logit of the last of their Tokens wherever a
	// row's tokens end with the others. A token's biases are summed in
	// float32 before they are added, the one-token ones first, each kind
	// in its order (transformers' sum). Tails [B] are each row's tokens
	// before step 0: its last ones, as many as the longest bias less one,
	// are enough (needed where a bias has more than one token).
	Biases []SequenceBias
	Tails  [][]int64
	// NGram n > 0 sets -Inf the logit of each token that would close an
	// n-gram (n tokens in a row) that the row's tokens already hold.
	// History [B] are each row's tokens before step 0, all of them, and
	// Steps the most steps that may follow (the room kept for their ids).
	NGram   int
	History [][]int64
	Steps   int
	// EOS are the ids that end a row: -Inf in steps [0, BanEOS), and
	// raised by Decay.
	EOS    []int64
	BanEOS int
	// At step ForcedAt (< 0: none) every logit is -Inf but those of
	// Forced, which are 0.
	Forced   []int64
	ForcedAt int
	// Decay[j], where not 0, makes each finite eos logit s of step j
	// s + |s|·Decay[j], id after id.
	Decay []float32
	// Suppress ids are -Inf at every step, BeginSuppress ids at step
	// BeginAt (< 0: none).
	Suppress      []int64
	BeginSuppress []int64
	BeginAt       int
}

// InputError reports bad input from the caller: the Python package raises it
// as ValueError.
type InputError struct{ Msg string }

// Error returns the message.
func (e *InputError) Error() string { return e.Msg }

// Invalid returns an *InputError with a formatted message.
func Invalid(format string, args ...any) error {
	return &InputError{Msg: fmt.Sprintf(format, args...)}
}

// IsInvalid reports whether err is, or wraps, an *InputError.
func IsInvalid(err error) bool {
	var ie *InputError
	return errors.As(err, &ie)
}

// CheckInput validates in against cfg and the state's batch size.
func CheckInput(cfg checkpoint.Config, in Input, batch int) error {
	if in.B < 1 || in.T < 1 {
		return Invalid("input shape (B=%d, T=%d): both must be at least 1", in.B, in.T)
	}
	if in.B != batch {
		return Invalid("state holds %d sequences, input has batch size %d", batch, in.B)
	}
	set := 0
	for _, ok := range []bool{in.IDs != nil, in.Embeds != nil, in.Features != nil} {
		if ok {
			set++
		}
	}
	if set != 1 {
		return Invalid("give exactly one of input_ids, inputs_embeds or features (%d given)", set)
	}
	if err := CheckPad(in); err != nil {
		return err
	}
	switch {
	case in.IDs != nil:
		if len(in.IDs) != in.B*in.T {
			return Invalid("input_ids has %d values, want B*T = %d", len(in.IDs), in.B*in.T)
		}
		return CheckIDs("input_ids", in.IDs, cfg.Vocab)
	case in.Embeds != nil:
		if len(in.Embeds) != in.B*in.T*cfg.Hidden {
			return Invalid("inputs_embeds has %d values, want B*T*d = %d", len(in.Embeds), in.B*in.T*cfg.Hidden)
		}
		return CheckFinite("inputs_embeds", in.Embeds)
	default:
		if cfg.InputDim == 0 {
			return Invalid("features given, but the checkpoint has no input_proj.weight")
		}
		if len(in.Features) != in.B*in.T*cfg.InputDim {
			return Invalid("features has %d values, want B*T*F = %d (F = %d)", len(in.Features), in.B*in.T*cfg.InputDim, cfg.InputDim)
		}
		return CheckFinite("features", in.Features)
	}
}

// CheckPad reports an in.Pad of the wrong length, or one that leaves a row
// without tokens.
func CheckPad(in Input) error {
	if in.Pad == nil {
		return nil
	}
	if len(in.Pad) != in.B {
		return Invalid("padding given for %d rows, want B = %d", len(in.Pad), in.B)
	}
	for b, p := range in.Pad {
		if p < 0 || p >= in.T {
			return Invalid("row %d opens with %d positions of padding: want 0 to %d, so that a token is left", b, p, in.T-1)
		}
	}
	return nil
}

// CheckPrefill validates a prefill: in against cfg and the state's batch
// size, and out's length against what pool writes.
func CheckPrefill(cfg checkpoint.Config, in Input, batch int, pool Pool, out []float32) error {
	if err := CheckInput(cfg, in, batch); err != nil {
		return err
	}
	if want := pool.OutLen(in.B, in.T, cfg.Hidden); len(out) != want {
		return Invalid("output buffer has %d values, want %d", len(out), want)
	}
	return nil
}

// CheckPrefillLayers validates a PrefillLayers call: CheckPrefill with
// every position's output, and layers [L, B, T, d].
func CheckPrefillLayers(cfg checkpoint.Config, in Input, batch int, out, layers []float32) error {
	if err := CheckPrefill(cfg, in, batch, All, out); err != nil {
		return err
	}
	if want := cfg.Layers * in.B * in.T * cfg.Hidden; len(layers) != want {
		return Invalid("layers buffer has %d values, want L*B*T*d = %d", len(layers), want)
	}
	return nil
}

// CheckIDs reports the first token id outside [0, vocab).
func CheckIDs(name string, ids []int64, vocab int) error {
	for i, id := range ids {
		if id < 0 || id >= int64(vocab) {
			return Invalid("%s[%d] = %d is outside the vocabulary [0, %d)", name, i, id, vocab)
		}
	}
	return nil
}

// CheckFinite reports the first NaN or infinity in v.
func CheckFinite(name string, v []float32) error {
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return Invalid("%s holds a non-finite value (%v) at flat index %d", name, x, i)
		}
	}
	return nil
}

// CheckLogits validates a Logits call: hidden [batch, d], logits [batch, V].
func CheckLogits(cfg checkpoint.Config, hidden []float32, batch int, logits []float32) error {
	d, V := cfg.Hidden, cfg.Vocab
	if batch < 1 || len(hidden) != batch*d {
		return Invalid("hidden has %d values, want B*d = %d·%d", len(hidden), batch, d)
	}
	if len(logits) != batch*V {
		return Invalid("logits buffer has %d values, want B*V = %d", len(logits), batch*V)
	}
	return CheckFinite("hidden", hidden)
}

// CheckLayer reports a layer index outside the model.
func CheckLayer(cfg checkpoint.Config, layer int) error {
	if layer < 0 || layer >= cfg.Layers {
		return Invalid("layer %d is outside [0, %d)", layer, cfg.Layers)
	}
	return nil
}
