package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/storefs"
	"github.com/dshgo/dsh/internal/vfs"
	"github.com/dshgo/dsh/supervisor"
)

// Kind is the cluster kind of a session grain.
const Kind = "dsh-session"

// Defaults of Config.
const (
	DefaultName            = "dsh"
	DefaultBind            = "127.0.0.1"
	DefaultRefresh         = time.Second
	defaultRequestTimeout  = 30 * time.Second
	DefaultHandoffTimeout  = 30 * time.Second
	DefaultProviderPort    = 6330
	defaultPollWait        = 2 * time.Second
	maxRetryBackoff        = time.Second
	firstRetryBackoff      = 20 * time.Millisecond
	acceptedMessagesToKeep = 256
)

// Config configures a Member. Dir is required; everything else has a
// default that runs a member on 127.0.0.1.
type Config struct {
	// Dir is the store directory every member shares (a local directory
	// for members on one machine, a network file system across machines:
	// see the package documentation for what it must provide).
	Dir string
	// Name is the cluster's name: members of other names ignore this one.
	// Default DefaultName.
	Name string
	// Bind is the address the member listens on, for the actor remote and
	// for the health endpoint. Default DefaultBind (loopback): set it to a
	// routable address to span machines, with TLS (or Insecure).
	Bind string
	// Port is the actor remote's port; 0 takes a free one.
	Port int
	// Provider discovers the members. nil: the members are the Peers
	// whose health endpoint answers, this member's own served on
	// Bind:ProviderPort (the wire of protoactor's automanaged provider;
	// see the package documentation). Any protoactor cluster provider
	// fits (consul, etcd, Kubernetes, zookeeper).
	Provider pcluster.ClusterProvider
	// ProviderPort is the port of the health endpoint. Default
	// DefaultProviderPort.
	ProviderPort int
	// Peers are the health endpoints ("host:port") of the members; this
	// member's own (Bind:ProviderPort) is added when missing.
	Peers []string
	// Refresh is how often Peers are polled; a dead member leaves the
	// cluster about this long after it stopped answering. Default
	// DefaultRefresh.
	Refresh time.Duration
	// TLS, when set, authenticates every connection both ways: the actor
	// remote (between members, and from clients) and the health endpoint
	// (HTTPS) accept only a peer whose certificate the CA signed for
	// client authentication, and this member connects only to peers whose
	// certificate the CA signed for the address dialed. It must hold this
	// member's certificate and the CA (RootCAs or ClientCAs; one stands
	// for the other); LoadTLS builds one from PEM files. Its ClientAuth
	// and GetConfigForClient are replaced (the member checks client
	// certificates itself, to report refusals). nil: plaintext, and only
	// on a loopback Bind unless Insecure.
	TLS *tls.Config
	// Insecure lets a member without TLS bind a non-loopback address:
	// anyone who reaches it can then create sessions and read every
	// session's messages.
	Insecure bool
	// OnRefused is called once for each certificate refused (or, for a
	// connection without one, each host): a client or member the CA did
	// not sign connecting here, or a peer answering with such a
	// certificate. It may be called from any goroutine, before Start
	// returns. nil: refusals are not reported.
	OnRefused func(*RefusedError)
	// RequestTimeout bounds one attempt of a request to a grain; a call
	// retries attempts (on another member once membership changed) until
	// its context is done. Default 30 seconds.
	RequestTimeout time.Duration
	// HandoffTimeout is how long a session whose grain moves to another
	// member (membership changed, or this member is closing) may finish
	// its running turn before the turn is disposed and the session handed
	// over. Default DefaultHandoffTimeout.
	HandoffTimeout time.Duration
	// Holder names this member in the writer locks it holds (shown to a
	// member refused by one). Default "member <endpoint> pid <pid> on
	// <hostname>".
	Holder string
	// ActorMetrics records protoactor's own per-actor metrics (a
	// histogram per message: costly) on the member's actor system, to
	// Session.MeterProvider. Without a MeterProvider it does nothing.
	ActorMetrics bool
	// Session configures the member's local host: the model, tools,
	// hooks, policy and limits of the sessions it runs. Its Dir, Store,
	// System and ManualResume are set by the member.
	Session supervisor.Config

	// Seams for tests (same package).
	fs       vfs.FS       // the store's file system (default vfs.OS())
	listener net.Listener // the health endpoint's listener, made by the caller
	// waited hears each request that waits in its grain (for the
	// session's load or the request running), with the number of
	// requests waiting then.
	waited func(id session.SessionID, n int)
}

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("cluster: config: Dir is required (the shared store directory)"))
	}
	if ip := net.ParseIP(c.Bind); ip != nil && ip.IsUnspecified() {
		errs = append(errs, fmt.Errorf("cluster: config: Bind %s: the other members reach a member at the address it binds; give one they can reach", c.Bind))
	}
	if err := checkBind(c.Bind, c.TLS, c.Insecure); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkTLS(c.TLS))
	if c.Port < 0 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("cluster: config: Port %d out of range", c.Port))
	}
	if c.ProviderPort < 0 || c.ProviderPort > 65535 {
		errs = append(errs, fmt.Errorf("cluster: config: ProviderPort %d out of range", c.ProviderPort))
	}
	for _, d := range []time.Duration{c.Refresh, c.RequestTimeout, c.HandoffTimeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("cluster: config: negative duration %v", d))
		}
	}
	errs = append(errs, checkPeers(c.Peers))
	return errors.Join(errs...)
}

