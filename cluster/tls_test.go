//go:build !race

package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/supervisor"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serial int64

func newSerial() *big.Int {
	serial++
	return big.NewInt(serial)
}

// newCA makes a CA (ECDSA P-256, valid for an hour).
func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: newSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key}
}

// issue makes a certificate for name on 127.0.0.1, for server and client
// authentication, signed by ca (by itself when ca is nil).
func issue(t *testing.T, ca *testCA, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: newSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	parent, signer := tmpl, any(key)
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// config is the mutual TLS configuration of name: a certificate from
// issuer (self-signed when nil), trusting only trust.
func config(t *testing.T, issuer, trust *testCA, name string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(trust.cert)
	return &tls.Config{Certificates: []tls.Certificate{issue(t, issuer, name)}, RootCAs: pool, ClientCAs: pool,
		MinVersion: tls.VersionTLS13}
}

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
	ca, other := newCA(t, "dsh test CA"), newCA(t, "another CA")
	tc := newCluster(t, 3, synthetic.Config{Seed: 5, TextChunks: 20})
	tc.tls[0], tc.tls[1] = config(t, ca, ca, "member0"), config(t, ca, ca, "member1")
	tc.tls[2] = config(t, other, other, "rogue") // lists the same peers
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
		TLS: config(t, ca, ca, "client")})
	require.NoError(t, err)
	ms, err = cl.Messages(ctx, id)
	require.NoError(t, err)
	require.Len(t, ms, 2)
	require.NoError(t, cl.Close())

	// A client with a self-signed certificate (trusting the CA, so only
	// its own certificate is wrong) is refused.
	intruder := config(t, nil, ca, "intruder")
	dctx := testCtx(t, 3*time.Second)
	began := time.Now()
	_, err = Dial(dctx, ClientConfig{Peers: tc.peers[:2], Refresh: 100 * time.Millisecond, RequestTimeout: time.Second, TLS: intruder})
	require.ErrorContains(t, err, "no member answered")
	require.ErrorContains(t, err, "tls: ")
	require.Less(t, time.Since(began), 5*time.Second, "Dial ends at its deadline")
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
	ca := newCA(t, "dsh test CA")
	dir := t.TempDir()
	cert := issue(t, ca, "member")
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	require.NoError(t, err)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return p
	}
	certFile, keyFile := write("cert.pem", "CERTIFICATE", cert.Certificate[0]), write("key.pem", "PRIVATE KEY", keyDER)
	caFile := write("ca.pem", "CERTIFICATE", ca.cert.Raw)
	c, err := LoadTLS(certFile, keyFile, caFile)
	require.NoError(t, err)
	require.NoError(t, Config{Dir: "/d", Bind: "10.0.0.5", TLS: c}.Validate())

	_, err = LoadTLS(certFile, keyFile, filepath.Join(dir, "missing.pem"))
	require.ErrorContains(t, err, "missing.pem")
	_, err = LoadTLS(certFile, keyFile, keyFile)
	require.ErrorContains(t, err, "no PEM certificate")
	_, err = LoadTLS(caFile, keyFile, caFile)
	require.ErrorContains(t, err, "cluster: tls:")
}
