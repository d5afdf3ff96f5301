//go:build !race

package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/supervisor"
)

// A process that hosts no session dials the cluster and uses it: create,
// followup, subscribe, wait-idle, messages — the sessions live on the
// members. Closing it stops everything it started.
func TestClusterClientDial(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	tc := startCluster(t, 2, synthetic.Config{Seed: 9, TextChunks: 20})
	cl, err := Dial(ctx, ClientConfig{Peers: tc.peers, Refresh: 100 * time.Millisecond, RequestTimeout: 3 * time.Second})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(cl.Members()) == 2 }, time.Minute, 10*time.Millisecond)
	require.NotContains(t, cl.Members(), cl.Address(), "a client is not a member")

	owners := map[string]bool{}
	for range 6 {
		id, err := cl.Create(ctx, supervisor.CreateOptions{})
		require.NoError(t, err)
		sub, err := cl.Subscribe(ctx, id, 0)
		require.NoError(t, err)
		require.NoError(t, cl.Followup(ctx, id, userMsg(t, "hello")))
		require.NoError(t, cl.WaitIdle(ctx, id))
		for ev := range sub.Events() {
			if ev.Type() == session.TypeTurnEnd {
				break
			}
		}
		sub.Close()
		ms, err := cl.Messages(ctx, id)
		require.NoError(t, err)
		require.Len(t, ms, 2)
		owner, err := cl.Owner(ctx, id)
		require.NoError(t, err)
		require.NotEqual(t, cl.Address(), owner)
		owners[owner] = true
	}
	require.NoError(t, cl.Close())
	require.ErrorIs(t, cl.Close(), supervisor.ErrClosed)
	_, err = cl.Create(ctx, supervisor.CreateOptions{})
	require.ErrorIs(t, err, supervisor.ErrClosed)

	_, err = Dial(ctx, ClientConfig{})
	require.ErrorContains(t, err, "nothing to find the members with")
}
