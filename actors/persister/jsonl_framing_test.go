package persister

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
	"github.com/dshgo/dsh/messages"
)

// ---- scenario 93: framing ----

func TestJSONLFraming(t *testing.T) {
	for _, enc := range encodings {
		for _, pack := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/pack=%v", enc.name, pack), func(t *testing.T) {
				ctx := t.Context()
				s, m := newMemJSONL(t, JSONLConfig{Plain: enc.plain, NoPack: !pack})
				b := newJL(t, "frames")
				b.textTurn("one", 6)
				k1 := b.len()
				b.textTurn("two", 2)
				k2 := b.len()
				b.openToolTurn("call-1")
				require.NoError(t, s.Create(b.header()))
				require.NoError(t, s.Append(ctx, b.id(), b.events()[:k1], Sync))
				path := s.locate(b.header())
				if enc.plain {
					require.True(t, strings.HasSuffix(path, "/session.jsonl"))
				}

				data := readRaw(t, m, path)
				want := append(headerBytes(b.header(), enc.plain), batchBytes(b.events()[:k1], enc.plain, pack)...)
				require.Equal(t, want, data, "the header, then the first batch")
				if !enc.plain {
					hdr := headerBytes(b.header(), false)
					require.NotZero(t, hdr[4]&0x04, "the header frame is checksummed")
					require.NotZero(t, data[len(hdr)+4]&0x04, "the batch frame is checksummed")
				}
				records := string(session.AppendRecords(nil, b.events()[:k1], session.Packing(pack)))
				require.Equal(t, pack, strings.Contains(records, `-chunks"`), "a run of 6 deltas is one row when packing")

				for _, batch := range [][2]int64{{k1, k2}, {k2, b.len()}} {
					before := readRaw(t, m, path)
					events := b.events()[batch[0]:batch[1]]
					require.NoError(t, s.Append(ctx, b.id(), events, Sync))
					after := readRaw(t, m, path)
					require.True(t, bytes.HasPrefix(after, before), "earlier bytes are never rewritten")
					require.Equal(t, batchBytes(events, enc.plain, pack), after[len(before):], "one frame per batch")
				}
				f, err := session.ParseFile(readRaw(t, m, path), path)
				require.NoError(t, err)
				require.Equal(t, !enc.plain, f.Compressed)
				requireSameEvents(t, b.events(), f.Events)
			})
		}
	}
}

// ---- scenario 94: torn frames ----

// The complete records of a torn final frame are kept: Inspect shows them
// with the closers in memory; Load truncates the frame and re-appends them
// with the closers as one new frame.
func TestJSONLTornFrameIsRecovered(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{})
	b := newJL(t, "torn")
	b.textTurn("one", 5)
	k := b.len()
	b.openToolTurn("call-1")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:k], Sync))
	require.NoError(t, s.Append(ctx, b.id(), b.from(k), Sync))
	path := s.locate(b.header())
	whole := readRaw(t, m, path)
	lastFrame := int64(len(whole) - len(batchBytes(b.from(k), false, true)))
	torn := whole[:len(whole)-2] // the crash cut the checksum
	writeRaw(t, m, path, torn)

	// A fresh store, as after a restart.
	s2 := newJSONLOn(t, m, memRoot, JSONLConfig{})
	defer s2.Close()
	rev := jsonlRevision(t, s2, b.id())
	in, err := s2.Inspect(ctx, b.id())
	require.NoError(t, err)
	require.NotNil(t, in.Torn)
	require.Equal(t, lastFrame, in.Torn.Offset)
	requireSameEvents(t, b.from(k), in.Torn.Recovered)
	closers := session.InterruptedTurnClosers(b.events())
	require.Len(t, closers, 3)
	requireSameEvents(t, append(b.events(), closers...), in.Events)
	requireSameEvents(t, closers, in.Closers)
	require.Equal(t, torn, readRaw(t, m, path), "Inspect writes nothing")
	require.Equal(t, rev, in.Revision)
	require.Equal(t, rev, jsonlRevision(t, s2, b.id()))

	read, err := s2.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, b.events(), read) // the recovered records are stored bytes

	got, err := s2.Load(ctx, b.id())
	require.NoError(t, err)
	requireSameEvents(t, in.Events, got.Events)
	require.Equal(t, in.Torn.Offset, got.Torn.Offset)
	require.NotEqual(t, rev, got.Revision)
	after := readRaw(t, m, path)
	require.Equal(t, whole[:lastFrame], after[:lastFrame], "bytes before the torn frame are kept")
	require.Equal(t, batchBytes(append(b.from(k), closers...), false, true), after[lastFrame:],
		"the recovered records and the closers, re-encoded as one frame")
	require.Equal(t, after, readRaw(t, m.CrashClone(), path), "the repair is durable")

	again, err := s2.Load(ctx, b.id())
	require.NoError(t, err)
	require.Nil(t, again.Torn)
	require.Empty(t, again.Closers)
	requireSameEvents(t, got.Events, again.Events)
	require.Equal(t, got.Revision, again.Revision)
}

