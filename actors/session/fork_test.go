package session

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// Scenario 28: by default a fork takes the whole (completed) log as the
// child's seed; the child's header names the parent and the seed length,
// and the two logs are detached from then on.
func TestForksLatestCompletedBoundaryByDefault(t *testing.T) {
	parent := sampleLog(t)
	n := parent.Len()
	parentEvents := parent.Events().Slice()

	child, err := parent.Fork("child", LastEvent, 42, testNow+100)
	require.NoError(t, err)

	h := child.Header()
	require.Equal(t, SessionID("child"), h.ID)
	require.Equal(t, "session-test", h.ParentSession)
	require.Equal(t, messages.Some(n), h.SeedLength)
	require.Equal(t, parent.Header().Cwd, h.Cwd)
	require.Equal(t, int64(42), h.CreatedAt)
	require.NoError(t, h.Validate())

	require.Equal(t, n+1, child.Len())
	require.Equal(t, n, child.FirstLiveSeq())
	requireSameEvents(t, parentEvents, child.Events().Slice()[:n])
	last, _ := child.Last()
	require.Equal(t, TypeEndSeed, last.Type())
	require.Equal(t, testNow+100, last.Time())
	requireSameMessages(t, parent.DeriveMessages().Slice(), child.DeriveMessages().Slice())

	// Detached: each side's appends stay its own.
	appendTextTurn(t, child, "child only", "ok")
	require.Equal(t, n, parent.Len())
	requireSameEvents(t, parentEvents, parent.Events().Slice())
	appendTextTurn(t, parent, "parent only", "ok")
	e, _ := child.Event(n + 2)
	require.Equal(t, "child only", firstText(t, e))
	require.NoError(t, CheckTrace(child.Events().Slice()))

	// ForkPrefix hands out a slice the caller owns.
	prefix, err := parent.ForkPrefix(LastEvent)
	require.NoError(t, err)
	prefix[0] = Event{}
	first, _ := parent.Event(0)
	require.Equal(t, TypeTurnStart, first.Type())

	// An empty log forks an empty child, which still marks its seed.
	empty, err := newTestLog(t).Fork("empty-child", LastEvent, 0, testNow)
	require.NoError(t, err)
	require.Equal(t, int64(1), empty.Len())
	require.Equal(t, messages.Some(0), empty.Header().SeedLength)
}

func firstText(t testing.TB, e Event) string {
	t.Helper()
	m, ok := e.Message()
	require.True(t, ok, "%s has no message", e.Type())
	return m.Block(0).Text()
}

// Scenario 29: a boundary inside an open turn is OPEN_TURN; one that is
// not an event of the log is INVALID_BOUNDARY.
func TestRejectsForkBoundaryInsideOpenTurn(t *testing.T) {
	l := newTestLog(t)
	first := appendTextTurn(t, l, "one", "first")
	title := appendOK(t, l, NewDraft("session/title", messages.MustParseJSON(`{"title":"t"}`)))
	second := beginTurn(t, l, "two")
	appendOK(t, l, StepStart{Turn: second.Turn, Step: 1}.Draft())
	n := l.Len()

	forkErr := func(boundary int64) *ForkError {
		t.Helper()
		_, err := l.Fork("child", boundary, 0, testNow)
		require.Error(t, err)
		require.ErrorIs(t, err, ErrFork)
		var fe *ForkError
		require.True(t, errors.As(err, &fe), "%v", err)
		return fe
	}
	for _, b := range []int64{LastEvent, second.Start, second.User, n - 1, first.Start, first.User, first.Assistant} {
		fe := forkErr(b)
		require.Equal(t, ForkOpenTurn, fe.Code, "boundary %d", b)
		require.Contains(t, fe.Error(), "OPEN_TURN")
	}
	for _, b := range []int64{-2, n, n + 10, 1 << 60} {
		require.Equal(t, ForkInvalidBoundary, forkErr(b).Code, "boundary %d", b)
	}
	require.Equal(t, n, l.Len(), "a refused fork touched the parent")

	// The turn/end itself, and log-only events after it, are valid
	// boundaries.
	for _, b := range []int64{first.End, title.Seq()} {
		child, err := l.Fork("child", b, 0, testNow)
		require.NoError(t, err, "boundary %d", b)
		require.Equal(t, messages.Some(b+1), child.Header().SeedLength)
		require.Equal(t, b+2, child.Len())
		_, _, open := child.OpenTurn()
		require.False(t, open)
	}
}

// Scenario 30: a fork inherits a plugin bracket (compaction/start) that
// the still-running parent has open; the child ends with session/end-seed
// after it, and the parent gets no marker.
func TestMarksBracketInheritedFromRunningParent(t *testing.T) {
	parent := newTestLog(t)
	appendTextTurn(t, parent, "one", "first")
	bracket := appendOK(t, parent, NewDraft(TypeCompactionStart,
		messages.MustParseJSON(`{"compactionId":"c1","turn":null}`)))
	n := parent.Len()

	child, err := parent.Fork("child", LastEvent, 0, testNow)
	require.NoError(t, err)
	require.Equal(t, n+1, child.Len())
	inherited, _ := child.Event(bracket.Seq())
	require.True(t, inherited.Equal(bracket))
	last, _ := child.Last()
	require.Equal(t, TypeEndSeed, last.Type())
	require.Equal(t, n, last.Seq())

	require.Equal(t, n, parent.Len())
	for e := range parent.Events().All() {
		require.NotEqual(t, TypeEndSeed, e.Type())
	}
	// The parent closes its bracket; the child is unaffected.
	appendOK(t, parent, NewDraft(TypeCompactionEnd, messages.MustParseJSON(`{"compactionId":"c1","turn":null}`)))
	require.Equal(t, n+1, child.Len())
	last, _ = child.Last()
	require.Equal(t, TypeEndSeed, last.Type())
}
