package gpu

import (
	"cmp"
	"fmt"

	"github.com/mambago/mambago/mambago/cuda"
)

// Scan is one layer's selective scan over a chunk of B sequences of T
// positions (kernels/scan.cu has the math and the layouts). It splits T into
// chunks of Chunk positions that run in parallel, and needs ScratchFloats
// floats of scratch for their summaries.
type Scan struct {
	DT, A2, DBL cuda.Ptr // DT: the time step [B, T, E] f32, softplus and bias applied
	LDD, R      int      // dbl's row stride and the column where B starts
	U, D, Z     cuda.Ptr
	LDZ         int
	State, Y    cuda.Ptr
	B, T, E, N  int
	DType       cuda.DType // of U and Y; the rest is f32
	Chunk       int        // positions per chunk, a multiple of 8; 0 picks DefaultScanChunk
	Scratch     cuda.Ptr   // ScratchFloats() floats; unused when T fits in one chunk
	Staged      bool       // run the _st_ kernels (cp.async tiles in shared memory) when E is a multiple of 8
	// OnePass, when 2 or 4, runs the one-pass scan (kernels/scan_onepass.cu)
	// with that many states a thread wherever it applies (OnePassApplies),
	// instead of the chunked scan; 0 runs the chunked scan.
	OnePass int
	// PDL launches the one-pass scan with programmatic dependent launch
	// (Engine.PrefillPDL): its prologue then overlaps dt_proj's end.
	PDL bool
	// Prefetch is what the one-pass scan asks L2 for, PrefetchLead tiles
	// before its last, for out_proj (the residual rows it adds into;
	// Engine.ResidualPrefetch). The zero span asks for nothing.
	Prefetch     L2Span
	PrefetchLead int
	// SharedBytes, where positive, is the one-pass kernel's dynamic shared
	// memory instead of what the engine's build needs: for builds of
	// kernels/scan_onepass.cu with other tiles or rings (OnePassShared).
	SharedBytes int
	// Segments, where 2 or more and the one-pass scan runs at 2 states a
	// thread, walks each sequence in that many segments at once and then
	// adds what each later segment's true start state contributes
	// (kernels/scan_onepass.cu, SCAN_ONEPASS_PARAMS and scan_fixup): more
	// warps a scheduler where one warp's chain of T positions sets the time
	// (B·E small). The segments are whole multiples of segmentAlign
	// positions, so fewer may run (segmentLen); 0 or 1 walks once.
	Segments int
	// V, with row stride LDV floats, is [B·T, E] f32 that the segments after
	// the first may overwrite with their sums before the gate; the engine
	// passes xz's x half, which nothing reads after the conv. The walk in
	// segments also overwrites DT at their positions, with dt summed from
	// each segment's start (so a scan in segments runs once on its DT).
	V   cuda.Ptr
	LDV int
	// SMs is the device's SM count, for scan_fixup's one wave of blocks
	// (at least a block a channel tile and sequence).
	SMs int
	// Helpers, where the one-pass scan runs at 2 states a thread walked
	// once, runs its entry whose warps specialize (scan_onepass2w_,
	// WarpsApply): a block's walking warps run only the chain, and as many
	// more warps copy the tiles and compute the outputs. Same bits. Needs
	// sm_90 (mbarriers); the entry traps before.
	Helpers bool
	// DTProducts, 1 or 3, has the entry whose warps specialize compute the
	// time step itself, where FusedDTApplies, from dt_low (DBL's first R
	// columns) with the weights DTW [E, R] and bias DTBias (f32): the
	// same TF32 products in the same order as DTProj's tensor-core entries
	// (dt_proj_tc1_f32 with 1, dt_proj_tc_f32 with 3), so the same bits,
	// in place of dt_proj's kernel; DT is then unused. 0 reads DT.
	DTProducts  int
	DTW, DTBias cuda.Ptr
	// TMA has the entry that computes the time step copy each tile's
	// dt_low, u, z, B and C as four copy-engine boxes from one thread,
	// where TMAApplies (Engine.ScanTMA): scan_onepass2wdt_. Same bits.
	TMA bool
}

