//go:build !race

package cluster

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/cluster/clusterpb"
	"github.com/dshgo/dsh/supervisor"
)

// activate forces an activation of id on member m, whatever the identity
// lookup says: protoactor's placement actor activates on any
// ActivationRequest (the disthash lookup does not check ownership), which
// is how two activations of one session happen while members' views of
// the membership disagree. The placement actor forgets a grain only when
// it handles the grain's Terminated, so until then it answers with the
// stopped grain's PID: activate asks again (with a deadline) while the
// answer is one of the stale PIDs, grains the test saw stop.
func activate(t *testing.T, m *Member, id session.SessionID, stale ...*actor.PID) *actor.PID {
	t.Helper()
	placement := actor.NewPID(m.Address(), disthash.PartitionActivatorActorName)
	var pid *actor.PID
	require.Eventually(t, func() bool {
		res, err := m.sys.Root.RequestFuture(placement, &pcluster.ActivationRequest{
			ClusterIdentity: pcluster.NewClusterIdentity(string(id), Kind), RequestId: "forced"}, 5*time.Second).Result()
		require.NoError(t, err)
		pid = res.(*pcluster.ActivationResponse).Pid
		require.NotNil(t, pid)
		return !slices.ContainsFunc(stale, pid.Equal)
	}, 30*time.Second, time.Millisecond, "the placement actor still answers with a stopped grain")
	require.Equal(t, m.Address(), pid.Address, "activated on the member asked")
	return pid
}

func ask(t *testing.T, m *Member, pid *actor.PID, req any) (*clusterpb.Reply, error) {
	t.Helper()
	res, err := m.sys.Root.RequestFuture(pid, req, 5*time.Second).Result()
	if err != nil {
		return nil, err
	}
	return res.(*clusterpb.Reply), nil
}

// Two activations of one session: the session lives on its owner, and a
// second activation is forced on the other member. The second one cannot
// take the session's writer lock: it answers LOCKED naming the holder and
// stops, having written nothing; the owner's session goes on and its log
// stays valid. Once the owner lets the session go, an activation
// elsewhere takes it over with everything the owner wrote.
func TestClusterFencingRefusesASecondActivation(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	tc := startCluster(t, 2, synthetic.Config{Seed: 3, TextChunks: 30, TokensPerSecond: 200})
	a := tc.members[0]
	by := tc.spread(ctx, a, 1)
	owner, other := tc.members[0], tc.members[1]
	id := by[owner.Address()][0]
	require.NoError(t, a.Followup(ctx, id, userMsg(t, "hello")))
	require.NoError(t, a.WaitIdle(ctx, id))
	before, err := a.Events(ctx, id, 0)
	require.NoError(t, err)

	// Start a turn on the owner, then force the second activation while
	// it runs.
	require.NoError(t, a.Followup(ctx, id, userMsg(t, "again")))
	pid := activate(t, other, id)
	r, err := ask(t, other, pid, &clusterpb.GetStats{})
	require.NoError(t, err)
	require.Equal(t, clusterpb.Code_CODE_LOCKED, r.Code, "the second activation is refused: %s", r.Error)
	require.Equal(t, other.Address(), r.Member)
	require.Contains(t, r.Error, "session "+string(id)+" is in use by "+owner.holder, "the error names the session and the holder")
	var rerr error = &RemoteError{Member: r.Member, Code: r.Code, Msg: r.Error}
	require.ErrorIs(t, rerr, persister.ErrLocked)
	// The loser stopped: the next message to it is a dead letter.
	_, err = ask(t, other, pid, &clusterpb.GetStats{})
	require.Error(t, err)
	_, err = other.Host().SessionPID(id)
	require.ErrorIs(t, err, supervisor.ErrNoSession, "the loser holds nothing")

	// The owner's turn completes; its log holds both turns, valid.
	require.NoError(t, a.WaitIdle(ctx, id))
	after, err := a.Events(ctx, id, 0)
	require.NoError(t, err)
	require.Equal(t, []session.TurnEndKind{session.EndCompleted, session.EndCompleted}, turnEnds(after))
	for i, ev := range before {
		require.Equal(t, string(session.AppendEvent(nil, ev)), string(session.AppendEvent(nil, after[i])))
	}
	tc.logOnDisk(id)

	// The owner lets the session go (as it does when the session moves);
	// a forced activation elsewhere now takes it, with everything.
	released := activate(t, owner, id)
	r, err = ask(t, owner, released, &clusterpb.Release{})
	require.NoError(t, err)
	require.Equal(t, clusterpb.Code_CODE_OK, r.Code, r.Error)
	pid = activate(t, other, id, pid)
	r, err = ask(t, other, pid, &clusterpb.GetEvents{From: 0})
	require.NoError(t, err)
	require.Equal(t, clusterpb.Code_CODE_OK, r.Code, r.Error)
	got, err := decodeEvents(r)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(got), len(after), "the new holder loaded every event the old one wrote")
	for i, ev := range after {
		require.Equal(t, string(session.AppendEvent(nil, ev)), string(session.AppendEvent(nil, got[i])))
	}
	// And now the old owner is the one refused.
	pid2 := activate(t, owner, id, released)
	r, err = ask(t, owner, pid2, &clusterpb.GetStats{})
	require.NoError(t, err)
	require.Equal(t, clusterpb.Code_CODE_LOCKED, r.Code)
	require.False(t, errors.Is(&RemoteError{Code: clusterpb.Code_CODE_OK}, persister.ErrLocked))
}

