package session

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/messages"
)

var fileHeader = Header{ID: "sess-file", CreatedAt: 1_700_000_000_000, Cwd: "/work/x", DelegationDepth: 0}

func fileHeaderLine() string { return fileHeader.JSON().String() }

// fileTurnLines returns the lines of one complete turn starting at seq:
// turn/start, step/start, user/message, chunks (nChunks text deltas),
// assistant/message citing them, step/end, turn/end.
func fileTurnLines(seq int64, turn int, nChunks int) []string {
	var out []string
	add := func(format string, args ...any) {
		out = append(out, fmt.Sprintf(format, args...))
		seq++
	}
	add(`{"type":"turn/start","seq":%d,"time":%d,"data":{"turn":%d}}`, seq, 1000*seq, turn)
	add(`{"type":"step/start","seq":%d,"time":%d,"data":{"turn":%d,"step":1}}`, seq, 1000*seq, turn)
	add(`{"type":"user/message","seq":%d,"time":%d,"data":{"content":[{"type":"text","text":"q%d"}],"source":{"kind":"user"},"role":"user","id":"u%d"},"surfaceOp":"append"}`, seq, 1000*seq, turn, turn)
	var cited []string
	for i := range nChunks {
		cited = append(cited, fmt.Sprint(seq))
		add(`{"type":"assistant/chunk","seq":%d,"time":%d,"data":{"turn":%d,"step":1,"chunk":{"type":"text-delta","index":0,"text":"w%d "}}}`, seq, 1000*seq-int64(i%2)*1500, turn, i)
	}
	add(`{"type":"assistant/message","seq":%d,"time":%d,"data":{"turn":%d,"step":1,"message":{"role":"assistant","content":[{"type":"text","text":"answer"}],"source":{"kind":"model","provider":"p","model":"m"},"id":"a%d"}},"surfaceOp":"append","sourceEventSeqs":[%s]}`,
		seq, 1000*seq, turn, turn, strings.Join(cited, ","))
	add(`{"type":"step/end","seq":%d,"time":%d,"data":{"turn":%d,"step":1}}`, seq, 1000*seq, turn)
	add(`{"type":"turn/end","seq":%d,"time":%d,"data":{"turn":%d,"reason":{"kind":"completed"}}}`, seq, 1000*seq, turn)
	return out
}

// fileSession returns a session of two turns as event lines (seqs 0..20).
func fileSession() []string {
	lines := fileTurnLines(0, 1, 4)
	return append(lines, fileTurnLines(int64(len(lines)), 2, 5)...)
}

func fileEvents(t testing.TB, lines []string) []Event {
	t.Helper()
	var out []Event
	for _, ln := range lines {
		out = append(out, codecDecode(t, ln))
	}
	return out
}

func plainFile(lines ...string) []byte {
	return []byte(fileHeaderLine() + "\n" + strings.Join(lines, "\n") + "\n")
}

// zstdFrames encodes each content as one checksummed frame.
func zstdFrames(t testing.TB, contents ...string) []byte {
	t.Helper()
	enc, err := frameEncoder()
	require.NoError(t, err)
	var out []byte
	for _, c := range contents {
		out = enc.EncodeAll([]byte(c), out)
	}
	return out
}

func requireCorrupt(t testing.TB, err error, line int, seq int64, rule string) *CorruptError {
	t.Helper()
	var ce *CorruptError
	require.True(t, errors.As(err, &ce), "want a *CorruptError, got %v", err)
	require.Equal(t, line, ce.Line)
	require.Equal(t, seq, ce.Seq)
	require.Contains(t, err.Error(), rule)
	return ce
}