// TMAApplies reports whether s's tiles come through the copy engine (TMA):
// where it computes the time step (FusedDTApplies), at B=1, with d_state
// 16 and B and C right after dt_low in DBL's rows, and every row of U and
// Z 16-byte aligned.
func (s Scan) TMAApplies() bool {
	return s.TMA && s.FusedDTApplies() && s.B == 1 && s.N == scanStates && s.LDD == s.R+2*scanStates &&
		s.U%16 == 0 && s.Z%16 == 0 && s.E*s.DType.Size()%16 == 0 && s.LDZ%4 == 0
}

// tmaMaps returns the tensor maps of scan_onepass2wdt_ (kernels/scan_onepass.cu,
// onepass_maps), in its parameters' order: u and z in boxes of 64 positions
// by 16 channels, then DBL in boxes of 64 rows of 32 columns (B and C) and
// of 64 rows of onePassDL columns (dt_low, as the scan's rows hold it).
func (s Scan) tmaMaps() ([4]cuda.TensorMap, error) {
	const rows, channels = 64, onePassThreads * 2 / scanStates
	var maps [4]cuda.TensorMap
	for i, m := range []struct {
		what            string
		dt              cuda.DType
		p               cuda.Ptr
		cols, ld, boxCs int
	}{
		{"u", s.DType, s.U, s.E, s.E, channels},
		{"z", cuda.F32, s.Z, s.E, s.LDZ, channels},
		{"B and C", cuda.F32, s.DBL, s.LDD, s.LDD, 2 * scanStates},
		{"dt_low", cuda.F32, s.DBL, s.LDD, s.LDD, onePassDL},
	} {
		var err error
		if maps[i], err = cuda.NewTensorMap2DPlain(m.dt, m.p, s.T, m.cols, m.ld, rows, m.boxCs); err != nil {
			return maps, fmt.Errorf("gpu: the scan's map of %s: %w", m.what, err)
		}
	}
	return maps, nil
}

// FusedDTApplies reports whether s computes the time step itself
// (DTProducts): with its warps specializing (WarpsApply), R a multiple of
// 8 up to 64, and dbl's rows in 16-byte pieces.
func (s Scan) FusedDTApplies() bool {
	return (s.DTProducts == 1 || s.DTProducts == 3) && s.WarpsApply() && s.R%8 == 0 && s.R <= onePassRMax &&
		s.LDD%4 == 0 && s.N%4 == 0 && s.DBL%16 == 0
}

// WarpsApply reports whether s runs the one-pass entry whose warps
// specialize (Helpers): at 2 states a thread, walked once, and, where SMs
// is set, in one wave (its shared memory holds one block an SM, where the
// plain entry's fits two: at 1.4b B=1 that entry's 256 blocks run at once).
func (s Scan) WarpsApply() bool {
	_, S := s.segments()
	cb := onePassThreads * 2 / scanStates // channels a block at 2 states a thread
	blocks := s.B * ((s.E + cb - 1) / cb)
	return s.Helpers && s.OnePassApplies() && s.OnePass == 2 && S == 1 && (s.SMs == 0 || blocks <= s.SMs)
}

// segmentAlign is the length of the segments of Scan.Segments a multiple
// of: OP_TLS, the segmented walk's tile.
const segmentAlign = 32

// maxSegments bounds Scan.Segments (and with it the scan's scratch).
const maxSegments = 8

// segmentLen is the positions of each of a walk's segments (the last may
// be shorter) and their count, for Segments asked of T positions: one
// segment of T where that asks for fewer than two, at most maxSegments.
func segmentLen(T, segments int) (Ts, S int) {
	if segments < 2 || T <= segmentAlign {
		return T, 1
	}
	segments = min(segments, maxSegments)
	Ts = ((T+segments-1)/segments + segmentAlign - 1) / segmentAlign * segmentAlign
	return Ts, (T + Ts - 1) / Ts
}

// segments is the walk's segment length and count for s.
func (s Scan) segments() (Ts, S int) {
	if !s.OnePassApplies() || s.OnePass != 2 {
		return s.T, 1
	}
	return segmentLen(s.T, s.Segments)
}

