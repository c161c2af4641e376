package gpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/mambago/mambago/mambago/cuda"
	"github.com/mambago/mambago/mambago/engine"
)

// processing is what process_rows_f32 reads for a decoder's queued steps
// (Process): p itself, each row's tokens as the penalty reads them (seen),
// the last W as the biases read them and all of them as the n-gram ban
// reads them (in table), and the biases and ids laid out for the kernel
// (in table, at the offsets named).
type processing struct {
	p       engine.Processing
	step    int          // the next step's number in p
	seen    *cuda.Buffer // uint8 [B, V]: 1 where row b holds id v; nil where p.Penalty is 1
	table   *cuda.Buffer // the arrays below, at their byte offsets
	W       int          // the tails' width: the longest bias less one
	nGroups int

	tails, groups, entries, biases, prefixes int // offsets: int64 [B, W], int32 [nGroups, 3], int32 [E, 2], f32 [E], int64
	eos, forced, suppress                    int // offsets: int64 ids (suppress then begin-suppress)
	history, lengths                         int // offsets: int64 [B, room], int32 [B]: each row's tokens, for the n-gram ban
	room                                     int // the history's row capacity

	// The table's bytes (layout's), and reorder's: where it copies seen's
	// and the table's rows to (swapped with them after) and the rows it
	// reads, made by its first call.
	bytes                       []byte
	spareSeen, spareTable, rows *cuda.Buffer
}

// Process makes each step queued after it process its logits as p says
// before its pick or draw (engine.ProcessingDecoder), through
// process_rows_f32. Its buffers are made here, once.
func (d *Decoder) Process(p engine.Processing) error {
	e, B, V := d.e, d.s.batch, d.e.cfg.Vocab
	if d.pick == nil {
		return engine.Invalid("decoder is closed")
	}
	if err := checkProcessing(p, B, V); err != nil {
		return err
	}
	pr := &processing{p: p}
	pr.bytes = pr.layout(B)
	done, err := e.bind()
	if err != nil {
		return err
	}
	defer done()
	if d.queued > 0 { // their kernels read the buffers replaced here
		if err := e.stream.Synchronize(); err != nil {
			return err
		}
	}
	if err := d.proc.free(); err != nil {
		return err
	}
	d.proc = nil
	if p.Penalty != 1 {
		mask := make([]uint8, B*V)
		for b, row := range p.Seen {
			for _, id := range row {
				mask[b*V+int(id)] = 1
			}
		}
		if pr.seen, err = cuda.Alloc(B * V); err == nil {
			err = cuda.CopyIn(pr.seen.Ptr, mask, e.stream)
		}
	}
	if err == nil {
		if pr.table, err = cuda.Alloc(max(len(pr.bytes), 8)); err == nil {
			err = cuda.CopyIn(pr.table.Ptr, pr.bytes, e.stream)
		}
	}
	if err != nil {
		return errors.Join(fmt.Errorf("gpu: decoder's logits processing: %w", err), pr.free())
	}
	d.proc = pr
	return nil
}

// checkProcessing refuses p for B rows of a vocabulary of V where an id is
// outside it, a row count is not B, or a number is out of range.
func checkProcessing(p engine.Processing, B, V int) error {
	switch {
	case !(p.Penalty > 0) || math.IsInf(float64(p.Penalty), 1):
		return engine.Invalid("repetition penalty %v, want finite and > 0", p.Penalty)
	case p.Penalty != 1 && len(p.Seen) != B:
		return engine.Invalid("decoder for B=%d: got %d rows of tokens for the penalty", B, len(p.Seen))
	case p.BanEOS < 0:
		return engine.Invalid("eos banned for %d steps, want ≥ 0", p.BanEOS)
	}
	for b, row := range p.Seen {
		for _, id := range row {
			if id < 0 || int(id) >= V {
				return engine.Invalid("row %d holds token %d, outside the vocabulary [0, %d)", b, id, V)
			}
		}
	}
	if p.NGram < 0 || p.NGram > 0 && (len(p.History) != B || p.Steps < 0) {
		return engine.Invalid("n-gram ban of %d over %d rows of tokens and %d steps: want n ≥ 0, and for n > 0 "+
			"%d rows and steps ≥ 0", p.NGram, len(p.History), p.Steps, B)
	}
	for b, row := range p.History { // the kernel bans at these ids: each must be one
		if err := engine.CheckIDs(fmt.Sprintf("row %d's history", b), row, V); err != nil {
			return err
		}
	}
	multi := false
	for _, bias := range p.Biases {
		if len(bias.Tokens) == 0 || math.IsNaN(float64(bias.Bias)) || math.IsInf(float64(bias.Bias), 1) {
			return engine.Invalid("sequence bias %v for %v: want a sequence and a bias that is finite or -Inf",
				bias.Bias, bias.Tokens)
		}
		if err := engine.CheckIDs("sequence bias", bias.Tokens, V); err != nil {
			return err
		}
		multi = multi || len(bias.Tokens) > 1
	}
	if multi && len(p.Tails) != B {
		return engine.Invalid("decoder for B=%d: got %d rows of tokens for the sequence biases", B, len(p.Tails))
	}
	for _, ids := range []struct {
		what string
		ids  []int64
	}{{"eos ids", p.EOS}, {"forced ids", p.Forced}, {"suppressed ids", p.Suppress},
		{"begin-suppressed ids", p.BeginSuppress}} {
		if err := engine.CheckIDs(ids.what, ids.ids, V); err != nil {
			return err
		}
	}
	return nil
}

