package gpu_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/gpu"
)

// decodeSetting is one way to run the decode step, for BenchmarkDecodeFused.
type decodeSetting struct {
	name            string
	fused           bool
	prefetch, perSM int // Engine.DecodeFusedPrefetch and DecodeFusedBlocksPerSM
}

func (s decodeSetting) set(e *gpu.Engine) {
	e.DecodeFused, e.DecodeFusedPrefetch, e.DecodeFusedBlocksPerSM = s.fused, s.prefetch, s.perSM
}

// BenchmarkDecodeFused times bf16 decode step graphs of the 130m, 370m,
// 1.4b and 2.8b shapes at B=1 and B=8, replayed on device buffers
// (Graph.StepDevice) between CUDA events: the separate launches (four a
// layer) against the fused step (Engine.DecodeFused), by default and with
// no L2 prefetch, 128 KiB of it, and one block a multiprocessor. Each of
// five rounds replays every setting's graph 50 times in turn; a setting's
// time is the median of its rounds' medians, logged with its ratio to the
// separate launches'. DECODE_SHAPES (a regexp, e.g. '130m|2.8b') picks the
// shapes.
func BenchmarkDecodeFused(b *testing.B) {
	gputest.Need(b)
	pick := regexp.MustCompile(os.Getenv("DECODE_SHAPES"))
	settings := []decodeSetting{{"separate", false, 0, 0}, {"fused", true, 0, 0}, {"fused_noprefetch", true, -1, 0},
		{"fused_prefetch128k", true, 128 << 10, 0}, {"fused_1perSM", true, 0, 1}}
	for _, sh := range []struct {
		name      string
		d, layers int
	}{{"130m", 768, 24}, {"370m", 1024, 48}, {"1.4b", 2048, 48}, {"2.8b", 2560, 64}} {
		if !pick.MatchString(sh.name) {
			continue
		}
		b.Run(sh.name, func(b *testing.B) {
			e, _ := bf16Engine(b, sh.d, sh.layers)
			for _, B := range []int{1, 8} {
				b.Run(fmt.Sprintf("B%d", B), func(b *testing.B) { benchDecodeSettings(b, e, B, settings) })
			}
		})
	}
}

func benchDecodeSettings(b *testing.B, e *gpu.Engine, B int, settings []decodeSetting) {
	const vocab, rounds, replays = 50280, 5, 50
	st, err := e.NewState(B)
	if err != nil {
		b.Fatal(err)
	}
	defer st.(*gpu.State).Free()
	stream, ids, logits := gputest.EntryBuffers(b, B, 1, vocab, vocab)
	graphs := make([]*gpu.Graph, len(settings))
	for i, s := range settings {
		s.set(e)
		if graphs[i], err = e.CaptureStep(st); err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
		defer graphs[i].Destroy()
	}
	perRound := make([][]float64, len(settings))
	for range rounds {
		for i, g := range graphs {
			ms, err := eventTimes(stream, replays, func() error {
				return g.StepDevice(uintptr(ids.Ptr), uintptr(logits.Ptr), stream.Handle())
			})
			if err != nil {
				b.Fatalf("%s: %v", settings[i].name, err)
			}
			perRound[i] = append(perRound[i], medianMs(ms))
		}
	}
	var lines []string
	base := medianMs(perRound[0])
	for i, s := range settings {
		us := 1e3 * medianMs(perRound[i])
		b.ReportMetric(us, s.name+"_us/step")
		lines = append(lines, fmt.Sprintf("%-20s %8.1f us/step  %.3fx the separate launches' time", s.name, us, us/(1e3*base)))
	}
	b.Logf("B=%d, medians of %d rounds of %d replays:\n%s", B, rounds, replays, strings.Join(lines, "\n"))
}

// medianMs is the median of ms (sorted in place).
func medianMs(ms []float64) float64 {
	slices.Sort(ms)
	n := len(ms)
	if n%2 == 1 {
		return ms[n/2]
	}
	return (ms[n/2-1] + ms[n/2]) / 2
}