// L2Span is Bytes of device memory at P that a kernel asks L2 for, without
// waiting, ahead of the kernel that reads it next (prefetch_share in
// kernels/math.cuh). P is 16-byte aligned.
type L2Span struct {
	P     cuda.Ptr
	Bytes int
}

const (
	scanStates  = 16  // NS in scan.cu
	scanThreads = 128 // channels per block, MAXB in scan.cu
)

// DefaultScanChunk returns the chunk length for d_state N: 64 positions, or
// 2N when that is longer, which keeps the chunk summaries ([B, chunks, E, N])
// no larger than the [B·T, E] activations.
func DefaultScanChunk(N int) int { return max(64, (2*N+7)/8*8) }

func (s Scan) chunk() int { return scanChunk(s.Chunk, s.N) }

func scanChunk(chunk, N int) int {
	if chunk > 0 {
		return chunk
	}
	return DefaultScanChunk(N)
}

// scanScratchBound bounds ScratchFloats over every split of rows = B·T:
// with two or more chunks, B·chunks <= 2·rows/L; with segments (where the
// engine may walk in them), B·S <= rows/16, as S <= 8, and S > 1 only where
// T > 32, with S <= T/32 + 1 < T/16 (segmentLen).
func scanScratchBound(rows, E, N, chunk int, segments bool) int {
	n := 2 * rows / scanChunk(chunk, N) * E * (N + 1)
	if segments {
		n = max(n, (rows/16+1)*E*N)
	}
	if N > scanStates {
		n += rows * E
	}
	return n
}

func (s Scan) chunks() int { return (s.T + s.chunk() - 1) / s.chunk() }

// ScratchFloats is the scratch s needs: every chunk's state [B, chunks, E, N]
// and dt sum [B, chunks, E] (none for a single chunk), then, with N > 16,
// the partial sums over state groups [B, T, E]; for the one-pass scan in
// segments, every segment's end state [S, B, E, N] (their dt sums stay in
// DT, Segments).
func (s Scan) ScratchFloats() int {
	if _, S := s.segments(); S > 1 { // each segment's end state [S, B, E, N]
		return S * s.B * s.E * s.N
	}
	n := 0
	if nch := s.chunks(); nch > 1 {
		n += s.B * nch * s.E * (s.N + 1)
	}
	if s.N > scanStates {
		n += s.B * s.T * s.E
	}
	return n
}

// OnePassApplies reports whether the one-pass scan can run s: at most 16
// states a channel, rows of E in whole 16-byte pieces (E a multiple of 8),
// and OnePass states a thread of those it is built for.
func (s Scan) OnePassApplies() bool {
	return (s.OnePass == 2 || s.OnePass == 4) && s.N <= scanStates && s.E%8 == 0 && s.LDZ%4 == 0
}

// OnePassStates is the one-pass scan's states a thread for B sequences of
// E channels on a device of sms SMs, or 0 where the chunked scan is
// faster. A one-pass thread walks all T positions, so the scan's time is a
// warp's chain of positions unless several warps share a scheduler; the
// chunked scan is parallel over chunks of T as well, and gets faster per
// token with longer prompts, but not enough to win at any T measured. From bf16 prefills on the
// H200 (bench/NOTES.md): 4 states a thread where that gives two warps a
// scheduler or more (every B=8 shape: 130m 1.25M tok/s against 0.98M
// chunked); 2 states where that gives 2/3 of a warp a scheduler or more
// (130m at B=1, 0.73 warps a scheduler: T=2048 747k against 655k, T=8192
// 929k against 898k; 370m 302k against 253k; 1.4b 135k against 118k); the
// chunked scan below that.
func OnePassStates(B, E, sms int) int {
	warps := func(spt int) int { return B * E * (scanStates / spt) / 32 }
	schedulers := 4 * sms
	switch {
	case warps(4) >= 2*schedulers:
		return 4
	case 3*warps(2) >= 2*schedulers:
		return 2
	}
	return 0
}

