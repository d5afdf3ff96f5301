package session

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dshgo/dsh/messages"
)

// This file is the event codec: one Event to and from one JSON line of the
// log format (docs/session-log.md#the-event-envelope,
// docs/log-format.md#jsonl-files). It knows the envelope only. The rules that
// need the rest of the log (surface metadata only on surface types,
// contiguous seqs, unknown types without ignorable) belong to Log; the
// storage-only packing of chunk runs belongs to chunkrows.go.

// DecodeError reports a line that is not a well-formed event. Seq is the
// event's seq when the line got far enough to name one, else -1.
type DecodeError struct {
	Seq int64
	Err error
}

func (e *DecodeError) Error() string {
	if e.Seq < 0 {
		return "session: event: " + e.Err.Error()
	}
	return "session: event seq " + strconv.FormatInt(e.Seq, 10) + ": " + e.Err.Error()
}

func (e *DecodeError) Unwrap() error { return e.Err }

// Compile-time shape guard: AppendEvent writes, and decodeEventJSON reads,
// every field listed here. Adding a field to Event breaks this line until
// both are updated.
var _ = Event(struct {
	seq     int64
	time    int64
	data    messages.JSON
	payload payload   // derived from typ and data; not encoded
	ext     *eventExt // name, op range, sources
	typ     typeCode
	flags   eventFlags // op kind, hasSources, ignorable
}{})

// AppendEvent appends e's JSON line, without the trailing newline, to dst
// and returns the extended buffer. Keys come in the order type, seq, time,
// data, then surfaceOp (surface events), sourceEventSeqs (when the event
// carries the field; [] when empty) and ignorable (only when true).
//
// It is the write hot path, so it is written by hand: data is already
// canonical JSON text and is copied as is; no reflection, no intermediate
// values. dst is owned by the caller before and after.
func AppendEvent(dst []byte, e Event) []byte {
	dst = append(dst, `{"type":`...)
	dst = messages.AppendQuoted(dst, string(e.Type()))
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, e.seq, 10)
	dst = append(dst, `,"time":`...)
	dst = strconv.AppendInt(dst, e.time, 10)
	dst = append(dst, `,"data":`...)
	if e.dataForm() == dataVerbatim && e.data.IsZero() {
		dst = append(dst, "null"...)
	} else {
		dst = e.appendData(dst)
	}
	switch e.opKind() {
	case OpAppend:
		dst = append(dst, `,"surfaceOp":"append"`...)
	case OpReplace:
		// The shape of SurfaceOp.JSON, written without building a value.
		dst = append(dst, `,"surfaceOp":{"op":"replace","start":`...)
		dst = strconv.AppendInt(dst, e.ext.start, 10)
		dst = append(dst, `,"end":`...)
		dst = strconv.AppendInt(dst, e.ext.end, 10)
		dst = append(dst, '}')
	}
	if e.hasSources() {
		dst = append(dst, `,"sourceEventSeqs":[`...)
		if x := e.ext; x != nil && x.srcLen > 0 {
			for i := range x.srcLen {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = strconv.AppendInt(dst, x.srcFirst+i, 10)
			}
		}
		for i, s := range e.ext.sourcesOrNil() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, s, 10)
		}
		dst = append(dst, ']')
	}
	if e.Ignorable() {
		dst = append(dst, `,"ignorable":true`...)
	}
	return append(dst, '}')
}

// DecodeEvent reads one event line (surrounding whitespace allowed). The
// envelope must be an object with only the keys type, seq, time, data,
// surfaceOp, sourceEventSeqs and ignorable; type a non-empty string, not a
// type removed from the format; seq a non-negative and time any safe
// integer; data present; surfaceOp "append" or a replace object;
// sourceEventSeqs an array of non-negative safe integers; ignorable, when
// present, exactly true. The data of a core type must decode into its typed
// payload.
//
// DecodeEvent does not check the surface rules, seq contiguity or whether
// the type is known: those are properties of a log, checked by Log. Errors
// are *DecodeError. The caller keeps ownership of line; the Event does not
// alias it.
func DecodeEvent(line []byte) (Event, error) {
	j, err := messages.ParseJSON(line)
	if err != nil {
		return Event{}, &DecodeError{Seq: -1, Err: err}
	}
	return decodeEventJSON(j)
}

