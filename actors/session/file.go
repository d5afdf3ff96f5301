package session

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/dshgo/dsh/messages"
)

// This file holds the types of a log file read whole and writes whole
// files (the format is in doc.go; scan.go reads them): the header line,
// then one storage record per line (an event, or a packed chunk row), as
// plain JSONL or as a concatenation of independent checksummed zstd frames.
//
// Layout of a .jsonl.zstd file:
//
//	+---------------------------+---------------------+-----+---------------------+
//	| frame 0: the header line  | frame 1: batch 1    | ... | frame n: batch n    |
//	+---------------------------+---------------------+-----+---------------------+
//	frame = magic 28 B5 2F FD | descriptor | [window] [dict id] [content size]
//	        | block* (3-byte header: last bit, type, size; then the block body)
//	        | [xxhash64 checksum, low 4 bytes]
//	the decoded content of every complete frame is whole lines ("...\n")
//
// Reading tolerates exactly what a crash during an append can leave: a
// final record without its newline (plain), a final frame cut short (zstd),
// or a damaged tail after the last committed turn/end. Damage followed by a
// turn/end is in the committed region and is corruption, which a reader
// must report rather than repair: truncating there would drop turns the
// user saw complete.

// ErrNoHeader reports a file without a complete header line: empty, or
// half-written before its first line (or first frame) was complete. A
// store listing sessions skips such files.
var ErrNoHeader = errors.New("session: log has no complete header line")

// FileError is an error about the log file at Path that is not damage in
// its records: the file has no complete header line (Err is ErrNoHeader),
// or its header line is refused (Err wraps ErrNotHeader, a
// *FormatVersionError or a header rule). Its text names the package and
// the path once: "session: PATH: cause".
type FileError struct {
	Path string
	Err  error
}

func (e *FileError) Error() string { return "session: " + e.Path + ": " + causeText(e.Err) }

func (e *FileError) Unwrap() error { return e.Err }

// causeText is err's text without what an enclosing session error already
// says: the "session: " prefix, and the seq of a *DecodeError or an
// *EventError (the enclosing error names the line and the seq).
func causeText(err error) string {
	switch e := err.(type) {
	case *DecodeError:
		return e.Err.Error()
	case *EventError:
		return fmt.Sprintf("%s: %v", e.Type, e.Err)
	}
	return strings.TrimPrefix(err.Error(), "session: ")
}

// causeError is fmt.Errorf("%s: %w", msg, err) with err's text given by
// causeText: a rule wrapping a decode error inside a *CorruptError.
type causeError struct {
	msg string
	err error
}

func (e *causeError) Error() string { return e.msg + ": " + causeText(e.err) }

func (e *causeError) Unwrap() error { return e.err }

// CorruptError reports damage in the committed region of a log file: a
// record that does not parse, a seq gap, a complete zstd frame that does not
// decode or holds a partial line, followed by a turn/end (or a frame that is
// structurally broken anywhere). Offset is the byte offset in the file of
// the damaged line (plain) or of the frame holding it (zstd); Line is the
// logical line number (the header is line 1); Seq the seq the damaged
// record should have had (-1 when not known).
type CorruptError struct {
	Path   string
	Offset int64
	Line   int
	Seq    int64
	Err    error
}

func (e *CorruptError) Error() string {
	switch {
	case e.Line > 0 && e.Seq >= 0:
		return fmt.Sprintf("session: %s: line %d (seq %d): %s", e.Path, e.Line, e.Seq, causeText(e.Err))
	case e.Line > 0:
		return fmt.Sprintf("session: %s: line %d: %s", e.Path, e.Line, causeText(e.Err))
	case e.Offset < 0 && e.Seq >= 0:
		return fmt.Sprintf("session: %s: seq %d: %s", e.Path, e.Seq, causeText(e.Err))
	}
	return fmt.Sprintf("session: %s: offset %d: %s", e.Path, e.Offset, causeText(e.Err))
}

func (e *CorruptError) Unwrap() error { return e.Err }

