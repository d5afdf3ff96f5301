package persister

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
)

// The MemStore's own behaviour beyond the Store contract (which the
// conformance suite covers): the failure hook, context handling and the
// refusals the suite leaves to each implementation.

var errDiskFull = errors.New("test: disk full")

// failNext makes the next Append fail with the armed error and store
// nothing; failures are consumed one per Append, in order, and a retry of
// the same batch then succeeds.
func TestMemStoreFailNext(t *testing.T) {
	ctx := t.Context()
	s := NewMemStore()
	b := newLogBuilder(t, "session-fail")
	b.textTurn("hello", "hi")
	k := b.len()
	b.textTurn("again", "hi again")
	require.NoError(t, s.Create(b.header()))

	s.failNext(errDiskFull)
	err := s.Append(ctx, b.id(), b.events()[:k], Sync)
	require.ErrorIs(t, err, errDiskFull)
	requireListed(t, s) // the first batch failed: not even materialized
	_, err = s.Load(ctx, b.id())
	require.ErrorIs(t, err, ErrNotFound)

	require.NoError(t, s.Append(ctx, b.id(), b.events()[:k], Sync))
	rev := revisionOf(t, s, b.id())

	errSecond := errors.New("test: second failure")
	s.failNext(errDiskFull)
	s.failNext(errSecond)
	require.ErrorIs(t, s.Append(ctx, b.id(), b.from(k), Sync), errDiskFull)
	require.ErrorIs(t, s.Append(ctx, b.id(), b.from(k), Sync), errSecond)
	stored, err := s.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, b.events()[:k], stored)
	require.Equal(t, rev, revisionOf(t, s, b.id()))

	// An armed failure fires before the fence: a write error is what the
	// caller sees even for a batch the fence would refuse.
	s.failNext(errDiskFull)
	err = s.Append(ctx, b.id(), b.events()[:1], Sync)
	require.ErrorIs(t, err, errDiskFull)
	require.NotErrorIs(t, err, ErrFenced)

	// failNext(nil) disarms whatever is pending.
	s.failNext(errDiskFull)
	s.failNext(nil)
	require.NoError(t, s.Append(ctx, b.id(), b.from(k), Sync))
	requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)
}

// An operation given a done context fails with its cause and changes
// nothing.
func TestMemStoreContextDone(t *testing.T) {
	s := NewMemStore()
	b := newLogBuilder(t, "session-ctx")
	b.textTurn("hello", "hi")
	turn := b.beginTurn("open")
	require.NoError(t, s.Create(b.header()))

	done, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, s.Append(done, b.id(), b.events(), Sync), context.Canceled)
	requireListed(t, s)
	require.NoError(t, s.Append(t.Context(), b.id(), b.events(), Sync))
	rev := revisionOf(t, s, b.id())

	cause := errors.New("test: caller gave up")
	gaveUp, cancelCause := context.WithCancelCause(t.Context())
	cancelCause(cause)
	_, err := s.Load(gaveUp, b.id())
	require.ErrorIs(t, err, cause)
	require.Equal(t, rev, revisionOf(t, s, b.id()), "a refused Load must not repair")
	_, err = s.Inspect(done, b.id())
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.ReadFrom(done, b.id(), 0)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.List(done)
	require.ErrorIs(t, err, context.Canceled)

	loaded, err := s.Load(t.Context(), b.id())
	require.NoError(t, err)
	require.Len(t, loaded.Closers, 1)
	requireInterruptedEnd(t, loaded.Closers[0], turn)
}

// The refusals a MemStore makes on its own: an invalid header, a zero
// event, a negative ReadFrom seq. An empty batch stores nothing.
func TestMemStoreRefusals(t *testing.T) {
	ctx := t.Context()
	s := NewMemStore()
	bad := storeTestHeader("session-bad")
	bad.Cwd = "relative/path"
	require.Error(t, s.Create(bad))
	bad.Cwd = "/abs"
	require.NoError(t, s.Create(bad), "a refused Create must not register the id")

	b := newLogBuilder(t, "session-refuse")
	b.textTurn("hello", "hi")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), nil, Sync))
	requireListed(t, s) // nothing materialized yet
	err := s.Append(ctx, b.id(), []session.Event{b.events()[0], {}}, Sync)
	require.ErrorIs(t, err, session.ErrInvalid)
	requireListed(t, s)

	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
	rev := revisionOf(t, s, b.id())
	require.NoError(t, s.Append(ctx, b.id(), []session.Event{}, Sync))
	require.Equal(t, rev, revisionOf(t, s, b.id()), "an empty batch changes nothing")
	_, err = s.ReadFrom(ctx, b.id(), -1)
	require.Error(t, err)
}

// Revisions are never reused, across changes and across sessions.
func TestMemStoreRevisionsAreUnique(t *testing.T) {
	ctx := t.Context()
	s := NewMemStore()
	seen := map[Revision]bool{}
	note := func(r Revision) {
		t.Helper()
		require.False(t, seen[r], "revision %q reused", r)
		seen[r] = true
	}
	for _, id := range []session.SessionID{"session-x", "session-y"} {
		b := newLogBuilder(t, id)
		require.NoError(t, s.Create(b.header()))
		b.textTurn("hello", "hi")
		require.NoError(t, s.Append(ctx, id, b.events(), Sync))
		note(revisionOf(t, s, id))
		n := b.len()
		b.beginTurn("open")
		require.NoError(t, s.Append(ctx, id, b.from(n), Sync))
		note(revisionOf(t, s, id))
		loaded, err := s.Load(ctx, id)
		require.NoError(t, err)
		note(loaded.Revision)
	}
}
