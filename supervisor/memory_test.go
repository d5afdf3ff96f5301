package supervisor

import (
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
)

// A passivated or evicted session leaves nothing of its actors behind: its
// entry, its actors and its log become garbage (only its counters stay,
// see Stats). The persister's shards live as long as the host and every
// session subscribes one; a session that kept a shard watching it stayed
// reachable from the shard, log and all, for the life of the host.
func TestPassivatedSessionIsGarbage(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t, Config{Dir: t.TempDir(), IdleTimeout: time.Millisecond})
	defer h.Close(ctx)
	entries := map[session.SessionID]weak.Pointer[entry]{}
	for range 4 {
		id, err := h.Create(ctx, CreateOptions{})
		require.NoError(t, err)
		h.mu.Lock()
		entries[id] = weak.Make(h.sessions[id])
		h.mu.Unlock()
		require.NoError(t, h.Followup(ctx, id, userMsg(t, "hello")))
		require.NoError(t, h.WaitIdle(ctx, id))
	}
	evicted := session.SessionID("")
	for id := range entries {
		evicted = id
		require.NoError(t, h.Evict(ctx, id))
		break
	}
	deadline := time.Now().Add(10 * time.Second)
	for h.Resident() > 0 || h.Passivated() < int64(len(entries)-1) {
		require.True(t, time.Now().Before(deadline), "sessions still resident")
		runtime.Gosched()
	}
	for {
		runtime.GC()
		live := 0
		for _, w := range entries {
			if w.Value() != nil {
				live++
			}
		}
		if live == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d of %d passivated or evicted sessions are still reachable", live, len(entries))
		runtime.Gosched()
	}
	for id := range entries {
		st, err := h.Stats(ctx, id)
		require.NoError(t, err, "the counters stay")
		require.EqualValues(t, 1, st.Turns, id)
		require.False(t, st.Resident)
	}
	require.NotEmpty(t, evicted)
}
