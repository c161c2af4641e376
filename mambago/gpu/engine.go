package gpu

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/mambago/mambago/mambago/checkpoint"
	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
	"github.com/mambago/mambago/mambago/safetensors"
)

// layer holds one block's weights in device memory; a zero Ptr is an absent bias.
type layer struct {
	norm, inProj, inBias, conv, convBias, xProj, dtProj, dtBias, a2, d, outProj, outBias cuda.Ptr
}

// Engine is the CUDA engine, in f32 or in bf16/f16 mixed precision: then the
// big GEMMs (in_proj, x_proj, out_proj, lm_head) take their weights and
// inputs (the normed hidden states, the conv output, the scan output) in
// bf16/f16 and accumulate in f32; everything else (GEMM outputs, dt_proj,
// the residual stream, the scan and the carried state) is f32. Its calls
// are serialised: one stream, one workspace.
type Engine struct {
	mu      sync.Mutex
	cfg     checkpoint.Config
	dt      cuda.DType
	dev     *cuda.Device
	stream  *cuda.Stream
	blas    *cuda.BLAS
	fn      map[string]*cuda.Function
	modules []*cuda.Module
	bufs    []*cuda.Buffer // every weight buffer, freed by Close

	emb, normF, lmHead, inputProj, inputBias cuda.Ptr
	layers                                   []layer

	ws     workspace
	wg     *wgMaps // the warpgroup GEMVs' tensor maps, once encoded
	closed bool    // set by Close; every later call fails

	// The prefill graph cache of SetPrefillGraphs, least recently used first.
	graphCap   int
	graphs     map[graphKey]*Graph
	graphOrder []graphKey
	last       *cuda.Event // the end of the latest call's work, which the next call waits for
	// ChunkRows bounds B·T per pass; longer prompts run in chunks along T.
	ChunkRows int
	// ScanChunk is the scan's chunk length in positions (a multiple of 8);
	// 0 picks DefaultScanChunk. Changing it resizes the workspace on the
	// next call, which invalidates captured graphs.
	ScanChunk int
	// ScanStaged runs the scan kernels that stage their inputs in shared
	// memory with cp.async (Scan.Staged). New turns it on (bf16 130m on the
	// H200: 69 µs of scan a layer against 74 at B=1, T=2048, and 16% less
	// at T=8192 and at B=8).
	ScanStaged bool
	// ScanOnePass picks the scan kernel: 2 or 4 runs the one-pass scan with
	// that many states a thread (Scan.OnePass, kernels/scan_onepass.cu)
	// wherever it applies, a negative value the chunked scan, and 0 picks
	// for each call's batch by OnePassStates. A device that cannot give the
	// one-pass kernel its shared memory (up to 96 KB) runs the chunked scan.
	ScanOnePass int
	// ScanSegments walks the one-pass scan at 2 states a thread in that
	// many segments of each sequence at once, then adds each later
	// segment's start state in parallel (Scan.Segments): 0 picks by
	// OnePassSegments for each call, a negative value or 1 walks once.
	// Turning it on or off resizes the workspace on the next call (the
	// segments' scratch), which invalidates captured graphs. New
	// sets -1: on the H200 (bf16 graph replays, BenchmarkScanSegments at
	// edbc9d5) the walk in 4 segments takes about 32.6 µs a 130m layer at
	// B=1 T=2048 against the single walk's 50, but scan_fixup about 25
	// more, so the prefill is slower: 130m B=1 0.905x at T=2048 and 0.936x
	// at T=8192, 370m 0.856x and 0.854x, 130m B=2 0.891x
	// (bench/results/2026-12-01-fixup.md).
	ScanSegments int
	// ScanHelpers runs the one-pass scan at 2 states a thread, walked once
	// and in one wave of blocks (Scan.WarpsApply: 130m and 370m at B=1),
	// with warps that specialize (Scan.Helpers): the walking warps run only
	// the chain, and as many more copy the tiles and compute the outputs.
	// Same bits. Only on sm_90 and later. New turns it on: on the H200
	// (bf16 graph replays, BenchmarkScanHelpers at 5b57d1b) 130m B=1
	// T=2048 1.037x, T=8192 1.055x, T=512 1.014x, 370m 1.031x. Set it
	// before capturing graphs.
	ScanHelpers bool
	// ScanDTProj, with ScanHelpers and DTProjTensorCores, has 4 more warps
	// of the scan's blocks compute the time step from dt_low, in place of
	// dt_proj's kernel, where that applies (Scan.FusedDTApplies: dt_rank a
	// multiple of 8 up to 64). Same bits. New turns it on: with
	// ScanHelpers, against neither (BenchmarkScanDTProj at 5b57d1b), 130m
	// B=1 T=2048 1.052x, T=8192 1.044x, T=512 1.063x, 370m 1.063x. Set it
	// before capturing graphs.
	ScanDTProj bool
	// ScanTMA, with ScanDTProj, has the scan's copying warps take each
	// tile's dt_low, u, z, B and C as four copy-engine (TMA) boxes from
	// one thread, where that applies (Scan.TMAApplies: B=1, d_state 16).
	// Same bits. Off by default: it makes 130m B=1 prefills 1.026x as
	// fast at T=2048 and 1.038x at T=8192 (370m 1.005x and 1.006x), but
	// with T=8192 gaining more, the 130m window (T=8192 over T=2048) is
	// +15.6% with it on, past issue 4's 15%
	// (bench/results/2026-12-02-scantma-4boxes.md). Set it before
	// capturing graphs.
	ScanTMA bool
	// DTProjTensorCores runs dt_proj on the tensor cores as 3xTF32
	// (DTProj.TensorCores). New turns it on for sm_80 and later.
	DTProjTensorCores bool
	// DTProjOneTF32Product makes that one TF32 product instead of three
	// (DTProj.OneTF32Product). New turns it on for bf16 engines, whose
	// error is their bf16 weights' (kernels/dtproj.cu).
	DTProjOneTF32Product bool
	// DTProjWarpgroup runs that one product on Hopper's warpgroup products
	// (DTProj.Warpgroup: dt_proj_wg_f32) on sm_90 devices, where it pays
	// (dtProjWGPays: 1.4b and 2.8b from 512 rows, where its rounds of row
	// groups are nearly full). The same bits as dt_proj_tc1_f32's at every
	// size TestDTProjWarpgroupMatches runs. New turns it on for sm_90.
	DTProjWarpgroup bool
	// DTProjShort runs dt_proj's tensor-core product on the short entries
	// (DTProj.Short: all of R staged at once, blocks of 32 rows) where
	// dtProjShortPays: prompts too short to give every SM blocks of the
	// other entries (1.4b at 129-256 rows). The same bits as
	// dt_proj_tc1_f32's (dt_proj_tc_f32's with three products). New turns
	// it on for bf16, where it was measured: 1.4b B=1 T=256 1.07-1.08x.
	DTProjShort bool
	// SkinnyGEMM runs in_proj and out_proj of a bf16 prefill chunk of at
	// most 128 rows on the skinny GEMM (kernels/gemv_wg.cu's
	// gemm_skinny_bf16_f32, skinnyApplies) instead of cuBLAS: short prompts
	// on the large shapes, where the weights set the GEMMs' time and
	// cuBLAS reads them at 1.6-2.8 TB/s. Sums in another order than
	// cuBLAS's, so not the same bits. Off by default: slower than cuBLAS
	// at every shape measured (1.4b T=128 prefills 0.83-0.86x; bench/
	// results/2026-12-04-skinny.md). Set it before capturing graphs.
	SkinnyGEMM bool
	// PrefillPDL launches the prefill's own kernels of each layer (RMSNorm,
	// conv, dt_proj and the one-pass scan) with programmatic dependent
	// launch: each may be launched, and run what reads only weights and the
	// carried state, while the kernel before it finishes; each waits for
	// that kernel before reading its results and lets the next one start
	// once its own stores are done. New turns it on for sm_90 and later
	// (bf16 graph replays on the H200, T=2048: 130m B=1 +3.0%; 370m and
	// 1.4b B=1, 130m and 2.8b B=8 within 0.4%). Set it before capturing
	// graphs.
	PrefillPDL bool
	// ResidualPrefetch is the most bytes of the residual stream's rows that
	// the one-pass scan asks L2 for, 8 tiles before its end
	// (scanPrefetchLead), for the out_proj after it to add into
	// (Scan.Prefetch); 0 asks for none. Those rows were last read at the
	// layer's start, and out_proj found them in HBM: with them in L2 its
	// cuBLASLt GEMM takes 9.6 µs instead of 11.4 at the 130m shape
	// (kernels' BenchmarkGemmPrefetch on branch issue4-prefetch). New sets
	// a quarter of L2 (15 MB on the H200) on sm_90 and later, where the
	// scan's bulk prefetch exists. bf16 graph replays on the H200: 130m B=1
	// T=2048 +0.5-0.9%, 370m +0.4-0.7%; larger rows (1.4b B=1, T=8192, B=8)
	// gained nothing or lost up to 1.2%. Set it before capturing graphs.
	ResidualPrefetch int
	// EmbedNorm has the first layer's RMSNorm look the token ids up in the
	// embedding table itself (rmsnorm_embed), writing the residual stream
	// as it norms it, in place of the embedding kernel before it: a kernel
	// a chunk fewer, and the stream written once instead of written and
	// read again. Same bits (TestPrefillSettingsMatch). On by default: bf16
	// graph replays on the H200 gave 1.000-1.005x at the bars' shapes (about
	// 3 µs less a 130m call at T=2048, as predicted; BenchmarkEmbedNorm,
	// bench/results/2026-12-01-tuning-embednorm.md). Set it before capturing
	// graphs.
	EmbedNorm bool
	// InPlaceReplays lets device-pointer replays of cached graphs read
	// token ids from, and write f32 outputs to, the caller's buffers in
	// place (Graph.InPlace) instead of copying through the graph's own.
	// Same bits (TestGraphInPlace). On by default; off only to measure it
	// (BenchmarkInPlaceReplays).
	InPlaceReplays bool
	// PoisonOutputs fills each output with NaN before a prefill or a decode
	// step writes it, so an element the kernels miss shows as NaN instead
	// of an earlier call's value. Every entry writes its whole output, so
	// this is a check for tests (which turn it on), not a need: off by
	// default, as it costs each call a memset node (on the H200 about 1.2
	// µs, and a 130m prefill graph's first kernel starts about 1.7 µs after
	// it; bench/graph_trace.py). Set it before capturing graphs.
	PoisonOutputs bool
	// DecoderGraphSteps is the fewest steps, summed over the decoders
	// (NewDecoder) made for one state, from which a decoder captures a step
	// graph, so that each step is one graph launch; the state keeps it, and
	// its later decoders replay it whatever their steps. 0 never captures.
	// A capture costs about as much as a dozen eager steps save at B = 1
	// (bench/results/2026-12-04-generate.md).
	DecoderGraphSteps int
	// StepDeviceGraphSteps is DecoderGraphSteps for StepDevice, which
	// counts one step a call (a decoder counts all of its steps when it is
	// made, so a generate call of 32 tokens or more captures at once). Its
	// eager step costs more, so it captures sooner: at 130m bf16 B=1 on an
	// H100, a hand-written loop through mambago.hf ran 0.75 ms a token
	// eager against 0.344 replaying the graph, so the capture (about 1.1
	// ms) pays for itself within about 3 steps
	// (bench/results/2026-12-05-gpu-queue.md). 0 never captures.
	StepDeviceGraphSteps int
	// TopPClusters has a decoder's TopP draw each row on a cluster of 8
	// blocks (topp_draw_x8_f32; sm_90a), not on one: the same tokens, the
	// kernel 3.6x sooner on the H200 (127.8 -> 35.3 µs a row of 50280 at
	// 038b838; bench/results/2026-12-04-topp-kept.md). It is ignored on a
	// device without sm_90a.
	TopPClusters bool
	// MemsetKernels and HoistMemsets edit cuBLASLt's memsets of its
	// workspace in captured graphs (cuda.MemsetEdit), where the kernel
	// before them is one of the engine's own, which never touch the
	// workspace. A tuned bf16 GEMM may come with one (the 130m in_proj at
	// T=2048; out_proj too at T=8192), and on the H200 a GEMM node started
	// about 3 µs later after a memset node than after a kernel
	// (bench/graph_trace.py). MemsetKernels replaces each with a kernel
	// node writing the same bytes (memset_rows); HoistMemsets lets it start
	// beside the kernel before it instead of after. New turns both on. bf16
	// graph replays on the H200 (BenchmarkMemsetEdits, against the memsets
	// as captured): both 130m B=1 T=2048 1.019x, T=8192 1.013x, 370m
	// 1.019x; kernels alone 1.009x at 130m; memsets hoisted without
	// becoming kernels 0.980x (a GEMM node after a memset node still
	// started late). Set them before capturing graphs.
	MemsetKernels, HoistMemsets bool
	// FoldMemsets folds such a memset into the RMSNorm before it where it
	// can (cuda.MemsetEdit's Fold): the RMSNorm node writes the memset's
	// bytes after its wait, and the GEMM then waits for it alone, where a
	// hoisted memset kernel left it waiting for two (in the trace of
	// bench/results/2026-12-01-graph-trace-538ad8e.md, in_proj started
	// 1.15 µs after the later of the two, out_proj 0.48 µs after the scan).
	// Memsets it cannot fold get MemsetKernels and HoistMemsets. Set it
	// before capturing graphs.
	FoldMemsets bool
	// FusedConvXProj runs each layer's conv and x_proj as one kernel
	// (ConvXProj) where it applies (ConvXProjApplies: 16-bit engines on
	// sm_80 and newer, the 130m and 370m shapes): a graph node fewer a
	// layer, and no cuBLAS node between the conv and dt_proj. Off by
	// default: on the H200 the kernel takes 16.4 µs in a 130m B=1 T=2048
	// graph against 11.4 for the conv and the GEMM it replaces (bf16
	// prefills 0.91-0.96x; bench/NOTES.md, session of 2026-12-01 12:31).
	// Set it before capturing graphs.
	FusedConvXProj bool
	// OwnXProj runs each layer's x_proj on our own kernel (XProj) at every
	// length where it applies (XProjApplies: 16-bit engines on sm_90, the
	// 130m and 370m widths) instead of cuBLAS's GEMM: it fetches its weight
	// before the conv ends and lets the scan launch early (programmatic
	// dependent launch, which cuBLAS's kernels do not take). Off by default:
	// AutoXProj takes the kernel where it pays. Forced at every length, the
	// tensor-map entry (XProjTMA) gives bf16 prefills on the H200 0.98x at
	// 8192 rows and at B=8, and the row-copy entry 0.90-0.96x everywhere
	// (bench/results/2026-12-01-xproj-timeline.md). Set it before capturing
	// graphs.
	OwnXProj bool
	// XProjTMA makes OwnXProj's kernel copy u and W as tensor-map tiles and
	// multiply them on wgmma (XProj.TMA; E a multiple of 256 of at most
	// 2048). Off by default, like OwnXProj. Set it before capturing graphs.
	XProjTMA bool
	// AutoXProj runs x_proj on XProj's tensor-map entry in the prefills
	// where it was measured faster than cuBLAS's GEMM, with OwnXProj off
	// (xprojRoute: one block an SM, W's slice of a block at most 64 KB: the
	// 130m width up to 2048 rows; XProjOwnAt reports it). On by default. Set
	// it before capturing graphs.
	AutoXProj bool
	// XProjSlices is the blocks a tile of rows of XProj's tensor-map entry
	// (XProj.Slices, a cluster), where the width takes them: 4, or 3 (E a
	// multiple of 192: the 130m width). 0, the default, picks 3 where the
	// width takes it and the blocks fit one an SM, else 4; a value the
	// width does not take also gives 4 (XProjTMASlices). Set it before
	// capturing graphs.
	XProjSlices int
	// FusedOutNorm runs each layer's out_proj, but the last's, with the
	// residual add and the next layer's RMSNorm as one kernel (OutNorm)
	// where it applies (OutNormApplies: 16-bit engines on sm_90 at the 130m
	// width): the next layer's RMSNorm node goes, and out_proj takes
	// programmatic dependent launch. Off by default: on the H200 the kernel
	// takes 34.4 µs at 130m T=2048 against 13.1 for cuBLASLt's out_proj and
	// rmsnorm, and bf16 prefills run at 0.83-0.89x (bench/results/
	// 2026-12-01-out-norm.md). Set it before capturing graphs.
	FusedOutNorm bool
	// Timer, when set, times every stage of every layer (eager calls only).
	Timer *StageTimer
	// DecodePDL launches the decode kernels with programmatic dependent
	// launch: each may start, and fetch its weights into L2, while the
	// previous one finishes. New turns it on for sm_90 and later (a 130m
	// bf16 step graph: 500 µs against 597).
	DecodePDL bool
	// DecodeKernelMaxB is the largest batch whose decode step runs on the
	// single-token kernels of kernels/step.cu; a larger batch steps through
	// the prefill path at T = 1 (cuBLAS GEMMs). 0 picks the kernels' own
	// limit of 8 sequences; a negative value sends every batch through the
	// prefill path. Set it before capturing a step graph.
	DecodeKernelMaxB int
	// GEMVSplit fixes how many warps share a row of the decode kernels'
	// GEMVs (1, 2, 4 or 8; kernels/step.cu); 0 picks it by the row's length.
	// Set it before capturing a step graph.
	GEMVSplit int
	// GEMVRows is how many consecutive rows a warp group of the decode
	// GEMVs sums against one read of x: 1, or 4 for GEMVs of 1024 rows or
	// more (0 means 1). New sets 4 (a bf16 2.8b step on the H200: 3.00 ms
	// against 3.31; 1.4b unchanged). Set it before capturing a step graph.
	GEMVRows int
	// GEMVOneSequence runs a B=1 decode step's GEMVs on their one-sequence
	// entries (kernels/step.cu's _b1 kernels: fewer registers, more warps an
	// SM, the same bits). New turns it on. Set it before capturing a step
	// graph.
	GEMVOneSequence bool
	// GEMVStream runs those one-sequence GEMVs of 1024 rows or more but
	// in_proj (out_proj and the LM head) on the streaming entry
	// (kernels/step.cu's gemv_sb1_) where it applies (streamApplies): a
	// grid of streamBlocks blocks an SM, each warp an equal run of whole
	// rows, weight loads in flight across rows; the same bits. New turns it
	// on. Set it before capturing a step graph.
	GEMVStream bool
	// GEMVStreamPrefetch has the streaming entry ask L2 for each warp's
	// rows before it waits for the kernel before it, so that
	// where the step's PDL launches it early its weights arrive while the
	// kernels before it run; only for GEMVs of up to streamPrefetchMost
	// bytes of weights (out_proj of the smaller models). New turns it on.
	// Set it before capturing a step graph.
	GEMVStreamPrefetch bool
	// GEMVTensorCores runs a bf16 decode step's GEMVs for two or more
	// sequences on the tensor cores (kernels/step.cu's _tc entries): 16
	// rows by up to 8 sequences to a block, x kept to f32 precision as
	// three bf16 parts. New turns it on from sm_80. Set it before capturing
	// a step graph.
	GEMVTensorCores bool
	// GEMVTensorCoreRows is the fewest rows a GEMV needs to take the
	// tensor cores under GEMVTensorCores (0: any; 1024 keeps x_proj's few
	// long rows on the FMA entry). That measured 1.3-1.5% faster a step at
	// 1.4b and 2.8b and 2.1% slower at 370m before the tiles took 16 warps,
	// which brought x_proj alone level with the FMA entry (BenchmarkGEMVBatch:
	// 12.86 µs against 13.76). Set it before capturing a step graph.
	GEMVTensorCoreRows int
	// GEMVTileWarps is the warps of a tensor-core GEMV's block (1 to 16),
	// which split each block's 16 rows along k. New sets 16. Set it before
	// capturing a step graph.
	GEMVTileWarps int
	// GEMVTileParts is the most blocks (1 to 8, a power of two) a
	// tensor-core GEMV may split each tile's k over, where its tiles are
	// too few to give every SM two blocks (out_proj, x_proj); the tile's
	// last block sums the parts in order (the same bits whichever is last).
	// New sets 8 where x_proj's rows are 4096 or more long, else 1
	// (defaultTileParts). Set it before capturing a step graph.
	GEMVTileParts int
	// DecodeScanBatch runs a decode step's scan for two or more sequences
	// with a warp a channel for all of them (kernels/step.cu's
	// step_scan_batch_f32: the channel's weights read once, not once a
	// sequence; the same bits). New turns it on where the model's channels
	// make at least 3 blocks an SM (scanBatchPays). Set it before
	// capturing a step graph.
	DecodeScanBatch bool
	// GEMVWarpgroup runs a bf16 decode step's in_proj and LM head for 2 to
	// 8 sequences on Hopper's warpgroup products (kernels/gemv_wg.cu: 64
	// rows by all sequences a block, weights and x's three bf16 parts
	// copied by TMA, one wgmma m64n24k16 per 64 x 16 weights), x kept to
	// f32 precision as in GEMVTensorCores; the norm goes into x's parts
	// (x_parts_bf16), the conv step stays in in_proj's epilogue. It needs
	// an sm_90 device (warpgroupApplies), where New turns it on. Set it
	// before capturing a step graph.
	GEMVWarpgroup bool
	// GEMVWarpgroupOut also runs out_proj on the warpgroup GEMV, with the
	// scan step writing its x's parts, where GEMVWarpgroup applies. New
	// turns it on with GEMVWarpgroup where it pays (wgOutPays), which
	// matters only with GEMVWarpgroupFold off: the fold puts out_proj there
	// at every width. Set it before capturing a step graph.
	GEMVWarpgroupOut bool
	// GEMVWarpgroupParts is the most blocks out_proj's tiles on the
	// warpgroup GEMV split k over (wgOutParts), the last of a tile's blocks
	// summing the parts in order (the same bits whichever is last); 0 or 1
	// splits none. New sets wgPartsMost's count: 6 at 1.4b's width, 4
	// elsewhere (on the H200, BenchmarkDecodeOutParts, 2026-12-03; whole,
	// 1.4b's 32 tiles took 2172.5 µs a step of 8 sequences against 1891.9
	// in 4 parts). Set it before capturing a step graph.
	GEMVWarpgroupParts int
	// GEMVWarpgroupFold folds the RMSNorm across launches where
	// GEMVWarpgroup applies: out_proj (then on the warpgroup GEMV at every
	// width) writes the next layer's x as parts of h * normw and its
	// blocks' sums of squares, and in_proj and the LM head scale their sums
	// by the norm, so that only layer 0 runs x_parts_bf16: four launches a
	// layer, not five. New turns it on with GEMVWarpgroup: on the H200
	// (BenchmarkDecodeWarpgroup, bf16 steps of 8 sequences, 2026-12-03,
	// 411cb94) it took 130m from 499.2 to 467.7 µs a step, 370m 1145.9 to
	// 1024.9, 1.4b 1886.6 to 1683.4 and 2.8b 3229.8 to 2887.5. Set it
	// before capturing a step graph.
	GEMVWarpgroupFold bool
	// GEMVWarpgroupOneSequence takes the warpgroup GEMVs (GEMVWarpgroup)
	// at B=1 too, in place of the one-sequence entries (GEMVOneSequence):
	// 7 of the product's 8 columns go to waste, but the weights' bytes are
	// the same. With GEMVWarpgroupFold, New turns it on where it pays
	// (wgOneSequencePays). Set it before capturing a step graph.
	GEMVWarpgroupOneSequence bool
	// HeadPicks ranks each sequence's greedy pick in the LM head's
	// epilogue where the warpgroup GEMVs apply (lm_head_wg_bf16 in
	// kernels/gemv_wg.cu; headPicks), so that a Decoder's greedy step
	// reads B keys (head_picks_i64) instead of the logits
	// (argmax_rows_f32): the same ids. New turns it on. Set it before
	// capturing a step graph.
	HeadPicks bool
}

