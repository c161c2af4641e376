package mambago

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/mambago/mambago/kernels"
)

// reference is the sampling rule written plainly: every token ranked by a
// stable sort, softmax at the temperature over the TopK best, then the
// shortest best-first run reaching TopP, then of those the ones at least
// MinP times as likely as the best. It returns each token's exact
// probability of being drawn.
func reference(logits []float32, s Sampling) []float64 {
	ids := make([]int, len(logits))
	for i := range ids {
		ids[i] = i
	}
	sort.SliceStable(ids, func(a, b int) bool { return logits[ids[a]] > logits[ids[b]] })
	if s.TopK > 0 && s.TopK < len(ids) {
		ids = ids[:s.TopK]
	}
	top := float64(logits[ids[0]])
	w := make([]float64, len(ids))
	var total float64
	for n, i := range ids {
		w[n] = math.Exp((float64(logits[i]) - top) / s.Temperature)
		total += w[n]
	}
	keep, cum := len(ids), 0.0
	for n := range w {
		cum += w[n]
		if cum >= s.TopP*total {
			keep = n + 1
			break
		}
	}
	for keep > 1 && w[keep-1] < s.MinP*w[0] {
		cum -= w[keep-1]
		keep--
	}
	p := make([]float64, len(logits))
	for n := range keep {
		p[ids[n]] = w[n] / cum
	}
	return p
}

// row returns V logits drawn from N(0, scale²), with some values repeated
// so that ties are ranked too.
func row(rng *rand.Rand, V int, scale float64) []float32 {
	v := make([]float32, V)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	for range V / 8 {
		v[rng.IntN(V)] = v[rng.IntN(V)]
	}
	return v
}

// TestSamplerMatchesTheRule draws many tokens from small rows under each
// kind of setting and compares each token's frequency with its exact
// probability under the reference rule, within 5 standard deviations; a
// token outside the candidates must never be drawn.
func TestSamplerMatchesTheRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())) // fresh rows every run
	settings := []Sampling{
		{Temperature: 0.7, TopP: 1},
		{Temperature: 1.3, TopK: 4, TopP: 1},
		{Temperature: 0.9, TopP: 0.8},
		{Temperature: 1, TopK: 6, TopP: 0.7},
		{Temperature: 2, TopK: 3, TopP: 0.5},
		{Temperature: 0.5, TopK: 12, TopP: 0.95}, // TopK past V: every token
		{Temperature: 0.8, TopP: 1, MinP: 0.2},
		{Temperature: 1.2, TopK: 7, TopP: 1, MinP: 0.3},
		{Temperature: 1, TopP: 0.95, MinP: 0.5},
		{Temperature: 1.5, TopK: 8, TopP: 0.8, MinP: 0.1},
	}
	const draws = 200_000
	for n, s := range settings {
		logits := row(rng, 10, 1.5)
		if n%2 == 0 { // 40 tokens on 6 values: many share the nucleus's last bin, ranked by id
			logits = make([]float32, 40)
			for i := range logits {
				logits[i] = 0.3 * float32(rng.IntN(6))
			}
		}
		t.Run(fmt.Sprintf("V=%d,T=%v,k=%d,p=%v,minp=%v", len(logits), s.Temperature, s.TopK, s.TopP, s.MinP), func(t *testing.T) {
			want := reference(logits, s)
			s.Seed = rng.Uint64()
			sp := newSampler(s, 0)
			count := make([]int, len(logits))
			for range draws {
				id, err := sp.next(logits)
				if err != nil {
					t.Fatal(err)
				}
				count[id]++
			}
			for i, p := range want {
				got := float64(count[i]) / draws
				if sd := math.Sqrt(p * (1 - p) / draws); math.Abs(got-p) > 5*sd+1e-12 {
					t.Errorf("token %d (logit %v): drawn %.5f of the time, want %.5f (logits %v)", i, logits[i], got, p, logits)
				}
			}
		})
	}
}