// A plain file's torn final line is dropped; Load truncates to the last
// good line and appends the closers.
func TestJSONLTornLineIsDropped(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{Plain: true})
	b := newJL(t, "torn-plain")
	b.textTurn("one", 5)
	b.openToolTurn("call-1")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
	path := s.locate(b.header())
	whole := readRaw(t, m, path)
	writeRaw(t, m, path, whole[:len(whole)-9]) // the tool/call line is cut
	committed := int64(bytes.LastIndexByte(whole[:len(whole)-9], '\n') + 1)
	kept := b.events()[:b.len()-1]

	s2 := newJSONLOn(t, m, memRoot, JSONLConfig{Plain: true})
	defer s2.Close()
	got, err := s2.Load(ctx, b.id())
	require.NoError(t, err)
	require.NotNil(t, got.Torn)
	require.Equal(t, committed, got.Torn.Offset)
	closers := session.InterruptedTurnClosers(kept)
	require.Equal(t, "TOOL_NOT_STARTED", closers[0].Payload().(session.ToolResult).Error.Code,
		"the call's tool/call was torn off")
	requireSameEvents(t, append(slices.Clone(kept), closers...), got.Events)
	after := readRaw(t, m, path)
	require.Equal(t, whole[:committed], after[:committed])
	require.Equal(t, session.AppendRecords(nil, closers, session.PackChunks), after[committed:])
}

// A complete frame whose content ends inside a record is not a crash
// artifact (a crash cuts a frame, and a cut frame is not complete): it is
// corruption, and nothing is repaired.
func TestJSONLCompleteFrameWithTornRecordIsCorruption(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{})
	b, k, path := twoTurnsFirstStored(t, s, "bad-frame")
	recs := session.AppendRecords(nil, b.from(k), session.PackChunks)
	bad := append(readRaw(t, m, path), session.AppendZstdFrame(nil, recs[:len(recs)-10])...)
	writeRaw(t, m, path, bad)

	s2 := newJSONLOn(t, m, memRoot, JSONLConfig{})
	defer s2.Close()
	_, err := s2.Load(ctx, b.id())
	require.True(t, IsCorruption(err), "%v", err)
	require.ErrorContains(t, err, "torn JSONL record")
	_, err = s2.Inspect(ctx, b.id())
	require.True(t, IsCorruption(err))
	_, err = s2.ReadFrom(ctx, b.id(), 0)
	require.True(t, IsCorruption(err))
	require.Error(t, s2.Append(ctx, b.id(), b.from(k), Sync))
	require.Equal(t, bad, readRaw(t, m, path), "corruption is never repaired")
}

// Damage followed by a turn/end is in the committed region: corruption.
func TestJSONLDamageBeforeTurnEndIsCorruption(t *testing.T) {
	ctx := t.Context()
	s, m := newMemJSONL(t, JSONLConfig{Plain: true})
	b := newJL(t, "damaged")
	b.textTurn("one", 2)
	b.textTurn("two", 2)
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
	path := s.locate(b.header())
	data := readRaw(t, m, path)
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines[3] = []byte("{not json\n")
	bad := bytes.Join(lines, nil)
	writeRaw(t, m, path, bad)

	s2 := newJSONLOn(t, m, memRoot, JSONLConfig{Plain: true})
	defer s2.Close()
	_, err := s2.Load(ctx, b.id())
	require.True(t, IsCorruption(err), "%v", err)
	var ce *session.CorruptError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 4, ce.Line)
	require.Equal(t, bad, readRaw(t, m, path))
}