// Member is one member of a dsh cluster: a supervisor.Host for the
// sessions placed here, the session grains that own them, and a client
// that reaches any session wherever it lives. It is safe for concurrent
// use.
type Member struct {
	*Client // reaches any session, wherever it lives

	cfg     Config
	host    *supervisor.Host
	store   *persister.JSONLStore
	health  net.Listener // the health endpoint, when the member made it
	refused *refusals    // reports refused certificates (nil: not reported)
	holder  string       // the text of its writer locks
	// loads counts the grains' loads running (grain.load): Close waits
	// for them, so none outlives the member.
	loads sync.WaitGroup
}

// startMu serialises protoactor's StartMember across the members of one
// process: the remote's start sets grpc's global logger, unguarded.
var startMu sync.Mutex

// Start starts a member and joins the cluster. It returns once the member
// is up (protoactor's StartMember takes about a second); the other
// members see it within a refresh.
func Start(cfg Config) (m *Member, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if cfg.Bind == "" {
		cfg.Bind = DefaultBind
	}
	if cfg.ProviderPort == 0 {
		cfg.ProviderPort = DefaultProviderPort
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = defaultRequestTimeout
	}
	if cfg.HandoffTimeout == 0 {
		cfg.HandoffTimeout = DefaultHandoffTimeout
	}
	if cfg.fs == nil {
		cfg.fs = vfs.OS()
	}
	var sysOpts []actor.ConfigOption
	if cfg.ActorMetrics && cfg.Session.MeterProvider != nil {
		sysOpts = append(sysOpts, actor.WithMetricProviders(cfg.Session.MeterProvider))
	}
	m = &Member{cfg: cfg, Client: newClient(cfg.RequestTimeout, cfg.Session.RequestTimeout, cfg.Session.Logger, sysOpts...)}
	if l := cfg.Session.Logger; l != nil {
		m.sys.EventStream.Subscribe(func(evt any) { logMembership(l, m.sys, evt) })
	}

	m.refused = newRefusals(cfg.OnRefused)
	provider := cfg.Provider
	if provider == nil {
		provider, err = m.peersProvider()
		if err != nil {
			return nil, err
		}
	}
	m.provider = provider
	kind := pcluster.NewKind(Kind, actor.PropsFromProducer(func() actor.Actor { return &grain{m: m} }))
	ccfg := pcluster.Configure(cfg.Name, provider, disthash.New(),
		remoteConfig(cfg.Bind, cfg.Port, cfg.RequestTimeout, cfg.TLS, m.refused), pcluster.WithKinds(kind), pcluster.WithRequestTimeout(cfg.RequestTimeout))
	m.c = pcluster.New(m.sys, ccfg)

	holder := cfg.Holder
	if holder == "" {
		host, _ := os.Hostname()
		holder = fmt.Sprintf("member pid %d on %s", os.Getpid(), host)
		if m.health != nil {
			holder = fmt.Sprintf("member %s pid %d on %s", m.health.Addr(), os.Getpid(), host)
		}
	}
	m.holder = holder
	store, err := storefs.NewJSONLStore(persister.JSONLConfig{Root: cfg.Dir, Plain: cfg.Session.Plain,
		Lock: true, Holder: holder}, cfg.fs)
	if err != nil {
		m.closeHealth()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	m.store = store
	hcfg := cfg.Session
	hcfg.Dir, hcfg.Store, hcfg.System, hcfg.ManualResume = "", store, m.sys, true
	m.host, err = supervisor.Open(hcfg)
	if err != nil {
		_ = store.Close()
		m.closeHealth()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if err := m.startMember(); err != nil {
		_ = m.host.Close(context.Background())
		m.closeHealth()
		return nil, err
	}
	return m, nil
}

// logMembership logs, at info, each member that joined or left the
// cluster in a topology protoactor publishes (evt), with this member's
// own address (self): docs/observability.md#log-records.
func logMembership(l *slog.Logger, sys *actor.ActorSystem, evt any) {
	t, ok := evt.(*pcluster.ClusterTopology)
	if !ok {
		return
	}
	self := sys.Address()
	for _, mb := range t.Joined {
		l.Info("cluster member joined", "member", mb.Address(), "self", self)
	}
	for _, mb := range t.Left {
		l.Info("cluster member left", "member", mb.Address(), "self", self)
	}
}

// remoteConfig is the actor remote's configuration, of a member or a
// client. protoactor dials peers without blocking and, when a connect
// fails, forgets the gRPC connection without closing it: each failed
// attempt against a dead member leaves a connection redialing it for the
// life of the process. A blocking dial that fails fast (and times out
// against a host that does not answer) closes its connection itself; one
// attempt per connect, as the caller retries on a fresh placement anyway.
// With tc, the remote's server and every dial are mutual TLS (see
// Config.TLS); refusals go to refused.
func remoteConfig(bind string, port int, timeout time.Duration, tc *tls.Config, refused *refusals) *remote.Config {
	creds := insecure.NewCredentials()
	var opts []remote.ConfigOption
	if tc != nil {
		creds = credentials.NewTLS(clientTLS(tc))
		opts = append(opts, remote.WithServerOptions(grpc.Creds(credentials.NewTLS(serverTLS(tc, refused, "h2")))))
	}
	opts = append(opts, remote.WithDialOptions(
		grpc.WithTransportCredentials(creds),
		//lint:ignore SA1019 protoactor dials with grpc.Dial, which still honours it: the dial blocks until connected or refused.
		grpc.WithBlock(),
		//lint:ignore SA1019 as WithBlock: a refused dial fails at once rather than retrying until the timeout.
		grpc.FailOnNonTempDialError(true),
		//lint:ignore SA1019 protoactor calls grpc.Dial without a context: the option is the only bound on a blocking dial.
		grpc.WithTimeout(timeout),
	))
	rc := remote.Configure(bind, port, opts...)
	rc.MaxRetryCount = 1
	return rc
}

// startMember runs protoactor's StartMember.
func (m *Member) startMember() error { return start("member", m.c.StartMember) }

// start runs protoactor's StartMember or StartClient, which panic on
// failure, one at a time in the process (see startMu).
func start(what string, f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cluster: start %s: %v", what, r)
		}
	}()
	startMu.Lock()
	defer startMu.Unlock()
	f()
	return nil
}