// TestSamplerLargeNucleus covers a nucleus past the first ranking's 64
// tokens, on rows the size of a real vocabulary: every draw must fall inside
// the reference's nucleus, and the reference's ten most likely tokens must
// be drawn as often as their probability says.
func TestSamplerLargeNucleus(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for _, c := range []struct {
		V     int
		scale float64
		s     Sampling
	}{
		{50280, 3, Sampling{Temperature: 0.8, TopP: 0.9}},
		{50280, 3, Sampling{Temperature: 1.5, TopP: 0.6}},  // thousands of tokens in the nucleus
		{5000, 0.3, Sampling{Temperature: 1, TopP: 0.95}},  // most of the row
		{50280, 0.1, Sampling{Temperature: 1, TopP: 0.95}}, // flat, as an untrained model's
		{50280, 3, Sampling{Temperature: 1, TopK: 50, TopP: 0.95}},
	} {
		logits := row(rng, c.V, c.scale)
		want := reference(logits, c.s)
		inside := 0
		var head float64 // the ten most likely tokens' probability
		order := make([]int, c.V)
		for i := range order {
			order[i] = i
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(want[b], want[a]) })
		for _, i := range order[:10] {
			head += want[i]
		}
		for _, p := range want {
			if p > 0 {
				inside++
			}
		}
		s := c.s
		s.Seed = rng.Uint64()
		sp := newSampler(s, 0)
		const draws = 5_000
		hits := 0
		for range draws {
			id, err := sp.next(logits)
			if err != nil {
				t.Fatal(err)
			}
			if want[id] == 0 {
				t.Fatalf("V=%d %+v: drew token %d, outside the nucleus of %d", c.V, s, id, inside)
			}
			if slices.Contains(order[:10], int(id)) {
				hits++
			}
		}
		got := float64(hits) / draws
		if sd := math.Sqrt(head * (1 - head) / draws); math.Abs(got-head) > 5*sd {
			t.Errorf("V=%d %+v: the ten most likely drawn %.4f of the time, want %.4f", c.V, s, got, head)
		}
		t.Logf("V=%d %+v: nucleus of %d tokens, top ten %.4f drawn %.4f", c.V, s, inside, head, got)
	}
}