func TestFileReadsPlainAndZstd(t *testing.T) {
	lines := fileSession()
	want := fileEvents(t, lines)
	for _, opts := range []WriteOptions{
		{}, {Pack: PackChunks}, {Zstd: true}, {Zstd: true, Pack: PackChunks, BatchSizes: []int{1, 5, 3}},
	} {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "session.jsonl")
			if opts.Zstd {
				path += ".zstd"
			}
			require.NoError(t, WriteFile(path, fileHeader, want, opts))
			st, err := os.Stat(path)
			require.NoError(t, err)
			require.Equal(t, fs.FileMode(0o600), st.Mode().Perm())
			f, err := ReadFile(path)
			require.NoError(t, err)
			require.Nil(t, f.Torn)
			require.Equal(t, opts.Zstd, f.Compressed)
			require.Equal(t, fileHeader, f.Header)
			codecRequireEvents(t, want, f.Events)
			if !opts.Zstd && opts.Pack == Verbatim {
				data, _ := os.ReadFile(path)
				require.Equal(t, string(plainFile(lines...)), string(data))
			}
		})
	}
}

func TestFileDetectsZstdByMagic(t *testing.T) {
	data := zstdFrames(t, fileHeaderLine()+"\n", strings.Join(fileSession(), "\n")+"\n")
	f, err := ParseFile(data, "misnamed.jsonl")
	require.NoError(t, err)
	require.True(t, f.Compressed)
	require.Len(t, f.Events, len(fileSession()))

	_, err = ParseFile(plainFile(fileSession()...), "misnamed.jsonl.zstd")
	requireCorrupt(t, err, 1, -1, "bad zstd magic")
}

func TestFileRequiresAHeader(t *testing.T) {
	for name, data := range map[string]string{
		"empty":          "",
		"torn header":    fileHeaderLine(),
		"zstd cut":       string(zstdFrames(t, fileHeaderLine()+"\n")[:10]),
		"zstd magic cut": "\x28\xb5",
	} {
		t.Run(name, func(t *testing.T) {
			path := "s.jsonl"
			if strings.HasPrefix(name, "zstd") {
				path += ".zstd"
			}
			_, err := ParseFile([]byte(data), path)
			require.ErrorIs(t, err, ErrNoHeader)
		})
	}
	_, err := ParseFile([]byte(`{"type":"turn/start","seq":0,"time":0,"data":{"turn":1}}`+"\n"), "s.jsonl")
	require.ErrorIs(t, err, ErrNotHeader)
	_, err = ParseFile(zstdFrames(t, fileHeaderLine()+"\n"+fileSession()[0]+"\n"), "s.jsonl.zstd")
	requireCorrupt(t, err, 1, -1, "header zstd frame does not hold exactly one line")
}

func TestFileRejectsFutureFormatVersion(t *testing.T) {
	future := strings.Replace(fileHeaderLine(), `"version":0`, `"version":1`, 1)
	for _, data := range [][]byte{
		[]byte(future + "\n" + fileSession()[0] + "\n"),
		zstdFrames(t, future+"\n", fileSession()[0]+"\n"),
	} {
		_, err := ParseFile(data, "s.jsonl")
		var ve *FormatVersionError
		require.True(t, errors.As(err, &ve), "%v", err)
		require.EqualValues(t, 1, ve.Version)
		require.Contains(t, err.Error(), "upgrade")
	}
}

