package persister

import (
	"crypto/sha256"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// plantRow inserts an event row behind the store's back.
func plantRow(t *testing.T, db *sql.DB, id session.SessionID, seq int64, typ string, data any, ignorable any) {
	t.Helper()
	mustExec(t, db, `INSERT INTO events (session_id, seq, type, time, data, ignorable) VALUES (?, ?, ?, ?, ?, ?)`,
		string(id), seq, typ, storeTestNow, data, ignorable)
}

// A read from inside a packed row anchors at it: a stray scalar row hidden
// behind it is a torn start, and a malformed packed row that may cover the
// read's start fails it closed (nothing is read past it).
func TestSQLiteReadFromAnchorsAtPackedRows(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	defer s.Close()
	b := newLogBuilder(t, "session-anchor")
	turn := b.beginTurn("go")
	b.beginStep(turn, 1)
	for i := range 3 {
		b.add(session.AssistantChunk{Turn: turn, Step: 1, Chunk: messages.TextDeltaChunk(0, fmt.Sprint(i))}.Draft())
	}
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:4], Sync))
	require.NoError(t, s.Append(ctx, b.id(), b.from(4), Sync)) // one packed row at seq 4
	db := rawDB(t, path)
	// A stray scalar at seq 5, hidden behind the packed row 4..6.
	plantRow(t, db, b.id(), 5, "assistant/chunk", b.events()[5].Data().String(), nil)
	got, err := s.ReadFrom(ctx, b.id(), 6)
	require.NoError(t, err)
	requireSameEvents(t, b.from(6), got)
	in, err := s.Inspect(ctx, b.id())
	require.NoError(t, err)
	require.Equal(t, int64(5), in.Torn.Offset)
	requireSameEvents(t, b.events(), in.Events[:7])

	mustExec(t, db, `DELETE FROM events WHERE seq = 5`)
	mustExec(t, db, `UPDATE events SET data = '{"turn":1' WHERE seq = 4`)
	got, err = s.ReadFrom(ctx, b.id(), 6)
	require.NoError(t, err)
	require.Empty(t, got)
}

// Torn tail versus committed corruption: a bad row with no turn/end after
// it is a torn tail (Inspect drops it, Load deletes it and closes the
// turn, and appends go on after the closers); a bad row followed by a
// turn/end is corruption, never repaired.
func TestSQLiteTornTailAndCorruption(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	defer s.Close()
	b := newLogBuilder(t, "session-torn")
	b.textTurn("one", "1")
	turn := b.beginTurn("two")
	b.beginStep(turn, 1)
	n := b.len()
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
	db := rawDB(t, path)
	plantRow(t, db, b.id(), n, "assistant/chunk", "{not valid json", nil)
	rev := revisionOf(t, s, b.id())

	in, err := s.Inspect(ctx, b.id())
	require.NoError(t, err)
	require.NotNil(t, in.Torn)
	require.Equal(t, n, in.Torn.Offset)
	require.Len(t, in.Closers, 2)
	require.Equal(t, rev, revisionOf(t, s, b.id()))
	more := restoreBuilder(t, b.header(), b.events())
	more.add(session.AssistantChunk{Turn: turn, Step: 1, Chunk: messages.TextDeltaChunk(0, "late")}.Draft())
	err = s.Append(ctx, b.id(), more.from(n), Sync)
	require.ErrorContains(t, err, fmt.Sprintf("session %s has an invalid physical tail at seq %d", b.id(), n))
	require.True(t, IsCorruption(err))

	loaded, err := s.Load(ctx, b.id())
	require.NoError(t, err)
	require.Len(t, loaded.Closers, 2)
	require.Equal(t, n, loaded.Closers[0].Seq())
	requireInterruptedEnd(t, loaded.Closers[1], turn)
	require.NotEqual(t, rev, loaded.Revision)
	stored, err := s.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, loaded.Events, stored)
	next := restoreBuilder(t, b.header(), loaded.Events)
	next.textTurn("three", "3")
	require.NoError(t, s.Append(ctx, b.id(), next.from(n+2), Sync))
	requireSameEvents(t, next.events(), loadBalanced(t, s, b.id()).Events)

	// Damage before the last turn/end: corruption, for every reader.
	mustExec(t, db, `UPDATE events SET data = 7 WHERE seq = 2`)
	_, err = s.Load(ctx, b.id())
	require.True(t, IsCorruption(err), "%v", err)
	require.ErrorContains(t, err, "invalid committed physical row at seq 2")
	_, err = s.Inspect(ctx, b.id())
	require.True(t, IsCorruption(err))
	_, err = s.ReadFrom(ctx, b.id(), 0)
	require.True(t, IsCorruption(err))
	err = s.Append(ctx, b.id(), nil, Sync)
	require.NoError(t, err, "an empty append reads nothing")
}

