package session

import (
	"bytes"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// compactCases are chunk drafts of every shape: the ones a log keeps as
// their text (plain, escaped, non-ASCII, reasoning, a later index, big
// turn and step numbers) and the ones it keeps verbatim (a tool-call
// delta, data spelled otherwise than AssistantChunk.Draft spells it).
func compactCases(t *testing.T) (drafts []Draft, compact []bool) {
	t.Helper()
	add := func(d Draft, c bool) {
		drafts = append(drafts, d)
		compact = append(compact, c)
	}
	chunk := func(turn, step int64, c messages.StreamChunk) Draft {
		return AssistantChunk{Turn: turn, Step: step, Chunk: c}.Draft()
	}
	add(chunk(1, 1, messages.TextDeltaChunk(0, " the log")), true)
	add(chunk(1, 1, messages.TextDeltaChunk(0, "line\n\t\"quoted\" \\ back")), true)
	add(chunk(1, 1, messages.TextDeltaChunk(0, "héllo ✓ \u2028")), true)
	add(chunk(1, 1, messages.TextDeltaChunk(0, "")), true)
	add(chunk(1, 1, messages.ReasoningDeltaChunk(0, "think")), true)
	add(chunk(1, 1, messages.TextDeltaChunk(12, "later block")), true)
	add(chunk(1, 1, messages.ToolCallDeltaChunk(1, "call_1", `{"a":`)), false)
	// The same chunk written by hand, with an escape AppendQuoted does not
	// use, with its keys in another order, with an extra key: the log keeps
	// each as written.
	add(NewDraft(TypeAssistantChunk, messages.MustParseJSON(
		`{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"\u0041"}}`)), true)
	add(NewDraft(TypeAssistantChunk, messages.MustParseJSON(
		`{"step":1,"turn":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}`)), false)
	add(NewDraft(TypeAssistantChunk, messages.MustParseJSON(
		`{"turn":1,"step":1,"chunk":{"index":0,"type":"text-delta","text":"x"}}`)), false)
	add(NewDraft(TypeAssistantChunk, messages.MustParseJSON(
		`{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x","extra":1}}`)), false)
	return drafts, compact
}

// TestCompactEventsKeepTheirDataExactly: however a chunk, an assistant
// message or a tool result is kept, its data, payload and encoded line
// are exactly those of the draft it was appended from, and the encoded
// log (one event a line, or with packed rows) is the same bytes as that
// of the same events decoded from it.
func TestCompactEventsKeepTheirDataExactly(t *testing.T) {
	l := newTestLog(t)
	appendOK(t, l, TurnStart{Turn: 1}.Draft())
	appendOK(t, l, StepStart{Turn: 1, Step: 1}.Draft())
	drafts, compact := compactCases(t)
	answer, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.TextBlock("done"),
		messages.ToolCallBlock("call_1", "bash", `{"a":1}`)}, messages.ModelSource{Provider: "p", Model: "m"})
	require.NoError(t, err)
	result := messages.NewToolResultMessage("call_1", []messages.ContentBlock{messages.TextBlock("out")}, messages.ToolSucceeded)
	drafts = append(drafts,
		AssistantMessage{Turn: 1, Step: 1, Message: answer, Usage: messages.TokenUsage{InputTokens: 3}, HasUsage: true}.Draft().WithSources([]int64{2, 3, 4, 5, 6}),
		ToolCall{Turn: 1, Step: 1, CallID: "call_1", Name: "bash", Arguments: `{"a":1}`}.Draft(),
		ToolResult{Turn: 1, Step: 1, Message: result, Error: ToolError{Name: "E", Code: "C"}}.Draft())
	compact = append(compact, false, false, false)
	for i, d := range drafts {
		e := appendOK(t, l, d)
		require.Equal(t, d.Data().String(), e.Data().String(), "draft %d", i)
		require.Equal(t, d.Data().Len(), e.DataLen(), "draft %d", i)
		if d.Type() == TypeAssistantChunk {
			require.Equal(t, compact[i], e.flags&flagChunkText != 0, "draft %d kept compact", i)
		}
		if d.hasSources {
			srcs, ok := e.SourceEventSeqs()
			require.True(t, ok)
			require.Equal(t, d.sources, srcs, "draft %d", i)
			require.Equal(t, len(d.sources) >= minSourceRun, e.ext.srcLen > 0, "draft %d keeps its sources as a run", i)
		}
		want, err := decodePayload(d.Type(), d.Data())
		require.NoError(t, err)
		if c, ok := want.(AssistantChunk); ok {
			require.Equal(t, c.Chunk.JSON(), e.Payload().(AssistantChunk).Chunk.JSON(), "draft %d", i)
		} else {
			require.Equal(t, want, e.Payload(), "draft %d", i)
		}
		line := AppendEvent(nil, e)
		decoded, err := DecodeEvent(line)
		require.NoError(t, err)
		require.Equal(t, string(line), string(AppendEvent(nil, decoded)), "draft %d", i)
		require.True(t, decoded.Equal(e), "draft %d", i)
	}
	events := l.Events().Slice()
	for _, packed := range []Packing{Verbatim, PackChunks} {
		enc := AppendRecords(nil, events, packed)
		var back []Event
		for line := range strings.SplitSeq(strings.TrimSuffix(string(enc), "\n"), "\n") {
			evs, err := DecodeRecord([]byte(line))
			require.NoError(t, err)
			back = append(back, evs...)
		}
		requireSameEvents(t, events, back)
		require.Equal(t, string(enc), string(AppendRecords(nil, back, packed)), "packed %v", packed)
	}
	// Another log that mirrors these events, one restored from them, and
	// one restored from their decoded copies hold the same events.
	m := newTestLog(t)
	for _, e := range events {
		require.NoError(t, m.Mirror(e))
	}
	requireSameEvents(t, events, m.Events().Slice())
	r, err := Restore(l.Header(), events)
	require.NoError(t, err)
	requireSameEvents(t, events, r.Events().Slice())
}

