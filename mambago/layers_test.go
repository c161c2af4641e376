package mambago_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/mambago"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/enginetest"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestPrefillLayersSpans runs a padded batch (a whole row, padding left,
// right and both) through Model.PrefillLayers, as one prefill and as a
// prefill a row length, for new sequences and continuing a state: each
// row's layers are what the row alone gives, zero at its padding, and the
// output is PrefillSpans' (StartSpans') every-position output. A layers
// buffer of the wrong size is an input error.
func TestPrefillLayersSpans(t *testing.T) {
	m := openBase(t)
	cfg := m.Config()
	d, L, V := cfg.Hidden, cfg.Layers, int64(cfg.Vocab)
	const B, T, lead = 4, 13, 3
	ids, first := make([]int64, B*T), make([]int64, B*lead)
	for i := range ids {
		ids[i] = rand.Int64N(V)
	}
	for i := range first {
		first[i] = rand.Int64N(V)
	}
	spans := []mambago.Span{{Start: 0, Len: T}, {Start: 5, Len: 8}, {Start: 0, Len: 6}, {Start: 2, Len: 7}}
	in := engine.Input{B: B, T: T, IDs: ids}
	// state returns a state of n rows: new, or after rows of the lead prompt.
	state := func(fresh bool, rows ...int) engine.State {
		st, err := m.NewState(len(rows))
		if err != nil {
			t.Fatal(err)
		}
		if !fresh {
			var lead1 []int64
			for _, b := range rows {
				lead1 = append(lead1, first[b*lead:(b+1)*lead]...)
			}
			if err := m.Prefill(st, engine.Input{B: len(rows), T: lead, IDs: lead1}, engine.Last, make([]float32, len(rows)*d)); err != nil {
				t.Fatal(err)
			}
		}
		return st
	}
	all := []int{0, 1, 2, 3}
	for _, one := range []bool{false, true} {
		restore := mambago.SetOnePrefillPads(one)
		for _, fresh := range []bool{true, false} {
			where := fmt.Sprintf("one prefill %v, new %v", one, fresh)
			out, layers := fixture.NaNs(B*T*d), fixture.NaNs(L*B*T*d)
			if err := m.PrefillLayers(context.Background(), state(fresh, all...), in, spans, fresh, out, layers); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			want := fixture.NaNs(B * T * d)
			run := m.PrefillSpans
			if fresh {
				run = m.StartSpans
			}
			if err := run(state(fresh, all...), in, spans, engine.All, want); err != nil {
				t.Fatal(err)
			}
			if e := fixture.RelErr(out, want); e > enginetest.EquivTol {
				t.Errorf("%s: the output differs from PrefillSpans' by %.3g", where, e)
			}
			for b, s := range spans {
				alone := fixture.NaNs(L * s.Len * d)
				row := engine.Input{B: 1, T: s.Len, IDs: ids[b*T+s.Start : b*T+s.Start+s.Len]}
				if err := m.PrefillLayers(context.Background(), state(fresh, b), row, nil, false, fixture.NaNs(s.Len*d), alone); err != nil {
					t.Fatal(err)
				}
				for l := range L {
					at := (l*B + b) * T * d
					got := layers[at : at+T*d]
					if e := fixture.RelErr(got[s.Start*d:(s.Start+s.Len)*d], alone[l*s.Len*d:(l+1)*s.Len*d]); e > enginetest.EquivTol {
						t.Errorf("%s row %d layer %d: the row alone's layer differs by %.3g", where, b, l, e)
					}
					for i, v := range got {
						if p := i / d; (p < s.Start || p >= s.Start+s.Len) && v != 0 {
							t.Fatalf("%s row %d layer %d: padding position %d holds %v, want 0", where, b, l, p, v)
						}
					}
				}
			}
		}
		restore()
	}
	err := m.PrefillLayers(context.Background(), state(true, all...), in, spans, true, fixture.NaNs(B*T*d), fixture.NaNs(L*B*T*d-1))
	if !engine.IsInvalid(err) {
		t.Errorf("a layers buffer one value short: %v, want an input error", err)
	}
}
