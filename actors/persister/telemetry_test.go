package persister

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
)

// Config.Telemetry counts the writes waiting for a store call and their
// events (a barrier that took over a queued write-behind batch once), and
// is told the duration of each durable write that succeeded, and of no
// other write.
func TestTelemetryCountsQueuedWritesAndTimesSyncedOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var synced []time.Duration
		tel := &Telemetry{OnSyncedWrite: func(d time.Duration) {
			mu.Lock()
			synced = append(synced, d)
			mu.Unlock()
		}}
		store := newHeldStore()
		r := newRig(t, Config{Store: store, Window: hourWindow, MaxBatchEvents: 2, FsyncWorkers: 1, Telemetry: tel})
		queued := func() [2]int {
			w, e := tel.Queued()
			return [2]int{w, e}
		}
		busy := r.track("s-busy")
		var behind []session.SessionID
		for i := range 3 {
			behind = append(behind, r.track(fmt.Sprintf("s-behind-%d", i)))
		}
		turn := r.track("s-turn")
		require.Equal(t, [2]int{0, 0}, queued())

		r.append(busy, wbUserDrafts(2)...) // a background write, held in the store
		require.Equal(t, []session.SessionID{busy}, store.waitEntered(t, 1))
		require.Equal(t, [2]int{0, 0}, queued(), "a write the store runs is not queued")
		for _, id := range behind {
			r.append(id, wbUserDrafts(2)...)
			synctest.Wait()
		}
		require.Equal(t, [2]int{3, 6}, queued(), "three background writes of two events")
		evs := r.turn(turn, 3)
		synctest.Wait()
		require.Equal(t, [2]int{4, 6 + len(evs)}, queued(), "and the turn end's barrier")
		fevs := r.turn(behind[1], 1) // its queued batch becomes its barrier's
		synctest.Wait()
		require.Equal(t, [2]int{4, 6 + len(evs) + len(fevs)}, queued(), "the folded batch counts once")

		// The clock moves only while everything waits: the turn end's
		// write takes exactly 7ms of it.
		store.release(busy)
		require.Equal(t, []session.SessionID{turn}, store.waitEntered(t, 1))
		<-time.After(7 * time.Millisecond)
		store.release(turn)
		r.owner.waitDurable(t, turn, evs[len(evs)-1].Seq())
		require.Equal(t, []session.SessionID{behind[1]}, store.waitEntered(t, 1))
		store.release(behind[1])
		r.owner.waitDurable(t, behind[1], fevs[len(fevs)-1].Seq())
		store.release(behind[0])
		store.release(behind[2])
		store.waitEntered(t, 2)
		synctest.Wait()
		require.Equal(t, [2]int{0, 0}, queued())
		mu.Lock()
		require.Equal(t, []time.Duration{7 * time.Millisecond, 0}, synced, "the two synced writes, not the background ones")
		mu.Unlock()

		r.stopPersister()
		require.Equal(t, [2]int{0, 0}, queued(), "a stopped persister has no queue")
	})
}

// With a store that commits groups (SQLite), a group holding a barrier is
// one durable write, timed once; a write-behind group is not timed.
func TestTelemetryTimesADurableGroupCommit(t *testing.T) {
	var synced atomic.Int64
	tel := &Telemetry{OnSyncedWrite: func(d time.Duration) {
		if d > 0 {
			synced.Add(1)
		}
	}}
	store, err := OpenSQLite(filepath.Join(t.TempDir(), "t.sqlite"), SQLiteOptions{})
	require.NoError(t, err)
	defer func() { require.NoError(t, store.Close()) }()
	r := newRig(t, Config{Store: store, Window: hourWindow, MaxBatchEvents: 2, Telemetry: tel})
	id := r.track("s-group")
	r.append(id, wbUserDrafts(2)...) // the size bound: a write behind
	require.Eventually(t, func() bool {
		w, _ := tel.Queued()
		evs, err := store.ReadFrom(context.Background(), id, 0)
		return w == 0 && err == nil && len(evs) == 2
	}, futureTimeout, time.Millisecond)
	require.Zero(t, synced.Load(), "a write behind is not durable")
	_, ok := r.flush(id).(Flushed)
	require.True(t, ok)
	before := synced.Load() // the written batch made durable: a sync, which may be a commit
	require.LessOrEqual(t, before, int64(1))
	r.append(id, wbUserDrafts(1)...)
	_, ok = r.flush(id).(Flushed)
	require.True(t, ok)
	require.Equal(t, before+1, synced.Load(), "the barrier's group commit, timed once")
}
