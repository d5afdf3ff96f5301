package persister

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// The Store conformance suite: one set of cases, named after the
// reference's persistence test scenarios, run against every Store
// implementation (NATS testAllStoreAllPermutations). A behaviour pinned
// here is part of the Store contract; an implementation-specific behaviour
// (planting a newer format version, an unknown non-ignorable type or a torn
// tail in a file, scenarios 86, 89, 91–94) is tested beside that
// implementation instead, because the generic suite has no way to plant bad
// data through the interface.

// storeFactories makes a fresh, empty store per case. Other test files add
// their implementations from an init function; TestStoreConformance reads
// the map when it runs, so every factory registered by then is covered. A
// factory need not close its store: the suite does (and ignores the
// ErrClosed of a store a case closed already).
var storeFactories = map[string]func(t *testing.T) Store{
	"mem": func(t *testing.T) Store { return NewMemStore() },
}

// conformanceCase is one case of the suite, run on a fresh store.
type conformanceCase struct {
	name string
	run  func(t *testing.T, s Store)
}

var conformanceCases = []conformanceCase{
	{"81 round-trips a session", testRoundTrip},
	{"82 load preserves an interrupted turn", testCrashRecovery},
	{"83 an unstarted tool request gets a retryable result", testUnstartedToolRequest},
	{"84 a recorded tool call asks the model to assess retry risk", testRecordedToolCall},
	{"85 list excludes unmaterialized sessions and append fences", testListAndFence},
	{"86 an unknown type marked ignorable round-trips", testIgnorableUnknownType},
	{"88 resume persists only the suffix", testResume},
	{"read from a seq", testReadFrom},
	{"revisions and list order", testRevisions},
	{"results and inputs are not aliased", testOwnership},
	{"closed store refuses everything", testClosed},
	{"concurrent appends to different sessions", testConcurrentSessions},
	{"concurrent appends at one seq fence all but one", testConcurrentFence},
	{"appends without durable are committed, and a barrier covers them", testUnsyncedAppends},
	{"a failed append cuts back to the last barrier", testFailedAppendCutsBack},
	{"a first append without durable is no barrier", testFirstAppendIsNoBarrier},
}

// TestStoreConformance runs every case against every factory as subtests
// <factory>/<case>, factories in name order.
func TestStoreConformance(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(storeFactories)) {
		factory := storeFactories[name]
		t.Run(name, func(t *testing.T) {
			for _, c := range conformanceCases {
				t.Run(c.name, func(t *testing.T) {
					s := factory(t)
					t.Cleanup(func() { _ = s.Close() })
					c.run(t, s)
				})
			}
		})
	}
}

// Scenario 81: Load returns the same header and Equal events, whether the
// log arrived in one batch or several.
func testRoundTrip(t *testing.T, s Store) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-81")
	b.textTurn("hello", "hi there")
	firstTurn := b.len()
	b.toolTurn("call-81")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:firstTurn], Sync))
	require.NoError(t, s.Append(ctx, b.id(), b.from(firstTurn), Sync))

	got := loadBalanced(t, s, b.id())
	require.Equal(t, b.header(), got.Header)
	requireSameEvents(t, b.events(), got.Events)
	require.Empty(t, got.Closers)
	require.Nil(t, got.Torn)
	require.Equal(t, revisionOf(t, s, b.id()), got.Revision)

	in, err := s.Inspect(ctx, b.id())
	require.NoError(t, err)
	require.Equal(t, b.header(), in.Header)
	requireSameEvents(t, b.events(), in.Events)
	require.Empty(t, in.Closers)
	require.Nil(t, in.Torn)
	require.Equal(t, got.Revision, in.Revision)
}

