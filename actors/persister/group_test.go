package persister

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
)

// Tests of group commit (group.go): the persister over a groupWriter store
// writes the writes due of many sessions in one appendGroup. They run in
// synctest bubbles: the store holds each commit until the test hands it a
// token, so what queues meanwhile is known exactly.

// groupStore is a fakeStore that also commits groups. Each appendGroup
// reports its sessions on entered and waits for a token; the next commit
// can be made to fail whole, or one session's batch in it. Append (a write
// outside a group) is counted apart: a groupWriter store should not get
// any. Safe for concurrent use.
type groupStore struct {
	fakeStore
	entered chan []session.SessionID
	tokens  chan struct{}

	gmu          sync.Mutex // guards the fields below
	commits      [][]session.SessionID
	durables     []bool // per commit: did it hold a barrier
	direct       int    // Append calls
	failCommits  []error
	failSessions map[session.SessionID]error
}

func newGroupStore() *groupStore {
	return &groupStore{entered: make(chan []session.SessionID, 1024), tokens: make(chan struct{}, 1024),
		failSessions: map[session.SessionID]error{}}
}

func (s *groupStore) Append(ctx context.Context, id session.SessionID, events []session.Event, durable Durability) error {
	s.gmu.Lock()
	s.direct++
	s.gmu.Unlock()
	return s.fakeStore.Append(ctx, id, events, durable)
}

// feed hands out batches one at a time, as the pool hands a group its
// writes.
func feed(batches []groupBatch) func() (groupBatch, bool) {
	return func() (groupBatch, bool) {
		if len(batches) == 0 {
			return groupBatch{}, false
		}
		b := batches[0]
		batches = batches[1:]
		return b, true
	}
}

// drain takes every batch next hands out.
func drain(next func() (groupBatch, bool)) []groupBatch {
	var batches []groupBatch
	for b, ok := next(); ok; b, ok = next() {
		batches = append(batches, b)
	}
	return batches
}

// appendGroup takes every write queued when it starts (the grouping as a
// store that takes its batches up front sees it), then commits as told.
func (s *groupStore) appendGroup(ctx context.Context, next func() (groupBatch, bool)) []error {
	batches := drain(next)
	ids := make([]session.SessionID, len(batches))
	durable := false
	for i, b := range batches {
		ids[i] = b.ID
		durable = durable || b.Durable
	}
	errs := make([]error, len(batches))
	s.entered <- ids
	select {
	case <-s.tokens:
	case <-ctx.Done():
		for i := range errs {
			errs[i] = context.Cause(ctx)
		}
		return errs
	}
	s.gmu.Lock()
	s.commits = append(s.commits, ids)
	s.durables = append(s.durables, durable)
	var commitErr error
	if len(s.failCommits) > 0 {
		commitErr, s.failCommits = s.failCommits[0], s.failCommits[1:]
	}
	failed := map[session.SessionID]error{}
	for _, id := range ids {
		if err := s.failSessions[id]; err != nil {
			failed[id] = err
			delete(s.failSessions, id)
		}
	}
	s.gmu.Unlock()
	for i, b := range batches {
		err := commitErr
		if err == nil {
			err = failed[b.ID]
		}
		if err != nil {
			s.cutBack(b.ID)
			errs[i] = fmt.Errorf("persister: append %s: %w", b.ID, err)
			continue
		}
		errs[i] = s.fakeStore.Append(ctx, b.ID, b.Events, Durability(durable))
	}
	return errs
}

// cutBack drops what id has written since its last durable event, as a
// failed transaction leaves it.
func (s *groupStore) cutBack(id session.SessionID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs != nil {
		s.logs[id] = s.logs[id][:s.synced[id]]
	}
}

// waitCommit waits for the next appendGroup to start and returns its
// sessions.
func (s *groupStore) waitCommit(t *testing.T) []session.SessionID {
	t.Helper()
	select {
	case ids := <-s.entered:
		return ids
	case <-time.After(futureTimeout):
		require.FailNow(t, "timed out waiting for a group commit")
		return nil
	}
}

// release lets n commits (running or future) complete.
func (s *groupStore) release(n int) {
	for range n {
		s.tokens <- struct{}{}
	}
}

func (s *groupStore) failNextCommit(err error) {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	s.failCommits = append(s.failCommits, err)
}

func (s *groupStore) failSession(id session.SessionID, err error) {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	s.failSessions[id] = err
}

func (s *groupStore) stats() (commits [][]session.SessionID, durables []bool, direct int) {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	return slices.Clone(s.commits), slices.Clone(s.durables), s.direct
}

func lastSeqOf(evs []session.Event) int64 { return evs[len(evs)-1].Seq() }

