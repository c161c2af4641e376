package gpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// TestDTProjWarpgroupMatches runs bf16 prefills with dt_proj on the
// warpgroup products (Engine.DTProjWarpgroup) against the same engine with
// dt_proj_tc1's products, eagerly (twice, the second continuing the
// first's state) and as graph replays: every position's hidden state and
// every layer's state within 1e-5 of the norm (the operands are the same
// rounded TF32 values; only the tensor cores' order of sums may differ).
// It logs how many values keep their bits. The model is 1.4b-wide (R =
// 128), one layer; the one-pass scan with 4 states a thread and the chunked
// scan (dt_proj its own kernel in both). The engine takes the entry at every
// size here, whatever dtProjWGPays says of this device (SetDTProjWGFrom):
// 512 rows (one round of row groups), 2048 and 2100 (rounds, the last one
// part full).
func TestDTProjWarpgroupMatches(t *testing.T) {
	gputest.Need(t)
	if d := gputest.Device(t); d.Major != 9 || d.Minor != 0 {
		t.Skipf("dt_proj_wg_f32 needs an sm_90 device (this one is sm_%d%d)", d.Major, d.Minor)
	}
	defer gpu.SetDTProjWGFrom(512)()
	takes := func(R, rows int) bool { return R >= 128 && rows >= 512 }
	dtProjSettingMatches(t, []int{1, 512, 1, 2048, 3, 700}, takes, func(e *gpu.Engine, on bool) { e.DTProjWarpgroup = on },
		false)
}

// TestDTProjShortMatches runs bf16 prefills with dt_proj on the short
// entries (Engine.DTProjShort) against the same engine without them, as
// TestDTProjWarpgroupMatches does, but bit for bit: the short entries run
// the same products in the same order. The model is 1.4b-wide (R = 128),
// one layer, at the short prompts where the engine takes them.
func TestDTProjShortMatches(t *testing.T) {
	gputest.Need(t)
	if d := gputest.Device(t); d.Major < 8 {
		t.Skipf("dt_proj's tensor-core entries need sm_80 or newer (this device is sm_%d%d)", d.Major, d.Minor)
	}
	d := gputest.Device(t)
	pays := func(R, rows int) bool { return gpu.DTProjShortPays(R, rows, 4096, d.SMs, d.MaxSharedOptIn) }
	dtProjSettingMatches(t, []int{1, 256, 2, 128, 3, 70}, pays, func(e *gpu.Engine, on bool) { e.DTProjShort = on },
		true)
}

// dtProjSettingMatches runs settingNear with a dt_proj setting on against
// off, on a one-layer 1.4b-wide model (R = 128), at each (B, T) of sizes
// (pairs; pays must hold for each, or the setting would not run), with
// the one-pass scan at 4 states a thread and with the chunked scan: to
// off's bits with exact, else within 1e-5.
func dtProjSettingMatches(t *testing.T, sizes []int, pays func(R, rows int) bool, set func(e *gpu.Engine, on bool),
	exact bool) {
	t.Helper()
	w := fixture.RandomWeights(fixture.Shape(2048, 1, 100), rand.Uint64())
	for _, onePass := range []int{4, -1} {
		for i := 0; i+1 < len(sizes); i += 2 {
			B, T := sizes[i], sizes[i+1]
			if !pays(w.Config.DTRank, B*T) {
				t.Fatalf("B=%d T=%d, R=%d: the engine would not take the setting's entry", B, T, w.Config.DTRank)
			}
			t.Run(fmt.Sprintf("onepass%d B%d_T%d", onePass, B, T), func(t *testing.T) {
				on, off := newEngine(t, w, cuda.BF16), newEngine(t, w, cuda.BF16)
				set(on, true)
				set(off, false)
				on.ScanOnePass, off.ScanOnePass = onePass, onePass
				tol := 1e-5
				if exact {
					tol = 0
				}
				settingNear(t, on, off, B, T, tol)
			})
		}
	}
}