// retained returns the heap retained across f after a GC, and what f
// returned.
func retained[T any](f func() T) (int64, T) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v := f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc), v
}

// TestChunkKeepsOnlyItsText: a log keeps about its header and its text
// per streamed chunk (about 80 bytes for one to three words; at most 104), not
// the chunk's whole data (an 80-byte string on top of the header).
func TestChunkKeepsOnlyItsText(t *testing.T) {
	const n = 20_000
	words := []string{" the", " log", " of a", " session", " turn step", " chunk"}
	// The drafts are built inside the measure: what the log keeps of their
	// data is its cost.
	bytes, l := retained(func() *Log {
		l, err := New(logHeader("s"))
		require.NoError(t, err)
		_, err = l.Append(TurnStart{Turn: 1}.Draft(), testNow)
		require.NoError(t, err)
		_, err = l.Append(StepStart{Turn: 1, Step: 1}.Draft(), testNow)
		require.NoError(t, err)
		for i := range n {
			d := AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, words[i%len(words)])}.Draft()
			_, err := l.Append(d, testNow)
			require.NoError(t, err)
		}
		return l
	})
	require.LessOrEqual(t, float64(bytes)/n, 104.0, "bytes retained per chunk")
	runtime.KeepAlive(l)
}

// TestMessageEventsKeepNoSecondCopy: an assistant message or a tool result
// appended from its typed value costs the log little beyond the message
// it holds, not a second copy of it in the event's data.
func TestMessageEventsKeepNoSecondCopy(t *testing.T) {
	const size = 256 << 10
	text := strings.Repeat("0123456789abcdef", size/16)
	answer, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.ModelSource{Provider: "p", Model: "m"})
	require.NoError(t, err)
	result := messages.NewToolResultMessage("call_1", []messages.ContentBlock{messages.TextBlock(text)}, messages.ToolSucceeded)
	l := newTestLog(t)
	appendOK(t, l, TurnStart{Turn: 1}.Draft())
	appendOK(t, l, StepStart{Turn: 1, Step: 1}.Draft())
	appendOK(t, l, ToolCall{Turn: 1, Step: 1, CallID: "call_1", Name: "bash", Arguments: "{}"}.Draft())
	for _, draft := range []func() Draft{
		func() Draft { return AssistantMessage{Turn: 1, Step: 1, Message: answer}.Draft() },
		func() Draft { return ToolResult{Turn: 1, Step: 1, Message: result}.Draft() },
	} {
		// The draft is built inside the measure: what the log keeps of
		// its data is its cost.
		bytes, _ := retained(func() Event {
			e, err := l.Append(draft(), testNow)
			require.NoError(t, err)
			return e
		})
		require.Less(t, bytes, int64(size/8), "bytes retained by the event beyond its message")
	}
}

// ChunkText answers for exactly the chunks kept as their text, with the
// type and token-ness (IsTokenDelta) their decoded payload has, and for
// no other event.
func TestChunkTextAgreesWithPayload(t *testing.T) {
	l := newTestLog(t)
	appendOK(t, l, TurnStart{Turn: 1}.Draft())
	appendOK(t, l, StepStart{Turn: 1, Step: 1}.Draft())
	drafts, compact := compactCases(t)
	drafts = append(drafts, AssistantChunk{Turn: 1, Step: 1, Chunk: messages.UsageChunk(messages.TokenUsage{InputTokens: 1})}.Draft())
	compact = append(compact, false)
	seen := 0
	for i, d := range drafts {
		e := appendOK(t, l, d)
		kind, nonEmpty, ok := e.ChunkText()
		require.Equal(t, compact[i], ok, "draft %d", i)
		if !ok {
			continue
		}
		seen++
		p := e.Payload().(AssistantChunk)
		require.Equal(t, p.Chunk.Type(), kind, "draft %d", i)
		require.Equal(t, p.Chunk.IsTokenDelta(), nonEmpty, "draft %d", i)
	}
	require.Greater(t, seen, 3)
	first, _ := l.Event(0)
	_, _, ok := first.ChunkText()
	require.False(t, ok, "a turn/start")
}

