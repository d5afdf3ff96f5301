//go:build !race

package cluster

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/supervisor"
)

// The environment of a child member process.
const (
	childEnv      = "DSH_CLUSTER_TEST_CHILD" // the shared directory
	childPortEnv  = "DSH_CLUSTER_TEST_PORT"  // its provider endpoint port
	childPeersEnv = "DSH_CLUSTER_TEST_PEERS" // every member's endpoint, comma-separated
	childHoldEnv  = "DSH_CLUSTER_TEST_HOLD"  // set: the member's model holds turn 2 (see runChildMember)
)

// childModel is the model of every member of the process test: turns of
// about a second.
var childModel = synthetic.Config{Seed: 13, TextChunks: 100, ReasoningChunks: 10, TokensPerSecond: 100}

// runChildMember runs a member in this process (a child of the test) and
// prints "ready ADDRESS" on stdout; it then waits to be killed. With
// childHoldEnv set its model holds every turn-2 call (the one answering
// "second") after a few deltas until the process dies: the kill lands
// mid-turn however slow the machine.
func runChildMember() {
	port, err := strconv.Atoi(os.Getenv(childPortEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child member:", err)
		return
	}
	p, err := synthetic.New(childModel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child member:", err)
		return
	}
	var model llm.Provider = p
	if os.Getenv(childHoldEnv) != "" {
		h := &heldModel{Provider: p, only: func(r llm.Request) bool { return answering(r, "second") }}
		h.arm(30)
		model = h
	}
	m, err := Start(Config{Dir: os.Getenv(childEnv), ProviderPort: port, Refresh: 100 * time.Millisecond,
		RequestTimeout: 3 * time.Second, HandoffTimeout: 5 * time.Second, Peers: strings.Split(os.Getenv(childPeersEnv), ","),
		Session: supervisor.Config{Provider: model}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child member:", err)
		return
	}
	fmt.Fprintf(os.Stdout, "ready %s\n", m.Address()) // to the parent test, through the pipe
	select {}
}

// freeEndpoint returns 127.0.0.1:port for a port that was free a moment
// ago (the child binds it itself).
func freeEndpoint(t *testing.T) (string, int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return ln.Addr().String(), port
}

// The failover test again, with real processes: two members are child
// processes of the test, the third runs in the test and is the client.
// One child is killed with SIGKILL while its sessions are mid-turn (its
// model holds turn 2 until then, see runChildMember): the kernel drops
// its writer locks and its sockets, the page cache keeps what it wrote.
// Its sessions come back on the others, repaired, with everything
// acknowledged durable, and take the next turn.
func TestClusterFailoverWhenAMemberProcessIsKilled(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	dir := t.TempDir()
	ln0, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	peers := []string{ln0.Addr().String()}
	ports := make([]int, 2)
	for i := range ports {
		var ep string
		ep, ports[i] = freeEndpoint(t)
		peers = append(peers, ep)
	}
	children := make([]*exec.Cmd, 2)
	addrs := make([]string, 2)
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+dir, childPortEnv+"="+strconv.Itoa(ports[i]),
			childPeersEnv+"="+strings.Join(peers, ","))
		if i == 1 { // the victim
			cmd.Env = append(cmd.Env, childHoldEnv+"=1")
		}
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		children[i] = cmd
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		ready := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if a, ok := strings.CutPrefix(sc.Text(), "ready "); ok {
					ready <- a
				}
			}
		}()
		select {
		case addrs[i] = <-ready:
		case <-time.After(time.Minute):
			t.Fatalf("child member %d did not start", i)
		}
	}
	p, err := synthetic.New(childModel)
	require.NoError(t, err)
	m0, err := Start(Config{Dir: dir, Refresh: 100 * time.Millisecond, RequestTimeout: 3 * time.Second,
		HandoffTimeout: 5 * time.Second, Peers: peers, Session: supervisor.Config{Provider: p}, listener: ln0})
	require.NoError(t, err)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = m0.Close(cctx)
	})
	require.NoError(t, waitMembers(ctx, []*Member{m0}, 3))

	tc := &testCluster{t: t, dir: dir, members: []*Member{m0, nil, nil}, gone: []bool{false, false, false}}
	by := spreadOver(t, ctx, m0, append([]string{m0.Address()}, addrs...), 2)
	victim := addrs[1]
	all := sessionsOf(by)
	turn(t, ctx, m0, m0, all, "first")
	for _, id := range all {
		require.NoError(t, m0.Followup(ctx, id, userMsg(t, "second")))
	}
	acked := ackMidTurn(t, ctx, m0, by[victim])

	require.NoError(t, children[1].Process.Kill())
	_ = children[1].Wait()

	requireRecovered(t, ctx, m0, acked, []string{m0.Address(), addrs[0]})
	for _, id := range all {
		require.NoError(t, m0.Followup(ctx, id, userMsg(t, "third")))
	}
	for _, id := range all {
		require.NoError(t, m0.WaitIdle(ctx, id))
		es, err := m0.Events(ctx, id, 0)
		require.NoError(t, err)
		ends := turnEnds(es)
		require.Len(t, ends, 3)
		require.Equal(t, session.EndCompleted, ends[2])
		tc.logOnDisk(id)
	}
}

// spreadOver creates sessions through m until each of the members owns
// at least per of them.
func spreadOver(t *testing.T, ctx context.Context, m *Member, members []string, per int) map[string][]session.SessionID {
	t.Helper()
	by := map[string][]session.SessionID{}
	for range 200 {
		id, err := m.Create(ctx, supervisor.CreateOptions{Cwd: "/work/project"})
		require.NoError(t, err)
		owner, err := m.Owner(ctx, id)
		require.NoError(t, err)
		by[owner] = append(by[owner], id)
		done := true
		for _, a := range members {
			done = done && len(by[a]) >= per
		}
		if done {
			return by
		}
	}
	t.Fatalf("sessions did not spread over %v: %v", members, by)
	return nil
}