// Scenario 92: damage after the last turn/end is a torn tail.
func TestScanToleratesTornTailAfterLastTurnEnd(t *testing.T) {
	lines := fileSession() // the second turn/end is seq 20, the last line
	good := fileEvents(t, lines)
	n := len(lines)
	extra := fileTurnLines(int64(n), 3, 3) // seq 21.. with its own turn/end last

	cases := map[string]struct {
		tail    []string
		raw     string // appended without newline handling
		kept    int    // events kept
		errText string
	}{
		"seq gap":                            {tail: []string{extra[0], extra[2], extra[3]}, kept: n + 1, errText: fmt.Sprintf("record starts at seq %d, want %d", n+2, n+1)},
		"unparsable line":                    {tail: []string{extra[0], extra[1][:30], extra[2]}, kept: len(lines) + 1, errText: "not lossless JSON"},
		"garbage":                            {tail: []string{"\x00\x00\x00\x00"}, kept: len(lines), errText: "not lossless JSON"},
		"bad event":                          {tail: []string{strings.Replace(extra[0], `"turn":3`, `"turn":"3"`, 1)}, kept: len(lines), errText: "not an integer"},
		"torn final record":                  {tail: []string{extra[0]}, raw: extra[1][:40], kept: len(lines) + 1, errText: "torn final record"},
		"whole final record without newline": {raw: extra[0], kept: len(lines), errText: "torn final record"},
		"damage before a line mentioning turn/end": {
			tail: []string{extra[0], "garbage", `{"type":"session/title","seq":24,"time":0,"data":{"title":"turn/end","kind":{"type": "x"}}}`},
			kept: len(lines) + 1, errText: "not lossless JSON",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			data := plainFile(append(lines, c.tail...)...)
			committed := len(plainFile(lines...))
			for _, ln := range c.tail[:max(0, c.kept-len(lines))] {
				committed += len(ln) + 1
			}
			data = append(data, c.raw...)
			f, err := ParseFile(data, "s.jsonl")
			require.NoError(t, err)
			require.NotNil(t, f.Torn)
			require.Len(t, f.Events, c.kept)
			codecRequireEvents(t, append(good, codecDecode(t, extra[0]))[:c.kept], f.Events)
			require.EqualValues(t, c.kept, f.Torn.NextSeq)
			require.EqualValues(t, committed, f.Torn.Offset, "committedBytes is the end of the last good line")
			require.Equal(t, 2+c.kept, f.Torn.Line)
			require.Contains(t, f.Torn.Err.Error(), c.errText)
			require.Empty(t, f.Torn.Recovered)
		})
	}
}

// Scenario 92: a gap followed by a turn/end is corruption.
func TestScanRejectsGapBeforeLaterTurnEnd(t *testing.T) {
	lines := fileSession()
	damaged := append(append([]string{}, lines[:5]...), lines[6:]...) // seq 5 missing; turn/ends follow
	_, err := ParseFile(plainFile(damaged...), "s.jsonl")
	ce := requireCorrupt(t, err, 7, 5, "seq gap in committed region")
	require.Equal(t, "s.jsonl", ce.Path)
	require.EqualValues(t, len(plainFile(lines[:5]...)), ce.Offset)
	require.True(t, strings.HasPrefix(err.Error(), "session: s.jsonl: line 7 (seq 5): seq gap in committed region"), err.Error())

	// The same gap in the last turn, before its turn/end.
	damaged = append(append([]string{}, lines[:len(lines)-3]...), lines[len(lines)-2:]...)
	_, err = ParseFile(plainFile(damaged...), "s.jsonl")
	requireCorrupt(t, err, len(lines)-1, int64(len(lines)-3), "seq gap in committed region")

	// A repeated seq is a gap too.
	damaged = append(append([]string{}, lines[:5]...), lines[4:]...)
	_, err = ParseFile(plainFile(damaged...), "s.jsonl")
	requireCorrupt(t, err, 7, 5, "seq gap in committed region")
}

// Scenario 92: an unparsable line followed by a turn/end is corruption.
func TestScanRejectsUnparsableCommittedEvent(t *testing.T) {
	lines := fileSession()
	for name, bad := range map[string]string{
		"cut line":     lines[3][:25],
		"unknown key":  strings.Replace(lines[3], `"seq":3`, `"seq":3,"extra":true`, 1),
		"empty line":   "",
		"bad row":      `{"type":"text-chunks","seq0":3,"time0":0,"data":{}}`,
		"bad payload":  strings.Replace(lines[3], `"step":1`, `"step":"1"`, 1),
		"not an event": `[]`,
	} {
		t.Run(name, func(t *testing.T) {
			damaged := append(append(append([]string{}, lines[:3]...), bad), lines[4:]...)
			_, err := ParseFile(plainFile(damaged...), "s.jsonl")
			requireCorrupt(t, err, 5, 3, "unparsable committed event")
		})
	}
	// A damaged turn/end after the damage still marks the committed region.
	damaged := append([]string{}, lines[:10]...)
	damaged = append(damaged, "garbage", strings.Replace(lines[len(lines)-1], `"completed"}`, `"completed"`, 1))
	_, err := ParseFile(plainFile(damaged...), "s.jsonl")
	requireCorrupt(t, err, 12, 10, "unparsable committed event")
	// So does a turn/end written with spaces.
	damaged[len(damaged)-1] = `{"type": "turn/end", "seq": 11, "time": 0, "data": {"turn": 1, "reason": {"kind": "completed"}}}`
	_, err = ParseFile(plainFile(damaged...), "s.jsonl")
	requireCorrupt(t, err, 12, 10, "unparsable committed event")
}

