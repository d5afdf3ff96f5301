package persister

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
)

// TestGroupCommitFoldsATurnEndLate: a write-behind batch is in a group
// being committed when its session's turn end is folded into it
// (pool.promote); once that group commits, the committer itself queues
// the rest of the batch, synced, and it is the next group's write: the
// outcome of both is reported once, synced, after the second commit.
// Before, the first write was reported not synced and nothing followed it
// until the session's shard wrote the turn end again.
func TestGroupCommitFoldsATurnEndLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newGroupStore()
		p := newPool(0, store, time.Minute, nil)
		defer p.close()
		b := newLogBuilder(t, "s-late")
		b.textTurn("one", "1")
		evs := b.events()
		require.GreaterOrEqual(t, len(evs), 4)
		type outcome struct {
			synced bool
			err    error
		}
		outcomes := make(chan outcome, 2)
		j := &writeJob{id: b.id(), batch: evs[:2], done: func(synced bool, err error) { outcomes <- outcome{synced, err} }}
		p.submitJob(j, false)
		require.Equal(t, []session.SessionID{b.id()}, store.waitCommit(t))

		folded := false
		p.promote(j, func(late bool) []session.Event {
			require.True(t, late, "the group holds the write: a late fold")
			folded = true
			return evs
		})
		require.True(t, folded)
		store.release(1)
		require.Equal(t, []session.SessionID{b.id()}, store.waitCommit(t), "the rest is the next group's write")
		synctest.Wait()
		require.Empty(t, outcomes, "reported once both are committed")
		store.release(1)
		require.Equal(t, outcome{synced: true}, <-outcomes)
		synctest.Wait()
		require.Empty(t, outcomes, "reported once")

		commits, durables, direct := store.stats()
		require.Len(t, commits, 2)
		require.Equal(t, []bool{false, true}, durables, "the rest is a barrier")
		require.Zero(t, direct)
		require.Equal(t, [][]int64{{0, 1}, seqsOf(evs[2:])}, store.batchesOf(b.id()))
	})
}
