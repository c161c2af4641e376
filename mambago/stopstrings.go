package mambago

import "github.com/mambago/mambago/mambago/engine"

// StopStrings are transformers' stop_strings: a row ends with the token
// that completes one of Strings in its text, as it ends with an eos id
// (Sampling: filled with EOS, or Fill, after it; with no EOS it goes on,
// as in transformers, until every row has ended; Beams: the beam is
// finished).
//
// A row's text is its tokens' Texts one after another: its prompt's,
// with any left padding before it as transformers' input_ids hold it,
// then its new ones. A string counts where it ends within the row's last
// token (it may start in earlier ones, and the last token may run on past
// it) and lies within the row's last W tokens, W being the longest
// string's length in bytes (transformers' look-back, in its units: bytes
// for byte-level vocabularies, characters otherwise). The zero value has
// none.
type StopStrings struct {
	// Strings are the stop strings' bytes (UTF-8 for text); none empty.
	Strings []string
	// Texts holds token id i's text as the tokenizer decodes it on its
	// own (transformers' clean vocabulary: for a byte-level vocabulary
	// its bytes, which may be part of a character). An id past its end
	// or with nil text has no text: no string runs through it.
	Texts [][]byte
	// Fill, where not nil, is the id Generate fills a row with after the
	// token that completes a string (transformers' pad_token_id, which
	// the hf layer gives it where it is not the first eos id); nil fills
	// it with EOS, as after an eos id.
	Fill *int64
}

// check reports an empty stop string, or stop strings without texts.
func (ss StopStrings) check() error {
	if len(ss.Strings) > 0 && len(ss.Texts) == 0 {
		return engine.Invalid("stop strings %q need the tokens' texts", ss.Strings)
	}
	if ss.Fill != nil && *ss.Fill < 0 {
		return engine.Invalid("stop strings' fill id %d, want ≥ 0", *ss.Fill)
	}
	for _, s := range ss.Strings {
		if s == "" {
			return engine.Invalid("stop strings %q: an empty string", ss.Strings)
		}
	}
	return nil
}

// stopTexts tracks each row's last tokens, to tell which token ends a row
// under StopStrings.
type stopTexts struct {
	ss    StopStrings
	tails        // each row's last tokens: the look-back less the new token
	buf   []byte // scratch: the text a check reads
}

// newStopTexts returns the tracker for ss over the prompts in ids [B, T]
// (row b's at spans[b], after its left padding; nil spans take every row
// whole), or nil where ss has no strings.
func newStopTexts(ss StopStrings, ids []int64, B, T int, spans []Span) *stopTexts {
	if len(ss.Strings) == 0 {
		return nil
	}
	longest := 0
	for _, s := range ss.Strings {
		longest = max(longest, len(s))
	}
	rows := make([][]int64, B)
	for b := range B {
		rows[b] = ids[b*T : (b+1)*T]
		if spans != nil {
			rows[b] = rows[b][:spans[b].Start+spans[b].Len]
		}
	}
	return &stopTexts{ss: ss, tails: newTails(longest-1, rows)}
}

// text returns id's text, nil for none.
func (st *stopTexts) text(id int64) []byte {
	if id < 0 || id >= int64(len(st.ss.Texts)) {
		return nil
	}
	return st.ss.Texts[id]
}

// hits reports whether row b ends on taking id: whether a stop string
// ends within id's text, read after the row's last tokens.
func (st *stopTexts) hits(b int, id int64) bool {
	if st == nil {
		return false
	}
	last := st.text(id)
	if len(last) == 0 {
		return false
	}
	// The last tokens a string ending in last can reach: back to one
	// without text, or until keep bytes are before last.
	tail := st.rows[b]
	from, n := len(tail), 0
	for from > 0 && n < st.keep {
		t := st.text(tail[from-1])
		if t == nil {
			break
		}
		n += len(t)
		from--
	}
	st.buf = st.buf[:0]
	for _, id := range tail[from:] {
		st.buf = append(st.buf, st.text(id)...)
	}
	before := len(st.buf)
	st.buf = append(st.buf, last...)
	for _, s := range st.ss.Strings {
		for end := max(before+1, len(s)); end <= len(st.buf); end++ {
			if string(st.buf[end-len(s):end]) == s {
				return true
			}
		}
	}
	return false
}

// add appends id to row b.
func (st *stopTexts) add(b int, id int64) {
	if st != nil {
		st.tails.add(b, id)
	}
}

// reorder makes row i hold what row rows[i] held.
func (st *stopTexts) reorder(rows []int) {
	if st != nil {
		st.tails.reorder(rows)
	}
}
