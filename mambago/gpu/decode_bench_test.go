package gpu_test

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/gpu"
)

// BenchmarkDecodeSteps times bf16 decode step graphs of the 130m, 370m,
// 1.4b and 2.8b shapes at B=1 and B=8 as New sets the engine up, replayed
// on device buffers (Graph.StepDevice) between CUDA events: the median of
// five rounds' medians of 50 replays, reported as us/step. DECODE_SHAPES
// (a regexp, e.g. '130m|1.4b') picks the shapes; device_run.sh's decodeab
// mode runs two builds' in turns. Each shape and batch also logs a hash of
// the logits of three eager steps from a zero state and fixed tokens, so
// that two builds meant to give the same bits can be seen to.
func BenchmarkDecodeSteps(b *testing.B) {
	forDecodeShapes(b, func(b *testing.B, _ string, e *gpu.Engine) {
		for _, B := range []int{1, 8} {
			b.Run(fmt.Sprintf("B%d", B), func(b *testing.B) {
				b.ReportMetric(1e3*decodeStepMs(b, e, B), "us/step")
				b.Logf("logits bits %016x", decodeBits(b, e, B))
			})
		}
	})
}

// forDecodeShapes runs f, in a sub-benchmark named for the shape, on a bf16
// engine of random weights for each decode benchmark shape that
// DECODE_SHAPES (a regexp; all when unset) picks.
func forDecodeShapes(b *testing.B, f func(b *testing.B, shape string, e *gpu.Engine)) {
	gputest.Need(b)
	pick := regexp.MustCompile(os.Getenv("DECODE_SHAPES"))
	for _, sh := range []struct {
		name      string
		d, layers int
	}{{"130m", 768, 24}, {"370m", 1024, 48}, {"1.4b", 2048, 48}, {"2.8b", 2560, 64}} {
		if !pick.MatchString(sh.name) {
			continue
		}
		b.Run(sh.name, func(b *testing.B) {
			e, _ := bf16Engine(b, sh.d, sh.layers)
			f(b, sh.name, e)
		})
	}
}

// BenchmarkDecodeBatchSettings times bf16 decode step graphs of 8
// sequences with the batch's own kernels off and on, in one process, the
// settings taking turns over three rounds: Engine.GEMVTensorCores (the
// GEMVs on the tensor cores), then also Engine.DecodeScanBatch (the scan
// step a warp a channel for every sequence), each with x_proj's few tiles
// whole and split along k over up to 4 and 8 blocks
// (Engine.GEMVTileParts), all at 16 warps a tile. DECODE_SHAPES (a regexp)
// picks the shapes. Each logs its medians and ratios.
func BenchmarkDecodeBatchSettings(b *testing.B) {
	settings := []struct {
		name                 string
		tensorCores, scan    bool
		tileWarps, tileParts int
	}{{"neither", false, false, 16, 1}, {"tensor cores", true, false, 16, 1}, {"tensor cores, split 4", true, false, 16, 4},
		{"both", true, true, 16, 1}, {"both, split 4", true, true, 16, 4}, {"both, split 8", true, true, 16, 8}}
	names := make([]string, len(settings))
	for i, st := range settings {
		names[i] = st.name
	}
	forDecodeShapes(b, func(b *testing.B, shape string, e *gpu.Engine) {
		b.Logf("%s B=8:%s", shape, stepsInTurn(b, e, 8, names, func(i int) {
			st := settings[i]
			e.GEMVTensorCores, e.DecodeScanBatch, e.GEMVTileWarps, e.GEMVTileParts = st.tensorCores, st.scan, st.tileWarps, st.tileParts
		}))
	})
}

