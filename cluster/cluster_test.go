//go:build !race

package cluster

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// testCluster is n members on 127.0.0.1 sharing one store directory,
// each writing through its own killable file system.
type testCluster struct {
	t       *testing.T
	dir     string
	members []*Member
	fss     []*vfs.KillableFS
	killed  []bool
}

// startCluster starts n members at once (protoactor's StartMember takes
// a second each) and waits until each sees all n.
func startCluster(t *testing.T, n int, model synthetic.Config) *testCluster {
	t.Helper()
	tc := &testCluster{t: t, dir: t.TempDir(), members: make([]*Member, n), fss: make([]*vfs.KillableFS, n), killed: make([]bool, n)}
	lns := make([]net.Listener, n)
	peers := make([]string, n)
	for i := range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		lns[i], peers[i] = ln, ln.Addr().String()
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p, err := synthetic.New(model)
			if err != nil {
				errs[i] = err
				return
			}
			tc.fss[i] = vfs.Killable(vfs.OS())
			tc.members[i], errs[i] = Start(Config{Dir: tc.dir, Refresh: 100 * time.Millisecond,
				RequestTimeout: 3 * time.Second, HandoffTimeout: 5 * time.Second, Peers: peers,
				Session: supervisor.Config{Provider: p}, listener: lns[i], fs: tc.fss[i]})
		})
	}
	wg.Wait()
	t.Cleanup(tc.close)
	for i, err := range errs {
		require.NoError(t, err, "member %d", i)
	}
	tc.waitMembers(n)
	return tc
}

// waitMembers polls until every live member sees n members.
func (tc *testCluster) waitMembers(n int) {
	tc.t.Helper()
	require.Eventually(tc.t, func() bool {
		for i, m := range tc.members {
			if !tc.killed[i] && len(m.Members()) != n {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "members did not converge on %d", n)
}

// close closes the live members, all at once (each takes ~2 s).
func (tc *testCluster) close() {
	var wg sync.WaitGroup
	for i, m := range tc.members {
		if m != nil && !tc.killed[i] {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = m.Close(ctx)
			})
		}
	}
	wg.Wait()
}

// kill stops member i as kill -9 would, as far as the others and the
// shared directory can tell: its file system dies first (nothing more
// is written; its open files and writer locks are closed, as the kernel
// does), then its provider endpoint and its remote go away without
// leaving the cluster. Its host is torn down afterwards only to free its
// goroutines; every write it attempts fails.
func (tc *testCluster) kill(i int) {
	m := tc.members[i]
	tc.killed[i] = true
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	tc.fss[i].Kill()
	_ = m.provider.Shutdown(false)
	m.c.Shutdown(false) // stops the gRPC server, says no goodbye
	// A dead process makes no connections either: stop the remote's
	// outbound endpoints (a non-graceful shutdown leaves them redialing).
	m.c.Remote.Shutdown(true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = m.host.Close(ctx)
}

func userMsg(t *testing.T, text string) messages.Message {
	t.Helper()
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
	require.NoError(t, err)
	return m
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// owners creates sessions through m until every member owns at least
// per of them; it returns the sessions of each member address.
func (tc *testCluster) spread(ctx context.Context, m *Member, per int) map[string][]session.SessionID {
	tc.t.Helper()
	by := map[string][]session.SessionID{}
	for range 200 {
		id, err := m.Create(ctx, supervisor.CreateOptions{Cwd: "/work/project"})
		require.NoError(tc.t, err)
		owner, err := m.Owner(ctx, id)
		require.NoError(tc.t, err)
		by[owner] = append(by[owner], id)
		done := len(by) == len(tc.members)
		for _, ids := range by {
			done = done && len(ids) >= per
		}
		if done {
			return by
		}
	}
	tc.t.Fatalf("sessions did not spread over %d members: %v", len(tc.members), by)
	return nil
}

// logOnDisk reads a session's log file from the shared directory and
// checks it is valid and balanced.
func (tc *testCluster) logOnDisk(id session.SessionID) *session.Log {
	tc.t.Helper()
	matches, err := filepath.Glob(filepath.Join(tc.dir, "*", string(id), "session.jsonl*"))
	require.NoError(tc.t, err)
	require.Len(tc.t, matches, 1, "one log file for %s", id)
	f, err := session.ReadFile(matches[0])
	require.NoError(tc.t, err)
	require.Nil(tc.t, f.Torn, "no torn tail left in %s", matches[0])
	l, err := f.Log()
	require.NoError(tc.t, err)
	_, _, open := l.OpenTurn()
	require.False(tc.t, open, "%s ends balanced", id)
	return l
}

func turnEnds(es []session.Event) []session.TurnEndKind {
	var out []session.TurnEndKind
	for _, ev := range es {
		if te, ok := ev.Payload().(session.TurnEnd); ok {
			out = append(out, te.Reason.Kind)
		}
	}
	return out
}

func indexOf(ms []*Member, addr string) int {
	return slices.IndexFunc(ms, func(m *Member) bool { return m.Address() == addr })
}
