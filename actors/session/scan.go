package session

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/dshgo/dsh/messages"
)

// This file reads a log file in one streaming pass: lines come off a
// bufio.Reader (over the file for plain JSONL, over a zstd stream decoder
// per frame for .jsonl.zstd) and each is decoded into events as it
// arrives, so what the reader holds is the events it has decoded plus one
// line. Nothing is kept per line: a file of a few kilobytes that
// decompresses to a hundred MiB of newlines costs the decoder's window and
// one buffer, not a slice entry per empty line.
//
// Rejected: splitting the whole file into a slice of lines first and
// scanning them afterwards. It is simpler, but it lets a 3.5 KB file take
// 18 GB: each empty line costs a slice entry, and each frame is decoded
// whole into memory.

// DefaultMaxRecordBytes is the default bound on one line of a log file
// (the header, or one storage record), without its newline: 16 MiB. A
// packed chunk row is at most maxRowBytes (1 MiB) and Log.Append refuses
// an event whose record would be longer than this, so dsh never writes a
// line it refuses to read. A longer line is refused as corruption (a
// *CorruptError wrapping a *RecordTooLargeError) rather than buffered, so
// a hostile file cannot make a reader hold more than this much of one
// line.
const DefaultMaxRecordBytes = 16 << 20

// maxFrameWindow bounds the history window a zstd frame may ask of the
// decoder, which allocates it up front: without a bound a frame header of
// a few bytes could ask for gigabytes. Encoders at their standard levels
// use at most 8 MiB (this package's encoder and the reference's default
// level use less), so 16 MiB refuses no real frame. A single-segment
// frame's window is its content size, so the bound also refuses such a
// frame of more than 16 MiB.
const maxFrameWindow = 16 << 20

// lineBufSize is the read buffer of a line reader: lines up to this long
// are handed out without being copied.
const lineBufSize = 64 << 10

// RecordTooLargeError reports a line longer than the reader's limit
// (ReadOptions.MaxRecordBytes). It comes wrapped in a *CorruptError,
// which names the file, the line and the seq.
type RecordTooLargeError struct {
	// Offset is the byte offset in the file of the line (plain) or of the
	// zstd frame holding it.
	Offset int64
	// Limit is the limit in force, in bytes.
	Limit int
}

func (e *RecordTooLargeError) Error() string {
	limit := fmt.Sprintf("%d bytes", e.Limit)
	if e.Limit%(1<<20) == 0 {
		limit = fmt.Sprintf("%d MiB", e.Limit>>20)
	}
	return fmt.Sprintf("record too long: the line at offset %d is longer than the limit of %s on one record", e.Offset, limit)
}

// ReadOptions says how a log file is read. The zero value reads with the
// defaults.
type ReadOptions struct {
	// MaxRecordBytes bounds one line (the header or one record) without
	// its newline; a longer complete line is corruption. Default 0:
	// DefaultMaxRecordBytes.
	MaxRecordBytes int
}

// Validate checks that MaxRecordBytes is not negative.
func (o ReadOptions) Validate() error {
	if o.MaxRecordBytes < 0 {
		return fmt.Errorf("session: read options: MaxRecordBytes %d is negative", o.MaxRecordBytes)
	}
	return nil
}

func (o ReadOptions) maxRecord() int {
	if o.MaxRecordBytes == 0 {
		return DefaultMaxRecordBytes
	}
	return o.MaxRecordBytes
}

// ReadFile reads and scans the log file at path with the default
// ReadOptions. The framing is detected from the content (zstd magic 28 B5
// 2F FD), not trusted from the suffix; a ".zstd" name without the magic
// is corruption. Errors: a *FileError wrapping ErrNoHeader or a header
// error (ErrNotHeader, or a *FormatVersionError for errors.As), or a
// *CorruptError (for a line over the limit, wrapping a
// *RecordTooLargeError).
//
// Memory: a plain file is streamed, never read whole; a zstd file's
// compressed bytes are read whole and each frame is decoded as a stream.
// Beyond the events it returns, reading holds one line (at most the
// limit), one read buffer and one decoder window (at most 16 MiB), however
// many empty or bad lines the file holds.
func ReadFile(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("session: read log: %w", err)
	}
	defer fh.Close()
	return Read(fh, path, ReadOptions{})
}

