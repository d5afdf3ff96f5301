package testutil

import (
	"bytes"
	"fmt"

	"github.com/klauspost/compress/zstd"
)

// Hostile log files for the tests of every log reader: a few kilobytes on
// disk that decompress to tens or hundreds of megabytes. They are built at
// test time (streaming, so building one costs no more memory than the
// file itself) rather than kept in testdata, so their sizes can grow with
// the bounds they test.

// Repeat is one piece of a frame's decompressed content: Text repeated N
// times.
type Repeat struct {
	Text []byte
	N    int
}

// ZstdFrame returns one checksummed zstd frame whose decompressed content
// is the pieces one after the other. The frame is written by a streaming
// encoder, so its header declares no content size and a window of the
// encoder's default size, as a frame of a writer that streams would. The
// returned slice is owned by the caller; the pieces are only read.
func ZstdFrame(pieces ...Repeat) []byte {
	var out bytes.Buffer
	w, err := zstd.NewWriter(&out, zstd.WithEncoderCRC(true), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	if err != nil {
		// The options are constant and valid.
		panic(fmt.Sprintf("testutil: zstd writer: %v", err))
	}
	const chunk = 1 << 20
	for _, p := range pieces {
		if len(p.Text) == 0 || p.N <= 0 {
			continue
		}
		// Write the repeats in chunks of about 1 MiB: one write per repeat
		// is slow for a one-byte text, one write of the whole is the
		// allocation this helper exists to avoid.
		per := max(chunk/len(p.Text), 1)
		buf := bytes.Repeat(p.Text, min(per, p.N))
		for left := p.N; left > 0; {
			k := min(left, per)
			if _, err := w.Write(buf[:k*len(p.Text)]); err != nil {
				panic(fmt.Sprintf("testutil: zstd write: %v", err))
			}
			left -= k
		}
	}
	if err := w.Close(); err != nil {
		panic(fmt.Sprintf("testutil: zstd close: %v", err))
	}
	return out.Bytes()
}

// ZstdNewlineBomb returns a .jsonl.zstd log file of a few kilobytes: a
// valid first frame holding headerLine (the session header, without its
// newline), then a second frame that decompresses to n newlines (10<<20
// of them make a 10 MiB frame). A reader whose memory grows with the
// lines it splits, or that decodes a frame whole, takes gigabytes for it.
// The returned slice is owned by the caller.
func ZstdNewlineBomb(headerLine []byte, n int) []byte {
	out := ZstdFrame(Repeat{Text: append(bytes.Clone(headerLine), '\n'), N: 1})
	return append(out, ZstdFrame(Repeat{Text: []byte("\n"), N: n})...)
}