// Scenario 93: one header frame, then one checksummed frame per batch.
func TestFileZstdWritesOneFramePerBatch(t *testing.T) {
	events := fileEvents(t, fileSession())
	data, err := encodeFile(fileHeader, events, WriteOptions{Zstd: true, Pack: PackChunks, BatchSizes: []int{3, 10}})
	require.NoError(t, err)
	frames, _, err := walkFrames(data)
	require.NoError(t, err)
	require.Len(t, frames, 4) // header, 3, 10, the 8 left
	var contents []string
	for _, fr := range frames {
		require.True(t, fr.complete)
		require.NotZero(t, data[fr.start+4]&0x04, "frame at %d has no checksum", fr.start)
		c, err := decodeFrame(data[fr.start:fr.end])
		require.NoError(t, err)
		contents = append(contents, string(c))
	}
	require.Equal(t, fileHeaderLine()+"\n", contents[0])
	require.Equal(t, string(AppendRecords(nil, events[:3], PackChunks)), contents[1])
	require.Equal(t, string(AppendRecords(nil, events[3:13], PackChunks)), contents[2])
	require.Contains(t, contents[2], `"text-chunks"`, "chunk runs pack within a batch")
	require.Equal(t, string(AppendRecords(nil, events[13:], PackChunks)), contents[3])

	f, err := ParseFile(data, "s.jsonl.zstd")
	require.NoError(t, err)
	require.Nil(t, f.Torn)
	codecRequireEvents(t, events, f.Events)

	// Appending a frame leaves the earlier bytes as they were.
	more, err := encodeFile(fileHeader, events, WriteOptions{Zstd: true, Pack: PackChunks, BatchSizes: []int{3, 10, 5}})
	require.NoError(t, err)
	require.Equal(t, data[:frames[3].start], more[:frames[3].start])

	require.Error(t, WriteFile(filepath.Join(t.TempDir(), "x"), fileHeader, events, WriteOptions{BatchSizes: []int{0}}))
	require.Error(t, WriteFile(filepath.Join(t.TempDir(), "x"), fileHeader, events, WriteOptions{BatchSizes: []int{100}}))
	require.Error(t, WriteFile(filepath.Join(t.TempDir(), "x"), fileHeader, events[1:], WriteOptions{}))
}