// Scenario 82: a log of seqs 0..6 left open by a crash while a recorded
// tool call had no result. Inspect shows the three closers (tool/result,
// step/end, turn/end {interrupted}) in memory only; Load commits them (seqs
// 7..9, a new revision), and the log continues at seq 10.
func testCrashRecovery(t *testing.T, s Store) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-82")
	turn := b.beginTurn("list the files")  // 0 turn/start, 1 user/message
	b.beginStep(turn, 1)                   // 2 step/start, 3 request/header
	b.toolRequest(turn, 1, "call-ls")      // 4 assistant/chunk, 5 assistant/message
	call := b.toolCall(turn, 1, "call-ls") // 6 tool/call; the crash comes before its result
	require.Equal(t, int64(7), b.len())
	require.Equal(t, int64(6), call)
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
	rev := revisionOf(t, s, b.id())

	requireClosers := func(t *testing.T, got Stored) {
		t.Helper()
		require.Len(t, got.Events, 10)
		require.Len(t, got.Closers, 3)
		requireSameEvents(t, b.events(), got.Events[:7])
		requireSameEvents(t, got.Closers, got.Events[7:])
		for i, e := range got.Events {
			require.Equal(t, int64(i), e.Seq())
		}
		require.Equal(t, session.TypeToolResult, got.Closers[0].Type())
		require.Equal(t, "TOOL_OUTCOME_UNKNOWN", toolErrorOf(t, got.Closers[0]).Code)
		require.Equal(t, session.TypeStepEnd, got.Closers[1].Type())
		requireInterruptedEnd(t, got.Closers[2], turn)
		require.NoError(t, session.CheckTrace(got.Events))
	}

	in, err := s.Inspect(ctx, b.id())
	require.NoError(t, err)
	requireClosers(t, in)
	require.Equal(t, rev, in.Revision, "Inspect must not change the revision")
	require.Equal(t, rev, revisionOf(t, s, b.id()))
	again, err := s.Inspect(ctx, b.id())
	require.NoError(t, err)
	requireSameEvents(t, in.Events, again.Events)
	require.Equal(t, rev, again.Revision)
	stored, err := s.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, b.events(), stored)

	loaded, err := s.Load(ctx, b.id())
	require.NoError(t, err)
	requireClosers(t, loaded)
	requireSameEvents(t, in.Events, loaded.Events)
	require.NotEqual(t, rev, loaded.Revision, "Load with repair must change the revision")
	require.Equal(t, loaded.Revision, revisionOf(t, s, b.id()))
	stored, err = s.ReadFrom(ctx, b.id(), 7)
	require.NoError(t, err)
	requireSameEvents(t, loaded.Closers, stored)

	// The repair is committed: a second Load has nothing to repair.
	balanced := loadBalanced(t, s, b.id())
	require.Empty(t, balanced.Closers)
	requireSameEvents(t, loaded.Events, balanced.Events)
	require.Equal(t, loaded.Revision, balanced.Revision)

	// A writer still at seq 9 (it never saw the repair) is fenced.
	stale := restoreBuilder(t, b.header(), loaded.Events[:9])
	stale.user("late")
	err = s.Append(ctx, b.id(), stale.from(9), Sync)
	requireFenced(t, err, b.id(), 10, 9)

	next := restoreBuilder(t, b.header(), loaded.Events)
	next.textTurn("try again", "done")
	require.NoError(t, s.Append(ctx, b.id(), next.from(10), Sync))
	requireSameEvents(t, next.events(), loadBalanced(t, s, b.id()).Events)
}

// Scenario 83: a tool the model asked for that never started gets a
// TOOL_NOT_STARTED result (retry it if still needed), before step/end.
func testUnstartedToolRequest(t *testing.T, s Store) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-83")
	b.textTurn("hello", "hi")
	turn := b.beginTurn("read the file")
	b.beginStep(turn, 1)
	b.toolRequest(turn, 1, "call-read")
	n := b.len()
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))

	got, err := s.Load(ctx, b.id())
	require.NoError(t, err)
	require.Len(t, got.Closers, 3)
	result := got.Closers[0]
	require.Equal(t, session.TypeToolResult, result.Type())
	require.Equal(t, n, result.Seq())
	require.Equal(t, session.ToolError{Name: "ToolNotStartedError", Code: "TOOL_NOT_STARTED"}, toolErrorOf(t, result))
	_, cites := result.SourceEventSeqs()
	require.False(t, cites, "an unstarted call has nothing to cite")
	msg, _ := result.Message()
	require.Equal(t, "call-read", msg.Source().CallID())
	require.True(t, msg.Block(0).IsError())
	require.Contains(t, toolResultText(t, result), "before it started")
	require.Equal(t, session.TypeStepEnd, got.Closers[1].Type(), "the result comes before step/end")
	requireInterruptedEnd(t, got.Closers[2], turn)
	require.NoError(t, session.CheckTrace(got.Events))
	requireSameEvents(t, got.Events, loadBalanced(t, s, b.id()).Events)
}