// OnePassSegments is the segments (Scan.Segments) that the one-pass scan
// at spt states a thread walks B sequences of T positions and E channels in,
// on a device of sms SMs: as many as keep the walk's blocks within three an
// SM (segmentShared fits four), at most 8, and none shorter than 256
// positions; 1 where the walk has that many blocks without segments.
//
// The walk's time is a warp's chain of positions at one warp a scheduler
// (130m and 370m at B=1); segments give each scheduler several shorter
// chains, and scan_fixup's work in parallel costs about one exp a (position,
// channel, state) of the later segments. On the H200 that exp costs more
// than the segments save (Engine.ScanSegments), so the engine asks for
// this only where ScanSegments is 0.
func OnePassSegments(B, T, E, spt, sms int) int {
	if spt != 2 {
		return 1
	}
	blocks := B * ((E + 15) / 16)
	return max(1, min(3*sms/blocks, maxSegments, T/256))
}

// onePassThreads is OP_THREADS in kernels/scan_onepass.cu: a block owns
// onePassThreads·OnePass/16 channels (twice the threads where its warps
// specialize).
const onePassThreads = 128

// helpersKernel names the one-pass entry whose warps specialize (at 2
// states a thread) for storage type dt, with dtf the one that computes the
// time step too, and with tma as well that one's entry whose tiles come
// through the copy engine (Scan.TMA).
func helpersKernel(dt cuda.DType, dtf, tma bool) string {
	switch {
	case dtf && tma:
		return "scan_onepass2wdt_" + dt.Suffix()
	case dtf:
		return "scan_onepass2wd_" + dt.Suffix()
	}
	return "scan_onepass2w_" + dt.Suffix()
}

// helpersShared is helpersKernel's dynamic shared memory for a storage
// type of size bytes (a ring of helpersRing tiles, OP_WS_BUF), and
// with dtf that of its entry that computes the time step too.
func helpersShared(size int, dtf bool) int { return HelpersShared(helpersRing, helpersSums, size, dtf) }

// helpersRing and helpersSums are OP_WS_BUF and OP_WS_SP in
// kernels/scan_onepass.cu.
const helpersRing, helpersSums = 4, 2

// HelpersShared is onepass_ws_shared in kernels/scan_onepass.cu: the
// dynamic shared memory of the one-pass entry whose warps specialize, with
// a ring of ring tiles of 64 positions and sums tiles of partial sums (0
// for either: the engine's, helpersRing and helpersSums):
// OnePassShared's (one tile of partial sums), sums - 1 more, and ring +
// 2·sums mbarriers; with dtf (Scan.DTProducts) 2·ring more mbarriers and,
// from a multiple of 128 bytes, ring tiles of dt_low rows (64 rows of
// onePassDL floats). A build with another ring or tiles of partial sums
// (OP_WS_BUF, OP_WS_SP) is launched with Scan.SharedBytes set to it.
func HelpersShared(ring, sums, size int, dtf bool) int {
	ring, sums = cmp.Or(ring, helpersRing), cmp.Or(sums, helpersSums)
	n := OnePassShared(2, 64, ring, size) + (sums-1)*64*(onePassThreads+16)*4 + 8*(ring+2*sums)
	if dtf {
		n = (n+16*ring+127)/128*128 + ring*64*onePassDL*4
	}
	return n
}

// onePassDL is OP_DL, a row of dt_low in the scan's shared memory, and
// onePassRMax OP_RMAX, the largest dt_rank the scan computes the time step
// for.
const onePassDL, onePassRMax = 68, 64

// onePassKernel names the one-pass entry at spt states a thread for
// storage type dt.
func onePassKernel(spt int, dt cuda.DType) string {
	return fmt.Sprintf("scan_onepass%d_%s", spt, dt.Suffix())
}

// segmentKernel names the one-pass entry that walks in segments (at 2
// states a thread) for storage type dt.
func segmentKernel(dt cuda.DType) string { return "scan_onepass2s_" + dt.Suffix() }

// segmentShared is segmentKernel's dynamic shared memory: tiles of
// segmentAlign positions in a ring of 3 (OP_TLS, OP_BUFS).
func segmentShared(size int) int { return OnePassShared(2, segmentAlign, 3, size) }

