package persister

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
)

// Tests of how the committer cuts groups (group.go): with only
// write-behind batches queued it gathers them for groupGather before it
// commits, but never while a barrier is queued; a group holding a barrier
// takes no more write-behind batches but late ones. They run in
// synctest bubbles, whose clock moves only while every goroutine waits:
// the commits' times are exact.

// gatherRig is a pool over a groupStore, and a session per write with a
// first batch of two events to write.
type gatherRig struct {
	store    *groupStore
	p        *pool
	outcomes chan gatherOutcome
}

type gatherOutcome struct {
	id     session.SessionID
	synced bool
	err    error
}

func newGatherRig(t *testing.T) *gatherRig {
	store := newGroupStore()
	p := newPool(0, store, time.Minute, nil)
	t.Cleanup(p.close)
	return &gatherRig{store: store, p: p, outcomes: make(chan gatherOutcome, 2*maxGroupBackground)}
}

// submit queues session id's first two events as a write: a barrier if
// sync, else write-behind.
func (r *gatherRig) submit(t *testing.T, id string, sync bool) session.SessionID {
	b := newLogBuilder(t, session.SessionID(id))
	b.textTurn("one", "1")
	sid := b.id()
	r.p.submitJob(&writeJob{id: sid, batch: b.events()[:2], sync: sync, done: func(synced bool, err error) {
		r.outcomes <- gatherOutcome{sid, synced, err}
	}}, sync)
	return sid
}

// outcomesOf takes n outcomes, by session.
func (r *gatherRig) outcomesOf(n int) map[session.SessionID]gatherOutcome {
	out := map[session.SessionID]gatherOutcome{}
	for range n {
		o := <-r.outcomes
		out[o.id] = o
	}
	return out
}

// TestGroupCommitGathersWriteBehind: a write-behind batch queued alone is
// not committed at once; the committer waits groupGather for more, and
// commits the two batches queued meanwhile as one group, not synced.
// Before, each was a commit of its own, the first at once.
func TestGroupCommitGathersWriteBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGatherRig(t)
		start := time.Now()
		a := r.submit(t, "s-a", false)
		synctest.Wait()
		require.Empty(t, r.store.entered, "no commit of one write-behind batch at once")
		b := r.submit(t, "s-b", false)
		synctest.Wait()
		require.Equal(t, []session.SessionID{a, b}, r.store.waitCommit(t), "one commit of both")
		require.Equal(t, groupGather, time.Since(start), "once the gather is over")
		r.store.release(1)
		require.Equal(t, map[session.SessionID]gatherOutcome{a: {id: a}, b: {id: b}}, r.outcomesOf(2), "written, not synced")

		// The next gather starts with the next write-behind batch.
		start = time.Now()
		c := r.submit(t, "s-c", false)
		require.Equal(t, []session.SessionID{c}, r.store.waitCommit(t))
		require.Equal(t, groupGather, time.Since(start))
		r.store.release(1)
		require.Equal(t, gatherOutcome{id: c}, <-r.outcomes)
	})
}

// TestGroupCommitGatherNeverHoldsABarrier: a barrier queued while the
// committer gathers write-behind batches is committed at once.
func TestGroupCommitGatherNeverHoldsABarrier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGatherRig(t)
		start := time.Now()
		behind := r.submit(t, "s-behind", false)
		synctest.Wait()
		require.Empty(t, r.store.entered, "gathering")
		turn := r.submit(t, "s-turn", true)
		require.Equal(t, []session.SessionID{turn}, r.store.waitCommit(t))
		require.Zero(t, time.Since(start), "at once: the barrier did not wait for the gather")
		r.store.release(1)
		require.Equal(t, gatherOutcome{id: turn, synced: true}, <-r.outcomes)
		require.Equal(t, []session.SessionID{behind}, r.store.waitCommit(t))
		r.store.release(1)
		require.Equal(t, gatherOutcome{id: behind}, <-r.outcomes)
		_, durables, _ := r.store.stats()
		require.Equal(t, []bool{true, false}, durables)
	})
}

// TestGroupCommitGatherEndsAtAFullGroup: once a group's worth of
// write-behind batches (maxGroupBackground) is queued, the committer
// commits them without waiting out the gather.
func TestGroupCommitGatherEndsAtAFullGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGatherRig(t)
		start := time.Now()
		for i := range maxGroupBackground {
			r.submit(t, fmt.Sprintf("s-%03d", i), false)
		}
		require.Len(t, r.store.waitCommit(t), maxGroupBackground)
		require.Zero(t, time.Since(start), "at once")
		r.store.release(1)
		for _, o := range r.outcomesOf(maxGroupBackground) {
			require.NoError(t, o.err)
			require.False(t, o.synced)
		}
	})
}

// TestGroupCommitBarrierGroupTakesNoWriteBehind: a barrier queued
// behind twenty gathered write-behind batches is committed at once, alone;
// the batches follow in a group of their own, not synced, once the oldest
// one's gather is over (the barrier's group does not start it again).
// Before, the barrier's commit took them all.
func TestGroupCommitBarrierGroupTakesNoWriteBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGatherRig(t)
		start := time.Now()
		var behind []session.SessionID
		for i := range 20 {
			behind = append(behind, r.submit(t, fmt.Sprintf("s-behind-%02d", i), false))
		}
		synctest.Wait()
		require.Empty(t, r.store.entered, "gathering")
		<-time.After(groupGather / 2)
		turn := r.submit(t, "s-turn", true)
		require.Equal(t, []session.SessionID{turn}, r.store.waitCommit(t), "the barrier alone")
		require.Equal(t, groupGather/2, time.Since(start), "at once")
		r.store.release(1)
		require.Equal(t, gatherOutcome{id: turn, synced: true}, <-r.outcomes)
		require.Equal(t, behind, r.store.waitCommit(t), "the write-behind batches in a group of their own")
		require.Equal(t, groupGather, time.Since(start), "once the oldest one's gather is over")
		r.store.release(1)
		for id, o := range r.outcomesOf(len(behind)) {
			require.Equal(t, gatherOutcome{id: id}, o)
		}
		_, durables, _ := r.store.stats()
		require.Equal(t, []bool{true, false}, durables)
	})
}

// TestGroupCommitBarrierGroupTakesLateWriteBehind: a write-behind batch
// that has waited groupBehindLate while barriers kept the committer busy
// goes in the next barrier's group (its sync covers it), so that barriers
// that never let up do not hold write-behind batches back.
func TestGroupCommitBarrierGroupTakesLateWriteBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newGatherRig(t)
		start := time.Now()
		first := r.submit(t, "s-first", true)
		require.Equal(t, []session.SessionID{first}, r.store.waitCommit(t))
		behind := r.submit(t, "s-behind", false)
		turn := r.submit(t, "s-turn", true)
		<-time.After(groupBehindLate)
		r.store.release(1)
		require.Equal(t, gatherOutcome{id: first, synced: true}, <-r.outcomes)
		require.Equal(t, []session.SessionID{turn, behind}, r.store.waitCommit(t), "the barrier, then the late batch")
		require.Equal(t, groupBehindLate, time.Since(start))
		r.store.release(1)
		require.Equal(t, map[session.SessionID]gatherOutcome{
			turn:   {id: turn, synced: true},
			behind: {id: behind, synced: true},
		}, r.outcomesOf(2))
	})
}