// Scenario 84: a tool call recorded as started whose result was lost gets
// TOOL_OUTCOME_UNKNOWN citing the tool/call, telling the model to assess
// the risk of a retry. Calls of the step that were answered get nothing.
func testRecordedToolCall(t *testing.T, s Store) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-84")
	turn := b.beginTurn("deploy")
	b.beginStep(turn, 1)
	b.toolRequest(turn, 1, "call-build", "call-deploy")
	b.toolResult(turn, 1, "call-build", b.toolCall(turn, 1, "call-build"))
	deploy := b.toolCall(turn, 1, "call-deploy")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))

	got, err := s.Load(ctx, b.id())
	require.NoError(t, err)
	require.Len(t, got.Closers, 3)
	result := got.Closers[0]
	require.Equal(t, session.ToolError{Name: "ToolOutcomeUnknownError", Code: "TOOL_OUTCOME_UNKNOWN"}, toolErrorOf(t, result))
	sources, cites := result.SourceEventSeqs()
	require.True(t, cites)
	require.Equal(t, []int64{deploy}, sources)
	msg, _ := result.Message()
	require.Equal(t, "call-deploy", msg.Source().CallID())
	text := toolResultText(t, result)
	require.Contains(t, text, "outcome is unknown")
	require.Contains(t, text, "idempotent")
	require.Equal(t, session.TypeStepEnd, got.Closers[1].Type())
	requireInterruptedEnd(t, got.Closers[2], turn)
	require.NoError(t, session.CheckTrace(got.Events))
	requireSameEvents(t, got.Events, loadBalanced(t, s, b.id()).Events)
}

// Scenario 85: a created session is invisible until its first append;
// Append refuses a first-seq mismatch, a gap inside the batch and an
// unknown id, storing nothing; Create refuses an id that exists.
func testListAndFence(t *testing.T, s Store) {
	ctx := t.Context()
	idle := newLogBuilder(t, "session-85-idle")
	require.NoError(t, s.Create(idle.header()))
	b := newLogBuilder(t, "session-85")
	b.textTurn("one", "first")
	k := b.len()
	b.textTurn("two", "second")
	require.NoError(t, s.Create(b.header()))
	requireListed(t, s)
	for _, id := range []session.SessionID{idle.id(), b.id()} {
		_, err := s.Load(ctx, id)
		require.ErrorIs(t, err, ErrNotFound)
		_, err = s.Inspect(ctx, id)
		require.ErrorIs(t, err, ErrNotFound)
		_, err = s.ReadFrom(ctx, id, 0)
		require.ErrorIs(t, err, ErrNotFound)
	}

	// The first append must start at seq 0.
	requireFenced(t, s.Append(ctx, b.id(), b.events()[1:3], Sync), b.id(), 0, 1)
	requireListed(t, s)

	require.NoError(t, s.Append(ctx, b.id(), b.events()[:k], Sync))
	requireListed(t, s, b.id())
	rev := revisionOf(t, s, b.id())

	// A writer behind the stored log overlaps it.
	requireFenced(t, s.Append(ctx, b.id(), b.events()[k-1:k+1], Sync), b.id(), k, k-1)
	// A gap in the middle of a batch refuses the whole batch, not a prefix.
	gap := []session.Event{b.events()[k], b.events()[k+1], b.events()[k+3]}
	requireFenced(t, s.Append(ctx, b.id(), gap, Sync), b.id(), k+2, k+3)
	stored, err := s.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, b.events()[:k], stored)
	require.Equal(t, rev, revisionOf(t, s, b.id()), "a refused append must not change the revision")

	err = s.Append(ctx, "session-85-unknown", b.events()[:1], Sync)
	require.ErrorIs(t, err, ErrNotFound)
	require.ErrorIs(t, s.Create(b.header()), ErrExists, "stored")
	require.ErrorIs(t, s.Create(idle.header()), ErrExists, "registered only")
	requireListed(t, s, b.id())

	require.NoError(t, s.Append(ctx, b.id(), b.from(k), Sync))
	requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)
}