// TornTail describes the tolerated damage at the end of a log file: what a
// crash in the middle of an append leaves behind.
type TornTail struct {
	// Offset is where the physical tail starts, the length to truncate the
	// file to before appending again: for plain files the end of the last
	// good line (committedBytes); for zstd files the start of the frame
	// holding the first dropped byte (tornStart).
	Offset int64
	// Line is the logical line number of the first dropped line.
	Line int
	// NextSeq is the seq the first dropped record should have had, which is
	// also len(File.Events).
	NextSeq int64
	// Err says why the tail was dropped (a torn final record or frame, a
	// record that does not decode, a seq gap).
	Err error
	// Recovered (zstd only) holds the good events that sit in the frame at
	// Offset, before the damage. They are the last events of File.Events:
	// truncating to Offset removes them from the file, so repair re-appends
	// them (with any crash closers) as a new frame.
	Recovered []Event
}

// Cause is Err as a message that names Offset and NextSeq itself would
// quote it: without the "session: event seq N: " of a record that does not
// decode (N is NextSeq).
func (t *TornTail) Cause() error {
	if de, ok := t.Err.(*DecodeError); ok {
		return de.Err
	}
	return t.Err
}

// File is a log file read whole: its header, its events, and the scan
// outcome. The caller owns a File and everything in it.
type File struct {
	Path       string
	Compressed bool // zstd framing
	Header     Header
	// Events is the valid prefix: contiguous seqs from 0, including the
	// events recovered from a torn final frame.
	Events []Event
	// Torn is nil when the file ended cleanly.
	Torn *TornTail
	// Upgraded counts the events read in an older shape and migrated to
	// the current one (docs/log-format.md, "Older shapes"). The file
	// itself is not rewritten.
	Upgraded int
}

// Log validates the events as a log (Restore): known or ignorable types,
// the surface rules, the typed shapes of core events.
func (f *File) Log() (*Log, error) { return Restore(f.Header, f.Events) }

// recordEvents estimates the number of events a storage line holds, to
// size File.Events once: growing it line by line copied a log's events
// about five times over (a large slice grows by a quarter). A packed row
// as AppendRecords writes it holds one member more than the gaps of its
// dt array; anything else counts as one event. The estimate of a row is
// capped by its length (a member takes at least five bytes: a gap and a
// comma, an empty string and a comma), so a hostile line cannot make the
// reader allocate more than a fixed multiple of its size.
func recordEvents(text []byte) int {
	const minMember = 5
	if !bytes.HasPrefix(text, []byte(`{"type":"`)) || !bytes.Contains(text[:min(len(text), 32)], []byte(`-chunks"`)) {
		return 1
	}
	i := bytes.Index(text, []byte(`"dt":[`))
	if i < 0 {
		return 1
	}
	dt := text[i+len(`"dt":[`):]
	if end := bytes.IndexByte(dt, ']'); end >= 0 {
		dt = dt[:end]
	}
	members := 1 // no gaps
	if len(dt) > 0 {
		members = bytes.Count(dt, []byte(",")) + 2
	}
	return min(members, max(len(text)/minMember, 1))
}

// lineHasTurnEnd reports whether a line records a turn/end: then damage
// before it is in the committed region. A line counts when it holds the
// compact member "type":"turn/end" (which cannot occur inside a JSON
// string, where quotes are escaped) even if the line itself is damaged, or
// when it parses as an object of that type. Erring towards "committed" is
// deliberate: a false positive reports corruption to a human, a false
// negative would truncate committed turns.
func lineHasTurnEnd(text []byte) bool {
	if !bytes.Contains(text, []byte(`"turn/end"`)) {
		return false
	}
	if bytes.Contains(text, []byte(`"type":"turn/end"`)) {
		return true
	}
	if j, err := messages.ParseJSON(text); err == nil {
		if t, _ := j.Field("type"); t.String() == `"turn/end"` {
			return true
		}
	}
	return false
}

// zstd framing.

var zstdMagic = []byte{0x28, 0xB5, 0x2F, 0xFD}

const (
	// maxBlockSize is the largest block a frame may hold (RFC 8878,
	// Block_Maximum_Size).
	maxBlockSize = 128 << 10
)

// frameSpan is one frame found by walkFrames: bytes [start, end) of the
// file. A frame that runs past the end of the data is not complete.
type frameSpan struct {
	start, end int64
	complete   bool
}