// fixupThreads is FX_WARPS · 32 in kernels/scan_onepass.cu, and
// fixupBlocksPerSM (FX_BLOCKS) the blocks of it an SM holds at once (its
// launch bounds): scan_fixup's grid is one wave of them.
const fixupThreads, fixupBlocksPerSM = 256, 3

// fixupShared is scan_fixup's dynamic shared memory (fixup_shared) for S
// segments: each warp's ring of FX_DEPTH = 8 positions of its 32 channels'
// inputs and C's row, then the later segments' start states.
func fixupShared(S int) int {
	const depth, slot = 8, 3*32 + scanStates
	return 4 * (fixupThreads/32*depth*slot + (S-1)*scanStates*32)
}

// onePassShared is the dynamic shared memory of the engine's one-pass
// kernel at spt states a thread (tiles of 64 positions in a ring of 3 at 2
// states, of 32 in a ring of 2 at 4, kernels/scan_onepass.cu's
// onepass_config) for a storage type of size bytes. (The kernel traps if it
// is launched with less.)
func onePassShared(spt, size int) int {
	if spt == 4 {
		return OnePassShared(spt, 32, 2, size)
	}
	return OnePassShared(spt, 64, 3, size)
}

// OnePassShared is onepass_shared in kernels/scan_onepass.cu: the dynamic
// shared memory, in bytes, of the one-pass scan at spt states a thread, in
// tiles of tile positions in a ring of ring, for a storage type of size
// bytes. A build with other tiles than the engine's (OP_TL2 and the like)
// is launched with Scan.SharedBytes set to it.
func OnePassShared(spt, tile, ring, size int) int {
	cb, pst := 8*spt, onePassThreads
	if cb < 32 {
		pst += 16
	}
	return ring*tile*(cb*(8+size)+2*scanStates*4) + tile*pst*4
}