// TestActorGroupCommitCoversManyTurnEnds: while one group commits, the
// turn ends of eight sessions and another session's write-behind batch
// queue up; the next commit takes the turn ends at once, and that one
// commit makes each session durable up to its own last event. The
// write-behind batch follows in a commit of its own, not synced (a group
// that holds a barrier takes no more write-behind batches). Nothing goes
// through Append.
func TestActorGroupCommitCoversManyTurnEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newGroupStore()
		r := newRig(t, Config{Store: store, Window: hourWindow, MaxBatchEvents: 2})
		first := r.track("s-first")
		var ids []session.SessionID
		for i := range 8 {
			ids = append(ids, r.track(fmt.Sprintf("s-turn-%d", i)))
		}
		behind := r.track("s-behind")

		fevs := r.turn(first, 2)
		require.Equal(t, []session.SessionID{first}, store.waitCommit(t))
		bevs := r.append(behind, wbUserDrafts(2)...) // the size bound: a write-behind batch
		synctest.Wait()
		last := map[session.SessionID]int64{}
		for _, id := range ids {
			last[id] = lastSeqOf(r.turn(id, 3))
			synctest.Wait()
		}

		store.release(1)
		r.owner.waitDurable(t, first, lastSeqOf(fevs))
		require.Equal(t, ids, store.waitCommit(t), "one commit for every turn end queued meanwhile")
		store.release(1)
		for _, id := range ids {
			r.owner.waitDurable(t, id, last[id])
			require.Equal(t, last[id], store.lastSeq(id))
		}
		require.Equal(t, []session.SessionID{behind}, store.waitCommit(t), "then the write-behind batch")
		store.release(1)
		synctest.Wait()
		require.Equal(t, lastSeqOf(bevs), store.lastSeq(behind))
		_, ok := r.owner.durableOf(behind)
		require.False(t, ok, "a write-behind batch alone is not durable")

		commits, durables, direct := store.stats()
		require.Len(t, commits, 3, "two commits for nine sessions' turn ends, one for the write-behind batch")
		require.Equal(t, []bool{true, true, false}, durables)
		require.Zero(t, direct, "no write outside a group")
		for _, id := range append(slices.Clone(ids), first) {
			require.Len(t, store.batchesOf(id), 1, "%s: one batch", id)
		}
	})
}

// TestActorGroupCommitWriteBehindAloneIsNotDurable: a commit of
// write-behind batches only holds no barrier: the batches are written, and
// nobody hears Durable for them.
func TestActorGroupCommitWriteBehindAloneIsNotDurable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newGroupStore()
		r := newRig(t, Config{Store: store, Window: hourWindow, MaxBatchEvents: 2})
		a, b := r.track("s-bg-a"), r.track("s-bg-b")
		r.append(a, wbUserDrafts(2)...)
		require.Equal(t, []session.SessionID{a}, store.waitCommit(t))
		r.append(b, wbUserDrafts(2)...)
		synctest.Wait()
		store.release(2)
		require.Equal(t, []session.SessionID{b}, store.waitCommit(t))
		synctest.Wait()
		require.Equal(t, int64(1), store.lastSeq(a))
		require.Equal(t, int64(1), store.lastSeq(b))
		for _, id := range []session.SessionID{a, b} {
			_, ok := r.owner.durableOf(id)
			require.False(t, ok, "%s: a write-behind batch is not durable", id)
		}
		_, durables, _ := store.stats()
		require.Equal(t, []bool{false, false}, durables)
	})
}

// TestActorGroupCommitFailsOnlyTheRefusedSession: one session's batch is
// refused inside a commit; the other session in it is durable, the refused
// one hears WriteFailed and is retried on the backoff, alone, until it is
// durable too.
func TestActorGroupCommitFailsOnlyTheRefusedSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newGroupStore()
		r := newRig(t, Config{Store: store, Window: hourWindow})
		first, a, b := r.track("s-first"), r.track("s-refused"), r.track("s-fine")
		r.turn(first, 1)
		require.Equal(t, []session.SessionID{first}, store.waitCommit(t))
		aevs := r.turn(a, 2)
		synctest.Wait()
		bevs := r.turn(b, 2)
		synctest.Wait()
		store.failSession(a, errWriteDisk)
		store.release(2)
		require.Equal(t, []session.SessionID{a, b}, store.waitCommit(t))

		r.owner.waitDurable(t, b, lastSeqOf(bevs))
		r.owner.waitFor(t, "a's failure", func() bool { return len(r.owner.failuresOf(a)) == 1 })
		require.ErrorIs(t, r.owner.failuresOf(a)[0], errWriteDisk)
		require.Empty(t, r.owner.failuresOf(b))
		_, ok := r.owner.durableOf(a)
		require.False(t, ok)

		start := time.Now()
		require.Equal(t, []session.SessionID{a}, store.waitCommit(t), "the retry commits the refused session alone")
		require.Equal(t, 100*time.Millisecond, time.Since(start), "on the first backoff step")
		store.release(1)
		r.owner.waitDurable(t, a, lastSeqOf(aevs))
		require.Equal(t, lastSeqOf(aevs), store.lastSeq(a))
		require.Len(t, store.batchesOf(a), 1, "nothing of the refused batch was stored")
	})
}

