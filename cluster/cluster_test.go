//go:build !race

package cluster

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// testCluster is members on 127.0.0.1 sharing one store directory, each
// writing through its own killable file system. Every member's provider
// endpoint is allocated up front, so a member can join later.
type testCluster struct {
	t       *testing.T
	dir     string
	model   synthetic.Config
	lns     []net.Listener
	peers   []string
	members []*Member
	fss     []*vfs.KillableFS
	gone    []bool        // closed or killed
	idle    time.Duration // Session.IdleTimeout of members started from now on
	// wrap, when set, makes the model of member i from its synthetic one.
	wrap func(i int, p *synthetic.Provider) llm.Provider
	tls  []*tls.Config // Config.TLS of each member (nil: plaintext)

	mu      sync.Mutex
	refused [][]*RefusedError // what each member reported through OnRefused
}

// startCluster starts n members at once (protoactor's StartMember takes
// a second each) and waits until each sees all n.
func startCluster(t *testing.T, n int, model synthetic.Config) *testCluster {
	t.Helper()
	tc := newCluster(t, n, model)
	tc.start(seq(0, n)...)
	tc.waitMembers(n)
	return tc
}

// newCluster allocates the endpoints of total members and starts none.
func newCluster(t *testing.T, total int, model synthetic.Config) *testCluster {
	tc := &testCluster{t: t, dir: t.TempDir(), model: model, lns: make([]net.Listener, total), peers: make([]string, total),
		members: make([]*Member, total), fss: make([]*vfs.KillableFS, total), gone: make([]bool, total),
		tls: make([]*tls.Config, total), refused: make([][]*RefusedError, total)}
	for i := range total {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		tc.lns[i], tc.peers[i] = ln, ln.Addr().String()
	}
	t.Cleanup(tc.close)
	return tc
}

func seq(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// start starts the members of the given indexes at once.
func (tc *testCluster) start(idx ...int) {
	tc.t.Helper()
	errs := make([]error, len(tc.members))
	var wg sync.WaitGroup
	for _, i := range idx {
		wg.Go(func() {
			sp, err := synthetic.New(tc.model)
			if err != nil {
				errs[i] = err
				return
			}
			var p llm.Provider = sp
			if tc.wrap != nil {
				p = tc.wrap(i, sp)
			}
			tc.fss[i] = vfs.Killable(vfs.OS())
			tc.members[i], errs[i] = Start(Config{Dir: tc.dir, Refresh: 100 * time.Millisecond,
				RequestTimeout: 3 * time.Second, HandoffTimeout: 5 * time.Second, Peers: tc.peers,
				Session: supervisor.Config{Provider: p, IdleTimeout: tc.idle}, listener: tc.lns[i], fs: tc.fss[i],
				TLS: tc.tls[i], OnRefused: func(e *RefusedError) {
					tc.mu.Lock()
					defer tc.mu.Unlock()
					tc.refused[i] = append(tc.refused[i], e)
				}})
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(tc.t, err, "member %d", i)
	}
}

// refusals returns what member i reported through OnRefused so far.
func (tc *testCluster) refusals(i int) []*RefusedError {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return slices.Clone(tc.refused[i])
}

// waitMembers polls until every live member sees n members.
func (tc *testCluster) waitMembers(n int) {
	tc.t.Helper()
	require.Eventually(tc.t, func() bool {
		for i, m := range tc.members {
			if m != nil && !tc.gone[i] && len(m.Members()) != n {
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
		if m != nil && !tc.gone[i] {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_ = m.Close(ctx)
			})
		} else if m == nil {
			_ = tc.lns[i].Close()
		}
	}
	wg.Wait()
}

// leave closes member i gracefully.
func (tc *testCluster) leave(i int) error {
	tc.gone[i] = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return tc.members[i].Close(ctx)
}

// kill stops member i as kill -9 would, as far as the others and the
// shared directory can tell: its file system dies first (nothing more
// is written; its open files and writer locks are closed, as the kernel
// does), then its provider endpoint and its remote go away without
// leaving the cluster. Its host is torn down afterwards only to free its
// goroutines; every write it attempts fails.
func (tc *testCluster) kill(i int) {
	m := tc.members[i]
	tc.gone[i] = true
	require.NoError(tc.t, m.markClosed())
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

// spread creates sessions through m until every live member owns at
// least per of them; it returns the sessions of each member address.
func (tc *testCluster) spread(ctx context.Context, m *Member, per int) map[string][]session.SessionID {
	tc.t.Helper()
	var live []string
	for i, mb := range tc.members {
		if mb != nil && !tc.gone[i] {
			live = append(live, mb.Address())
		}
	}
	return spreadOver(tc.t, ctx, m, live, per)
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

// sessionsOf flattens a spread.
func sessionsOf(by map[string][]session.SessionID) []session.SessionID {
	var all []session.SessionID
	for _, ids := range by {
		all = append(all, ids...)
	}
	return all
}

// turn sends a followup to each session through send, then waits through
// wait until each is idle and durable.
func turn(t *testing.T, ctx context.Context, send, wait *Member, ids []session.SessionID, text string) {
	t.Helper()
	for _, id := range ids {
		require.NoError(t, send.Followup(ctx, id, userMsg(t, text)))
	}
	for _, id := range ids {
		require.NoError(t, wait.WaitIdle(ctx, id))
	}
}

// ackMidTurn waits until each session (in its second turn) has streamed
// some chunks, then takes its durable watermark through m and returns the
// events up to it: what was acknowledged durable mid-turn.
func ackMidTurn(t *testing.T, ctx context.Context, m *Member, ids []session.SessionID) map[session.SessionID][]session.Event {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, id := range ids {
			es, err := m.Events(ctx, id, 0)
			if err != nil || len(turnEnds(es)) != 1 || int64(len(es)) < 20+firstTurnLen(es) {
				return false
			}
		}
		return true
	}, time.Minute, 10*time.Millisecond, "sessions mid-turn")
	acked := map[session.SessionID][]session.Event{}
	for _, id := range ids {
		d, err := m.Flush(ctx, id)
		require.NoError(t, err)
		es, err := m.Events(ctx, id, 0)
		require.NoError(t, err)
		require.Greater(t, int64(len(es)), d)
		acked[id] = es[:d+1]
		require.Len(t, turnEnds(es), 1, "still mid-turn 2 when acknowledged")
	}
	return acked
}

// requireRecovered checks that each session, after its member died
// mid-turn 2, settled on one of the members of survivors, holds every
// acknowledged event byte for byte, and has turn 2 closed by the repair.
func requireRecovered(t *testing.T, ctx context.Context, m *Member, acked map[session.SessionID][]session.Event, survivors []string) {
	t.Helper()
	for id, ack := range acked {
		require.NoError(t, m.WaitIdle(ctx, id), "session %s reactivates and settles", id)
		owner, err := m.Owner(ctx, id)
		require.NoError(t, err)
		require.Contains(t, survivors, owner)
		es, err := m.Events(ctx, id, 0)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(es), len(ack))
		for i, ev := range ack {
			require.Equal(t, string(session.AppendEvent(nil, ev)), string(session.AppendEvent(nil, es[i])), "acknowledged event %d of %s", i, id)
		}
		require.Equal(t, []session.TurnEndKind{session.EndCompleted, session.EndInterrupted}, turnEnds(es), "turn 2 of %s closed by the repair", id)
	}
}
