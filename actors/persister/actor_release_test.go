package persister

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
)

func TestActorUntrackFlushesAndForgets(t *testing.T) {
	store := NewMemStore()
	r := newRig(t, Config{Store: store, Window: hourWindow})
	id := r.track("s-untrack")
	r.append(id, wbUserDrafts(4)...)

	u := request[Flushed](t, r, r.persister, Untrack{Ref: 9, ID: id})
	require.Equal(t, uint64(9), u.Ref)
	require.Equal(t, int64(3), u.Durable)
	requireEvents(t, r.logOf(id), stored(t, store, id))

	ff := request[FlushFailed](t, r, r.persister, Flush{Ref: 10, ID: id, UpTo: -1})
	require.ErrorIs(t, ff.Err, ErrNotTracked)
	ff = request[FlushFailed](t, r, r.persister, Untrack{Ref: 11, ID: id})
	require.ErrorIs(t, ff.Err, ErrNotTracked)
}

// A drained Untrack releases the session in the store before it is
// answered; a failed drain releases nothing; a failed release is the
// Untrack's error and leaves the session tracked.
func TestActorUntrackReleases(t *testing.T) {
	store := &fakeStore{}
	r := newRig(t, Config{Store: store, Window: hourWindow})
	id := r.track("s-release")
	r.append(id, wbUserDrafts(2)...)

	store.failNext(errWriteDisk)
	ff := request[FlushFailed](t, r, r.persister, Untrack{Ref: 1, ID: id})
	require.ErrorIs(t, ff.Err, errWriteDisk)
	require.Empty(t, store.releases(), "a failed drain releases nothing")

	errLockGone := errors.New("lock lost")
	store.failNextRelease(errLockGone)
	ff = request[FlushFailed](t, r, r.persister, Untrack{Ref: 2, ID: id})
	require.ErrorIs(t, ff.Err, errLockGone)
	require.Equal(t, uint64(2), ff.Ref)
	require.Equal(t, int64(1), ff.Durable, "the drain itself succeeded")
	require.Empty(t, store.releases())
	f := r.flush(id).(Flushed)
	require.Equal(t, int64(1), f.Durable, "still tracked after a failed release")

	u := request[Flushed](t, r, r.persister, Untrack{Ref: 3, ID: id})
	require.Equal(t, int64(1), u.Durable)
	require.Equal(t, []session.SessionID{id}, store.releases())
	ff = request[FlushFailed](t, r, r.persister, Flush{Ref: 4, ID: id, UpTo: -1})
	require.ErrorIs(t, ff.Err, ErrNotTracked, "forgotten once released")
}

// gatedReleaseStore is a fakeStore whose Releases wait for a token.
type gatedReleaseStore struct {
	fakeStore
	entered chan session.SessionID // each Release that started waiting
	tokens  chan struct{}          // one per Release to let through; closed at cleanup
}

func (s *gatedReleaseStore) Release(id session.SessionID) error {
	s.entered <- id
	<-s.tokens
	return s.fakeStore.Release(id)
}

// Requests that arrive while a release is in flight: an Untrack is
// answered by a release of its own, a Track keeps the session tracked.
func TestActorRequestsDuringRelease(t *testing.T) {
	store := &gatedReleaseStore{entered: make(chan session.SessionID, 8), tokens: make(chan struct{}, 8)}
	r := newRig(t, Config{Store: store, Window: hourWindow})
	t.Cleanup(func() { close(store.tokens) }) // before the rig stops and joins the pool
	id := r.track("s-during")
	r.append(id, wbUserDrafts(2)...)

	first := r.sys.Root.RequestFuture(r.persister, Untrack{Ref: 1, ID: id}, futureTimeout)
	require.Equal(t, id, <-store.entered)
	second := r.sys.Root.RequestFuture(r.persister, Untrack{Ref: 2, ID: id}, futureTimeout)
	tr := request[Tracked](t, r, r.persister, Track{Ref: 3, Header: wbHeader("s-during"), Session: r.sessions[id], Owner: r.ownerPID})
	require.Equal(t, id, tr.ID)
	store.tokens <- struct{}{}
	res, err := first.Result()
	require.NoError(t, err)
	require.Equal(t, uint64(1), res.(Flushed).Ref)

	// The second Untrack drained after the first release started: it
	// waits for a release of its own.
	require.Equal(t, id, <-store.entered)
	store.tokens <- struct{}{}
	res, err = second.Result()
	require.NoError(t, err)
	require.Equal(t, uint64(2), res.(Flushed).Ref)
	require.Equal(t, []session.SessionID{id, id}, store.releases())

	// The Track came last: the session is tracked.
	require.Equal(t, int64(1), r.flush(id).(Flushed).Durable)
	store.tokens <- struct{}{}
	u := request[Flushed](t, r, r.persister, Untrack{Ref: 5, ID: id})
	require.Equal(t, uint64(5), u.Ref)
	require.Equal(t, id, <-store.entered)
}

// A Track that arrives while the last Untrack's release is in flight keeps
// the session: it stays tracked and persists what comes next.
func TestActorTrackDuringReleaseKeepsTheSession(t *testing.T) {
	store := &gatedReleaseStore{entered: make(chan session.SessionID, 8), tokens: make(chan struct{}, 8)}
	r := newRig(t, Config{Store: store, Window: hourWindow})
	t.Cleanup(func() { close(store.tokens) })
	id := r.track("s-retrack")
	r.append(id, wbUserDrafts(2)...)

	untrack := r.sys.Root.RequestFuture(r.persister, Untrack{Ref: 1, ID: id}, futureTimeout)
	require.Equal(t, id, <-store.entered)
	request[Tracked](t, r, r.persister, Track{Ref: 2, Header: wbHeader("s-retrack"), Session: r.sessions[id], Owner: r.ownerPID})
	store.tokens <- struct{}{}
	res, err := untrack.Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), res.(Flushed).Durable)

	r.append(id, wbUserDrafts(1)...)
	f := r.flush(id).(Flushed)
	require.Equal(t, int64(2), f.Durable, "still tracked: the new event is written")
	require.Equal(t, int64(2), store.lastSeq(id))
}

// With a JSONL store that locks, Untrack gives the session's writer lock
// up: another store (another process) can then load and write it.
func TestActorUntrackReleasesTheWriterLock(t *testing.T) {
	ctx := t.Context()
	m := vfs.NewMem()
	store := newLocking(t, m, memRoot, "persister", JSONLConfig{})
	other := newLocking(t, m, memRoot, "other", JSONLConfig{})
	r := newRig(t, Config{Store: store, Window: hourWindow})
	id := r.track("s-lock")
	evs := r.turn(id, 3)
	r.owner.waitDurable(t, id, evs[len(evs)-1].Seq())
	_, err := other.Load(ctx, id)
	requireLockedBy(t, err, id, "persister")

	request[Flushed](t, r, r.persister, Untrack{Ref: 1, ID: id})
	got, err := other.Load(ctx, id)
	require.NoError(t, err)
	requireEvents(t, r.logOf(id), got.Events)
}
