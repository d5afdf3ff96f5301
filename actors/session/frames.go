package session

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// This file holds the pieces of the file format a store needs to write a
// log incrementally (one zstd frame per durable batch) and to read only a
// file's header (listing sessions), without reading the whole file.

// frameEncoder is the encoder of AppendZstdFrame, able to encode several
// batches at once (one per GOMAXPROCS), at zstd's fastest level: a store
// writes a frame per write-behind batch, a few chunks' lines at a model's
// pace, and for frames that small the default level's larger tables cost
// a quarter more CPU for about 2% fewer bytes (docs/performance.md#write-path-cpu).
// Any level makes the same format (docs/log-format.md#zstd-framing).
var frameEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil, zstd.WithEncoderCRC(true), zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
})

// AppendZstdFrame appends to dst one independent, checksummed zstd frame
// (zstd's fastest level) holding plain, and returns the extended buffer: the physical
// unit of a .jsonl.zstd file (docs/log-format.md#jsonl-files), one per header
// line and one per durable batch. plain is only read; dst is owned by the
// caller before and after. Safe for concurrent use.
func AppendZstdFrame(dst, plain []byte) []byte {
	enc, err := frameEncoder()
	if err != nil {
		// The options are constant and valid; failing here is a bug.
		panic(fmt.Sprintf("session: zstd encoder: %v", err))
	}
	return enc.EncodeAll(plain, dst)
}

// ParseFileHeader reads the session header from a prefix of a log file's
// bytes: the first line of a plain file, or the first frame of a zstd file
// (detected as ParseFile does, from the magic or a ".zstd" name), which
// must hold exactly the header line. When the prefix does not hold the
// whole first line or frame the error wraps ErrNoHeader: the file is
// empty or half-written, or the caller should read more. Other errors are
// those of ParseFile (a *CorruptError for a damaged first frame, a wrapped
// *FormatVersionError, or ErrNotHeader for a first line that is not a
// header). data is only read.
func ParseFileHeader(data []byte, name string) (Header, error) {
	f := &File{Path: name}
	if !bytes.HasPrefix(data, zstdMagic) && !strings.HasSuffix(name, ".zstd") {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			return Header{}, &FileError{Path: name, Err: ErrNoHeader}
		}
		err := f.parseHeader(data[:nl])
		return f.Header, err
	}
	h, err := parseFrameHeader(data)
	end := 0
	if err == nil {
		end = h.size
		for last := false; err == nil && !last; {
			var n int
			n, last, err = nextBlock(data[end:])
			end += n
		}
	}
	if err == nil && h.checksum() {
		end += 4
		if end > len(data) {
			err = errShort
		}
	}
	switch {
	case err == errShort:
		return Header{}, &FileError{Path: name, Err: ErrNoHeader}
	case err != nil:
		return Header{}, &CorruptError{Path: name, Line: 1, Seq: -1, Err: err}
	}
	fr := newFrameReader()
	defer fr.release()
	text, err := readHeaderFrame(fr, newLineReader(fr, DefaultMaxRecordBytes), data[:end])
	if err != nil {
		return Header{}, &CorruptError{Path: name, Line: 1, Seq: -1, Err: err}
	}
	err = f.parseHeader(text)
	return f.Header, err
}