// Launch queues the scan on stream; fn looks kernels up by name.
func (s Scan) Launch(fn func(string) *cuda.Function, stream *cuda.Stream) error {
	if s.OnePassApplies() {
		Ts, S := s.segments()
		name, shared := onePassKernel(s.OnePass, s.DType), onePassShared(s.OnePass, s.DType.Size())
		threads, dtf, tma := onePassThreads, false, false
		switch {
		case S > 1:
			name, shared = segmentKernel(s.DType), segmentShared(s.DType.Size())
		case s.WarpsApply():
			dtf, tma = s.FusedDTApplies(), s.TMAApplies()
			name, shared, threads = helpersKernel(s.DType, dtf, tma), helpersShared(s.DType.Size(), dtf), 2*onePassThreads
			if dtf { // and as many more that compute the time step
				threads += onePassThreads
			}
		}
		if s.SharedBytes > 0 {
			shared = s.SharedBytes
		}
		f := fn(name)
		if err := f.SetMaxDynamicShared(shared); err != nil {
			return err
		}
		ends := s.Scratch
		cb := onePassThreads * s.OnePass / scanStates
		args := make([]any, 0, 28)
		if tma { // the maps first
			maps, err := s.tmaMaps()
			if err != nil {
				return err
			}
			args = append(args, maps[0], maps[1], maps[2], maps[3])
		}
		args = append(args, s.DT, s.A2, s.DBL, s.LDD, s.R, s.U, s.D, s.Z, s.LDZ, s.State, s.Y, s.T, s.E,
			s.N, s.Prefetch.P, int64(s.Prefetch.Bytes), s.PrefetchLead, Ts, s.V, s.LDV, ends, s.DT)
		if dtf {
			args = append(args, s.DTW, s.DTBias, s.DTProducts)
		}
		grid := cuda.Dim3{X: (s.E + cb - 1) / cb, Y: s.B, Z: S}
		if err := f.LaunchMaybePDL(s.PDL, grid, cuda.D1(threads), shared, stream, args...); err != nil || S == 1 {
			return err
		}
		tiles := (s.E + 31) / 32
		Y := max(1, fixupBlocksPerSM*s.SMs/(tiles*s.B))
		return fn("scan_fixup_"+s.DType.Suffix()).LaunchMaybePDL(s.PDL, cuda.Dim3{X: tiles, Y: Y, Z: s.B},
			cuda.D1(fixupThreads), fixupShared(S), stream, s.DT, s.A2, s.DBL, s.LDD, s.R, s.Z, s.LDZ, s.V, s.LDV, ends,
			s.State, s.Y, s.T, s.E, s.N, Ts)
	}
	L, nch, G := s.chunk(), s.chunks(), (s.N+scanStates-1)/scanStates
	sum, out := "scan_chunk_sum_", "scan_chunk_out_"
	if s.Staged && s.E%8 == 0 { // the staged kernels copy 16-byte pieces of rows of E
		sum, out = "scan_chunk_sum_st_", "scan_chunk_out_st_"
	}
	blocks := (s.E + scanThreads - 1) / scanThreads
	start, part := s.State, s.Scratch
	if nch > 1 {
		part += cuda.Ptr(4 * s.B * nch * s.E * (s.N + 1))
		chunkState := s.Scratch
		sumdt := s.Scratch + cuda.Ptr(4*s.B*nch*s.E*s.N)
		if err := fn(sum+s.DType.Suffix()).Launch(cuda.Dim3{X: blocks, Y: (nch - 1) * G, Z: s.B}, cuda.D1(scanThreads), 0,
			stream, s.DT, s.A2, s.DBL, s.LDD, s.R, s.U, chunkState, sumdt, s.T, s.E, s.N, L, nch, G); err != nil {
			return err
		}
		if err := fn("scan_carry_f32").Launch(cuda.D1((s.B*s.E*s.N+255)/256), cuda.D1(256), 0, stream,
			s.A2, sumdt, chunkState, s.State, s.B, s.E, s.N, nch); err != nil {
			return err
		}
		start = chunkState
	}
	for g := 0; g < G; g++ {
		if err := fn(out+s.DType.Suffix()).Launch(cuda.Dim3{X: blocks, Y: nch, Z: s.B}, cuda.D1(scanThreads), 0, stream,
			s.DT, s.A2, s.DBL, s.LDD, s.R, s.U, s.D, s.Z, s.LDZ, start, s.State, s.Y, part,
			s.T, s.E, s.N, L, nch, g, G); err != nil {
			return err
		}
	}
	return nil
}

// scanOnePass is Scan.OnePass for a call over B sequences of E channels,
// as Engine.ScanOnePass sets it: 0 (the chunked scan) where
// the device cannot give the one-pass kernel its shared memory.
func (e *Engine) scanOnePass(B, E int) int {
	spt := e.ScanOnePass
	switch {
	case spt < 0:
		return 0
	case spt == 0:
		spt = OnePassStates(B, E, e.dev.SMs)
	}
	if spt > 0 && onePassShared(spt, e.dt.Size()) > e.dev.MaxSharedOptIn {
		return 0
	}
	return spt
}

// helpersFit reports whether the device runs the one-pass entry whose
// warps specialize (sm_90 and newer: mbarriers), with dtf the one that
// computes the time step too, with the shared memory it needs.
func (e *Engine) helpersFit(dtf bool) bool {
	return e.dev.Major >= 9 && helpersShared(e.dt.Size(), dtf) <= e.dev.MaxSharedOptIn
}

// segmentsOn reports whether Engine.ScanSegments may walk the scan in
// segments, which the workspace's scan scratch is then sized for.
func (e *Engine) segmentsOn() bool { return e.ScanSegments == 0 || e.ScanSegments > 1 }

// scanSegments is Scan.Segments for a call over B sequences of T positions
// and E channels with the one-pass scan at spt states a thread, as
// Engine.ScanSegments sets it.
func (e *Engine) scanSegments(B, T, E, spt int) int {
	switch {
	case e.ScanSegments < 0:
		return 1
	case e.ScanSegments > 0:
		return e.ScanSegments
	}
	return OnePassSegments(B, T, E, spt, e.dev.SMs)
}