// TestSamplerEdges: ties rank by id, TopK 1 and temperature 0 are greedy, an
// infinite logit takes all the mass (under the further warpers too, as do
// the best logits where the temperature takes them past float32's range),
// a -inf one none, and NaN is an error, not a token.
func TestSamplerEdges(t *testing.T) {
	draw := func(logits []float32, s Sampling, n int) map[int64]int {
		sp := newSampler(s, 0)
		seen := map[int64]int{}
		for range n {
			id, err := sp.next(logits)
			if err != nil {
				t.Fatalf("%v %+v: %v", logits, s, err)
			}
			seen[id]++
		}
		return seen
	}
	tied := []float32{2, 2, 2, 1}
	if got := draw(tied, Sampling{Temperature: 1, TopK: 2, TopP: 1}, 2000); len(got) != 2 || got[0] == 0 || got[1] == 0 {
		t.Errorf("top 2 of %v: drew %v, want tokens 0 and 1", tied, got)
	}
	if got := draw(tied, Sampling{TopP: 1}, 1); got[0] != 1 {
		t.Errorf("greedy over %v: drew %v, want token 0", tied, got)
	}
	logits := row(rand.New(rand.NewPCG(1, 2)), 1000, 2)
	best, _ := argmax(logits)
	if got := draw(logits, Sampling{Temperature: 3, TopK: 1, TopP: 1}, 50); got[int64(best)] != 50 {
		t.Errorf("TopK 1: drew %v, want token %d every time", got, best)
	}
	inf := []float32{0, float32(math.Inf(1)), 3, float32(math.Inf(1))}
	if got := draw(inf, Sampling{Temperature: 1, TopP: 0.9}, 20); got[1] != 20 {
		t.Errorf("%v: drew %v, want token 1", inf, got)
	}
	masked := row(rand.New(rand.NewPCG(3, 4)), 1000, 1)
	for i := range masked {
		if i%3 != 0 {
			masked[i] = float32(math.Inf(-1))
		}
	}
	for _, s := range []Sampling{{Temperature: 1, TopP: 1}, {Temperature: 2, TopP: 0.99}, {Temperature: 1, TopK: 400, TopP: 1}} {
		for id := range draw(masked, s, 3000) {
			if id%3 != 0 {
				t.Fatalf("%+v: drew token %d, whose logit is -inf", s, id)
			}
		}
	}
	// Under the further warpers too, whose probabilities an infinite logit
	// (or a huge one over a small temperature) would make NaN.
	huge := []float32{0, 3e38, 3, 1e30}
	none := []float32{float32(math.Inf(-1)), float32(math.Inf(-1))}
	cold := []float32{-1, 2, 4, 5, 4.5, -3}             // over a temperature of 1e-38: 4, 5 and 4.5 are +Inf (greedy's token is 3)
	frozen := []float32{float32(math.Inf(-1)), -2.3e38} // over 0.5 both are -Inf (greedy's token is 1)
	for _, w := range []Warpers{{TypicalP: 0.5}, {EpsilonCutoff: 0.1}, {EtaCutoff: 0.1}} {
		for _, k := range []int{0, 3} {
			s := Sampling{Temperature: 0.5, TopK: k, TopP: 0.9, Warpers: w}
			for _, c := range []struct {
				logits []float32
				want   int64
			}{{inf, 1}, {huge, 1}, {none, 0}, {frozen, 1}} {
				if got := draw(c.logits, s, 20); got[c.want] != 20 {
					t.Errorf("%v %+v: drew %v, want token %d", c.logits, s, got, c.want)
				}
			}
			cs := s
			cs.Temperature = 1e-38
			if got := draw(cold, cs, 20); got[3] != 20 {
				t.Errorf("%v %+v: drew %v, want token 3", cold, cs, got)
			}
			for id := range draw(masked, s, 500) {
				if id%3 != 0 {
					t.Fatalf("%+v: drew token %d, whose logit is -inf", s, id)
				}
			}
		}
	}
	for _, s := range []Sampling{{TopP: 1}, {Temperature: 1, TopP: 1}, {Temperature: 1, TopK: 2, TopP: 0.5}} {
		for _, nan := range [][]float32{{float32(math.NaN()), 1, 2}, {1, 2, float32(math.NaN())}} {
			if _, err := newSampler(s, 0).next(nan); !errors.Is(err, errNaN) {
				t.Errorf("%v %+v: err = %v, want errNaN", nan, s, err)
			}
		}
	}
}

