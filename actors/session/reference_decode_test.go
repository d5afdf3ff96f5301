package session

import (
	"bytes"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/dshgo/dsh/messages"
)

// This file holds two naive references for the differential tests: a
// record decoder written for plainness, not speed (a generic walk of the
// parsed line, each packed-row member built with fresh builders and
// decoded again by decodePayload), which DecodeRecord is held to event for
// event and error for error; and a file reader that does not stream (the
// whole file split into a slice of lines, each zstd frame decoded whole,
// then a slice per record appended to File.Events), which ParseFile is
// held to.
//
// That reader takes memory in proportion to the decoded content and the
// number of lines, which lets a tiny file take gigabytes. So that
// the differential fuzz target runs at full speed on such inputs, the
// reference refuses a frame that decodes to more than refMaxContent
// (errReferenceTooBig), and the comparison skips such a file: the
// streaming reader's bounds on them are tested on their own.

// referenceDecodeRecord is the reference DecodeRecord.
func referenceDecodeRecord(line []byte) ([]Event, error) {
	j, err := messages.ParseJSON(line)
	if err != nil {
		return nil, &DecodeError{Seq: -1, Err: err}
	}
	if j.Kind() == messages.KindObject {
		t, _ := j.Field("type")
		switch t.String() {
		case `"` + rowText + `"`:
			return referenceDecodeRow(j, messages.ChunkTextDelta)
		case `"` + rowReasoning + `"`:
			return referenceDecodeRow(j, messages.ChunkReasoningDelta)
		case `"` + rowToolCall + `"`:
			return referenceDecodeRow(j, messages.ChunkToolCallDelta)
		}
	}
	e, err := referenceDecodeEventJSON(j)
	if err != nil {
		return nil, err
	}
	return []Event{e}, nil
}

// referenceDecodeEventJSON is the reference decodeEventJSON.
func referenceDecodeEventJSON(j messages.JSON) (Event, error) {
	if j.Kind() != messages.KindObject {
		return Event{}, &DecodeError{Seq: -1, Err: fmt.Errorf("envelope is not a JSON object")}
	}
	// One pass over the members collects them; the checks run afterwards so
	// that an error can name the seq even when seq comes late in the line.
	var typJ, seqJ, timeJ, data, opJ, srcJ, ignJ messages.JSON
	var hasData, hasOp, hasSrc, hasIgn bool
	var unknown string
	for k, v := range j.Members() {
		switch k {
		case "type":
			typJ = v
		case "seq":
			seqJ = v
		case "time":
			timeJ = v
		case "data":
			data, hasData = v, true
		case "surfaceOp":
			opJ, hasOp = v, true
		case "sourceEventSeqs":
			srcJ, hasSrc = v, true
		case "ignorable":
			ignJ, hasIgn = v, true
		default:
			if unknown == "" {
				unknown = k
			}
		}
	}
	seq, seqOK := seqJ.AsInt()
	fail := func(format string, args ...any) (Event, error) {
		s := int64(-1)
		if seqOK && seq >= 0 {
			s = seq
		}
		return Event{}, &DecodeError{Seq: s, Err: fmt.Errorf(format, args...)}
	}
	if unknown != "" {
		return fail("unknown envelope key %q", unknown)
	}
	typ, ok := typJ.AsString()
	switch {
	case !ok:
		return fail("type is not a string")
	case typ == "":
		return fail("type is empty")
	case !seqOK || seq < 0:
		return fail("seq is not a non-negative safe integer")
	}
	tm, ok := timeJ.AsInt()
	if !ok {
		return fail("time is not a safe integer")
	}
	e := newEvent(EventType(typ), seq, tm, data)
	if !hasData {
		return fail("data is missing")
	}
	if EventType(typ).isLegacy() {
		return fail("event type %q was removed from the format", typ)
	}
	if hasOp {
		op, err := parseSurfaceOp(opJ)
		if err != nil {
			return fail("%w", err)
		}
		e.setOp(op)
	}
	if hasSrc {
		if srcJ.Kind() != messages.KindArray {
			return fail("sourceEventSeqs is not an array")
		}
		var sources []int64
		if text := srcJ.String(); strings.IndexByte(text[1:], '[') >= 0 {
			// Range-encoded: the same expansion (its own tests are in
			// laterformat_test.go).
			var err error
			if sources, err = expandSources(srcJ, seq); err != nil {
				return fail("%w", err)
			}
		} else {
			for v := range srcJ.Elements() {
				n, ok := v.AsInt()
				if !ok || n < 0 {
					return fail("sourceEventSeqs holds %s, not a non-negative safe integer", v)
				}
				sources = append(sources, n)
			}
		}
		e.setSources(sources, true)
	}
	if hasIgn {
		if ignJ.String() != "true" {
			return fail("ignorable must be true when present, not %s", ignJ)
		}
		e.setIgnorable(true)
	}
	p, err := decodePayload(EventType(typ), data)
	if err != nil {
		return fail("%s: %w", typ, err)
	}
	e.setPayload(p)
	return e, nil
}