// Scenario 94: the complete records of a torn final frame are recovered.
func TestFileZstdRecoversCompleteRecordsOfTornFrame(t *testing.T) {
	events := fileEvents(t, fileSession())
	data, err := encodeFile(fileHeader, events, WriteOptions{Zstd: true, BatchSizes: []int{11}})
	require.NoError(t, err)
	frames, _, err := walkFrames(data)
	require.NoError(t, err)
	last := frames[len(frames)-1]

	// Cut inside the checksum: every block decodes, every record is back.
	f, err := ParseFile(data[:len(data)-2], "s.jsonl.zstd")
	require.NoError(t, err)
	require.NotNil(t, f.Torn)
	require.Equal(t, last.start, f.Torn.Offset)
	require.ErrorIs(t, f.Torn.Err, errTornFrame)
	require.EqualValues(t, len(events), f.Torn.NextSeq)
	codecRequireEvents(t, events, f.Events)
	codecRequireEvents(t, events[11:], f.Torn.Recovered)

	// A frame of several blocks cut in its middle gives back the lines of
	// the whole blocks before the cut.
	var big []string
	for i := range 400 {
		big = append(big, fmt.Sprintf(`{"type":"session/title","seq":%d,"time":%d,"data":{"title":%s}}`,
			i, i, messages.JSONString(strings.Repeat(fmt.Sprintf("%x", i*7919), 200))))
	}
	bigEvents := fileEvents(t, big)
	data, err = encodeFile(fileHeader, bigEvents, WriteOptions{Zstd: true, BatchSizes: []int{1}})
	require.NoError(t, err)
	frames, _, err = walkFrames(data)
	require.NoError(t, err)
	last = frames[len(frames)-1]
	cut := last.start + (last.end-last.start)*3/4
	f, err = ParseFile(data[:cut], "s.jsonl.zstd")
	require.NoError(t, err)
	require.NotNil(t, f.Torn)
	require.Equal(t, last.start, f.Torn.Offset)
	require.Greater(t, len(f.Torn.Recovered), 10)
	require.Less(t, len(f.Events), len(bigEvents))
	codecRequireEvents(t, bigEvents[:len(f.Events)], f.Events)
	codecRequireEvents(t, bigEvents[1:len(f.Events)], f.Torn.Recovered)
}

// TestFileZstdSalvagesEveryHeaderShape cuts frames of the three header
// shapes an encoder writes (no content size; single segment; window and
// content size) and checks that what comes back is a prefix of the content
// and, when only the checksum is cut, all of it.
func TestFileZstdSalvagesEveryHeaderShape(t *testing.T) {
	small, err := frameEncoder()
	require.NoError(t, err)
	windowed, err := zstd.NewWriter(nil, zstd.WithWindowSize(1<<20), zstd.WithEncoderCRC(true))
	require.NoError(t, err)
	for _, c := range []struct {
		name    string
		enc     *zstd.Encoder
		size    int
		single  bool
		hasSize bool
	}{
		{"tiny", small, 10, false, false},
		{"single segment", small, 300 << 10, true, true},
		{"window and content size", windowed, 2 << 20, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var content []byte
			for i := 0; len(content) < c.size; i++ {
				content = fmt.Appendf(content, "line %d %x\n", i, i*2654435761)
			}
			frame := c.enc.EncodeAll(content, nil)
			h, err := parseFrameHeader(frame)
			require.NoError(t, err)
			require.Equal(t, c.single, h.window < 0)
			require.Equal(t, c.hasSize, h.hasLen)
			require.Equal(t, content, salvaged(frame[:len(frame)-1]))
			for _, cut := range []int{len(frame) / 3, len(frame) / 2, len(frame) - 6} {
				got := salvaged(frame[:cut])
				require.True(t, bytes.HasPrefix(content, got), "cut %d", cut)
				if c.size > 200<<10 && cut > len(frame)/2 {
					require.NotEmpty(t, got, "whole blocks before cut %d", cut)
				}
			}
		})
	}
}

// Scenario 94: a complete frame holding a partial line is corruption.
func TestFileZstdRejectsCompleteFrameContainingTornRecord(t *testing.T) {
	lines := fileSession()
	data := zstdFrames(t, fileHeaderLine()+"\n", lines[0]+"\n"+lines[1][:20])
	_, err := ParseFile(data, "s.jsonl.zstd")
	requireCorrupt(t, err, 2, -1, "holds a torn JSONL record")

	// Even with the rest of the line in the next frame.
	data = zstdFrames(t, fileHeaderLine()+"\n", lines[0]+"\n"+lines[1][:20], lines[1][20:]+"\n")
	_, err = ParseFile(data, "s.jsonl.zstd")
	requireCorrupt(t, err, 2, -1, "holds a torn JSONL record")
}