// packed runs packRows over events and returns the rows.
func packed(t *testing.T, events []session.Event) []sqlRow {
	t.Helper()
	var rows []sqlRow
	require.NoError(t, packRows(events, func(r sqlRow) error { rows = append(rows, r); return nil }))
	// Every row decodes back to its events, and together they are the batch.
	var back []session.Event
	for _, r := range rows {
		var err error
		back, err = decodeSQLRow(back, r)
		require.NoError(t, err)
	}
	requireSameEvents(t, events, back)
	return rows
}

func rowShape(rows []sqlRow) []string {
	var out []string
	for _, r := range rows {
		n := 1
		if r.ignorable == 0 {
			text, _ := dataText(r.data, sqlMaxPackedData, sqlPackedDecoder())
			j := messages.MustParseJSON(string(text))
			key := "texts"
			if r.typ == sqlTagToolCall {
				key = "args"
			}
			v, _ := j.Field(key)
			n = 0
			for range v.Elements() {
				n++
			}
		}
		out = append(out, fmt.Sprintf("%s:%d", r.typ, n))
	}
	return out
}

// chunkEvents builds a step's chunk events with mk, after the turn's
// scalar prologue (returned separately).
func chunkEvents(t *testing.T, n int, mk func(i int) messages.StreamChunk) (prologue, chunks []session.Event) {
	b := newLogBuilder(t, "session-chunks")
	turn := b.beginTurn("go")
	b.beginStep(turn, 1)
	k := b.len()
	for i := range n {
		b.add(session.AssistantChunk{Turn: turn, Step: 1, Chunk: mk(i)}.Draft())
	}
	return b.events()[:k], b.from(k)
}

// The partition of runs: at most 1024 members a row, at most 1 MiB of
// data, at least 3 members (shorter leftovers and members too large alone
// stay scalar); every kind packs; named and unnamed tool runs stay apart.
func TestSQLitePackingPartition(t *testing.T) {
	text := func(size int) func(int) messages.StreamChunk {
		return func(i int) messages.StreamChunk { return messages.TextDeltaChunk(0, strings.Repeat("x", size)) }
	}
	cases := []struct {
		name string
		n    int
		mk   func(int) messages.StreamChunk
		want []string
	}{
		{"100 members", 100, text(3), []string{"text-chunks:100"}},
		{"1027 members", 1027, text(1), []string{"text-chunks:1024", "text-chunks:3"}},
		{"1025 members", 1025, text(1), []string{"text-chunks:1024", "assistant/chunk:1"}},
		{"4 x 300 KB", 4, text(300 << 10), []string{"text-chunks:3", "assistant/chunk:1"}},
		{"3 x 400 KB", 3, text(400 << 10), []string{"assistant/chunk:1", "assistant/chunk:1", "assistant/chunk:1"}},
		{"2 members", 2, text(1), []string{"assistant/chunk:1", "assistant/chunk:1"}},
		{"reasoning", 5, func(i int) messages.StreamChunk { return messages.ReasoningDeltaChunk(0, "r") }, []string{"reasoning-chunks:5"}},
		{"named tool", 4, func(i int) messages.StreamChunk { return messages.NamedToolCallDeltaChunk(1, "call-1", "shell", "{") },
			[]string{"tool-call-chunks:4"}},
		{"named first, then unnamed", 5, func(i int) messages.StreamChunk {
			if i == 0 {
				return messages.NamedToolCallDeltaChunk(1, "call-1", "shell", "")
			}
			return messages.ToolCallDeltaChunk(1, "call-1", "x")
		}, []string{"assistant/chunk:1", "tool-call-chunks:4"}},
		{"index change breaks a run", 6, func(i int) messages.StreamChunk { return messages.TextDeltaChunk(i/3, "t") },
			[]string{"text-chunks:3", "text-chunks:3"}},
		{"kind change breaks a run", 6, func(i int) messages.StreamChunk {
			if i < 3 {
				return messages.TextDeltaChunk(0, "t")
			}
			return messages.ReasoningDeltaChunk(0, "r")
		}, []string{"text-chunks:3", "reasoning-chunks:3"}},
		{"a usage chunk stays scalar", 7, func(i int) messages.StreamChunk {
			if i == 3 {
				return messages.UsageChunk(messages.TokenUsage{InputTokens: 1})
			}
			return messages.TextDeltaChunk(0, "t")
		}, []string{"text-chunks:3", "assistant/chunk:1", "text-chunks:3"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, chunks := chunkEvents(t, c.n, c.mk)
			rows := packed(t, chunks)
			require.Equal(t, c.want, rowShape(rows))
			for _, r := range rows {
				if r.ignorable == 0 {
					text, err := dataText(r.data, sqlMaxPackedData, sqlPackedDecoder())
					require.NoError(t, err)
					require.LessOrEqual(t, len(text), sqlMaxPackedData)
				}
			}
		})
	}
	// A run broken by a time difference that is not a safe integer, and a
	// gap in seqs (two batches' worth glued), are covered by Continues.
	member := func(seq, time int64) session.PackMember {
		e, err := session.DecodeEvent(fmt.Appendf(nil, `{"type":"assistant/chunk","seq":%d,"time":%d,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}}`, seq, time))
		require.NoError(t, err)
		m, ok := session.Packable(e)
		require.True(t, ok)
		return m
	}
	a := member(1, -maxSafeInt)
	require.False(t, a.Continues(member(2, maxSafeInt)))
	require.False(t, a.Continues(member(3, -maxSafeInt)))
	require.True(t, a.Continues(member(2, -maxSafeInt)))
}

