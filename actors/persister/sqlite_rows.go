package persister

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// This file is the row codec of the SQLite store: how one append batch
// becomes rows of the events table (scalar rows, packed chunk rows, the
// compression rule, the provenance varints) and how one row becomes logical
// events again. The layout is the reference's schema 17, described in
// docs/log-format.md#sqlite-databases and at the top of sqlite.go.

// The packed row tags (the type column of a row whose ignorable is 0).
const (
	sqlTagText      = "text-chunks"
	sqlTagReasoning = "reasoning-chunks"
	sqlTagToolCall  = "tool-call-chunks"
)

const (
	// sqlMinPacked and sqlMaxPacked bound the members of a packed row.
	sqlMinPacked = 3
	sqlMaxPacked = 1024
	// sqlMaxPackedData bounds the uncompressed data of a packed row.
	sqlMaxPackedData = 1 << 20
	// sqlCompressFrom is the data length from which data is compressed
	// (when its zstd frame is shorter).
	sqlCompressFrom = 4096
	// sqlMaxScalarData bounds the decompressed data of a scalar row. The
	// reference sets no bound; dsh refuses anything longer than the
	// longest record it reads from a file, so a hostile BLOB cannot make a
	// load hold more than that of one value.
	sqlMaxScalarData = session.DefaultMaxRecordBytes
	maxSafeInt       = 1<<53 - 1
)

// sqlRow is one row of the events table, as written or read. data is
// TEXT (string) or BLOB ([]byte, a zstd frame); sources is nil for NULL,
// else a BLOB ([]byte) when written (read, any other type is refused); op
// is "" for NULL; ignorable is -1 for NULL.
type sqlRow struct {
	seq, time int64
	typ       string
	data      any
	sources   any
	op        string
	ignorable int64
}

// ---- provenance (source_event_seqs) ----

var (
	errSrcTruncated    = errors.New("truncated varint")
	errSrcNonCanonical = errors.New("non-canonical varint")
	errSrcRange        = errors.New("varint is out of range")
	errSrcSeqRange     = errors.New("decoded seq is out of range")
	errSrcNegative     = errors.New("sourceEventSeqs must contain non-negative safe integers")
)

// appendSources encodes seqs as the reference does: the first value as an
// unsigned LEB128 varint, each later one as the ZigZag varint of its
// difference to the previous one. An empty list encodes to nothing.
func appendSources(dst []byte, seqs []int64) ([]byte, error) {
	prev := int64(0)
	for i, s := range seqs {
		if s < 0 || s > maxSafeInt {
			return dst, errSrcNegative
		}
		var u uint64
		if i == 0 {
			u = uint64(s)
		} else if d := s - prev; d >= 0 {
			u = uint64(d) * 2
		} else {
			u = uint64(-d)*2 - 1
		}
		for u >= 0x80 {
			dst = append(dst, byte(u)|0x80)
			u >>= 7
		}
		dst = append(dst, byte(u))
		prev = s
	}
	return dst, nil
}

// decodeSources decodes a source_event_seqs BLOB (see appendSources). The
// result is non-nil (an empty BLOB is an empty list).
func decodeSources(b []byte) ([]int64, error) {
	out := make([]int64, 0, len(b))
	prev := int64(0)
	for i := 0; i < len(b); {
		var u uint64
		var shift uint
		n := 0
		for {
			if i >= len(b) {
				return nil, errSrcTruncated
			}
			c := b[i]
			i++
			n++
			if n == 9 && c&0x80 != 0 {
				return nil, errSrcRange // a tenth byte would follow
			}
			u |= uint64(c&0x7f) << shift
			shift += 7
			if c&0x80 == 0 {
				if c == 0 && n > 1 {
					return nil, errSrcNonCanonical
				}
				break
			}
		}
		if len(out) == 0 {
			if u > maxSafeInt {
				return nil, errSrcRange
			}
			prev = int64(u)
		} else {
			if u > 2*maxSafeInt {
				return nil, errSrcRange
			}
			var d int64
			if u%2 == 0 {
				d = int64(u / 2)
			} else {
				d = -int64((u + 1) / 2)
			}
			prev += d
			if prev < 0 || prev > maxSafeInt {
				return nil, errSrcSeqRange
			}
		}
		out = append(out, prev)
	}
	return out, nil
}

// ---- compression ----

