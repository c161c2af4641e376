#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with .carry/ from
# scripts/device_build.sh. Logs and JSON go to $OUT (or ./out).
# Usage: bash scripts/device_run.sh [commit] [ab|gpu|gpubench|verify|profile|dtproj|sourceprof|kerneltimes|decodeprof|mamba_ssm|cpu|all]
# (several modes: separate them with commas, e.g. mamba_ssm,kerneltimes)
#   gpu:      the CUDA binding, kernel, engine and mambago package tests, the Python tests,
#             compute-sanitizer memcheck over the kernel and engine fixture
#             tests, and racecheck over the scan kernel's test;
#   tests:    gpu's tests alone (CUDA binding, kernels, engine, mambago, pytest),
#             without the sanitizers. On a fresh machine the Go binaries
#             alone took about 530 s on 2026-12-05 (NVRTC compiles every
#             kernel cold: TestCompileAll 116 s), so the call ran past 600 s
#             in pytest; give pytest a call of its own there (TESTS_PYTEST=0,
#             then pytest mode);
#   sanitize: gpu's compute-sanitizer part alone (memcheck over the kernel
#             tests, the engine's prefill tests and its decode tests, and
#             racecheck over the scan kernel's test; up to 9 minutes, so
#             best on a call of its own);
#   gpubench: the GPU stage times, then the GPU prefill benchmark against HF
#             (bench/gpu_vs_hf.py, with $BENCH_ARGS, e.g. "--shapes 130m,370m").
#             Without BENCH_ARGS it times transformers' f32 model at every
#             shape and runs past a call's 600 s; issue 3's bars need only
#             GPU_STAGES=0 BENCH_ARGS="--shapes 130m,1.4b --lengths 2048 --batches 1,8 --repeats 5";
#   verify:   gpu, then the Go stage benchmark, the scan variants, the XU
#             microbenchmarks and the 1.4b/2.8b decode and prefill variants:
#             one call for a branch's first run on the GPU (about 5 minutes);
#   profile:  ncu's per-kernel times for a 1.4b decode step and for dt_proj;
#   onepass:  the scan and dt_proj kernels' tests (the one-pass scan at 2 and
#             4 states a thread, dt_proj on one TF32 product) with racecheck
#             and memcheck, the mixed-precision engine tests, then bf16
#             prefills with each scan (BenchmarkScanVariants), and ncu on the
#             one-pass scan (about 3 minutes);
#   padcheck: the padded-batch tests (Go and Python; the device entry's too)
#             with memcheck over the engine's;
#   padded:   a left-padded bf16 batch as one prefill (new, and continuing a state) against
#             a prefill per row length (bench/padded.py, $PADDED_SHAPE or 130m);
#   entry:    a bf16 device-entry prefill's time per call, back to back and
#             on the host (bench/entry_overhead.py; 130m and 1.4b, B=1,
#             or $ENTRY_SHAPES), then the Go side's host time call by call
#             (BenchmarkEntryHost);
#   memsets:  Engine.MemsetKernels, HoistMemsets and FoldMemsets (cuBLASLt's
#             workspace memsets in a graph as kernels, started beside the
#             kernel before them, or folded into it): the tests, memcheck,
#             bf16 prefills with each edit off and on (BenchmarkMemsetEdits;
#             $MEMSET_BENCH filters it, MEMSET_EDITS=fold times the fold alone);
#   inplace:  ncu on a bf16 130m prefill graph's nodes, one at a time with
#             the caches as the graph leaves them: each kernel's time, DRAM
#             and L2 bytes (bench/inplace.py; INPLACE_SKIP, INPLACE_COUNT,
#             INPLACE_METRICS);
#   fixup:    scan_fixup's float64 tests and sanitizers, the scan alone walked
#             once against in segments, then bf16 prefills likewise (the
#             kernels' and the engine's BenchmarkScanSegments; about 2 minutes);
#   generate: generation on the decoder (gpu.Decoder): the argmax, top-k and
#             top-p kernels' (racecheck too; not with GEN_KERNELS=0), the page-locked buffer's and the
#             engine's tests with memcheck, the top-k kernel's time, then a
#             token's time
#             (BenchmarkGenerate, and, unless GEN_PYTHON=0, bench/generate_speed.py with $GEN_ARGS,
#             also with .carry/base's wheel where device_build.sh had a BASE);
#   (generate, generatebench: GEN_GO=0 leaves out the Go tests and benchmark,
#   GEN_BENCH=0 the Go benchmark alone)
#   generatebench: generate's engine tests and its timings alone (no kernel
#             tests, no sanitizers; GEN_GO=0: the Python timings alone);
#   layers:   hidden_states from the device entry (gpu.Output.Layers): the
#             device entry tests with memcheck over the new one, pytest's hf,
#             gpu and bad-input tests, then bench/hidden_states.py
#             ($HIDDEN_ARGS), also with .carry/base's wheel where built;
#   sampling: generate's sampling kernels alone (top-k, top-p): their tests
#             and the decoder's, memcheck, racecheck (not with
#             SAMPLING_SANITIZE=0), the kernels' times, .carry/topk_base*.cu's
#             beside them (about 4 minutes; $SAMPLING_TESTS picks other kernel
#             tests, e.g. 'ArgmaxRows|TopKRows');
#   genreuse: the decoder's kept step graph (tests, memcheck), generate
#             without the kernels' part (Python with .carry/base's wheel
#             where built with BASE), then pytest (about 8 minutes);
#   headpick: the greedy pick ranked in the LM head (Engine.HeadPicks):
#             the kernel's and the engine's tests, memcheck and racecheck
#             over the kernel's (-test.short), BenchmarkQueueParts, then
#             pytest and generate's Python timings (with .carry/base's
#             wheel where device_build.sh had a BASE; about 8 minutes);
#   topkdraw: the queued draw from the k best (topk_draw_f32,
#             Decoder.QueueTopK): the kernels' tests (topk_rows_f32 and the
#             draw's edges), memcheck and racecheck over them (-test.short),
#             the kernels' times, the engine's tests (the host's tokens for
#             the same uniforms, generation) with memcheck, then
#             BenchmarkGenerate ("sampled" queued on the device against
#             "+candidates", the host's draw; about 6 minutes);
#   shortgraph: step graphs for short generations (DecoderGraphSteps summed
#             over a state's decoders): the decoders' tests with memcheck,
#             generation's, then BenchmarkGenerateShort (repeated 20-token
#             calls, eager against the kept graph; about 3 minutes);
#   stream:   the streaming one-sequence GEMVs (Engine.GEMVStream): the
#             kernel's and the engine's bit-for-bit tests, memcheck,
#             BenchmarkDecodeStream (B=1 step graphs, off and on; about
#             4 minutes);
#   readfloor: the one-sequence decode GEMVs (1.4b, 2.8b) against kernels
#             that only read the same bytes, at several grids, depths and
#             cache hints (BenchmarkReadFloor; about 2 minutes);
#   readfloorncu: ncu's full set (details, and stall samples by SASS line) on one
#             launch each of gemv_r4_b1_bf16, gemv_sb1_bf16 and read_u8_cs at
#             $READFLOOR_NCU_SHAPES (2.8b_in_proj 2.8b_lm_head), ncu flushing
#             the caches before each; one text file a kernel (about a minute);
#   samplingncu: ncu's full set on one launch each of topp_draw_f32,
#             topp_draw_x8_f32 (all 8 blocks of the cluster) and topk_rows_f32
#             (B=1, a random model's row): the details page and the
#             source page per SASS line (stall samples), for placing their time
#             ($NCU_KERNELS names fewer; what comes back is limited in count);
#   pytest:   the Python tests alone ($PYTEST_ARGS, default "-q -rs tests"; the
#             last $PYTEST_TAIL lines shown);
#   bind:     replays in place (cuda.Graph.Bind; the device entries' graphs
#             reading ids and writing outputs in the caller's buffers): the
#             tests, and memcheck over them;
#   buffers:  the device entries' checks of caller buffers (bench/pointer_probe.py: what
#             the driver says of torch's allocations under each allocator; the Go tests;
#             tests/test_gpu.py, test_hf.py and test_bad_input.py), and on two GPUs cuda:1;
#   entryab:  BenchmarkEntryHost (a device-entry prefill's host time, call by call) of
#             .carry/base and of this build, taking turns (build with BASE=<commit>);
#   hfforward: mambago.hf's forward with the prompt on the GPU, the logits made
#             there against through the host (bench/hf_forward.py; 130m and 1.4b
#             or $HF_FORWARD_SHAPES, cases $HF_FORWARD_CASES);
#   hfcache:  a hand-written greedy decoding loop through mambago.hf with CUDA
#             tensors (cache= each token: step_ptr, eager then a kept graph),
#             against the whole sequence again, transformers' loop and
#             Model.generate (bench/hf_cache.py; bf16, 130m and 1.4b or
#             $HF_CACHE_SHAPES, T=512, 64 new tokens);
#   stepgraph: StepDevice's kept step graph (StepDeviceGraphSteps): its engine
#             tests and memcheck, the step_ptr and hf pytest, then bench/hf_cache.py
#             (bf16, T=512, $STEPGRAPH_NEW new tokens, default "16 64") with this
#             build's wheel and with .carry/base's, taking turns (BASE=<commit>
#             in device_build.sh; $HF_CACHE_SHAPES, default 130m);
#   steptrace: each kernel of a bf16 decode step graph in place (B=1 or
#             $STEP_TRACE_B; 370m and 2.8b or $STEP_TRACE_SHAPES): its
#             duration, its gap after the previous kernel and its share of
#             the layer (bench/step_trace.py; about a minute a shape);
#   graphtrace: each kernel of a bf16 130m prefill graph in place: its
#             duration, its gap after the previous kernel and its share of
#             the layer (bench/graph_trace.py; T=512, 2048, 8192 or
#             $TRACE_LENGTHS; other shapes with $TRACE_SHAPES, at T=2048 or
#             $TRACE_SHAPE_LENGTHS;
#             130m T=2048 with other GEMM algorithms with $TRACE_GEMMS);
#   nvjetsass: ncu's SASS of the GEMM kernels cuBLAS runs in a bf16 130m
#             prefill: does each execute griddepcontrol.wait (ACQBULK), which
#             would make programmatic edges into GEMM nodes safe? (RMSNorm,
#             which does, is the control)
#   dtprojwg: dt_proj on the warpgroup products (dt_proj_wg_f32): the
#             kernel test, memcheck, the engine's test, BenchmarkDTProj's
#             one-product entries (and the warpgroup entry's sizing cuts),
#             ncu's stall samples of it, and prefills off and on
#             (BenchmarkDTProjWarpgroup; $DTWG_SHAPES);
#   dtshort:  dt_proj's short entries (DTProj.Short: all of R staged at
#             once, blocks of 32 rows): the kernel test (float64, and the
#             bits of the entry they stand in for) with memcheck, the
#             engine's TestDTProjShortMatches with memcheck, BenchmarkDTProj's
#             tensor-core entries, then bf16 prefills off and on
#             (BenchmarkDTProjShort; $DTSHORT_SHAPES);
#   dtrules:  bf16 prefills off and on where dt_proj's rules were not timed:
#             the short entries at $DTSHORT_SHAPES (BenchmarkDTProjShort),
#             the warpgroup entry from $DTWG_MIN_ROWS rows at $DTWG_SHAPES
#             (BenchmarkDTProjWarpgroup);
#   skinny:   the skinny GEMM for short prompts (gemm_skinny_bf16_f32,
#             Engine.SkinnyGEMM): its kernel test against float64 and the
#             engine's against cuBLAS, with memcheck; the decode GEMVs'
#             tests on the ring it shares (kernels and engine); then
#             BenchmarkGemmSkinny against cuBLASLt at 1.4b and 2.8b T=128,
#             and bf16 prefills off and on (BenchmarkSkinnyGEMM);
#   skinnyprof: the skinny GEMM's and the decode GEMVs' tests (kernels and
#             engine), the skinny GEMM's times against cuBLASLt,
#             then ncu (throughputs and stall samples) at 1.4b in_proj and
#             out_proj T=128, k split and not, then bf16 prefills off and on;
#   skinnycheck: memcheck over the ring's kernel tests and the engine's
#             skinny GEMM test (the decode ones: sanitize's decode parts);
#   candidates: bf16 prefills with each layer GEMM pinned to each of
#             cuBLASLt's candidates in turn, against the tuning's pick
#             (BenchmarkGemmCandidates; $CAND_SHAPES, $GEMM_CANDIDATES);
#   fused:    the conv and x_proj in one kernel (Engine.FusedConvXProj): its
#             kernel test with racecheck and memcheck, the engine's prefill
#             tests, memcheck over the engine's fused-against-unfused test;
#             with FUSED_PROFILE=1 also ncu's stall samples of the kernel in a
#             130m prefill and bf16 prefills off and on (BenchmarkFusedConvXProj);
#   ab:       bf16 prefills at the bars' shapes (BenchmarkPrefillShapes),
#             this build and .carry/base's taking turns, and their ratios
#             (a base before 2026-12-02 04:00 runs its shapes in another
#             order, which can put its 370m T=2048 in the slow state of
#             bench/results/2026-12-02-slowpass.md: compare 130m there);
#   residual: Engine.ResidualPrefetch (the scan asks L2 for the residual
#             rows out_proj adds into): the tests with it, memcheck, then
#             bf16 prefills with it off and on (BenchmarkResidualPrefetch);
#   scantma:  Engine.ScanTMA (the B=1 scan's tiles through the copy engine):
#             racecheck over the scan kernels' tests (TestConvAndScanKernels
#             compares the two entries bit for bit), the engine's tests,
#             memcheck, bf16 prefills off and on (BenchmarkScanTMA), then
#             the scan's timeline with both entries;
#   timeline: the one-pass scan's stages timed from inside the kernel
#             (%globaltimer in an OP_TIMELINE build; BenchmarkOnePassTimeline);
#   handover: our x_proj and the B=1 scan back to back under PDL, both as
#             timeline builds on one clock: when x_proj's blocks store their
#             rows against when the scan's copying warps' wait returns
#             (BenchmarkXProjScanHandover: what flags a tile could save);
#   decodecheck: the decode step's kernels and entries against their
#             references (TestGEMVKernel; the engine's decode, step-graph and
#             padded-entry tests), then memcheck over both and racecheck over the
#             GEMVs' shared memory;
#   decodebatch: bf16 decode steps of 8 sequences with the batch's kernels
#             (Engine.GEMVTensorCores, Engine.DecodeScanBatch) off and on,
#             taking turns in one process (BenchmarkDecodeBatchSettings);
#   gemvbatch: the decode GEMVs at B=8 alone (1.4b and 2.8b sizes), 8
#             launches back to back: FMA against tensor-core entries, and
#             BASE's (device_build.sh) where built (BenchmarkGEMVBatch; about
#             a minute);
#   wgdecode: the warpgroup GEMVs in the decode step (Engine.GEMVWarpgroup,
#             GEMVWarpgroupOut, GEMVWarpgroupFold): TestGEMVWGKernel,
#             TestStepInWGKernel and TestGEMVWGNormFold against float64,
#             memcheck, the engine's decode tests and memcheck over
#             TestDecodeWarpgroupMatches, then steps of 8, 4 and 1
#             sequences off and on (BenchmarkDecodeWarpgroup; DECODE_SHAPES,
#             DECODE_BATCHES);
#   wgbench:  wgdecode's steps alone (BenchmarkDecodeWarpgroup), no tests;
#   decodememcheck: memcheck over the engine's decode tests alone
#             (decodecheck's engine half, without racecheck);
#   outparts: out_proj's tiles on the warpgroup GEMV split along k over
#             each count of blocks in $DECODE_PARTS, on the fold (at B=1
#             too), against New's settings: TestDecodeWarpgroupMatches, then
#             BenchmarkDecodeOutParts (DECODE_SHAPES, DECODE_BATCHES);
#   wgkernels: ncu's time for each kernel of bf16 decode step graphs,
#             one BenchmarkDecodeWarpgroup setting at a time ($WG_SETTINGS,
#             default "off +out/4+fold"; $DECODE_SHAPES, default 2.8b;
#             $DECODE_BATCHES, default 1): which kernel one setting loses in;
#   decodeverify: decodecheck's engine tests (New's defaults),
#             without the sanitizers (a few minutes less);
#   wggemv:   gemv_wg_bf16 (kernels/gemv_wg.cu: wgmma on TMA boxes):
#             TestGEMVWGKernel, memcheck over it, then gemvbatch (which
#             times it) and cublasgemv;
#   cublasgemv: the same GEMMs at B=8 on cuBLAS through torch, with the
#             kernels it picks (bench/cublas_gemv.py);
#   gemvtc:   the tensor-core GEMVs: TestGEMVKernel (against float64, blocks
#             of 8 and 16 warps) under racecheck and memcheck, their builds
#             at B=8 (BenchmarkGEMVBatch, with BASE's step.cu as "base" where
#             device_build.sh was given a BASE),
#             the engine's decode tests for the tensor-core GEMVs, then
#             decodebatch (about 6 minutes);
#   gemvstalls: ncu's warp-state samples per SASS line of the tensor-core
#             GEMV at the 1.4b in_proj size (bench/stalls.py summarizes);
#   decodekernels: ncu's time for each decode kernel of one bf16 step
#             graph, this build and .carry/base's (BenchmarkDecodeSteps,
#             $DECODE_PROFILE, e.g. 1.4b/B8; nodes profiled one at a time);
#   decodeab: bf16 decode step graphs (BenchmarkDecodeSteps, $DECODE_SHAPES),
#             this build and .carry/base's taking turns ($AB_ROUNDS each),
#             and the ratio of their medians;
#   knob:     a scan knob's build ($KNOB, NVRTC options such as
#             -DOP_EARLY=1) under the scan kernels' float64 tests with
#             racecheck, synccheck and memcheck (KERNELS_OPTS), then the
#             scan's stages beside the engine's build (TIMELINE_BUILDS) and
#             the scan alone against it (BenchmarkOnePass, which needs the
#             knob in its onePassKnobs), both checked bit for bit against the
#             engine's build;
#   tilecopy: how long a scan block's first tile takes to land from L2
#             when every block reads the same bytes, or its own, or one
#             block alone (BenchmarkTileCopy);
#   shapes:   bf16 prefills at the bars' shapes with this build alone
#             (BenchmarkPrefillShapes; AB_SHAPES picks shapes);
#   graphnode: the GPU time of a near-empty kernel node in a graph (1, one
#             an SM and 8 an SM blocks; plain and PDL) and of a 64-row bf16
#             GEMM node: the floor of each kernel's fixed cost;
#   segments: the one-pass scan walked in segments (Scan.Segments): the
#             scan kernels' tests with racecheck and memcheck, the engine's
#             prefill tests, memcheck over TestScanVariantsMatch, then bf16
#             prefills walked once and in segments (BenchmarkScanSegments);
#   scanknobs: the scan's tests with racecheck and memcheck, the engine's
#             tests that run the scan, the one-pass scan's knobs
#             (BenchmarkOnePass, settings taking turns), and ncu's per-instruction stall
#             samples of the engine's one-pass scan (bench/stalls.py);
#   helpers:  the one-pass scan's entry whose warps specialize
#             (scan_onepass2w_, Engine.ScanHelpers): the scan's kernel test
#             (float64, and the plain walk's bits) under racecheck, synccheck
#             and memcheck, the engine's scan tests, the scan alone against
#             the plain entry (BenchmarkOnePass with ONEPASS_KNOBS=helpers),
#             then bf16 prefills off and on (BenchmarkScanHelpers, and
#             BenchmarkScanDTProj: with dt_proj in the scan's tiles);
#             HELPERS_PROFILE=1 adds both entries' stall samples;
#   xptimeline: our x_proj's stages (row copies and tensor maps) timed from
#             inside the kernel, each launch alone, beside cuBLASLt's alone
#             (%globaltimer in an XP_TIMELINE build; BenchmarkXProjTimeline);
#   xproj:    our x_proj (Engine.OwnXProj): its kernel test with memcheck and
#             racecheck, the engine's tests against cuBLAS's x_proj
#             (TestOwnXProjMatches) with memcheck, then BenchmarkXProj (alone,
#             against cuBLASLt) and bf16 prefills off and on (BenchmarkOwnXProj,
#             or $XPROJ_PREFILL_BENCH);
#   outnorm:  out_norm (out_proj, the residual add and the next layer's
#             RMSNorm in one cluster kernel, Engine.FusedOutNorm): its kernel
#             test with memcheck and racecheck, the engine's prefill tests,
#             memcheck over the engine's fused-against-unfused test, then
#             BenchmarkOutNorm and bf16 prefills off and on
#             (BenchmarkFusedOutNorm); OUTNORM_PROFILE=1 adds ncu's sections;
#   gemmtma:  gemm_tma (TMA and wgmma, sm_90a) against float64 and under
#             memcheck, then against cuBLASLt's tuned pick (BenchmarkGemmTMA);
#             with GEMMTMA_PROFILE=1 also ncu's sections and stall samples of
#             it at $GEMMTMA_SHAPE (130m_in_proj_T2048 by default);
#   embednorm: the first layer's RMSNorm with the embedding lookup
#             (Engine.EmbedNorm): its kernel under memcheck, then setting_ab's
#             tests and bf16 prefills off and on (BenchmarkEmbedNorm);
#   onepassknobs: the one-pass scan alone, the engine's build against each
#             setting named in $ONEPASS_KNOBS (BenchmarkOnePass), no sanitizers;
#   tuning:   the cuBLASLt tests, then the tuning of each 130m and 370m
#             prefill GEMM repeated with one round and three (BenchmarkLtTuning);
#   pdl:      the prefill's kernels under programmatic dependent launch
#             (Engine.PrefillPDL): the tests that compare it bit for bit with
#             plain launches, memcheck over them, then bf16 graph replays with
#             it off and on (BenchmarkPrefillPDL);
#   gemm:     cuBLASLt: TestGemmAlgos and TestLtLayout, every bf16 GEMM of
#             the prefills through cublasGemmEx, cuBLASLt and each of its
#             first 16 algorithms (BenchmarkGemmAlgos), then prefills with
#             each (BenchmarkPrefillGemm);
#   dtproj:   dt_proj alone: TestDTProjKernel, BenchmarkDTProj (every entry
#             and variant, each checked, and the sizing cuts), then ncu's pipe
#             use and stall reasons for the engine's dt_proj in a 1.4b prefill;
#   sourceprof: ncu's per-instruction stall samples for the bf16 one-pass
#             scan at 130m B=1 T=2048 (CSV and an .ncu-rep report);
#   kerneltimes8: the same for a bf16 2.8b prefill at B=8, T=2048;
#   smallkernels: per-kernel times of a bf16 130m prefill (B=1, T=2048),
#             then ncu's detail on its dt_proj and x_proj GEMM;
#   clocks:   the SM clock, power and throttle reasons during back-to-back
#             2.8b B=8 prefills (is the GPU slower under sustained load?);
#   kerneltimes: every kernel's mean time with warm caches (ncu, one metric,
#             no cache flush) for a bf16 130m B=1 T=2048 prefill and a 2.8b
#             decode step: the stage table's event timings include launch gaps;
#   decodeprof: per-kernel times of the decode step's kernels (ncu, 130m, f32 and bf16),
#             against the step graph's wall time from the Go benchmark;
#   mamba_ssm: builds mamba_ssm and causal-conv1d for sm_90 (once per machine),
#             then the bf16 prefill and decode comparison (bench/mamba_ssm/compare.py);
#   compile:  the first load's notice (Go and Python) with the kernels compiled
#             in parallel, then a few engine tests, then the compile into an
#             empty cache timed whole against in units (BenchmarkCompileKernels);
#   twopasses: the slow second pass, reproduced and traced stage by stage
#             (BenchmarkTwoPasses; scripts/twopass_probe.sh has its probes);
#   instancetrace: bf16 models built, traced kernel by kernel and closed one
#             after another in one process (graph_trace.py --instances;
#             TRACE_SHAPES, TRACE_LENGTHS, TRACE_INSTANCES, and TRACE_BETWEEN,
#             models run between them, as 370m:2048,370m:8192);
#   hfprecision: the bf16/f16 fixture bars for transformers' own models in
#             those dtypes, beside mambago's (bench/hf_precision.py);
#   cpu:      the CPU engine's stage timings and the CPU benchmark against HF;
#   cpusgemm: the CPU engine's own SGEMM against numpy's OpenBLAS on this
#             host's cores: BenchmarkSgemm, then prefills taking turns
#             (bench/cpu_blas.py; about 2 min);
#   cpudecode: CPU decode steps and generation on the engine's own GEMMs
#             against numpy's OpenBLAS on this host's cores (bench/cpu_decode.py
#             with $CPU_DECODE_ARGS; about 3 minutes);
#   cpuab:    the CPU engine of .carry/base (device_build.sh with BASE=<commit>)
#             against this build's, taking turns: 130m prefills at T=128 and
#             512 with their conv and scan stages, then decode steps of 1 and
#             8 sequences in float32 and bf16 ($CPUAB_ROUNDS rounds, 3 unless
#             told; about 2 minutes);
#   ownblas:  the CPU engine's own GEMMs against numpy's OpenBLAS, taking
#             turns call by call (BenchmarkOwnAgainstBLAS: 130m prefills at
#             T=128 and 512, float32 and bf16 steps of one sequence), as the
#             host is and then with both held to AVX2 (MAMBAGO_BENCH_AVX2=1,
#             OPENBLAS_CORETYPE=Haswell): blas="auto"'s evidence (about a minute);
#   cpujobs:  the CPU conv and scan in tasks of 32, 16 and 8 channels, taking
#             turns over three rounds (BenchmarkConvScanJobs; about 30 s);
#   all:      all three (default).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
commit=${1:-unknown}
mode=${2:-all}
if [[ $mode == *,* ]]; then  # one mode after the other; fails if any fails
  status=0
  for m in ${mode//,/ }; do bash "$0" "$commit" "$m" || status=1; done
  exit $status
fi
export PYTHONUNBUFFERED=1
python3 -m pip install -q --upgrade --no-deps --no-index --target /tmp/site .carry/mambago-*.whl || exit 1
export PYTHONPATH=/tmp/site
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
status=0
# scan_stalls profiles the bf16 one-pass scan of a 130m B=1 T=2048 prefill
# with ncu's source counters (warp-state samples per SASS line), keeps them
# as CSV and a report (*.ncu-rep) in $OUT, and summarizes them
# (bench/stalls.py, the instructions listed a reason as $1).
scan_stalls() {
  timeout 240 ncu --clock-control none -k 'regex:scan_onepass2_bf16' --launch-skip 5 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --export "$OUT/onepass_source" \
    --page source --print-source sass --csv \
    .carry/gpu.test -test.run '^$' -test.bench 'ScanVariants/130m/B1_T2048/L64_onepass2$' -test.benchtime 1x \
    > "$OUT/onepass_source.csv" 2>&1
  echo "ncu exit $?: $(wc -l < "$OUT/onepass_source.csv") lines"
  python3 bench/stalls.py "$OUT/onepass_source.csv" --top "$1" | tee "$OUT/onepass_stalls.txt"
}
if [[ $mode == verify ]]; then
  bash "$0" "$commit" gpu || status=1
  echo "== GPU stage times (130m, B=1, T=2048, f32 and bf16)"
  .carry/gpu.test -test.v -test.run '^$' -test.bench Prefill130m -test.benchtime 20x 2>&1 | tee "$OUT/gpu_stages.log" \
    | grep -v "^goos\|^goarch\|^pkg\|^=== \|^Benchmark.*[^s]$"
  echo "== the scan: plain and staged kernels (130m, bf16)"
  .carry/gpu.test -test.v -test.run '^$' -test.bench Scan130m -test.benchtime 20x 2>&1 | tee "$OUT/scan_variants.log" \
    | grep -E "tok/s|  scan"
  echo "== the XU: ex2 a clock an SM, alone and in the scan's mix (kernels/xu_bench_test.go)"
  .carry/kernels.test -test.run '^$' -test.bench XU -test.benchtime 20x 2>&1 | tee "$OUT/xu.log" | grep "ex2/clk"
  echo "== 1.4b and 2.8b, bf16: decode step variants, and prefill with each scan"
  .carry/gpu.test -test.run '^$' -test.bench BigShapes -test.benchtime 100x 2>&1 | tee "$OUT/big_shapes.log" \
    | grep -E "us/step|tok/s"
  exit $status
fi
if [[ $mode == gemm ]]; then
  timeout 200 .carry/cuda.test -test.v -test.run 'GemmAlgos|LtLayout' > "$OUT/gemm_test.log" 2>&1 || status=1
  grep -E "^(--- |ok|FAIL|PASS)|rel err|panic" "$OUT/gemm_test.log" | head -20
  echo "== every bf16 GEMM of the prefills, us a GEMM (BenchmarkGemmAlgos)"
  timeout 240 .carry/cuda.test -test.run '^$' -test.bench GemmAlgos -test.benchtime 1x > "$OUT/gemm_algos.log" 2>&1 || status=1
  grep -E "GemmEx" "$OUT/gemm_algos.log" | sed 's/^ *gemm_test.go:[0-9]*: //' | cut -c1-150
  echo "== bf16 prefills, T=2048, with each (BenchmarkPrefillGemm)"
  timeout 240 .carry/gpu.test -test.run '^$' -test.bench PrefillGemm -test.benchtime 10x 2>&1 | tee "$OUT/prefill_gemm.log" \
    | grep tok/s | awk '{print $1, $(NF-1)}'
  exit $status
fi
# setting_ab checks an engine setting that must change no bit of any output:
# the kernels' tests, the engine's tests that run prefills (among them
# TestPrefillSettingsMatch, with each setting on and off), memcheck over the
# scan kernels' test and over the setting's subtests (PrefillSettings/$2),
# then bf16 prefills with it off and on (benchmark $3, whose lines start
# with "$4 "). Logs go to $OUT/$1_*.
setting_ab() {
  local tag=$1 sub=$2 bench=$3 label=$4
  run_tests ${tag}_kernels 200 .carry/kernels.test -test.v -test.run 'ConvAndScan|DTProj|RMS|Spill'
  run_tests ${tag}_test 300 .carry/gpu.test -test.v \
    -test.run 'PrefillSettings|GraphsReplay|DeviceEntry|PrefillGraphCache|TestConformance|MatchesCPU|ScanVariantsMatch|Mixed'
  memcheck memcheck_${tag}_kernels 150 .carry/kernels.test 'ConvAndScan'
  memcheck memcheck_${tag} 300 .carry/gpu.test "PrefillSettings/$sub"
  echo "== bf16 prefills with it off and on ($bench: graph replays, CUDA events, medians)"
  timeout 400 .carry/gpu.test -test.v -test.run '^$' -test.bench "$bench" -test.benchtime 1x 2>&1 | tee "$OUT/${tag}_bench.log" \
    | grep -E "$label |FAIL|panic" | sed 's/^ *bench_test.go:[0-9]*: //'
}
# source_stalls TAG KERNEL SKIP BINARY BENCH [NCU OPTIONS...]: ncu's
# per-instruction warp-state samples of KERNEL's launch after SKIP others in
# benchmark BENCH of a test binary, as $OUT/TAG_source.csv, summarized by
# bench/stalls.py into $OUT/TAG_stalls.txt (the top 6 instructions a reason).
source_stalls() {
  local tag=$1 kernel=$2 skip=$3 bin=$4 bench=$5
  shift 5
  timeout 150 ncu --clock-control none -k "regex:$kernel" --launch-skip "$skip" --launch-count 1 "$@" \
    --section SourceCounters --page source --print-source sass --csv \
    "$bin" -test.run '^$' -test.bench "$bench" -test.benchtime 1x > "$OUT/${tag}_source.csv" 2>&1
  python3 bench/stalls.py "$OUT/${tag}_source.csv" --top 6 | tee "$OUT/${tag}_stalls.txt"
}
# run_tests LOG SECONDS COMMAND...: runs a test binary into $OUT/LOG.log
# and prints its verdicts (and the lines matching $SHOW).
run_tests() {
  local log=$1 secs=$2
  shift 2
  timeout "$secs" "$@" > "$OUT/$log.log" 2>&1 || status=1
  grep -E "^(--- FAIL|ok|FAIL|PASS)|panic${SHOW:+|$SHOW}" "$OUT/$log.log" | head -20
  # A pattern that matches no test is a check that did not run, not a pass.
  if grep -q "no tests to run" "$OUT/$log.log"; then
    echo "$log: no test matched: FAIL"
    status=1
  fi
}
# sanitizer TOOL LOG SECONDS BINARY TESTS: compute-sanitizer's TOOL over the
# tests the regexp TESTS names (with $SANITIZE_ARGS after), into $OUT/LOG.log, and its summary;
# memcheck LOG SECONDS BINARY TESTS is its memcheck.
sanitizer() {
  local tool=$1 log=$2 secs=$3 bin=$4 tests=$5 rc=0
  timeout "$secs" compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" -test.v -test.run "$tests" ${SANITIZE_ARGS:-} > "$OUT/$log.log" 2>&1 \
    || rc=$?
  [[ $rc == 0 ]] || status=1
  # exit 124: past its time limit, with no summary
  echo "$log: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/$log.log" | tail -1)$([[ $rc == 0 ]] || echo " (exit $rc)")"
}
memcheck() { sanitizer memcheck "$@"; }
# bench_log LOG SECONDS BINARY BENCH PATTERN: benchmark BENCH of a test
# binary, once, into $OUT/LOG.log, and its lines that match PATTERN (and
# any failure), without the testing package's file:line prefix.
bench_log() {
  local log=$1 secs=$2 bin=$3 bench=$4 pattern=$5
  timeout "$secs" "$bin" -test.v -test.run '^$' -test.bench "$bench" -test.benchtime 1x 2>&1 | tee "$OUT/$log.log" \
    | grep -E "$pattern|FAIL|panic" | sed 's/^ *[a-z_]*\.go:[0-9]*: //'
}
# topk_bases: .carry/topk_base*.cu, other builds' topk.cu timed beside this
# one's by BenchmarkTopKRows, joined by ':'.
topk_bases() {
  local IFS=:
  local files=(.carry/topk_base*.cu)
  [[ -e ${files[0]} ]] && echo "${files[*]}"
}
if [[ $mode == sampling ]]; then
  tests=${SAMPLING_TESTS:-TopKRows|TopKDraw|TopPDraw}
  echo "== the sampling kernels (topk_rows_f32, topp_draw_f32) and the decoder's entries on them, sanitizers, the kernels' times"
  run_tests sampling_kernels 100 .carry/kernels.test -test.v -test.run "$tests"
  if [[ ${SAMPLING_SANITIZE:-1} == 1 ]]; then  # SAMPLING_SANITIZE=0: without memcheck and racecheck
    SANITIZE_ARGS=-test.short memcheck memcheck_sampling 100 .carry/kernels.test "$tests"
    SANITIZE_ARGS=-test.short sanitizer racecheck racecheck_sampling 420 .carry/kernels.test "$tests"
  fi
  MAMBAGO_TOPK_BASE=$(topk_bases) bench_log sampling_bench 100 .carry/kernels.test TopKRows "µs"
  run_tests sampling_engine 100 .carry/mambago.test -test.v -test.run 'GenerateOnDevice|DecoderLogits|DecoderQueue|QueueTopK'
  memcheck memcheck_sampling_engine 100 .carry/mambago.test 'GenerateOnDevice|DecoderLogits|QueueTopK'
  exit $status