// frameHeader is the parsed header of a zstd frame (RFC 8878 §3.1.1.1).
type frameHeader struct {
	descriptor byte
	size       int    // bytes from the magic to the first block
	window     int    // the window descriptor byte; -1 for a single-segment frame
	dictID     []byte // as stored (0, 1, 2 or 4 bytes)
	contentLen uint64 // Frame_Content_Size, when the header has one
	hasLen     bool
}

func (h frameHeader) checksum() bool { return h.descriptor&0x04 != 0 }

// errShort reports data that ends inside the structure being parsed: for
// the last frame of a file, a torn frame.
var errShort = errors.New("zstd: data ends inside the frame")

// parseFrameHeader reads the frame header at the start of b.
func parseFrameHeader(b []byte) (frameHeader, error) {
	if len(b) < 4 {
		if !bytes.HasPrefix(zstdMagic, b) {
			return frameHeader{}, fmt.Errorf("bad zstd magic")
		}
		return frameHeader{}, errShort
	}
	if !bytes.Equal(b[:4], zstdMagic) {
		return frameHeader{}, fmt.Errorf("bad zstd magic % x", b[:4])
	}
	if len(b) < 5 {
		return frameHeader{}, errShort
	}
	h := frameHeader{descriptor: b[4], size: 5, window: -1}
	if h.descriptor&0x08 != 0 {
		return frameHeader{}, fmt.Errorf("zstd frame header has the reserved bit set")
	}
	single := h.descriptor&0x20 != 0
	dictLen := [4]int{0, 1, 2, 4}[h.descriptor&0x03]
	fcsLen := [4]int{0, 2, 4, 8}[h.descriptor>>6]
	if fcsLen == 0 && single {
		fcsLen = 1
	}
	need := h.size + dictLen + fcsLen
	if !single {
		need++
	}
	if len(b) < need {
		return frameHeader{}, errShort
	}
	p := h.size
	if !single {
		h.window = int(b[p])
		p++
	}
	h.dictID = b[p : p+dictLen]
	p += dictLen
	if fcsLen > 0 {
		var v uint64
		for i := fcsLen - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[p+i])
		}
		if fcsLen == 2 {
			v += 256 // the two-byte field is offset (RFC 8878)
		}
		h.contentLen, h.hasLen = v, true
	}
	h.size = need
	return h, nil
}

// nextBlock reads the block header at b[0:3] and returns the length of
// the whole block (header and body) and whether it is the frame's last.
func nextBlock(b []byte) (n int, last bool, err error) {
	if len(b) < 3 {
		return 0, false, errShort
	}
	bh := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
	size := int(bh >> 3)
	if size > maxBlockSize {
		return 0, false, fmt.Errorf("zstd block of %d bytes exceeds the maximum", size)
	}
	n = 3 + size // raw and compressed blocks: size bytes follow
	switch (bh >> 1) & 3 {
	case 1: // RLE: one byte, repeated size times
		n = 4
	case 3:
		return 0, false, fmt.Errorf("zstd block has the reserved type")
	}
	if len(b) < n {
		return 0, false, errShort
	}
	return n, bh&1 != 0, nil
}

// walkFrames finds the frame boundaries of a zstd file by reading frame
// and block headers, without decompressing. It stops at the first
// structural error (bad magic, a reserved bit or block type, an oversized
// block) and returns the frames before it with the error's offset; the
// last frame returned may be incomplete (the data ends inside it).
//
// It is written against RFC 8878 rather than left to the library: the
// decoder consumes a stream and reports an error, but the scan rules need
// to know where every frame starts and whether the last one is cut.
func walkFrames(data []byte) (frames []frameSpan, errAt int64, err error) {
	for p := 0; p < len(data); {
		start := p
		h, err := parseFrameHeader(data[p:])
		if err == nil {
			p = start + h.size
			for last := false; err == nil && !last; {
				var n int
				n, last, err = nextBlock(data[p:])
				p += n
			}
		}
		if err == nil && h.checksum() {
			p += 4
			if p > len(data) {
				err = errShort
			}
		}
		switch {
		case err == errShort:
			return append(frames, frameSpan{start: int64(start), end: int64(len(data))}), 0, nil
		case err != nil:
			return frames, int64(start), err
		}
		frames = append(frames, frameSpan{start: int64(start), end: int64(p), complete: true})
	}
	return frames, 0, nil
}