var (
	sqlEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderCRC(false),
			zstd.WithSingleSegment(true), zstd.WithEncoderConcurrency(1))
		if err != nil {
			panic(err) // only bad options fail
		}
		return e
	})
	// sqlDecoders decode with a bound: DecodeAll refuses a frame whose
	// output would pass it.
	sqlPackedDecoder = sync.OnceValue(func() *zstd.Decoder { return newSQLDecoder(sqlMaxPackedData) })
	sqlScalarDecoder = sync.OnceValue(func() *zstd.Decoder { return newSQLDecoder(sqlMaxScalarData) })
)

func newSQLDecoder(limit int) *zstd.Decoder {
	d, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(uint64(limit)), zstd.WithDecoderConcurrency(0))
	if err != nil {
		panic(err)
	}
	return d
}

// dataValue is the data column for the JSON text b: TEXT below 4 KiB;
// from 4 KiB a zstd frame (level 3, no checksum) as a BLOB when it is
// strictly shorter than b, else TEXT. The result does not alias a []byte
// b (a string is kept as it is: the text of a short event's data is not
// copied).
func dataValue[T string | []byte](b T) any {
	if len(b) >= sqlCompressFrom {
		frame := sqlEncoder().EncodeAll([]byte(b), make([]byte, 0, len(b)/2))
		if len(frame) < len(b) {
			return frame
		}
	}
	return string(b)
}

// dataText returns the JSON text of a data column value: TEXT as is, a
// BLOB decompressed with an output bound of limit bytes (the text of a
// TEXT value must fit it too), checked to be UTF-8.
func dataText(v any, limit int, dec *zstd.Decoder) ([]byte, error) {
	var text []byte
	switch v := v.(type) {
	case string:
		text = []byte(v)
	case []byte:
		out, err := dec.DecodeAll(v, nil)
		if err != nil {
			return nil, fmt.Errorf("data is not a valid zstd frame of at most %d bytes: %w", limit, err)
		}
		if !utf8.Valid(out) {
			return nil, errors.New("decompressed data is not UTF-8")
		}
		text = out
	default:
		return nil, fmt.Errorf("data is %s, not TEXT or BLOB", sqlKind(v))
	}
	if len(text) > limit {
		return nil, fmt.Errorf("data is %d bytes, over the limit of %d", len(text), limit)
	}
	return text, nil
}

func sqlKind(v any) string {
	switch v.(type) {
	case nil:
		return "NULL"
	case int64:
		return "INTEGER"
	case float64:
		return "REAL"
	case string:
		return "TEXT"
	case []byte:
		return "BLOB"
	}
	return fmt.Sprintf("%T", v)
}

// ---- writing ----

// A packed row's members, how they chain into runs and its data are
// session's packed-run writer (session.Packable, PackMember.Continues,
// session.AppendPackedData), which the JSONL rows share; the partition of
// a run into rows below is the SQLite store's own.

// scalarRow is the row of one logical event.
func scalarRow(e session.Event) (sqlRow, error) {
	r := sqlRow{seq: e.Seq(), time: e.Time(), typ: string(e.Type()), ignorable: -1}
	data := e.Data().String()
	if data == "" {
		data = "null"
	}
	r.data = dataValue(data)
	if seqs, has := e.SourceEventSeqs(); has {
		b, err := appendSources(make([]byte, 0, len(seqs)+1), seqs)
		if err != nil {
			return sqlRow{}, fmt.Errorf("event seq %d: %w", e.Seq(), err)
		}
		r.sources = b
	}
	if op := e.SurfaceOp(); op.Kind() != session.OpNone {
		r.op = op.JSON().String()
	}
	if e.Ignorable() {
		r.ignorable = 1
	}
	return r, nil
}

