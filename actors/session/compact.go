package session

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dshgo/dsh/messages"
)

// This file keeps the two kinds of events that hold most of a session's
// bytes without their data's second copy:
//
//   - A text or reasoning delta chunk whose data is exactly the form
//     AssistantChunk.Draft writes keeps only its text's JSON literal; its
//     turn, step, chunk type and index sit in the *chunkStep that every
//     such chunk of the same step, type and index shares, and Data
//     writes the rest back around the literal.
//   - An assistant message or tool result appended from its typed value
//     keeps no data: its data is that value's encoding (the draft was
//     built from it), so Data encodes it again from the payload the event
//     keeps anyway (the message it holds is the bulk of both).
//
// Both are exact: Data returns the text the event was built with, byte for
// byte, and the file holds what it always held.

// compactData is how an event's data is kept.
type compactData uint8

const (
	dataVerbatim    compactData = iota // data holds the data
	dataChunkText                      // data holds the chunk's text literal (see chunkStep)
	dataFromPayload                    // data is the payload's encoding, built on demand
)

// dataForm returns how e keeps its data.
func (e *Event) dataForm() compactData {
	switch {
	case e.flags&flagChunkText != 0:
		return dataChunkText
	case e.flags&flagDataFromPayload != 0:
		return dataFromPayload
	}
	return dataVerbatim
}

// fullData returns e's data, built when e keeps it compact.
func (e *Event) fullData() messages.JSON {
	switch e.dataForm() {
	case dataChunkText:
		c := e.payload.(*chunkStep)
		var o, in messages.ObjectBuilder
		in.String("type", string(c.kind)).Int("index", c.index).Raw("text", e.data)
		return o.Int("turn", c.turn).Int("step", c.step).Object("chunk", &in).Build()
	case dataFromPayload:
		switch p := e.payload.(type) {
		case AssistantMessage:
			return p.Draft().data
		case ToolResult:
			return p.Draft().data
		}
	}
	return e.data
}

// dataLen returns len(e.fullData()), building it only for an event whose
// data is encoded from its payload.
func (e *Event) dataLen() int {
	if e.dataForm() != dataChunkText {
		return e.fullData().Len()
	}
	c := e.payload.(*chunkStep)
	// {"turn":,"step":,"chunk":{"type":"","index":,"text":}}
	return 54 + len(c.lits.turn) + len(c.lits.step) + len(c.kind) + len(c.lits.index) + e.data.Len()
}

// appendData appends e's data to dst, as fullData would return it,
// without building a value.
func (e *Event) appendData(dst []byte) []byte {
	if e.dataForm() != dataChunkText {
		return append(dst, e.fullData().String()...)
	}
	c := e.payload.(*chunkStep)
	dst = append(dst, `{"turn":`...)
	dst = strconv.AppendInt(dst, c.turn, 10)
	dst = append(dst, `,"step":`...)
	dst = strconv.AppendInt(dst, c.step, 10)
	dst = append(dst, `,"chunk":{"type":"`...)
	dst = append(dst, c.kind...)
	dst = append(dst, `","index":`...)
	dst = strconv.AppendInt(dst, c.index, 10)
	dst = append(dst, `,"text":`...)
	dst = append(dst, e.data.String()...)
	return append(dst, "}}"...)
}

// compactable reports whether a typed draft's payload may be dropped from
// its data: the data is the payload's encoding, by construction.
func compactable(p payload) bool {
	switch p.(type) {
	case AssistantMessage, ToolResult:
		return true
	}
	return false
}

// compact makes e, an admitted event about to be stored, keep its data
// compact where that is exact (see the top of this file). fromDraft says
// that e's payload is the typed value its data was encoded from.
func (l *Log) compact(e *Event, fromDraft bool) {
	compactSources(e)
	if fromDraft && compactable(e.payload) {
		e.data = messages.JSON{}
		e.flags |= flagDataFromPayload
		return
	}
	c, ok := e.payload.(*chunkStep)
	if !ok || e.flags != 0 {
		return
	}
	kind, index, lit, ok := chunkTextForm(e.data.String(), c.turn, c.step)
	if !ok {
		return
	}
	chunk, _ := e.data.Field("chunk")
	e.payload = l.chunkStepOf(chunkStep{turn: c.turn, step: c.step, kind: kind, index: index})
	e.data = chunkTextLiteral(lit, chunk)
	e.flags |= flagChunkText
}

