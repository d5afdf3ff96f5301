package session

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/dshgo/dsh/messages"
)

// This file is the chunk-run packing codec
// (docs/log-format.md#packed-chunk-rows). A model stream logs
// one assistant/chunk event per token delta, which makes them most of the
// lines of a log. Storage packs a run of such events into one row, which
// shares the envelope and keeps only what differs: the time gaps and the
// text pieces. A row is a storage encoding only and never a session event:
// DecodeRecord turns it back into its member events before anything else
// sees them.
//
// The whitelist is deliberately narrow. Only an event whose every byte of
// meaning is captured by the row shape packs: exact envelope keys, exact
// data keys, exact chunk keys. Anything else is written verbatim, so the
// codec can lose compression but never data. Values are carried as their
// JSON text (the members' turn, step, index, id, name and text literals are
// copied into the row and back), so an unpack reproduces them byte for
// byte; only the key order of data and chunk is normalised, which JSON
// equality does not see.

// The row tags. A line whose type is one of these is a row, never an
// event; a row that does not match its schema exactly is malformed storage.
const (
	rowText      = "text-chunks"
	rowReasoning = "reasoning-chunks"
	rowToolCall  = "tool-call-chunks"
)

// ErrNotJSONL refuses to write an event that a JSONL log cannot hold: an
// ignorable event whose type is a packed-row tag (text-chunks,
// reasoning-chunks, tool-call-chunks). The SQLite format holds one (its
// packed rows are told apart by a column, not by the type), but in a JSONL
// line the type is what makes a row, so the reader would take the event
// for a malformed row.
var ErrNotJSONL = errors.New("session: event cannot be stored in a JSONL log")

// CheckJSONL reports, as an error matching ErrNotJSONL and naming the seq
// and type, the first event of events that a JSONL log cannot hold.
func CheckJSONL(events []Event) error {
	for _, e := range events {
		if t := e.Type(); t.isRowTag() {
			return fmt.Errorf("%w: seq %d has type %q, which JSONL reserves for packed chunk rows", ErrNotJSONL, e.seq, t)
		}
	}
	return nil
}

// minRun is the shortest run that packs; shorter runs stay verbatim, where
// the row's own envelope would cost more than it saves.
const minRun = 3

// maxRowBytes bounds one packed row (without its newline): a run whose row
// would be longer is cut into consecutive rows, each at most this long, so
// a long model stream in one batch never makes a line the reader refuses
// (DefaultMaxRecordBytes, sixteen times this). A member longer than the
// bound on its own is written verbatim (its record is bounded by the log's
// append check, not by this).
const maxRowBytes = 1 << 20

// rowFixedBytes bounds a row's bytes other than the members' shared values
// and each member's text and gap: the keys, the tag, seq0 and time0.
const rowFixedBytes = 160

// rowMemberBytes bounds what member m adds to a row: its text, a gap of at
// most 17 characters (a signed safe integer) and two commas.
func rowMemberBytes(m PackMember) int { return len(m.text) + 19 }

// The packed-run writer, shared by the stores. A JSONL row and an SQLite
// packed row hold the same data object ({"turn","step","index","dt",
// "texts"} or, for tool-call deltas, {"turn","step","index","dt","id",
// "name"?,"args"}), in the same key order; they differ only in what
// surrounds it (a JSONL row wraps it as {"type","seq0","time0","data"},
// SQLite keeps seq0, time0 and the tag in their own columns) and in where
// a long run is cut (maxRowBytes here; 1024 members or 1 MiB of data in
// SQLite). So each store forms its runs with Packable and Continues, cuts
// them by its own rule, and writes each row's data with AppendPackedData.

// PackMember is an event that can be a member of a packed chunk row: an
// assistant/chunk with exactly the envelope keys type, seq, time and data,
// data exactly {turn, step, chunk}, and the chunk a text, reasoning or
// tool-call delta with exactly its keys. It holds the event's values as
// their JSON text, which a row copies byte for byte. Build one with
// Packable; the zero PackMember is no member.
type PackMember struct {
	kind              messages.ChunkType
	seq, time         int64
	turn, step, index string // integer literals
	id, name          string // string literals (tool-call deltas)
	hasName           bool
	text              string // string literal: text or argumentsDelta
}

// Seq returns the member's seq.
func (m PackMember) Seq() int64 { return m.seq }

// Time returns the member's time.
func (m PackMember) Time() int64 { return m.time }

// Tag returns the type of a row of m's kind: text-chunks,
// reasoning-chunks or tool-call-chunks.
func (m PackMember) Tag() string { return rowTag(m.kind) }