// The compression rule: under 4 KiB TEXT; from 4 KiB a zstd BLOB when
// shorter, else TEXT; a long provenance list is a BLOB far smaller than its
// JSON.
func TestSQLiteCompressionRule(t *testing.T) {
	small := strings.Repeat("a", 4095)
	require.IsType(t, "", dataValue([]byte(small)))
	big := []byte(`"` + strings.Repeat("abc", 3000) + `"`)
	blob, ok := dataValue(big).([]byte)
	require.True(t, ok)
	require.Less(t, len(blob), len(big))
	text, err := dataText(blob, sqlMaxScalarData, sqlScalarDecoder())
	require.NoError(t, err)
	require.Equal(t, big, text)
	incompressible := []byte(fmt.Sprintf("%q", sha256Chain(8192)))
	require.IsType(t, "", dataValue(incompressible), "a frame not shorter stays TEXT")

	seqs := make([]int64, 2000)
	for i := range seqs {
		seqs[i] = int64(i + 9)
	}
	enc, err := appendSources(nil, seqs)
	require.NoError(t, err)
	require.Equal(t, 2000, len(enc))
	require.Less(t, len(enc), len(fmt.Sprint(seqs)))
}

// sha256Chain returns n bytes that do not compress.
func sha256Chain(n int) string {
	var out []byte
	sum := sha256.Sum256(nil)
	for len(out) < n {
		sum = sha256.Sum256(sum[:])
		out = append(out, fmt.Sprintf("%x", sum)...)
	}
	return string(out[:n])
}

// The provenance codec on the reference's worked examples, its edges and
// its refusals.
func TestSQLiteProvenanceCodec(t *testing.T) {
	for _, c := range []struct {
		seqs []int64
		hex  string
	}{
		{[]int64{}, ""},
		{[]int64{64}, "40"},
		{[]int64{2956}, "8C17"},
		{[]int64{9, 10, 11, 12}, "09020202"},
		{[]int64{300, 4, 1500, 2}, "AC02CF04B017B317"},
		{[]int64{1<<53 - 2, 0, 1<<53 - 3}, ""},
	} {
		enc, err := appendSources(nil, c.seqs)
		require.NoError(t, err)
		if c.hex != "" || len(c.seqs) == 0 {
			require.Equal(t, c.hex, fmt.Sprintf("%X", enc))
		}
		dec, err := decodeSources(enc)
		require.NoError(t, err)
		require.Equal(t, c.seqs, dec)
	}
	_, err := appendSources(nil, []int64{-1})
	require.ErrorIs(t, err, errSrcNegative)
	for _, c := range []struct {
		in   []byte
		want error
	}{
		{[]byte{0x80}, errSrcTruncated},
		{[]byte{0x80, 0x00}, errSrcNonCanonical},
		{[]byte{0x00, 0x01}, errSrcSeqRange},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x10}, errSrcRange},
		{[]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}, errSrcRange},
	} {
		_, err := decodeSources(c.in)
		require.ErrorIs(t, err, c.want, "% X", c.in)
	}
}

