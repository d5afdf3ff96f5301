package session

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/internal/testutil"
)

// writeTemp writes data to a file named name in a fresh directory.
func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// readBoth reads data with ReadFile (from a file) and ParseFile (from
// memory), requires each to allocate less than limit, and returns what
// ReadFile returned, and the file's path, after checking that ParseFile
// returned the same.
func readBoth(t *testing.T, name string, data []byte, limit uint64) (*File, string, error) {
	t.Helper()
	path := writeTemp(t, name, data)
	var f, g *File
	var err, gerr error
	n := testutil.Allocated(func() { f, err = ReadFile(path) })
	require.Less(t, n, limit, "ReadFile allocated %d MiB", n>>20)
	n = testutil.Allocated(func() { g, gerr = ParseFile(data, path) })
	require.Less(t, n, limit, "ParseFile allocated %d MiB", n>>20)
	require.Equal(t, err, gerr)
	require.Equal(t, f, g)
	return f, path, err
}

// TestReadZstdNewlineBombIsBounded: a valid header frame, then a frame of
// a few hundred bytes (10 MiB) or a few kilobytes (100 MiB) of newlines.
// The reader streams the frame and keeps nothing per empty line, so it
// allocates a few MiB whatever the size, where a reader that split the
// file into lines first would take gigabytes. The
// first empty line does not parse and no turn/end follows, so the file is
// a header with a torn tail at the second frame, as the scan rules say.
func TestReadZstdNewlineBombIsBounded(t *testing.T) {
	for _, n := range []int{10 << 20, 100 << 20} {
		data := testutil.ZstdNewlineBomb([]byte(fileHeaderLine()), n)
		require.Less(t, len(data), 4<<10)
		frames, _, err := walkFrames(data)
		require.NoError(t, err)
		require.Len(t, frames, 2)

		f, _, err := readBoth(t, "session.jsonl.zstd", data, 32<<20)
		require.NoError(t, err)
		require.Equal(t, fileHeader, f.Header)
		require.Empty(t, f.Events)
		require.NotNil(t, f.Torn)
		require.Equal(t, frames[1].start, f.Torn.Offset)
		require.Equal(t, 2, f.Torn.Line)
		require.Zero(t, f.Torn.NextSeq)
		require.Empty(t, f.Torn.Recovered)

		// The header alone, as a store listing sessions reads it.
		var h Header
		require.Less(t, testutil.Allocated(func() { h, err = ParseFileHeader(data, "session.jsonl.zstd") }), uint64(32<<20))
		require.NoError(t, err)
		require.Equal(t, fileHeader, h)
	}
}

// TestReadZstdRecordThenNewlinesIsBounded: a frame holding good records
// and then 64 MiB of newlines. The records are kept (recovered from the
// frame, which a repair rewrites); the newlines cost nothing. With a
// turn/end in a later frame the same damage is in the committed region,
// and the whole run of newlines is searched for it at no cost either.
func TestReadZstdRecordThenNewlinesIsBounded(t *testing.T) {
	lines := fileSession()
	events := fileEvents(t, lines)
	head := testutil.ZstdFrame(testutil.Repeat{Text: []byte(fileHeaderLine() + "\n"), N: 1})
	bomb := testutil.ZstdFrame(
		testutil.Repeat{Text: []byte(strings.Join(lines[:3], "\n") + "\n"), N: 1},
		testutil.Repeat{Text: []byte("\n"), N: 64 << 20})
	data := append(append([]byte{}, head...), bomb...)
	f, _, err := readBoth(t, "session.jsonl.zstd", data, 32<<20)
	require.NoError(t, err)
	codecRequireEvents(t, events[:3], f.Events)
	require.NotNil(t, f.Torn)
	require.Equal(t, int64(len(head)), f.Torn.Offset)
	require.Equal(t, 5, f.Torn.Line)
	require.Equal(t, int64(3), f.Torn.NextSeq)
	codecRequireEvents(t, events[:3], f.Torn.Recovered)

	rest := testutil.ZstdFrame(testutil.Repeat{Text: []byte(strings.Join(lines[3:], "\n") + "\n"), N: 1})
	_, _, err = readBoth(t, "session.jsonl.zstd", append(data, rest...), 32<<20)
	ce := requireCorrupt(t, err, 5, 3, "unparsable committed event")
	require.Equal(t, int64(len(head)), ce.Offset)
}