fi
if [[ $mode == layers ]]; then  # hidden_states from the device entry (gpu.Output.Layers)
  echo "== hidden_states from the device entry (Output.Layers, prefill_ptr's layers_ptr): tests, memcheck, pytest, timings"
  run_tests layers_tests 200 .carry/gpu.test -test.v -test.run \
    'DeviceEntryLayers|DeviceEntryMatchesHostEntry|DevicePaddedMatchesHostPadded|DeviceEntriesRefuseBadBuffers|PrefillLayersMatchCPU|DeviceEntryLogits'
  memcheck memcheck_layers 200 .carry/gpu.test 'DeviceEntryLayers'
  PYTEST_ARGS="-q -rs tests/test_hf.py tests/test_gpu.py tests/test_bad_input.py" bash "$0" "$commit" pytest || status=1
  echo "== a forward call's hidden_states on the GPU (bench/hidden_states.py \$HIDDEN_ARGS)"
  python3 bench/hidden_states.py ${HIDDEN_ARGS:-} --out "$OUT/hidden.json" 2>&1 | grep -v "^mambago:"
  if ls .carry/base/mambago-*.whl > /dev/null 2>&1; then
    echo "== the same with .carry/base's wheel"
    python3 -m pip install -q --upgrade --no-deps --no-index --target /tmp/site_base .carry/base/mambago-*.whl || status=1
    PYTHONPATH=/tmp/site_base python3 bench/hidden_states.py ${HIDDEN_ARGS:-} --out "$OUT/hidden_base.json" 2>&1 \
      | grep -v "^mambago:"
  fi
  exit $status