// Malformed rows are refused whole, each with its reason; a well-formed
// TEXT packed row with negative gaps expands to its members' times.
func TestSQLiteMalformedRows(t *testing.T) {
	good := `{"turn":1,"step":1,"index":0,"dt":[2,-1],"texts":["a","b","c"]}`
	evs, err := decodeSQLRow(nil, sqlRow{seq: 4, time: 90, typ: sqlTagText, data: good, ignorable: 0})
	require.NoError(t, err)
	require.Len(t, evs, 3)
	require.Equal(t, []int64{90, 92, 91}, []int64{evs[0].Time(), evs[1].Time(), evs[2].Time()})
	require.Equal(t, int64(6), evs[2].Seq())

	tool := `{"turn":1,"step":1,"index":0,"dt":[0,0],"id":"c","args":["a","b","c"]}`
	packedCases := map[string]sqlRow{
		"extra key":               {typ: sqlTagText, data: `{"turn":1,"step":1,"index":0,"dt":[0,0],"texts":["a","b","c"],"x":1}`},
		"primitive data":          {typ: sqlTagText, data: `7`},
		"text row with tool keys": {typ: sqlTagText, data: `{"turn":1,"step":1,"index":0,"dt":[0,0],"id":"c","texts":["a","b","c"]}`},
		"tool row without id":     {typ: sqlTagToolCall, data: `{"turn":1,"step":1,"index":0,"dt":[0,0],"args":["a","b","c"]}`},
		"non-string tool id":      {typ: sqlTagToolCall, data: strings.Replace(tool, `"c"`, `5`, 1)},
		"non-string tool name":    {typ: sqlTagToolCall, data: strings.Replace(tool, `"id":"c"`, `"id":"c","name":5`, 1)},
		"string turn":             {typ: sqlTagText, data: strings.Replace(good, `"turn":1`, `"turn":"1"`, 1)},
		"non-array members":       {typ: sqlTagText, data: strings.Replace(good, `["a","b","c"]`, `"abc"`, 1)},
		"two members":             {typ: sqlTagText, data: `{"turn":1,"step":1,"index":0,"dt":[0],"texts":["a","b"]}`},
		"1025 members": {typ: sqlTagText, data: `{"turn":1,"step":1,"index":0,"dt":[` + strings.Repeat("0,", 1023) + `0],"texts":[` +
			strings.Repeat(`"a",`, 1024) + `"a"]}`},
		"non-string member":    {typ: sqlTagText, data: strings.Replace(good, `"b"`, `2`, 1)},
		"non-integer gap":      {typ: sqlTagText, data: strings.Replace(good, `[2,-1]`, `[2,0.5]`, 1)},
		"non-array dt":         {typ: sqlTagText, data: strings.Replace(good, `[2,-1]`, `2`, 1)},
		"dt of the wrong size": {typ: sqlTagText, data: strings.Replace(good, `[2,-1]`, `[2]`, 1)},
		"time overflow":        {typ: sqlTagText, time: maxSafeInt, data: strings.Replace(good, `[2,-1]`, `[2,0]`, 1)},
		"seq overflow":         {typ: sqlTagText, seq: maxSafeInt - 1, data: good},
		"data over 1 MiB":      {typ: sqlTagText, data: strings.Repeat(" ", sqlMaxPackedData+1)},
		"not zstd":             {typ: sqlTagText, data: []byte("not a frame")},
		"expands past 1 MiB":   {typ: sqlTagText, data: sqlEncoder().EncodeAll([]byte(strings.Repeat(" ", sqlMaxPackedData+1)), nil)},
		"a chunk tag needed":   {typ: "turn/start", data: good},
		"surface_op":           {typ: sqlTagText, data: good, op: `"append"`},
		"empty provenance":     {typ: sqlTagText, data: good, sources: []byte{}},
		"integer data":         {typ: sqlTagText, data: int64(5)},
	}
	for name, r := range packedCases {
		r.ignorable = 0
		out, err := decodeSQLRow([]session.Event{}, r)
		require.Error(t, err, name)
		require.Empty(t, out, name)
		var re *rowError
		require.ErrorAs(t, err, &re, name)
		require.NotContains(t, err.Error(), "\n", name)
	}
	scalarCases := map[string]sqlRow{
		"text provenance": {typ: "turn/start", data: `{"turn":1}`, sources: "[1]", ignorable: -1},
		"real data":       {typ: "turn/start", data: 1.5, ignorable: -1},
		"bad ignorable":   {typ: "turn/start", data: `{"turn":1}`, ignorable: 2},
		"not JSON":        {typ: "turn/start", data: `{"turn":`, ignorable: -1},
		"empty type":      {typ: "", data: `{"turn":1}`, ignorable: -1},
		"bad surface_op":  {typ: "turn/start", data: `{"turn":1}`, op: `{`, ignorable: -1},
		"not a zstd blob": {typ: "turn/start", data: []byte{1, 2, 3}, ignorable: -1},
		"negative seq":    {typ: "turn/start", seq: -1, data: `{"turn":1}`, ignorable: -1},
	}
	for name, r := range scalarCases {
		_, err := decodeSQLRow(nil, r)
		require.Error(t, err, name)
	}
	// A scalar row whose type is a chunk tag, marked ignorable, is that
	// logical event, not a packed row.
	evs, err = decodeSQLRow(nil, sqlRow{typ: sqlTagText, data: `{"x":1}`, ignorable: 1})
	require.NoError(t, err)
	require.Equal(t, session.EventType(sqlTagText), evs[0].Type())
	require.True(t, evs[0].Ignorable())
}