var _ engine.Engine = (*Engine)(nil)

// New uploads w to GPU ordinal, with the big GEMMs' weights and inputs in dt
// (see Engine), and compiles the kernels for it. A GPU older than MinMajor
// is an error wrapping ErrOldGPU.
func New(w *checkpoint.Weights, ordinal int, dt cuda.DType) (e *Engine, err error) {
	if w.Narrowed != nil {
		return nil, engine.Invalid("gpu: the weights were loaded narrowed for the CPU engine (checkpoint.LoadNarrowed); " +
			"the CUDA engine uploads from float32 (checkpoint.Load)")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := DeviceSupported(ordinal); err != nil {
		return nil, err
	}
	dev, err := cuda.Open(ordinal)
	if err != nil {
		return nil, err
	}
	leave, err := dev.Enter()
	if err != nil {
		dev.Close()
		return nil, err
	}
	defer leave()
	sm90 := sm90a(dev) // the warpgroup kernels need sm_90a
	e = &Engine{cfg: w.Config, dt: dt, dev: dev,
		// prefill
		ChunkRows: 16384, PrefillPDL: dev.Major >= 9, ScanStaged: true, ScanSegments: -1, ScanHelpers: true,
		ScanDTProj: true, DTProjTensorCores: dev.Major >= 8, DTProjOneTF32Product: dt == cuda.BF16, DTProjWarpgroup: sm90,
		DTProjShort:   dt == cuda.BF16,
		MemsetKernels: true, HoistMemsets: true, FoldMemsets: true, EmbedNorm: true, AutoXProj: true,
		InPlaceReplays: true,
		// decode
		DecodePDL: dev.Major >= 9, GEMVRows: 4, GEMVOneSequence: true, GEMVStream: true, GEMVStreamPrefetch: true,
		GEMVTensorCores: dev.Major >= 8, GEMVTileWarps: 16, GEMVTileParts: defaultTileParts(w.Config.Inner),
		DecodeScanBatch: scanBatchPays(w.Config.Inner, dev.SMs), DecoderGraphSteps: 32, StepDeviceGraphSteps: 8,
		TopPClusters: sm90,
		// decode on sm_90's warpgroup GEMVs
		GEMVWarpgroup: sm90, GEMVWarpgroupOut: sm90 && wgOutPays(w.Config.Hidden),
		GEMVWarpgroupParts: wgPartsMost(w.Config.Hidden), GEMVWarpgroupFold: sm90,
		GEMVWarpgroupOneSequence: sm90 && wgOneSequencePays(w.Config.Hidden), HeadPicks: true,
	}
	if dev.Major >= 9 {
		e.ResidualPrefetch = dev.L2Bytes / 4
	}
	built := e // e is nil once an error is returned
	defer func() {
		if err != nil {
			built.close()
		}
	}()
	if e.stream, err = cuda.NewStream(); err != nil {
		return nil, err
	}
	if e.blas, err = cuda.NewBLAS(e.stream, false); err != nil {
		return nil, err
	}
	if dt != cuda.F32 {
		e.blas.Algo = cuda.GemmLtTuned
	}
	if e.last, err = cuda.NewEvent(); err != nil {
		return nil, err
	}
	if err = e.last.Record(e.stream); err != nil {
		return nil, err
	}
	if e.fn, e.modules, err = loadKernels(dev); err != nil {
		return nil, err
	}
	up := func(v []float32) (cuda.Ptr, error) {
		if v == nil {
			return 0, nil
		}
		b, err := cuda.Alloc(4 * len(v))
		if err != nil {
			return 0, err
		}
		e.bufs = append(e.bufs, b)
		return b.Ptr, cuda.CopyIn(b.Ptr, v, e.stream)
	}
	// upT uploads a GEMM weight in the storage type.
	upT := func(v []float32) (cuda.Ptr, error) {
		if dt == cuda.F32 || v == nil {
			return up(v)
		}
		b, err := cuda.Alloc(2 * len(v))
		if err != nil {
			return 0, err
		}
		e.bufs = append(e.bufs, b)
		return b.Ptr, cuda.CopyIn(b.Ptr, narrow(v, dt), e.stream)
	}
	// upAll uploads (destination, values) pairs; a *typed destination takes
	// the storage type.
	upAll := func(pairs ...any) error {
		for i := 0; i < len(pairs); i += 2 {
			v := pairs[i+1].([]float32)
			var err error
			switch dst := pairs[i].(type) {
			case *cuda.Ptr:
				*dst, err = up(v)
			case typed:
				*dst.p, err = upT(v)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err = upAll(typed{&e.emb}, w.Embeddings, &e.normF, w.NormF, &e.inputProj, w.InputProj, &e.inputBias, w.InputBias); err != nil {
		return nil, err
	}
	e.lmHead = e.emb
	if !w.Tied() {
		if err = upAll(typed{&e.lmHead}, w.LMHead); err != nil {
			return nil, err
		}
	}
	for _, l := range w.Layers {
		a2 := make([]float32, len(l.A))
		for i, a := range l.A {
			a2[i] = a * math.Log2E
		}
		var g layer
		if err = upAll(&g.norm, l.Norm, typed{&g.inProj}, l.InProj, &g.inBias, l.InBias, &g.conv, l.Conv,
			&g.convBias, l.ConvBias, typed{&g.xProj}, l.XProj, &g.dtProj, l.DTProj, &g.dtBias, l.DTBias,
			&g.a2, a2, &g.d, l.D, typed{&g.outProj}, l.OutProj, &g.outBias, l.OutBias); err != nil {
			return nil, err
		}
		e.layers = append(e.layers, g)
	}
	return e, e.stream.Synchronize()
}

// typed marks a weight uploaded in the engine's storage type.
type typed struct{ p *cuda.Ptr }

// narrow rounds v to dt (bf16 or f16; nearest, ties to even) and returns the bits.
func narrow(v []float32, dt cuda.DType) []uint16 {
	if dt == cuda.BF16 {
		return safetensors.Narrow(v, safetensors.BF16)
	}
	return safetensors.Narrow(v, safetensors.F16)
}

// DType returns the storage type of activations and GEMM weights.
func (e *Engine) DType() cuda.DType { return e.dt }

// typed returns the name of kernel's entry for the engine's storage type.
func (e *Engine) typed(kernel string) string { return kernel + "_" + e.dt.Suffix() }

// Config returns the model's configuration.
func (e *Engine) Config() checkpoint.Config { return e.cfg }

// Device returns "cuda".
func (e *Engine) Device() string { return "cuda" }

// Ordinal returns the GPU the engine runs on, as the driver numbers them.
func (e *Engine) Ordinal() int { return e.dev.Ordinal }

// Backend names the GPU and the GEMM mode.
func (e *Engine) Backend() string {
	mode := "cuBLAS FP32"
	switch {
	case e.dt != cuda.F32:
		algo := cuda.GemmEx
		if e.blas != nil {
			algo = e.blas.Algo
		}
		mode = fmt.Sprintf("%s %s GEMMs (f32 accumulation; f32 residual, scan and state)", algo, e.dt)
	case e.blas != nil && e.blas.TF32:
		mode = "cuBLAS TF32"
	}
	return fmt.Sprintf("%s (%s), %s", e.dev.Name, e.dev.Arch(), mode)
}

// bind locks the calling goroutine to its thread and makes the context
// current there (cuda.Device.Enter); the returned func puts back the
// thread's context, undoes the lock and releases e.mu.
func (e *Engine) bind() (func(), error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, engine.Invalid("the model is closed")
	}
	runtime.LockOSThread()
	leave, err := e.dev.Enter()
	if err != nil {
		runtime.UnlockOSThread()
		e.mu.Unlock()
		return nil, err
	}
	return func() {
		leave()
		runtime.UnlockOSThread()
		e.mu.Unlock()
	}, nil
}

// Close frees the device memory and the context.
func (e *Engine) Close() error {
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	return e.close()
}

func (e *Engine) close() error {
	e.closed = true
	e.evictGraphs(func(graphKey) bool { return true })
	e.ws.free()
	for _, b := range e.bufs {
		b.Free()
	}
	e.bufs = nil
	for _, m := range e.modules {
		m.Unload()
	}
	e.blas.Destroy()
	e.last.Destroy()
	e.stream.Destroy()
	return e.dev.Close()
}

// workspace is the scratch of one chunk, grown on demand and reused.
type workspace struct {
	rows, outLen, generation            int
	h, x, xz, u, dbl, delta, y, in, out *cuda.Buffer
	scan                                *cuda.Buffer // the scan's chunk summaries
	counts                              *cuda.Buffer // ConvXProj's counters, zero between launches
	tiles, tileCounts                   *cuda.Buffer // the decode step's tensor-core GEMVs' parts along k, and their counters (zero between launches)
	parts                               *cuda.Buffer // the warpgroup GEMVs' x as bf16 parts (wgPartsBytes)
	normSS                              *cuda.Buffer // out_proj's blocks' sums of squares for the next norm (GEMVWarpgroupFold), [d/64][8] f32
	headPick                            *cuda.Buffer // lm_head_wg_bf16's keys (headPickBytes)
	scanChunk                           int          // the Engine.ScanChunk that scan is sized for
	scanSegments                        bool         // whether scan is sized for walks in segments (Engine.segmentsOn)
	logits                              *cuda.Buffer
	logitsLen                           int
	ids                                 *cuda.Buffer
	pad                                 *cuda.Buffer // a padded batch's Pad, int32 [B]
}

// words is the 4-byte words b holds (0 for none).
func words(b *cuda.Buffer) int {
	if b == nil {
		return 0
	}
	return b.Bytes / 4
}

func (w *workspace) free() {
	for _, b := range []*cuda.Buffer{w.h, w.x, w.xz, w.u, w.dbl, w.delta, w.y, w.in, w.out, w.ids, w.pad, w.logits, w.scan, w.counts,
		w.tiles, w.tileCounts, w.parts, w.normSS, w.headPick} {
		b.Free()
	}
	*w = workspace{}
}

// ensure sizes the workspace for a chunk of rows rows. Growing it frees the
// old buffers, so captured graphs that point into them refuse to replay
// (generation counts the reallocations).
func (e *Engine) ensure(rows int) error {
	c, ws := e.cfg, &e.ws
	tileFloats, tileCounts := e.tileScratch()
	if rows <= ws.rows && ws.scanChunk == e.ScanChunk && ws.scanSegments == e.segmentsOn() &&
		tileFloats <= words(ws.tiles) && tileCounts <= words(ws.tileCounts) {
		return nil
	}
	rows, tileFloats, tileCounts = max(rows, ws.rows), max(1, tileFloats, words(ws.tiles)), max(1, tileCounts, words(ws.tileCounts))
	for _, b := range []*cuda.Buffer{ws.h, ws.x, ws.xz, ws.u, ws.dbl, ws.delta, ws.y, ws.in, ws.ids, ws.pad, ws.scan, ws.counts,
		ws.tiles, ws.tileCounts, ws.parts, ws.normSS, ws.headPick} {
		b.Free()
	}
	ws.rows = 0
	width, sz := max(c.Hidden, c.InputDim), e.dt.Size()
	counters := rows/convXProjTM + rows // ConvXProjCounters(B, n) for any B n <= rows
	sizes := []struct {
		dst   **cuda.Buffer
		bytes int
	}{
		// The inputs of the big GEMMs (x, u, y) take the storage type; x also
		// holds the final norm's f32 output. Everything else is f32.
		{&ws.h, 4 * rows * c.Hidden}, {&ws.x, 4 * rows * c.Hidden}, {&ws.xz, 4 * rows * 2 * c.Inner},
		{&ws.u, sz * rows * c.Inner}, {&ws.dbl, 4 * rows * (c.DTRank + 2*c.State)}, {&ws.delta, 4 * rows * c.Inner},
		{&ws.y, sz * rows * c.Inner}, {&ws.in, 4 * rows * width}, {&ws.ids, 8 * rows}, {&ws.pad, 4 * rows}, // B <= rows
		{&ws.scan, 4 * max(1, scanScratchBound(rows, c.Inner, c.State, e.ScanChunk, e.segmentsOn()))},
		{&ws.counts, 4 * counters},
		{&ws.tiles, 4 * tileFloats}, {&ws.tileCounts, 4 * tileCounts},
		{&ws.parts, wgPartsBytes(c.Hidden, c.Inner)}, {&ws.normSS, 4 * 8 * wgTiles(c.Hidden)},
		{&ws.headPick, headPickBytes},
	}
	for _, s := range sizes {
		b, err := cuda.Alloc(s.bytes)
		if err != nil {
			return err
		}
		*s.dst = b
	}
	// Counters start at zero; so do the parts, whose rows past a batch's
	// sequences only the copies of x_parts_bf16 write (the scan step's
	// leave them as they are). The LM head's keys need no start: each step
	// zeroes them before its head (x_parts_bf16's head_keys).
	for _, c := range []struct {
		buf *cuda.Buffer
		n   int
	}{{ws.counts, counters}, {ws.tileCounts, tileCounts}, {ws.parts, words(ws.parts)}} {
		if err := cuda.Fill32(c.buf.Ptr, 0, c.n, e.stream); err != nil {
			return err
		}
	}
	ws.rows, ws.scanChunk, ws.scanSegments = rows, e.ScanChunk, e.segmentsOn()
	ws.generation++
	return nil
}

// Reserve sizes the workspace up front for prefills of up to batch
// sequences of T positions (any output) and for decode steps of up to batch
// sequences, so that those calls allocate nothing. Without it the workspace
// grows on the first call at a larger shape. Growing it invalidates captured
// graphs (they refuse to replay), so reserve before capturing.
func (e *Engine) Reserve(batch, T int) error {
	if batch < 1 || T < 1 {
		return engine.Invalid("reserve: batch_size = %d and seq_len = %d must be positive", batch, T)
	}
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	c := e.cfg
	if err := e.ensure(batch * e.chunkLen(batch, T)); err != nil {
		return err
	}
	if err := e.ensureOut(batch * T * c.Hidden); err != nil {
		return err
	}
	return e.ensureLogits(batch * c.Vocab)
}

// ensureOut sizes the host-entry output staging buffer to n floats.
func (e *Engine) ensureOut(n int) error { return grow(&e.ws.out, &e.ws.outLen, n) }

// ensureLogits sizes the logits buffer to n floats.
func (e *Engine) ensureLogits(n int) error { return grow(&e.ws.logits, &e.ws.logitsLen, n) }

// grow reallocates *buf for n floats when it holds fewer (*have).
func grow(buf **cuda.Buffer, have *int, n int) error {
	if n <= *have {
		return nil
	}
	(*buf).Free()
	b, err := cuda.Alloc(4 * n)
	if err != nil {
		*buf, *have = nil, 0
		return err
	}
	*buf, *have = b, n
	return nil
}

// chunkLen is how many positions of B sequences of T run per pass: all of
// them when B·T fits ChunkRows, else ChunkRows/B (at least one).
func (e *Engine) chunkLen(B, T int) int { return max(1, min(T, e.ChunkRows/B)) }

// SetTF32 switches FP32 GEMMs to TF32 tensor cores (on) or back to true FP32.
// Graphs captured in the other mode then refuse to replay.
func (e *Engine) SetTF32(on bool) error {
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	return e.blas.SetTF32(on)
}

// SetGemmAlgo picks how the GEMMs with bf16 or f16 inputs run
// (cuda.GemmAlgo): cublasGemmEx, or cuBLASLt with cached plans, tuned or
// not. New picks tuned cuBLASLt (bf16 prefills on the H200, graph
// replays, T=2048: 130m B=8 +3.0%, 370m and 1.4b B=1 +0.9%, 2.8b B=8
// +0.7%, 130m B=1 +0.1%; bench/NOTES.md); its choice can differ from one
// process to the next, where cublas and cublaslt give the same bits every
// run. Graphs captured before keep the algorithms they were captured with.
func (e *Engine) SetGemmAlgo(a cuda.GemmAlgo) error {
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	e.blas.Algo = a
	return nil
}

// function returns the kernel named name.
func (e *Engine) function(name string) *cuda.Function { return e.fn[name] }

func (e *Engine) launch(name string, grid, block cuda.Dim3, shared int, args ...any) error {
	return e.fn[name].Launch(grid, block, shared, e.stream, args...)
}

// rmsnorm queues the RMSNorm kernel name (kernels/rmsnorm.cu) of rows rows
// of d from x into y, a warp a row, with programmatic dependent launch when
// pdl is set. (Blocks of 4 rows instead of 8 took the
// same 5.3 µs a 130m layer at T = 2048, ncu with warm caches at eb233fa;
// per 2048 rows at T = 8192 it is 2.9 µs, so the rest is a per-launch cost.)
func (e *Engine) rmsnorm(name string, pdl bool, x, w, y cuda.Ptr, rows, d int, eps float64) error {
	return e.rmsnormRows(name, pdl, x, w, y, rows, d, d, d, eps)
}

// rmsnormRows is rmsnorm over rows that start ldx elements apart in x and
// ldy apart in y (both at least d).
func (e *Engine) rmsnormRows(name string, pdl bool, x, w, y cuda.Ptr, rows, d, ldx, ldy int, eps float64) error {
	grid, block := rmsnormGrid(rows)
	return e.fn[name].LaunchMaybePDL(pdl, grid, block, 0, e.stream,
		x, w, y, rows, d, ldx, ldy, float32(eps), noFill, uint32(0), int64(0))
}

// noFill starts the last three arguments of kernels/rmsnorm.cu's entries as
// the engine launches them, no fill: a null buffer, a word of 0, 0 words.
// A captured graph may give an RMSNorm node a fill in their place
// (cuda.MemsetEdit's Fold).
const noFill = cuda.Ptr(0)

// rmsnormGrid is the launch shape of kernels/rmsnorm.cu's entries over
// rows rows: a warp a row, 8 rows a block.
func rmsnormGrid(rows int) (grid, block cuda.Dim3) {
	const rowsPerBlock = 8
	return cuda.D1((rows + rowsPerBlock - 1) / rowsPerBlock), cuda.D1(32 * rowsPerBlock)
}

// grid1 returns a 1-D grid covering n elements with 256-thread blocks, capped
// (the kernels stride).
func grid1(n int) cuda.Dim3 { return cuda.D1(max(1, min((n+255)/256, 65535))) }