fi
if [[ $mode == topkdraw ]]; then  # topk_draw_f32 (Decoder.QueueTopK)
  echo "== the draw from the k best on the device (topk_draw_f32): kernel tests, sanitizers, the kernels' times"
  run_tests topkdraw_kernels 200 .carry/kernels.test -test.v -test.run 'TopKRows|TopKDraw'
  SANITIZE_ARGS=-test.short memcheck memcheck_topkdraw 150 .carry/kernels.test 'TopKRows|TopKDraw'
  SANITIZE_ARGS=-test.short sanitizer racecheck racecheck_topkdraw 200 .carry/kernels.test 'TopKDraw'
  bench_log topkdraw_bench 100 .carry/kernels.test TopKRows "topk|argmax"
  SHOW='draws' run_tests topkdraw_engine 200 .carry/mambago.test -test.v -test.run 'QueueTopK|GenerateOnDevice|DecoderLogits|DecoderQueue|Sampl'
  memcheck memcheck_topkdraw_engine 150 .carry/mambago.test 'QueueTopK|GenerateOnDevice'
  echo "== a token of generation (BenchmarkGenerate): sampled (top-k 50) queued on the device against the host's draw"
  bench_log generate_bench 300 .carry/mambago.test Generate "a token"
  exit $status
fi
if [[ $mode == shortgraph ]]; then  # the step graph for short runs (NewDecoder's summed steps)
  echo "== step graphs for short runs: the decoders' tests, memcheck, generation's tests, repeated 20-token calls"
  run_tests shortgraph_decoders 150 .carry/gpu.test -test.v -test.run 'DecoderGraphsShortRuns|KeepsStepGraph|DecodeWarpgroup'
  memcheck memcheck_shortgraph 150 .carry/gpu.test 'DecoderGraphsShortRuns'
  run_tests shortgraph_generate 200 .carry/mambago.test -test.v -test.run 'Generate|DecoderQueue|DecoderLogits|QueueTopK|Greedy|Sampl'
  bench_log generate_short 300 .carry/mambago.test GenerateShort "a call"
  exit $status
fi
if [[ $mode == stream ]]; then  # the streaming one-sequence GEMVs (Engine.GEMVStream)
  echo "== the streaming one-sequence GEMVs: the kernel's bits, the engine's, memcheck, decode steps, the GEMVs alone"
  SHOW='sb1' run_tests stream_kernels 200 .carry/kernels.test -test.v -test.run 'GEMVKernel'
  run_tests stream_engine 200 .carry/gpu.test -test.v -test.run 'DecodeStreamMatches|GEMVPlan|StreamLaunch|DecodeOneSequenceMatches'
  memcheck memcheck_stream 200 .carry/gpu.test 'DecodeStreamMatches'
  bench_log decode_stream 300 .carry/gpu.test DecodeStream "stream:|bits:"
  exit $status
fi
if [[ $mode == readfloor ]]; then  # how near the decode GEMVs read at HBM's rate
  echo "== the one-sequence decode GEMVs against kernels that only read the same bytes (BenchmarkReadFloor)"
  bench_log readfloor 300 .carry/kernels.test ReadFloor "read floor"
  exit $status
fi
if [[ $mode == readfloorncu ]]; then  # ncu on the GEMVs and a reader of the same bytes
  echo "== ncu, full set, on one launch each of the gemv entry, the streaming entry (as built) and a reader (BenchmarkReadFloor)"
  for shape in ${READFLOOR_NCU_SHAPES:-2.8b_in_proj 2.8b_lm_head}; do
    for k in gemv_r4_b1_bf16 gemv_sb1_bf16 read_u8_cs; do
      tag=${shape}_$k
      rep=$(mktemp -d)/$tag
      READFLOOR_SHAPES="^${shape/_/ }\$" READFLOOR_TURNS=1,1 timeout 200 ncu --set full --import-source no \
        --kernel-name $k --launch-count 1 -f -o "$rep" .carry/kernels.test -test.run '^$' -test.bench ReadFloor \
        -test.benchtime 1x > "$rep.log" 2>&1
      echo "$tag: ncu exit $?"
      # One file a kernel comes back (the run returns few): the details
      # page, then the stall samples' summary by SASS line.
      ncu -i "$rep.ncu-rep" --page details > "$OUT/$tag.txt" 2>&1 || tail -5 "$rep.log" >> "$OUT/$tag.txt"
      ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.csv" 2>&1
      grep -E "^    (Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|L2 Hit Rate) " "$OUT/$tag.txt" | head -10
      python3 bench/stalls.py "$rep.csv" --top 4 > "$rep.stalls" 2>&1 && head -30 "$rep.stalls"
      { echo; echo "== stall samples by SASS line (bench/stalls.py)"; cat "$rep.stalls"; } >> "$OUT/$tag.txt"
    done
  done
  exit $status
fi
if [[ $mode == headpick ]]; then  # lm_head_wg_bf16's pick (Engine.HeadPicks)
  echo "== the greedy pick ranked in the LM head (lm_head_wg_bf16, head_picks_i64): tests, sanitizers, a token's parts"
  SHOW='lm_head_wg_bf16' run_tests headpick_kernels 100 .carry/kernels.test -test.v -test.run 'LMHeadWG|GEMVWGKernel'
  run_tests headpick_engine 100 .carry/gpu.test -test.v -test.run 'HeadPicksMatch|DecodeWarpgroup|KeepsStepGraph'
  SANITIZE_ARGS=-test.short memcheck memcheck_headpick 100 .carry/kernels.test 'LMHeadWG'
  SANITIZE_ARGS=-test.short sanitizer racecheck racecheck_headpick 200 .carry/kernels.test 'LMHeadWG'
  memcheck memcheck_headpick_engine 100 .carry/gpu.test 'HeadPicksMatch'
  echo "== a greedy token's parts on the GPU, the argmax's and the head's (BenchmarkQueueParts)"
  bench_log queue_parts 100 .carry/gpu.test QueueParts "µs"
  bash "$0" "$commit" pytest || status=1
  GEN_KERNELS=0 GEN_ARGS="${GEN_ARGS:---shapes 130m,1.4b --batches 1,8 --repeats 5}" bash "$0" "$commit" generatebench \
    || status=1
  exit $status
fi
if [[ $mode == genreuse ]]; then  # Generate's kept state and step graph (branch issue4-genreuse)
  echo "== the decoder's step graph kept with its state (TestDecoderKeepsStepGraph), the decode tests, memcheck"
  run_tests kept_graph 200 .carry/gpu.test -test.v -test.run 'KeepsStepGraph|Decode'
  memcheck memcheck_kept 200 .carry/gpu.test 'KeepsStepGraph'
  GEN_KERNELS=0 GEN_ARGS="${GEN_ARGS:---shapes 130m,1.4b --batches 1,8 --repeats 5}" bash "$0" "$commit" generate || status=1
  bash "$0" "$commit" pytest || status=1
  exit $status
fi
if [[ $mode == samplingncu ]]; then
  echo "== ncu, full set, on one launch each of the sampling kernels (BenchmarkTopKRows, B=1, random row)"
  for k in ${NCU_KERNELS:-topp_draw_f32 topp_draw_x8_f32 topk_rows_f32}; do
    timeout 200 ncu --set full --import-source no --kernel-name $k --launch-skip 3 --launch-count 1 -f -o "$OUT/$k" \
      .carry/kernels.test -test.run '^$' -test.bench TopKRows -test.benchtime 1x > "$OUT/${k}_ncu.log" 2>&1
    echo "$k: ncu exit $?"
    ncu -i "$OUT/$k.ncu-rep" --page details > "$OUT/${k}_details.txt" 2>&1
    ncu -i "$OUT/$k.ncu-rep" --page source --csv --print-source sass > "$OUT/${k}_source.csv" 2>&1
    grep -E "Duration|Executed Ipc A|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|L2 Hit|Registers Per" "$OUT/${k}_details.txt" | head -12
    wc -l "$OUT/${k}_source.csv"
  done
  exit $status
fi
if [[ $mode == generate && ${GEN_KERNELS:-1} == 1 ]]; then  # GEN_KERNELS=0: without the kernels' tests
  echo "== generation on the decoder (gpu.Decoder; greedy picks by argmax_rows_f32, top-k candidates by topk_rows_f32): the kernels and the engine against the host, sanitizers"
  run_tests generate_kernels 200 .carry/kernels.test -test.v -test.run 'ArgmaxRows|TopKRows|TopPDraw'
  SANITIZE_ARGS=-test.short memcheck memcheck_argmax 200 .carry/kernels.test 'ArgmaxRows|TopKRows|TopPDraw'
  SANITIZE_ARGS=-test.short sanitizer racecheck racecheck_topk 420 .carry/kernels.test 'TopKRows|TopPDraw'
  MAMBAGO_TOPK_BASE=$(topk_bases) bench_log topk_bench 100 .carry/kernels.test TopKRows "µs"
  SHOW='a copy out' run_tests generate_host 100 .carry/cuda.test -test.v -test.run 'HostBuffer'
  memcheck memcheck_host 100 .carry/cuda.test 'HostBuffer'
fi
if [[ $mode == generate || $mode == generatebench ]]; then
  if [[ ${GEN_GO:-1} == 1 ]]; then  # GEN_GO=0: the Python timings alone
    run_tests generate_tests 300 .carry/mambago.test -test.v -test.run 'Greedy|Sampl|Generate|DecoderLogits|DecoderQueue|FromCandidates|Example|Processors|RepetitionPenalty|MinNew|Beam|CopyRows'
    [[ $mode == generate ]] && memcheck memcheck_generate 300 .carry/mambago.test 'GenerateOnDevice|DecoderLogits|DecoderQueue|ProcessorsOnDevice|BeamSamplingOnDevice'
    if [[ ${GEN_BENCH:-1} == 1 ]]; then  # GEN_BENCH=0: without BenchmarkGenerate
      echo "== a token of generation: greedy on the host's loop, the device pick eager and graphed; sampled from the device's top-k eager and graphed, from whole rows page-locked and pageable; top-p (BenchmarkGenerate)"
      bench_log generate_bench 300 .carry/mambago.test Generate "a token"
    fi
  fi
  [[ ${GEN_PYTHON:-1} == 0 ]] && exit $status  # GEN_PYTHON=0: without the Python timings
  echo "== a token of generation from Python, greedy and sampled (bench/generate_speed.py; \$GEN_ARGS)"
  python3 bench/generate_speed.py ${GEN_ARGS:-} --out "$OUT/generate.json" 2>&1 | tee "$OUT/generate.log" | grep -v "^mambago:"
  if ls .carry/base/mambago-*.whl > /dev/null 2>&1; then
    echo "== the same with .carry/base's wheel"
    python3 -m pip install -q --upgrade --no-deps --no-index --target /tmp/site_base .carry/base/mambago-*.whl || status=1
    PYTHONPATH=/tmp/site_base python3 bench/generate_speed.py ${GEN_ARGS:-} --out "$OUT/generate_base.json" 2>&1 \
      | tee "$OUT/generate_base.log" | grep -v "^mambago:"
  fi
  exit $status