// layout sets pr's offsets and returns the table's bytes for B rows: the
// ids, each row's last W tokens (-1 where it has fewer), the biases
// grouped by the token they raise (a thread a group sums them in
// transformers' order: the one-token biases first, each kind in its order),
// and for the n-gram ban each row's tokens, with room for Steps more, and
// their count.
func (pr *processing) layout(B int) []byte {
	p := pr.p
	var buf []byte
	align := func() int {
		for len(buf)%8 != 0 {
			buf = append(buf, 0)
		}
		return len(buf)
	}
	putIDs := func(ids ...[]int64) int {
		at := align()
		for _, set := range ids {
			for _, id := range set {
				buf = binary.LittleEndian.AppendUint64(buf, uint64(id))
			}
		}
		return at
	}
	pr.eos = putIDs(p.EOS)
	pr.forced = putIDs(p.Forced)
	pr.suppress = putIDs(p.Suppress, p.BeginSuppress)

	ordered := slices.Clone(p.Biases) // the one-token biases first, each kind in its order (a stable sort)
	slices.SortStableFunc(ordered, func(a, b engine.SequenceBias) int {
		return min(len(a.Tokens)-1, 1) - min(len(b.Tokens)-1, 1)
	})
	var tokens []int64 // the groups' tokens, in order of first appearance
	members := map[int64][]int{}
	for i, bias := range ordered {
		last := bias.Tokens[len(bias.Tokens)-1]
		if _, ok := members[last]; !ok {
			tokens = append(tokens, last)
		}
		members[last] = append(members[last], i)
		pr.W = max(pr.W, len(bias.Tokens)-1)
	}
	pr.nGroups = len(tokens)

	pr.tails = align()
	for b := range B {
		if pr.W == 0 {
			break
		}
		row := p.Tails[b]
		row = row[max(0, len(row)-pr.W):]
		for range pr.W - len(row) {
			buf = binary.LittleEndian.AppendUint64(buf, math.MaxUint64) // -1: no token
		}
		for _, id := range row {
			buf = binary.LittleEndian.AppendUint64(buf, uint64(id))
		}
	}
	var prefixes []int64
	var entries []int32
	var biases []float32
	var groups []int32
	for _, token := range tokens {
		groups = append(groups, int32(token), int32(len(biases)), int32(len(members[token])))
		for _, i := range members[token] {
			prefix := ordered[i].Tokens[:len(ordered[i].Tokens)-1]
			entries = append(entries, int32(len(prefixes)), int32(len(prefix)))
			prefixes = append(prefixes, prefix...)
			biases = append(biases, ordered[i].Bias)
		}
	}
	pr.prefixes = putIDs(prefixes)

	if p.NGram > 0 {
		for _, row := range p.History {
			pr.room = max(pr.room, len(row))
		}
		pr.room += p.Steps
		pr.history = align()
		for _, row := range p.History {
			for i := range pr.room {
				id := int64(-1)
				if i < len(row) {
					id = row[i]
				}
				buf = binary.LittleEndian.AppendUint64(buf, uint64(id))
			}
		}
		pr.lengths = align()
		for _, row := range p.History {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(len(row)))
		}
	}
	pr.groups = align()
	for _, v := range slices.Concat(groups, entries) {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(v))
	}
	pr.entries = pr.groups + 4*len(groups)
	pr.biases = align()
	for _, v := range biases {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
	}
	return buf
}

// free releases p's buffers; nil p has none.
func (pr *processing) free() error {
	if pr == nil {
		return nil
	}
	return errors.Join(pr.seen.Free(), pr.table.Free(), pr.spareSeen.Free(), pr.spareTable.Free(), pr.rows.Free())
}