// Packable returns e as a run member, or false when e must stay verbatim
// (a row could not give it back exactly).
func Packable(e Event) (PackMember, bool) {
	if e.typ != codeChunk || e.flags&flagsEnvelope != 0 ||
		e.time < -maxSafe || e.time > maxSafe || e.seq < 0 || e.seq > maxSafe {
		return PackMember{}, false // the range checks keep the gap arithmetic exact
	}
	m := PackMember{seq: e.seq, time: e.time}
	if e.dataForm() == dataChunkText {
		// Kept compact (compact.go): the parts are at hand, as the data
		// below would spell them.
		c := e.payload.(*chunkStep)
		m.kind, m.turn, m.step, m.index, m.text = c.kind, c.lits.turn, c.lits.step, c.lits.index, e.data.String()
		return m, true
	}
	var turn, step, chunk messages.JSON
	n := 0
	for k, v := range e.data.Members() {
		switch k {
		case "turn":
			turn = v
		case "step":
			step = v
		case "chunk":
			chunk = v
		default:
			return PackMember{}, false
		}
		n++
	}
	// The JSON has no duplicate keys, so three known keys is the exact set.
	_, turnOK := turn.AsInt()
	_, stepOK := step.AsInt()
	if n != 3 || !turnOK || !stepOK || chunk.Kind() != messages.KindObject {
		return PackMember{}, false
	}
	m.turn, m.step = turn.String(), step.String()
	var typ, text, args string
	var hasText, hasArgs, indexOK bool
	n = 0
	for k, v := range chunk.Members() {
		s := v.String()
		switch k {
		case "type":
			typ = s
		case "index":
			idx, ok := v.AsInt()
			m.index, indexOK = s, ok && idx >= 0
		case "text":
			text, hasText = s, true
		case "id":
			m.id = s
		case "name":
			m.name, m.hasName = s, true
		case "argumentsDelta":
			args, hasArgs = s, true
		default:
			return PackMember{}, false
		}
		if k != "type" && k != "index" && v.Kind() != messages.KindString {
			return PackMember{}, false
		}
		n++
	}
	if !indexOK {
		return PackMember{}, false
	}
	switch typ {
	case `"text-delta"`, `"reasoning-delta"`:
		if n != 3 || !hasText {
			return PackMember{}, false
		}
		m.kind = messages.ChunkTextDelta
		if typ == `"reasoning-delta"` {
			m.kind = messages.ChunkReasoningDelta
		}
		m.text = text
	case `"tool-call-delta"`:
		want := 4
		if m.hasName {
			want = 5
		}
		if n != want || m.id == "" || !hasArgs {
			return PackMember{}, false
		}
		m.kind = messages.ChunkToolCallDelta
		m.text = args
	default:
		return PackMember{}, false
	}
	return m, true
}

// Continues reports whether next can follow m in one run: same chunk kind,
// turn, step and index; for tool-call deltas the same id and the same name
// or absence of one; the next seq; and a time gap that is a safe integer.
func (m PackMember) Continues(next PackMember) bool {
	a, b := m, next
	if b.kind != a.kind || b.turn != a.turn || b.step != a.step || b.index != a.index || b.seq != a.seq+1 {
		return false
	}
	if a.kind == messages.ChunkToolCallDelta && (b.id != a.id || b.hasName != a.hasName || b.name != a.name) {
		return false
	}
	dt := b.time - a.time // times are safe integers, so this cannot overflow
	return dt >= -maxSafe && dt <= maxSafe
}

// AppendPackedData appends the data object of a packed row of run to dst
// and returns the extended buffer. run is a run: at least one member, each
// Continues the one before it. The member count bounds are the caller's.
func AppendPackedData(dst []byte, run []PackMember) []byte {
	first := run[0]
	dst = append(dst, `{"turn":`...)
	dst = append(dst, first.turn...)
	dst = append(dst, `,"step":`...)
	dst = append(dst, first.step...)
	dst = append(dst, `,"index":`...)
	dst = append(dst, first.index...)
	dst = append(dst, `,"dt":[`...)
	for k := 1; k < len(run); k++ {
		if k > 1 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, run[k].time-run[k-1].time, 10)
	}
	dst = append(dst, ']')
	if first.kind == messages.ChunkToolCallDelta {
		dst = append(dst, `,"id":`...)
		dst = append(dst, first.id...)
		if first.hasName {
			dst = append(dst, `,"name":`...)
			dst = append(dst, first.name...)
		}
		dst = append(dst, `,"args":[`...)
	} else {
		dst = append(dst, `,"texts":[`...)
	}
	for k, m := range run {
		if k > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, m.text...)
	}
	return append(dst, "]}"...)
}