fi
if [[ $mode == dtprojwg ]]; then
  echo "== dt_proj_wg_f32 (kernels/dtproj.cu): against float64 and dt_proj_tc1_f32's bits, memcheck, the engine on and off"
  SHOW="rel err" run_tests dtprojwg_kernels 200 .carry/kernels.test -test.v -test.run 'DTProjKernel'
  grep -E "dt_proj_wg|bits" "$OUT/dtprojwg_kernels.log" | sed 's/^ *gpu_test.go:[0-9]*: //' | head -40
  memcheck memcheck_dtprojwg 200 .carry/kernels.test 'DTProjKernel'
  SHOW="rel err" run_tests dtprojwg_engine 300 .carry/gpu.test -test.v -test.run 'DTProjWarpgroupMatches'
  echo "== BenchmarkDTProj: the one-product entries, µs a launch"
  timeout 200 .carry/kernels.test -test.run '^$' -test.bench 'DTProj/.*/(dt_proj_tc1|dt_proj_wg)' -test.benchtime 20x 2>&1 \
    | tee "$OUT/dtprojwg_bench.log" | grep -E " us|FAIL|rel err"
  echo "== ncu's stall samples of dt_proj_wg_f32 at the 1.4b shape, T=2048 (top 6 instructions a reason)"
  source_stalls dtprojwg dt_proj_wg 1 .carry/kernels.test 'DTProj/1.4b/dt_proj_wg_f32$'
  echo "== bf16 prefills, DTProjWarpgroup off and on (BenchmarkDTProjWarpgroup; \$DTWG_SHAPES)"
  bench_log dtprojwg_prefills 400 .carry/gpu.test DTProjWarpgroup "dtprojwg "
  exit $status
fi
if [[ $mode == dtshort ]]; then
  echo "== dt_proj's short entries (kernels/dtproj.cu): against float64 and the bits they stand in for, memcheck, the engine on and off"
  SHOW="rel err" run_tests dtshort_kernels 200 .carry/kernels.test -test.v -test.run 'DTProjKernel'
  grep -E "_short_|differ" "$OUT/dtshort_kernels.log" | sed 's/^ *gpu_test.go:[0-9]*: //' | head -40
  memcheck memcheck_dtshort 200 .carry/kernels.test 'DTProjKernel'
  SHOW="rel err" run_tests dtshort_engine 300 .carry/gpu.test -test.v -test.run 'DTProjShortMatches'
  memcheck memcheck_dtshort_engine 200 .carry/gpu.test 'DTProjShortMatches/onepass4_B3_T70'
  echo "== BenchmarkDTProj: the tensor-core entries (#00 is dt_proj_tc_f32), µs a launch"
  timeout 240 .carry/kernels.test -test.run '^$' -test.bench 'DTProj/.*/(dt_proj_tc|dt_proj_wg_f32$|#)' -test.benchtime 20x 2>&1 \
    | tee "$OUT/dtshort_bench.log" | grep -E " us|FAIL|rel err"
  echo "== bf16 prefills, DTProjShort off and on (BenchmarkDTProjShort; \$DTSHORT_SHAPES)"
  bench_log dtshort_prefills 300 .carry/gpu.test 'DTProjShort$' "dtprojshort "
  exit $status
fi
if [[ $mode == dtrules ]]; then
  echo "== dt_proj's rules where they were not timed: the short entries at \$DTSHORT_SHAPES (default 2.8b T=160 and 192)"
  DTSHORT_SHAPES=${DTSHORT_SHAPES:-2.8b:160,2.8b:192,1.4b:160} bench_log dtrules_short 240 .carry/gpu.test 'DTProjShort$' "dtprojshort "
  echo "== the warpgroup dt_proj from \$DTWG_MIN_ROWS rows (default 512) at \$DTWG_SHAPES"
  DTWG_MIN_ROWS=${DTWG_MIN_ROWS:-512} DTWG_SHAPES=${DTWG_SHAPES:-1.4b:512,1.4b:1024,1.4b:1536,1.4b:512:2,2.8b:512,2.8b:1024} \
    bench_log dtrules_wg 300 .carry/gpu.test 'DTProjWarpgroup$' "dtprojwg "
fi
if [[ $mode == skinny ]]; then
  echo "== the skinny GEMM (gemm_skinny_bf16_*, kernels/gemv_wg.cu) against float64, and the decode GEMVs on the ring it shares"
  SHOW="rel err" run_tests skinny_kernels 300 .carry/kernels.test -test.v -test.run 'GemmSkinny|GEMVWG|StepInWG'
  memcheck memcheck_skinny 300 .carry/kernels.test 'GemmSkinny|GEMVWG|StepInWG'
  SHOW="rel err" run_tests skinny_engine 300 .carry/gpu.test -test.v -test.run 'SkinnyGEMMMatches|DecodeWarpgroup|DecodeMatchesPrefill'
  memcheck memcheck_skinny_engine 200 .carry/gpu.test 'SkinnyGEMMMatches/d768_B3_T40'
  echo "== BenchmarkGemmSkinny: µs a launch, weights from HBM, against cuBLASLt's tuned pick"
  bench_log skinny_bench 240 .carry/kernels.test 'GemmSkinny$' "gemm_skinny "
  echo "== bf16 prefills, SkinnyGEMM off and on (BenchmarkSkinnyGEMM; \$SKINNY_SHAPES)"
  bench_log skinny_prefills 300 .carry/gpu.test 'SkinnyGEMM$' "skinny "
fi
if [[ $mode == skinnyprof ]]; then
  # ncu on one configuration at a time ($SKINNY_SPLITS): the kernel's
  # throughputs, then its stalls (the replays find the weights in L2).
  for cfg in ${SKINNY_PROFILE:-1.4b_in_proj_T128:1 1.4b_out_proj_T128:4}; do
    sub=${cfg%%:*} parts=${cfg##*:} tag=skinny_${cfg/:/_p}
    echo "== ncu: gemm_skinny $sub, $parts parts"
    SKINNY_SPLITS=$parts timeout 100 ncu --clock-control none --cache-control none -k 'regex:gemm_skinny' \
      --launch-skip 5 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section LaunchStats .carry/kernels.test -test.run '^$' -test.bench "GemmSkinny\$/$sub" -test.benchtime 1x \
      > "$OUT/${tag}_ncu.txt" 2>&1
    grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)" "$OUT/${tag}_ncu.txt" | head -6
    SKINNY_SPLITS=$parts source_stalls "$tag" gemm_skinny 5 .carry/kernels.test "GemmSkinny\$/$sub" --cache-control none \
      > /dev/null
    head -12 "$OUT/${tag}_stalls.txt"
    rm -f "$OUT/${tag}_source.csv"
  done
  echo "== BenchmarkGemmSkinny: µs a launch, weights from HBM, against cuBLASLt's tuned pick"
  bench_log skinnyprof_bench 240 .carry/kernels.test 'GemmSkinny$' "gemm_skinny "
  echo "== bf16 prefills, SkinnyGEMM off and on"
  SKINNY_SHAPES=${SKINNY_SHAPES:-130m:128,1.4b:128} bench_log skinnyprof_prefills 200 .carry/gpu.test 'SkinnyGEMM$' "skinny "
  echo "== the skinny GEMM and the decode GEMVs (the split along k they share) against float64, then the engine's"
  SHOW="gemm_skinny.*rel err" run_tests skinnyprof_kernels 200 .carry/kernels.test -test.v -test.run 'GemmSkinny|GEMVWG|StepInWG'
  run_tests skinnyprof_engine 200 .carry/gpu.test -test.v -test.run 'SkinnyGEMMMatches|DecodeWarpgroup|DecodeMatchesPrefill'
  exit $status
fi
if [[ $mode == skinnycheck ]]; then
  echo "== memcheck over the ring's kernels (skinny GEMM and decode GEMVs) and the engine's tests of them"
  memcheck memcheck_ring_kernels 200 .carry/kernels.test 'GemmSkinny|GEMVWG|StepInWG'
  memcheck memcheck_ring_engine 200 .carry/gpu.test 'SkinnyGEMMMatches'
  # TestDecodeWarpgroupMatches under memcheck takes more than 200 s: sanitize's decode_b part runs it.
  exit $status
fi
if [[ $mode == candidates ]]; then
  echo "== bf16 prefills with each GEMM pinned to each cuBLASLt candidate, against the tuned pick (BenchmarkGemmCandidates;"
  echo "   \$CAND_SHAPES as size:T[:B], \$GEMM_CANDIDATES; above 1: the candidate is faster)"
  bench_log candidates ${CAND_SECONDS:-500} .carry/gpu.test GemmCandidates "candidates "
  exit $status
fi
if [[ $mode == fused ]]; then
  echo "== the conv and x_proj fused (kernels/conv_xproj.cu): against conv_silu and float64; racecheck and memcheck"
  run_tests fused_kernels 200 .carry/kernels.test -test.v -test.run 'ConvXProj|ConvAndScan|Spill'
  for tool in racecheck memcheck; do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 .carry/kernels.test -test.run 'ConvXProj' \
      > "$OUT/${tool}_fused.log" 2>&1 || status=1
    echo "$tool conv_xproj: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/${tool}_fused.log" | tail -1)"
  done
  echo "== the engine's tests that run prefills (TestFusedConvXProjMatches: fused against unfused)"
  run_tests fused_test 300 .carry/gpu.test -test.v \
    -test.run 'FusedConvXProj|PrefillSettings|GraphsReplay|DeviceEntry|PrefillGraphCache|TestConformance|MatchesCPU|ScanVariantsMatch|Mixed'
  memcheck memcheck_fused 200 .carry/gpu.test 'FusedConvXProjMatches/d=768_bfloat16'
  [[ -n ${FUSED_PROFILE:-} ]] || exit $status
  echo "== ncu on the fused kernel in a 130m B=1 T=2048 prefill graph (caches as the graph leaves them)"
  source_stalls fused conv_xproj10_bf16 30 .carry/gpu.test 'FusedConvXProj/130m/B1_T2048' --cache-control none \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats
  timeout 100 ncu --clock-control none --cache-control none -k 'regex:conv_xproj10_bf16' --launch-skip 30 --launch-count 1 \
    --section SpeedOfLight --section SchedulerStats --section Occupancy .carry/gpu.test -test.run '^$' \
    -test.bench 'FusedConvXProj/130m/B1_T2048' -test.benchtime 1x 2>&1 | tee "$OUT/fused_ncu.txt" \
    | grep -E "Duration|Elapsed|SM Active|Issued|Eligible|Theoretical Occ|Achieved Occ|Block Limit"
  echo "== bf16 prefills, the conv and x_proj as two nodes against one kernel (BenchmarkFusedConvXProj)"
  bench_log fused_bench 200 .carry/gpu.test FusedConvXProj "fused conv "
  exit $status
fi
if [[ $mode == helpers ]]; then
  echo "== the one-pass scan with warps that specialize: float64 and the plain walk's bits; racecheck, synccheck, memcheck"
  run_tests helpers_kernels 200 .carry/kernels.test -test.v -test.run 'ConvAndScan|DTProj|Spill'
  for tool in racecheck synccheck memcheck; do sanitizer $tool ${tool}_helpers 200 .carry/kernels.test 'ConvAndScan'; done
  echo "== the engine's scan tests (TestScanVariantsMatch: the plain walk's bits) and memcheck over them"
  run_tests helpers_engine 300 .carry/gpu.test -test.v -test.run 'ScanVariantsMatch|PrefillSettings|GraphsReplay'
  memcheck memcheck_helpers_engine 200 .carry/gpu.test 'ScanVariantsMatch'
  echo "== the scan alone, plain entry against warps that specialize (BenchmarkOnePass, taking turns)"
  ONEPASS_KNOBS=${ONEPASS_KNOBS:-helpers} bench_log helpers_onepass 200 .carry/kernels.test OnePass "onepass |differs"
  echo "== bf16 prefills, plain entry against warps that specialize, without and with dt_proj in its tiles"
  bench_log helpers_prefill 400 .carry/gpu.test 'ScanHelpers|ScanDTProj' "scan helpers"
  [[ -n ${HELPERS_PROFILE:-} ]] || exit $status
  echo "== stall samples: the plain entry, then the warps that specialize (130m B=1 T=2048, scan alone)"
  ONEPASS_KNOBS=helpers source_stalls helpers_plain scan_onepass2_bf16 3 .carry/kernels.test 'OnePass'
  ONEPASS_KNOBS=helpers source_stalls helpers_ws scan_onepass2w_bf16 3 .carry/kernels.test 'OnePass'
  exit $status
fi
if [[ $mode == xptimeline ]]; then
  echo "== our x_proj's stages from inside the kernel, each launch alone (BenchmarkXProjTimeline, an XP_TIMELINE build)"
  bench_log xproj_timeline 200 .carry/kernels.test 'XProjTimeline' "timeline "
  exit $status
fi
if [[ $mode == xproj ]]; then
  echo "== our x_proj (kernels/xproj.cu) against float64, memcheck, racecheck"
  run_tests xproj_kernels 150 .carry/kernels.test -test.v -test.run '^TestXProjKernel$'
  memcheck memcheck_xproj 150 .carry/kernels.test '^TestXProjKernel$'
  sanitizer racecheck racecheck_xproj 150 .carry/kernels.test '^TestXProjKernel$'
  echo "== the engine with it against cuBLAS's x_proj (TestOwnXProjMatches), memcheck"
  run_tests xproj_engine 300 .carry/gpu.test -test.v -test.run 'OwnXProj.*Matches|AutoXProjMatches|XProjSlicesMatches|PrefillSettings|GraphsReplay'
  memcheck memcheck_xproj_engine 200 .carry/gpu.test '(OwnXProjTMA|AutoXProj|XProjSlices)Matches/d=768_bfloat16_B1_T300'
  echo "== x_proj alone, cuBLASLt against ours (BenchmarkXProj)"
  bench_log xproj_bench 120 .carry/kernels.test 'XProj$' "xproj "
  if [[ -n ${XPROJ_PROFILE:-} ]]; then
    echo "== ncu on xproj10_bf16 at 2048 x 1536 x 80 (TestXProjKernel's first launch), caches as left"
    timeout 120 ncu --cache-control none --clock-control none -k 'regex:^xproj10_bf16' --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
      --section LaunchStats .carry/kernels.test -test.run '^TestXProjKernel$' 2>&1 | tee "$OUT/xproj_ncu.txt" \
      | grep -E "Duration|Throughput|Busy|Hit Rate|Achieved Occ|Theoretical Occ|Cluster|Stall|Warp Cycles|Issued" | head -40
    echo "== stall samples of xproj10_bf16 at 130m T=2048, in BenchmarkXProj's graphs (L2 warm)"
    source_stalls xproj xproj10_bf16 40 .carry/kernels.test 'XProj$/130m_T2048' --cache-control none
    echo "== cuBLASLt's x_proj kernel at the same shape and caches, for comparison"
    timeout 120 ncu --cache-control none --clock-control none -k 'regex:nvjet' --launch-skip 40 --launch-count 1 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
      .carry/kernels.test -test.run '^$' -test.bench 'XProj$/130m_T2048' -test.benchtime 1x 2>&1 | tee "$OUT/xproj_nvjet_ncu.txt" \
      | grep -E "nvjet|Duration|Throughput|Hit Rate|Grid Size|Cluster|Registers|Shared Memory Config|Warp Cycles|Issued" | head -30
  fi
  [[ -n ${XPROJ_NO_PREFILL:-} ]] && exit $status
  # XPROJ_PREFILL_BENCH names other gpu.test benchmarks (e.g. XProjSlices).
  echo "== bf16 prefills, x_proj settings off and on (${XPROJ_PREFILL_BENCH:-OwnXProj})"
  bench_log xproj_prefill 300 .carry/gpu.test "${XPROJ_PREFILL_BENCH:-OwnXProj}" "x_proj"
  exit $status
fi
if [[ $mode == outnorm ]]; then
  echo "== out_norm (kernels/out_norm.cu: out_proj, the residual add and the next RMSNorm in a cluster) against float64, memcheck, racecheck"
  run_tests outnorm_test 150 .carry/kernels.test -test.v -test.run 'OutNormKernel'
  memcheck memcheck_outnorm 150 .carry/kernels.test 'OutNormKernel'
  timeout 150 compute-sanitizer --tool racecheck --print-limit 10 .carry/kernels.test -test.run 'OutNormKernel' \
    > "$OUT/racecheck_outnorm.txt" 2>&1; tail -3 "$OUT/racecheck_outnorm.txt"
  echo "== the engine's prefill tests with it (TestFusedOutNormMatches: fused against unfused)"
  run_tests outnorm_engine 300 .carry/gpu.test -test.v -test.run 'FusedOutNorm|PrefillSettings|GraphsReplay|DeviceEntry|Mixed'
  memcheck memcheck_outnorm_engine 200 .carry/gpu.test 'FusedOutNormMatches/bfloat16_B1_T300'
  echo "== out_norm against cuBLASLt's out_proj then rmsnorm (BenchmarkOutNorm)"
  bench_log outnorm_bench 120 .carry/kernels.test OutNorm "out_norm "
  echo "== bf16 prefills, out_proj and the norm unfused against fused (BenchmarkFusedOutNorm)"
  bench_log outnorm_prefill 200 .carry/gpu.test FusedOutNorm "fused out_proj"
  [[ -n ${OUTNORM_PROFILE:-} ]] || exit $status
  echo "== ncu on out_norm at 130m T=2048"
  timeout 150 ncu --clock-control none -k 'regex:out_norm_bf16' --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
    .carry/kernels.test -test.run '^$' -test.bench "OutNorm/130m_T2048" -test.benchtime 1x 2>&1 \
    | tee "$OUT/outnorm_ncu.txt" | grep -E "Duration|Throughput|Hit Rate|Issued|Eligible|Achieved Occ|Theoretical Occ|Cluster|Waves" | head -40
  exit $status