// Read is ReadFile on a reader: it reads r to its end (or to the first
// error) and scans what it read; name is used for detection by suffix and
// in errors. The caller keeps ownership of r.
func Read(r io.Reader, name string, opts ReadOptions) (*File, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(r, lineBufSize)
	magic, err := br.Peek(len(zstdMagic))
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("session: read log: %w", err)
	}
	f := &File{Path: name}
	if bytes.Equal(magic, zstdMagic) || strings.HasSuffix(name, ".zstd") {
		data, err := io.ReadAll(br)
		if err != nil {
			return nil, fmt.Errorf("session: read log: %w", err)
		}
		return f.readZstd(data, opts.maxRecord())
	}
	return f.readPlain(br, opts.maxRecord())
}

// ParseFile is ReadFile on the bytes of a file; name is used for
// detection by suffix and in errors. The caller keeps ownership of data;
// the result does not alias it.
func ParseFile(data []byte, name string) (*File, error) {
	f := &File{Path: name}
	if bytes.HasPrefix(data, zstdMagic) || strings.HasSuffix(name, ".zstd") {
		return f.readZstd(data, DefaultMaxRecordBytes)
	}
	return f.readPlain(bytes.NewReader(data), DefaultMaxRecordBytes)
}

// lineStatus says what lineReader.next found.
type lineStatus int

const (
	lineComplete lineStatus = iota // a line ended by a newline
	lineTooLong                    // a line ended by a newline, longer than the limit; its text is dropped
	lineFragment                   // bytes after the last newline, at the end of the input; the text is dropped
	lineEnd                        // nothing more
)

// lineReader cuts a stream into lines, holding at most one line (up to
// max bytes) beyond its read buffer.
type lineReader struct {
	br   *bufio.Reader
	max  int
	long []byte // a line longer than the read buffer, assembled; reused
	off  int64  // bytes consumed
}

func newLineReader(r io.Reader, max int) *lineReader {
	br, ok := r.(*bufio.Reader)
	if !ok || br.Size() < lineBufSize {
		br = bufio.NewReaderSize(r, lineBufSize)
	}
	return &lineReader{br: br, max: max}
}

// reset makes r read from src, keeping its buffers.
func (r *lineReader) reset(src io.Reader) {
	r.br.Reset(src)
	r.off = 0
}

// next returns the next line without its newline and the offset of its
// first byte. The text is valid until the next call. err is an error of
// the underlying reader (a zstd decoding error, an I/O error), reported
// once the bytes before it have been handed out as lines; the bytes
// after the last newline before the error are dropped.
func (r *lineReader) next() (text []byte, start int64, st lineStatus, err error) {
	start = r.off
	r.long = r.long[:0]
	over := false
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.off += int64(len(chunk))
		switch {
		case err == nil && !over && len(r.long) == 0:
			text = chunk[:len(chunk)-1]
			if len(text) > r.max {
				return nil, start, lineTooLong, nil
			}
			return text, start, lineComplete, nil
		case err == nil || err == bufio.ErrBufferFull:
			if !over && len(r.long)+len(chunk) <= r.max+1 {
				r.long = r.grow(len(chunk))
				r.long = append(r.long, chunk...)
			} else {
				// Past the limit: the line is refused whatever follows,
				// so its bytes are skipped rather than kept.
				over, r.long = true, r.long[:0]
			}
			if err == nil {
				if over {
					return nil, start, lineTooLong, nil
				}
				return r.long[:len(r.long)-1], start, lineComplete, nil
			}
		case err == io.EOF:
			if r.off == start {
				return nil, start, lineEnd, nil
			}
			return nil, start, lineFragment, nil
		default:
			return nil, start, lineEnd, err
		}
	}
}

// grow returns r.long with room for n more bytes. It doubles the buffer
// (never past the limit and its newline) rather than leave it to append,
// which grows a large slice by a quarter: a line of the limit's length
// would cost five times the limit in allocations, not two.
func (r *lineReader) grow(n int) []byte {
	if len(r.long)+n <= cap(r.long) {
		return r.long
	}
	c := min(max(2*cap(r.long), len(r.long)+n, lineBufSize), r.max+1)
	return append(make([]byte, 0, c), r.long...)
}