// Differential: random streams of every chunk kind (with runs broken by
// index, kind, name and ignorable foreign events) appended in random batch
// partitions read back the same from the SQLite store as from the JSONL
// store and as appended: Load, Inspect, List and every ReadFrom, before and
// after a reopen.
func TestSQLiteMatchesJSONLAcrossPartitions(t *testing.T) {
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(0x5A17E, 1))
	path := filepath.Join(t.TempDir(), "s.sqlite")
	sq := openTestSQLite(t, path, SQLiteOptions{})
	js, err := NewJSONLStore(JSONLConfig{Root: t.TempDir()})
	require.NoError(t, err)
	defer js.Close()
	var ids []session.SessionID
	for run := range 8 {
		b := newLogBuilder(t, session.SessionID(fmt.Sprintf("session-diff-%02d", run)))
		turn := b.beginTurn("go")
		b.beginStep(turn, 1)
		for range 20 + rng.IntN(100) {
			var c messages.StreamChunk
			switch k := rng.IntN(20); {
			case k < 8:
				c = messages.TextDeltaChunk(rng.IntN(2), strings.Repeat("t", rng.IntN(5)))
			case k < 14:
				c = messages.ReasoningDeltaChunk(0, "r")
			case k < 17:
				c = messages.ToolCallDeltaChunk(2, "call-1", "{")
			case k < 18:
				c = messages.NamedToolCallDeltaChunk(2, "call-1", "shell", "")
			case k < 19:
				c = messages.UsageChunk(messages.TokenUsage{InputTokens: 1})
			default:
				b.add(session.NewDraft("plugin/note", messages.MustParseJSON(`{"n":1}`)).AsIgnorable())
				continue
			}
			b.now += int64(rng.IntN(3)) - 1 // gaps of 0, 1 and 2 ms
			b.add(session.AssistantChunk{Turn: turn, Step: 1, Chunk: c}.Draft())
		}
		require.NoError(t, sq.Create(b.header()))
		require.NoError(t, js.Create(b.header()))
		events := b.events()
		for start := 0; start < len(events); {
			end := min(len(events), start+1+rng.IntN(40))
			durable := Durability(rng.IntN(2) == 0)
			require.NoError(t, sq.Append(ctx, b.id(), events[start:end], durable))
			require.NoError(t, js.Append(ctx, b.id(), events[start:end], durable))
			start = end
		}
		ids = append(ids, b.id())
	}
	compare := func(sq Store) {
		for _, id := range ids {
			want, err := js.Inspect(ctx, id)
			require.NoError(t, err)
			got, err := sq.Inspect(ctx, id)
			require.NoError(t, err)
			require.Equal(t, want.Header, got.Header)
			requireSameEvents(t, want.Events, got.Events)
			for from := int64(0); from <= int64(len(want.Events)-len(want.Closers)); from++ {
				w, err := js.ReadFrom(ctx, id, from)
				require.NoError(t, err)
				g, err := sq.ReadFrom(ctx, id, from)
				require.NoError(t, err)
				requireSameEvents(t, w, g)
			}
		}
		wl, err := js.List(ctx)
		require.NoError(t, err)
		gl, err := sq.List(ctx)
		require.NoError(t, err)
		require.Len(t, gl, len(wl))
		for i := range wl {
			require.Equal(t, wl[i].Header, gl[i].Header)
		}
	}
	compare(sq)
	require.NoError(t, sq.Close())
	re := openTestSQLite(t, path, SQLiteOptions{})
	defer re.Close()
	compare(re)
}