fi
if [[ $mode == gemmtma ]]; then
  echo "== gemm_tma (kernels/gemm_tma.cu: TMA and wgmma) against float64, memcheck, then against cuBLASLt (BenchmarkGemmTMA)"
  run_tests gemmtma_test 120 .carry/kernels.test -test.v -test.run 'GemmTMA'
  memcheck memcheck_gemmtma 120 .carry/kernels.test 'GemmTMAKernel'
  timeout 200 .carry/kernels.test -test.v -test.run '^$' -test.bench GemmTMA -test.benchtime 1x 2>&1 \
    | tee "$OUT/gemmtma_bench.log" | grep -E "gemm_tma |FAIL|panic" | sed 's/^ *gemm_tma_test.go:[0-9]*: //'
  [[ -n ${GEMMTMA_PROFILE:-} ]] || exit $status
  echo "== ncu on gemm_tma (the default build) at ${GEMMTMA_SHAPE:=130m_in_proj_T2048}: sections, then stall samples"
  timeout 150 ncu --clock-control none -k 'regex:gemm_tma_bf16' --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    .carry/kernels.test -test.run '^$' -test.bench "GemmTMA/$GEMMTMA_SHAPE" -test.benchtime 1x 2>&1 \
    | tee "$OUT/gemmtma_ncu.txt" | grep -E "Duration|Throughput|Hit Rate|Stall|Issued|Eligible|Achieved Occ|Theoretical Occ|Warp Cycles" | head -40
  source_stalls gemmtma gemm_tma_bf16 3 .carry/kernels.test "GemmTMA/$GEMMTMA_SHAPE"
  exit $status
fi
if [[ $mode == pdl ]]; then
  echo "== the prefill's kernels under programmatic dependent launch (Engine.PrefillPDL)"
  setting_ab pdl PDL PrefillPDL pdl
  exit $status
fi
if [[ $mode == scantma ]]; then
  echo "== Engine.ScanTMA: the scan's dt_low, u, z, B and C tiles through the copy engine (scan_onepass2wdt_)"
  sanitizer racecheck racecheck_scantma 240 .carry/kernels.test 'ConvAndScan'
  setting_ab scantma scantma ScanTMA scantma
  echo "== the scan's stages, the engine's entry beside the copy engine's (BenchmarkOnePassTimeline, bits compared)"
  TIMELINE_BUILDS=tma bench_log scantma_timeline 200 .carry/kernels.test OnePassTimeline "timeline "
  exit $status
fi
if [[ $mode == embednorm ]]; then
  echo "== Engine.EmbedNorm: the first RMSNorm looks the ids up itself (rmsnorm_embed)"
  memcheck memcheck_embed_kernel 100 .carry/kernels.test 'RMSNormEmbed|EmbedKernel'
  setting_ab embednorm embednorm EmbedNorm embednorm
  exit $status
fi
if [[ $mode == onepassknobs ]]; then
  echo "== the one-pass scan alone with each of \$ONEPASS_KNOBS beside the engine's build (BenchmarkOnePass, taking turns; bits compared)"
  bench_log onepass_knobs 300 .carry/kernels.test OnePass "onepass |differs"
  exit $status
fi
if [[ $mode == tuning ]]; then
  echo "== cuBLASLt's tuning repeated: which candidate each repeat picks, one round and three (BenchmarkLtTuning)"
  run_tests tuning_test 200 .carry/cuda.test -test.v -test.run 'GemmAlgos|PinnedGemm'
  bench_log tuning 300 .carry/cuda.test LtTuning "picks"
  exit $status
fi
if [[ $mode == residual ]]; then
  echo "== Engine.ResidualPrefetch: the scan asks L2 for the residual rows out_proj adds into"
  setting_ab residual prefetch_random_bf16 ResidualPrefetch "residual prefetch"
  exit $status
fi
if [[ $mode == memsets ]]; then
  echo "== Engine.MemsetKernels, HoistMemsets and FoldMemsets: cuBLASLt's workspace memsets in captured graphs"
  SHOW=edited run_tests memsets_cuda 120 .carry/cuda.test -test.v -test.run 'CaptureEditing|Layout|LaunchCopyGraph'
  run_tests memsets_kernels 120 .carry/kernels.test -test.v -test.run 'MemsetRows|Spill|RMSNorm'
  SHOW="memsets edited" run_tests memsets_test 300 .carry/gpu.test -test.v \
    -test.run 'PrefillSettings|MemsetEdits130m|GraphsReplay|DeviceEntry|PrefillGraphCache|Mixed'
  memcheck memcheck_memsets_cuda 120 .carry/cuda.test 'CaptureEditing'
  memcheck memcheck_memsets 300 .carry/gpu.test 'PrefillSettings/(memsets|folds)_random_bf16'
  echo "== bf16 prefills with the memsets as captured and edited (BenchmarkMemsetEdits: graph replays, CUDA events, medians)"
  timeout 400 .carry/gpu.test -test.v -test.run '^$' -test.bench "${MEMSET_BENCH:-MemsetEdits/(130m|370m)/B1}" -test.benchtime 1x 2>&1 \
    | tee "$OUT/memsets_bench.log" | grep -E "memset|FAIL|panic" | sed 's/^ *bench_test.go:[0-9]*: //'
  exit $status
fi
if [[ $mode == buffers ]]; then
  echo "== the device entries' buffer checks and the GPU's choice (cuda:N): what the driver says of torch's memory, then the tests"
  timeout 120 python3 bench/pointer_probe.py || status=1
  timeout 120 .carry/cuda.test -test.v -test.run 'CheckBuffer|LaunchCopyGraph' -test.bench CheckBuffer -test.benchtime 20000x 2>&1 \
    | tee "$OUT/buffers_cuda.log" | grep -E "^(---|ok|FAIL|Benchmark)|pointer_test|panic" || status=1
  timeout 300 .carry/gpu.test -test.v -test.run 'RefuseBad|DeviceEntryMatches|DeviceEntryLogits|DevicePadded|GraphInPlace|GraphsReplay|EngineStepDevice|Decoder|StateWaits' 2>&1 \
    | tee "$OUT/buffers_gpu.log" | grep -E "^(---|ok|FAIL)|buffers_test|stepdevice_test|panic" || status=1
  memcheck memcheck_logits 300 .carry/gpu.test 'TestDeviceEntryLogits|TestEngineStepDevice'
  timeout 400 python3 -m pytest -q tests/test_gpu.py tests/test_hf.py tests/test_bad_input.py 2>&1 | tee "$OUT/buffers_pytest.log" | tail -15
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  exit $status
fi
if [[ $mode == hfforward ]]; then
  echo "== mambago.hf's forward, model(ids).logits, with ids on the GPU: logits made there against through the host (bench/hf_forward.py)"
  for shape in ${HF_FORWARD_SHAPES:-130m 1.4b}; do
    timeout 300 python3 bench/hf_forward.py --shape $shape --cases ${HF_FORWARD_CASES:-1x512,1x2048,8x512} \
      --out "$OUT/hf_forward_$shape.json" || status=1
  done
  exit $status
fi
if [[ $mode == stepgraph ]]; then
  echo "== StepDevice's kept step graph: the engine's tests, memcheck, pytest"
  run_tests stepgraph_gpu 200 .carry/gpu.test -test.v -test.run 'EngineStepDevice|DecoderKeepsStepGraph|DecoderGraphsShortRuns|DeviceEntryLogits'
  memcheck memcheck_stepgraph 200 .carry/gpu.test 'TestEngineStepDevice'
  timeout 200 python3 -m pytest -q tests/test_gpu.py tests/test_hf.py 2>&1 | tee "$OUT/stepgraph_pytest.log" | tail -2
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  python3 -m pip install -q --upgrade --no-deps --no-index --target /tmp/site_base .carry/base/mambago-*.whl || status=1
  echo "== bench/hf_cache.py, this build against .carry/base, taking turns"
  for shape in ${HF_CACHE_SHAPES:-130m}; do
    path=$(python3 -c "import sys; sys.path.insert(0, 'bench'); import random_checkpoint; print(random_checkpoint.cached('$shape'))")
    for round in 1 2; do
      for new in ${STEPGRAPH_NEW:-16 64}; do
        for build in base this; do
          site=/tmp/site; [[ $build == base ]] && site=/tmp/site_base
          PYTHONPATH=$site timeout 200 python3 bench/hf_cache.py "$path" --device cuda --dtype bfloat16 --T 512 --new $new \
            2>&1 | grep '"way": "cache"' | sed "s/^{/{\"shape\": \"$shape\", \"build\": \"$build\", \"round\": $round, /" \
            | tee -a "$OUT/stepgraph.jsonl"
        done
      done
    done
  done
  exit $status
fi
if [[ $mode == hfcache ]]; then
  echo "== a hand-written decoding loop through mambago.hf with CUDA tensors (bench/hf_cache.py)"
  for shape in ${HF_CACHE_SHAPES:-130m 1.4b}; do
    path=$(python3 -c "import sys; sys.path.insert(0, 'bench'); import random_checkpoint; print(random_checkpoint.cached('$shape'))")
    timeout 400 python3 bench/hf_cache.py "$path" --device cuda --dtype bfloat16 --T 512 --new 64 --hf \
      2>&1 | grep -v "falling back" | tee "$OUT/hf_cache_$shape.jsonl"
    [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  done
  exit $status
fi
if [[ $mode == steptrace ]]; then
  echo "== a bf16 decode step graph's kernels in place (bench/step_trace.py: CUPTI records through torch.profiler)"
  for shape in ${STEP_TRACE_SHAPES:-370m 2.8b}; do
    timeout 200 python3 bench/step_trace.py --shape $shape --B ${STEP_TRACE_B:-1} \
      --out "$OUT/step_trace_$shape.json" || status=1
  done
  exit $status
fi
if [[ $mode == graphtrace ]]; then
  echo "== a bf16 prefill graph's kernels in place (bench/graph_trace.py: CUPTI records through torch.profiler)"
  timeout 240 python3 bench/graph_trace.py --shape 130m --lengths ${TRACE_LENGTHS:-512,2048,8192} \
    --out "$OUT/graph_trace_130m.json" || status=1
  for shape in ${TRACE_SHAPES:-}; do
    timeout 200 python3 bench/graph_trace.py --shape $shape --lengths ${TRACE_SHAPE_LENGTHS:-2048} \
      --out "$OUT/graph_trace_$shape.json" || status=1
  done
  for gemm in ${TRACE_GEMMS:-}; do
    timeout 200 python3 bench/graph_trace.py --shape 130m --lengths 2048 --gemm $gemm \
      --out "$OUT/graph_trace_130m_$gemm.json" || status=1
  done
  exit $status
fi
if [[ $mode == instancetrace ]]; then
  echo "== models built one after another in one process, each traced (bench/graph_trace.py --instances)"
  for shape in ${TRACE_SHAPES:-130m}; do
    timeout 400 python3 bench/graph_trace.py --shape $shape --lengths ${TRACE_LENGTHS:-2048,8192} \
      --instances ${TRACE_INSTANCES:-6} ${TRACE_BETWEEN:+--between $TRACE_BETWEEN} --out "$OUT/instances_$shape.json" > "$OUT/instances_$shape.log" 2>&1 || status=1
    sed -n '/^== T=/,$p' "$OUT/instances_$shape.log"
  done
  exit $status
fi
if [[ $mode == hfprecision ]]; then
  echo "== issue 4's fixture bars for transformers' own bf16 and f16 models, beside mambago's (bench/hf_precision.py)"
  timeout 300 python3 bench/hf_precision.py --out "$OUT/hf_precision.json" > "$OUT/hf_precision.log" 2>&1 || status=1
  sed -n '/^mean KL/,$p' "$OUT/hf_precision.log"
  [[ $status == 0 ]] || tail -20 "$OUT/hf_precision.log"
  exit $status
fi
if [[ $mode == compile ]]; then
  echo "== the first load on a machine: kernels compiled up to 8 at once, and the notice before it (Go, then Python)"
  SHOW='open_test.go:[0-9]+:' run_tests open_test 300 .carry/mambago.test -test.v -test.run 'OpenReportsCompile'
  timeout 300 python3 -m pytest -q tests/test_gpu.py tests/test_bad_input.py tests/test_state_dict.py -k 'first_load or load_notice or state_dict' \
    > "$OUT/compile_pytest.log" 2>&1 || status=1
  tail -3 "$OUT/compile_pytest.log"
  run_tests compile_gpu 300 .carry/gpu.test -test.v -test.run 'TestGraphInPlace|TestPrefillGraphCache'
  echo "== every kernel compiled for sm_90 into an empty cache, whole sources against units, taking turns (3 rounds)"
  timeout 300 .carry/gpu.test -test.v -test.run '^$' -test.bench BenchmarkCompileKernels -test.benchtime 3x \
    > "$OUT/compile_bench.log" 2>&1 || status=1
  grep -E 'round|whole/units|FAIL|panic' "$OUT/compile_bench.log" | sed 's/^ *[a-z_]*\.go:[0-9]*: //'
  exit $status
fi
if [[ $mode == entry ]]; then
  echo "== a device-entry prefill's host overhead (bench/entry_overhead.py): per call, back to back, host"
  for shape in ${ENTRY_SHAPES:-130m 1.4b}; do
    timeout 200 python3 bench/entry_overhead.py --shape $shape --out "$OUT/entry_$shape.json" || status=1
  done
  echo "== the Go side of a device-entry prefill on the host, call by call (BenchmarkEntryHost)"
  timeout 200 .carry/gpu.test -test.v -test.run '^$' -test.bench EntryHost -test.benchtime 1x 2>&1 \
    | tee "$OUT/entry_host.log" | grep -E "entry host|FAIL|panic" | sed 's/^ *entry_bench_test.go:[0-9]*: //'
  exit $status
fi
if [[ $mode == entryab ]]; then
  echo "== BenchmarkEntryHost of .carry/base (BASE=<commit> device_build.sh) and of this build, taking turns, three rounds"
  for round in 1 2 3; do
    for bin in .carry/base/gpu.test .carry/gpu.test; do
      echo "-- round $round: $bin"
      timeout 100 $bin -test.v -test.run '^$' -test.bench EntryHost -test.benchtime 1x 2>&1 | tee -a "$OUT/entryab.log" \
        | grep -E "entry host|FAIL|panic" | sed 's/^ *entry_bench_test.go:[0-9]*: //' || status=1
    done
  done
  exit $status
fi
if [[ $mode == padcheck ]]; then
  echo "== left-padded batches (engine.Input.Pad), new and continuing: the conformance suite, default and small chunks"
  run_tests padcheck_gpu 300 .carry/gpu.test -test.v -test.run 'TestConformance|TestSmallChunks|TestMatchesCPU|TestDevice'
  run_tests padcheck_mambago 200 .carry/mambago.test -test.v -test.run 'Spans|Free'
  memcheck memcheck_padded 300 .carry/gpu.test 'TestConformance/padded-rows|TestSmallChunks/padded-rows|TestDevicePadded'
  timeout 300 python3 -m pytest -q tests/test_padding.py tests/test_bad_input.py tests/test_hf.py tests/test_cli.py \
    tests/test_gpu.py > "$OUT/padcheck_pytest.log" 2>&1 || status=1
  tail -3 "$OUT/padcheck_pytest.log"
  exit $status
fi
if [[ $mode == padded ]]; then
  echo "== a padded batch of new sequences: one prefill against one per row length (bench/padded.py)"
  timeout 400 python3 bench/padded.py --shape ${PADDED_SHAPE:-130m} --out "$OUT/padded.json" || status=1
  exit $status
fi
if [[ $mode == nvjetsass ]]; then
  echo "== do cuBLAS's sm90 GEMM kernels wait for the grid before them (griddepcontrol.wait, SASS ACQBULK)?"
  timeout 400 ncu --clock-control none -k "regex:${NVJET_KERNELS:-nvjet|gemm|gemv|rmsnorm_bf16}" --launch-skip ${NVJET_SKIP:-0} --launch-count ${NVJET_LAUNCHES:-80} \
    --section SourceCounters --page source --print-source sass \
    .carry/gpu.test -test.run '^$' -test.bench 'PrefillShapes/130m/B1_T2048' -test.benchtime 1x \
    > "$OUT/nvjet_sass.txt" 2>&1
  echo "ncu exit $?: $(wc -l < "$OUT/nvjet_sass.txt") lines"
  # ncu's source page: a "Kernel Name  <name>" line, then one line a SASS
  # instruction (address first) with its counters.
  python3 - "$OUT/nvjet_sass.txt" <<'PY' | tee "$OUT/nvjet_pdl.txt"
import collections, re, sys
seen = collections.OrderedDict()
kernel = None
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"Kernel Name\s+(\S+)", line)
    if m:
        kernel = m.group(1)
        seen.setdefault(kernel, {"launches": 0, "ACQBULK": 0, "PREEXIT": 0})
        seen[kernel]["launches"] += 1
        continue
    if kernel and line.startswith("0x"):  # a SASS line: address, then the instruction
        for op in ("ACQBULK", "PREEXIT"):
            if re.search(r"\b" + op + r"\b", line):
                seen[kernel][op] += 1
