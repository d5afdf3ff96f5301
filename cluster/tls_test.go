//go:build !race

package cluster

import (
	"crypto/tls"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/internal/testutil"
	"github.com/dshgo/dsh/supervisor"
)

// topologyLog records every member address a member's cluster ever
// published.
type topologyLog struct {
	mu   sync.Mutex
	seen map[string]bool
}

func watchTopology(m *Member) *topologyLog {
	l := &topologyLog{seen: map[string]bool{}}
	m.sys.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*pcluster.ClusterTopology); ok {
			l.mu.Lock()
			defer l.mu.Unlock()
			for _, mb := range t.Members {
				l.seen[mb.Address()] = true
			}
		}
	})
	return l
}

func (l *topologyLog) saw(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[addr]
}

// refusedCN counts the refusals of the certificate of common name cn in rs.
func refusedCN(rs []*RefusedError, cn string) int {
	n := 0
	for _, r := range rs {
		if r.Subject == "CN="+cn {
			n++
		}
	}
	return n
}

// Members whose certificates one CA signed form a cluster over mutual
// TLS and run turns across it; a client with a self-signed certificate
// is refused (Dial fails within its deadline, saying why) and so is a
// raw connection to either port of a member; a member whose certificate
// another CA signed never joins. Each member reports each refused
// certificate once, and keeps serving.
func TestClusterMutualTLS(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	ca, other := testutil.NewCA(t, "dsh test CA"), testutil.NewCA(t, "another CA")
	tc := newCluster(t, 3, synthetic.Config{Seed: 5, TextChunks: 20})
	tc.tls[0], tc.tls[1] = testutil.TLSConfig(t, ca, ca, "member0"), testutil.TLSConfig(t, ca, ca, "member1")
	tc.tls[2] = testutil.TLSConfig(t, other, other, "rogue") // lists the same peers
	tc.start(0, 1)
	tc.waitMembers(2)
	good := tc.members[:2]
	logs := []*topologyLog{watchTopology(good[0]), watchTopology(good[1])}

	// A turn over mTLS, driven through the member that does not own the
	// session, so every call crosses the network.
	id, err := good[0].Create(ctx, supervisor.CreateOptions{})
	require.NoError(t, err)
	owner, err := good[0].Owner(ctx, id)
	require.NoError(t, err)
	via := good[1-indexOf(good, owner)]
	require.NotEqual(t, owner, via.Address())
	require.NoError(t, via.Followup(ctx, id, userMsg(t, "hello over TLS")))
	require.NoError(t, via.WaitIdle(ctx, id))
	ms, err := via.Messages(ctx, id)
	require.NoError(t, err)
	require.Len(t, ms, 2)

	// A client with the CA's certificate works too.
	cl, err := Dial(ctx, ClientConfig{Peers: tc.peers[:2], Refresh: 100 * time.Millisecond, RequestTimeout: 3 * time.Second,
		TLS: testutil.TLSConfig(t, ca, ca, "client")})
	require.NoError(t, err)
	ms, err = cl.Messages(ctx, id)
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.NoError(t, cl.Close())

	// A client with a self-signed certificate (trusting the CA, so only
	// its own certificate is wrong) is refused.
	intruder := testutil.TLSConfig(t, nil, ca, "intruder")
	dctx := testCtx(t, 3*time.Second)
	began := time.Now()
	_, err = Dial(dctx, ClientConfig{Peers: tc.peers[:2], Refresh: 100 * time.Millisecond, RequestTimeout: time.Second, TLS: intruder})
	require.ErrorContains(t, err, "no member answered")
	require.ErrorContains(t, err, "tls: ")
	require.Less(t, time.Since(began), 5*time.Second, "Dial ends at its deadline")
	// A client without TLS is told why.
	_, err = Dial(testCtx(t, 2*time.Second), ClientConfig{Peers: tc.peers[:1], Refresh: 100 * time.Millisecond})
	require.ErrorContains(t, err, `400 Bad Request: "Client sent an HTTP request to an HTTPS server."`)
	require.NotContains(t, err.Error(), "\n")
	// So is a raw connection to the remote or the health endpoint, with
	// that certificate, or in plaintext.
	for _, m := range good {
		for _, addr := range []string{m.Address(), m.health.Addr().String()} {
			for range 3 {
				c, err := tls.Dial("tcp", addr, intruder)
				if err == nil {
					_, err = c.Read(make([]byte, 1))
					_ = c.Close()
				}
				require.Error(t, err, "%s accepted a self-signed certificate", addr)
			}
		}
		res, err := http.Get("http://" + m.health.Addr().String() + "/_health")
		if err == nil {
			require.NotEqual(t, http.StatusOK, res.StatusCode, "plaintext health endpoint")
			require.NoError(t, res.Body.Close())
		}
	}
	for i := range good {
		require.Equal(t, 1, refusedCN(tc.refusals(i), "intruder"), "member %d reports the intruder once: %v", i, tc.refusals(i))
	}

	// A member whose certificate another CA signed polls the same peers
	// and is polled by them: it never joins.
	tc.start(2)
	rogue := tc.members[2]
	require.Eventually(t, func() bool {
		return refusedCN(tc.refusals(0), "rogue") == 1 && refusedCN(tc.refusals(1), "rogue") == 1 &&
			refusedCN(tc.refusals(2), "member0") == 1 && refusedCN(tc.refusals(2), "member1") == 1
	}, time.Minute, 10*time.Millisecond, "refusals reported: %v %v %v", tc.refusals(0), tc.refusals(1), tc.refusals(2))
	require.Eventually(t, func() bool { return len(rogue.Members()) == 1 }, time.Minute, 10*time.Millisecond)
	require.Equal(t, []string{rogue.Address()}, rogue.Members(), "the rogue sees only itself")
	for i, m := range good {
		require.NotContains(t, m.Members(), rogue.Address())
		require.False(t, logs[i].saw(rogue.Address()), "member %d never counted the rogue", i)
		require.Equal(t, 1, refusedCN(tc.refusals(i), "rogue"), "member %d reports the rogue once", i)
		require.Equal(t, 1, refusedCN(tc.refusals(i), "intruder"))
	}
	for _, r := range tc.refusals(0) {
		require.Contains(t, r.Error(), "cluster: refused 127.0.0.1:")
		require.True(t, strings.Contains(r.Error(), "unknown authority") || strings.Contains(r.Error(), "certificate"), r.Error())
	}

	// The members survive and still serve.
	require.NoError(t, good[1].Followup(ctx, id, userMsg(t, "still here")))
	require.NoError(t, good[1].WaitIdle(ctx, id))
	ms, err = good[0].Messages(ctx, id)
	require.NoError(t, err)
	require.Len(t, ms, 4)
	require.Equal(t, sorted([]string{good[0].Address(), good[1].Address()}), good[0].Members())
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// LoadTLS builds a working configuration from PEM files and says which
// file is wrong.
func TestClusterLoadTLS(t *testing.T) {
	ca := testutil.NewCA(t, "dsh test CA")
	certFile, keyFile, caFile := testutil.WritePEM(t, t.TempDir(), "member", testutil.Issue(t, ca, "member"), ca)
	c, err := LoadTLS(certFile, keyFile, caFile)
	require.NoError(t, err)
	require.NoError(t, Config{Dir: "/d", Bind: "10.0.0.5", TLS: c}.Validate())

	_, err = LoadTLS(certFile, keyFile, filepath.Join(filepath.Dir(caFile), "missing.pem"))
	require.ErrorContains(t, err, "missing.pem")
	_, err = LoadTLS(certFile, keyFile, keyFile)
	require.ErrorContains(t, err, "no PEM certificate")
	_, err = LoadTLS(caFile, keyFile, caFile)
	require.ErrorContains(t, err, "cluster: tls:")
}
