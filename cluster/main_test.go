//go:build !race

package cluster

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// The cluster tests are built without the race detector (the !race
// constraint on every test file of this package): protoactor-go's cluster
// and remote at the pinned version race with themselves, in goroutines dsh
// neither starts nor can synchronise, whenever membership changes — which
// these tests make happen. Seen under -race: BlockList.Block (written from
// the gossip actor's event-stream handler) against BlockedMembers (read
// unlocked by MemberList.getTopologyChanges from the provider's monitor);
// disthash.Manager.Get reading the rendezvous table that onClusterTopology
// replaces; remote.Start setting grpc's global logger and the process
// registry's address while other members' servers log and actors spawn;
// endpointManager.stop against removeEndpoint. The races dsh's own code
// had (reading MemberList without its lock, marshalling one request from
// two attempts) are fixed. CI runs these tests in its non-race stage (`go
// test -tags invariants ./...`); every other package runs under -race.
//
// TestMain checks for leaked goroutines, ignoring exactly two goroutines that
// protoactor's cluster leaves behind after a member has shut down:
//
//   - cluster.(*Gossiper).StartGossiping.NewThrottle.func3.1 and
//     cluster.NewGossipActor.NewThrottleWithLogger.func2.1 are the window
//     timers of the gossiper's and the gossip actor's log throttles
//     (actor.NewThrottle with a 60-second period, cluster/gossiper.go and
//     cluster/gossip_actor.go). The first event of a window starts one; it
//     waits for one tick of its 60 s ticker and exits. Nothing can stop it
//     early, and it touches nothing but the throttle's counter.
//
// Everything else a member starts — the remote's gRPC server and
// endpoints, the gossip loop, the member list, the placement actor, the
// peers provider's poll loop and health endpoint, the dead-letter
// throttle (its window is 1 ms here), the host's actors and timers — must
// be gone when the tests end.
//
// With childEnv set, the test binary is not a test run but a member
// process of TestClusterFailoverWhenAMemberProcessIsKilled (see
// runChildMember): it never returns, it is killed.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChildMember()
		os.Exit(1) // reached only when the member could not start
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.(*Gossiper).StartGossiping.NewThrottle.func3.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.NewGossipActor.NewThrottleWithLogger.func2.1"),
	)
}