// packRows turns one append batch into its rows (see doc.go): runs of
// packable chunk events inside the batch are partitioned into packed rows
// of 3 to 1024 members whose payload is at most 1 MiB; everything else is
// a scalar row. emit is called once per row, in seq order.
func packRows(events []session.Event, emit func(sqlRow) error) error {
	var run []session.PackMember
	var buf []byte
	flush := func() error {
		for len(run) > 0 {
			if len(run) < sqlMinPacked {
				for _, m := range run {
					if err := emitScalarSeq(events, m.Seq(), emit); err != nil {
						return err
					}
				}
				run = run[:0]
				return nil
			}
			k := min(len(run), sqlMaxPacked)
			if session.PackedDataLen(run[:k]) > sqlMaxPackedData {
				lo, hi := sqlMinPacked, k-1 // largest k in [lo, hi] that fits, or lo-1
				best := 0
				for lo <= hi {
					mid := (lo + hi) / 2
					if session.PackedDataLen(run[:mid]) <= sqlMaxPackedData {
						best, lo = mid, mid+1
					} else {
						hi = mid - 1
					}
				}
				if best == 0 {
					if err := emitScalarSeq(events, run[0].Seq(), emit); err != nil {
						return err
					}
					run = run[1:]
					continue
				}
				k = best
			}
			buf = session.AppendPackedData(buf[:0], run[:k])
			if err := emit(sqlRow{seq: run[0].Seq(), time: run[0].Time(), typ: run[0].Tag(), data: dataValue(buf), ignorable: 0}); err != nil {
				return err
			}
			run = run[k:]
		}
		return nil
	}
	for _, e := range events {
		m, ok := session.Packable(e)
		if ok && len(run) > 0 && run[len(run)-1].Continues(m) {
			run = append(run, m)
			continue
		}
		if err := flush(); err != nil {
			return err
		}
		run = run[:0]
		if ok {
			run = append(run, m)
			continue
		}
		r, err := scalarRow(e)
		if err != nil {
			return err
		}
		if err := emit(r); err != nil {
			return err
		}
	}
	return flush()
}

// emitScalarSeq emits the scalar row of the event of the batch at seq.
func emitScalarSeq(events []session.Event, seq int64, emit func(sqlRow) error) error {
	r, err := scalarRow(events[seq-events[0].Seq()])
	if err != nil {
		return err
	}
	return emit(r)
}

// ---- reading ----

// rowError is a row that does not decode.
type rowError struct {
	typ string
	err error
}

func (e *rowError) Error() string { return "malformed " + e.typ + " storage row: " + e.err.Error() }
func (e *rowError) Unwrap() error { return e.err }

// decodeSQLRow appends the logical events of r to dst. A packed row is
// all or nothing: on error dst is returned as it was.
func decodeSQLRow(dst []session.Event, r sqlRow) ([]session.Event, error) {
	return decodeStoredRow(dst, r, nil)
}

// legacyRows has the reads of a session's rows migrate older shapes
// (docs/log-format.md, "Older shapes"), as the JSONL reader does.
type legacyRows struct {
	id session.SessionID
	// upgraded says a row was an older shape, migrated; missed that a
	// migration looked for an earlier event not decoded before it (a read
	// that starts past it must read from the start).
	upgraded, missed bool
}

// decodeStoredRow is decodeSQLRow that, with lg set, migrates a scalar
// row of an older shape (session.DecodeStoredEvent); an earlier event it
// needs (a replacing tool result's start node) is looked up in dst, the
// events decoded before it.
func decodeStoredRow(dst []session.Event, r sqlRow, lg *legacyRows) ([]session.Event, error) {
	fail := func(format string, args ...any) ([]session.Event, error) {
		return dst, &rowError{typ: r.typ, err: fmt.Errorf(format, args...)}
	}
	switch {
	case r.seq < 0 || r.seq > maxSafeInt:
		return fail("seq %d is not a non-negative safe integer", r.seq)
	case r.typ == "":
		return fail("type is empty")
	case r.time < -maxSafeInt || r.time > maxSafeInt:
		return fail("time %d is not a safe integer", r.time)
	case r.ignorable < -1 || r.ignorable > 1:
		return fail("ignorable %d is not NULL, 0 or 1", r.ignorable)
	}
	if r.ignorable == 0 {
		return decodePacked(dst, r, fail)
	}
	text, err := dataText(r.data, sqlMaxScalarData, sqlScalarDecoder())
	if err != nil {
		return fail("%w", err)
	}
	data, err := messages.ParseJSON(text)
	if err != nil {
		return fail("data: %w", err)
	}
	var line []byte
	line = append(line, `{"type":`...)
	line = messages.AppendQuoted(line, r.typ)
	line = append(line, `,"seq":`...)
	line = strconv.AppendInt(line, r.seq, 10)
	line = append(line, `,"time":`...)
	line = strconv.AppendInt(line, r.time, 10)
	line = append(line, `,"data":`...)
	line = append(line, data.String()...)
	if r.op != "" {
		op, err := messages.ParseJSONString(r.op)
		if err != nil {
			return fail("surface_op: %w", err)
		}
		line = append(line, `,"surfaceOp":`...)
		line = append(line, op.String()...)
	}
	if r.sources != nil {
		blob, ok := r.sources.([]byte)
		if !ok {
			return fail("source_event_seqs is %s, not NULL or BLOB", sqlKind(r.sources))
		}
		seqs, err := decodeSources(blob)
		if err != nil {
			return fail("source_event_seqs: %w", err)
		}
		line = append(line, `,"sourceEventSeqs":[`...)
		for i, s := range seqs {
			if i > 0 {
				line = append(line, ',')
			}
			line = strconv.AppendInt(line, s, 10)
		}
		line = append(line, ']')
	}
	if r.ignorable == 1 {
		line = append(line, `,"ignorable":true`...)
	}
	line = append(line, '}')
	if lg == nil {
		e, err := session.DecodeEvent(line)
		if err != nil {
			return fail("%w", err)
		}
		return append(dst, e), nil
	}
	e, upgraded, err := session.DecodeStoredEvent(line, lg.id, func(seq int64) (session.Event, bool) {
		e, ok := eventAt(dst, seq)
		lg.missed = lg.missed || !ok
		return e, ok
	})
	if err != nil {
		return fail("%w", err)
	}
	lg.upgraded = lg.upgraded || upgraded
	return append(dst, e), nil
}