// PackedDataLen returns len(AppendPackedData(nil, run)), without writing
// it.
func PackedDataLen(run []PackMember) int {
	first := run[0]
	n := len(`{"turn":,"step":,"index":,"dt":[],"texts":[]}`) + len(first.turn) + len(first.step) + len(first.index)
	if first.kind == messages.ChunkToolCallDelta {
		n += len(`,"id":`) + len(first.id) - len(`"texts"`) + len(`"args"`)
		if first.hasName {
			n += len(`,"name":`) + len(first.name)
		}
	}
	for k, m := range run {
		n += len(m.text)
		if k > 0 {
			n += 2 + intLen(m.time-run[k-1].time) // a comma before the text and one before the gap
		}
	}
	if len(run) > 1 {
		n-- // the first gap has no comma
	}
	return n
}

// intLen returns the length of n in decimal.
func intLen(n int64) int {
	l := 1
	if n < 0 {
		l++
		if n == -1<<63 {
			return 20
		}
		n = -n
	}
	for ; n >= 10; n /= 10 {
		l++
	}
	return l
}

// Packing says whether AppendRecords packs chunk runs into rows
// (docs/log-format.md#packed-chunk-rows). A named type, so that a call says
// which: AppendRecords(dst, events, PackChunks).
type Packing bool

// The packings.
const (
	// Verbatim writes every event as its own line (AppendEvent).
	Verbatim Packing = false
	// PackChunks writes every run of at least three consecutive packable
	// chunk events as one row.
	PackChunks Packing = true
)

// AppendRecords appends the storage lines of a batch of events to dst, each
// followed by "\n", and returns the extended buffer. With PackChunks, every
// run of at least three consecutive packable chunk events becomes one row;
// with Verbatim, every event is written verbatim by AppendEvent. Runs do
// not cross batches: a batch is the unit the persister writes. A row stops
// before it would exceed maxRowBytes and the run goes on in the next row
// (a first member over the bound on its own, or a remainder shorter than
// three, is written verbatim). dst is owned by the caller before and
// after; events are only read.
func AppendRecords(dst []byte, events []Event, packing Packing) []byte {
	pack := packing == PackChunks
	var run []PackMember
	if pack {
		// A turn's batch is mostly one run of ~200 members (~130 B each):
		// growing the run from nil on every call would be half the cost
		// of encoding a batch, so the buffer is reused.
		rp := runs.Get().(*[]PackMember)
		run = (*rp)[:0]
		defer func() {
			clear(run[:cap(run)]) // keep no event's strings alive
			*rp = run[:0]
			runs.Put(rp)
		}()
	}
	for i := 0; i < len(events); {
		if pack {
			run = run[:0]
			if m, ok := Packable(events[i]); ok {
				run = append(run, m)
				size := rowFixedBytes + len(m.turn) + len(m.step) + len(m.index) +
					len(m.id) + len(m.name) + rowMemberBytes(m)
				for j := i + 1; j < len(events); j++ {
					n, ok := Packable(events[j])
					if !ok || !run[len(run)-1].Continues(n) {
						break
					}
					if size += rowMemberBytes(n); size > maxRowBytes {
						break // the rest of the run starts the next row
					}
					run = append(run, n)
				}
			}
			if len(run) >= minRun {
				dst = appendRow(dst, run)
				dst = append(dst, '\n')
				i += len(run)
				continue
			}
		}
		dst = AppendEvent(dst, events[i])
		dst = append(dst, '\n')
		i++
	}
	return dst
}

// runs holds AppendRecords' run buffers (safe for concurrent use: the
// persister encodes on several workers).
var runs = sync.Pool{New: func() any { return new([]PackMember) }}

// appendRow writes one packed row (without newline) for run (len ≥ 1):
// the row's data wrapped with its tag, seq0 and time0.
func appendRow(dst []byte, run []PackMember) []byte {
	first := run[0]
	dst = append(dst, `{"type":"`...)
	dst = append(dst, first.Tag()...)
	dst = append(dst, `","seq0":`...)
	dst = strconv.AppendInt(dst, first.seq, 10)
	dst = append(dst, `,"time0":`...)
	dst = strconv.AppendInt(dst, first.time, 10)
	dst = append(dst, `,"data":`...)
	dst = AppendPackedData(dst, run)
	return append(dst, '}')
}