// BenchmarkSampler draws from a row of a real vocabulary's size.
// "flat" is an untrained model's row, whose nucleus is most of it.
func BenchmarkSampler(b *testing.B) {
	logits := row(rand.New(rand.NewPCG(1, 2)), 50280, 3)
	flat := row(rand.New(rand.NewPCG(1, 2)), 50280, 0.1)
	b.Run("flat,T=1,p=0.95", func(b *testing.B) {
		sp := newSampler(Sampling{Temperature: 1, TopP: 0.95}, 0)
		for b.Loop() {
			if _, err := sp.next(flat); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, s := range []Sampling{
		{TopP: 1},
		{Temperature: 0.8, TopP: 1},
		{Temperature: 0.8, TopK: 50, TopP: 0.95},
		{Temperature: 0.8, TopP: 0.95},
	} {
		b.Run(fmt.Sprintf("T=%v,k=%d,p=%v", s.Temperature, s.TopK, s.TopP), func(b *testing.B) {
			sp := newSampler(s, 0)
			for b.Loop() {
				if _, err := sp.next(logits); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestExpNeg compares expNeg with math.Exp over the range weights take.
func TestExpNeg(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	worst := 0.0
	for n := range 1_000_000 {
		z := rng.Float64() * 700
		if n%2 == 0 {
			z = rng.Float64() * 2 // the weights near the best, where the mass is
		}
		want := math.Exp(-z)
		worst = max(worst, math.Abs(expNeg(z)-want)/want)
	}
	if worst > 1e-8 {
		t.Errorf("expNeg: worst relative error %.3g, want ≤ 1e-8", worst)
	}
	for _, c := range []struct{ z, want float64 }{{0, 1}, {708.5, 0}, {math.Inf(1), 0}} {
		if got := expNeg(c.z); got != c.want {
			t.Errorf("expNeg(%v) = %v, want %v", c.z, got, c.want)
		}
	}
}

// BenchmarkDrawRows times drawRows, as a sampled step of Generate runs it:
// B rows of 50280 logits (temperature 0.8, top-k 50), each row on its own
// sampler, after the rows were rewritten (as a step's copy rewrites them;
// "cold") or not ("warm").
func BenchmarkDrawRows(b *testing.B) {
	const V = 50280
	s := Sampling{Temperature: 0.8, TopK: 50, TopP: 1}
	for _, B := range []int{1, 8} {
		rng := rand.New(rand.NewPCG(1, uint64(B)))
		logits, fresh := make([]float32, 0, B*V), make([]float32, 0, B*V)
		for range B {
			logits = append(logits, row(rng, V, 3)...)
		}
		fresh = append(fresh, logits...)
		samplers := make([]*sampler, B)
		for r := range samplers {
			samplers[r] = newSampler(s, r)
		}
		done, next := make([]bool, B), make([]int64, B)
		for _, cold := range []bool{false, true} {
			b.Run(fmt.Sprintf("B=%d,cold=%v", B, cold), func(b *testing.B) {
				for b.Loop() {
					if cold {
						b.StopTimer()
						copy(logits, fresh)
						b.StartTimer()
					}
					if err := drawRows(samplers, logits, done, next); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkDrawCandidates times drawCandidates, as a sampled step of
// Generate runs it on a TopKDecoder's candidates: B rows of k (temperature
// 0.8), in no particular order.
func BenchmarkDrawCandidates(b *testing.B) {
	for _, k := range []int{50, 2000} {
		for _, B := range []int{1, 8} {
			rng := rand.New(rand.NewPCG(1, 2))
			ids, logits := make([]int32, B*k), make([]float32, B*k)
			for r := range B {
				for n, id := range rng.Perm(50280)[:k] {
					ids[r*k+n], logits[r*k+n] = int32(id), float32(rng.NormFloat64()*3)
				}
			}
			samplers := make([]*sampler, B)
			for r := range samplers {
				samplers[r] = newSampler(Sampling{Temperature: 0.8, TopK: k, TopP: 1}, r)
			}
			done, next := make([]bool, B), make([]int64, B)
			b.Run(fmt.Sprintf("k=%d,B=%d", k, B), func(b *testing.B) {
				for b.Loop() {
					if err := drawCandidates(samplers, ids, logits, done, next); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestDrawCandidatesRows checks drawCandidates on few and on many
// candidates a row (one goroutine, and one a row): each row not done
// draws its sampler's token for its own candidates, a done row's token is
// left as it was, and a row of NaN is an error that names it.
func TestDrawCandidatesRows(t *testing.T) {
	const B, V = 6, 50280
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for _, k := range []int{50, parallelCandidates, 2000} {
		s := Sampling{Temperature: 0.9, TopK: k, TopP: 0.95, Seed: rng.Uint64()}
		ids, logits := make([]int32, B*k), make([]float32, B*k)
		for b := range B {
			for n, id := range rng.Perm(V)[:k] {
				ids[b*k+n], logits[b*k+n] = int32(id), float32(rng.NormFloat64()*3)
			}
		}
		ids[4*k] = -1 // row 4 held NaN
		done := []bool{false, true, false, false, false, true}
		next := []int64{-7, -7, -7, -7, -7, -7}
		samplers := make([]*sampler, B)
		for b := range samplers {
			samplers[b] = newSampler(s, b)
		}
		err := drawCandidates(samplers, slices.Clone(ids), logits, done, next)
		if err == nil || !errors.Is(err, errNaN) || !strings.Contains(err.Error(), "sequence 4") {
			t.Fatalf("k=%d: err = %v, want sequence 4's errNaN", k, err)
		}
		for b := range B {
			want := int64(-7)
			if !done[b] && b != 4 {
				if want, err = newSampler(s, b).fromCandidates(slices.Clone(ids[b*k:(b+1)*k]), logits[b*k:(b+1)*k]); err != nil {
					t.Fatal(err)
				}
			}
			if b != 4 && next[b] != want {
				t.Errorf("k=%d row %d: token %d, want %d", k, b, next[b], want)
			}
		}
	}
}

// TestRankKey checks that rankKey's order is the sampler's ranking (the
// larger logit first, then the lower id; -0 equal to +0) and that
// unpackRankKey gives back the id and logit (-0 as +0), on logits with
// ties, signed zeros, subnormals and infinities.
func TestRankKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-45, -1e-45, float32(math.Inf(1)), float32(math.Inf(-1)),
		math.MaxFloat32, -math.MaxFloat32, 1, -1}
	type token struct {
		id    int32
		logit float32
	}
	tokens := make([]token, 2000)
	for i := range tokens {
		v := float32(rng.NormFloat64() * 4)
		if rng.IntN(3) == 0 {
			v = special[rng.IntN(len(special))]
		}
		tokens[i] = token{int32(rng.IntN(1 << 31)), v}
	}
	for i, a := range tokens {
		id, logit := unpackRankKey(rankKey(a.id, a.logit))
		if want := a.logit + 0; id != int(a.id) || math.Float32bits(logit) != math.Float32bits(want) {
			t.Fatalf("token %d (%v): unpacked %d (%v)", a.id, a.logit, id, logit)
		}
		b := tokens[(i+1)%len(tokens)]
		before := a.logit > b.logit || (a.logit == b.logit && a.id < b.id)
		if got := rankKey(a.id, a.logit) < rankKey(b.id, b.logit); got != before {
			t.Fatalf("(%d, %v) before (%d, %v): keys say %v, the ranking %v", a.id, a.logit, b.id, b.logit, got, before)
		}
	}
}

// TestFromCandidatesMatchesNext checks that drawing from a row's TopK best,
// handed over in any order as a TopKDecoder gives them, draws the same
// tokens as drawing from the whole row, draw for draw on one seed: on rows
// with ties at the k-th logit, signed zeros, -inf and +inf. A row marked as
// holding NaN (ids of -1) is errNaN.
func TestFromCandidatesMatchesNext(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	const V = 3000
	few := make([]float32, V) // a few values, many times each
	for i := range few {
		few[i] = float32(rng.IntN(4))
	}
	zeros := make([]float32, V)
	for i := range zeros {
		if rng.IntN(2) == 0 {
			zeros[i] = float32(math.Copysign(0, -1))
		}
	}
	inf := row(rng, V, 2)
	inf[rng.IntN(V)] = float32(math.Inf(1))
	neg := row(rng, V, 2)
	for i := range neg {
		if rng.IntN(2) == 0 {
			neg[i] = float32(math.Inf(-1))
		}
	}
	for _, logits := range [][]float32{row(rng, V, 3), few, zeros, inf, neg} {
		for _, s := range []Sampling{
			{Temperature: 0.8, TopK: 1, TopP: 1},
			{Temperature: 1.3, TopK: 5, TopP: 1, Seed: 3},
			{Temperature: 0.8, TopK: 50, TopP: 0.9, Seed: 4},
			{Temperature: 2, TopK: 2999, TopP: 0.5, Seed: 5},
		} {
			sameDraws(t, fmt.Sprintf("%+v", s), rng, s, logits, rankIDs(logits)[:s.TopK], 300)
		}
	}
	nan := []int32{-1, -1, -1}
	if _, err := newSampler(Sampling{Temperature: 1, TopK: 3, TopP: 1}, 0).fromCandidates(nan, make([]float32, 3)); !errors.Is(err, errNaN) {
		t.Errorf("candidates of a row with NaN: err = %v, want errNaN", err)
	}
}

// TestFromCandidatesWarped checks that under the further warpers a draw
// from a row's TopK best, handed over in any order, gives the whole row's
// draws (fromWarped), draw for draw on one seed, where no logit ties with
// a finite k-th (warper.warp keeps every token tied with it; the
// candidates are k). The warpers cut some of each row's TopK best, so the draws rest on
// them.
func TestFromCandidatesWarped(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	const V = 3000
	for _, s := range []Sampling{
		{Temperature: 0.8, TopK: 50, TopP: 1, Warpers: Warpers{TypicalP: 0.5}},
		{Temperature: 1.3, TopK: 200, TopP: 0.9, Warpers: Warpers{EpsilonCutoff: 2e-3}},
		{Temperature: 1, TopK: 40, TopP: 1, MinP: 0.02, Warpers: Warpers{EtaCutoff: 0.02}},
		{Temperature: 0.7, TopK: 2999, TopP: 0.95, Warpers: Warpers{TypicalP: 0.9, EpsilonCutoff: 1e-4, EtaCutoff: 1e-3}},
		{Temperature: 2, TopK: 7, TopP: 1, Warpers: Warpers{TypicalP: 0.2}},
	} {
		for _, shape := range []string{"normal", "+inf", "-inf"} {
			var logits []float32
			var ids []int
			for again := true; again; { // no tie at a finite k-th logit; the warpers cut some of the best
				logits = row(rng, V, 3)
				switch shape {
				case "+inf":
					logits[rng.IntN(V)] = float32(math.Inf(1))
				case "-inf":
					for i := range logits {
						if rng.IntN(2) == 0 {
							logits[i] = float32(math.Inf(-1))
						}
					}
				}
				ids = rankIDs(logits)
				kth, next := logits[ids[s.TopK-1]], logits[ids[s.TopK]]
				tie := kth == next || float32(float64(kth)/s.Temperature) == float32(float64(next)/s.Temperature)
				again = tie && !math.IsInf(float64(kth), -1) || shape != "+inf" && kept(s, logits) >= min(s.TopK, V/2)
			}
			sameDraws(t, fmt.Sprintf("%+v, %s row", s, shape), rng, s, logits, ids[:s.TopK], 200)
		}
	}
}

// sameDraws checks that draws from the candidates cand of logits, handed
// over in a fresh order each time, give the draws from the whole row, n
// draws on samplers for s of one seed.
func sameDraws(t *testing.T, what string, rng *rand.Rand, s Sampling, logits []float32, cand []int, n int) {
	t.Helper()
	whole, ranked := newSampler(s, 1), newSampler(s, 1)
	for range n {
		rng.Shuffle(len(cand), func(a, b int) { cand[a], cand[b] = cand[b], cand[a] })
		cids, cvals := make([]int32, len(cand)), make([]float32, len(cand))
		for i, id := range cand {
			cids[i], cvals[i] = int32(id), logits[id]
		}
		want, err1 := whole.next(logits)
		got, err2 := ranked.fromCandidates(cids, cvals)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got != want {
			t.Fatalf("%s: from the candidates %d, from the row %d", what, got, want)
		}
	}
}

// kept returns how many tokens of logits s's warpers keep.
func kept(s Sampling, logits []float32) int {
	z := slices.Clone(logits)
	newWarper(s, 1).warp(z)
	n := 0
	for _, v := range z {
		if !math.IsInf(float64(v), -1) {
			n++
		}
	}
	return n
}

// rankIDs returns the ids of logits best first, the lower id first among
// equal logits.
func rankIDs(logits []float32) []int {
	ids := make([]int, len(logits))
	for i := range ids {
		ids[i] = i
	}
	sort.SliceStable(ids, func(a, b int) bool { return logits[ids[a]] > logits[ids[b]] })
	return ids
}

// TestExpNegConstantsAreTheKernels checks that kernels/topk.cu's exp_neg,
// which must give expNeg's bits for the device's top-k draw to give the
// host's tokens, spells expNeg's constants by their bits.
func TestExpNegConstantsAreTheKernels(t *testing.T) {
	src, err := kernels.Source("topk.cu")
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]float64{"math.Log2E": math.Log2E, "ln2Hi": ln2Hi, "ln2Lo": ln2Lo} {
		want := fmt.Sprintf("__longlong_as_double(0x%016Xll);  // %s", math.Float64bits(v), name)
		if !strings.Contains(src, want) {
			t.Errorf("kernels/topk.cu's exp_neg does not hold %q", want)
		}
	}
}

// FuzzSampler draws from rows of any float32 bits under any sampling of
// a small table of settings: a row with NaN is errNaN; any other gives a
// token of the row, one of +Inf where the row has one, never a -Inf one
// where the row has a finite logit; from the row's TopK best too, handed
// over as a TopKDecoder gives them; and the warpers never panic, whatever
// tokens they must keep. `go test` runs the seeds; `go test -fuzz
// FuzzSampler` searches further.
func FuzzSampler(f *testing.F) {
	bits := func(v ...float32) []byte {
		var out []byte
		for _, x := range v {
			u := math.Float32bits(x)
			out = append(out, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
		}
		return out
	}
	inf, nan, negZero := float32(math.Inf(1)), float32(math.NaN()), float32(math.Copysign(0, -1))
	f.Add(bits(0, 3e38, 3, 1e30), uint8(1), uint8(0), uint8(0), uint8(0), uint8(1), uint8(0))          // typical over 3e38/0.5
	f.Add(bits(0, inf, 3, inf), uint8(2), uint8(3), uint8(1), uint8(0), uint8(0), uint8(2))            // +Inf under eta
	f.Add(bits(-inf, -inf, -inf), uint8(2), uint8(0), uint8(2), uint8(2), uint8(1), uint8(1))          // none has mass
	f.Add(bits(-1, 2, 4, 5, 5, -3), uint8(6), uint8(2), uint8(0), uint8(0), uint8(1), uint8(0))        // a temperature of 1e-38
	f.Add(bits(1, nan, 2), uint8(2), uint8(1), uint8(0), uint8(1), uint8(0), uint8(0))                 // NaN
	f.Add(bits(1e-45, -1e-45, 0, negZero), uint8(3), uint8(2), uint8(3), uint8(1), uint8(2), uint8(3)) // denormals and zeros
	temps := []float64{0, 0.5, 1, 2, 1e-30, 100, 1e-38, 3e-39}
	topPs := []float64{1, 0.9, 0.3, 1e-9}
	minPs := []float64{0, 0.1, 1}
	cuts := []float64{0, 0.5, 1e-3, 0.999}
	f.Fuzz(func(t *testing.T, raw []byte, temp, k, p, minP, typical, cut uint8) {
		V := len(raw) / 4
		if V == 0 || V > 4096 {
			return
		}
		logits := make([]float32, V)
		for i := range logits {
			logits[i] = math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
		}
		s := Sampling{Temperature: temps[int(temp)%len(temps)], TopK: int(k) % (V + 2), TopP: topPs[int(p)%len(topPs)],
			MinP: minPs[int(minP)%len(minPs)]}
		switch c := cuts[int(cut)%len(cuts)]; typical % 4 {
		case 1:
			s.TypicalP = max(c, 1e-6)
		case 2:
			s.EpsilonCutoff = c
		case 3:
			s.EtaCutoff = c
		}
		if s.Check() != nil {
			return
		}
		hasNaN := slices.ContainsFunc(logits, func(v float32) bool { return v != v })
		check := func(how string, id int64, err error) {
			t.Helper()
			switch {
			case hasNaN:
				if !errors.Is(err, errNaN) {
					t.Fatalf("%s %v %+v: err = %v, want errNaN", how, logits, s, err)
				}
			case err != nil:
				t.Fatalf("%s %v %+v: %v", how, logits, s, err)
			case id < 0 || id >= int64(V):
				t.Fatalf("%s %v %+v: token %d of %d", how, logits, s, id, V)
			case slices.Contains(logits, inf) && logits[id] != inf:
				t.Fatalf("%s %v %+v: token %d (%v), not a +Inf one", how, logits, s, id, logits[id])
			case math.IsInf(float64(logits[id]), -1) && slices.ContainsFunc(logits, func(v float32) bool { return !math.IsInf(float64(v), 0) }):
				t.Fatalf("%s %v %+v: token %d has a -Inf logit", how, logits, s, id)
			}
		}
		id, err := newSampler(s, 0).next(logits)
		check("the row", id, err)
		if s.Temperature > 0 && s.TopK > 0 && s.TopK < V && !hasNaN {
			cand := rankIDs(logits)[:s.TopK]
			cids, cvals := make([]int32, len(cand)), make([]float32, len(cand))
			for n, i := range cand {
				cids[n], cvals[n] = int32(i), logits[i]
			}
			id, err := newSampler(s, 0).fromCandidates(cids, cvals)
			check("its top_k", id, err)
		}
		if !hasNaN && s.Temperature > 0 {
			for minKeep := 1; minKeep <= 3; minKeep++ {
				newWarper(s, minKeep).warp(slices.Clone(logits))
			}
		}
	})
}

// TestSortByID checks sortByID against a sort of (id, value) pairs by id,
// on both sides of radixMin: each id keeps its own value, bits and all
// (negative values, -0 and NaN's payload too).
func TestSortByID(t *testing.T) {
	var keys, spare []uint64
	for _, k := range []int{1, 50, radixMin - 1, radixMin, 2000, 50280} {
		ids, vals := make([]int32, k), make([]float32, k)
		for n, id := range rand.Perm(50280)[:k] {
			ids[n], vals[n] = int32(id), math.Float32frombits(rand.Uint32())
		}
		want := make(map[int32]uint32, k)
		for n, id := range ids {
			want[id] = math.Float32bits(vals[n])
		}
		keys, spare = sortByID(ids, vals, keys, spare)
		if !slices.IsSorted(ids) {
			t.Errorf("k=%d: ids not in ascending order", k)
		}
		for n, id := range ids {
			if got := math.Float32bits(vals[n]); got != want[id] {
				t.Errorf("k=%d: id %d has value bits %#x, want %#x", k, id, got, want[id])
				break
			}
		}
	}
}

// BenchmarkSortByID times sortByID on a row of k candidates in no
// particular order, as a warped draw from a TopKDecoder's candidates
// sorts them.
func BenchmarkSortByID(b *testing.B) {
	for _, k := range []int{50, 2000} {
		rng := rand.New(rand.NewPCG(1, 2))
		ids, vals := make([]int32, k), make([]float32, k)
		for n, id := range rng.Perm(50280)[:k] {
			ids[n], vals[n] = int32(id), float32(rng.NormFloat64()*3)
		}
		work, z := make([]int32, k), make([]float32, k)
		var keys, spare []uint64
		b.Run(fmt.Sprintf("k=%d", k), func(b *testing.B) {
			for b.Loop() {
				copy(work, ids)
				copy(z, vals)
				keys, spare = sortByID(work, z, keys, spare)
			}
		})
	}
}