// eventAt returns the last event of evs at seq.
func eventAt(evs []session.Event, seq int64) (session.Event, bool) {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Seq() == seq {
			return evs[i], true
		}
	}
	return session.Event{}, false
}

// decodePacked expands a packed row (ignorable 0).
func decodePacked(dst []session.Event, r sqlRow, fail func(string, ...any) ([]session.Event, error)) ([]session.Event, error) {
	if r.typ != sqlTagText && r.typ != sqlTagReasoning && r.typ != sqlTagToolCall {
		return fail("packed discriminator requires a chunk tag")
	}
	if r.sources != nil || r.op != "" {
		return fail("packed surface fields must be null")
	}
	text, err := dataText(r.data, sqlMaxPackedData, sqlPackedDecoder())
	if err != nil {
		return fail("%w", err)
	}
	payload, err := messages.ParseJSON(text)
	if err != nil {
		return fail("data: %w", err)
	}
	if payload.Kind() != messages.KindObject {
		return fail("data is not an object")
	}
	pieces := "texts"
	want := 5
	if r.typ == sqlTagToolCall {
		pieces, want = "args", 6
	}
	var members, dt messages.JSON
	n := 0
	for k, v := range payload.Members() {
		n++
		switch {
		case k == "turn" || k == "step" || k == "index":
			if v.Kind() != messages.KindNumber {
				return fail("%s is not a number", k)
			}
		case k == "dt":
			dt = v
		case k == pieces:
			members = v
		case k == "id" && r.typ == sqlTagToolCall:
			if v.Kind() != messages.KindString {
				return fail("id is not a string")
			}
		case k == "name" && r.typ == sqlTagToolCall:
			if v.Kind() != messages.KindString {
				return fail("name is not a string")
			}
			want++
		default:
			return fail("unknown data key %q", k)
		}
	}
	if n != want || members.IsZero() || dt.IsZero() {
		return fail("data lacks a required key")
	}
	if members.Kind() != messages.KindArray || dt.Kind() != messages.KindArray {
		return fail("dt and %s must be arrays", pieces)
	}
	count := 0
	for m := range members.Elements() {
		if m.Kind() != messages.KindString {
			return fail("%s holds %s, not a string", pieces, m)
		}
		count++
	}
	if count < sqlMinPacked || count > sqlMaxPacked {
		return fail("%s holds %d members, not %d to %d", pieces, count, sqlMinPacked, sqlMaxPacked)
	}
	gaps := 0
	t := r.time
	for d := range dt.Elements() {
		g, ok := d.AsInt()
		if !ok {
			return fail("dt holds %s, not a safe integer", d)
		}
		if t += g; t < -maxSafeInt || t > maxSafeInt {
			return fail("a member's time leaves the safe-integer range")
		}
		gaps++
	}
	if gaps != count-1 {
		return fail("dt holds %d gaps for %d members", gaps, count)
	}
	if r.seq+int64(count)-1 > maxSafeInt {
		return fail("a member's seq leaves the safe-integer range")
	}
	var line bytes.Buffer
	line.Grow(len(text) + 64)
	line.WriteString(`{"type":"`)
	line.WriteString(r.typ)
	line.WriteString(`","seq0":`)
	line.WriteString(strconv.FormatInt(r.seq, 10))
	line.WriteString(`,"time0":`)
	line.WriteString(strconv.FormatInt(r.time, 10))
	line.WriteString(`,"data":`)
	line.WriteString(payload.String())
	line.WriteByte('}')
	out, err := session.DecodeRecord(line.Bytes())
	if err != nil {
		return fail("%w", err)
	}
	return append(dst, out...), nil
}
