package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mambago/mambago/internal/blastest"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// BenchmarkConvScanJobs times a 130m B=1 T=512 prefill with the conv and the
// scan cut into tasks of 32, 16 and 8 channels (48, 96 and 192 tasks), in
// three rounds that take turns, each round starting one width later (the
// first prefills of a process run slow), and reports each stage's time a
// prefill.
// With few tasks a worker, one late core holds up the stage. Tasks of 8
// channels write 32 bytes of each row of u and y, half a cache line, so two
// workers share every line: on 2 cores they ran the conv 2.4x and the scan
// 1.4x slower than 16 or 32, which were even.
func BenchmarkConvScanJobs(b *testing.B) {
	e := New(fixture.RandomWeights(fixture.Shape(768, 24, 50280), 1))
	e.BLAS = blastest.Maybe(b)
	const T = 512
	ids := make([]int64, T)
	for i := range ids {
		ids[i] = rand.Int64N(50280)
	}
	out := make([]float32, 768)
	defer func(was int) { chanBlock = was }(chanBlock)
	widths := []int{32, 16, 8}
	for round := 1; round <= 3; round++ {
		for i := range widths {
			ch := widths[(i+round-1)%len(widths)]
			b.Run(fmt.Sprintf("ch%d/round%d", ch, round), func(b *testing.B) {
				chanBlock = ch
				e.Timer = &StageTimer{}
				for b.Loop() {
					st, _ := e.NewState(1)
					if err := e.Prefill(st, engine.Input{B: 1, T: T, IDs: ids}, engine.Last, out); err != nil {
						b.Fatal(err)
					}
				}
				n := float64(b.N)
				b.ReportMetric(e.Timer.d["conv"].Seconds()*1e3/n, "conv_ms/op")
				b.ReportMetric(e.Timer.d["scan"].Seconds()*1e3/n, "scan_ms/op")
				b.ReportMetric(T*n/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}

// TestConvScanJobsSameBits checks that the conv and scan tasks' width, and
// running them and the small GEMMs on the calling goroutine or in
// parallel (serialChannels, serialGemm), and the scan's lanes of sixteen
// channels against those of eight (useWideLanes), do not change a bit of a
// prefill's output or of a step's logits and state: each channel and each
// row of W runs alone whatever the cut. E = 100 leaves four channels past
// the last group of eight lanes (and 4 past the last of sixteen); E = 120
// leaves a group of eight past the last of sixteen; tasks of 24 or 8
// channels start off a multiple of 16.
func TestConvScanJobsSameBits(t *testing.T) {
	for _, d := range []int{50, 60} {
		t.Run(fmt.Sprintf("d=%d", d), func(t *testing.T) { convScanJobsSameBits(t, d) })
	}
}

func convScanJobsSameBits(t *testing.T, d int) {
	e := New(fixture.RandomWeights(fixture.Shape(d, 2, 60), rand.Uint64()))
	const B, T = 3, 41
	ids := make([]int64, B*T)
	for i := range ids {
		ids[i] = rand.Int64N(60)
	}
	defer func(ch, sc, sg int, wide bool) {
		chanBlock, serialChannels, serialGemm, useWideLanes = ch, sc, sg, wide
	}(chanBlock, serialChannels, serialGemm, useWideLanes)
	var want []float32
	for _, c := range []struct {
		ch           int
		serial, wide bool
	}{
		{32, false, hasAVX512}, {16, false, hasAVX512}, {8, false, hasAVX512}, {24, false, hasAVX512},
		{16, true, hasAVX512}, {8, true, hasAVX512}, {16, false, false}, {24, false, false},
	} {
		chanBlock, serialChannels, serialGemm, useWideLanes = c.ch, 0, 0, c.wide
		if c.serial {
			serialChannels, serialGemm = 1<<30, 1<<30
		}
		st, err := e.NewState(B)
		if err != nil {
			t.Fatal(err)
		}
		got := fixture.NaNs(B * T * d)
		if err := e.Prefill(st, engine.Input{B: B, T: T, IDs: ids}, engine.All, got); err != nil {
			t.Fatal(err)
		}
		logits := fixture.NaNs(B * 60)
		if err := e.Step(st, ids[:B], logits); err != nil {
			t.Fatal(err)
		}
		got = append(got, logits...)
		for l := range 2 {
			ssm, _ := st.SSMState(l)
			conv, _ := st.ConvState(l)
			got = append(append(got, ssm...), conv...)
		}
		if want == nil {
			want = got
			continue
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%d-channel tasks, serial %v, wide lanes %v: element %d is %v, 32-channel tasks in parallel gave %v",
					c.ch, c.serial, c.wide, i, got[i], want[i])
			}
		}
	}
}