// Scenario 86, the part the interface can reach: an event of a type this
// build does not know, marked ignorable, is stored and read back verbatim
// (a newer dsh's plugin event must survive an older one). Refusing another
// format version or an unknown non-ignorable type needs bad data planted
// in storage; the JSONL store's own tests cover those.
func testIgnorableUnknownType(t *testing.T, s Store) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-86")
	b.textTurn("hello", "hi")
	custom := b.add(session.NewDraft("plugin/custom-note", messages.MustParseJSON(`{"note":"kept verbatim","n":[1,2.5,"x"]}`)).AsIgnorable())
	title := b.add(session.NewDraft("session/title", messages.MustParseJSON(`{"title":"greetings"}`)))
	b.textTurn("again", "hi again")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))

	got := loadBalanced(t, s, b.id())
	requireSameEvents(t, b.events(), got.Events)
	e := got.Events[custom.Seq()]
	require.Equal(t, session.EventType("plugin/custom-note"), e.Type())
	require.True(t, e.Ignorable())
	require.JSONEq(t, `{"note":"kept verbatim","n":[1,2.5,"x"]}`, e.Data().String())
	require.False(t, got.Events[title.Seq()].Ignorable())
}

// Scenario 88: a session resumed from Load (session.NewSeeded appends
// session/end-seed) persists only the suffix past the stored cursor and
// continues the seq; re-appending the seed is fenced; a new session on the
// persisted id is refused.
func testResume(t *testing.T, s Store) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-88")
	b.textTurn("hello", "hi")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))

	loaded := loadBalanced(t, s, b.id())
	cursor := int64(len(loaded.Events))
	resumed, err := session.NewSeeded(loaded.Header, loaded.Events, storeTestNow+1000)
	require.NoError(t, err)
	require.Equal(t, cursor, resumed.FirstLiveSeq())
	require.Equal(t, cursor+1, resumed.Len())

	requireFenced(t, s.Append(ctx, b.id(), resumed.Events().Slice(), Sync), b.id(), cursor, 0)
	suffix := resumed.EventsFrom(cursor).Slice()
	require.Len(t, suffix, 1)
	require.Equal(t, session.TypeEndSeed, suffix[0].Type())
	require.NoError(t, s.Append(ctx, b.id(), suffix, Sync))

	r := &logBuilder{t: t, l: resumed, now: storeTestNow + 1000}
	r.textTurn("and now", "continuing")
	require.NoError(t, s.Append(ctx, b.id(), r.from(cursor+1), Sync))
	got := loadBalanced(t, s, b.id())
	requireSameEvents(t, r.events(), got.Events)
	seeds := 0
	for _, e := range got.Events {
		if e.Type() == session.TypeEndSeed {
			seeds++
		}
	}
	require.Equal(t, 1, seeds, "the seed must be written once")

	require.ErrorIs(t, s.Create(b.header()), ErrExists)
}

// ReadFrom returns stored events from a seq on, as stored: all from 0, the
// suffix from the middle, none at or past the end, and never closers.
func testReadFrom(t *testing.T, s Store) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-read")
	b.textTurn("hello", "hi")
	turn := b.beginTurn("open")
	b.beginStep(turn, 1)
	n := b.len()
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
	rev := revisionOf(t, s, b.id())

	for _, from := range []int64{0, 1, 3, n - 1, n, n + 5} {
		got, err := s.ReadFrom(ctx, b.id(), from)
		require.NoError(t, err, "from %d", from)
		if from >= n {
			require.Empty(t, got, "from %d", from)
			continue
		}
		requireSameEvents(t, b.from(from), got)
	}
	require.Equal(t, rev, revisionOf(t, s, b.id()), "ReadFrom must not repair")
	loaded, err := s.Load(ctx, b.id())
	require.NoError(t, err)
	require.Len(t, loaded.Closers, 2) // step/end, turn/end
	require.NoError(t, session.CheckTrace(loaded.Events))
}

