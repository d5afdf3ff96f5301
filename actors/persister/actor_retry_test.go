package persister

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestActorFailingStoreRecovers(t *testing.T) {
	store := NewMemStore()
	// The background retry is an hour away: only the flushes write.
	r := newRig(t, Config{Store: store, Window: hourWindow, RetryMin: time.Hour})
	id := r.track("s-fail")
	r.append(id, wbUserDrafts(3)...)

	store.failNext(errWriteDisk)
	ff, ok := r.flush(id).(FlushFailed)
	require.Truef(t, ok, "want FlushFailed")
	require.ErrorIs(t, ff.Err, errWriteDisk)
	require.Equal(t, int64(-1), ff.Durable, "nothing was durable before")
	r.owner.waitFor(t, "WriteFailed", func() bool { return len(r.owner.failuresOf(id)) == 1 })
	require.ErrorIs(t, r.owner.failuresOf(id)[0], errWriteDisk)

	// More events while failing; a second failure; then the store recovers.
	r.append(id, wbUserDrafts(2)...)
	store.failNext(errWriteDisk)
	_, ok = r.flush(id).(FlushFailed)
	require.True(t, ok)
	r.append(id, wbUserDrafts(1)...)
	f, ok := r.flush(id).(Flushed)
	require.Truef(t, ok, "the store recovered")
	require.Equal(t, int64(5), f.Durable)

	evs := r.turn(id, 4)
	r.owner.waitDurable(t, id, evs[len(evs)-1].Seq())
	// Every event exactly once, in order: the fence would have refused a
	// duplicate or a gap, and the store matches the session's log.
	requireEvents(t, r.logOf(id), stored(t, store, id))
}

// TestActorRetryAfterFailureInSynctest: with the background retry an hour
// away, a failed background write waits for the next event, whose window
// retries old and new together (the reference's write-behind).
func TestActorRetryAfterFailureInSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{}
		r := newRig(t, Config{Store: store, RetryMin: time.Hour})
		id := r.track("s-retry")
		store.failNext(errWriteDisk)
		r.append(id, wbUserDrafts(1)...)
		<-time.After(time.Second)
		synctest.Wait()
		require.Len(t, r.owner.failuresOf(id), 1)
		require.Equal(t, 1, store.appendCalls(), "one attempt, no automatic retry")
		r.append(id, wbUserDrafts(1)...)
		<-time.After(200 * time.Millisecond)
		synctest.Wait()
		require.Equal(t, [][]int64{{0, 1}}, store.batchesOf(id))
	})
}

// TestActorRetriesAFailedTurnEndInTheBackground: a turn/end whose write
// fails is retried by the persister on its own, nobody flushing, on the
// documented backoff (100ms, 200ms, 400ms after each failure), each retry
// announced to the owner (Retrying) and each failure reported with its
// attempt and delay, until a write succeeds; then the retries stop.
func TestActorRetriesAFailedTurnEndInTheBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{}
		r := newRig(t, Config{Store: store, Window: hourWindow})
		id := r.track("s-background")
		for range 3 {
			store.failNext(errWriteDisk)
		}
		start := time.Now()
		evs := r.turn(id, 4)
		last := evs[len(evs)-1].Seq()
		r.owner.waitDurable(t, id, last)
		require.Equal(t, 700*time.Millisecond, time.Since(start), "durable at the third retry: 100+200+400ms")
		require.Equal(t, []int{1, 2, 3}, r.owner.attemptsOf(id))
		require.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond},
			r.owner.retryInOf(id))
		require.Equal(t, []int{1, 2, 3}, r.owner.retriesOf(id))
		require.Equal(t, 4, store.appendCalls())
		require.Equal(t, last, store.lastSeq(id))

		<-time.After(time.Minute)
		synctest.Wait()
		require.Equal(t, 4, store.appendCalls(), "no retry once a write succeeded")
		require.Equal(t, []int{1, 2, 3}, r.owner.retriesOf(id))
	})
}

// TestActorFencedWriteIsNotRetriedInTheBackground: a write refused because
// another writer owns the session is reported (RetryIn 0) and left alone.
func TestActorFencedWriteIsNotRetriedInTheBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{}
		r := newRig(t, Config{Store: store, Window: hourWindow})
		id := r.track("s-fenced")
		store.failNext(&LockedError{ID: id, Path: "session.lock", Holder: "pid 1 on elsewhere"})
		r.turn(id, 2)
		<-time.After(time.Hour)
		synctest.Wait()
		require.Equal(t, []int{1}, r.owner.attemptsOf(id))
		require.Equal(t, []time.Duration{0}, r.owner.retryInOf(id))
		require.Empty(t, r.owner.retriesOf(id))
		require.Equal(t, 1, store.appendCalls())
	})
}

func TestConfigRetryDelay(t *testing.T) {
	var got []time.Duration
	for a := 1; a <= 8; a++ {
		got = append(got, Config{}.retryDelay(a))
	}
	ms := time.Millisecond
	require.Equal(t, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5000 * ms, 5000 * ms}, got)
	require.Equal(t, 2*time.Second, Config{RetryMin: 2 * time.Second, RetryMax: time.Second}.retryDelay(5), "RetryMax is raised to RetryMin")
	require.Error(t, Config{Store: NewMemStore(), RetryMin: -1}.validate())
}
