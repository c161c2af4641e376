package kernels_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/mambago/mambago/internal/gputest"
	"github.com/mambago/mambago/kernels"
	"github.com/mambago/mambago/mambago/cuda"
	gpuengine "github.com/mambago/mambago/mambago/gpu"
)

// BenchmarkXProjScanHandover times the hand-over from our x_proj to the
// engine's B=1 scan (the entry that computes the time step) as the engine
// launches them: back to back on one stream, both with programmatic
// dependent launch, the scan reading x_proj's output, replayed as one CUDA
// graph. Both kernels are timeline builds (XP_TIMELINE, OP_TIMELINE)
// stamping %globaltimer, one clock for every SM, so their events share a
// time line: µs from x_proj's first block's start, medians over 15 launches
// after 5 warm-up ones.
//
// It asks what a flag a tile of rows, set by the x_proj cluster that wrote
// it, could save against the scan's griddepcontrol.wait (bench/NOTES.md, item
// 00000019): the copying warps' wait returns ("cwaited") some time after
// x_proj's last block has stored its rows ("exit", the last block), and
// the first cluster's rows (tile 0, all the scan needs first) were stored
// earlier still ("exit", the first block). The "late" fields take the scan
// blocks that entered once x_proj's first block had left: how many, when,
// and each one's set-up from its copying warps' start ("centry") to the
// barriers' initialization ("synced"), their addresses ("cready") and
// their wait's return ("cwaited"). Each launch's scan output is
// compared bit for bit with the same two kernels run with a stream
// synchronization between them.
func BenchmarkXProjScanHandover(b *testing.B) {
	d, _, s, xsrc, timer := kernelBench(b, "xproj.cu")
	if d.Major != 9 || d.Minor != 0 {
		b.Skipf("xproj is compiled for sm_90a (clusters); this GPU is sm_%d%d", d.Major, d.Minor)
	}
	ssrc, err := kernels.Source("scan_onepass.cu")
	if err != nil {
		b.Fatal(err)
	}
	xmod := loadSourceFor(b, "sm_90a", xsrc, "xproj.cu", "-DXP_TIMELINE=1")
	smod := loadSource(b, d, ssrc, "scan_onepass.cu", "-DOP_TIMELINE=1")
	xtl, xbytes := global(b, xmod, "xp_timeline")
	stl, sbytes := global(b, smod, "op_timeline")
	xfn, sfn := functions(b, xmod), functions(b, smod)
	xev, sev := len(xpEvents), len(opEvents)
	event := func(names []string, name string) int {
		i := slices.Index(names, name)
		if i < 0 {
			b.Fatalf("no timeline event %q", name)
		}
		return i
	}
	xEntry, xExit := event(xpEvents, "entry"), event(xpEvents, "exit")
	sEntry, sWaited, sCWaited := event(opEvents, "entry"), event(opEvents, "waited"), event(opEvents, "cwaited")
	sLanded0, sWalk0 := event(opEvents, "landed0"), event(opEvents, "walk0")
	sCEntry, sSynced, sCReady := event(opEvents, "centry"), event(opEvents, "synced"), event(opEvents, "cready")
	for range b.N {
		for _, sh := range []struct {
			name string
			T, E int
		}{{"130m_B1_T2048", 2048, 1536}, {"370m_B1_T2048", 2048, 2048}, {"130m_B1_T512", 512, 1536}} {
			T, E, J := sh.T, sh.E, scanBenchR+2*scanBenchN
			in := newScanBenchInputs(b, s, 1, T, E)
			_, wPacked := pack16(cuda.BF16, randn(J*E, 0.05))
			bw := upload(b, s, wPacked)
			slicesOf := 4
			if E%(3*64) == 0 {
				slicesOf = 3 // the engine's clusters of 3 where E allows them (Engine.XProjSlices)
			}
			x := gpuengine.XProj{U: in.u.Ptr, W: bw.Ptr, DBL: in.dbl.Ptr, M: T, E: E, J: J, DType: cuda.BF16, PDL: true,
				TMA: true, Slices: slicesOf}
			sc := in.scan(2)
			sc.Helpers, sc.DTProducts, sc.DTW, sc.DTBias, sc.PDL = true, 1, in.W.Ptr, in.bias.Ptr, true
			if !sc.FusedDTApplies() {
				b.Fatalf("%s: the scan does not compute the time step here", sh.name)
			}
			xblocks, sblocks := slicesOf*((T+63)/64), (E+15)/16
			if xblocks*xev*8 > xbytes || sblocks*sev*8 > sbytes {
				b.Fatalf("%s: the timelines hold too few blocks", sh.name)
			}
			// The reference: the two kernels with the stream synchronized
			// between them, so the scan cannot start early.
			in.reset(b)
			if err := x.Launch(xfn, s); err != nil {
				b.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				b.Fatal(err)
			}
			if err := sc.Launch(sfn, s); err != nil {
				b.Fatal(err)
			}
			want := download(b, s, in.y, T*E/2)
			// The pair as one graph, as the engine replays it: launched from
			// the host one after the other, the scan's launch would come
			// after x_proj had ended (x_proj takes about as long as a launch).
			graph, err := cuda.Capture(s, func() error {
				if err := x.Launch(xfn, s); err != nil {
					return err
				}
				return sc.Launch(sfn, s)
			})
			if err != nil {
				b.Fatal(err)
			}
			pair := func() error { return graph.Launch(s) }
			var pairUs []float64
			stats := map[string][]float64{}
			for run := range 20 {
				in.reset(b)
				if err := cuda.Fill32(xtl, 0, xblocks*xev*2, s); err != nil {
					b.Fatal(err)
				}
				if err := cuda.Fill32(stl, 0, sblocks*sev*2, s); err != nil {
					b.Fatal(err)
				}
				ms := timer.ms(b, pair)
				if got := download(b, s, in.y, T*E/2); !sameBits(got, want) {
					b.Fatalf("%s: the scan after x_proj under PDL differs from the synchronized pair", sh.name)
				}
				if run < 5 {
					continue
				}
				pairUs = append(pairUs, 1e3*ms)
				xrows, srows := make([]int64, xblocks*xev), make([]int64, sblocks*sev)
				if err := cuda.CopyOut(xrows, xtl, s); err != nil {
					b.Fatal(err)
				}
				if err := cuda.CopyOut(srows, stl, s); err != nil {
					b.Fatal(err)
				}
				start := int64(math.MaxInt64)
				for blk := range xblocks {
					start = min(start, xrows[blk*xev+xEntry])
				}
				column := func(rows []int64, n, blocks, ev int) []float64 {
					out := make([]float64, blocks)
					for blk := range blocks {
						t := rows[blk*n+ev]
						if t == 0 {
							b.Fatalf("%s: event %d not recorded by block %d", sh.name, ev, blk)
						}
						out[blk] = float64(t-start) / 1e3
					}
					return out
				}
				xexit := column(xrows, xev, xblocks, xExit)
				cw := column(srows, sev, sblocks, sCWaited)
				add := func(k string, v float64) { stats[k] = append(stats[k], v) }
				add("xp exit first", slices.Min(xexit))
				add("xp exit median", gputest.Median(xexit))
				add("xp exit last", slices.Max(xexit))
				add("scan entry first", slices.Min(column(srows, sev, sblocks, sEntry)))
				add("scan waited median", gputest.Median(column(srows, sev, sblocks, sWaited)))
				add("scan cwaited first", slices.Min(cw))
				add("scan cwaited median", gputest.Median(cw))
				add("scan landed0 median", gputest.Median(column(srows, sev, sblocks, sLanded0)))
				add("scan walk0 median", gputest.Median(column(srows, sev, sblocks, sWalk0)))
				add("gap: cwaited median - xp exit last", gputest.Median(cw)-slices.Max(xexit))
				// The blocks that entered once x_proj's first blocks had
				// left (on their SMs): each one's set-up, from its copying
				// warps' start to the barriers' initialization, to their
				// addresses and to their wait's return.
				centry, synced, ready := column(srows, sev, sblocks, sCEntry), column(srows, sev, sblocks,
					sSynced), column(srows, sev, sblocks, sCReady)
				var late, toSynced, toReady, toWaited []float64
				for blk := range sblocks {
					if centry[blk] >= slices.Min(xexit) {
						late = append(late, centry[blk])
						toSynced = append(toSynced, synced[blk]-centry[blk])
						toReady = append(toReady, ready[blk]-centry[blk])
						toWaited = append(toWaited, cw[blk]-centry[blk])
					}
				}
				add("late blocks", float64(len(late)))
				if len(late) > 0 {
					add("late: centry median", gputest.Median(late))
					add("late: synced - centry", gputest.Median(toSynced))
					add("late: cready - centry", gputest.Median(toReady))
					add("late: cwaited - centry", gputest.Median(toWaited))
				}
			}
			line := fmt.Sprintf("handover %s: x_proj (clusters of %d) + scan %.2f us; from x_proj's first block's start:",
				sh.name, slicesOf, gputest.Median(pairUs))
			for _, k := range []string{"xp exit first", "xp exit median", "xp exit last", "scan entry first",
				"scan waited median", "scan cwaited first", "scan cwaited median", "scan landed0 median",
				"scan walk0 median", "gap: cwaited median - xp exit last", "late blocks", "late: centry median",
				"late: synced - centry", "late: cready - centry", "late: cwaited - centry"} {
				if len(stats[k]) > 0 {
					line += fmt.Sprintf(" %s %.2f;", k, gputest.Median(stats[k]))
				}
			}
			b.Log(line)
			if err := graph.Destroy(); err != nil {
				b.Fatal(err)
			}
			bw.Free()
			in.free()
		}
	}
}