// settingNear runs prefills of random ids on on and off, eagerly (twice,
// the second continuing the first's state) and as replays of on's graph,
// and holds every output and state to tol of the norm of off's; with tol
// 0, to off's bits.
func settingNear(t *testing.T, on, off *gpu.Engine, B, T int, tol float64) {
	t.Helper()
	c := on.Config()
	in := engine.Input{B: B, T: T, IDs: randomIDs(B*T, c.Vocab)}
	sOn, _ := on.NewState(B)
	sOff, _ := off.NewState(B)
	near := func(what string, got, want []float32) {
		t.Helper()
		normNear(t, what, got, want, tol)
	}
	for call := 0; call < 2; call++ {
		got, want := fixture.NaNs(B*T*c.Hidden), fixture.NaNs(B*T*c.Hidden)
		check(t, on.Prefill(sOn, in, engine.All, got))
		check(t, off.Prefill(sOff, in, engine.All, want))
		near(fmt.Sprintf("eager call %d", call), got, want)
		near(fmt.Sprintf("eager call %d, state", call), flatState(t, on, sOn), flatState(t, off, sOff))
	}
	g, err := on.CapturePrefill(sOn, "ids", T, engine.All)
	check(t, err)
	defer g.Destroy()
	sOn.Reset()
	sOff.Reset()
	got, want := fixture.NaNs(B*T*c.Hidden), fixture.NaNs(B*T*c.Hidden)
	check(t, g.Prefill(in, got))
	check(t, off.Prefill(sOff, in, engine.All, want))
	near("graph replay", got, want)
	near("graph replay, state", flatState(t, on, sOn), flatState(t, off, sOff))
}

// normNear holds got to tol of want in relative norm (the norm of the
// difference over want's), and with tol 0 to want's bits, and logs how
// far it is and how many values keep their bits.
func normNear(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	var diff, norm float64
	same := 0
	for i := range got {
		d := float64(got[i]) - float64(want[i])
		diff, norm = diff+d*d, norm+float64(want[i])*float64(want[i])
		if math.Float32bits(got[i]) == math.Float32bits(want[i]) {
			same++
		}
	}
	e := math.Sqrt(diff / norm)
	if !(e <= tol) {
		t.Errorf("%s: rel err %.3g (bar %g)", what, e, tol)
	}
	if tol == 0 && same != len(got) {
		t.Errorf("%s: %d of %d values differ in their bits", what, len(got)-same, len(got))
	}
	t.Logf("%s: rel err %.3g, %d of %d values with the same bits", what, e, same, len(got))
}

// BenchmarkDTProjWarpgroup times bf16 prefills with dt_proj on the
// warpgroup products (Engine.DTProjWarpgroup, where dtProjWGPays) off and
// on (compareSettings), where dt_proj runs as its own kernel: at B=1 1.4b
// (T = 128, 512 and 2048) and 2.8b (T = 128 and 2048), and at B=8 the 130m
// and 2.8b shapes.
// $DTWG_SHAPES replaces the list (envShapes); with $DTWG_MIN_ROWS the
// engine takes the entry from that many rows, wherever dtProjWGPays would
// leave it out (SetDTProjWGFrom).
func BenchmarkDTProjWarpgroup(b *testing.B) {
	if s := os.Getenv("DTWG_MIN_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("DTWG_MIN_ROWS: %q is not a positive row count", s)
		}
		defer gpu.SetDTProjWGFrom(n)()
	}
	shapes := envShapes(b, "DTWG_SHAPES", []benchShape{shape("1.4b", 1, 2048), shape("1.4b", 1, 512),
		shape("1.4b", 1, 128), shape("2.8b", 1, 2048), shape("2.8b", 1, 128), shape("130m", 8, 2048),
		shape("2.8b", 8, 2048)})
	compareSettings(b, "dtprojwg", shapes, func(e *gpu.Engine, on bool) { e.DTProjWarpgroup = on })
}

// BenchmarkDTProjShort times bf16 prefills with dt_proj on the short
// entries (Engine.DTProjShort, where dtProjShortPays) off and on
// (compareSettings): 1.4b and 2.8b at B=1, T = 128, 256 and 512, 2.8b at
// T=192, and 1.4b at B=2 T=128 (only where dtProjShortPays do the two
// differ). $DTSHORT_SHAPES
// replaces the list (envShapes).
func BenchmarkDTProjShort(b *testing.B) {
	shapes := envShapes(b, "DTSHORT_SHAPES", []benchShape{shape("1.4b", 1, 128), shape("1.4b", 1, 256),
		shape("1.4b", 1, 512), shape("1.4b", 2, 128), shape("2.8b", 1, 128), shape("2.8b", 1, 192),
		shape("2.8b", 1, 256), shape("2.8b", 1, 512)})
	compareSettings(b, "dtprojshort", shapes, func(e *gpu.Engine, on bool) { e.DTProjShort = on })
}