// WriteOptions says how WriteFile lays out a file. The zero value writes
// plain JSONL, unpacked, in one batch.
type WriteOptions struct {
	// Zstd writes a .jsonl.zstd artifact: one checksummed frame for the
	// header line, then one per batch. Default false: plain JSONL.
	Zstd bool
	// Pack says whether chunk runs are packed within each batch (see
	// Packing). Default Verbatim.
	Pack Packing
	// BatchSizes splits the events into consecutive batches of these sizes
	// (each positive); events left over form one last batch. Default nil:
	// one batch. A batch is a frame in a zstd file, and the unit of packing.
	BatchSizes []int
}

// Validate checks that every batch size is positive.
func (o WriteOptions) Validate() error {
	for _, n := range o.BatchSizes {
		if n <= 0 {
			return fmt.Errorf("session: write options: batch size %d is not positive", n)
		}
	}
	return nil
}

// WriteFile writes a whole log file at path (mode 0600, replacing any file
// there): the header line, then events in the layout opts asks for. The
// events must be contiguous from seq 0. It is for tests and tools: it
// writes in one go and does not sync, which makes it no substitute for the
// persister's durable append.
func WriteFile(path string, h Header, events []Event, opts WriteOptions) error {
	data, err := encodeFile(h, events, opts)
	if err != nil {
		return err
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("session: write log: %w", err)
	}
	if err := fh.Chmod(0o600); err != nil {
		_ = fh.Close()
		return fmt.Errorf("session: write log: %w", err)
	}
	if _, err := fh.Write(data); err != nil {
		_ = fh.Close()
		return fmt.Errorf("session: write log: %w", err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("session: write log: %w", err)
	}
	return nil
}

// ErrFileExists is returned by CreateFile when something, a file or a
// symbolic link (dangling or not), is already at the path.
var ErrFileExists = errors.New("session: file exists")

// CreateFile writes a whole new log file at path like WriteFile, but as a
// tool that hands the file to someone else must: it never replaces or
// follows anything already at path (a file, or a symbolic link whose
// target would otherwise be created: the open is O_EXCL|O_NOFOLLOW, so the
// check and the creation are one step and no race can slip a link in
// between), it syncs the data before returning, and on any failure it
// removes the file it created, so a caller sees either a complete durable
// file or none. An entry already at path is reported as ErrFileExists.
func CreateFile(path string, h Header, events []Event, opts WriteOptions) error {
	data, err := encodeFile(h, events, opts)
	if err != nil {
		return err
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ELOOP) {
		return fmt.Errorf("%w: %s", ErrFileExists, path)
	}
	if err != nil {
		return fmt.Errorf("session: create log: %w", err)
	}
	// Write, sync and close in turn; the first error wins and undoes the
	// creation. Only this process made the entry (O_EXCL), so removing it
	// takes nothing away from anyone.
	_, err = fh.Write(data)
	if err == nil {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("session: create log: %w", err)
	}
	return nil
}

// encodeFile returns the bytes WriteFile writes.
func encodeFile(h Header, events []Event, opts WriteOptions) ([]byte, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	for i, e := range events {
		if e.seq != int64(i) {
			return nil, fmt.Errorf("session: write log: event %d has seq %d; events must be contiguous from 0", i, e.seq)
		}
	}
	if err := CheckJSONL(events); err != nil {
		return nil, fmt.Errorf("session: write log: %w", err)
	}
	var batches [][]Event
	rest := events
	for _, n := range opts.BatchSizes {
		if n > len(rest) {
			return nil, fmt.Errorf("session: write log: batch sizes add up to more than the %d events", len(events))
		}
		batches, rest = append(batches, rest[:n]), rest[n:]
	}
	if len(rest) > 0 {
		batches = append(batches, rest)
	}
	headerLine := append([]byte(h.JSON().String()), '\n')
	if !opts.Zstd {
		out := headerLine
		for _, b := range batches {
			out = AppendRecords(out, b, opts.Pack)
		}
		return out, nil
	}
	out := AppendZstdFrame(nil, headerLine)
	var buf []byte
	for _, b := range batches {
		buf = AppendRecords(buf[:0], b, opts.Pack)
		out = AppendZstdFrame(out, buf)
	}
	return out, nil
}