// DecodeRecord reads one storage line: a packed row becomes its member
// events, in seq order; any other line is one event (DecodeEvent). A line
// tagged as a row that does not match the row schema exactly is an error
// (malformed storage), as is a row whose reconstructed seq or time leaves
// the safe-integer range. A row of one or two members is accepted: the
// minimum run is the writer's choice, not part of the row schema. Errors
// are *DecodeError. The returned slice is
// owned by the caller; the caller keeps ownership of line.
func DecodeRecord(line []byte) ([]Event, error) { return appendRecord(nil, line) }

// appendRecord is DecodeRecord appending the events to dst, so that a file
// reader collects a whole log in one slice instead of one slice per line.
// On error it returns dst unchanged (its length; members a row had decoded
// into the spare capacity before the error are cleared).
func appendRecord(dst []Event, line []byte) ([]Event, error) {
	j, err := messages.ParseJSON(line)
	if err != nil {
		return dst, &DecodeError{Seq: -1, Err: err}
	}
	if j.Kind() == messages.KindObject {
		t, _ := j.Field("type")
		kind := messages.ChunkType("")
		switch t.String() {
		case `"` + rowText + `"`:
			kind = messages.ChunkTextDelta
		case `"` + rowReasoning + `"`:
			kind = messages.ChunkReasoningDelta
		case `"` + rowToolCall + `"`:
			kind = messages.ChunkToolCallDelta
		}
		if kind != "" {
			out, err := decodeRow(dst, j, kind)
			if err != nil {
				clear(out[len(dst):])
				return dst, err
			}
			return out, nil
		}
	}
	e, err := decodeEventJSON(j)
	if err != nil {
		return dst, err
	}
	return append(dst, e), nil
}