// decodeEventJSON is DecodeEvent on an already parsed line.
func decodeEventJSON(j messages.JSON) (Event, error) {
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
	t, ok := timeJ.AsInt()
	if !ok {
		return fail("time is not a safe integer")
	}
	if !hasData {
		return fail("data is missing")
	}
	if typ == string(TypeAssistantChunk) && !hasOp && !hasSrc && !hasIgn {
		// A model stream's chunk: the most frequent line after the packed
		// rows, built as the log keeps it (compact.go) where its data
		// allows.
		if e, ok := decodeChunkText(seq, t, data); ok {
			return e, nil
		}
	}
	e := newEvent(EventType(typ), seq, t, data)
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
		text := srcJ.String()
		if strings.IndexByte(text[1:], '[') >= 0 {
			// A later writer's range-encoded list (docs/log-format.md).
			src, err := expandSources(srcJ, seq)
			if err != nil {
				return fail("%w", err)
			}
			sources = src
		} else {
			if text != "[]" {
				// An assistant message cites its whole stream: size the
				// list once (compact JSON, so one comma between elements).
				sources = make([]int64, 0, strings.Count(text, ",")+1)
			}
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

// maxExpandedSources bounds what the range-encoded sourceEventSeqs of one
// event may expand to: more cited seqs than this is refused, so that a
// short line cannot make the reader allocate without bound (a plain list
// of that many seqs would take over 2 MiB to write).
const maxExpandedSources = 1 << 20

// expandSources reads a sourceEventSeqs list whose entries are seqs or
// inclusive [start, end] ranges (docs/log-format.md): each range has
// start < end and stands for every seq in it; neither neighbour of a
// range may fall inside it; every cited seq is earlier than seq, the
// event's own. The expansion is at most maxExpandedSources seqs.
func expandSources(list messages.JSON, seq int64) ([]int64, error) {
	type entry struct{ lo, hi int64 }
	var entries []entry
	total := int64(0)
	for v := range list.Elements() {
		if v.Kind() != messages.KindArray {
			n, ok := v.AsInt()
			if !ok || n < 0 {
				return nil, fmt.Errorf("sourceEventSeqs holds %s, not a non-negative safe integer or a [start, end] range", v)
			}
			entries = append(entries, entry{n, n})
			total++
			continue
		}
		var ends []int64
		for b := range v.Elements() {
			n, ok := b.AsInt()
			if !ok || n < 0 || len(ends) == 2 {
				return nil, fmt.Errorf("sourceEventSeqs range %s is not a pair of non-negative safe integers", v)
			}
			ends = append(ends, n)
		}
		switch {
		case len(ends) != 2:
			return nil, fmt.Errorf("sourceEventSeqs range %s is not a pair of non-negative safe integers", v)
		case ends[0] >= ends[1]:
			return nil, fmt.Errorf("sourceEventSeqs range %s is not increasing", v)
		case ends[1] >= seq:
			return nil, fmt.Errorf("sourceEventSeqs range %s cites seq %d, not an earlier one", v, ends[1])
		}
		entries = append(entries, entry{ends[0], ends[1]})
		if total += ends[1] - ends[0] + 1; total > maxExpandedSources {
			return nil, fmt.Errorf("sourceEventSeqs ranges expand to more than %d seqs", maxExpandedSources)
		}
	}
	for i := 1; i < len(entries); i++ {
		a, b := entries[i-1], entries[i]
		if (a.lo != a.hi || b.lo != b.hi) && a.lo <= b.hi && b.lo <= a.hi {
			return nil, fmt.Errorf("sourceEventSeqs entries %d and %d overlap", i-1, i)
		}
	}
	out := make([]int64, 0, total)
	for _, r := range entries {
		for n := r.lo; n <= r.hi; n++ {
			out = append(out, n)
		}
	}
	return out, nil
}