// chunkTextLiteral returns lit, the text literal of chunk (a delta's JSON
// in the form chunkBodyTextForm accepts), as a JSON value of its own. The
// literal is copied out: kept as a part of the chunk's data, it would keep
// all of it. Without escapes, it is what JSONString writes for its
// content, which copies it without looking for it again.
func chunkTextLiteral(lit string, chunk messages.JSON) messages.JSON {
	if s := lit[1 : len(lit)-1]; plainText(s) {
		return messages.JSONString(s)
	}
	t, _ := chunk.Field("text")
	return t.Clone()
}

// decodeChunkText returns the event a decoder builds for an assistant/chunk
// line at seq and time whose envelope has no other key, when its data is
// in the form a log keeps as its text (chunkTextForm): already compact, as
// the log would keep it, and without decoding the data again. Data in that
// form is an object with integer turn and step and a text or reasoning
// delta with a non-negative integer index and a string text, so it
// decodes (decodePayload), to the AssistantChunk Data gives back.
func decodeChunkText(seq, time int64, data messages.JSON) (Event, bool) {
	turn, step, kind, index, lit, ok := chunkTextParts(data.String())
	if !ok {
		return Event{}, false
	}
	var text messages.JSON
	if s := lit[1 : len(lit)-1]; plainText(s) {
		text = messages.JSONString(s)
	} else {
		chunk, _ := data.Field("chunk")
		text = chunkTextLiteral(lit, chunk)
	}
	c := &chunkStep{turn: turn, step: step, kind: kind, index: index, lits: &chunkLits{turn: strconv.FormatInt(turn, 10),
		step: strconv.FormatInt(step, 10), index: strconv.FormatInt(index, 10)}}
	return Event{typ: codeChunk, seq: seq, time: time, data: text, payload: c, flags: flagChunkText}, true
}

// minSourceRun is the shortest run of sources kept as a run: below it, the
// list costs about what the run does.
const minSourceRun = 4

// compactSources keeps e's sourceEventSeqs as a run (first seq and
// length) when they are consecutive seqs in order, as an assistant
// message citing the chunks of its stream has them.
func compactSources(e *Event) {
	if e.ext == nil || len(e.ext.sources) < minSourceRun {
		return
	}
	s := e.ext.sources
	for i := 1; i < len(s); i++ {
		if s[i] != s[0]+int64(i) {
			return
		}
	}
	x := e.extCopy()
	x.srcFirst, x.srcLen, x.sources = s[0], int64(len(s)), nil
	e.ext = x
}

// chunkTextForm reports whether data is exactly
//
//	{"turn":T,"step":S,"chunk":{"type":K,"index":I,"text":"..."}}
//
// for the given turn and step, K text-delta or reasoning-delta and I a
// non-negative integer written without leading zeros, and returns K and I.
func chunkTextForm(data string, turn, step int64) (kind messages.ChunkType, index int64, lit string, ok bool) {
	s, ok := strings.CutPrefix(data, `{"turn":`)
	if !ok {
		return "", 0, "", false
	}
	if s, ok = cutInt(s, turn); !ok {
		return "", 0, "", false
	}
	if s, ok = strings.CutPrefix(s, `,"step":`); !ok {
		return "", 0, "", false
	}
	if s, ok = cutInt(s, step); !ok {
		return "", 0, "", false
	}
	if s, ok = strings.CutPrefix(s, `,"chunk":`); !ok {
		return "", 0, "", false
	}
	if s, ok = strings.CutSuffix(s, "}"); !ok {
		return "", 0, "", false
	}
	return chunkBodyTextForm(s)
}

// chunkTextParts reports whether data is exactly
//
//	{"turn":T,"step":S,"chunk":{"type":K,"index":I,"text":"..."}}
//
// with T and S safe integers written as strconv writes them, K text-delta
// or reasoning-delta and I a non-negative integer written without leading
// zeros, and returns T, S, K, I and the text's literal. data must be valid
// JSON text.
func chunkTextParts(data string) (turn, step int64, kind messages.ChunkType, index int64, lit string, ok bool) {
	s, ok := strings.CutPrefix(data, `{"turn":`)
	if !ok {
		return 0, 0, "", 0, "", false
	}
	if turn, s, ok = cutIntLiteral(s); !ok {
		return 0, 0, "", 0, "", false
	}
	if s, ok = strings.CutPrefix(s, `,"step":`); !ok {
		return 0, 0, "", 0, "", false
	}
	if step, s, ok = cutIntLiteral(s); !ok {
		return 0, 0, "", 0, "", false
	}
	if s, ok = strings.CutPrefix(s, `,"chunk":`); !ok {
		return 0, 0, "", 0, "", false
	}
	if s, ok = strings.CutSuffix(s, "}"); !ok {
		return 0, 0, "", 0, "", false
	}
	if kind, index, lit, ok = chunkBodyTextForm(s); !ok {
		return 0, 0, "", 0, "", false
	}
	return turn, step, kind, index, lit, true
}