// reorder makes row i of pr's rows of tokens (seen, the tails, the history
// and its lengths) hold what row rows[i] of B held, on e's stream: each is
// copied into the spare buffers (copy_rows_u8), which then take the place
// of seen and the table. Nil rows copy nothing. e is bound.
func (pr *processing) reorder(e *Engine, B int, rows []int) error {
	if pr == nil || rows == nil {
		return nil
	}
	type part struct{ at, width int } // a [B, width] byte array at the table's offset at
	var parts []part
	if pr.W > 0 {
		parts = append(parts, part{pr.tails, 8 * pr.W})
	}
	if pr.p.NGram > 0 {
		parts = append(parts, part{pr.history, 8 * pr.room}, part{pr.lengths, 4})
	}
	if pr.seen == nil && len(parts) == 0 {
		return nil
	}
	if pr.rows == nil {
		err := errors.Join(allocIf(&pr.spareSeen, pr.seen != nil, B*e.cfg.Vocab), allocIf(&pr.spareTable, true, len(pr.bytes)),
			allocIf(&pr.rows, true, 4*B))
		if err == nil {
			err = cuda.CopyIn(pr.spareTable.Ptr, pr.bytes, e.stream) // the table's ids and biases, which stay
		}
		if err != nil {
			return fmt.Errorf("gpu: reordering the logits processors' rows: %w", err)
		}
	}
	idx := make([]int32, B)
	for i, r := range rows {
		idx[i] = int32(r)
	}
	if err := cuda.CopyIn(pr.rows.Ptr, idx, e.stream); err != nil {
		return err
	}
	copyRows := func(dst, src cuda.Ptr, width int) error {
		grid := cuda.Dim3{X: min((width+255)/256, 64), Y: B, Z: 1}
		return e.launch("copy_rows_u8", grid, cuda.D1(256), 0, dst, src, pr.rows.Ptr, int64(width), B, B)
	}
	if pr.seen != nil {
		if err := copyRows(pr.spareSeen.Ptr, pr.seen.Ptr, e.cfg.Vocab); err != nil {
			return err
		}
	}
	for _, pt := range parts {
		if err := copyRows(pr.spareTable.Offset(pt.at), pr.table.Offset(pt.at), pt.width); err != nil {
			return err
		}
	}
	pr.seen, pr.spareSeen = pr.spareSeen, pr.seen
	pr.table, pr.spareTable = pr.spareTable, pr.table
	return nil
}

// allocIf sets *b to a new buffer of bytes where ok holds.
func allocIf(b **cuda.Buffer, ok bool, bytes int) error {
	if !ok {
		return nil
	}
	var err error
	*b, err = cuda.Alloc(max(bytes, 8))
	return err
}

// process launches process_rows_f32 on a queued step's logits, fed at the
// feed, where Process asked for it: the step's share of the processors
// (the eos ban, the forced ids, the decay, the begin-suppressed ids) is
// read here, the step counted.
func (d *Decoder) process(logits cuda.Ptr) error {
	pr := d.proc
	if pr == nil {
		return nil
	}
	p, j := pr.p, pr.step
	if p.NGram > 0 && j >= p.Steps {
		return engine.Invalid("step %d of a decoder processing %d: no room left for its ids", j, p.Steps)
	}
	pr.step++
	banEOS, nForced, decay := 0, 0, float32(0)
	if j < p.BanEOS {
		banEOS = 1
	}
	if j == p.ForcedAt {
		nForced = len(p.Forced)
	}
	if j < len(p.Decay) {
		decay = p.Decay[j]
	}
	nSuppress := len(p.Suppress)
	if j == p.BeginAt {
		nSuppress += len(p.BeginSuppress)
	}
	// The fed ids join the tokens of a row where the penalty, a bias or the
	// n-gram ban reads them, so the kernel runs at every step then.
	if p.Penalty == 1 && pr.W == 0 && pr.nGroups == 0 && p.NGram == 0 && banEOS == 0 && nForced == 0 && decay == 0 &&
		nSuppress == 0 {
		return nil
	}
	seen, at := cuda.Ptr(0), pr.table.Offset
	if pr.seen != nil {
		seen = pr.seen.Ptr
	}
	return d.e.launch("process_rows_f32", cuda.D1(d.s.batch), cuda.D1(1024), 0, logits, d.e.cfg.Vocab, seen, d.feed(),
		p.Penalty, at(pr.tails), pr.W, at(pr.groups), pr.nGroups, at(pr.entries), at(pr.biases), at(pr.prefixes),
		at(pr.history), at(pr.lengths), pr.room, p.NGram,
		at(pr.eos), len(p.EOS), banEOS, decay, at(pr.forced), nForced, at(pr.suppress), nSuppress)
}