// TestReadPlainNewlinesCostNothing: the same damage in a plain file, 64
// MiB of newlines after three good records: the reader streams the file
// and allocates a few MiB, not the file's size or a slice entry per line.
func TestReadPlainNewlinesCostNothing(t *testing.T) {
	lines := fileSession()
	path := filepath.Join(t.TempDir(), "session.jsonl")
	fh, err := os.Create(path)
	require.NoError(t, err)
	w := bufio.NewWriter(fh)
	_, err = w.WriteString(fileHeaderLine() + "\n" + strings.Join(lines[:3], "\n") + "\n")
	require.NoError(t, err)
	nl := []byte(strings.Repeat("\n", 1<<20))
	for range 64 {
		_, err = w.Write(nl)
		require.NoError(t, err)
	}
	_, err = w.WriteString(lines[3][:10]) // and a torn fragment
	require.NoError(t, err)
	require.NoError(t, w.Flush())
	require.NoError(t, fh.Close())

	var f *File
	require.Less(t, testutil.Allocated(func() { f, err = ReadFile(path) }), uint64(16<<20))
	require.NoError(t, err)
	codecRequireEvents(t, fileEvents(t, lines[:3]), f.Events)
	require.NotNil(t, f.Torn)
	require.Equal(t, int64(len(fileHeaderLine())+1+len(strings.Join(lines[:3], "\n"))+1), f.Torn.Offset)
	require.Equal(t, 5, f.Torn.Line)
	require.Equal(t, int64(3), f.Torn.NextSeq)
}

// longLine is a record line of n bytes in all (without its newline).
func longLine(n int) (prefix, suffix string, fill int) {
	prefix = `{"type":"x/blob","seq":0,"time":0,"ignorable":true,"data":"`
	suffix = `"}`
	return prefix, suffix, n - len(prefix) - len(suffix)
}

// requireTooLarge checks the error of a line over the limit: corruption
// naming the file, the line, the seq and the limit.
func requireTooLarge(t *testing.T, err error, path string, offset int64) {
	t.Helper()
	ce := requireCorrupt(t, err, 2, 0, "record too long: the line at offset")
	require.Equal(t, path, ce.Path)
	var tl *RecordTooLargeError
	require.True(t, errors.As(err, &tl), "want a *RecordTooLargeError, got %v", err)
	require.Equal(t, DefaultMaxRecordBytes, tl.Limit)
	require.Equal(t, offset, tl.Offset)
	require.Contains(t, err.Error(), path)
	require.Contains(t, err.Error(), "limit of 16 MiB")
	require.NotContains(t, err.Error(), "\n")
}

// TestReadRefusesRecordOverLimit: a line of 17 MiB and one of 50 MB, in
// a plain file and in a zstd frame of a few kilobytes, are refused with a
// *RecordTooLargeError (inside a *CorruptError) that names the file, the
// line, the seq and the limit. The reader keeps at most the limit of the
// line, not the line, so the 50 MB line costs what the 17 MiB one does:
// under 48 MiB, twice the limit (the line buffer doubles up to it) plus
// the zstd window and the read buffers, where reading such a line whole
// (and decoding its zstd frame whole) would cost the line.
func TestReadRefusesRecordOverLimit(t *testing.T) {
	for _, n := range []int{17 << 20, 50_000_000} {
		prefix, suffix, fill := longLine(n)

		// Plain, written out in pieces.
		path := filepath.Join(t.TempDir(), "session.jsonl")
		fh, err := os.Create(path)
		require.NoError(t, err)
		w := bufio.NewWriter(fh)
		_, err = w.WriteString(fileHeaderLine() + "\n" + prefix)
		require.NoError(t, err)
		chunk := []byte(strings.Repeat("a", 1<<20))
		for left := fill; left > 0; left -= len(chunk) {
			_, err = w.Write(chunk[:min(left, len(chunk))])
			require.NoError(t, err)
		}
		_, err = w.WriteString(suffix + "\n")
		require.NoError(t, err)
		require.NoError(t, w.Flush())
		require.NoError(t, fh.Close())
		var f *File
		require.Less(t, testutil.Allocated(func() { f, err = ReadFile(path) }), uint64(48<<20))
		require.Nil(t, f)
		requireTooLarge(t, err, path, int64(len(fileHeaderLine())+1))

		// Zstd: the record in the second frame.
		head := testutil.ZstdFrame(testutil.Repeat{Text: []byte(fileHeaderLine() + "\n"), N: 1})
		data := append(head, testutil.ZstdFrame(
			testutil.Repeat{Text: []byte(prefix), N: 1},
			testutil.Repeat{Text: []byte("a"), N: fill},
			testutil.Repeat{Text: []byte(suffix + "\n"), N: 1})...)
		require.Less(t, len(data), 64<<10)
		_, zpath, err := readBoth(t, "session.jsonl.zstd", data, 48<<20)
		requireTooLarge(t, err, zpath, int64(len(head)))
	}
}