// TestActorGroupCommitFailedCommitFailsEverySessionInIt: a commit that
// fails whole fails each session in it, and only those: each is retried
// and becomes durable; a session committed before is untouched.
func TestActorGroupCommitFailedCommitFailsEverySessionInIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newGroupStore()
		r := newRig(t, Config{Store: store, Window: hourWindow})
		first, a, b := r.track("s-first"), r.track("s-a"), r.track("s-b")
		fevs := r.turn(first, 1)
		require.Equal(t, []session.SessionID{first}, store.waitCommit(t))
		aevs := r.turn(a, 2)
		bevs := r.turn(b, 2)
		synctest.Wait()
		store.failNextCommit(nil) // the first commit succeeds
		store.failNextCommit(errWriteDisk)
		store.release(1)
		r.owner.waitDurable(t, first, lastSeqOf(fevs))
		require.ElementsMatch(t, []session.SessionID{a, b}, store.waitCommit(t))
		store.release(1024)
		for _, id := range []session.SessionID{a, b} {
			r.owner.waitFor(t, string(id)+"'s failure", func() bool { return len(r.owner.failuresOf(id)) >= 1 })
			require.ErrorIs(t, r.owner.failuresOf(id)[0], errWriteDisk)
		}
		r.owner.waitDurable(t, a, lastSeqOf(aevs))
		r.owner.waitDurable(t, b, lastSeqOf(bevs))
		require.Empty(t, r.owner.failuresOf(first))
		for _, id := range []session.SessionID{a, b} {
			require.Len(t, r.owner.failuresOf(id), 1, "%s failed once", id)
			require.Len(t, store.batchesOf(id), 1, "%s: stored once, by the retry", id)
		}
		commits, _, direct := store.stats()
		require.GreaterOrEqual(t, len(commits), 3)
		require.Zero(t, direct)
	})
}

// badGroupStore returns the wrong number of results, or panics.
type badGroupStore struct {
	fakeStore
	panics bool
}

func (s *badGroupStore) appendGroup(ctx context.Context, next func() (groupBatch, bool)) []error {
	drain(next)
	if s.panics {
		panic("store bug")
	}
	return nil
}

// TestAppendGroupSafelyFailsEveryBatchOfABrokenStore: a store that panics
// or answers with the wrong number of results fails every batch of the
// group, each error naming its session.
func TestAppendGroupSafelyFailsEveryBatchOfABrokenStore(t *testing.T) {
	batches := []groupBatch{{ID: "s-x"}, {ID: "s-y", Durable: true}}
	for _, g := range []*badGroupStore{{}, {panics: true}} {
		errs := appendGroupSafely(context.Background(), g, feed(batches))
		require.Len(t, errs, 2)
		for i, err := range errs {
			require.Error(t, err)
			require.Contains(t, err.Error(), string(batches[i].ID))
		}
		if g.panics {
			require.Contains(t, errs[0].Error(), "panicked")
		} else {
			require.Contains(t, errs[0].Error(), "returned 0 results")
		}
	}
	require.False(t, errors.Is(appendGroupSafely(context.Background(), &badGroupStore{}, feed(batches))[0], ErrFenced))
}

// TestActorGroupCommitBoundsWriteBehindBatches: a commit takes at most
// maxGroupBackground write-behind batches, so that a turn end queued
// behind a thousand streaming sessions waits for a short commit; the rest
// follow in the next ones, and a turn end queued meanwhile goes first,
// alone.
func TestActorGroupCommitBoundsWriteBehindBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newGroupStore()
		r := newRig(t, Config{Store: store, Window: hourWindow, MaxBatchEvents: 2})
		first := r.track("s-first")
		var behind []session.SessionID
		for i := range maxGroupBackground + 6 {
			behind = append(behind, r.track(fmt.Sprintf("s-behind-%03d", i)))
		}
		turn := r.track("s-turn")
		r.append(first, wbUserDrafts(2)...)
		require.Equal(t, []session.SessionID{first}, store.waitCommit(t))
		for _, id := range behind {
			r.append(id, wbUserDrafts(2)...)
		}
		synctest.Wait()
		store.release(1)
		require.Len(t, store.waitCommit(t), maxGroupBackground, "write-behind batches are bounded per commit")
		evs := r.turn(turn, 2)
		synctest.Wait()
		store.release(1)
		require.Equal(t, []session.SessionID{turn}, store.waitCommit(t), "the turn end first, alone")
		store.release(1)
		r.owner.waitDurable(t, turn, lastSeqOf(evs))
		require.Len(t, store.waitCommit(t), 6, "then the six batches left")
		store.release(1)
		synctest.Wait()
		for _, id := range behind {
			require.Equal(t, int64(1), store.lastSeq(id))
		}
	})
}

