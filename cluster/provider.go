package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
)

// healthTimeout bounds one poll of a peer's health endpoint.
const healthTimeout = 2 * time.Second

// peersProvider is the cluster provider over a static peer list, in
// place of protoactor's automanaged provider, whose wire it keeps (each
// member answers GET /_health with automanaged's node JSON; the members
// are the peers that answer, polled every refresh) but not its
// transport: the automanaged provider polls in plain HTTP only, and
// binds its endpoint on every interface. Here a member serves the
// endpoint on its own listener (Config.Bind), and with TLS the endpoint
// is HTTPS and every poll mutually authenticated, so a process whose
// certificate the CA did not sign is not counted as a member, nor learns
// the members' addresses. A client polls and serves nothing.
type peersProvider struct {
	peers   []string
	refresh time.Duration
	scheme  string // http, or https with TLS
	client  *http.Client
	refused *refusals

	srv  *http.Server // the member's endpoint; nil for a client
	ln   net.Listener
	port int // the endpoint's port, in the node JSON

	c      *pcluster.Cluster
	cancel context.CancelFunc
	done   chan struct{} // closed when the poll loop and the endpoint have ended
	once   sync.Once

	mu   sync.Mutex
	last error // the failures of the last poll, if any
}

// newPeersProvider makes the provider. ln is the member's endpoint
// (nil for a client); tc the TLS configuration (nil: plaintext).
func newPeersProvider(peers []string, refresh time.Duration, ln net.Listener, tc *tls.Config, refused *refusals) *peersProvider {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: healthTimeout, KeepAlive: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     90 * time.Second,
	}
	p := &peersProvider{peers: peers, refresh: refresh, scheme: "http", refused: refused, ln: ln,
		client: &http.Client{Transport: tr, Timeout: healthTimeout}, done: make(chan struct{})}
	if tc != nil {
		p.scheme = "https"
		tr.TLSClientConfig = clientTLS(tc)
	}
	if ln != nil {
		p.port = ln.Addr().(*net.TCPAddr).Port
		mux := http.NewServeMux()
		mux.HandleFunc("GET /_health", p.health)
		// No log: a refused handshake is reported through refused, once.
		p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: healthTimeout, ErrorLog: log.New(io.Discard, "", 0)}
		if tc != nil {
			p.ln = tls.NewListener(ln, serverTLS(tc, refused))
		}
	}
	return p
}

// health answers a poll with this member's node.
func (p *peersProvider) health(w http.ResponseWriter, _ *http.Request) {
	host, port, err := p.c.ActorSystem.GetHostPort()
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	b, err := json.Marshal(automanaged.NewNode(p.c.Config.Name, p.c.ActorSystem.ID, host, port, p.port, []string{Kind}))
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// StartMember serves the endpoint and starts polling.
func (p *peersProvider) StartMember(c *pcluster.Cluster) error { return p.start(c) }

// StartClient starts polling.
func (p *peersProvider) StartClient(c *pcluster.Cluster) error { return p.start(c) }

func (p *peersProvider) start(c *pcluster.Cluster) error {
	p.c = c
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	var wg sync.WaitGroup
	if p.srv != nil {
		wg.Go(func() { _ = p.srv.Serve(p.ln) })
	}
	wg.Go(func() { p.run(ctx) })
	go func() {
		wg.Wait()
		close(p.done)
	}()
	return nil
}

// Shutdown stops polling and closes the endpoint (the other members see
// this one leave at their next poll); it returns once both have ended.
// A second call does nothing.
func (p *peersProvider) Shutdown(bool) error {
	p.once.Do(func() {
		if p.cancel == nil { // never started
			p.closeEndpoint()
			close(p.done)
			return
		}
		p.cancel()
		p.closeEndpoint()
		<-p.done
		p.client.CloseIdleConnections()
	})
	return nil
}

func (p *peersProvider) closeEndpoint() {
	if p.srv != nil {
		_ = p.srv.Close()
	}
	if p.ln != nil {
		_ = p.ln.Close()
	}
}

// run polls every refresh until ctx is done.
func (p *peersProvider) run(ctx context.Context) {
	t := time.NewTicker(p.refresh)
	defer t.Stop()
	for {
		p.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll asks every peer for its node and publishes the members that
// answered. When none did, the last topology stands (this process may
// be the one cut off).
func (p *peersProvider) poll(ctx context.Context) {
	nodes := make([]*automanaged.NodeModel, len(p.peers))
	errs := make([]error, len(p.peers))
	var wg sync.WaitGroup
	for i, peer := range p.peers {
		wg.Go(func() { nodes[i], errs[i] = p.check(ctx, peer) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	var err error
	if failed := slices.DeleteFunc(errs, func(e error) bool { return e == nil }); len(failed) > 0 {
		err = pollError(failed)
	}
	p.mu.Lock()
	p.last = err
	p.mu.Unlock()
	var members []*pcluster.Member
	answered := 0
	for _, n := range nodes {
		if n == nil {
			continue
		}
		answered++
		if n.ClusterName == p.c.Config.Name {
			members = append(members, &pcluster.Member{Id: n.ID, Host: n.Address, Port: int32(n.Port), Kinds: n.Kinds})
		}
	}
	if answered == 0 && err != nil {
		return
	}
	p.c.MemberList.UpdateClusterTopology(members)
}

// check polls one peer.
func (p *peersProvider) check(ctx context.Context, peer string) (*automanaged.NodeModel, error) {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.scheme+"://"+peer+"/_health", nil)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", peer, err)
	}
	res, err := p.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("peer %s: %w", peer, p.refused.pollRefused(peer, err))
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		// The first line of the body says why, if anything (a plaintext
		// poll of an HTTPS endpoint: "Client sent an HTTP request to an
		// HTTPS server.").
		b, _ := io.ReadAll(io.LimitReader(res.Body, 200))
		why, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if why == "" {
			return nil, fmt.Errorf("peer %s: %s", peer, res.Status)
		}
		return nil, fmt.Errorf("peer %s: %s: %q", peer, res.Status, why)
	}
	var n automanaged.NodeModel
	if err := json.NewDecoder(io.LimitReader(res.Body, 1<<16)).Decode(&n); err != nil {
		return nil, fmt.Errorf("peer %s: %w", peer, err)
	}
	return &n, nil
}

// pollError is the failures of one poll, on one line.
type pollError []error

func (e pollError) Error() string {
	s := make([]string, len(e))
	for i, err := range e {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

func (e pollError) Unwrap() []error { return e }

// lastErr is the failures of the last poll.
func (p *peersProvider) lastErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}