for k, v in seen.items():
    print(f"{k}: {v['launches']} launches profiled, ACQBULK lines {v['ACQBULK']}, PREEXIT lines {v['PREEXIT']}")
PY
  exit $status
fi
if [[ $mode == pytest ]]; then
  echo "== pytest \${PYTEST_ARGS:-tests}, the wheel of .carry"
  python3 -m pytest ${PYTEST_ARGS:--q -rs tests} 2>&1 | tee "$OUT/pytest.log" | grep -vE "^\[transformers\]" | tail -${PYTEST_TAIL:-40}
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  exit $status
fi
if [[ $mode == bind ]]; then
  echo "== replays in place: cuda.Graph.Bind and the device entries' graphs on the caller's buffers; memcheck"
  SHOW='_test.go:[0-9]+:' run_tests bind_cuda 120 .carry/cuda.test -test.v -test.run 'GraphBind|Layout|CaptureEditing'
  SHOW='_test.go:[0-9]+:' run_tests bind_gpu 300 .carry/gpu.test -test.v -test.run 'InPlace|GraphReplaysAcrossBuffers|PrefillGraphCache|DeviceEntry|Step'
  memcheck memcheck_bind_cuda 120 .carry/cuda.test 'GraphBind'
  memcheck memcheck_bind_gpu 300 .carry/gpu.test 'InPlace|GraphReplaysAcrossBuffers'
  grep -h -m 12 -E "^========= [A-Z]" "$OUT"/memcheck_bind_*.log
  exit $status
fi
if [[ $mode == poison ]]; then
  echo "== Engine.PoisonOutputs (off by default): memcheck over its settings test, then prefills with it on and off"
  memcheck memcheck_poison 300 .carry/gpu.test 'PrefillSettings/poison'
  timeout 300 .carry/gpu.test -test.v -test.run '^$' -test.bench PoisonOutputs -test.benchtime 1x 2>&1 | tee "$OUT/poison_bench.log" \
    | grep -E "poison |FAIL|panic" | sed 's/^ *bench_test.go:[0-9]*: //'
  exit $status
fi
if [[ $mode == instances ]]; then
  echo "== two engines of a shape in one process, taking turns (BenchmarkEngineInstances), the SM clock sampled beside"
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv -lms 500 > "$OUT/smi.csv" &
  smi=$!
  for bench in EngineInstances PoisonOutputs; do  # a process each: the first engine is its process's first
    timeout 300 .carry/gpu.test -test.v -test.run '^$' -test.bench "$bench" -test.benchtime 1x 2>&1 \
      | tee "$OUT/instances_$bench.log" | grep -E "instance |poison |FAIL|panic" | sed 's/^ *bench_test.go:[0-9]*: //'
  done
  kill $smi
  python3 - "$OUT/smi.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))[1:]
sm = [int(r[1].split()[0]) for r in rows if len(r) > 4 and r[1].strip()[0].isdigit()]
print(f"SM clock: {len(sm)} samples, min {min(sm)} MHz, max {max(sm)} MHz; temperature {rows[0][3].strip()} -> {rows[-1][3].strip()} C")
PY
  exit $status
fi
if [[ $mode == twopasses ]]; then
  echo "== the slow second pass: four B=1 shapes on fresh engines, twice in one process (BenchmarkTwoPasses)"
  timeout 400 .carry/gpu.test -test.v -test.run '^$' -test.bench TwoPasses -test.benchtime 1x > "$OUT/twopasses.log" 2>&1 || status=1
  grep -E "two passes|FAIL|panic" "$OUT/twopasses.log" | sed 's/^ *bench_test.go:[0-9]*: //'
  exit $status
fi
# build_bin BUILD names a build's engine test binary (base: .carry/base's).
build_bin() { [[ $1 == base ]] && echo .carry/base/gpu.test || echo .carry/gpu.test; }
# step_kernels LOG COUNT BINARY BENCH [NCU OPTIONS...]: ncu's time for each
# of the first COUNT kernels (the options pick them) of benchmark BENCH of a
# test binary, summed up per kernel, into $OUT/LOG.log, and the summary.
step_kernels() {
  local log=$1 count=$2 bin=$3 bench=$4
  shift 4
  timeout 250 ncu --clock-control none --launch-count "$count" --print-summary per-kernel "$@" \
    "$bin" -test.run '^$' -test.bench "$bench" -test.benchtime 1x > "$OUT/$log.log" 2>&1
  echo "-- $log: ncu exit $?"
  grep -E "^  [a-z_0-9]+ |gpu__time_duration|Duration" "$OUT/$log.log" | head -24
}
# alternate LOG BENCH: benchmark BENCH of .carry/base/gpu.test and of
# .carry/gpu.test, taking turns, $AB_ROUNDS (3) runs of each, into
# $OUT/LOG_base_<round>.log and $OUT/LOG_new_<round>.log.
alternate() {
  local log=$1 bench=$2 round build
  for round in $(seq "${AB_ROUNDS:-3}"); do
    for build in base new; do
      timeout 200 "$(build_bin $build)" -test.run '^$' -test.bench "$bench" -test.benchtime 1x > "$OUT/${log}_${build}_$round.log" 2>&1 \
        || status=1
    done
  done
}
if [[ $mode == ab ]]; then
  # .carry/base/gpu.test is another commit's build (BASE=<commit> bash
  # scripts/device_build.sh): the two builds take turns, three runs each.
  echo "== bf16 prefills at the bars' shapes, this build against .carry/base (BenchmarkPrefillShapes, graph replays)"
  [[ -x .carry/base/gpu.test ]] || { echo "no .carry/base/gpu.test"; exit 1; }
  # AB_ROUNDS (3) runs of each; AB_SHAPES, a regexp, picks shapes (e.g. '130m|370m').
  # go test splits -test.bench at each '/', one regexp a level, so AB_SHAPES
  # matches the model level only: '130m/B1_T2048|1.4b' does not do what it says.
  alternate ab "PrefillShapes/(${AB_SHAPES:-.*})/"
  python3 bench/ab.py "$OUT"/ab_base_*.log -- "$OUT"/ab_new_*.log | tee "$OUT/ab.md"
  exit $status
fi
decode_tests='Decode|GraphsReplay|GraphInPlace|DeviceEntry|DevicePadded|OddShapes|Reserve'  # the engine's decode tests
if [[ $mode == decodecheck ]]; then
  echo "== the decode step: kernels and engine tests, memcheck, racecheck"
  run_tests decode_kernels 200 .carry/kernels.test -test.v -test.run 'GEMV'
  run_tests decode_gpu 400 .carry/gpu.test -test.v -test.run "$decode_tests"
  memcheck memcheck_decode_kernels 200 .carry/kernels.test 'GEMV'
  memcheck memcheck_decode_gpu 400 .carry/gpu.test 'Decode'
  sanitizer racecheck racecheck_decode_kernels 200 .carry/kernels.test 'GEMV'
  exit $status
fi
if [[ $mode == wgkernels ]]; then
  export DECODE_SHAPES=${DECODE_SHAPES:-2.8b} DECODE_BATCHES=${DECODE_BATCHES:-1}
  echo "== ncu: each kernel of bf16 step graphs ($DECODE_SHAPES, B=$DECODE_BATCHES), a setting at a time"
  for setting in ${WG_SETTINGS:-off +out/4+fold}; do
    # SpeedOfLight alone (duration, memory throughput): the full set's ten
    # passes a kernel ran past the timeout at 2.8b (04b2576).
    DECODE_SETTINGS=$setting step_kernels "wgkernels_$(tr -c 'a-z0-9\n' _ <<< "$setting")" "${DECODE_NCU_COUNT:-300}" \
      .carry/gpu.test 'DecodeWarpgroup$' -k 'regex:step_|gemv|x_parts' --section SpeedOfLight
  done
  exit $status
fi
if [[ $mode == decodeverify ]]; then
  echo "== the decode step: the engine's decode and step-graph tests"
  run_tests decode_gpu 300 .carry/gpu.test -test.v -test.run "$decode_tests"
  exit $status
fi
if [[ $mode == decodekernels ]]; then
  echo "== ncu: each decode kernel of one bf16 step graph, ${DECODE_PROFILE:=1.4b/B8}, builds: ${DECODE_BUILDS:=base new}"
  for build in $DECODE_BUILDS; do
    step_kernels "decodekernels_$build" "${DECODE_NCU_COUNT:-400}" "$(build_bin $build)" "DecodeSteps/${DECODE_PROFILE}\$" \
      -k 'regex:step_in|gemv|step_scan'
  done
  exit $status
fi
if [[ $mode == decodeab ]]; then
  echo "== bf16 decode step graphs, this build against .carry/base, taking turns (BenchmarkDecodeSteps)"
  [[ -x .carry/base/gpu.test ]] || { echo "no .carry/base/gpu.test"; exit 1; }
  alternate decodeab DecodeSteps
  python3 - "$OUT" <<'PY'
import glob, re, statistics, sys
runs, bits = {}, {}  # shape -> build -> the times, and the logits hashes BenchmarkDecodeSteps logged
for path in sorted(glob.glob(sys.argv[1] + "/decodeab_*.log")):
    build, text = path.rsplit("/", 1)[1].split("_")[1], open(path).read()
    for m in re.finditer(r"^BenchmarkDecodeSteps/(\S+?)(?:-\d+)?\s+\d+\s+\d+ ns/op\s+([\d.]+) us/step", text, re.M):
        runs.setdefault(m.group(1), {}).setdefault(build, []).append(float(m.group(2)))
    for m in re.finditer(r"^--- BENCH: BenchmarkDecodeSteps/(\S+?)(?:-\d+)?\n(?:[ \t]+.*\n)*?[ \t]+\S+ logits bits ([0-9a-f]+)",
                         text, re.M):
        bits.setdefault(m.group(1), {}).setdefault(build, set()).add(m.group(2))
print("| shape | base us/step | new us/step | base/new | logits bits |\n|---|---|---|---|---|")
for shape, r in runs.items():
    b, n = statistics.median(r.get("base", [0])), statistics.median(r.get("new", [0]))
    h = bits.get(shape, {})
    same = "same" if h.get("base") and h.get("base") == h.get("new") and len(h["base"]) == 1 else f"DIFFER {h}"
    print(f"| {shape} | {b:.1f} {r.get('base')} | {n:.1f} {r.get('new')} | {b / n if n else 0:.3f} | {same} |")
PY
  exit $status
fi
if [[ $mode == handover ]]; then
  echo "== x_proj then the scan under PDL, both timeline builds on one clock (BenchmarkXProjScanHandover)"
  bench_log handover 200 .carry/kernels.test XProjScanHandover "handover "
  exit $status
fi
if [[ $mode == knob ]]; then
  knob=${KNOB:?KNOB names the NVRTC options of the build, e.g. -DOP_EARLY=1}
  echo "== the scan kernels against float64 built with $knob; racecheck, synccheck, memcheck"
  KERNELS_OPTS=$knob run_tests knob_kernels 200 .carry/kernels.test -test.v -test.run 'ConvAndScan|Spill'
  for tool in racecheck synccheck memcheck; do
    KERNELS_OPTS=$knob sanitizer $tool ${tool}_knob 240 .carry/kernels.test 'ConvAndScan'
  done
  echo "== the scan's stages, the engine's build and $knob's (BenchmarkOnePassTimeline)"
  TIMELINE_BUILDS=$knob bench_log knob_timeline 200 .carry/kernels.test OnePassTimeline "timeline "
  echo "== the scan alone, the engine's build against $knob's, taking turns (BenchmarkOnePass)"
  ONEPASS_KNOBS="helpers+dt,helpers+dt${knob// /}" bench_log knob_onepass 200 .carry/kernels.test OnePass "onepass |differs"
  exit $status
fi
if [[ $mode == tilecopy ]]; then
  echo "== a tile's copies into shared memory: the same bytes for every block, or each block's own (BenchmarkTileCopy)"
  bench_log tilecopy 120 .carry/kernels.test TileCopy "tile copy"
  exit $status
fi
if [[ $mode == timeline ]]; then
  echo "== the one-pass scan's stages from inside the kernel (BenchmarkOnePassTimeline, an OP_TIMELINE build)"
  bench_log timeline 200 .carry/kernels.test OnePassTimeline "timeline "
  exit $status
fi
if [[ $mode == shapes ]]; then
  echo "== bf16 prefills at the bars' shapes, this build (BenchmarkPrefillShapes, graph replays, CUDA events, medians)"
  timeout 300 .carry/gpu.test -test.run '^$' -test.bench "PrefillShapes/(${AB_SHAPES:-.*})/" -test.benchtime 1x 2>&1 \
    | tee "$OUT/shapes.log" | grep -E "tok/s|FAIL|panic"
  exit $status
fi
if [[ $mode == graphnode ]]; then
  echo "== what a near-empty kernel node and a 64-row GEMM node cost inside a graph (BenchmarkGraphNode)"
  timeout 200 .carry/kernels.test -test.v -test.run '^$' -test.bench GraphNode -test.benchtime 1x 2>&1 | tee "$OUT/graphnode.log" \
    | grep -E "graph node|FAIL|panic" | sed 's/^ *launch_bench_test.go:[0-9]*: //'
  exit $status
fi
# scan_sanitizers TAG: racecheck and memcheck over the scan kernels' test,
# into $OUT/racecheck_TAG.log and $OUT/memcheck_TAG.log, and their summaries.
scan_sanitizers() {
  for tool in racecheck memcheck; do
    timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 .carry/kernels.test -test.run 'ConvAndScan' \
      > "$OUT/${tool}_$1.log" 2>&1 || status=1
    echo "$tool scan: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/${tool}_$1.log" | tail -1)"
  done
}
if [[ $mode == scanknobs ]]; then
  echo "== the scan kernels against float64"
  .carry/kernels.test -test.v -test.run 'ConvAndScan|DTProj|Spill' > "$OUT/scan_test.log" 2>&1 || status=1
  grep -E "^(--- FAIL|ok|FAIL|PASS)|rel err" "$OUT/scan_test.log" | head -20
  scan_sanitizers scan
  echo "== the engine: mixed precision, conformance, scan variants, PDL, graphs, CPU match, device entries"
  .carry/gpu.test -test.v -test.run 'Mixed|TestConformance|ScanVariants|PrefillPDL|GraphsReplay|MatchesCPU|DeviceEntry' \
    > "$OUT/engine_test.log" 2>&1 || status=1
  grep -E "^(--- FAIL|ok|FAIL|PASS)|panic" "$OUT/engine_test.log" | head -20
  echo "== the one-pass scan alone, bf16, each knob setting taking turns (BenchmarkOnePass; bit for bit the engine's)"
  .carry/kernels.test -test.v -test.run '^$' -test.bench OnePass -test.benchtime 1x 2>&1 | tee "$OUT/onepass_knobs.log" \
    | grep -E "onepass |FAIL|differs|panic" | sed 's/^ *onepass_bench_test.go:[0-9]*: //'
  echo "== ncu source counters of the engine's one-pass scan (130m B=1 T=2048), summarized by bench/stalls.py"
  scan_stalls 4
  exit $status