// cutIntLiteral reads a safe integer written as strconv writes it (an
// optional minus, then digits without a leading zero; no "-0") at the
// start of s, and returns it and the rest of s. It reads the digits
// itself (a load reads two for every chunk line): at most 17 of them,
// which cannot overflow an int64.
func cutIntLiteral(s string) (n int64, rest string, ok bool) {
	i := 0
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		i = 1
	}
	start := i
	for ; i < len(s) && i-start < 17 && s[i] >= '0' && s[i] <= '9'; i++ {
		n = n*10 + int64(s[i]-'0')
	}
	switch {
	case i == start, s[start] == '0' && (i > start+1 || neg), n > maxSafe:
		return 0, s, false
	case neg:
		n = -n
	}
	return n, s[i:], true
}

// chunkBodyTextForm is chunkTextForm for the chunk alone: the chunk's
// JSON {"type":K,"index":I,"text":LIT}, K a text or reasoning delta, as
// the messages package writes it.
func chunkBodyTextForm(s string) (kind messages.ChunkType, index int64, lit string, ok bool) {
	if s, ok = strings.CutPrefix(s, `{"type":"`); !ok {
		return "", 0, "", false
	}
	switch {
	case strings.HasPrefix(s, string(messages.ChunkTextDelta)+`"`):
		kind = messages.ChunkTextDelta
	case strings.HasPrefix(s, string(messages.ChunkReasoningDelta)+`"`):
		kind = messages.ChunkReasoningDelta
	default:
		return "", 0, "", false
	}
	if s, ok = strings.CutPrefix(s[len(kind):], `","index":`); !ok {
		return "", 0, "", false
	}
	digits := 0
	for digits < len(s) && digits < 16 && s[digits] >= '0' && s[digits] <= '9' {
		digits++
	}
	if digits == 0 || (digits > 1 && s[0] == '0') {
		return "", 0, "", false
	}
	index, err := strconv.ParseInt(s[:digits], 10, 64)
	if err != nil {
		return "", 0, "", false
	}
	lit, ok = strings.CutPrefix(s[digits:], `,"text":`)
	if !ok {
		return "", 0, "", false
	}
	lit, ok = strings.CutSuffix(lit, "}")
	if !ok || !isOneStringLiteral(lit) {
		return "", 0, "", false
	}
	return kind, index, lit, true
}

// plainText reports whether s, the content of a string literal, needs no
// escape: AppendQuoted writes it back as it is.
func plainText(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return utf8.ValidString(s)
}

// cutInt returns s without its prefix n (in decimal), and whether s had
// it.
func cutInt(s string, n int64) (string, bool) {
	var buf [24]byte
	b := strconv.AppendInt(buf[:0], n, 10)
	if len(s) < len(b) || s[:len(b)] != string(b) {
		return s, false
	}
	return s[len(b):], true
}

// isOneStringLiteral reports whether lit, a run of valid JSON text, is one
// string literal and nothing after it.
func isOneStringLiteral(lit string) bool {
	if len(lit) < 2 || lit[0] != '"' {
		return false
	}
	for i := 1; i < len(lit); i++ {
		switch lit[i] {
		case '\\':
			i++
		case '"':
			return i == len(lit)-1
		}
	}
	return false
}

// ChunkText reports, for an assistant/chunk the log keeps as its text
// alone (a text or reasoning delta, as above), its chunk type and whether
// its text is non-empty, without building or decoding its data: a
// committed-event observer reads every streamed chunk, and Payload would
// decode each one. ok is false for every other event, whose Payload
// decodes it.
func (e Event) ChunkText() (kind messages.ChunkType, nonEmpty, ok bool) {
	if e.dataForm() != dataChunkText {
		return "", false, false
	}
	return e.payload.(*chunkStep).kind, e.data.Len() > len(`""`), true
}