func TestFileZstdRejectsDamagedFrames(t *testing.T) {
	lines := fileSession()
	good := zstdFrames(t, fileHeaderLine()+"\n", strings.Join(lines[:5], "\n")+"\n", strings.Join(lines[5:], "\n")+"\n")
	frames, _, err := walkFrames(good)
	require.NoError(t, err)
	require.Len(t, frames, 3)

	flip := func(at int64) []byte {
		d := bytes.Clone(good)
		d[at] ^= 0x55
		return d
	}
	// The checksum of the middle frame.
	_, err = ParseFile(flip(frames[1].end-1), "s.jsonl.zstd")
	requireCorrupt(t, err, 2, -1, "zstd frame at offset")
	// The checksum of the last frame: still a complete frame.
	_, err = ParseFile(flip(frames[2].end-1), "s.jsonl.zstd")
	requireCorrupt(t, err, 7, -1, "zstd frame at offset")
	// The magic of the last frame.
	_, err = ParseFile(flip(frames[2].start), "s.jsonl.zstd")
	requireCorrupt(t, err, 7, -1, "bad zstd magic")
	// The reserved bit of the middle frame's descriptor.
	d := bytes.Clone(good)
	d[frames[1].start+4] |= 0x08
	_, err = ParseFile(d, "s.jsonl.zstd")
	requireCorrupt(t, err, 2, -1, "reserved bit")
	// Garbage after the last frame.
	_, err = ParseFile(append(bytes.Clone(good), "{}\n"...), "s.jsonl.zstd")
	requireCorrupt(t, err, len(lines)+2, -1, "bad zstd magic")
}

// Damage that the scan tolerates inside a complete zstd frame: the tail
// starts at that frame, and its good records are recovered.
func TestScanZstdToleratedDamageRecoversFramePrefix(t *testing.T) {
	lines := fileSession()
	n := len(lines)
	extra := fileTurnLines(int64(n), 3, 2)
	data := zstdFrames(t, fileHeaderLine()+"\n",
		strings.Join(lines, "\n")+"\n",
		extra[0]+"\n"+extra[1]+"\n"+extra[3]+"\n", // seq gap, no turn/end after it
	)
	frames, _, err := walkFrames(data)
	require.NoError(t, err)
	f, err := ParseFile(data, "s.jsonl.zstd")
	require.NoError(t, err)
	require.NotNil(t, f.Torn)
	require.Equal(t, frames[2].start, f.Torn.Offset)
	require.Equal(t, n+4, f.Torn.Line)
	require.EqualValues(t, n+2, f.Torn.NextSeq)
	codecRequireEvents(t, fileEvents(t, append(lines, extra[:2]...)), f.Events)
	codecRequireEvents(t, fileEvents(t, extra[:2]), f.Torn.Recovered)

	// The same gap with a turn/end in a later frame is corruption.
	data = append(data, zstdFrames(t, extra[len(extra)-1]+"\n")...)
	_, err = ParseFile(data, "s.jsonl.zstd")
	requireCorrupt(t, err, n+4, int64(n+2), "seq gap in committed region")
}

// TestFileTruncatedAtEveryByte cuts a plain and a zstd file at every byte:
// the result is an error only while the header is incomplete, and
// otherwise a prefix of the events, never corruption.
func TestFileTruncatedAtEveryByte(t *testing.T) {
	events := fileEvents(t, fileSession())
	for _, opts := range []WriteOptions{{Pack: PackChunks}, {Zstd: true, Pack: PackChunks, BatchSizes: []int{2, 7, 1}}} {
		data, err := encodeFile(fileHeader, events, opts)
		require.NoError(t, err)
		name := "s.jsonl"
		if opts.Zstd {
			name += ".zstd"
		}
		headerEnd := len(fileHeaderLine()) + 1
		if opts.Zstd {
			frames, _, err := walkFrames(data)
			require.NoError(t, err)
			headerEnd = int(frames[0].end)
		}
		for cut := range len(data) + 1 {
			f, err := ParseFile(data[:cut], name)
			if cut < headerEnd {
				require.ErrorIs(t, err, ErrNoHeader, "cut %d", cut)
				continue
			}
			require.NoError(t, err, "cut %d", cut)
			require.LessOrEqual(t, len(f.Events), len(events))
			codecRequireEvents(t, events[:len(f.Events)], f.Events)
			if cut == len(data) {
				require.Nil(t, f.Torn)
				require.Len(t, f.Events, len(events))
			} else if f.Torn != nil {
				require.LessOrEqual(t, f.Torn.Offset, int64(cut))
				require.EqualValues(t, len(f.Events), f.Torn.NextSeq)
			}
		}
	}
}