// skipNewlines consumes a run of newlines (empty lines) and returns how
// many there were, without handing each out: after a damaged line the
// rest of a file is only searched for a turn/end, and a run of millions
// of empty lines must cost no more than reading it. The run is compared
// against a block of newlines (bytes.Equal, the library's vectorised
// compare) rather than a byte at a time.
func (r *lineReader) skipNewlines() int {
	n := 0
	for {
		buf, _ := r.br.Peek(r.br.Buffered())
		if len(buf) == 0 {
			if _, err := r.br.Peek(1); err != nil {
				return n
			}
			continue
		}
		k := 0
		for k+len(newlines) <= len(buf) && bytes.Equal(buf[k:k+len(newlines)], newlines) {
			k += len(newlines)
		}
		for k < len(buf) && buf[k] == '\n' {
			k++
		}
		_, _ = r.br.Discard(k)
		r.off += int64(k)
		n += k
		if k < len(buf) {
			return n
		}
	}
}

// newlines is a block of empty lines for skipNewlines to compare with.
var newlines = bytes.Repeat([]byte{'\n'}, 256)

// scanner applies the record rules of a log file (doc.go: contiguous
// seqs, torn tails, corruption) to the lines after the header, one at a
// time, and builds Events.
type scanner struct {
	f   *File
	max int
	// The decoded events, in chunks: File.Events is one allocation of
	// exactly its length. Growing one slice by append copied a log's
	// events about five times over (a large slice grows by a quarter).
	// When the first chunk was sized by a counting pass (zstd files) it
	// is File.Events; otherwise the chunks are copied once, at the end.
	chunks [][]Event
	cur    []Event
	sized  bool  // cur was made by the counting pass
	n      int64 // events decoded so far: the seq the next record must start at
	frame  int   // zstd frame of the last good line
	first  int64 // index of the first event of that frame
	// bad is the first line that failed (a record that does not decode, a
	// seq gap); the lines after it are only searched for a turn/end.
	bad       *badLine
	committed bool // a turn/end follows bad: it is corruption, not a torn tail
	// cited counts the sourceEventSeqs of the events decoded so far and
	// read the bytes of their lines: range-encoded citations may not
	// expand past one seq per byte read plus maxExpandedSources
	// (docs/log-format.md), so memory stays in proportion to the file.
	cited, read int64
}

type badLine struct {
	cut   int64
	no    int
	seq   int64
	err   error // the decode error or the gap
	rule  error // the same, as the corruption it is when committed
	first int64 // index of the first event of its frame
}

const (
	minChunk = 256
	maxChunk = 8192
)

// line takes one complete line after the header: its text, its logical
// line number, its truncation point and its zstd frame (0 for plain).
func (s *scanner) line(text []byte, no int, cut int64, frame int) {
	if s.bad != nil {
		if !s.committed && lineHasTurnEnd(text) {
			s.committed = true
		}
		return
	}
	if frame != s.frame {
		s.frame, s.first = frame, s.n
	}
	if need := recordEvents(text); cap(s.cur)-len(s.cur) < need {
		if len(s.cur) > 0 {
			s.chunks = append(s.chunks, s.cur)
		}
		s.cur = make([]Event, 0, max(need, min(2*cap(s.cur), maxChunk), minChunk))
	}
	n := len(s.cur)
	evs, err := appendRecord(s.cur, text)
	if err != nil {
		// An older shape the reference upgrades on load, or the record's
		// own error (docs/log-format.md, "Older shapes").
		if e, ok, lerr := s.legacy(text); ok {
			evs, err = append(s.cur, e), nil
			s.f.Upgraded++
		} else if lerr != nil {
			err = lerr
		}
	}
	var rule error
	switch {
	case err != nil:
		rule = &causeError{msg: "unparsable committed event", err: err}
	case evs[n].seq != s.n:
		err = fmt.Errorf("record starts at seq %d, want %d", evs[n].seq, s.n)
		rule = fmt.Errorf("seq gap in committed region: record starts at seq %d, want %d", evs[n].seq, s.n)
		clear(evs[n:])
	default:
		s.read += int64(len(text)) + 1
		for i := n; i < len(evs); i++ {
			s.cited += int64(evs[i].numSources())
		}
		if s.cited > s.read+maxExpandedSources {
			err = fmt.Errorf("sourceEventSeqs ranges expand past %d seqs more than the %d bytes read", maxExpandedSources, s.read)
			rule = &causeError{msg: "unparsable committed event", err: err}
			clear(evs[n:])
		}
	}
	if err != nil {
		s.bad = &badLine{cut: cut, no: no, seq: s.n, err: err, rule: rule, first: s.first}
		return
	}
	s.cur = evs
	s.n += int64(len(evs) - n)
}

