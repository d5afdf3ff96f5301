package supervisor

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
)

// gatedReleaseStore is a MemStore whose Release waits for gate while
// gated is set: an untrack the persister completes only after the host
// has stopped waiting for it.
type gatedReleaseStore struct {
	*persister.MemStore
	gated    atomic.Bool
	gate     chan struct{}
	releases atomic.Int64
}

func (g *gatedReleaseStore) Release(id session.SessionID) error {
	g.releases.Add(1)
	if g.gated.Load() {
		<-g.gate
	}
	return g.MemStore.Release(id)
}

// A passivation whose untrack outlasts its wait must still learn how the
// untrack ended: the persister may complete it later, and a session left
// resident but untracked would run turns that nothing persists.
func TestPassivationOutwaitedByItsUntrackStillPassivates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := &gatedReleaseStore{MemStore: persister.NewMemStore(), gate: make(chan struct{})}
		const idle = time.Hour
		h := openHost(t, Config{Store: store, IdleTimeout: idle})
		t.Cleanup(func() {
			if store.gated.CompareAndSwap(true, false) {
				close(store.gate)
			}
			_ = h.Close(context.Background())
			// A dead letter during the close starts protoactor's
			// dead-letter throttle, a goroutine waiting on a 1 ms ticker
			// of the bubble's clock; let it fire (fake time) so the bubble
			// ends with no goroutine blocked.
			<-time.After(time.Second)
		})
		id, err := h.Create(ctx, CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
		require.NoError(t, h.WaitIdle(ctx, id))

		// The idle timer fires; the untrack's Release hangs well past the
		// passivation's wait, then completes before the next idle period.
		store.gated.Store(true)
		<-time.After(idle + time.Minute) // fake time: the bubble's clock
		synctest.Wait()
		require.Positive(t, store.releases.Load(), "the passivation untracked the session")
		require.True(t, store.gated.CompareAndSwap(true, false))
		close(store.gate)
		<-time.After(time.Minute)
		synctest.Wait()

		st, err := h.Stats(ctx, id)
		require.NoError(t, err)
		require.False(t, st.Resident, "the session passivated once its untrack completed")

		// It comes back, and what it logs is stored.
		require.NoError(t, h.Followup(ctx, id, userMsg(t, "two")))
		require.NoError(t, h.WaitIdle(ctx, id))
		_, err = h.Flush(ctx, id)
		require.NoError(t, err)
		stored, err := store.Load(ctx, id)
		require.NoError(t, err)
		l, err := session.Restore(stored.Header, stored.Events)
		require.NoError(t, err)
		require.EqualValues(t, 2, l.Turns())
	})
}
