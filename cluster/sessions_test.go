//go:build !race

package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/supervisor"
)

// A dialed client lists and peeks at the sessions through the members'
// shared store when it has one (ClientConfig.Store), so neither brings a
// session in; without one List fails with ErrNoStore and Peek asks the
// session's member.
func TestClusterClientListAndPeek(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	tc := startCluster(t, 1, synthetic.Config{Seed: 3, TextChunks: 5})
	rd, err := persister.OpenReader(tc.dir)
	require.NoError(t, err)
	defer func() { require.NoError(t, rd.Close()) }()
	dial := func(store persister.Reader) *Client {
		cl, err := Dial(ctx, ClientConfig{Peers: tc.peers, Refresh: 100 * time.Millisecond, RequestTimeout: 3 * time.Second, Store: store})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	bare, stored := dial(nil), dial(rd)

	id, err := stored.Create(ctx, supervisor.CreateOptions{})
	require.NoError(t, err)
	// Not written yet: Peek asks the member.
	info, evs, err := stored.Peek(ctx, id, 0)
	require.NoError(t, err)
	require.True(t, info.Resident)
	require.Equal(t, id, info.Header.ID)
	require.Empty(t, evs, "nothing logged yet")

	require.NoError(t, stored.Followup(ctx, id, userMsg(t, "hello")))
	require.NoError(t, stored.WaitIdle(ctx, id)) // the turn is durable: the store holds it
	live, err := stored.Events(ctx, id, 0)
	require.NoError(t, err)

	list, err := stored.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, id, list[0].Header.ID)

	info, evs, err = stored.Peek(ctx, id, 0)
	require.NoError(t, err)
	require.False(t, info.Resident, "read from the store")
	require.False(t, info.Running)
	require.Equal(t, id, info.Header.ID)
	require.Len(t, evs, len(live))
	for i, ev := range evs {
		require.Equal(t, live[i].Data().String(), ev.Data().String(), "seq %d", i)
	}
	_, tail, err := stored.Peek(ctx, id, 2)
	require.NoError(t, err)
	require.Len(t, tail, len(live)-2)
	require.Equal(t, int64(2), tail[0].Seq())
	_, none, err := stored.Peek(ctx, id, 1<<62)
	require.NoError(t, err)
	require.Empty(t, none)

	_, err = bare.List(ctx)
	require.ErrorIs(t, err, ErrNoStore)
	info, evs, err = bare.Peek(ctx, id, 0)
	require.NoError(t, err)
	require.True(t, info.Resident, "asked of the member")
	require.Len(t, evs, len(live))

	_, _, err = stored.Peek(ctx, "no-such-session", 0)
	require.ErrorIs(t, err, supervisor.ErrNoSession)
}