// legacy migrates a record that did not decode: ok with the current
// event when it is an older shape that migrates; a non-nil error when it
// is an older shape that does not; neither when it is not an older shape.
func (s *scanner) legacy(text []byte) (Event, bool, error) {
	j, err := messages.ParseJSON(text)
	if err != nil {
		return Event{}, false, nil
	}
	m, err := migrateLegacy(j, s.f.Header.ID, s.at)
	if errors.Is(err, errNotLegacy) {
		return Event{}, false, nil
	}
	if err != nil {
		return Event{}, false, &DecodeError{Seq: s.n, Err: err}
	}
	e, err := decodeEventJSON(m)
	if err != nil {
		return Event{}, false, fmt.Errorf("legacy event does not migrate: %w", err)
	}
	return e, true, nil
}

// at returns the event read so far at seq.
func (s *scanner) at(seq int64) (Event, bool) {
	if seq < 0 || seq >= s.n {
		return Event{}, false
	}
	for _, c := range s.chunks {
		if seq < int64(len(c)) {
			return c[seq], true
		}
		seq -= int64(len(c))
	}
	return s.cur[seq], true
}

// tooLong is the corruption of a line over the limit.
func (s *scanner) tooLong(no int, at int64) error {
	seq := s.n
	if s.bad != nil {
		seq = -1
	}
	return &CorruptError{Path: s.f.Path, Offset: at, Line: no, Seq: seq,
		Err: &RecordTooLargeError{Offset: at, Limit: s.max}}
}

// finish sets Events and Torn once every line is in; t is the torn end
// the physical layer found, if any.
func (s *scanner) finish(t tail) error {
	if b := s.bad; b != nil && s.committed {
		return &CorruptError{Path: s.f.Path, Offset: b.cut, Line: b.no, Seq: b.seq, Err: b.rule}
	}
	switch {
	case s.n > 0 && len(s.chunks) == 0 && s.sized:
		// Sized up front (a zstd file's counting pass): no copy.
		s.f.Events = s.cur
	case s.n > 0:
		s.f.Events = make([]Event, 0, s.n)
		for _, c := range s.chunks {
			s.f.Events = append(s.f.Events, c...)
		}
		s.f.Events = append(s.f.Events, s.cur...)
	}
	recovered := func(first int64) []Event {
		if s.f.Events == nil {
			return nil
		}
		return append(make([]Event, 0, int64(len(s.f.Events))-first), s.f.Events[first:]...)
	}
	if b := s.bad; b != nil {
		s.f.Torn = &TornTail{Offset: b.cut, Line: b.no, NextSeq: b.seq, Err: b.err}
		if s.f.Compressed {
			s.f.Torn.Recovered = recovered(b.first)
		}
		return nil
	}
	if t.exists {
		s.f.Torn = &TornTail{Offset: t.at, Line: t.no, NextSeq: s.n, Err: t.err}
		if s.f.Compressed && s.frame == t.frame {
			s.f.Torn.Recovered = recovered(s.first)
		}
	}
	return nil
}

// tail is the torn end of the file found by the physical layer, if any.
type tail struct {
	at     int64 // truncation point
	no     int   // logical line number of the fragment
	err    error
	frame  int // zstd: index of the torn frame
	exists bool
}

var (
	errTornRecord = errors.New("torn final record (no newline)")
	errTornFrame  = errors.New("torn final zstd frame")
)

func (f *File) readPlain(r io.Reader, max int) (*File, error) {
	lr := newLineReader(r, max)
	text, _, st, err := lr.next()
	switch {
	case err != nil:
		return nil, fmt.Errorf("session: read log: %w", err)
	case st == lineTooLong:
		return nil, &CorruptError{Path: f.Path, Line: 1, Seq: -1, Err: &RecordTooLargeError{Limit: max}}
	case st != lineComplete:
		return nil, &FileError{Path: f.Path, Err: ErrNoHeader}
	}
	if err := f.parseHeader(text); err != nil {
		return nil, err
	}
	s := &scanner{f: f, max: max}
	var t tail
	for no := 2; ; no++ {
		if s.bad != nil {
			no += lr.skipNewlines()
		}
		text, start, st, err := lr.next()
		if err != nil {
			return nil, fmt.Errorf("session: read log: %w", err)
		}
		if st == lineEnd {
			break
		}
		if st == lineFragment {
			t = tail{at: start, no: no, err: errTornRecord, exists: true}
			break
		}
		if st == lineTooLong {
			return nil, s.tooLong(no, start)
		}
		s.line(text, no, start, 0)
	}
	if err := s.finish(t); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *File) parseHeader(text []byte) error {
	h, err := parseHeaderLine(text)
	if err != nil {
		return &FileError{Path: f.Path, Err: err}
	}
	f.Header = h
	return nil
}

