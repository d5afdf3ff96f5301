package session

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// chunkLog returns a log holding a turn/start, a step/start and then n
// chunks of one draft, built before it: what the log retains is its own
// per-event cost and each chunk's text (four bytes).
func chunkLog(t testing.TB, n int) *Log {
	t.Helper()
	l, err := New(logHeader("s"))
	require.NoError(t, err)
	_, err = l.Append(TurnStart{Turn: 1}.Draft(), testNow)
	require.NoError(t, err)
	_, err = l.Append(StepStart{Turn: 1, Step: 1}.Draft(), testNow)
	require.NoError(t, err)
	d := AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, "tok ")}.Draft()
	for range n {
		_, err := l.Append(d, testNow)
		require.NoError(t, err)
	}
	return l
}

// TestLogRetainsLittlePerEvent holds the log's own cost per event (its
// event header, the slack of its storage, the chunk's turn and step, and
// the text a chunk keeps; about 74 bytes) to at most 96: a chunk's header
// was 120 bytes, in one slice that kept up to a quarter of its length as
// growth slack (149 bytes measured).
func TestLogRetainsLittlePerEvent(t *testing.T) {
	const n = 20_000
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	l := chunkLog(t, n)
	runtime.GC()
	runtime.ReadMemStats(&after)
	perEvent := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
	require.LessOrEqual(t, perEvent, 96.0, "bytes retained per chunk")
	runtime.KeepAlive(l)
}

// TestEventsViewsAcrossPages: views taken at any length (inside a page, at
// a page's end, across pages) keep their length and events while the log
// grows past them, and read the same as the log's events.
func TestEventsViewsAcrossPages(t *testing.T) {
	l := chunkLog(t, 0)
	var views []Events
	var lens []int
	for l.Len() < 3*pageSize+7 {
		if n := l.Len(); n%97 == 0 || n%pageSize == 0 || n%pageSize == pageSize-1 {
			views = append(views, l.Events())
			lens = append(lens, int(n))
		}
		_, err := l.Append(AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, "x")}.Draft(), testNow)
		require.NoError(t, err)
	}
	all := l.Events().Slice()
	require.Len(t, all, int(l.Len()))
	for i, v := range views {
		require.Equal(t, lens[i], v.Len())
		got := v.Slice()
		for k := range got {
			require.Truef(t, all[k].Equal(got[k]), "view %d event %d", i, k)
			require.EqualValues(t, k, v.At(k).Seq())
		}
		k := 0
		for e := range v.All() {
			require.EqualValues(t, k, e.Seq())
			k++
		}
		require.Equal(t, lens[i], k)
		require.Panics(t, func() { v.At(v.Len()) })
	}
	// A view of a view, and EventsFrom, starting inside a page and ending
	// in a later one.
	from := l.EventsFrom(pageSize - 3)
	require.EqualValues(t, pageSize-3, from.At(0).Seq())
	sub := from.View(2, pageSize+5)
	require.Equal(t, pageSize+3, sub.Len())
	for k := range sub.Len() {
		require.EqualValues(t, pageSize-1+k, sub.At(k).Seq())
	}
	for seq := range l.Len() {
		e, ok := l.Event(seq)
		require.True(t, ok)
		require.Equal(t, seq, e.Seq())
	}
}

// TestRefusedBatchAcrossPagesChangesNothing: a batch refused after its
// valid drafts filled a page and started the next one leaves the log as
// it was, and later appends carry on from there.
func TestRefusedBatchAcrossPagesChangesNothing(t *testing.T) {
	for _, start := range []int{pageSize - 5, 2*pageSize - 1, 2 * pageSize} {
		l := chunkLog(t, start-2)
		require.EqualValues(t, start, l.Len())
		view := l.Events()
		before := stateOf(l)
		chunk := AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, "y")}.Draft()
		batch := make([]Draft, 0, pageSize+11)
		for range pageSize + 10 {
			batch = append(batch, chunk)
		}
		batch = append(batch, chunk.WithSurface(AppendOp())) // a chunk is no surface event
		_, err := l.AppendBatch(batch, testNow)
		require.ErrorIs(t, err, ErrInvalid)
		requireUnchanged(t, l, before)
		require.Equal(t, start, view.Len())

		got, err := l.AppendBatch(batch[:pageSize+10], testNow)
		require.NoError(t, err)
		require.Len(t, got, pageSize+10)
		require.EqualValues(t, start, got[0].Seq())
		require.EqualValues(t, start+pageSize+10, l.Len())
		for seq := range l.Len() {
			e, _ := l.Event(seq)
			require.Equal(t, seq, e.Seq())
		}
	}
}

// TestPagesGrowWithoutRecopying: storing a session's worth of events
// allocates at most half as much again as the events themselves. The
// first page grows as a slice does, by a quarter at a time past 256
// elements, and a first page of 1,024 events was copied about twenty
// times on its way there (2.3 times the events' size allocated for 1,000,
// 2.8 for 800), which was the largest cost per appended chunk.
func TestPagesGrowWithoutRecopying(t *testing.T) {
	const eventSize = 64
	for _, n := range []int{800, 1000, 3000} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var p eventPages
		for range n {
			p.push(Event{})
		}
		runtime.ReadMemStats(&after)
		perEvent := float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
		require.LessOrEqual(t, perEvent, 1.5*eventSize, "bytes allocated per event stored, %d events", n)
		require.Equal(t, n, p.len())
	}
}

var draftSink Draft

// A streamed chunk's draft builds no data: it holds the chunk's JSON, and
// the log keeps a delta's text alone (the draft built the event's data
// around the chunk, two allocations a chunk, for the log to cut the text
// out of it again). The event is the same: its data byte for byte, kept
// compact; Draft.Data is that data too, and the size check builds
// nothing either.
func TestChunkDraftBuildsNoData(t *testing.T) {
	text := messages.TextDeltaChunk(3, `tok "q"`)
	require.Zero(t, testing.AllocsPerRun(100, func() {
		draftSink = AssistantChunk{Turn: 1, Step: 1, Chunk: text}.Draft()
	}), "allocations per chunk draft")
	l := chunkLog(t, 0)
	for _, c := range []messages.StreamChunk{text, messages.ReasoningDeltaChunk(0, "hmm"),
		messages.NamedToolCallDeltaChunk(1, "c1", "ls", "{")} {
		d := AssistantChunk{Turn: 1, Step: 1, Chunk: c}.Draft()
		want := `{"turn":1,"step":1,"chunk":` + c.JSON().String() + `}`
		require.Equal(t, want, d.Data().String())
		require.Zero(t, testing.AllocsPerRun(10, func() { _ = CheckDraftSize(d) }), "allocations per size check")
		e, err := l.Append(d, testNow)
		require.NoError(t, err)
		require.Equal(t, want, e.Data().String())
		require.Equal(t, c.Type() != messages.ChunkToolCallDelta, e.dataForm() == dataChunkText, "compact: %s", c.Type())
		p, ok := e.Payload().(AssistantChunk)
		require.True(t, ok)
		require.True(t, p.Chunk.JSON().Equal(c.JSON()))
	}
}
