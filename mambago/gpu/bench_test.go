package gpu_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/gpu"
	"github.com/mambago/mambago/mambago/internal/fixture"
)

// BenchmarkPrefill130m times the 130m shape (d=768, 24 layers) in f32 and
// bf16: prefills at B=1, T=2048 (after a warm-up, as the first prefills of a
// process run slower), a short prompt eager and as a graph, and a decode
// step's graph replay with and without programmatic dependent launch; then
// it prints where a T=2048 prefill's time goes, stage by stage.
func BenchmarkPrefill130m(b *testing.B) {
	gputest.Need(b)
	w := fixture.RandomWeights(fixture.Shape(768, 24, 50280), 1)
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16} {
		b.Run(dt.String(), func(b *testing.B) { benchPrefill(b, w, dt) })
	}
}

func benchPrefill(b *testing.B, w *checkpoint.Weights, dt cuda.DType) {
	e, err := gpu.New(w, 0, dt)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	const B, T, short = 1, 2048, 128
	ids := randomIDs(B*T, 50280)
	in, out := engine.Input{B: B, T: T, IDs: ids}, make([]float32, B*768)
	sin := engine.Input{B: B, T: short, IDs: ids[:B*short]}
	st, err := e.NewState(B)
	if err != nil {
		b.Fatal(err)
	}
	prefill := func(in engine.Input) func() error {
		return func() error { return e.Prefill(st, in, engine.Last, out) }
	}
	for range 20 { // the clocks ramp up over the first prefills
		if err := prefill(in)(); err != nil {
			b.Fatal(err)
		}
	}
	g, err := e.CapturePrefill(st, "ids", short, engine.Last)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Destroy()
	e.DecodePDL = false
	step, err := e.CaptureStep(st)
	if err != nil {
		b.Fatal(err)
	}
	defer step.Destroy()
	e.DecodePDL = true
	stepPDL, err := e.CaptureStep(st)
	if err != nil {
		b.Fatal(err)
	}
	defer stepPDL.Destroy()
	logits := make([]float32, B*50280)
	for _, r := range []struct {
		name   string
		tokens int
		run    func() error
	}{
		{fmt.Sprintf("B%d_T%d", B, T), B * T, prefill(in)},
		{fmt.Sprintf("B%d_T%d_dtproj_cuda_cores", B, T), B * T, func() error {
			defer func(on bool) { e.DTProjTensorCores = on }(e.DTProjTensorCores)
			e.DTProjTensorCores = false
			return prefill(in)()
		}},
		{fmt.Sprintf("B%d_T%d_eager", B, short), B * short, prefill(sin)},
		{fmt.Sprintf("B%d_T%d_graph", B, short), B * short, func() error { return g.Prefill(sin, out) }},
		{fmt.Sprintf("B%d_step_graph", B), B, func() error { return step.Step(ids[:B], logits) }},
		{fmt.Sprintf("B%d_step_graph_pdl", B), B, func() error { return stepPDL.Step(ids[:B], logits) }},
	} {
		b.Run(r.name, func(b *testing.B) {
			for b.Loop() {
				if err := r.run(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(r.tokens)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
	b.Logf("%s stages over 5 prefills, B=%d T=%d:\n%s", dt, B, T, stageTable(b, e, func() {
		if err := prefill(in)(); err != nil {
			b.Fatal(err)
		}
	}))
}

// stageTable times 5 runs of prefill with e's stage timer and returns the
// table of where their time went; the timer is off again afterwards.
func stageTable(b *testing.B, e *gpu.Engine, prefill func()) string {
	e.Timer = &gpu.StageTimer{}
	defer func() { e.Timer = nil }()
	for range 5 {
		prefill()
	}
	report, err := e.Timer.Report(e)
	if err != nil {
		b.Fatal(err)
	}
	return report
}

// scanVariant is one way to run the scan (and dt_proj) that the
// benchmarks compare.
type scanVariant struct {
	staged  bool
	chunk   int // Engine.ScanChunk
	onePass int // Engine.ScanOnePass
	// dtProj is how dt_proj runs: "tc3" (3xTF32), "tc1" (one TF32 product) or
	// "cuda_cores".
	dtProj string
}

func (v scanVariant) String() string {
	name := fmt.Sprintf("staged_%v_L%d", v.staged, v.chunk)
	switch {
	case v.onePass > 0:
		name = fmt.Sprintf("onepass%d", v.onePass)
	case v.onePass == 0:
		name = "auto"
	}
	return name + "_dtproj_" + v.dtProj
}

// set configures e to run v.
func (v scanVariant) set(e *gpu.Engine) {
	e.ScanStaged, e.ScanChunk, e.ScanOnePass = v.staged, v.chunk, v.onePass
	e.DTProjTensorCores, e.DTProjOneTF32Product = v.dtProj != "cuda_cores", v.dtProj == "tc1"
}

// scanVariants are the chunked scan (staged, default chunk length), the
// one-pass scan at 2 and 4 states a thread, and the engine's own pick
// (OnePassStates), each with dt_proj as 3xTF32 and as one TF32 product.
var scanVariants = func() []scanVariant {
	var vs []scanVariant
	for _, dt := range []string{"tc3", "tc1"} {
		for _, op := range []int{-1, 2, 4, 0} {
			vs = append(vs, scanVariant{staged: true, chunk: 64, onePass: op, dtProj: dt})
		}
	}
	return vs
}()

// BenchmarkScan130m times bf16 prefills of the 130m shape with each of
// scanVariants, then the scan stage alone. (Chunk lengths of 32 and
// 48 positions were measured against the default 64 with the plain kernel
// on the H200 at 4041782 and were no faster: 9.9, 8.8 and 8.9 ms of scan
// over 5 prefills at B=1, T=2048; 33.0, 31.9 and 30.3 at T=8192; 56.8, 54.6
// and 51.8 at B=8. With the staged kernel at b0fe5e7, chunks of 64, 32 and
// 16: 8.27, 9.33 and 12.23 ms at B=1, T=2048; 24.9, 28.5 and 41.1 at
// T=8192; 43.7, 49.2 and 69.3 at B=8. A staged kernel with two threads a
// channel, on branch issue4-pair at 238f5ec, was no faster either.)
func BenchmarkScan130m(b *testing.B) {
	gputest.Need(b)
	w := fixture.RandomWeights(fixture.Shape(768, 24, 50280), 1)
	for _, v := range scanVariants {
		e, err := gpu.New(w, 0, cuda.BF16)
		if err != nil {
			b.Fatal(err)
		}
		v.set(e)
		for _, s := range []struct{ B, T int }{{1, 2048}, {1, 8192}, {8, 2048}} {
			ids := randomIDs(s.B*s.T, 50280)
			in, out := engine.Input{B: s.B, T: s.T, IDs: ids}, make([]float32, s.B*768)
			st, err := e.NewState(s.B)
			if err != nil {
				b.Fatal(err)
			}
			prefill := func() {
				if err := e.Prefill(st, in, engine.Last, out); err != nil {
					b.Fatal(err)
				}
			}
			for range 10 {
				prefill()
			}
			b.Run(fmt.Sprintf("%s/B%d_T%d", v, s.B, s.T), func(b *testing.B) {
				for b.Loop() {
					prefill()
				}
				b.ReportMetric(float64(s.B*s.T)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			})
			b.Logf("%s B=%d T=%d, 5 prefills:\n%s", v, s.B, s.T, stageTable(b, e, prefill))
			if err := st.(*gpu.State).Free(); err != nil {
				b.Fatal(err)
			}
		}
		if err := e.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBigShapes times, for the 1.4b (d=2048, 48 layers) and 2.8b
// (d=2560, 64 layers) shapes in bf16: the decode step's graph replay at B=1
// with the single-token kernels as New sets them up, with four rows to a
// warp group in the big GEMVs (Engine.GEMVRows) at the default split and at
// split 1, each on the entries for up to 8 sequences and for one
// (Engine.GEMVOneSequence, _b1), at split 4 on the one-sequence entries, and
// on the prefill path at T = 1 with cuBLAS GEMVs
// (DecodeKernelMaxB < 0); then B=1 and B=8, T=2048 prefills with each of
// scanVariants, and at B=1 with dt_proj on the CUDA cores instead of the
// tensor cores. (Measured on the H200 at 8779a0b, as BenchmarkDecodeBig:
// 1.75 and 3.36 ms a step; without programmatic dependent launch 1.92 and
// 3.52; one warp a row 2.24 and 4.00; the prefill path 3.08 and 4.93.)
func BenchmarkBigShapes(b *testing.B) {
	gputest.Need(b)
	for _, s := range []struct {
		name      string
		d, layers int
	}{{"1.4b", 2048, 48}, {"2.8b", 2560, 64}} {
		// Everything runs inside b.Run, so -test.bench 'BigShapes/2.8b' builds
		// and launches nothing of the other shape (ncu counts launches).
		b.Run(s.name, func(b *testing.B) {
			e, st := bf16Engine(b, s.d, s.layers)
			ids, logits := []int64{7}, make([]float32, 50280)
			for _, path := range []struct {
				name              string
				maxB, split, rows int
				oneSeq            bool
			}{{"kernels", 0, 0, 1, false}, {"kernels_rows4", 0, 0, 4, false}, {"kernels_rows4_b1", 0, 0, 4, true},
				{"kernels_rows4_split1", 0, 1, 4, false}, {"kernels_rows4_split1_b1", 0, 1, 4, true},
				{"kernels_rows4_split4_b1", 0, 4, 4, true},
				{"prefill_path", -1, 0, 1, false}} {
				b.Run(path.name, func(b *testing.B) {
					e.DecodeKernelMaxB, e.GEMVSplit, e.GEMVRows, e.GEMVOneSequence = path.maxB, path.split, path.rows, path.oneSeq
					step, err := e.CaptureStep(st)
					if err != nil {
						b.Fatal(err)
					}
					defer step.Destroy()
					for range 20 {
						if err := step.Step(ids, logits); err != nil {
							b.Fatal(err)
						}
					}
					for b.Loop() {
						if err := step.Step(ids, logits); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/step")
				})
			}
			for _, v := range append(scanVariants, scanVariant{staged: true, chunk: 64, onePass: -1, dtProj: "cuda_cores"}) {
				for _, B := range []int{1, 8} {
					if B > 1 && v.dtProj == "cuda_cores" {
						continue
					}
					b.Run(fmt.Sprintf("prefill_B%d_T2048_%s", B, v), func(b *testing.B) {
						v.set(e)
						stB, err := e.NewState(B)
						if err != nil {
							b.Fatal(err)
						}
						defer stB.(*gpu.State).Free()
						timePrefills(b, e, stB, engine.Input{B: B, T: 2048, IDs: randomIDs(B*2048, 50280)}, s.d)
					})
				}
			}
		})
	}
}

// BenchmarkChunkRows times bf16 eager prefills at B=1 of the 130m and 370m
// shapes, T=2048 and T=8192, with prompts cut into passes of at most
// Engine.ChunkRows rows. (On the H200 at 3662550, T=8192 in one pass ran
// 868k tok/s at 130m against 631k at T=2048, and 316k against 244k at 370m;
// passes of 4096, 2048 and 1024 rows only lowered it: 760k, 642k and 432k
// at 130m. A T=2048 pass is the slow one, not a long prompt's: its fixed
// costs per launch are spread over fewer tokens.)
func BenchmarkChunkRows(b *testing.B) {
	gputest.Need(b)
	for _, s := range []struct {
		name      string
		d, layers int
	}{{"130m", 768, 24}, {"370m", 1024, 48}} {
		b.Run(s.name, func(b *testing.B) {
			e, st := bf16Engine(b, s.d, s.layers)
			ids := randomIDs(8192, 50280)
			for _, T := range []int{2048, 8192} {
				for _, rows := range []int{16384, 4096, 2048, 1024} {
					if rows > T && rows != 16384 {
						continue
					}
					b.Run(fmt.Sprintf("T%d_rows%d", T, rows), func(b *testing.B) {
						e.ChunkRows = rows
						timePrefills(b, e, st, engine.Input{B: 1, T: T, IDs: ids[:T]}, s.d)
					})
				}
			}
		})
	}
}

// bf16Engine returns a bf16 engine on GPU 0 for a random model of width d and
// layers layers (vocabulary 50280), closed at cleanup, and a state for one
// sequence.
func bf16Engine(b *testing.B, d, layers int) (*gpu.Engine, engine.State) {
	b.Helper()
	e, err := gpu.New(fixture.RandomWeights(fixture.Shape(d, layers, 50280), 1), 0, cuda.BF16)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := e.Close(); err != nil {
			b.Error(err)
		}
	})
	st, err := e.NewState(1)
	if err != nil {
		b.Fatal(err)
	}
	return e, st
}

// BenchmarkScanVariants times bf16 prefills of the 130m, 370m, 1.4b and
// 2.8b shapes at B=1 and B=8 (T=2048, and T=8192 for 130m and 370m at
// B=1) with the chunked scan (L64_onepass-1), the one-pass scan at 2 and 4
// states a thread, and the engine's pick (L64_onepass0, OnePassStates).
func BenchmarkScanVariants(b *testing.B) {
	gputest.Need(b)
	type size struct{ B, T int }
	for _, sh := range []struct {
		name      string
		d, layers int
		sizes     []size
	}{{"130m", 768, 24, []size{{1, 2048}, {1, 8192}, {8, 2048}}}, {"370m", 1024, 48, []size{{1, 2048}, {1, 8192}}},
		{"1.4b", 2048, 48, []size{{1, 2048}, {8, 2048}}}, {"2.8b", 2560, 64, []size{{1, 2048}, {8, 2048}}}} {
		b.Run(sh.name, func(b *testing.B) {
			e, _ := bf16Engine(b, sh.d, sh.layers)
			for _, sz := range sh.sizes {
				st, err := e.NewState(sz.B)
				if err != nil {
					b.Fatal(err)
				}
				in := engine.Input{B: sz.B, T: sz.T, IDs: randomIDs(sz.B*sz.T, 50280)}
				for _, onePass := range []int{-1, 2, 4, 0} {
					b.Run(fmt.Sprintf("B%d_T%d/L64_onepass%d", sz.B, sz.T, onePass), func(b *testing.B) {
						e.ScanChunk, e.ScanOnePass = 64, onePass
						timePrefills(b, e, st, in, sh.d)
					})
				}
				if err := st.(*gpu.State).Free(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// timePrefills times eager prefills of in (last position pooled, hidden
// size d) from st after three untimed ones, and reports tokens a second.
func timePrefills(b *testing.B, e *gpu.Engine, st engine.State, in engine.Input, d int) {
	b.Helper()
	out := make([]float32, in.B*d)
	for range 3 {
		if err := e.Prefill(st, in, engine.Last, out); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if err := e.Prefill(st, in, engine.Last, out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(in.B*in.T*b.N)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkPrefillGemm times bf16 prefills (T=2048, graph replays) of the
// 130m, 370m and 1.4b shapes at B=1 and of the 130m and 2.8b shapes at B=8
// with each way of running the GEMMs (cuda.GemmAlgo), in one engine a
// shape, a graph captured for each.
func BenchmarkPrefillGemm(b *testing.B) {
	gputest.Need(b)
	for _, sh := range prefillShapes {
		b.Run(fmt.Sprintf("%s/B%d_T%d", sh.name, sh.B, sh.T), func(b *testing.B) {
			e, _ := bf16Engine(b, sh.d, sh.layers)
			st, err := e.NewState(sh.B)
			if err != nil {
				b.Fatal(err)
			}
			in, out := engine.Input{B: sh.B, T: sh.T, IDs: randomIDs(sh.B*sh.T, 50280)}, make([]float32, sh.B*sh.d)
			for _, algo := range []cuda.GemmAlgo{cuda.GemmEx, cuda.GemmLt, cuda.GemmLtTuned} {
				b.Run(algo.String(), func(b *testing.B) {
					if err := e.SetGemmAlgo(algo); err != nil {
						b.Fatal(err)
					}
					g, err := e.CapturePrefill(st, "ids", sh.T, engine.Last)
					if err != nil {
						b.Fatal(err)
					}
					defer g.Destroy()
					for range 3 {
						if err := g.Prefill(in, out); err != nil {
							b.Fatal(err)
						}
					}
					for b.Loop() {
						if err := g.Prefill(in, out); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(in.B*in.T*b.N)/b.Elapsed().Seconds(), "tok/s")
				})
			}
		})
	}
}

// BenchmarkPrefillPDL times bf16 prefills (T=2048) of the 130m, 370m and
// 1.4b shapes at B=1 and of the 130m and 2.8b shapes at B=8 with
// Engine.PrefillPDL off and on (compareSettings).
func BenchmarkPrefillPDL(b *testing.B) {
	compareSettings(b, "pdl", prefillShapes, func(e *gpu.Engine, on bool) { e.PrefillPDL = on })
}

// BenchmarkResidualPrefetch times bf16 prefills with
// Engine.ResidualPrefetch off and at New's setting (a quarter of L2), at
// the shapes of prefillShapes and at 130m B=1 T=8192 (compareSettings).
func BenchmarkResidualPrefetch(b *testing.B) {
	quarter := gputest.Device(b).L2Bytes / 4
	compareSettings(b, "residual prefetch", append([]benchShape{shape("130m", 1, 8192)}, prefillShapes...),
		func(e *gpu.Engine, on bool) {
			e.ResidualPrefetch = 0
			if on {
				e.ResidualPrefetch = quarter
			}
		})
}

// BenchmarkEmbedNorm times bf16 prefills with Engine.EmbedNorm off and on
// (compareSettings), at the shapes of prefillShapes and at 130m and 370m
// B=1 T=8192.
func BenchmarkEmbedNorm(b *testing.B) {
	shapes := append([]benchShape{shape("130m", 1, 8192), shape("370m", 1, 8192)}, prefillShapes...)
	compareSettings(b, "embednorm", shapes, func(e *gpu.Engine, on bool) { e.EmbedNorm = on })
}

// BenchmarkScanTMA times bf16 prefills with Engine.ScanTMA off and on
// (compareSettings) at the 130m and 370m shapes at B=1, T=2048 and 8192,
// where the scan's tiles come through the copy engine with it on.
func BenchmarkScanTMA(b *testing.B) {
	shapes := []benchShape{shape("130m", 1, 2048), shape("130m", 1, 8192), shape("370m", 1, 2048),
		shape("370m", 1, 8192)}
	compareSettings(b, "scantma", shapes, func(e *gpu.Engine, on bool) { e.ScanTMA = on })
}

// BenchmarkInPlaceReplays times bf16 prefills with Engine.InPlaceReplays
// off (ids and output copied through the graph's own buffers) and on
// (compareSettings), at the 130m and 370m shapes at B=1, T=2048 and 8192;
// then again with the order of the two reversed in each round ("copies":
// above 1, copying is the faster), since compareSettings always runs off
// first.
func BenchmarkInPlaceReplays(b *testing.B) {
	shapes := []benchShape{shape("130m", 1, 2048), shape("130m", 1, 8192), shape("370m", 1, 2048), shape("370m", 1, 8192)}
	compareSettings(b, "in place", shapes, func(e *gpu.Engine, on bool) { e.InPlaceReplays = on })
	compareSettings(b, "copies", shapes, func(e *gpu.Engine, on bool) { e.InPlaceReplays = !on })
}

// BenchmarkPoisonOutputs times bf16 prefills with Engine.PoisonOutputs on
// and off (compareSettings, which runs "off" first in each round; "no
// poison": above 1, leaving the poison out is the faster), at the 130m and
// 370m shapes at B=1, T=2048 and 8192; then with the order reversed.
func BenchmarkPoisonOutputs(b *testing.B) {
	shapes := []benchShape{shape("130m", 1, 2048), shape("130m", 1, 8192), shape("370m", 1, 2048), shape("370m", 1, 8192)}
	compareSettings(b, "no poison", shapes, func(e *gpu.Engine, on bool) { e.PoisonOutputs = !on })
	compareSettings(b, "poison", shapes, func(e *gpu.Engine, on bool) { e.PoisonOutputs = on })
}

// BenchmarkEngineInstances asks whether a bf16 prefill's speed follows the
// engine instance within one process, or what ran before it: an engine of
// one shape (130m and 370m, B=1, T=2048) runs a round of 15 graph replays
// alone; a 370m engine then runs T=8192 once and is closed; a second
// engine of the shape is built, and the two, both alive, take turns over
// three rounds. Each round's median is logged with the engines' placement
// (Engine.Placement). compareSettings' second pass of a shape, after its
// T=8192 shapes, ran about 2% slower at 130m and 370m T=2048 in two
// sessions. Run it alone (-test.bench EngineInstances), so that its first
// engine is the process's first.
func BenchmarkEngineInstances(b *testing.B) {
	for _, sh := range []benchShape{shape("130m", 1, 2048), shape("370m", 1, 2048)} {
		b.Run(fmt.Sprintf("%s/B%d_T%d", sh.name, sh.B, sh.T), func(b *testing.B) {
			type instance struct {
				e       *gpu.Engine
				replays func() []float64
			}
			var engines []instance
			for round := range 4 {
				if round < 2 {
					e, replays := prefillReplays(b, sh)
					engines = append(engines, instance{e, replays})
				}
				for i, in := range engines {
					ms := gputest.Median(in.replays())
					b.Logf("instance %s round %d engine %d: %.3f ms", sh.name, round, i, ms)
				}
				if round == 0 {
					b.Run("370m_T8192_dropped", func(b *testing.B) { // closed as it ends
						_, replays := prefillReplays(b, shape("370m", 1, 8192))
						b.Logf("instance %s: a 370m engine ran T=8192 in %.3f ms, closed", sh.name,
							gputest.Median(replays()))
					})
				}
			}
			for i, in := range engines {
				b.Logf("instance %s engine %d placement: %s", sh.name, i, in.e.Placement())
			}
		})
	}
}

// BenchmarkTwoPasses tries to reproduce the slow second pass
// (results/2026-12-02-poison.md, runs 3-7): the four B=1 shapes that
// compareSettings' benchmarks time, each on a fresh engine that is closed
// after it (as there), twice over in one process. $TWOPASS_SHAPES replaces
// that sequence with its own, as "130m:2048,370m:8192,768x96:2048" (a size,
// or a width and a count of layers, and a length). Each step
// logs its graph replays' median (six rounds of 15, as compareSettings' two
// settings make) and, unless $TWOPASS_STAGES is 0, its eager stage table
// (CUDA events a stage, 5 prefills), so that a slower step shows where its
// time goes. Two probes tell the engine's memory from the process's state:
// with $TWOPASS_KEEP=1 the first step's engine stays open and is timed again
// after each later step; $TWOPASS_PADS, as "0,1,3", holds that many MB of
// device memory while a step builds and times its engine, so that its
// buffers land elsewhere. $TWOPASS_SLEEPS, as "0,0,40", idles that many
// seconds before a step (to let the GPU cool); $TWOPASS_LONG_GEMM=lt runs
// the GEMMs of steps longer than 2048 on cuBLASLt's heuristic pick instead of
// the tuned one (whose tuning launches every candidate). Each line starts with the
// time of day, to be read beside nvidia-smi's log.
func BenchmarkTwoPasses(b *testing.B) {
	var steps []benchShape
	if list := os.Getenv("TWOPASS_SHAPES"); list != "" {
		for _, item := range strings.Split(list, ",") {
			name, t, _ := strings.Cut(item, ":")
			T, err := strconv.Atoi(t)
			sh := shape(name, 1, T)
			if w, l, ok := strings.Cut(name, "x"); ok { // width x layers
				sh.d, _ = strconv.Atoi(w)
				sh.layers, _ = strconv.Atoi(l)
			}
			if err != nil || sh.d <= 0 || sh.layers <= 0 {
				b.Fatalf("TWOPASS_SHAPES: %q is not size:length (size 130m, 370m, 1.4b, 2.8b or width x layers)", item)
			}
			steps = append(steps, sh)
		}
	} else {
		shapes := []benchShape{shape("130m", 1, 2048), shape("130m", 1, 8192), shape("370m", 1, 2048), shape("370m", 1, 8192)}
		steps = append(shapes, shapes...)
	}
	stages := os.Getenv("TWOPASS_STAGES") != "0"
	counts := func(name string) []int {
		var n []int
		for _, f := range strings.FieldsFunc(os.Getenv(name), func(r rune) bool { return r == ',' }) {
			c, err := strconv.Atoi(f)
			if err != nil || c < 0 {
				b.Fatalf("%s: %q is not a count", name, f)
			}
			n = append(n, c)
		}
		return n
	}
	pads, sleeps := counts("TWOPASS_PADS"), counts("TWOPASS_SLEEPS")
	// median times six rounds of replays, each of a graph captured anew: the
	// median and least of all, and each round's median.
	median := func(replays func() []float64) (float64, float64, string) {
		var times []float64
		var rounds []string
		for range 6 {
			ms := replays()
			times = append(times, ms...)
			rounds = append(rounds, fmt.Sprintf("%.3f", gputest.Median(ms)))
		}
		return gputest.Median(times), slices.Min(times), strings.Join(rounds, " ")
	}
	var keptEngine *gpu.Engine
	var kept func() ([]float64, error) // the first step's engine's replays, with $TWOPASS_KEEP=1
	if os.Getenv("TWOPASS_KEEP") == "1" {
		keptEngine, kept = prefillReplaysErr(b, steps[0]) // closed when the benchmark ends
	}
	for i, sh := range steps {
		b.Run(fmt.Sprintf("step%d/%s/B%d_T%d", i, sh.name, sh.B, sh.T), func(b *testing.B) {
			if i < len(sleeps) {
				time.Sleep(time.Duration(sleeps[i]) * time.Second)
			}
			if i < len(pads) && pads[i] > 0 {
				gputest.Device(b)
				gputest.Alloc(b, pads[i]<<20) // freed when the step ends
			}
			keptReplays := func() []float64 {
				ms, err := kept()
				if err != nil {
					b.Fatal(err)
				}
				return ms
			}
			var e *gpu.Engine
			var replays func() []float64
			if i == 0 && kept != nil {
				e, replays = keptEngine, keptReplays
			} else {
				e, replays = prefillReplays(b, sh)
			}
			if os.Getenv("TWOPASS_HOIST") == "0" {
				e.HoistMemsets = false
			}
			if sh.T > 2048 && os.Getenv("TWOPASS_LONG_GEMM") == "lt" { // the heuristic's pick: no tuning's candidates
				if err := e.SetGemmAlgo(cuda.GemmLt); err != nil {
					b.Fatal(err)
				}
			}
			med, low, rounds := median(replays)
			table := "(not taken)"
			if stages {
				st, err := e.NewState(sh.B)
				if err != nil {
					b.Fatal(err)
				}
				in := engine.Input{B: sh.B, T: sh.T, IDs: randomIDs(sh.B*sh.T, 50280)}
				last := make([]float32, sh.B*sh.d)
				table = stageTable(b, e, func() {
					if err := e.Prefill(st, in, engine.Last, last); err != nil {
						b.Fatal(err)
					}
				})
			}
			b.Logf("two passes: %s step %d %s T=%d: %.3f ms a replay (min %.3f; rounds %s); eager stages:\n%s",
				time.Now().Format(time.TimeOnly), i, sh.name, sh.T, med, low, rounds, table)
			if kept != nil && i > 0 {
				med, low, rounds := median(keptReplays)
				b.Logf("two passes: %s step %d, the first step's engine again: %.3f ms a replay (min %.3f; rounds %s)",
					time.Now().Format(time.TimeOnly), i, med, low, rounds)
			}
		})
	}
}

// BenchmarkMemsetEdits times bf16 prefills with cuBLASLt's memsets as
// captured, against each edit (Engine.MemsetKernels, Engine.HoistMemsets,
// both), at the shapes of prefillShapes and at 130m and 370m B=1 T=8192
// (compareSettings); then Engine.FoldMemsets against both edits without
// it (the engine's setting before it). $MEMSET_EDITS=fold runs the last
// part only.
func BenchmarkMemsetEdits(b *testing.B) {
	shapes := append([]benchShape{shape("130m", 1, 8192), shape("370m", 1, 8192)}, prefillShapes...)
	if os.Getenv("MEMSET_EDITS") != "fold" {
		for _, edit := range []struct {
			label          string
			kernels, hoist bool
		}{{"memset kernels", true, false}, {"memsets hoisted", false, true}, {"memset kernels hoisted", true, true}} {
			compareSettings(b, edit.label, shapes, func(e *gpu.Engine, on bool) {
				e.MemsetKernels, e.HoistMemsets, e.FoldMemsets = on && edit.kernels, on && edit.hoist, false
			})
		}
	}
	compareSettings(b, "memsets folded", shapes, func(e *gpu.Engine, on bool) {
		e.MemsetKernels, e.HoistMemsets, e.FoldMemsets = true, true, on
	})
}

// BenchmarkScanSegments times bf16 prefills with the one-pass scan walked
// once against walked in segments (Engine.ScanSegments): OnePassSegments'
// pick at the B=1 shapes of the bars, and 3, 5 and 6 segments at 130m B=1
// T=2048 (compareSettings). $SEGMENT_BENCH=auto runs the first part only.
func BenchmarkScanSegments(b *testing.B) {
	shapes := []benchShape{shape("130m", 1, 2048), shape("130m", 1, 8192), shape("370m", 1, 2048),
		shape("370m", 1, 8192), shape("130m", 2, 2048)}
	compareSettings(b, "segments (auto)", shapes, func(e *gpu.Engine, on bool) {
		e.ScanSegments = -1
		if on {
			e.ScanSegments = 0
		}
	})
	if os.Getenv("SEGMENT_BENCH") == "auto" {
		return
	}
	for _, S := range []int{3, 5, 6} {
		compareSettings(b, fmt.Sprintf("segments (%d)", S), shapes[:1], func(e *gpu.Engine, on bool) {
			e.ScanSegments = -1
			if on {
				e.ScanSegments = S
			}
		})
	}
}

// BenchmarkFusedConvXProj times bf16 prefills with the conv and x_proj as
// two nodes against one kernel (Engine.FusedConvXProj) at the B=1 shapes of
// the bars where it applies, 130m and 370m (compareSettings).
func BenchmarkFusedConvXProj(b *testing.B) {
	shapes := []benchShape{shape("130m", 1, 2048), shape("130m", 1, 8192), shape("370m", 1, 2048),
		shape("370m", 1, 8192)}
	compareSettings(b, "fused conv and x_proj", shapes, func(e *gpu.Engine, on bool) { e.FusedConvXProj = on })
}

// BenchmarkOwnXProj times bf16 prefills with x_proj on cuBLAS's GEMM
// against our kernel's tensor-map entry (Engine.OwnXProj with XProjTMA, and
// AutoXProj off) where it applies: 130m and 370m at B=1 (T=512, 2048, 8192) and 130m at
// B=8 (compareSettings). (The row-copy entry, 0.90-0.96x, was timed so on
// 2026-12-01.)
func BenchmarkOwnXProj(b *testing.B) {
	shapes := []benchShape{shape("130m", 1, 2048), shape("130m", 1, 8192), shape("130m", 1, 512),
		shape("370m", 1, 2048), shape("370m", 1, 8192), shape("130m", 8, 2048)}
	compareSettings(b, "own x_proj, tensor maps", shapes, func(e *gpu.Engine, on bool) {
		e.OwnXProj, e.XProjTMA, e.AutoXProj = on, on, false
	})
}

// BenchmarkXProjSlices times bf16 prefills with AutoXProj's tensor-map
// entry in clusters of 4 (off) and of 3 (on), at lengths its policy takes.
func BenchmarkXProjSlices(b *testing.B) {
	shapes := []benchShape{shape("130m", 1, 2048), shape("130m", 1, 1024), shape("130m", 1, 512)}
	compareSettings(b, "x_proj in clusters of 3", shapes, func(e *gpu.Engine, on bool) {
		e.XProjSlices = 4
		if on {
			e.XProjSlices = 3
		}
	})
}

// prefillShapes are the bf16 prefills the engine's settings are compared
// on: T=2048, the 130m, 370m and 1.4b shapes at B=1, the 130m and 2.8b
// shapes at B=8.
var prefillShapes = []benchShape{shape("130m", 1, 2048), shape("370m", 1, 2048), shape("1.4b", 1, 2048),
	shape("130m", 8, 2048), shape("2.8b", 8, 2048)}

// benchShape is a random bf16 model (width d, layers layers) and a prefill
// of B sequences of T positions.
type benchShape struct {
	name         string
	d, layers, B int
	T            int
}

// shape is the benchShape of a Mamba-1 size ("130m", "370m", "1.4b" or
// "2.8b": its width and layers) at B sequences of T positions.
func shape(name string, B, T int) benchShape {
	size := map[string]struct{ d, layers int }{"130m": {768, 24}, "370m": {1024, 48}, "1.4b": {2048, 48},
		"2.8b": {2560, 64}}[name]
	return benchShape{name, size.d, size.layers, B, T}
}

// compareSettings times each shape's bf16 prefill (device-entry graph
// replays timed with CUDA events) with a setting off and on (set): the
// median of 15 replays a setting and round, the settings taking turns over
// three rounds, a graph captured for each; it logs a line per shape
// starting with label.
func compareSettings(b *testing.B, label string, shapes []benchShape, set func(e *gpu.Engine, on bool)) {
	gputest.Need(b)
	for _, sh := range shapes {
		b.Run(fmt.Sprintf("%s/B%d_T%d", sh.name, sh.B, sh.T), func(b *testing.B) {
			e, replays := prefillReplays(b, sh)
			times := map[bool][]float64{}
			for round := 0; round < 3; round++ {
				for _, on := range []bool{false, true} {
					set(e, on)
					times[on] = append(times[on], replays()...)
				}
			}
			off, on := gputest.Median(times[false]), gputest.Median(times[true])
			tok := float64(sh.B * sh.T)
			b.Logf("%s %s B=%d T=%d: off %.3f ms (%.0f tok/s), on %.3f ms (%.0f tok/s): %.3fx",
				label, sh.name, sh.B, sh.T, off, tok/off*1e3, on, tok/on*1e3, off/on)
		})
	}
}

// BenchmarkPrefillShapes times the bf16 prefill of each shape the speed
// bars name at B=1 (T=2048 and T=8192) and at B=8 (T=2048): the median of
// 45 device-entry graph replays (three rounds of 15, each with a fresh
// graph), timed with CUDA events. It logs the candidate the process's
// cuBLASLt tuning chose for each GEMM (tunedPicks), which can differ
// between processes. Two builds compare through it as ratios
// of runs that take turns (scripts/device_run.sh ab). The B=1 T=2048 shapes
// run first: after T=8192 prefills a process can fall into a state where
// each graph node launches about 0.35 µs later, which costs T=2048 1.5-2%
// and T=8192 little (results/2026-12-02-slowpass.md).
// GEMM_CANDIDATES sets the tuning's cuBLASLt candidates (8 by default).
func BenchmarkPrefillShapes(b *testing.B) {
	gputest.Need(b)
	defer gemmCandidatesFromEnv()()
	for _, sh := range []benchShape{shape("130m", 1, 2048), shape("370m", 1, 2048), shape("1.4b", 1, 2048),
		shape("130m", 1, 8192), shape("370m", 1, 8192), shape("130m", 8, 2048), shape("2.8b", 8, 2048)} {
		b.Run(fmt.Sprintf("%s/B%d_T%d", sh.name, sh.B, sh.T), func(b *testing.B) {
			e, replays := prefillReplays(b, sh)
			var times []float64
			for round := 0; round < 3; round++ {
				times = append(times, replays()...)
			}
			b.Logf("tuned %s/B%d_T%d: %s", sh.name, sh.B, sh.T, tunedPicks(e.Config(), sh.B*sh.T))
			ms := gputest.Median(times)
			b.ReportMetric(ms, "ms")
			b.ReportMetric(float64(sh.B*sh.T)/ms*1e3, "tok/s")
		})
	}
}

// prefillReplays builds the shape's random bf16 engine, its state, ids and
// output on the device, and returns it with replays: each call captures a
// fresh prefill graph (so a changed engine setting takes effect) and returns
// the times of 15 device-entry replays in milliseconds, after a warm-up.
func prefillReplays(b *testing.B, sh benchShape) (*gpu.Engine, func() []float64) {
	b.Helper()
	e, replays := prefillReplaysErr(b, sh)
	return e, func() []float64 {
		ms, err := replays()
		if err != nil {
			b.Fatal(err)
		}
		return ms
	}
}

// prefillReplaysErr is prefillReplays whose replays return their error.
func prefillReplaysErr(b *testing.B, sh benchShape) (*gpu.Engine, func() ([]float64, error)) {
	b.Helper()
	e, _ := bf16Engine(b, sh.d, sh.layers)
	st, err := e.NewState(sh.B)
	if err != nil {
		b.Fatal(err)
	}
	stream, in, out := gputest.EntryBuffers(b, sh.B, sh.T, sh.d, 50280)
	return e, func() ([]float64, error) {
		for _, n := range []int{0, 1} { // drop the cached graph: the next prefill captures anew
			if err := e.SetPrefillGraphs(n); err != nil {
				return nil, err
			}
		}
		return eventTimes(stream, 15, func() error {
			return e.PrefillDevice(st, "ids", uintptr(in.Ptr), cuda.F32, sh.B, sh.T, engine.Last, gpu.Output{Ptr: uintptr(out.Ptr), Type: cuda.F32}, stream.Handle())
		})
	}
}

// layerGemm is one of a layer's GEMMs: its name, and its N and K for
// rows of the prompt (M).
type layerGemm struct {
	name string
	N, K int
}

// layerGemms lists a layer's GEMMs under c: in_proj, x_proj, out_proj.
func layerGemms(c checkpoint.Config) []layerGemm {
	return []layerGemm{{"in_proj", 2 * c.Inner, c.Hidden}, {"x_proj", c.DTRank + 2*c.State, c.Inner},
		{"out_proj", c.Hidden, c.Inner}}
}

// tunedPicks says which of cuBLASLt's candidates this process's tuning
// chose for each of a layer's GEMMs at rows rows ("-": not run through the
// tuning, as x_proj on our own kernel): "in_proj 2, x_proj -, out_proj 1".
func tunedPicks(c checkpoint.Config, rows int) string {
	var parts []string
	for _, g := range layerGemms(c) {
		pick := "-"
		if i, ok := cuda.TunedGemmCandidate(rows, g.N, g.K); ok {
			pick = fmt.Sprint(i)
		}
		parts = append(parts, g.name+" "+pick)
	}
	return strings.Join(parts, ", ")
}

// BenchmarkGemmCandidates times bf16 prefills (graph replays, CUDA events)
// with each GEMM of the layers (in_proj, x_proj, out_proj) pinned in turn
// to each of cuBLASLt's candidates (cuda.PinGemmCandidate), against the
// tuned choice, the two taking turns over two rounds of 15 replays. The
// tuning times candidates alone with their operands in L2; this asks whether
// another candidate does better where the GEMM really runs, between the
// layer's other kernels. A line per shape and GEMM gives the tuned choice's
// place and each candidate's speed against it (above 1: faster).
// GEMM_CANDIDATES sets how many of cuBLASLt's candidates the tuning times
// and the pins reach (cuda.SetGemmCandidates; 8 by default), and
// CAND_SHAPES the shapes (envShapes; 130m T=2048 and 8192, 370m T=2048 by
// default).
func BenchmarkGemmCandidates(b *testing.B) {
	gputest.Need(b)
	defer gemmCandidatesFromEnv()()
	shapes := envShapes(b, "CAND_SHAPES", []benchShape{shape("130m", 1, 2048), shape("130m", 1, 8192), shape("370m", 1, 2048)})
	for _, sh := range shapes {
		b.Run(fmt.Sprintf("%s/B%d_T%d", sh.name, sh.B, sh.T), func(b *testing.B) {
			e, replays := prefillReplaysErr(b, sh)
			if _, err := replays(); err != nil { // the tuning, once
				b.Fatal(err)
			}
			rows := sh.B * sh.T
			for _, g := range layerGemms(e.Config()) {
				tuned, ok := cuda.TunedGemmCandidate(rows, g.N, g.K)
				if !ok { // not on cuBLASLt in this prefill (x_proj on our kernel)
					b.Logf("candidates %s B=%d T=%d %s: not a cuBLASLt GEMM here", sh.name, sh.B, sh.T, g.name)
					continue
				}
				line := fmt.Sprintf("candidates %s B=%d T=%d %s (%d x %d x %d, tuned: %d):", sh.name, sh.B, sh.T, g.name,
					rows, g.N, g.K, tuned)
				for i := 0; ; i++ {
					var off, on []float64
					for range 2 {
						cuda.PinGemmCandidate(rows, g.N, g.K, -1)
						ms, err := replays()
						if err != nil {
							b.Fatal(err)
						}
						off = append(off, ms...)
						cuda.PinGemmCandidate(rows, g.N, g.K, i)
						if ms, err = replays(); errors.Is(err, cuda.ErrNoCandidate) {
							break
						} else if err != nil {
							b.Fatal(err)
						}
						on = append(on, ms...)
					}
					cuda.PinGemmCandidate(rows, g.N, g.K, -1)
					if len(on) == 0 {
						break
					}
					line += fmt.Sprintf("  %d %.3fx", i, gputest.Median(off)/gputest.Median(on))
				}
				b.Log(line)
			}
		})
	}
}

// envShapes reads a list of bench shapes from the environment variable
// name, as "1.4b:128,2.8b:512:8" (size:T, or size:T:B; B is 1 where left
// out), or returns def where it is unset.
func envShapes(b *testing.B, name string, def []benchShape) []benchShape {
	list := os.Getenv(name)
	if list == "" {
		return def
	}
	var shapes []benchShape
	for _, item := range strings.Split(list, ",") {
		f := strings.Split(item, ":")
		B, T, err := 1, 0, error(nil)
		if len(f) >= 2 {
			T, err = strconv.Atoi(f[1])
		}
		if len(f) == 3 && err == nil {
			B, err = strconv.Atoi(f[2])
		}
		sh := shape(f[0], B, T)
		if len(f) < 2 || len(f) > 3 || err != nil || sh.d == 0 || B <= 0 || T <= 0 {
			b.Fatalf("%s: %q is not size:T or size:T:B (size 130m, 370m, 1.4b or 2.8b)", name, item)
		}
		shapes = append(shapes, sh)
	}
	return shapes
}

// gemmCandidatesFromEnv sets the tuning's cuBLASLt candidates to
// $GEMM_CANDIDATES where that is a number (cuda.SetGemmCandidates) and
// returns what puts the bound back.
func gemmCandidatesFromEnv() func() {
	n, err := strconv.Atoi(os.Getenv("GEMM_CANDIDATES"))
	if err != nil {
		return func() {}
	}
	prev := cuda.SetGemmCandidates(n)
	return func() { cuda.SetGemmCandidates(prev) }
}

// eventTimes runs fn once to warm up, then n more times, each between two
// CUDA events on s, and returns the n times in milliseconds.
func eventTimes(s *cuda.Stream, n int, fn func() error) ([]float64, error) {
	if err := fn(); err != nil {
		return nil, err
	}
	events := make([]*cuda.Event, 2*n)
	for i := range events {
		ev, err := cuda.NewEvent()
		if err != nil {
			return nil, err
		}
		defer ev.Destroy()
		events[i] = ev
	}
	for i := range n {
		if err := events[2*i].Record(s); err != nil {
			return nil, err
		}
		if err := fn(); err != nil {
			return nil, err
		}
		if err := events[2*i+1].Record(s); err != nil {
			return nil, err
		}
	}
	if err := s.Synchronize(); err != nil {
		return nil, err
	}
	ms := make([]float64, n)
	for i := range ms {
		t, err := cuda.Elapsed(events[2*i], events[2*i+1])
		if err != nil {
			return nil, err
		}
		ms[i] = float64(t)
	}
	return ms, nil
}

// BenchmarkFusedOutNorm compares bf16 prefills with out_proj and the next
// layer's RMSNorm fused (Engine.FusedOutNorm) and not, at the 130m width
// where the kernel applies, B=1 and B=8.
func BenchmarkFusedOutNorm(b *testing.B) {
	shapes := []benchShape{shape("130m", 1, 2048), shape("130m", 1, 8192), shape("130m", 1, 512),
		shape("130m", 8, 2048)}
	compareSettings(b, "fused out_proj and norm", shapes, func(e *gpu.Engine, on bool) { e.FusedOutNorm = on })
}

// BenchmarkScanHelpers times bf16 prefills with the one-pass scan's plain
// entry against its entry whose warps specialize (Engine.ScanHelpers, with
// dt_proj's own kernel: ScanDTProj off), the settings taking turns, at the
// shapes that walk 2 states a thread.
func BenchmarkScanHelpers(b *testing.B) {
	shapes := []benchShape{shape("130m", 1, 2048), shape("130m", 1, 8192), shape("130m", 1, 512),
		shape("370m", 1, 2048), shape("1.4b", 1, 2048)}
	compareSettings(b, "scan helpers", shapes, func(e *gpu.Engine, on bool) { e.ScanHelpers, e.ScanDTProj = on, false })
}

// BenchmarkScanDTProj times bf16 prefills with the one-pass scan's plain
// entry and dt_proj's kernel against the entry whose warps specialize and
// compute the time step in its tiles (Engine.ScanHelpers and
// Engine.ScanDTProj), the settings taking turns.
func BenchmarkScanDTProj(b *testing.B) {
	shapes := []benchShape{shape("130m", 1, 2048), shape("130m", 1, 8192), shape("130m", 1, 512),
		shape("370m", 1, 2048)}
	compareSettings(b, "scan helpers and dt_proj", shapes, func(e *gpu.Engine, on bool) {
		e.ScanHelpers, e.ScanDTProj = on, on
	})
}