// zstd decoding.

// decoders pools stream decoders: one serves one frame at a time, and a
// decoder keeps its window buffer between frames. Concurrency 1 decodes
// synchronously, in the caller's goroutine.
var decoders = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(1),
		// The window of a frame, and the content size of a single-segment
		// frame (which is its window).
		zstd.WithDecoderMaxWindow(maxFrameWindow),
		zstd.WithDecoderMaxMemory(maxFrameWindow),
		// Never decode a small input whole into memory: a few bytes can
		// hold gigabytes of newlines.
		zstd.WithDecodeBuffersBelow(0))
	if err != nil {
		// The options are constant and valid; failing here is a bug.
		panic(fmt.Sprintf("session: zstd decoder: %v", err))
	}
	return d
}}

// frameReader streams the content of one zstd frame held in memory.
type frameReader struct {
	d   *zstd.Decoder
	src bytes.Reader
}

func newFrameReader() *frameReader { return &frameReader{d: decoders.Get().(*zstd.Decoder)} }

// reset starts decoding frame, which must hold exactly one frame.
func (r *frameReader) reset(frame []byte) error {
	// bytes.Reader, unlike bytes.Buffer, has no Bytes method, so the
	// decoder streams it rather than decoding it whole.
	r.src.Reset(frame)
	return r.d.Reset(&r.src)
}

func (r *frameReader) Read(p []byte) (int, error) { return r.d.Read(p) }

// release returns the decoder to the pool.
func (r *frameReader) release() {
	_ = r.d.Reset(nil)
	decoders.Put(r.d)
	r.d = nil
}

func (f *File) readZstd(data []byte, max int) (*File, error) {
	f.Compressed = true
	frames, errAt, walkErr := walkFrames(data)
	corrupt := func(at int64, no int, seq int64, err error) error {
		return &CorruptError{Path: f.Path, Offset: at, Line: no, Seq: seq, Err: err}
	}
	if len(frames) == 0 || !frames[0].complete {
		if walkErr != nil {
			return nil, corrupt(errAt, 1, -1, walkErr)
		}
		return nil, &FileError{Path: f.Path, Err: ErrNoHeader}
	}
	fr := newFrameReader()
	defer fr.release()
	lr := newLineReader(fr, max)

	// Frame 0 holds exactly the header line. Being strict here keeps every
	// event out of frame 0, so a torn-tail truncation never reaches the
	// header.
	h, err := readHeaderFrame(fr, lr, data[frames[0].start:frames[0].end])
	if err != nil {
		return nil, corrupt(frames[0].start, 1, -1, err)
	}
	if err := f.parseHeader(h); err != nil {
		return nil, err
	}

	s := &scanner{f: f, max: max}
	if n := countEvents(fr, lr, data, frames); n > 0 {
		s.cur, s.sized = make([]Event, 0, n), true
	}
	var t tail
	no := 1
	for i, span := range frames[1:] {
		idx := i + 1
		raw := data[span.start:span.end]
		before := no
		if !span.complete {
			t = tail{at: span.start, err: errTornFrame, frame: idx, exists: true}
			if raw = salvageFrame(raw); raw == nil {
				t.no = no + 1
				continue
			}
		}
		if err = fr.reset(raw); err == nil {
			lr.reset(fr)
			for {
				if s.bad != nil {
					no += lr.skipNewlines()
				}
				var text []byte
				var st lineStatus
				text, _, st, err = lr.next()
				if err != nil || st == lineEnd {
					break
				}
				if st == lineFragment {
					if span.complete {
						return nil, corrupt(span.start, before+1, -1, fmt.Errorf("complete zstd frame at offset %d holds a torn JSONL record", span.start))
					}
					break // the cut line goes with the frame
				}
				no++
				if st == lineTooLong {
					return nil, s.tooLong(no, span.start)
				}
				s.line(text, no, span.start, idx)
			}
		}
		if err != nil && span.complete {
			return nil, corrupt(span.start, before+1, -1, fmt.Errorf("zstd frame at offset %d: %w", span.start, err))
		}
		t.no = no + 1
	}
	if walkErr != nil {
		// A structural error is corruption wherever it is: a crash cuts a
		// frame short but does not write a bad header after good frames.
		return nil, corrupt(errAt, no+1, -1, fmt.Errorf("zstd frame at offset %d: %w", errAt, walkErr))
	}
	if err := s.finish(t); err != nil {
		return nil, err
	}
	return f, nil
}

