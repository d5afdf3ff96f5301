package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"

	"github.com/dshgo/dsh/actors/persister"
)

// ClientConfig configures Dial. Peers (or Provider) is required.
type ClientConfig struct {
	// Name is the cluster's name. Default DefaultName.
	Name string
	// Bind is the address this process listens on for replies; the
	// members must reach it. Default DefaultBind. A non-loopback Bind
	// needs TLS, or Insecure.
	Bind string
	// Port is the remote's port; 0 takes a free one.
	Port int
	// Peers are the members' health endpoints ("host:port").
	Peers []string
	// Provider replaces polling Peers (consul, etcd, k8s...).
	Provider pcluster.ClusterProvider
	// Refresh is how often the members are polled. Default DefaultRefresh.
	Refresh time.Duration
	// RequestTimeout bounds one attempt of a request. Default 30
	// seconds.
	RequestTimeout time.Duration
	// TLS is the client's mutual TLS configuration, as Config.TLS of the
	// members (LoadTLS builds one from PEM files): the members accept
	// only a client whose certificate their CA signed. nil: plaintext.
	TLS *tls.Config
	// Insecure lets a client without TLS bind a non-loopback address.
	Insecure bool
	// Store is the members' shared store (persister.OpenReader of their
	// directory), read without locks by Client.List and Client.Peek so
	// that neither activates a session. nil: List fails with ErrNoStore
	// and Peek asks the session's member. Closing it is the caller's,
	// after the client.
	Store persister.Reader
}

// Dial joins a cluster as a client — it reaches every session through the
// members and hosts none — and returns once it sees a member, or fails
// when ctx is done first. Close it when done.
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if len(cfg.Peers) == 0 && cfg.Provider == nil {
		return nil, errors.New("cluster: dial: no Peers and no Provider: nothing to find the members with")
	}
	if err := errors.Join(checkPeers(cfg.Peers), checkBind(cfg.Bind, cfg.TLS, cfg.Insecure), checkTLS(cfg.TLS)); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Bind == "" {
		cfg.Bind = DefaultBind
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = defaultRequestTimeout
	}
	cl := newClient(cfg.RequestTimeout, 0, nil)
	cl.store = cfg.Store
	provider := cfg.Provider
	var peers *peersProvider
	if provider == nil {
		peers = newPeersProvider(cfg.Peers, cfg.Refresh, nil, cfg.TLS, nil)
		provider = peers
	}
	ccfg := pcluster.Configure(cfg.Name, provider, disthash.New(),
		remoteConfig(cfg.Bind, cfg.Port, cfg.RequestTimeout, cfg.TLS, nil),
		pcluster.WithRequestTimeout(cfg.RequestTimeout))
	cl.c = pcluster.New(cl.sys, ccfg)
	cl.provider = provider
	if err := cl.startClient(); err != nil {
		cl.shutdown()
		return nil, err
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for len(cl.Members()) == 0 {
		select {
		case <-ctx.Done():
			var last error
			if peers != nil {
				last = peers.lastErr()
			}
			cl.shutdown()
			if last != nil {
				return nil, fmt.Errorf("cluster: dial: no member answered: %w (last poll: %w)", context.Cause(ctx), last)
			}
			return nil, fmt.Errorf("cluster: dial: no member answered: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
	return cl, nil
}

// startClient runs protoactor's StartClient.
func (m *Client) startClient() error { return start("client", m.c.StartClient) }

// Close closes a client made by Dial: later calls fail with
// supervisor.ErrClosed. It waits for the requests in flight (a long poll
// of a closed Subscription is answered within two seconds; a request to
// a member that died ends at its attempt timeout). A Member's Close
// leaves the cluster.
func (m *Client) Close() error {
	if err := m.markClosed(); err != nil {
		return err
	}
	m.attempts.Wait()
	m.shutdown()
	return nil
}

// shutdown stops what StartClient started. protoactor's Cluster.Shutdown
// is for members (it sets gossip state a client never started).
func (m *Client) shutdown() {
	m.sys.Shutdown()
	if m.provider != nil {
		_ = m.provider.Shutdown(true)
	}
	if m.c.IdentityLookup != nil {
		m.c.IdentityLookup.Shutdown()
	}
	if m.c.Remote != nil {
		stopRemote(func() { m.c.Remote.Shutdown(true) }, func() { m.c.Remote.Shutdown(false) })
	}
}