fi
# segment_checks NAME: the scan kernels' float64 tests (walked once and in
# segments) into $OUT/NAME_kernels.log, then racecheck and memcheck.
segment_checks() {
  echo "== the scan kernels against float64, walked once and in segments; racecheck and memcheck"
  run_tests "$1_kernels" 200 .carry/kernels.test -test.v -test.run 'ConvAndScan|Spill'
  scan_sanitizers "$1"
}
if [[ $mode == segments ]]; then
  segment_checks segments
  echo "== the engine's tests that run prefills (TestScanVariantsMatch walks in segments)"
  SHOW="segments" run_tests segments_test 300 .carry/gpu.test -test.v \
    -test.run 'ScanVariants|TestSegments|Mixed|TestConformance|GraphsReplay|PrefillSettings|DeviceEntry|MatchesCPU|PrefillGraphCache'
  memcheck memcheck_segments 200 .carry/gpu.test 'ScanVariantsMatch'
  echo "== bf16 prefills, the scan walked once against in segments (BenchmarkScanSegments: graph replays)"
  timeout 300 .carry/gpu.test -test.v -test.run '^$' -test.bench ScanSegments -test.benchtime 1x 2>&1 \
    | tee "$OUT/segments_bench.log" | grep -E "segments |FAIL|panic" | sed 's/^ *bench_test.go:[0-9]*: //'
  exit $status
fi
if [[ $mode == fixup ]]; then
  segment_checks fixup
  echo "== the scan alone, walked once against in segments with scan_fixup (kernels' BenchmarkScanSegments)"
  timeout 200 .carry/kernels.test -test.v -test.run '^$' -test.bench ScanSegments -test.benchtime 1x 2>&1 \
    | tee "$OUT/fixup_kernel_bench.log" | grep -E "scan segments |FAIL|panic" | sed 's/^ *onepass_bench_test.go:[0-9]*: //'
  echo "== bf16 prefills, the scan walked once against in segments (the engine's BenchmarkScanSegments, auto)"
  SEGMENT_BENCH=auto timeout 240 .carry/gpu.test -test.v -test.run '^$' -test.bench ScanSegments -test.benchtime 1x 2>&1 \
    | tee "$OUT/fixup_bench.log" | grep -E "segments |FAIL|panic" | sed 's/^ *bench_test.go:[0-9]*: //'
  exit $status
fi
if [[ $mode == decodebatch ]]; then
  echo "== bf16 decode steps of 8 sequences, the batch's kernels off and on in turns (BenchmarkDecodeBatchSettings, \${DECODE_SHAPES:-all})"
  bench_log decode_batch 300 .carry/gpu.test DecodeBatchSettings "B=8:"
  exit $status
fi
if [[ $mode == gemvstalls ]]; then
  echo "== ncu: where the tensor-core GEMV's warps wait (gemv_tc_bf16 in BenchmarkGEMVBatch's in_proj, 1.4b sizes, B=8)"
  timeout 300 ncu --clock-control none -k 'regex:gemv_tc_bf16' --launch-skip 25 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SourceCounters --page source --print-source sass --csv \
    .carry/kernels.test -test.run '^$' -test.bench GEMVBatch -test.benchtime 1x > "$OUT/gemv_tc_source.csv" 2>&1
  echo "ncu exit $?: $(wc -l < "$OUT/gemv_tc_source.csv") lines"
  python3 bench/stalls.py "$OUT/gemv_tc_source.csv" --top 25 | tee "$OUT/gemv_tc_stalls.txt"
  exit $status
fi
if [[ $mode == gemvtc ]]; then
  echo "== TestGEMVKernel (the tensor-core entry at 8 and 16 warps against float64), racecheck, memcheck"
  run_tests gemv_test 200 .carry/kernels.test -test.v -test.run 'TestGEMVKernel'
  echo "gemv_tc cases: $(grep -cE 'gemv_tc_(split_)?bf16 K=' "$OUT/gemv_test.log"), worst rel err" \
    "$(grep -E 'gemv_tc_(split_)?bf16 K=' "$OUT/gemv_test.log" | awk '{print $NF}' | sort -g | tail -1)"
  sanitizer racecheck racecheck_gemv 200 .carry/kernels.test 'TestGEMVKernel'
  memcheck memcheck_gemv 200 .carry/kernels.test 'TestGEMVKernel'
  echo "== the engine's decode tests with the tensor-core GEMVs"
  run_tests decode_tc_test 300 .carry/gpu.test -test.v -test.run 'TestDecodeTensorCoresMatch|TestDecodeMatchesPrefill|TestDecodeScanBatchMatches'
  bash "$0" "$commit" gemvbatch || status=1
  bash "$0" "$commit" decodebatch || status=1
  exit $status
fi
if [[ $mode == wgdecode ]]; then
  echo "== the warpgroup GEMVs in the decode step: kernel tests, memcheck, the engine's decode tests, then steps off and on"
  SHOW="rel err" run_tests gemv_wg_test 200 .carry/kernels.test -test.v -test.run 'TestGEMVWGKernel|TestStepInWGKernel|TestGEMVWGNormFold'
  if [[ $status != 0 ]]; then echo "the warpgroup kernels' tests failed: nothing more"; exit 1; fi
  memcheck memcheck_gemv_wg 200 .carry/kernels.test 'TestGEMVWGKernel|TestStepInWGKernel|TestGEMVWGNormFold'
  run_tests decode_wg_test 300 .carry/gpu.test -test.v \
    -test.run 'TestDecodeWarpgroupMatches|TestDecodeMatchesPrefill|TestDecodeTensorCoresMatch|TestDecodePDLMatches|TestDecodeScanBatchMatches'
  bench_log decode_wg 300 .carry/gpu.test DecodeWarpgroup "warpgroup:"
  memcheck memcheck_decode_wg 300 .carry/gpu.test 'TestDecodeWarpgroupMatches'
  exit $status
fi
if [[ $mode == wgbench ]]; then
  echo "== decode steps with the warpgroup GEMVs off and on (BenchmarkDecodeWarpgroup; \${DECODE_SHAPES:-all}, batches \${DECODE_BATCHES:-8,4,1})"
  bench_log decode_wg 300 .carry/gpu.test DecodeWarpgroup "warpgroup:"
  exit $status
fi
if [[ $mode == outparts ]]; then
  echo "== out_proj split along k over 1-12 blocks on the fold: TestDecodeWarpgroupMatches, then BenchmarkDecodeOutParts (\${DECODE_SHAPES:-all}, batches \${DECODE_BATCHES:-8,1}, parts \${DECODE_PARTS:-1,2,3,4,6,8,12})"
  run_tests decode_wg_test 300 .carry/gpu.test -test.v -test.run 'TestDecodeWarpgroupMatches'
  bench_log decode_out_parts 400 .carry/gpu.test DecodeOutParts "out parts:"
  exit $status
fi
if [[ $mode == decodememcheck ]]; then
  echo "== memcheck over the engine's decode tests at New's settings and every warpgroup split (TestDecodeMatchesPrefill, TestDecodeWarpgroupMatches)"
  memcheck memcheck_decode ${MEMCHECK_SECONDS:-300} .carry/gpu.test 'TestDecodeMatchesPrefill|TestDecodeWarpgroupMatches'
  exit $status
fi
if [[ $mode == wggemv ]]; then
  echo "== gemv_wg_bf16 (wgmma m64n24k16 on TMA boxes, x as three bf16 parts): TestGEMVWGKernel, memcheck, then gemvbatch and cublasgemv"
  SHOW="rel err" run_tests gemv_wg_test 120 .carry/kernels.test -test.v -test.run 'TestGEMVWGKernel'
  if [[ $status != 0 ]]; then echo "TestGEMVWGKernel failed: no memcheck, no benchmark"; exit 1; fi
  memcheck memcheck_gemv_wg 150 .carry/kernels.test 'TestGEMVWGKernel'
  bash "$0" "$commit" gemvbatch || status=1
  bash "$0" "$commit" cublasgemv || status=1
  exit $status
fi
if [[ $mode == cublasgemv ]]; then
  echo "== the decode step's GEMMs at B=8 on cuBLAS (torch's F.linear in a CUDA graph; bench/cublas_gemv.py)"
  timeout 300 python3 bench/cublas_gemv.py --out "$OUT/cublas_gemv.json" 2>&1 | tee "$OUT/cublas_gemv.log" || status=1
  exit $status
fi
if [[ $mode == gemvbatch ]]; then
  echo "== the decode GEMVs at B=8 (1.4b and 2.8b sizes): FMA entries against the tensor-core entry's builds (BenchmarkGEMVBatch)"
  [[ -f .carry/base_step.cu ]] && export GEMV_BASE_SOURCE=.carry/base_step.cu
  bench_log gemv_batch 240 .carry/kernels.test GEMVBatch "gemv B=|rel err"
  exit $status
fi
if [[ $mode == gemv ]]; then
  echo "== the decode GEMVs against float64 and the one-sequence entries' bits; the decode step's bit checks"
  timeout 120 .carry/kernels.test -test.v -test.run 'GEMVKernel' > "$OUT/gemv_test.log" 2>&1 || status=1
  grep -E "^(--- FAIL|ok|FAIL|PASS)|b1" "$OUT/gemv_test.log" | head
  timeout 200 .carry/gpu.test -test.v -test.run 'DecodeOneSequence|DecodePDL|DecodeMatchesPrefill' > "$OUT/decode_test.log" 2>&1 || status=1
  grep -E "^(--- |ok|FAIL|PASS)" "$OUT/decode_test.log" | head
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 .carry/gpu.test -test.run 'DecodeOneSequence|DecodeMatchesPrefill' \
    > "$OUT/memcheck_decode.log" 2>&1 || status=1
  echo "memcheck decode: $(grep 'ERROR SUMMARY' "$OUT/memcheck_decode.log" | tail -1)"
  echo "== each 2.8b GEMV alone, wide against one-sequence builds taking turns (BenchmarkGEMVOneSequence)"
  timeout 200 .carry/kernels.test -test.v -test.run '^$' -test.bench GEMVOneSequence -test.benchtime 1x 2>&1 | tee "$OUT/gemv_bench.log" \
    | grep -E "gemv |FAIL|panic" | sed 's/^ *gemv_bench_test.go:[0-9]*: //'
  echo "== 1.4b and 2.8b decode step graphs, B=1 (BenchmarkBigShapes' decode paths)"
  timeout 300 .carry/gpu.test -test.run '^$' -test.bench 'BigShapes/.*/kernels_rows4' -test.benchtime 200x 2>&1 \
    | tee "$OUT/decode_bench.log" | grep -E "us/step|FAIL|panic"
  exit $status
fi
if [[ $mode == onepass ]]; then
  echo "== the scan and dt_proj kernels against float64"
  .carry/kernels.test -test.v -test.run 'ConvAndScan|DTProj' > "$OUT/scan_test.log" 2>&1 || status=1
  grep -E "^(--- FAIL|ok|FAIL|PASS)|rel err" "$OUT/scan_test.log" | head -40
  echo "== the mixed-precision engine against the f32 engine and the fixtures"
  .carry/gpu.test -test.v -test.run 'Mixed|TestConformance|ScanVariants' > "$OUT/mixed_test.log" 2>&1 || status=1
  grep -E "^(--- FAIL|ok|FAIL|PASS)|KL|state|argmax" "$OUT/mixed_test.log" | head -60
  timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 .carry/kernels.test -test.run ConvAndScan \
    > "$OUT/racecheck_kernels.log" 2>&1 || status=1
  echo "racecheck scan: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck_kernels.log" | tail -1)"
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 .carry/kernels.test -test.run ConvAndScan \
    > "$OUT/memcheck_kernels.log" 2>&1 || status=1
  echo "memcheck scan: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_kernels.log" | tail -1)"
  echo "== bf16 prefills, T=2048, with each scan (BenchmarkScanVariants: L<chunk>_onepass<states>; -1 chunked, 0 the engine's pick)"
  .carry/gpu.test -test.run '^$' -test.bench ScanVariants -test.benchtime 10x 2>&1 | tee "$OUT/scan_variants.log" \
    | grep tok/s | awk '{print $1, $(NF-1)}'
  echo "== ncu: the one-pass scan in a 130m B=1 T=2048 prefill (stall reasons, per-instruction samples)"
  timeout 240 ncu --clock-control none -k 'regex:scan_onepass2_bf16' --launch-skip 5 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section SpeedOfLight --export "$OUT/onepass_source" --page details \
    .carry/gpu.test -test.run '^$' -test.bench 'ScanVariants/130m/B1_T2048/L64_onepass2$' -test.benchtime 1x \
    > "$OUT/onepass_ncu.log" 2>&1
  echo "ncu exit $?: $(wc -l < "$OUT/onepass_ncu.log") lines"
  echo "== ncu: where its warps stall (cycles a issued instruction, by reason)"
  timeout 120 ncu --clock-control none -k 'regex:scan_onepass2_bf16' --launch-skip 5 --launch-count 1 \
    --section WarpStateStats --page raw \
    .carry/gpu.test -test.run '^$' -test.bench 'ScanVariants/130m/B1_T2048/L64_onepass2$' -test.benchtime 1x \
    > "$OUT/onepass_stalls.log" 2>&1
  grep -E "smsp__average_warp_latency_issue_stalled|smsp__average_warps_issue_stalled_.*_per_issue_active" \
    "$OUT/onepass_stalls.log" | awk '$NF + 0 >= 0.05' | sort -k3 -g -r | head -12
  exit $status
fi
if [[ $mode == gpu || $mode == all || $mode == tests ]]; then
  echo "== GPU: CUDA binding, kernels, engine and the mambago package (generate, states) against references"
  for t in cuda kernels gpu mambago; do
    .carry/$t.test -test.v > "$OUT/${t}_test.log" 2>&1; rc=$?
    grep -E "^(--- FAIL|ok|FAIL|PASS)|rel err|Error" "$OUT/${t}_test.log" | head -30
    echo "$t.test exit $rc"; [[ $rc == 0 ]] || status=1
  done
  if [[ ${TESTS_PYTEST:-1} == 1 ]]; then  # TESTS_PYTEST=0: the Go binaries alone
    echo "== pytest"
    python3 -m pytest -q -rs tests 2>&1 | tee "$OUT/pytest.log" | tail -6
  fi
fi
if [[ $mode == gpu || $mode == all || $mode == sanitize ]]; then
  echo "== compute-sanitizer memcheck (parts: ${SANITIZE_PARTS:=kernels prefill decode race})"
  # The engine's prefill and decode tests in separate calls of the
  # sanitizer, each within its limit: one call over both ran past 300 s,
  # while alone the decode tests took about 40 s (decode_a) and 230 s
  # (decode_b) on 2026-12-04. $SANITIZE_PARTS picks some, for a device call
  # each (all of them run past one call's 600 s). The
  # logs name each test as it runs (-test.v), so a run past its limit says
  # where it was.
  for part in $SANITIZE_PARTS; do
    case $part in
      kernels) memcheck memcheck_kernels 400 .carry/kernels.test 'RMS|Embed|ConvAndScan|DTProj|GEMV' ;;
      prefill) memcheck memcheck_gpu_prefill 400 .carry/gpu.test \
        'TestConformance/fixtures|MixedPrecisionFixtures|PrefillGraphCache|GraphReplaysAcrossBuffers|InPlace|DeviceEntry|ScanVariants|ScanChunk|DTProj' ;;
      decode) memcheck memcheck_gpu_decode 550 .carry/gpu.test 'Decode' ;;
      decode_a) memcheck memcheck_gpu_decode_a 200 .carry/gpu.test 'DecodeMatchesPrefill|DecodePDL|DecodeOneSequence|DecodeScanBatch' ;;
      decode_b) memcheck memcheck_gpu_decode_b 330 .carry/gpu.test 'DecodeTensorCores|DecodeWarpgroup' ;;
      race) sanitizer racecheck racecheck_kernels 300 .carry/kernels.test ConvAndScan ;;
      *) echo "SANITIZE_PARTS: no part $part (kernels, prefill, decode, decode_a, decode_b, race)"; status=1 ;;
    esac
  done