func TestFileLog(t *testing.T) {
	lines := fileSession()
	path := filepath.Join(t.TempDir(), "session.jsonl.zstd")
	require.NoError(t, WriteFile(path, fileHeader, fileEvents(t, lines), WriteOptions{Zstd: true, Pack: PackChunks, BatchSizes: []int{10}}))
	f, err := ReadFile(path)
	require.NoError(t, err)
	l, err := f.Log()
	require.NoError(t, err)
	require.EqualValues(t, len(lines), l.Len())
	require.Equal(t, fileHeader, l.Header())
	_, _, open := l.OpenTurn()
	require.False(t, open)

	// A torn final frame (its checksum cut): the records recovered from it
	// are part of the log.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	f, err = ParseFile(data[:len(data)-1], path)
	require.NoError(t, err)
	require.NotNil(t, f.Torn)
	require.Len(t, f.Events, len(lines))
	require.Len(t, f.Torn.Recovered, len(lines)-10)
	l, err = f.Log()
	require.NoError(t, err)
	require.EqualValues(t, len(lines), l.Len())

	// The file reader keeps unknown types; the log refuses the ones not
	// marked ignorable.
	unknown := `{"type":"x/unheard-of","seq":21,"time":0,"data":{}}`
	f, err = ParseFile(plainFile(append(lines, unknown)...), "s.jsonl")
	require.NoError(t, err)
	require.Nil(t, f.Torn)
	_, err = f.Log()
	var ut *UnsupportedTypeError
	require.True(t, errors.As(err, &ut), "%v", err)
	f, err = ParseFile(plainFile(append(lines, strings.TrimSuffix(unknown, "}")+`,"ignorable":true}`)...), "s.jsonl")
	require.NoError(t, err)
	_, err = f.Log()
	require.NoError(t, err)
}

// fixtureFiles returns every *.jsonl of the corpus (testdata/harness).
func fixtureFiles(t testing.TB) (root string, paths []string) {
	t.Helper()
	root, err := fixtures.CorpusDir()
	require.NoError(t, err)
	paths, err = fixtures.CorpusFiles()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(paths), 60, "the corpus walk found too few files")
	return root, paths
}

// TestCorpusRoundTrip reads every log of the interop corpus, checks each
// stored line against our encoding of its events, and writes and reads
// every log back in both framings.
func TestCorpusRoundTrip(t *testing.T) {
	rows := 0
	root, paths := fixtureFiles(t)
	for _, path := range paths {
		t.Run(strings.TrimPrefix(path, root+"/"), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			data := fixtures.Substitute(raw)
			f, err := ParseFile(data, path)
			require.NoError(t, err)
			require.Nil(t, f.Torn)
			_, err = f.Log()
			require.NoError(t, err, "the log validates")

			// Every stored line, against the events read.
			lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")[1:]
			seq := 0
			for _, ln := range lines {
				evs, err := DecodeRecord([]byte(ln))
				require.NoError(t, err)
				typ, _ := messages.MustParseJSON(ln).Field("type")
				if strings.HasSuffix(typ.String(), `-chunks"`) {
					rows++
					codecRequireEvents(t, evs, f.Events[seq:seq+len(evs)])
				} else {
					orig := messages.MustParseJSON(ln)
					ours := messages.MustParseJSON(string(AppendEvent(nil, f.Events[seq])))
					require.True(t, orig.Equal(ours), "line of seq %d:\nstored %s\nours   %s", seq, orig, ours)
				}
				seq += len(evs)
			}
			require.Len(t, f.Events, seq)

			// Our packer makes the reference's choices: packing the whole log
			// reproduces the stored lines (the reference packed per write
			// batch, and no run in the corpus crosses a batch).
			if len(f.Events) > 0 {
				ours := strings.Split(strings.TrimSuffix(string(AppendRecords(nil, f.Events, PackChunks)), "\n"), "\n")
				require.Len(t, ours, len(lines))
				for i := range lines {
					require.True(t, messages.MustParseJSON(lines[i]).Equal(messages.MustParseJSON(ours[i])),
						"line %d:\nstored %s\nours   %s", i+2, lines[i], ours[i])
				}
			}

			for _, opts := range []WriteOptions{{Pack: PackChunks}, {Zstd: true, Pack: PackChunks}} {
				out := filepath.Join(t.TempDir(), "session.jsonl")
				require.NoError(t, WriteFile(out, f.Header, f.Events, opts))
				back, err := ReadFile(out)
				require.NoError(t, err)
				require.Nil(t, back.Torn)
				require.Equal(t, f.Header, back.Header)
				codecRequireEvents(t, f.Events, back.Events)
			}
		})
	}
	require.Greater(t, rows, 100, "the corpus has packed rows")
}

