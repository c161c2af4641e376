package mambago_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mambago/mambago/mambago"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

func openBase(t testing.TB) *mambago.Model {
	m, err := mambago.Open(filepath.Join(fixture.Root(), "base"), mambago.Options{Device: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGreedyMatchesArgmaxOfSteps rebuilds greedy generation by hand.
func TestGreedyMatchesArgmaxOfSteps(t *testing.T) {
	m := openBase(t)
	V := m.Config().Vocab
	ids := []int64{5, 17, 33, 2, 9, 41, 7, 8}
	got, n, err := m.Generate(ids, 2, 4, 6, mambago.Sampling{TopP: 1, EOS: -1})
	if err != nil || n != 6 {
		t.Fatalf("Generate: n=%d err=%v", n, err)
	}
	st, _ := m.NewState(2)
	h := make([]float32, 2*m.Config().Hidden)
	if err := m.Prefill(st, engine.Input{B: 2, T: 4, IDs: ids}, engine.Last, h); err != nil {
		t.Fatal(err)
	}
	logits := make([]float32, 2*V)
	m.Logits(h, 2, logits)
	for i := 0; i < 6; i++ {
		next := []int64{fixture.Argmax(logits[:V]), fixture.Argmax(logits[V:])}
		if got[i] != next[0] || got[6+i] != next[1] {
			t.Fatalf("token %d: generate gave %d,%d; argmax gives %v", i, got[i], got[6+i], next)
		}
		m.Step(st, next, logits)
	}
}

// TestRepetitionPenaltyMatchesHostLoop checks greedy generation under a
// repetition penalty above and below 1 against hostLoop's own: each row's
// prompt and tokens so far have their logits scaled before the argmax.
// A sampled generation under the penalty is seeded as any other.
func TestRepetitionPenaltyMatchesHostLoop(t *testing.T) {
	m := openBase(t)
	const B, T, n = 3, 5, 12
	ids := randomIDs(m, B*T)
	for _, by := range []float64{1.3, 0.6} {
		got, gotN, err := m.Generate(ids, B, T, n, mambago.Sampling{TopP: 1, EOS: -1, RepetitionPenalty: by})
		if err != nil || gotN != n {
			t.Fatalf("penalty %v: n=%d err=%v", by, gotN, err)
		}
		if want := hostLoop(t, m, ids, B, T, n, float32(by)); !slices.Equal(got, want) {
			t.Errorf("penalty %v: %v, want %v", by, got, want)
		}
		// Row 0 alone, then left-padded with its own first token: the
		// padding is not the row's, so the tokens are the same.
		pen := mambago.Sampling{TopP: 1, EOS: -1, RepetitionPenalty: by}
		alone, _, err := m.Generate(ids[:T], 1, T, n, pen)
		if err != nil {
			t.Fatal(err)
		}
		padded := append([]int64{alone[0], alone[0]}, ids[:T]...)
		padded = append(padded, ids[T:T+T+2]...)
		got, _, err = m.GenerateSpans(context.Background(), padded, 2, T+2, []mambago.Span{{Start: 2, Len: T}, {Len: T + 2}}, n, pen)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got[:n], alone) {
			t.Errorf("penalty %v: left-padded %v, alone %v", by, got[:n], alone)
		}
		s := mambago.Sampling{Temperature: 0.8, TopK: 30, TopP: 0.95, Seed: 5, EOS: -1, RepetitionPenalty: by}
		a, _, errA := m.Generate(ids, B, T, n, s)
		b, _, errB := m.Generate(ids, B, T, n, s)
		if err := errors.Join(errA, errB); err != nil || !slices.Equal(a, b) {
			t.Errorf("penalty %v, sampled twice with one seed: %v and %v (err %v)", by, a, b, err)
		}
	}
}

// TestMinNewTokens checks that MinNew keeps rows from ending early: with
// EOS set to row 0's first greedy token, a MinNew of 3 makes that row take
// its second-best token first (EOS is -Inf for the first three tokens),
// and no row emits EOS before its fourth token.
func TestMinNewTokens(t *testing.T) {
	m := openBase(t)
	const B, T, n = 2, 4, 8
	V := m.Config().Vocab
	ids := randomIDs(m, B*T)
	free, _, err := m.Generate(ids, B, T, n, mambago.Sampling{TopP: 1, EOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := m.NewState(B)
	h, logits := make([]float32, B*m.Config().Hidden), make([]float32, B*V)
	if err := m.Prefill(st, engine.Input{B: B, T: T, IDs: ids}, engine.Last, h); err != nil {
		t.Fatal(err)
	}
	if err := m.Logits(h, B, logits); err != nil {
		t.Fatal(err)
	}
	eos := free[0]
	logits[eos] = float32(math.Inf(-1))
	second := fixture.Argmax(logits[:V])
	got, gotN, err := m.Generate(ids, B, T, n, mambago.Sampling{TopP: 1, EOS: eos, MinNew: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != second {
		t.Errorf("row 0's first token %d, want %d, the best after EOS %d", got[0], second, eos)
	}
	for b := range B {
		if row := got[b*gotN : b*gotN+min(3, gotN)]; slices.Contains(row, eos) {
			t.Errorf("row %d: EOS %d among its first three tokens %v", b, eos, row)
		}
	}
	if stopped, _, _ := m.Generate(ids, B, T, n, mambago.Sampling{TopP: 1, EOS: eos}); stopped[0] != eos {
		t.Errorf("without MinNew row 0 starts %d, want EOS %d", stopped[0], eos)
	}
	for _, bad := range []mambago.Sampling{{TopP: 1, EOS: -1, MinNew: -1}, {TopP: 1, EOS: int64(V)},
		{TopP: 1, EOS: 1, MoreEOS: []int64{int64(V) + 3}}} {
		if _, _, err := m.Generate(ids, B, T, n, bad); !engine.IsInvalid(err) {
			t.Errorf("%+v: err = %v, want an input error", bad, err)
		}
	}
}

// TestNoRepeatNGram checks that no n-gram a row closes with a new token
// has appeared in the row before (its prompt, left padding left out, and
// its tokens so far), greedy and sampled, for n = 1 (no token twice), 2
// and 3, and that the ban changes greedy's tokens where they repeat.
func TestNoRepeatNGram(t *testing.T) {
	m := openBase(t)
	const B, T, n = 2, 6, 24
	ids := randomIDs(m, B*T)
	spans := []mambago.Span{{Start: 2, Len: T - 2}, {Len: T}} // row 0's first two are padding
	free, _, err := m.GenerateSpans(context.Background(), ids, B, T, spans, n, mambago.Sampling{TopP: 1, EOS: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{1, 2, 3} {
		for _, s := range []mambago.Sampling{{TopP: 1, EOS: -1}, {Temperature: 1.2, TopK: 40, TopP: 0.95, Seed: 3, EOS: -1}} {
			s.NoRepeatNGram = size
			got, _, err := m.GenerateSpans(context.Background(), ids, B, T, spans, n, s)
			if err != nil {
				t.Fatal(err)
			}
			for b := range B {
				row := append(slices.Clone(ids[b*T+spans[b].Start:b*T+spans[b].Start+spans[b].Len]), got[b*n:(b+1)*n]...)
				seen := map[string]bool{}
				for end := size; end <= len(row); end++ {
					gram := fmt.Sprint(row[end-size : end])
					if seen[gram] && end > spans[b].Len {
						t.Errorf("n=%d, %+v, row %d: token %d closes %s again: %v", size, s, b, end-1-spans[b].Len, gram, row)
					}
					seen[gram] = true
				}
			}
			if s.Temperature == 0 && size == 1 && slices.Equal(got, free) && hasRepeat(free, n) {
				t.Errorf("n=1: greedy's tokens %v unchanged, though they repeat", free)
			}
		}
	}
	if _, _, err := m.Generate(ids, B, T, 4, mambago.Sampling{TopP: 1, EOS: -1, NoRepeatNGram: -1}); !engine.IsInvalid(err) {
		t.Errorf("NoRepeatNGram -1: err = %v, want an input error", err)
	}
}

// randomIDs returns n token ids of m's vocabulary, drawn afresh.
func randomIDs(m *mambago.Model, n int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = rand.Int64N(int64(m.Config().Vocab))
	}
	return ids
}

// hasRepeat reports whether a row of tokens [B, n] holds a token twice.
func hasRepeat(tokens []int64, n int) bool {
	for r := 0; r < len(tokens); r += n {
		row := slices.Clone(tokens[r : r+n])
		slices.Sort(row)
		if len(slices.Compact(row)) < n {
			return true
		}
	}
	return false
}

func TestSamplingIsSeededAndStops(t *testing.T) {
	m := openBase(t)
	ids := []int64{1, 2, 3, 4, 5, 6}
	s := mambago.Sampling{Temperature: 0.9, TopK: 20, TopP: 0.9, Seed: 7, EOS: -1}
	a, _, _ := m.Generate(ids, 3, 2, 12, s)
	b, _, _ := m.Generate(ids, 3, 2, 12, s)
	if !slices.Equal(a, b) {
		t.Fatalf("same seed, different tokens: %v vs %v", a, b)
	}
	s.Seed = 8
	c, _, _ := m.Generate(ids, 3, 2, 12, s)
	if slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave the same 36 tokens")
	}
	// Stop token: make the first greedy token the EOS; every row then stops at once.
	g, _, _ := m.Generate(ids[:2], 1, 2, 5, mambago.Sampling{TopP: 1, EOS: -1})
	out, n, err := m.Generate(ids[:2], 1, 2, 5, mambago.Sampling{TopP: 1, EOS: g[0]})
	if err != nil || n != 1 || out[0] != g[0] {
		t.Errorf("EOS %d: got %v (n=%d, err=%v)", g[0], out, n, err)
	}
	// A further eos id stops a row as EOS does, and the row is padded with
	// EOS: prompts whose rows 0 and 1 start differently, and row 2 with
	// neither, take row 0's first token as EOS and row 1's as a further id.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	found := false
	for try := 0; try < 50 && !found; try++ {
		prompts := make([]int64, 3*3)
		for i := range prompts {
			prompts[i] = rng.Int64N(int64(m.Config().Vocab))
		}
		free, _, _ := m.Generate(prompts, 3, 3, 4, mambago.Sampling{TopP: 1, EOS: -1})
		eos, more := free[0], free[4]
		if eos == more || free[8] == eos || free[8] == more {
			continue
		}
		found = true
		out, n, err := m.Generate(prompts, 3, 3, 4, mambago.Sampling{TopP: 1, EOS: eos, MoreEOS: []int64{more}})
		if err != nil || n < 2 {
			t.Fatalf("eos %d, more %d: n=%d err=%v (row 2, %v, goes on)", eos, more, n, err, free[8:])
		}
		for b, first := range []int64{eos, more} {
			if want := append([]int64{first}, slices.Repeat([]int64{eos}, n-1)...); !slices.Equal(out[b*n:b*n+n], want) {
				t.Errorf("row %d: %v, want %v (eos %d, more %d)", b, out[b*n:b*n+n], want, eos, more)
			}
		}
		want := slices.Clone(free[8 : 8+n]) // row 2's free run, up to its own eos or further id
		for i := 1; i < n; i++ {
			if want[i-1] == eos || want[i-1] == more || want[i-1] == -1 {
				want[i] = -1
			}
		}
		for i := range want {
			if want[i] == -1 {
				want[i] = eos
			}
		}
		if !slices.Equal(out[2*n:3*n], want) {
			t.Errorf("row 2: %v, want %v (its free run %v; eos %d, more %d)", out[2*n:3*n], want, free[8:12], eos, more)
		}
	}
	if !found {
		t.Fatal("no prompts in 50 tries whose rows start as the check needs")
	}
	for _, bad := range []mambago.Sampling{{Temperature: -1, TopP: 1}, {Temperature: math.Inf(1), TopP: 1},
		{Temperature: math.NaN(), TopP: 1}, {TopP: 0}, {TopP: 1.5}, {TopK: -2, TopP: 1},
		{TopP: 1, EOS: -1, MoreEOS: []int64{3}}, {TopP: 1, EOS: 2, MoreEOS: []int64{-3}},
		{TopP: 1, RepetitionPenalty: -1.2}, {TopP: 1, RepetitionPenalty: math.NaN()},
		{TopP: 1, RepetitionPenalty: math.Inf(1)}} {
		if _, _, err := m.Generate(ids, 3, 2, 4, bad); !engine.IsInvalid(err) {
			t.Errorf("sampling %+v: err = %v, want an input error", bad, err)
		}
	}
}

// stopAfter is a context that is done from its Err's (n+1)th call on:
// a stop that comes while a generation runs, between two of its tokens.
type stopAfter struct {
	context.Context
	n int
}

var errStopped = errors.New("stopped by the test")

// Done is a channel never closed but not nil: a context that can be done.
func (c *stopAfter) Done() <-chan struct{} { return make(chan struct{}) }

func (c *stopAfter) Err() error {
	if c.n--; c.n < 0 {
		return errStopped
	}
	return nil
}

// TestGenerateStops checks that a generation whose context is done ends
// before its next token with an error wrapping the context's cause, at its
// first token or partway, and that the model's next generation, on the
// state the stopped one left idle, gives what an untouched model gives.
func TestGenerateStops(t *testing.T) {
	m := openBase(t)
	defer m.Close()
	ids := []int64{5, 17, 33, 2, 9, 41}
	s := mambago.Sampling{Temperature: 0.8, TopK: 30, TopP: 0.95, Seed: 3, EOS: -1}
	ref := openBase(t)
	defer ref.Close()
	want, _, err := ref.Generate(ids, 2, 3, 40, s)
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancelCause(context.Background())
	cancel(errStopped)
	for _, ctx := range []context.Context{done, &stopAfter{context.Background(), 0}, &stopAfter{context.Background(), 17}} {
		toks, n, err := m.GenerateSpans(ctx, ids, 2, 3, nil, 40, s)
		if !errors.Is(err, errStopped) || toks != nil || n != 0 {
			t.Fatalf("a stopped generation returned %d tokens, err = %v; want none and an error wrapping the cause", n, err)
		}
		got, _, err := m.Generate(ids, 2, 3, 40, s)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("after a stopped generation: %v (err %v), want %v", got, err, want)
		}
	}
}

func TestOpenRejectsDevicesAndDTypes(t *testing.T) {
	dir := filepath.Join(fixture.Root(), "base")
	bad := []mambago.Options{{Device: "tpu"}, {Device: "cpu", DType: "int8"}, {DType: "int8"},
		{Device: "cuda:x"}, {Device: "cuda:-1"}, {Device: "gpu:"}, {Device: "cuda:99"}}
	if mambago.GPUUsable() != nil {
		bad = append(bad, mambago.Options{Device: "cuda"}, mambago.Options{Device: "cuda", DType: "bfloat16"})
	}
	for _, o := range bad {
		if _, err := mambago.Open(dir, o); !engine.IsInvalid(err) {
			t.Errorf("Open(%+v): err = %v, want an input error", o, err)
		}
	}
}

// Example prefills a prompt into a carried state and generates four tokens
// greedily: the calls of the README's Go snippet.
func Example() {
	m, err := mambago.Open(filepath.Join(fixture.Root(), "base"), mambago.Options{Device: "cpu"})
	if err != nil {
		panic(err)
	}
	ids := []int64{5, 17, 33, 2}
	st, _ := m.NewState(1)
	hidden := make([]float32, m.Config().Hidden)
	err = m.Prefill(st, engine.Input{B: 1, T: len(ids), IDs: ids}, engine.Last, hidden)
	fmt.Println(len(hidden), err)
	tokens, n, err := m.Generate(ids, 1, len(ids), 4, mambago.Sampling{TopP: 1, EOS: -1})
	fmt.Println(n, len(tokens), err)
	// Output:
	// 64 <nil>
	// 4 4 <nil>
}

// countedStates is an engine that counts the states it makes.
type countedStates struct {
	engine.Engine
	made *int
}

func (e countedStates) NewState(batch int) (engine.State, error) {
	*e.made++
	return e.Engine.NewState(batch)
}

// TestGenerateKeepsItsState checks that Generate keeps its last state for a
// next call of the same batch size, zeroed before it is used again (the
// same tokens as a model that never ran), replaces it for another size,
// and that Close lets it go.
func TestGenerateKeepsItsState(t *testing.T) {
	plain := openBase(t)
	made := 0
	m := &mambago.Model{Engine: countedStates{Engine: plain.Engine, made: &made}}
	V := plain.Config().Vocab
	s := mambago.Sampling{TopP: 1, EOS: -1}
	var kept []any // the idle state after each call
	for call, c := range []struct{ B, made int }{{2, 1}, {2, 1}, {2, 1}, {3, 2}, {2, 3}} {
		ids := make([]int64, c.B*5)
		for i := range ids {
			ids[i] = rand.Int64N(int64(V))
		}
		got, _, err := m.Generate(ids, c.B, 5, 6, s)
		if err != nil {
			t.Fatal(err)
		}
		want, _, err := (&mambago.Model{Engine: plain.Engine}).Generate(ids, c.B, 5, 6, s)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("call %d (B=%d): %v, a fresh model's %v", call, c.B, got, want)
		}
		if made != c.made {
			t.Errorf("call %d (B=%d): %d states made, want %d", call, c.B, made, c.made)
		}
		kept = append(kept, mambago.IdleState(m))
	}
	if kept[0] == nil || kept[1] != kept[0] || kept[2] != kept[0] || kept[3] == kept[0] || kept[4] == kept[3] {
		t.Errorf("the idle state after each call: %p", kept)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if st := mambago.IdleState(m); st != nil {
		t.Errorf("after Close the model keeps %p", st)
	}
}

// TestPrefillContextStops checks that a CPU prefill whose context is done
// stops with an error wrapping the cause, before its first layer or
// partway (in its second chunk of rows, or in a padded batch's second
// length), and leaves the state as it was, or zero where it was to start
// fresh; and that the state then continues as an untouched copy does.
func TestPrefillContextStops(t *testing.T) {
	m := openBase(t)
	defer m.Close()
	cfg := m.Config()
	const B, T = 3, 3000 // 9000 rows: chunks of 1365 positions, 2 layers each
	ids := make([]int64, B*T)
	for i := range ids {
		ids[i] = rand.Int64N(int64(cfg.Vocab))
	}
	in := engine.Input{B: B, T: T, IDs: ids}
	padded := []mambago.Span{{Start: 0, Len: T}, {Start: 500, Len: T - 500}, {Start: 0, Len: 40}}
	for _, c := range []struct {
		name  string
		spans []mambago.Span
		fresh bool
		after int // checks of the context that pass before it is done
	}{
		{"at once", nil, false, 0}, {"second chunk", nil, false, 3}, {"fresh", nil, true, 3},
		{"padded, second length", padded, false, 3}, {"padded, fresh", padded, true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := newState(t, m, B)
			if err := m.Prefill(st, engine.Input{B: B, T: 7, IDs: ids[:B*7]}, engine.Last, make([]float32, B*cfg.Hidden)); err != nil {
				t.Fatal(err)
			}
			saved, err := m.CloneState(st)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]float32, B*cfg.Hidden)
			err = m.PrefillContext(&stopAfter{context.Background(), c.after}, st, in, c.spans, c.fresh, engine.Last, out)
			if !errors.Is(err, errStopped) {
				t.Fatalf("err = %v, want one wrapping the context's cause", err)
			}
			want := saved
			if c.fresh {
				want = newState(t, m, B)
			}
			next := ids[:B]
			if got, w := step(t, m, st, next), step(t, m, want, next); !slices.Equal(got, w) {
				t.Fatal("after the stopped prefill the state steps otherwise than it did before it")
			}
		})
	}
}