// decodeRow unpacks a row of the given chunk kind, appending its members
// to dst. On error the returned slice may hold members past len(dst); the
// caller drops them.
//
// A row is most of a log file, and this is the load path's hot loop. A
// member's typed view is not decoded from its data (the reference
// implementation in reference_decode_test.go did, through decodePayload):
// the row checks below are a superset of what decodePayload checks on a
// member's data (an object; turn and step safe integers; a chunk of the
// row's kind with a non-negative integer index, a string text or
// argumentsDelta, a string id and optional string name), so that decode
// cannot fail, and its result is known: an AssistantChunk, which
// setPayload keeps as a *chunkStep, here one for the whole row.
// TestRowMembersDecodeAsTheirData holds the two to each other.
//
// A text or reasoning row whose turn, step and index are written as
// AssistantChunk.Draft writes them (plain decimal) gives members already in
// the form a log keeps them in (compact.go): each keeps its text literal
// only, a part of one copy of the row's texts, and shares the row's
// *chunkStep; Data writes the rest back, byte for byte what the other
// path builds. Any other row gives each member its data in full, from two
// builders that hold the members shared by the whole row (turn and step;
// the chunk's type, index, id and name) and are truncated back to them
// after every member, so a member costs one allocation, its data.
func decodeRow(dst []Event, j messages.JSON, kind messages.ChunkType) ([]Event, error) {
	var seq0J, time0J, data messages.JSON
	n := 0
	seq0 := int64(-1)
	fail := func(format string, args ...any) ([]Event, error) {
		return dst, &DecodeError{Seq: seq0, Err: fmt.Errorf("malformed %s row: "+format,
			append([]any{rowTag(kind)}, args...)...)}
	}
	for k, v := range j.Members() {
		switch k {
		case "type":
		case "seq0":
			seq0J = v
		case "time0":
			time0J = v
		case "data":
			data = v
		default:
			return fail("unknown key %q", k)
		}
		n++
	}
	if s, ok := seq0J.AsInt(); ok && s >= 0 {
		seq0 = s
	} else {
		return fail("seq0 is not a non-negative safe integer")
	}
	time0, ok := time0J.AsInt()
	if n != 4 || !ok || data.Kind() != messages.KindObject {
		return fail("want exactly the keys type, seq0, time0 (a safe integer) and data (an object)")
	}

	var turn, step, index, dt, pieces, id, name messages.JSON
	var hasName bool
	piecesKey := "texts"
	if kind == messages.ChunkToolCallDelta {
		piecesKey = "args"
	}
	n = 0
	for k, v := range data.Members() {
		switch {
		case k == "turn":
			turn = v
		case k == "step":
			step = v
		case k == "index":
			index = v
		case k == "dt":
			dt = v
		case k == piecesKey:
			pieces = v
		case k == "id" && kind == messages.ChunkToolCallDelta:
			id = v
		case k == "name" && kind == messages.ChunkToolCallDelta:
			name, hasName = v, true
		default:
			return fail("unknown data key %q", k)
		}
		n++
	}
	want := 5
	if kind == messages.ChunkToolCallDelta {
		want = 6
		if hasName {
			want = 7
		}
	}
	if n != want {
		return fail("data lacks a required key")
	}
	turnN, ok := turn.AsInt()
	if !ok {
		return fail("turn is not a safe integer")
	}
	stepN, ok := step.AsInt()
	if !ok {
		return fail("step is not a safe integer")
	}
	indexN, ok := index.AsInt()
	if !ok || indexN < 0 {
		return fail("index is not a non-negative safe integer")
	}
	if kind == messages.ChunkToolCallDelta {
		if id.Kind() != messages.KindString {
			return fail("id is not a string")
		}
		if hasName && name.Kind() != messages.KindString {
			return fail("name is not a string")
		}
	}
	if dt.Kind() != messages.KindArray || pieces.Kind() != messages.KindArray {
		return fail("dt and %s must be arrays", piecesKey)
	}

	// The gaps are collected first and read by position: walking dt and
	// pieces in step through iter.Pull cost a coroutine switch a member.
	// They stay unparsed until their member is reached, so the errors come
	// in the same order as when the two were walked together.
	var gapsArr [256]messages.JSON
	gaps := gapsArr[:0]
	for d := range dt.Elements() {
		gaps = append(gaps, d)
	}
	dst = slices.Grow(dst, len(gaps)+1)
	first := len(dst)

	// The members' events, built in the loop below: compact (see above)
	// or with their data in full.
	var member func(p messages.JSON) Event
	cs := &chunkStep{turn: turnN, step: stepN} // shared by the row's members
	if kind != messages.ChunkToolCallDelta && isIntLiteral(turn.String(), turnN) &&
		isIntLiteral(step.String(), stepN) && isIntLiteral(index.String(), indexN) {
		// One copy of the texts for the whole row: the members' literals
		// are parts of it, and none keeps the line (pieces is a part of
		// it). The literals of the chunkStep are fresh for the same reason.
		pieces = pieces.Clone()
		cs.kind, cs.index = kind, indexN
		cs.lits = &chunkLits{turn: strconv.FormatInt(turnN, 10), step: strconv.FormatInt(stepN, 10),
			index: strconv.FormatInt(indexN, 10)}
		member = func(p messages.JSON) Event {
			return Event{typ: codeChunk, data: p, payload: cs, flags: flagChunkText}
		}
	} else {
		var c, d messages.ObjectBuilder
		c.String("type", string(kind)).Raw("index", index)
		piece := "text"
		if kind == messages.ChunkToolCallDelta {
			c.Raw("id", id)
			if hasName {
				c.Raw("name", name)
			}
			piece = "argumentsDelta"
		}
		cShared := c.Len()
		d.Raw("turn", turn).Raw("step", step)
		dShared := d.Len()
		member = func(p messages.JSON) Event {
			c.Truncate(cShared)
			c.Raw(piece, p)
			d.Truncate(dShared)
			d.Object("chunk", &c)
			return Event{typ: codeChunk, data: d.Build(), payload: cs}
		}
	}

	seq, t := seq0, time0
	for p := range pieces.Elements() {
		k := len(dst) - first
		if p.Kind() != messages.KindString {
			return fail("%s holds %s, not a string", piecesKey, p)
		}
		if k > 0 {
			if k > len(gaps) {
				return fail("dt is shorter than %s less one", piecesKey)
			}
			gap, ok := gaps[k-1].AsInt()
			if !ok {
				return fail("dt holds %s, not a safe integer", gaps[k-1])
			}
			seq++
			t += gap // both safe, so no overflow
			if t < -maxSafe || t > maxSafe || seq > maxSafe {
				return fail("member %d leaves the safe-integer range", k)
			}
		}
		e := member(p)
		e.seq, e.time = seq, t
		dst = append(dst, e)
	}
	members := len(dst) - first
	if members == 0 {
		return fail("%s is empty", piecesKey)
	}
	if len(gaps) > members-1 {
		return fail("dt is longer than %s less one", piecesKey)
	}
	return dst, nil
}

// isIntLiteral reports whether lit is n written as strconv writes it.
func isIntLiteral(lit string, n int64) bool {
	var buf [24]byte
	return lit == string(strconv.AppendInt(buf[:0], n, 10))
}

func rowTag(kind messages.ChunkType) string {
	switch kind {
	case messages.ChunkReasoningDelta:
		return rowReasoning
	case messages.ChunkToolCallDelta:
		return rowToolCall
	}
	return rowText
}