// fuzzMaxRecord is the record limit FuzzScanLog reads with: a line over
// it takes the path of a line over DefaultMaxRecordBytes, and an input
// reaches it by decoding tens of kilobytes, not tens of megabytes.
const fuzzMaxRecord = 64 << 10

// FuzzScanLog feeds arbitrary bytes to the scanner: it never panics, and
// what it accepts is a header and events contiguous from seq 0. It reads
// with a record limit of fuzzMaxRecord (see bombSeeds). Run it with
// -fuzzminimizetime=10x (see FuzzParseFileMatchesReference).
func FuzzScanLog(f *testing.F) {
	_, paths := fixtureFiles(f)
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		// Small seeds keep mutation and minimisation quick; a large file
		// contributes its first 4 KiB, which is a torn tail.
		data := fixtures.Substitute(raw)
		if len(data) > 8<<10 {
			data = data[:4<<10]
		}
		f.Add(data, false)
	}
	events := fileEvents(f, fileSession())
	for _, opts := range []WriteOptions{{Pack: PackChunks}, {Zstd: true, Pack: PackChunks, BatchSizes: []int{2, 7, 1}}} {
		data, err := encodeFile(fileHeader, events, opts)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, opts.Zstd)
	}
	for _, data := range bombSeeds() {
		f.Add(data, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, zstdName bool) {
		name := "s.jsonl"
		if zstdName {
			name += ".zstd"
		}
		file, err := Read(bytes.NewReader(data), name, ReadOptions{MaxRecordBytes: fuzzMaxRecord})
		if err != nil {
			return
		}
		for i, e := range file.Events {
			if e.Seq() != int64(i) {
				t.Fatalf("event %d has seq %d", i, e.Seq())
			}
		}
		if file.Torn != nil {
			if file.Torn.NextSeq != int64(len(file.Events)) || file.Torn.Offset > int64(len(data)) || file.Torn.Offset < 0 {
				t.Fatalf("bad torn tail %+v for %d events, %d bytes", *file.Torn, len(file.Events), len(data))
			}
			if n := len(file.Torn.Recovered); n > len(file.Events) {
				t.Fatalf("recovered %d of %d events", n, len(file.Events))
			}
		}
	})
}

// decodeFrame decodes one complete frame as the reader does, streamed.
func decodeFrame(frame []byte) ([]byte, error) {
	fr := newFrameReader()
	defer fr.release()
	if err := fr.reset(frame); err != nil {
		return nil, err
	}
	return io.ReadAll(fr)
}

// salvaged is what the reader decodes of a torn frame: the content of its
// whole blocks, as far as they decode.
func salvaged(raw []byte) []byte {
	frame := salvageFrame(raw)
	if frame == nil {
		return nil
	}
	out, _ := decodeFrame(frame)
	return out
}