// peersProvider makes the provider over Peers, with a health endpoint
// this member serves itself, bound to Bind.
func (m *Member) peersProvider() (pcluster.ClusterProvider, error) {
	ln := m.cfg.listener
	if ln == nil {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(m.cfg.Bind, strconv.Itoa(m.cfg.ProviderPort)))
		if err != nil {
			return nil, fmt.Errorf("cluster: provider endpoint: %w", err)
		}
	}
	port := ln.Addr().(*net.TCPAddr).Port
	// The members are the endpoints that answer: a member missing from
	// its own list would not count itself.
	self := net.JoinHostPort(m.cfg.Bind, strconv.Itoa(port))
	peers := slices.Clone(m.cfg.Peers)
	if !slices.Contains(peers, self) {
		peers = append(peers, self)
	}
	m.health = ln
	return newPeersProvider(peers, m.cfg.Refresh, ln, m.cfg.TLS, m.refused), nil
}

// checkPeers reports a peer that is not host:port.
func checkPeers(peers []string) error {
	var errs []error
	for _, p := range peers {
		if _, _, err := net.SplitHostPort(p); err != nil {
			errs = append(errs, fmt.Errorf("cluster: config: peer %q: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// closeHealth stops the provider this member made (its health endpoint
// with it) when the member fails to start, or after it left.
func (m *Member) closeHealth() {
	if m.health != nil {
		_ = m.provider.Shutdown(true)
	}
}

// Host is the member's local host: the sessions resident on this member.
// Use the Member's methods to reach a session wherever it lives.
func (m *Member) Host() *supervisor.Host { return m.host }

// Close leaves the cluster gracefully: the member stops taking new
// sessions, hands every session it runs over (a running turn may finish
// within HandoffTimeout, then it is disposed; everything is flushed and
// the writer locks released), stops its host and leaves. It takes a few
// seconds (protoactor's graceful shutdown waits two). A second Close
// returns supervisor.ErrClosed.
func (m *Member) Close(ctx context.Context) error {
	if err := m.markClosed(); err != nil {
		return err
	}
	m.attempts.Wait() // this member's own requests in flight (see Client.Close)
	// Leaving first moves the placement away from this member; the
	// placement actor stops every grain here, each of which hands its
	// session over (grain.stopping), before the cluster is down.
	stopRemote(func() { m.c.Shutdown(true) }, func() { m.c.Remote.Shutdown(false) })
	m.loads.Wait() // abandoned by their stopped grains; each evicts what it loaded
	m.closeHealth()
	return m.host.Close(ctx)
}