// countEvents is a first pass over the frames after the header that
// estimates the events they hold (recordEvents of each line, exact for
// the files of dsh and of the reference), so that the scan decodes them
// into one slice of the right size: decompressing twice costs less than
// the copy of every event that chunks need. The estimate is capped at
// one event per compressed byte, since it sizes an allocation before
// any line is known to parse: a hostile file cannot make it allocate
// more than a multiple of its own size. The pass stops at the first
// error; the scan reports it.
func countEvents(fr *frameReader, lr *lineReader, data []byte, frames []frameSpan) int {
	n := 0
	for _, span := range frames[1:] {
		raw := data[span.start:span.end]
		if !span.complete {
			if raw = salvageFrame(raw); raw == nil {
				break
			}
		}
		if fr.reset(raw) != nil {
			break
		}
		lr.reset(fr)
		for {
			text, _, st, err := lr.next()
			if err != nil || st != lineComplete {
				break
			}
			if n += recordEvents(text); n >= len(data) {
				return len(data)
			}
		}
	}
	return n
}

// errHeaderFrame is a first frame that holds more or less than one line.
var errHeaderFrame = errors.New("header zstd frame does not hold exactly one line")

// readHeaderFrame decodes the first frame of a zstd file, which must hold
// exactly one line: the header. A decoding error anywhere in the frame
// wins over its shape; the frame is read to its end either way, without
// keeping what follows the first line. The returned text is valid until
// lr is used again; when the line is over the limit the error is a
// *RecordTooLargeError.
func readHeaderFrame(fr *frameReader, lr *lineReader, frame []byte) ([]byte, error) {
	if err := fr.reset(frame); err != nil {
		return nil, fmt.Errorf("header zstd frame: %w", err)
	}
	lr.reset(fr)
	text, _, st, err := lr.next()
	if err != nil {
		return nil, fmt.Errorf("header zstd frame: %w", err)
	}
	h := bytes.Clone(text)
	n, err := io.Copy(io.Discard, lr.br)
	switch {
	case err != nil:
		return nil, fmt.Errorf("header zstd frame: %w", err)
	case st == lineTooLong:
		return nil, &RecordTooLargeError{Limit: lr.max}
	case st != lineComplete || n > 0:
		return nil, errHeaderFrame
	}
	return h, nil
}

// salvageFrame returns what a torn final frame can be decoded as: its
// whole blocks before the cut, as a complete frame of their own. The
// library's decoder reports a cut frame as an error and checks a frame's
// content size and checksum against the whole, so the salvage rewrites
// the header: the same header without checksum or content size (both
// describe the lost whole), a window descriptor in place of the
// single-segment flag, and the last whole block marked last. Streamed,
// that frame hands out every block that decodes and stops at the first
// that does not (the cut can leave a damaged block that looks whole), so
// the salvage is the longest run of whole blocks that decodes. The result
// is a new slice, nil when nothing can be salvaged (the header does not
// parse, or no block is whole); raw is only read.
func salvageFrame(raw []byte) []byte {
	h, err := parseFrameHeader(raw)
	if err != nil {
		return nil
	}
	var lastStart, end int // of the last whole block
	for p, last := h.size, false; !last; {
		n, l, err := nextBlock(raw[p:])
		if err != nil {
			break
		}
		lastStart, end = p, p+n
		p, last = p+n, l
	}
	if end == 0 {
		return nil
	}
	window := h.window
	if window < 0 {
		// A single-segment frame's window is its content size: use the
		// smallest power of two (at least 1 KiB) that holds it.
		exp := 0
		for exp < 31 && uint64(1)<<(10+exp) < h.contentLen {
			exp++
		}
		window = exp << 3
	}
	head := append(append([]byte{}, zstdMagic...), h.descriptor&0x13, byte(window)) // keep the dictionary flag
	head = append(head, h.dictID...)
	frame := append(head, raw[h.size:end]...)
	frame[len(head)+lastStart-h.size] |= 1 // last block
	return frame
}