// Appends without durable are committed: read, loaded and listed like any
// other. An empty durable append is a barrier alone; Release is one too.
// None of it changes what is stored.
func testUnsyncedAppends(t *testing.T, s Store) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-unsynced")
	b.textTurn("one", "1")
	k1 := b.len()
	b.textTurn("two", "2")
	k2 := b.len()
	b.textTurn("three", "3")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), nil, Sync), "a barrier of nothing stores nothing")
	listed, err := s.List(ctx)
	require.NoError(t, err)
	require.Empty(t, listed)
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:k1], NoSync))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[k1:k2], NoSync))
	got, err := s.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, b.events()[:k2], got)
	require.NoError(t, s.Append(ctx, b.id(), nil, Sync))
	require.NoError(t, s.Append(ctx, b.id(), b.from(k2), NoSync))
	require.NoError(t, s.Release(b.id()))
	loaded := loadBalanced(t, s, b.id())
	requireSameEvents(t, b.events(), loaded.Events)
	require.Empty(t, loaded.Closers)
	require.NoError(t, s.Append(ctx, b.id(), nil, Sync), "a barrier with nothing unsynced")
	requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)
}

// Any failed append, here one whose context is done, leaves the log at its
// last barrier: the events appended without durable since are gone with
// the batch, and appending them again is not fenced.
func testFailedAppendCutsBack(t *testing.T, s Store) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-cut")
	b.textTurn("one", "1")
	k1 := b.len()
	b.textTurn("two", "2")
	k2 := b.len()
	b.textTurn("three", "3")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:k1], Sync))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[k1:k2], NoSync))
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, s.Append(done, b.id(), b.from(k2), Sync), context.Canceled)
	got, err := s.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, b.events()[:k1], got)
	require.NoError(t, s.Append(ctx, b.id(), b.from(k1), Sync), "the events cut off are appended again")
	requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)
}

// A session's first append without durable is no barrier (a store may
// make it durable all the same): a failed append after it cuts the
// session back to nothing durable (its header alone, or nothing stored),
// and the caller, which holds those events as not yet durable, appends
// them again from seq 0 without being fenced.
func testFirstAppendIsNoBarrier(t *testing.T, s Store) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-first")
	b.textTurn("one", "1")
	k1 := b.len()
	b.textTurn("two", "2")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:k1], NoSync))
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, s.Append(done, b.id(), b.from(k1), Sync), context.Canceled)
	got, err := s.ReadFrom(ctx, b.id(), 0)
	if !errors.Is(err, ErrNotFound) {
		require.NoError(t, err)
		require.Empty(t, got, "cut back to the header")
	}
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync), "the events cut off are appended again")
	requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)
}

// List shows materialized sessions sorted by id; a session's revision
// changes with every change to its log (Append, Load with repair) and with
// nothing else (Load of a balanced log, Inspect, ReadFrom, changes to other
// sessions).
func testRevisions(t *testing.T, s Store) {
	ctx := t.Context()
	ids := []session.SessionID{"session-c", "session-a", "session-b"}
	builders := map[session.SessionID]*logBuilder{}
	for _, id := range ids {
		b := newLogBuilder(t, id)
		b.textTurn("hello "+string(id), "hi")
		builders[id] = b
		require.NoError(t, s.Create(b.header()))
		require.NoError(t, s.Append(ctx, id, b.events(), Sync))
	}
	requireListed(t, s, "session-a", "session-b", "session-c")
	listed, err := s.List(ctx)
	require.NoError(t, err)
	for _, l := range listed {
		require.Equal(t, builders[l.Header.ID].header(), l.Header)
		require.NotEmpty(t, l.Revision)
	}

	a, c := builders["session-a"], builders["session-c"]
	revA, revC := revisionOf(t, s, a.id()), revisionOf(t, s, c.id())
	loadBalanced(t, s, a.id())
	_, err = s.Inspect(ctx, a.id())
	require.NoError(t, err)
	_, err = s.ReadFrom(ctx, a.id(), 0)
	require.NoError(t, err)
	require.Equal(t, revA, revisionOf(t, s, a.id()), "reads must not change the revision")

	n := a.len()
	turn := a.beginTurn("open a turn")
	require.NoError(t, s.Append(ctx, a.id(), a.from(n), Sync))
	afterAppend := revisionOf(t, s, a.id())
	require.NotEqual(t, revA, afterAppend)
	require.Equal(t, revC, revisionOf(t, s, c.id()), "another session's append")

	loaded, err := s.Load(ctx, a.id())
	require.NoError(t, err)
	require.Len(t, loaded.Closers, 1)
	requireInterruptedEnd(t, loaded.Closers[0], turn)
	require.NotEqual(t, afterAppend, loaded.Revision)
	require.Equal(t, loaded.Revision, revisionOf(t, s, a.id()))
	require.Equal(t, revC, revisionOf(t, s, c.id()), "another session's repair")
	for _, id := range ids {
		loadBalanced(t, s, id)
	}
}