// referenceDecodeRow is the reference decodeRow.
func referenceDecodeRow(j messages.JSON, kind messages.ChunkType) ([]Event, error) {
	var seq0J, time0J, data messages.JSON
	n := 0
	seq0 := int64(-1)
	fail := func(format string, args ...any) ([]Event, error) {
		return nil, &DecodeError{Seq: seq0, Err: fmt.Errorf("malformed %s row: "+format,
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
	if _, ok := turn.AsInt(); !ok {
		return fail("turn is not a safe integer")
	}
	if _, ok := step.AsInt(); !ok {
		return fail("step is not a safe integer")
	}
	if i, ok := index.AsInt(); !ok || i < 0 {
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

	var events []Event
	seq, t := seq0, time0
	nextDT, stop := iter.Pull(dt.Elements())
	defer stop()
	for piece := range pieces.Elements() {
		if piece.Kind() != messages.KindString {
			return fail("%s holds %s, not a string", piecesKey, piece)
		}
		if len(events) > 0 {
			d, more := nextDT()
			if !more {
				return fail("dt is shorter than %s less one", piecesKey)
			}
			gap, ok := d.AsInt()
			if !ok {
				return fail("dt holds %s, not a safe integer", d)
			}
			seq++
			t += gap // both safe, so no overflow
			if t < -maxSafe || t > maxSafe || seq > maxSafe {
				return fail("member %d leaves the safe-integer range", len(events))
			}
		}
		var c messages.ObjectBuilder
		c.String("type", string(kind)).Raw("index", index)
		if kind == messages.ChunkToolCallDelta {
			c.Raw("id", id)
			if hasName {
				c.Raw("name", name)
			}
			c.Raw("argumentsDelta", piece)
		} else {
			c.Raw("text", piece)
		}
		var d messages.ObjectBuilder
		d.Raw("turn", turn).Raw("step", step).Raw("chunk", c.Build())
		e := newEvent(TypeAssistantChunk, seq, t, d.Build())
		p, err := decodePayload(TypeAssistantChunk, e.data)
		if err != nil {
			return fail("member %d: %w", len(events), err)
		}
		e.setPayload(p)
		events = append(events, e)
	}
	if len(events) == 0 {
		return fail("%s is empty", piecesKey)
	}
	if _, more := nextDT(); more {
		return fail("dt is longer than %s less one", piecesKey)
	}
	return events, nil
}

// referenceParseFile is ParseFile with the reference scan.
func referenceParseFile(data []byte, name string) (*File, error) {
	f := &File{Path: name}
	lines, t, err := f.referenceSplit(data)
	if err == nil {
		err = f.referenceScan(lines, t)
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// referenceScan is the reference scan: a slice per record, appended to
// File.Events.
func (f *File) referenceScan(lines []refLine, t tail) error {
	expected := int64(0)
	var cited, read int64      // the citations' bound, as the scanner keeps it
	frame, frameFirst := -1, 0 // zstd: index into Events of the first event of the current frame
	for i, ln := range lines {
		if ln.frame != frame {
			frame, frameFirst = ln.frame, len(f.Events)
		}
		evs, err := referenceDecodeRecord(ln.text)
		if err != nil {
			// An older shape (the same migration: its own tests are in
			// legacy_test.go).
			if j, perr := messages.ParseJSON(ln.text); perr == nil {
				at := func(seq int64) (Event, bool) {
					if seq < 0 || seq >= int64(len(f.Events)) {
						return Event{}, false
					}
					return f.Events[seq], true
				}
				m, lerr := migrateLegacy(j, f.Header.ID, at)
				switch {
				case errors.Is(lerr, errNotLegacy):
				case lerr != nil:
					err = &DecodeError{Seq: expected, Err: lerr}
				default:
					if e, derr := decodeEventJSON(m); derr != nil {
						err = fmt.Errorf("legacy event does not migrate: %w", derr)
					} else {
						evs, err = []Event{e}, nil
						f.Upgraded++
					}
				}
			}
		}
		var rule error
		switch {
		case err != nil:
			rule = &causeError{msg: "unparsable committed event", err: err}
		case evs[0].seq != expected:
			err = fmt.Errorf("record starts at seq %d, want %d", evs[0].seq, expected)
			rule = fmt.Errorf("seq gap in committed region: record starts at seq %d, want %d", evs[0].seq, expected)
		default:
			read += int64(len(ln.text)) + 1
			for _, e := range evs {
				cited += int64(len(e.sources()))
			}
			if cited > read+maxExpandedSources {
				err = fmt.Errorf("sourceEventSeqs ranges expand past %d seqs more than the %d bytes read", maxExpandedSources, read)
				rule = &causeError{msg: "unparsable committed event", err: err}
			}
		}
		if err != nil {
			if laterTurnEnd(lines[i+1:]) {
				return &CorruptError{Path: f.Path, Offset: ln.cut, Line: ln.no, Seq: expected, Err: rule}
			}
			f.Torn = &TornTail{Offset: ln.cut, Line: ln.no, NextSeq: expected, Err: err}
			if f.Compressed {
				f.Torn.Recovered = slices.Clone(f.Events[frameFirst:])
			}
			return nil
		}
		f.Events = append(f.Events, evs...)
		expected += int64(len(evs))
	}
	if t.exists {
		f.Torn = &TornTail{Offset: t.at, Line: t.no, NextSeq: expected, Err: t.err}
		if f.Compressed && frame == t.frame {
			f.Torn.Recovered = slices.Clone(f.Events[frameFirst:])
		}
	}
	return nil
}

// laterTurnEnd reports whether any of lines records a turn/end.
func laterTurnEnd(lines []refLine) bool {
	for _, ln := range lines {
		if lineHasTurnEnd(ln.text) {
			return true
		}
	}
	return false
}

// refMaxContent bounds what one frame may decode to in the reference.
const refMaxContent = 4 << 20

// errReferenceTooBig is the reference refusing a file it would need too
// much memory for.
var errReferenceTooBig = errors.New("reference: a zstd frame decodes to more than the reference reads")

// refLine is one complete logical line after the header.
type refLine struct {
	text  []byte // without "\n"
	no    int    // logical line number; the header is 1
	cut   int64  // truncation point if the tail starts here
	frame int    // zstd frame index; 0 for plain files
}

// referenceSplit reads the header and cuts the rest of the file into its
// complete lines and torn tail, for referenceScan.
func (f *File) referenceSplit(data []byte) ([]refLine, tail, error) {
	if bytes.HasPrefix(data, zstdMagic) || strings.HasSuffix(f.Path, ".zstd") {
		f.Compressed = true
		return f.referenceParseZstd(data)
	}
	return f.referenceParsePlain(data)
}

func (f *File) referenceParsePlain(data []byte) ([]refLine, tail, error) {
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		return nil, tail{}, &FileError{Path: f.Path, Err: ErrNoHeader}
	}
	if err := f.parseHeader(data[:nl]); err != nil {
		return nil, tail{}, err
	}
	var lines []refLine
	var t tail
	no := 1
	for off := nl + 1; off < len(data); {
		no++
		end := bytes.IndexByte(data[off:], '\n')
		if end < 0 {
			t = tail{at: int64(off), no: no, err: errTornRecord, exists: true}
			break
		}
		lines = append(lines, refLine{text: data[off : off+end], no: no, cut: int64(off)})
		off += end + 1
	}
	return lines, t, nil
}

var refDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxMemory(maxFrameWindow),
		zstd.WithDecoderMaxWindow(maxFrameWindow))
})

// refDecodeFrame decodes one complete frame whole, checking its checksum.
func refDecodeFrame(frame []byte) ([]byte, error) {
	d, err := refDecoder()
	if err != nil {
		return nil, err
	}
	out, err := d.DecodeAll(frame, nil)
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || len(out) > refMaxContent {
		return nil, errReferenceTooBig
	}
	return out, err
}

// refSalvageFrame decodes the longest run of whole blocks of a cut frame
// that decodes, trying fewer blocks until one does.
func refSalvageFrame(raw []byte) ([]byte, error) {
	h, err := parseFrameHeader(raw)
	if err != nil {
		return nil, nil
	}
	var starts, ends []int // of each whole block
	for p, last := h.size, false; !last; {
		n, l, err := nextBlock(raw[p:])
		if err != nil {
			break
		}
		starts, ends = append(starts, p), append(ends, p+n)
		p, last = p+n, l
	}
	window := h.window
	if window < 0 {
		exp := 0
		for exp < 31 && uint64(1)<<(10+exp) < h.contentLen {
			exp++
		}
		window = exp << 3
	}
	head := append(append([]byte{}, zstdMagic...), h.descriptor&0x13, byte(window))
	head = append(head, h.dictID...)
	for k := len(ends); k > 0; k-- {
		frame := append(slices.Clip(head), raw[h.size:ends[k-1]]...)
		frame[len(head)+starts[k-1]-h.size] |= 1 // last block
		out, err := refDecodeFrame(frame)
		if err == errReferenceTooBig {
			return nil, err
		}
		if err == nil {
			return out, nil
		}
	}
	return nil, nil
}

func (f *File) referenceParseZstd(data []byte) ([]refLine, tail, error) {
	frames, errAt, walkErr := walkFrames(data)
	corrupt := func(at int64, no int, seq int64, err error) error {
		return &CorruptError{Path: f.Path, Offset: at, Line: no, Seq: seq, Err: err}
	}
	if len(frames) == 0 || !frames[0].complete {
		if walkErr != nil {
			return nil, tail{}, corrupt(errAt, 1, -1, walkErr)
		}
		return nil, tail{}, &FileError{Path: f.Path, Err: ErrNoHeader}
	}
	h0 := frames[0]
	content, err := refDecodeFrame(data[h0.start:h0.end])
	if err == errReferenceTooBig {
		return nil, tail{}, err
	}
	if err != nil {
		return nil, tail{}, corrupt(h0.start, 1, -1, fmt.Errorf("header zstd frame: %w", err))
	}
	// An empty frame is refused too (slicing content[:-1] would panic;
	// the fuzz target found such a frame).
	if nl := bytes.IndexByte(content, '\n'); len(content) == 0 || nl != len(content)-1 {
		return nil, tail{}, corrupt(h0.start, 1, -1, fmt.Errorf("header zstd frame does not hold exactly one line"))
	}
	if err := f.parseHeader(content[:len(content)-1]); err != nil {
		return nil, tail{}, err
	}

	var lines []refLine
	var t tail
	no := 1
	for i, fr := range frames[1:] {
		idx := i + 1
		raw := data[fr.start:fr.end]
		if !fr.complete {
			if content, err = refSalvageFrame(raw); err != nil {
				return nil, tail{}, err
			}
			content = content[:bytes.LastIndexByte(content, '\n')+1] // the cut line goes with the frame
			t = tail{at: fr.start, err: errTornFrame, frame: idx, exists: true}
		} else if content, err = refDecodeFrame(raw); err == errReferenceTooBig {
			return nil, tail{}, err
		} else if err != nil {
			return nil, tail{}, corrupt(fr.start, no+1, -1, fmt.Errorf("zstd frame at offset %d: %w", fr.start, err))
		} else if len(content) > 0 && content[len(content)-1] != '\n' {
			return nil, tail{}, corrupt(fr.start, no+1, -1, fmt.Errorf("complete zstd frame at offset %d holds a torn JSONL record", fr.start))
		}
		for len(content) > 0 {
			nl := bytes.IndexByte(content, '\n')
			no++
			lines = append(lines, refLine{text: content[:nl], no: no, cut: fr.start, frame: idx})
			content = content[nl+1:]
		}
		t.no = no + 1
	}
	if walkErr != nil {
		return nil, tail{}, corrupt(errAt, no+1, -1, fmt.Errorf("zstd frame at offset %d: %w", errAt, walkErr))
	}
	return lines, t, nil
}
