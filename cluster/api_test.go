//go:build !race

package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// The host's API works through any member, wherever the session lives:
// create, followup, subscribe, wait-idle, messages, events, fork, stats,
// and the errors keep their identity across members.
func TestClusterAPIFromEveryMember(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	tc := startCluster(t, 3, synthetic.Config{Seed: 5, TextChunks: 20, ReasoningChunks: 5, ReasoningRate: 0.5})
	by := tc.spread(ctx, tc.members[0], 1)
	for owner, ids := range by {
		id := ids[0]
		oi := indexOf(tc.members, owner)
		// A client on each other member.
		client := tc.members[(oi+1)%3]
		watcher := tc.members[(oi+2)%3]

		sub, err := watcher.Subscribe(ctx, id, 0)
		require.NoError(t, err)
		require.NoError(t, client.Followup(ctx, id, userMsg(t, "hello from "+client.Address())))
		require.NoError(t, client.WaitIdle(ctx, id))

		// The subscription sees the whole log, in order, up to the turn end.
		var seen []session.Event
		for ev := range sub.Events() {
			seen = append(seen, ev)
			if ev.Type() == session.TypeTurnEnd {
				break
			}
		}
		sub.Close()
		require.NoError(t, sub.Err())
		for i, ev := range seen {
			require.EqualValues(t, i, ev.Seq())
		}
		es, err := watcher.Events(ctx, id, 0)
		require.NoError(t, err)
		require.Equal(t, len(seen), len(es), "events = what the subscription saw")

		ms, err := watcher.Messages(ctx, id)
		require.NoError(t, err)
		require.Len(t, ms, 2)
		require.Equal(t, messages.RoleUser, ms[0].Role())
		require.Equal(t, messages.RoleAssistant, ms[1].Role())

		st, err := client.Stats(ctx, id)
		require.NoError(t, err)
		require.EqualValues(t, 1, st.Turns)
		require.EqualValues(t, len(es), st.Events)
		require.Positive(t, st.Usage.OutputTokens)

		// Fork at the end; the fork lives wherever its id places it, and
		// has the parent's messages.
		child, err := client.Fork(ctx, id, session.LastEvent)
		require.NoError(t, err)
		cms, err := watcher.Messages(ctx, child)
		require.NoError(t, err)
		require.Len(t, cms, 2)
		require.NoError(t, watcher.Followup(ctx, child, userMsg(t, "in the fork")))
		require.NoError(t, client.WaitIdle(ctx, child))
		cms, err = client.Messages(ctx, child)
		require.NoError(t, err)
		require.Len(t, cms, 4)
		ms, err = client.Messages(ctx, id)
		require.NoError(t, err)
		require.Len(t, ms, 2, "the parent is unchanged")

		// A followup retried with the same message is delivered once.
		m := userMsg(t, "once")
		require.NoError(t, client.Followup(ctx, id, m))
		require.NoError(t, watcher.Followup(ctx, id, m))
		require.NoError(t, client.WaitIdle(ctx, id))
		ms, err = client.Messages(ctx, id)
		require.NoError(t, err)
		require.Len(t, ms, 4)
	}

	m := tc.members[0]
	// Every member lists every stored session, wherever it lives.
	for _, mb := range tc.members {
		infos, err := mb.List(ctx)
		require.NoError(t, err)
		listed := map[session.SessionID]bool{}
		for _, in := range infos {
			listed[in.Header.ID] = true
		}
		for _, ids := range by {
			require.True(t, listed[ids[0]], "%s lists %s", mb.Address(), ids[0]) // ids[0] took turns: it is stored
		}
	}
	_, err := m.Messages(ctx, "no-such-session")
	require.ErrorIs(t, err, supervisor.ErrNoSession)
	require.ErrorIs(t, m.Followup(ctx, "no-such-session", userMsg(t, "x")), supervisor.ErrNoSession)
	var id session.SessionID
	for _, ids := range by {
		id = ids[0]
	}
	_, err = tc.members[1].Create(ctx, supervisor.CreateOptions{ID: id})
	require.ErrorIs(t, err, supervisor.ErrExists)
	_, err = tc.members[2].Fork(ctx, id, 1)
	require.ErrorIs(t, err, session.ErrFork, "a boundary inside a turn is refused")
}

// With Session.IdleTimeout a member passivates an idle session, and its
// grain stops after it; the next request activates a grain again, which
// resumes the session from the store where it left off.
func TestClusterIdleSessionsAndTheirGrainsPassivate(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	tc := newCluster(t, 2, synthetic.Config{Seed: 5, TextChunks: 20})
	tc.idle = 100 * time.Millisecond
	tc.start(0, 1)
	tc.waitMembers(2)
	m := tc.members[0]
	by := tc.spread(ctx, m, 2)
	for _, ids := range by {
		for _, id := range ids {
			require.NoError(t, m.Followup(ctx, id, userMsg(t, "hello")))
			require.NoError(t, m.WaitIdle(ctx, id))
		}
	}
	grains := func() int32 {
		var n int32
		for _, mb := range tc.members {
			n += mb.c.GetClusterKind(Kind).Count()
		}
		return n
	}
	require.Eventually(t, func() bool {
		return grains() == 0 && tc.members[0].Host().Resident() == 0 && tc.members[1].Host().Resident() == 0
	}, time.Minute, 10*time.Millisecond, "sessions and grains passivate")
	for _, ids := range by {
		for _, id := range ids {
			require.NoError(t, m.Followup(ctx, id, userMsg(t, "again")))
			require.NoError(t, m.WaitIdle(ctx, id))
			st, err := m.Stats(ctx, id)
			require.NoError(t, err)
			require.EqualValues(t, 2, st.Turns)
		}
	}
}