// Stored says the caller owns what Load returns, and Append must not keep
// the caller's slice: writing through either never reaches the store.
func testOwnership(t *testing.T, s Store) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-own")
	b.textTurn("hello", "hi")
	want := b.events()
	batch := b.events()
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), batch, Sync))
	batch[0] = batch[1]

	got := loadBalanced(t, s, b.id())
	requireSameEvents(t, want, got.Events)
	got.Events[0] = got.Events[1]
	in, err := s.Inspect(ctx, b.id())
	require.NoError(t, err)
	in.Events[0] = in.Events[1]
	read, err := s.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	read[0] = read[1]
	read, err = s.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, want, read)
	requireSameEvents(t, want, loadBalanced(t, s, b.id()).Events)
}

// After Close every operation, Close included, fails with ErrClosed.
func testClosed(t *testing.T, s Store) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-closed")
	b.textTurn("hello", "hi")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:2], Sync))
	require.NoError(t, s.Close())

	require.ErrorIs(t, s.Create(newLogBuilder(t, "session-other").header()), ErrClosed)
	require.ErrorIs(t, s.Append(ctx, b.id(), b.from(2), Sync), ErrClosed)
	_, err := s.Load(ctx, b.id())
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.Inspect(ctx, b.id())
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.ReadFrom(ctx, b.id(), 0)
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.List(ctx)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, s.Close(), ErrClosed)
}

// Appends to different sessions from many goroutines all land.
func testConcurrentSessions(t *testing.T, s Store) {
	ctx := t.Context()
	const sessions = 8
	builders := make([]*logBuilder, sessions)
	for i := range builders {
		b := newLogBuilder(t, session.SessionID(fmt.Sprintf("session-par-%02d", i)))
		b.textTurn("hello", "hi")
		b.toolTurn(fmt.Sprintf("call-%d", i))
		builders[i] = b
	}
	errs := make([]error, sessions)
	var wg sync.WaitGroup
	for i, b := range builders {
		wg.Go(func() {
			errs[i] = func() error {
				if err := s.Create(b.header()); err != nil {
					return err
				}
				events := b.events()
				for start := 0; start < len(events); start += 3 {
					if err := s.Append(ctx, b.id(), events[start:min(start+3, len(events))], Sync); err != nil {
						return err
					}
				}
				return nil
			}()
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	listed, err := s.List(ctx)
	require.NoError(t, err)
	require.Len(t, listed, sessions)
	for _, b := range builders {
		requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)
	}
}

// Writers racing to append at the same seq of one session: exactly one
// wins and its event is what is stored; every other is fenced.
func testConcurrentFence(t *testing.T, s Store) {
	ctx := t.Context()
	const writers = 8
	base := newLogBuilder(t, "session-race")
	base.textTurn("hello", "hi")
	n := base.len()
	require.NoError(t, s.Create(base.header()))
	require.NoError(t, s.Append(ctx, base.id(), base.events(), Sync))

	candidates := make([]session.Event, writers)
	for i := range candidates {
		w := restoreBuilder(t, base.header(), base.events())
		candidates[i] = w.user(fmt.Sprintf("writer %d", i))
		require.Equal(t, n, candidates[i].Seq())
	}
	errs := make([]error, writers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range candidates {
		wg.Go(func() {
			<-start
			errs[i] = s.Append(ctx, base.id(), candidates[i:i+1], Sync)
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "two writers won: %d and %d", winner, i)
			winner = i
			continue
		}
		requireFenced(t, err, base.id(), n+1, n)
	}
	require.NotEqual(t, -1, winner, "no writer won")
	got := loadBalanced(t, s, base.id())
	requireSameEvents(t, append(base.events(), candidates[winner]), got.Events)
}