fi
if [[ $mode == gpubench || $mode == all ]]; then
  echo "== GPU stage times (130m shape, B=1, T=2048; Go benchmark; GPU_STAGES=0 skips)"
  [[ ${GPU_STAGES:-1} == 0 ]] || .carry/gpu.test -test.v -test.run '^$' -test.bench Prefill130m -test.benchtime 20x 2>&1 | tee "$OUT/gpu_stages.log" \
    | grep -v "^goos\|^goarch\|^pkg\|^=== \|^Benchmark.*[^s]$"
  echo "== GPU prefill, mambago vs Hugging Face (f32) ${BENCH_ARGS:-}"
  python3 bench/gpu_vs_hf.py --out "$OUT/gpu_vs_hf.json" --commit "$commit" ${BENCH_ARGS:-} 2>&1 \
    | grep -v "falling back\|Loading" | tee "$OUT/gpu_vs_hf.log"
fi
if [[ $mode == kerneltimes ]]; then
  echo "== ncu, warm caches: per-kernel times of a bf16 130m prefill (B=1, T=2048) and of a 2.8b decode step"
  times="--cache-control none --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
  timeout 300 ncu $times --launch-count 1500 .carry/gpu.test -test.run '^$' -test.bench 'Prefill130m/bfloat16/B1_T2048$' \
    -test.benchtime 1x > "$OUT/kerneltimes_130m.log" 2>&1
  echo "ncu exit $?"
  timeout 300 ncu $times --launch-skip 2000 --launch-count 700 .carry/gpu.test -test.run '^$' \
    -test.bench 'BigShapes/2.8b/kernels_rows4$' -test.benchtime 3x > "$OUT/kerneltimes_2.8b.log" 2>&1
  echo "ncu exit $?"
  for f in "$OUT"/kerneltimes_*.log; do
    echo "-- $f"; python3 scripts/ncu_summary.py "$f"
  done
fi
if [[ $mode == smallkernels ]]; then
  echo "== ncu, warm caches: per-kernel times of a bf16 130m prefill (B=1, T=2048)"
  times="--cache-control none --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
  timeout 300 ncu $times --launch-count 1500 .carry/gpu.test -test.run '^$' -test.bench 'Prefill130m/bfloat16/B1_T2048$' \
    -test.benchtime 1x > "$OUT/kerneltimes_130m.log" 2>&1
  echo "ncu exit $?"; python3 scripts/ncu_summary.py "$OUT/kerneltimes_130m.log"
  echo "== ncu: dt_proj and x_proj's GEMM in that prefill: throughput, occupancy, waves, stall reasons"
  timeout 200 ncu --clock-control none -k 'regex:dt_proj|nvjet_sm90_tss_32x64' --launch-skip 40 --launch-count 2 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --metrics \
    'smsp__issue_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,dram__bytes_write.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    .carry/gpu.test -test.run '^$' -test.bench 'Prefill130m/bfloat16/B1_T2048$' -test.benchtime 1x \
    > "$OUT/small_ncu.log" 2>&1
  echo "ncu exit $?"; grep -E "^  [a-z_0-9]+ |Duration|Throughput|Occupancy|Waves|Registers|Block Limit|pct|ratio|bytes" \
    "$OUT/small_ncu.log" | awk '$NF!="0"' | head -80
fi
if [[ $mode == kerneltimes8 ]]; then
  echo "== ncu, warm caches: per-kernel times of a bf16 2.8b prefill at B=8, T=2048 (the engine's pick)"
  times="--cache-control none --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
  # One prefill is 64 layers of about 10 launches; skip the first (warm-up) prefill.
  timeout 300 ncu $times --launch-skip 700 --launch-count 660 .carry/gpu.test -test.run '^$' \
    -test.bench 'ScanVariants/2.8b/B8_T2048/L64_onepass0$' -test.benchtime 1x > "$OUT/kerneltimes_2.8b_B8.log" 2>&1
  echo "ncu exit $?"
  python3 scripts/ncu_summary.py "$OUT/kerneltimes_2.8b_B8.log"
fi
if [[ $mode == clocks ]]; then
  echo "== SM clock and power during back-to-back bf16 2.8b prefills at B=8, T=2048 (nvidia-smi every 100 ms)"
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
    --format=csv,noheader -lms 100 > "$OUT/clocks.csv" 2>&1 &
  smi=$!
  .carry/gpu.test -test.run '^$' -test.bench 'ScanVariants/2.8b/B8_T2048/L64_onepass0$' -test.benchtime 20x 2>&1 \
    | grep tok/s | awk '{print $1, $(NF-1), "tok/s"}'
  kill $smi
  python3 - "$OUT/clocks.csv" <<'PY'
import sys, statistics
rows = [l.split(", ") for l in open(sys.argv[1]) if l.count(",") >= 5]
busy = [r for r in rows if float(r[3].split()[0]) > 200]  # samples under load (W)
for name, i in (("SM MHz", 1), ("mem MHz", 2), ("power W", 3), ("temp C", 4)):
    v = [float(r[i].split()[0]) for r in busy]
    if v: print(f"{name}: median {statistics.median(v):.0f}, min {min(v):.0f}, max {max(v):.0f} over {len(v)} loaded samples")
print("throttle reasons seen:", sorted({r[5].strip() for r in busy}))
PY
fi
if [[ $mode == decodeprof ]]; then
  echo "== decode step: graph replay time, then ncu's per-kernel times (130m shape, B=1)"
  .carry/gpu.test -test.run '^$' -test.bench 'Prefill130m/.*/B1_step' -test.benchtime 200x 2>&1 | grep "ns/op"
  # One step is 24 layers x 4 kernels + the LM head; 400 launches cover both dtypes' captures and warm-ups.
  timeout 300 ncu --clock-control none -k 'regex:step_in|gemv|step_scan' --launch-count 400 --print-summary per-kernel \
    .carry/gpu.test -test.run '^$' -test.bench 'Prefill130m/.*/B1_step' -test.benchtime 3x > "$OUT/decode_ncu.log" 2>&1
  echo "ncu exit $?"; grep -E "^  [a-z_0-9]+|gpu__time_duration|Duration" "$OUT/decode_ncu.log" | head -60
  # Why the kernels take what they take: pipe use and warp stall reasons, for
  # a few launches of the decode kernels and of the bf16 prefill's scan.
  sections="--section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section Occupancy"
  timeout 200 ncu --clock-control none -k 'regex:step_in(_r4)?(_b1)?_bf16|gemv(_r4)?(_b1)?_bf16|step_scan' --launch-skip 100 --launch-count 6 $sections \
    .carry/gpu.test -test.run '^$' -test.bench 'Prefill130m/bfloat16/B1_step_graph$' -test.benchtime 3x > "$OUT/decode_ncu_detail.log" 2>&1
  timeout 200 ncu --clock-control none -k 'regex:scan_chunk|dt_proj' --launch-skip 30 --launch-count 6 $sections \
    .carry/gpu.test -test.run '^$' -test.bench 'Prefill130m/bfloat16/B1_T2048$' -test.benchtime 1x > "$OUT/scan_ncu.log" 2>&1
  echo "ncu detail exit $?: $(grep -c 'Section:' "$OUT/scan_ncu.log") sections for the scan"
  grep -E "^  [a-z_0-9]+\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Stall|Issue Slots Busy|Registers Per" \
    "$OUT/scan_ncu.log" | head -60
fi
if [[ $mode == profile ]]; then
  echo "== ncu: one bf16 decode step at 1.4b (the kernels), per kernel; dt_proj at 130m"
  timeout 300 ncu --clock-control none -k 'regex:step_in|gemv|step_scan' --launch-count 193 --print-summary per-kernel \
    .carry/gpu.test -test.run '^$' -test.bench 'BigShapes/1.4b/kernels$' -test.benchtime 1x > "$OUT/decode_big_ncu.log" 2>&1
  echo "ncu exit $?"; grep -E "^  [a-z_0-9]+ |Duration" "$OUT/decode_big_ncu.log" | head -24
  timeout 200 ncu --clock-control none -k 'regex:dt_proj' --launch-skip 30 --launch-count 3 --section SpeedOfLight \
    --section Occupancy .carry/gpu.test -test.run '^$' -test.bench 'Prefill130m/bfloat16/B1_T2048$' -test.benchtime 1x \
    > "$OUT/dtproj_ncu.log" 2>&1
  echo "ncu exit $?"; grep -E "^  [a-z_0-9]+ |Duration|Throughput|Achieved Occ" "$OUT/dtproj_ncu.log" | head -24
fi
if [[ $mode == inplace ]]; then
  echo "== ncu on the nodes of a bf16 130m B=1 T=2048 prefill graph, in place (caches as the graph leaves them): time, DRAM and L2 bytes"
  metrics=${INPLACE_METRICS:-gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active}
  timeout 400 ncu --graph-profiling node --cache-control none --clock-control none --launch-skip ${INPLACE_SKIP:-3000} \
    --launch-count ${INPLACE_COUNT:-48} --metrics $metrics --csv --page raw \
    .carry/gpu.test -test.run '^$' -test.bench 'PrefillShapes/130m/B1_T2048$' -test.benchtime 1x > "$OUT/inplace.csv" 2> "$OUT/inplace.err"
  echo "ncu exit $?: $(wc -l < "$OUT/inplace.csv") lines"
  python3 bench/inplace.py "$OUT/inplace.csv" | tee "$OUT/inplace.md"
  exit $status
fi
if [[ $mode == dtproj ]]; then
  echo "== dt_proj: the kernel test, BenchmarkDTProj, ncu in a 2.8b prefill at B=8"
  .carry/kernels.test -test.run DTProjKernel -test.v 2>&1 | tee "$OUT/dtproj_test.log" | grep -E "rel err|^--- |^ok|FAIL"
  .carry/kernels.test -test.run '^$' -test.bench DTProj -test.benchtime 20x 2>&1 | tee "$OUT/dtproj_bench.log" \
    | grep -E " us|FAIL|rel err"
  timeout 200 ncu --clock-control none -k 'regex:dt_proj' --launch-skip 70 --launch-count 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --metrics \
    'sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    .carry/gpu.test -test.run '^$' -test.bench 'ScanVariants/2.8b/B8_T2048/L64_onepass0$' -test.benchtime 1x \
    > "$OUT/dtproj_ncu.log" 2>&1
  echo "ncu exit $?"; grep -E "dt_proj|Duration|Throughput|pct|ratio|bytes|Hit" "$OUT/dtproj_ncu.log" | awk '$NF!="0"' | head -40
fi
if [[ $mode == sourceprof ]]; then
  echo "== ncu source counters: where the bf16 one-pass scan's warps stall (130m, B=1, T=2048)"
  scan_stalls 6
fi
if [[ $mode == mamba_ssm ]]; then
  echo "== bf16: mambago vs mamba_ssm (builds mamba_ssm and causal-conv1d for sm_90 first) ${BENCH_ARGS:-}"
  # A build from an earlier call comes back as $OUT/mamba_site.tgz; kept in
  # .carry/mamba/, it saves the next call the build.
  if [[ -f .carry/mamba/mamba_site.tgz ]]; then
    tar -xzf .carry/mamba/mamba_site.tgz -C /tmp
  elif [[ ! -d /tmp/mamba_site/mamba_ssm ]]; then
    bash bench/mamba_ssm/build.sh /tmp/mamba_site 2>&1 | tee "$OUT/mamba_ssm_build.log"
    tar -czf "$OUT/mamba_site.tgz" -C /tmp mamba_site
  fi
  PYTHONPATH=/tmp/mamba_site:$PYTHONPATH python3 bench/mamba_ssm/compare.py --out "$OUT/bf16_vs_mamba_ssm.json" \
    --commit "$commit" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bf16_vs_mamba_ssm.log"
fi
if [[ $mode == cpu || $mode == all ]]; then
  # the engine's own GEMMs, as blas="auto" runs them with AVX-512F; CPU_STAGES_BLAS=1: numpy's OpenBLAS
  echo "== Go CPU engine stage timings (130m shape, B=1, T=512)"
  MAMBAGO_TEST_BLAS=$([[ ${CPU_STAGES_BLAS:-0} == 1 ]] && python3 -c "import mambago.model as m; print(m.numpy_blas())") \
    .carry/cpu.test -test.run '^$' -test.bench 'Prefill130m/B1_T512' -test.benchtime 3x 2>&1 | tee "$OUT/cpu_stages.log" | grep -v "^goos\|^goarch\|^pkg\|PASS"
  echo "== CPU prefill, mambago vs Hugging Face"
  python3 bench/cpu_vs_hf.py --out "$OUT/cpu_vs_hf.json" --lengths 512,128,2048 --commit "$commit" 2>&1 \
    | grep -v "falling back" | tee "$OUT/cpu_vs_hf.log"
fi
if [[ $mode == cpusgemm ]]; then
  echo "== the own SGEMM's micro-kernels against gonum (GOMAXPROCS $(nproc))"
  .carry/cpu.test -test.run '^$' -test.bench 'Sgemm$' -test.benchtime 10x 2>&1 | tee "$OUT/cpu_sgemm.log" | grep Bench
  echo "== CPU prefill, the own SGEMM against numpy's OpenBLAS"
  python3 bench/cpu_blas.py "$OUT/cpu_blas.json" 128,512,2048 3 2>&1 | tee "$OUT/cpu_blas.log"
fi
if [[ $mode == cpudecode ]]; then
  echo "== CPU decode steps, the engine's own GEMMs against numpy's OpenBLAS (${CPU_DECODE_ARGS:=float32,bfloat16 1,2,8 go,openblas})"
  python3 bench/cpu_decode.py "$OUT/cpu_decode.json" $CPU_DECODE_ARGS 2>&1 | tee "$OUT/cpu_decode.log"
fi
if [[ $mode == cpuab ]]; then
  # .carry/base/cpu.test (device_build.sh with BASE=<commit>) and this build's, taking turns
  # ($CPUAB_ROUNDS rounds, 3 unless told), the engine's own GEMMs as blas="auto" runs them.
  echo "== CPU engine, base against this build: 130m prefills (T=128, 512) with stage times, then decode steps (GOMAXPROCS $(nproc))"
  for round in $(seq "${CPUAB_ROUNDS:-3}"); do
    for build in base new; do
      bin=.carry/cpu.test
      [[ $build == base ]] && bin=.carry/base/cpu.test
      log=$OUT/cpuab_${build}_$round.log  # few files: what comes back is limited in count
      timeout 120 $bin -test.run '^$' -test.bench 'Prefill130m' -test.benchtime 5x > "$log" 2>&1 || status=1
      timeout 120 $bin -test.run '^$' -test.bench 'Storage130m/(float32|bfloat16)/step_B(1|8)$' -test.benchtime 40x \
        >> "$log" 2>&1 || status=1
      echo "round $round $build: $(grep -hE 'tok/s|ms/step| scan | conv ' "$log" \
        | awk '$1 ~ /^Benchmark/ {sub(/^Benchmark[A-Za-z0-9]*\//, "", $1); printf "%s %s  ", $1, $(NF-1); next} {printf "%s %s  ", $1, $2}')"
    done
  done
fi
if [[ $mode == ownblas ]]; then
  echo "== the own GEMMs against numpy's OpenBLAS, own/blas time (BenchmarkOwnAgainstBLAS; GOMAXPROCS ${GOMAXPROCS:-$(nproc)})"
  lib=$(python3 -c "import mambago.model as m; print(m.numpy_blas())")
  for held in no yes; do
    log=$OUT/own_blas_avx2held_$held.log
    hold=()
    [[ $held == yes ]] && hold=(MAMBAGO_BENCH_AVX2=1 OPENBLAS_CORETYPE=Haswell)
    env "${hold[@]}" MAMBAGO_TEST_BLAS="$lib" timeout 250 .carry/cpu.test -test.run '^$' -test.bench OwnAgainstBLAS \
      -test.benchtime 15x > "$log" 2>&1 || status=1
    echo "held to AVX2: $held"
    grep Bench "$log" | awk '{print "  " $1, "blas", $5, "own", $7, "own/blas", $9}'
  done
fi
if [[ $mode == cpujobs ]]; then
  echo "== CPU conv/scan task widths (130m shape, B=1, T=512; GOMAXPROCS $(nproc))"
  MAMBAGO_TEST_BLAS=$(python3 -c "import mambago.model as m; print(m.numpy_blas())") \
    .carry/cpu.test -test.run '^$' -test.bench ConvScanJobs -test.benchtime 5x 2>&1 | tee "$OUT/cpu_jobs.log" | grep "ch[0-9]"
fi
exit $status