// Format version and unknown types are refusals, not damage.
func TestJSONLRefusesUnreadableLogs(t *testing.T) {
	ctx := t.Context()
	h := jlHeader("future")
	for name, c := range map[string]struct {
		body  string
		check func(t *testing.T, err error)
	}{
		"newer version": {
			body: `{"type":"session","version":1,"id":"future","createdAt":1700000000000,"cwd":"/work/proj","delegationDepth":0}` + "\n",
			check: func(t *testing.T, err error) {
				var fv *session.FormatVersionError
				require.ErrorAs(t, err, &fv)
				require.Equal(t, int64(1), fv.Version)
				require.False(t, IsCorruption(err))
			},
		},
		"unknown type": {
			body: h.JSON().String() + "\n" + `{"seq":0,"time":1,"type":"future/event","data":{}}` + "\n",
			check: func(t *testing.T, err error) {
				require.ErrorIs(t, err, session.ErrInvalid)
				var ut *session.UnsupportedTypeError
				require.ErrorAs(t, err, &ut)
				require.False(t, IsCorruption(err))
			},
		},
		"invalid event": {
			body: h.JSON().String() + "\n" + `{"seq":0,"time":1,"type":"turn/start","data":{"turn":1},"surfaceOp":"append"}` + "\n",
			check: func(t *testing.T, err error) {
				require.True(t, IsCorruption(err), "%v", err)
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := vfs.NewMem()
			s := newJSONLOn(t, m, memRoot, JSONLConfig{Plain: true})
			defer s.Close()
			path := s.locate(h)
			writeRaw(t, m, path, []byte(c.body))
			_, err := s.Load(ctx, h.ID)
			c.check(t, err)
			_, err = s.Inspect(ctx, h.ID)
			c.check(t, err)
			require.Equal(t, c.body, string(readRaw(t, m, path)))
		})
	}
}

// An append to a file with a torn tail, before any Load, truncates the
// tail (re-appending what it recovers, without closers) and continues.
func TestJSONLAppendAfterTornTail(t *testing.T) {
	for _, enc := range encodings {
		t.Run(enc.name, func(t *testing.T) {
			ctx := t.Context()
			s, m := newMemJSONL(t, JSONLConfig{Plain: enc.plain})
			b, k, _ := twoTurnsFirstStored(t, s, "continue")
			require.NoError(t, s.Append(ctx, b.id(), b.from(k), Sync))
			path := s.locate(b.header())
			whole := readRaw(t, m, path)
			writeRaw(t, m, path, whole[:len(whole)-2])
			// zstd: the torn frame's records are all recovered; plain: the
			// cut turn/end line is lost.
			next := b.len()
			if enc.plain {
				next--
			}

			s2 := newJSONLOn(t, m, memRoot, JSONLConfig{Plain: enc.plain})
			defer s2.Close()
			c := newJL(t, "continue")
			c.l = mustRestore(t, b.header(), b.events()[:next])
			if enc.plain {
				// Close the turn the crash left open, as the resumed
				// session would have.
				c.add(session.TurnEnd{Turn: 2, Reason: session.TurnEndReason{Kind: session.EndCompleted}}.Draft())
			}
			c.turns = 2
			c.textTurn("three", 3)
			err := s2.Append(ctx, b.id(), c.from(next-1), Sync)
			var fe *FenceError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, next, fe.Want)
			require.NoError(t, s2.Append(ctx, b.id(), c.from(next), Sync))
			got, err := s2.Load(ctx, b.id())
			require.NoError(t, err)
			require.Nil(t, got.Torn)
			require.Empty(t, got.Closers)
			requireSameEvents(t, c.events(), got.Events)
		})
	}
}

func mustRestore(t testing.TB, h session.Header, events []session.Event) *session.Log {
	t.Helper()
	l, err := session.Restore(h, events)
	require.NoError(t, err)
	return l
}

// An ignorable event typed as a packed-row tag (the SQLite format holds
// one) is refused by a JSONL store, whose reader would take the line for a
// malformed row: the error names the seq and nothing of the batch is
// written.
func TestJSONLRefusesAnEventOnlySQLiteHolds(t *testing.T) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-tag")
	b.textTurn("hello", "hi")
	n := b.len()
	b.add(session.NewDraft("text-chunks", messages.MustParseJSON(`{"note":"foreign"}`)).AsIgnorable())
	b.textTurn("again", "hi again")
	js, err := NewJSONLStore(JSONLConfig{Root: t.TempDir()})
	require.NoError(t, err)
	defer js.Close()
	require.NoError(t, js.Create(b.header()))
	require.NoError(t, js.Append(ctx, b.id(), b.events()[:n], Sync))
	err = js.Append(ctx, b.id(), b.from(n), Sync)
	require.ErrorIs(t, err, session.ErrNotJSONL)
	require.ErrorContains(t, err, fmt.Sprintf(`seq %d has type "text-chunks"`, n))
	got, err := js.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, b.events()[:n], got)
}