// BenchmarkDecodeWarpgroup times bf16 decode step graphs of 8, 4 and 1
// sequences (DECODE_BATCHES) with the warpgroup GEMVs off (the tensor-core
// GEMVs, and the one-sequence entries at B=1), on for
// in_proj and the LM head (Engine.GEMVWarpgroup), and on for out_proj too
// (GEMVWarpgroupOut) split along k over up to 4 blocks
// (GEMVWarpgroupParts), and then with the norm folded across launches
// (GEMVWarpgroupFold), taking turns over three rounds in one process. At
// B=1 the settings on take the warpgroup GEMVs there too
// (GEMVWarpgroupOneSequence).
// DECODE_SHAPES (a regexp) picks the shapes, and DECODE_SETTINGS (a
// comma-separated list of the names below) the settings, so that a profiler
// can see one setting's kernels alone. Each logs its medians and their
// ratios to the first setting.
func BenchmarkDecodeWarpgroup(b *testing.B) {
	type setting struct {
		name          string
		in, out, fold bool
		outPartsMost  int
	}
	all := []setting{{"off", false, false, false, 1}, {"in+head", true, false, false, 1}, {"+out/4", true, true, false, 4},
		{"+out/4+fold", true, true, true, 4}}
	settings := all
	if list := os.Getenv("DECODE_SETTINGS"); list != "" {
		settings = nil
		for _, name := range strings.Split(list, ",") {
			i := slices.IndexFunc(all, func(s setting) bool { return s.name == name })
			if i < 0 {
				b.Fatalf("DECODE_SETTINGS: no setting %q", name)
			}
			settings = append(settings, all[i])
		}
	}
	names := make([]string, len(settings))
	for i, st := range settings {
		names[i] = st.name
	}
	forDecodeShapes(b, func(b *testing.B, shape string, e *gpu.Engine) {
		for _, B := range decodeBatches(b, "8,4,1") {
			b.Logf("%s B=%d warpgroup:%s", shape, B, stepsInTurn(b, e, B, names, func(i int) {
				st := settings[i]
				e.GEMVWarpgroup, e.GEMVWarpgroupOut, e.GEMVWarpgroupParts = st.in, st.out, st.outPartsMost
				e.GEMVWarpgroupFold, e.GEMVWarpgroupOneSequence = st.fold, st.in
			}))
		}
	})
}

// BenchmarkDecodeStream times bf16 decode step graphs of one sequence
// without and with the streaming one-sequence entry (Engine.GEMVStream:
// out_proj and the LM head), also asking L2 for the weights before the PDL
// wait (GEMVStreamPrefetch), and, where New takes the warpgroup GEMVs at
// B=1 (GEMVWarpgroupOneSequence), with those off on the one-sequence
// entries ("b1") and then streaming ("b1 stream", "b1 stream prefetch"), taking turns over three
// rounds in one process. DECODE_SHAPES picks the shapes. Each logs its
// medians and their ratios to the first, and the FNV hash of three eager
// steps' logits under each setting.
func BenchmarkDecodeStream(b *testing.B) {
	forDecodeShapes(b, func(b *testing.B, shape string, e *gpu.Engine) {
		wgOne := e.GEMVWarpgroupOneSequence
		type setting struct {
			name                 string
			stream, prefetch, wg bool
		}
		settings := []setting{{"no stream", false, false, wgOne}, {"stream", true, false, wgOne},
			{"stream prefetch", true, true, wgOne}}
		if wgOne {
			settings = append(settings, setting{"b1", false, false, false}, setting{"b1 stream", true, false, false},
				setting{"b1 stream prefetch", true, true, false})
		}
		apply := func(st setting) {
			e.GEMVStream, e.GEMVStreamPrefetch, e.GEMVWarpgroupOneSequence = st.stream, st.prefetch, st.wg
		}
		names := make([]string, len(settings))
		bits := ""
		for i, st := range settings {
			names[i] = st.name
			apply(st)
			bits += fmt.Sprintf(" %s %016x", st.name, decodeBits(b, e, 1))
		}
		b.Logf("%s B=1 logits bits:%s", shape, bits)
		b.Logf("%s B=1 stream:%s", shape, stepsInTurn(b, e, 1, names, func(i int) { apply(settings[i]) }))
	})
}