// stepStore is a groupStore whose appendGroup takes its writes one at a
// time, each when the test hands it a step, and reports each on took (""
// when the pool says the group is complete); then it commits as a
// groupStore does. The test decides what is queued when the store takes
// its next write, as a store writing a long group sees it.
type stepStore struct {
	*groupStore
	steps chan struct{}
	took  chan session.SessionID
}

func newStepStore() *stepStore {
	return &stepStore{groupStore: newGroupStore(), steps: make(chan struct{}), took: make(chan session.SessionID)}
}

func (s *stepStore) appendGroup(ctx context.Context, next func() (groupBatch, bool)) []error {
	var batches []groupBatch
	for {
		select {
		case <-s.steps:
		case <-ctx.Done():
			return s.groupStore.appendGroup(ctx, feed(batches))
		}
		b, ok := next()
		if !ok {
			s.took <- ""
			return s.groupStore.appendGroup(ctx, feed(batches))
		}
		s.took <- b.ID
		batches = append(batches, b)
	}
}

// step lets the store take its next write and returns its session ("":
// the group is complete).
func (s *stepStore) step(t *testing.T) session.SessionID {
	t.Helper()
	select {
	case s.steps <- struct{}{}:
	case <-time.After(futureTimeout):
		require.FailNow(t, "timed out waiting for the store to take a write")
	}
	return <-s.took
}

// TestActorGroupCommitTurnEndGoesAheadOfQueuedWriteBehind: a group being
// written takes its writes one at a time, barriers first at every step: a
// turn end queued while a long write-behind group is written joins it
// ahead of the write-behind batches still queued (and makes the group a
// barrier), the group then takes no more write-behind batches, and a
// turn end queued while that group commits is the first write of the next
// group, and its only one: the write-behind batches left follow it.
func TestActorGroupCommitTurnEndGoesAheadOfQueuedWriteBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStepStore()
		r := newRig(t, Config{Store: store, Window: hourWindow, MaxBatchEvents: 2})
		first := r.track("s-first")
		var behind []session.SessionID
		for i := range 2 * maxGroupBackground {
			behind = append(behind, r.track(fmt.Sprintf("s-behind-%03d", i)))
		}
		turnA, turnB := r.track("s-turn-a"), r.track("s-turn-b")

		r.append(first, wbUserDrafts(2)...)
		require.Equal(t, first, store.step(t))
		for _, id := range behind {
			r.append(id, wbUserDrafts(2)...)
		}
		synctest.Wait()
		// The shards queue the batches in their own order: the test checks
		// which kind of write is taken, not which session.
		isBehind := func(id session.SessionID) bool { return slices.Contains(behind, id) }
		takenBehind := map[session.SessionID]bool{}
		for range 10 {
			id := store.step(t)
			require.True(t, isBehind(id), "%s", id)
			takenBehind[id] = true
		}
		aevs := r.turn(turnA, 2)
		synctest.Wait()
		require.Equal(t, turnA, store.step(t), "the turn end joins the group ahead of the write-behind batches queued")
		require.Equal(t, session.SessionID(""), store.step(t),
			"holding a barrier, the group takes no more write-behind batches")
		require.Len(t, store.waitCommit(t), 12)

		bevs := r.turn(turnB, 2)
		synctest.Wait()
		store.release(1)
		r.owner.waitDurable(t, turnA, lastSeqOf(aevs))
		r.owner.waitDurable(t, first, 1) // the turn end's sync covered it
		for id := range takenBehind {
			r.owner.waitDurable(t, id, 1)
		}
		require.Equal(t, turnB, store.step(t), "the turn end queued during the commit goes first in the next group")
		require.Equal(t, session.SessionID(""), store.step(t), "and alone: the write-behind batches left follow it")
		store.release(1)
		r.owner.waitDurable(t, turnB, lastSeqOf(bevs))
		_, durables, direct := store.stats()
		require.Equal(t, []bool{true, true}, durables)
		require.Zero(t, direct)
	})
}
