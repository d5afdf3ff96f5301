//go:build !race

package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
)

// Membership changes while turns run: a member joins (the sessions its
// id range now covers move to it) and later one leaves gracefully. A
// moving session finishes its running turn where it is, is flushed and
// released, and goes on where it now belongs: no turn is interrupted,
// every log is valid, and each session ends up on a live member.
func TestClusterMembershipChangesHandSessionsOver(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	tc := newCluster(t, 3, synthetic.Config{Seed: 11, TextChunks: 60, ReasoningChunks: 5, TokensPerSecond: 100})
	tc.start(0, 1)
	tc.waitMembers(2)
	m0, m1 := tc.members[0], tc.members[1]
	by := tc.spread(ctx, m0, 12)
	all := sessionsOf(by)
	turn(t, ctx, m0, m1, all, "first")

	// Turn 2 runs while a third member joins.
	for _, id := range all {
		require.NoError(t, m1.Followup(ctx, id, userMsg(t, "second")))
	}
	tc.start(2)
	tc.waitMembers(3)
	m2 := tc.members[2]
	moved := 0
	for _, id := range all {
		require.NoError(t, m2.WaitIdle(ctx, id))
		owner, err := m2.Owner(ctx, id)
		require.NoError(t, err)
		if owner == m2.Address() {
			moved++
		}
	}
	require.Positive(t, moved, "the joining member took some sessions")
	t.Logf("%d of %d sessions moved to the member that joined", moved, len(all))

	// Turn 3 runs while the first member leaves.
	for _, id := range all {
		require.NoError(t, m2.Followup(ctx, id, userMsg(t, "third")))
	}
	require.NoError(t, tc.leave(0))
	for _, id := range all {
		require.NoError(t, m1.WaitIdle(ctx, id))
		owner, err := m1.Owner(ctx, id)
		require.NoError(t, err)
		require.Contains(t, []string{m1.Address(), m2.Address()}, owner)
		es, err := m2.Events(ctx, id, 0)
		require.NoError(t, err)
		require.Equal(t, []session.TurnEndKind{session.EndCompleted, session.EndCompleted, session.EndCompleted}, turnEnds(es),
			"no turn of %s was cut by a move", id)
		tc.logOnDisk(id)
	}
}