// TestReadOptionsMaxRecordBytes: the limit is the caller's to set; a line
// of exactly the limit is read, one byte more is refused, and a torn
// fragment over the limit is still a torn tail (its text is never needed).
func TestReadOptionsMaxRecordBytes(t *testing.T) {
	lines := fileSession()
	long := 0 // the longest line
	for i, ln := range lines {
		if len(ln) > len(lines[long]) {
			long = i
		}
	}
	require.Positive(t, long, "the session's longest line is not its first")
	limit := len(lines[long]) - 1
	data := plainFile(lines...)
	f, err := Read(strings.NewReader(string(data)), "s.jsonl", ReadOptions{MaxRecordBytes: limit + 1})
	require.NoError(t, err)
	require.Len(t, f.Events, len(lines))

	_, err = Read(strings.NewReader(string(data)), "s.jsonl", ReadOptions{MaxRecordBytes: limit})
	ce := requireCorrupt(t, err, long+2, int64(long), "record too long: the line at offset")
	var tl *RecordTooLargeError
	require.True(t, errors.As(err, &tl))
	require.Equal(t, limit, tl.Limit)
	require.Equal(t, ce.Offset, tl.Offset)

	// The same line as a torn fragment at the end: a torn tail.
	cut := []byte(fileHeaderLine() + "\n" + strings.Join(lines[:long], "\n") + "\n" + lines[long])
	f, err = Read(strings.NewReader(string(cut)), "s.jsonl", ReadOptions{MaxRecordBytes: limit})
	require.NoError(t, err)
	require.Len(t, f.Events, long)
	require.NotNil(t, f.Torn)
	require.Equal(t, int64(long), f.Torn.NextSeq)

	require.Error(t, ReadOptions{MaxRecordBytes: -1}.Validate())
	_, err = Read(strings.NewReader(string(data)), "s.jsonl", ReadOptions{MaxRecordBytes: -1})
	require.Error(t, err)
}

// bombSeeds are the shapes of the hostile files of the tests above, for
// the fuzz targets' seed corpora: newline bombs, good records followed by
// newlines and then a turn/end, and a line over FuzzScanLog's record limit
// (fuzzMaxRecord). They are small forms of the files the tests read (1
// MiB of newlines rather than 100; a line of 100 KiB rather than 17 MiB
// under a limit of 64 KiB rather than 16 MiB): the fuzzer runs each
// input instrumented, where decoding 10 MiB takes a tenth of a second
// inside the zstd library, and when a mutation finds new coverage it
// minimises it by running thousands of variants of it, holding a worker
// (at 0 execs/s) for up to a minute. A bomb of a few MiB has the same
// frames and blocks, only fewer of them.
func bombSeeds() [][]byte {
	header := []byte(fileHeaderLine())
	head := testutil.ZstdFrame(testutil.Repeat{Text: append(header, '\n'), N: 1})
	lines := fileSession()
	prefix, suffix, fill := longLine(fuzzMaxRecord + 100<<10)
	return [][]byte{
		testutil.ZstdNewlineBomb(header, 1<<20),
		append(append([]byte{}, head...), testutil.ZstdFrame(
			testutil.Repeat{Text: []byte(strings.Join(lines[:3], "\n") + "\n"), N: 1},
			testutil.Repeat{Text: []byte("\n"), N: 1 << 20},
			testutil.Repeat{Text: []byte(strings.Join(lines[3:], "\n") + "\n"), N: 1})...),
		append(append([]byte{}, head...), testutil.ZstdFrame(
			testutil.Repeat{Text: []byte(prefix), N: 1},
			testutil.Repeat{Text: []byte("a"), N: fill},
			testutil.Repeat{Text: []byte(suffix + "\n"), N: 1})...),
	}
}