// TestLoadedChunksAreCompactAtOnce: decoding a log's lines gives its
// text and reasoning chunks already in the form the log keeps them in,
// a packed row's members sharing one copy of the row's texts and one
// chunkStep, so that neither the decode nor the Restore after it pays an
// allocation per chunk (both did: a decode built each member's data in
// full, and Restore parsed it again to keep its text); the restored log
// holds the same events, kept as a log that appended them keeps them.
func TestLoadedChunksAreCompactAtOnce(t *testing.T) {
	const chunks = 2000
	l := newTestLog(t)
	appendOK(t, l, TurnStart{Turn: 1}.Draft())
	appendOK(t, l, StepStart{Turn: 1, Step: 1}.Draft())
	words := []string{" the", " log", " of a", " \"session\"", " turn\nstep", " chunk ✓"}
	for i := range chunks {
		c := messages.TextDeltaChunk(0, words[i%len(words)])
		if i%500 == 499 {
			c = messages.ReasoningDeltaChunk(0, words[i%len(words)])
		}
		appendOK(t, l, AssistantChunk{Turn: 1, Step: 1, Chunk: c}.Draft())
	}
	appendOK(t, l, StepEnd{Turn: 1, Step: 1}.Draft())
	events := l.Events().Slice()
	for _, packed := range []Packing{PackChunks, Verbatim} {
		enc := AppendRecords(nil, events, packed)
		var lines [][]byte
		var decoded []Event
		for line := range bytes.SplitSeq(bytes.TrimSuffix(enc, []byte("\n")), []byte("\n")) {
			lines = append(lines, line)
			evs, err := DecodeRecord(line)
			require.NoError(t, err)
			decoded = append(decoded, evs...)
		}
		requireSameEvents(t, events, decoded)
		for i, e := range decoded {
			if e.Type() == TypeAssistantChunk {
				require.Equal(t, dataChunkText, e.dataForm(), "packed %v: event %d keeps its text only", packed, i)
				require.Equal(t, events[i].payload, e.payload, "packed %v: event %d", packed, i)
			}
		}
		if packed == PackChunks {
			row := slices.IndexFunc(lines, func(b []byte) bool { return bytes.HasPrefix(b, []byte(`{"type":"text-chunks"`)) })
			require.GreaterOrEqual(t, row, 0)
			members, err := DecodeRecord(lines[row])
			require.NoError(t, err)
			require.Greater(t, len(members), 400)
			for _, m := range members {
				require.Same(t, members[0].payload.(*chunkStep), m.payload.(*chunkStep))
			}
			allocs := testing.AllocsPerRun(20, func() { _, _ = DecodeRecord(lines[row]) })
			require.LessOrEqual(t, allocs, 20.0, "allocations to decode a row of %d members", len(members))
		}
		allocs := testing.AllocsPerRun(20, func() {
			_, err := Restore(l.Header(), decoded)
			require.NoError(t, err)
		})
		require.LessOrEqual(t, allocs, float64(chunks)/20, "packed %v: allocations to restore %d chunks", packed, chunks)
		r, err := Restore(l.Header(), decoded)
		require.NoError(t, err)
		require.True(t, reflect.DeepEqual(events, r.Events().Slice()), "packed %v: the restored log keeps its events as the log that appended them", packed)
	}
}

// TestCutIntLiteral: only an integer as strconv writes it, and safe, is
// read; what follows it is left.
func TestCutIntLiteral(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int64
		rest string
		ok   bool
	}{
		{"0", 0, "", true}, {"7,", 7, ",", true}, {"-12}", -12, "}", true}, {"1.5", 1, ".5", true},
		{"9007199254740991", maxSafe, "", true}, {"-9007199254740991x", -maxSafe, "x", true},
		{"9007199254740992", 0, "", false}, {"12345678901234567890", 0, "", false},
		{"-0", 0, "", false}, {"01", 0, "", false}, {"-01", 0, "", false}, {"", 0, "", false},
		{"-", 0, "", false}, {"x1", 0, "", false}, {"+1", 0, "", false},
	} {
		n, rest, ok := cutIntLiteral(c.in)
		require.Equal(t, c.ok, ok, "%q", c.in)
		if ok {
			require.Equal(t, c.n, n, "%q", c.in)
			require.Equal(t, c.rest, rest, "%q", c.in)
		}
	}
}