// BenchmarkDecodeOutParts times bf16 decode step graphs as New sets the
// engine up ("default"), then on the warpgroup GEMVs with the norm folded
// (at B=1 too) and out_proj's tiles split along k over each count of
// blocks in DECODE_PARTS (default 1,2,3,4,6,8,12; a count the SMs or K
// cap at one already timed is skipped), taking turns over three rounds in
// one process. DECODE_SHAPES and DECODE_BATCHES (default 8,1) pick the
// shapes and batches. Each logs its medians and their ratios to the
// default.
func BenchmarkDecodeOutParts(b *testing.B) {
	most := envCounts(b, "DECODE_PARTS", "1,2,3,4,6,8,12", "a count of blocks")
	forDecodeShapes(b, func(b *testing.B, shape string, e *gpu.Engine) {
		wg, fold, one, defParts := e.GEMVWarpgroup, e.GEMVWarpgroupFold, e.GEMVWarpgroupOneSequence, e.GEMVWarpgroupParts
		set := func(parts int) { // 0: New's settings
			e.GEMVWarpgroup, e.GEMVWarpgroupFold, e.GEMVWarpgroupOneSequence, e.GEMVWarpgroupParts = wg, fold, one, defParts
			if parts > 0 {
				e.GEMVWarpgroup, e.GEMVWarpgroupFold, e.GEMVWarpgroupOneSequence, e.GEMVWarpgroupParts = true, true, true, parts
			}
		}
		names, parts := []string{"default"}, []int{0}
		for _, p := range most {
			set(p)
			if got := e.WGOutParts(); !slices.Contains(parts, got) {
				names, parts = append(names, fmt.Sprintf("fold/%d", got)), append(parts, got)
			}
		}
		for _, B := range decodeBatches(b, "8,1") {
			b.Logf("%s B=%d out parts:%s", shape, B, stepsInTurn(b, e, B, names, func(i int) { set(parts[i]) }))
		}
		set(0)
	})
}

// stepsInTurn times decode step graphs of B sequences on e under each of
// the settings named in names, apply(i) setting the i-th, taking turns
// over three rounds, and returns for each its median in µs, its ratio to
// the first's and its three times, for a benchmark's log line.
func stepsInTurn(b *testing.B, e *gpu.Engine, B int, names []string, apply func(i int)) string {
	times := make([][]float64, len(names))
	for range 3 {
		for i := range names {
			apply(i)
			times[i] = append(times[i], 1e3*decodeStepMs(b, e, B))
		}
	}
	line, base := "", gputest.Median(times[0])
	for i, name := range names {
		m := gputest.Median(times[i])
		line += fmt.Sprintf("  %s %.1f us/step (%.3fx) %.1f", name, m, base/m, times[i])
	}
	return line
}

// decodeBatches returns the batches in DECODE_BATCHES (a comma-separated
// list), or in def where it is unset.
func decodeBatches(b *testing.B, def string) []int {
	return envCounts(b, "DECODE_BATCHES", def, "a batch")
}

// envCounts returns the positive counts listed, comma-separated, in the
// environment variable name, or in def where it is unset; what names one
// in the failure for a count that is not one.
func envCounts(b *testing.B, name, def, what string) []int {
	list := os.Getenv(name)
	if list == "" {
		list = def
	}
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("%s: %q is not %s", name, f, what)
		}
		out = append(out, n)
	}
	return out
}

// decodeStepMs captures a decode step graph of B sequences on e and
// returns the median over five rounds of each round's median time of 50
// replays, in milliseconds.
func decodeStepMs(b *testing.B, e *gpu.Engine, B int) float64 {
	const vocab, rounds, replays = 50280, 5, 50
	st, err := e.NewState(B)
	if err != nil {
		b.Fatal(err)
	}
	defer st.(*gpu.State).Free()
	stream, ids, logits := gputest.EntryBuffers(b, B, 1, vocab, vocab)
	g, err := e.CaptureStep(st)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Destroy()
	var perRound []float64
	for range rounds {
		ms, err := eventTimes(stream, replays, func() error {
			return g.StepDevice(uintptr(ids.Ptr), uintptr(logits.Ptr), stream.Handle())
		})
		if err != nil {
			b.Fatal(err)
		}
		perRound = append(perRound, gputest.Median(ms))
	}
	return gputest.Median(perRound)
}

// decodeBits runs three eager decode steps of B sequences on e from a zero
// state, with tokens that depend only on the sequence and the step, and
// returns the FNV-1a hash of the last step's logits' bits.
func decodeBits(b *testing.B, e *gpu.Engine, B int) uint64 {
	const vocab = 50280
	st, err := e.NewState(B)
	if err != nil {
		b.Fatal(err)
	}
	defer st.(*gpu.State).Free()
	logits, ids := make([]float32, B*vocab), make([]int64, B)
	for step := range 3 {
		for i := range ids {
			ids[i] = int64((7919*i + 104729*step + 12345) % vocab)
		}
		if err := e.Step(st, ids, logits); err != nil {
			b.Fatal(err)
		}
	}
	h := fnv.New64a()
	var word [4]byte
	for _, v := range logits {
		binary.LittleEndian.PutUint32(word[:], math.Float32bits(v))
		h.Write(word[:])
	}
	return h.Sum64()
}