// Two activations create the same new session and run a turn each: the
// first to write takes the session's writer lock; the other's writes are
// refused, it answers LOCKED and stops. The log holds the winner's turn
// alone, valid.
func TestClusterFencingTwoCreatorsOfOneSession(t *testing.T) {
	tc := startCluster(t, 2, synthetic.Config{Seed: 3, TextChunks: 30})
	id := session.SessionID("contested-session")
	pids := make([]*actor.PID, 2)
	for i, m := range tc.members {
		pids[i] = activate(t, m, id)
		r, err := ask(t, m, pids[i], &clusterpb.Create{Cwd: "/work/project"})
		require.NoError(t, err)
		require.Equal(t, clusterpb.Code_CODE_OK, r.Code, r.Error)
	}
	texts := []string{"from the first", "from the second"}
	for i, m := range tc.members {
		b, err := userMsg(t, texts[i]).MarshalJSON()
		require.NoError(t, err)
		r, err := ask(t, m, pids[i], &clusterpb.Send{Message: b})
		require.NoError(t, err)
		require.Equal(t, clusterpb.Code_CODE_OK, r.Code, r.Error)
	}
	// Each waits until its turn is over and durable: one makes it, the
	// other is refused.
	codes := make([]clusterpb.Code, 2)
	for i, m := range tc.members {
		require.Eventually(t, func() bool {
			r, err := ask(t, m, pids[i], &clusterpb.WaitIdle{WaitMs: 1000})
			require.NoError(t, err)
			codes[i] = r.Code
			return r.Code != clusterpb.Code_CODE_OK || r.Idle
		}, time.Minute, time.Millisecond)
	}
	winner := slices.Index(codes, clusterpb.Code_CODE_OK)
	require.NotEqual(t, -1, winner, "one activation wins: %v", codes)
	require.Equal(t, clusterpb.Code_CODE_LOCKED, codes[1-winner], "the other is refused: %v", codes)
	// The loser stopped.
	_, err := ask(t, tc.members[1-winner], pids[1-winner], &clusterpb.GetStats{})
	require.Error(t, err)

	l := tc.logOnDisk(id)
	var users []string
	for ev := range l.Events().All() {
		if um, ok := ev.Payload().(session.UserMessage); ok {
			users = append(users, um.Message.Block(0).Text())
		}
	}
	require.Equal(t, []string{texts[winner]}, users, "the log holds the winner's turn alone")
}
