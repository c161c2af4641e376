package main

import (
	"reflect"
	"testing"

	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestParse pins the points' shorthands: "u" brings "us", "W" brings each
// GEMM's weights, and "-name" leaves a point out after them.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want points
	}{
		{"W", points{"W": true, "Wi": true, "Wx": true, "Wo": true}},
		{"Wx", points{"Wx": true}},
		{"W -Wo", points{"W": true, "Wi": true, "Wx": true}},
		{"u -us", points{"u": true}},
		{"x y", points{"x": true, "y": true}},
	} {
		if got := parse(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("parse(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestEmulation checks the emulation against HF's logits where it rounds
// nothing, and that "W" rounds exactly what "Wi Wx Wo" round together, on
// every fixture case: the table's rows mean nothing otherwise.
func TestEmulation(t *testing.T) {
	cases, err := fixture.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		w, err := checkpoint.Load(c.Dir)
		if err != nil {
			t.Fatal(err)
		}
		plain := run(w, c, points{}, nil)
		if e := fixture.RelErr(plain.logits, c.Logits); e > 1e-4 {
			t.Errorf("%s: unrounded, the emulation differs from HF's logits by %.3g", c.Name, e)
		}
		all := run(w, c, parse("W"), toBF16)
		each := run(w, c, parse("Wi Wx Wo"), toBF16)
		if !reflect.DeepEqual(all, each) {
			t.Errorf("%s: \"W\" and \"Wi Wx Wo\" round differently", c.Name)
		}
		// (The "bf16" case's weights are stored in bf16: rounding them is exact.)
		if changed := !reflect.DeepEqual(all.logits, plain.logits); changed != (c.Name != "bf16") {
			t.Errorf("%s: rounding the weights to bf16 changed the logits: %v", c.Name, changed)
		}
	}
}
