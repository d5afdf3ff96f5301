package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/cluster"
	"github.com/dshgo/dsh/supervisor"
)

const memberUsage = `Usage: dsh member --dir DIR [flags]
       dsh member --store jsonl:DIR [flags]

Runs one member of a dsh cluster until SIGINT or SIGTERM. Sessions are
placed on the members by id; every member shares DIR (one directory on
one machine, a network file system across machines: each session's log
is fenced by a writer lock beside it). Members find each other through
their health endpoints: each serves one on --bind:--provider-port (the
wire of protoactor's automanaged provider) and polls every --peers
entry (every member's endpoint; its own may be left out). --bind must
be an address the other members can reach (not 0.0.0.0). A member that
dies leaves the cluster within about --refresh; its sessions move to
the others, which repair and resume them from DIR. A cluster shares a
JSONL directory only: a SQLite store (sqlite:PATH) is refused, since a
SQLite file on a network file system is not safe for several writers.

Whoever reaches a member can create sessions and read every session's
messages. With --tls-cert, --tls-key and --tls-ca (PEM files, all three
or none) every connection — between members, from "dsh run/chat --peers"
clients (which take the same flags), and to the health endpoint (HTTPS)
— is mutual TLS: a member accepts and reaches only peers whose
certificate the CA signed (each certificate must name its member's
--bind address, and serve for both server and client authentication).
It reports each certificate it refuses once, on stderr (with --json
too). Without them a member binds only a loopback address, unless
--insecure is given (it then says so on stderr).

It reports on stderr (or, with --json, as one JSON object per line on
stdout, nothing else): "up" with its address and the members it sees,
"members" each time they change, and "left". On SIGINT or SIGTERM the
member hands its sessions over (a running turn may finish within
--handoff), leaves, and exits 0.

Flags:
`

// splitPeers splits a --peers list (comma-separated host:port).
func splitPeers(peers string) []string {
	var out []string
	for p := range strings.SplitSeq(peers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// tlsFlags are --tls-cert, --tls-key and --tls-ca, of dsh member and of
// dsh run/chat --peers.
type tlsFlags struct{ cert, key, ca string }

func (f *tlsFlags) register(fs *flag.FlagSet, prefix string) {
	fs.StringVar(&f.cert, "tls-cert", "", prefix+"mutual TLS: this process's certificate (PEM; with --tls-key and --tls-ca)")
	fs.StringVar(&f.key, "tls-key", "", prefix+"mutual TLS: the certificate's private key (PEM)")
	fs.StringVar(&f.ca, "tls-ca", "", prefix+"mutual TLS: the certificate of the CA that signs every member's and client's (PEM)")
}

// given says some of the flags were given.
func (f tlsFlags) given() bool { return f.cert != "" || f.key != "" || f.ca != "" }

// load returns the TLS configuration of the flags: nil without them, a
// usage error with only some.
func (f tlsFlags) load() (*tls.Config, error) {
	if !f.given() {
		return nil, nil
	}
	if f.cert == "" || f.key == "" || f.ca == "" {
		return nil, usagef("--tls-cert, --tls-key and --tls-ca go together: give all three or none")
	}
	return cluster.LoadTLS(f.cert, f.key, f.ca)
}

// sortedMembers returns the addresses m sees, sorted.
func sortedMembers(m *cluster.Member) []string {
	ms := m.Members()
	slices.Sort(ms)
	return ms
}

// memberCmd is `dsh member`.
func memberCmd(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runMember(ctx, args, stdout, stderr)
}

func runMember(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("member")
	var cfg cluster.Config
	var peers, provider, model string
	var speed float64
	var asJSON bool
	var passivate time.Duration
	var stores storeFlags
	stores.register(fs, "the store directory every member shares (this or --store jsonl:DIR is required)")
	fs.StringVar(&cfg.Name, "name", cluster.DefaultName, "cluster name")
	fs.StringVar(&cfg.Bind, "bind", cluster.DefaultBind, "address to listen on (remote and provider endpoint)")
	fs.IntVar(&cfg.Port, "port", 0, "actor remote port (0: a free one)")
	fs.IntVar(&cfg.ProviderPort, "provider-port", cluster.DefaultProviderPort, "health endpoint port (the members poll each other there)")
	fs.StringVar(&peers, "peers", "", "comma-separated provider endpoints (host:port) of every member (default: this one only)")
	fs.DurationVar(&cfg.Refresh, "refresh", cluster.DefaultRefresh, "how often members poll each other")
	fs.DurationVar(&cfg.HandoffTimeout, "handoff", cluster.DefaultHandoffTimeout, "how long a moving session may finish its turn")
	fs.StringVar(&provider, "provider", "synthetic", "model provider: synthetic or deepseek")
	fs.StringVar(&model, "model", "", "model id (default: the provider's)")
	fs.Float64Var(&speed, "synthetic-speed", 0, "synthetic: tokens per second per stream (0: as fast as possible)")
	fs.DurationVar(&passivate, "passivate-after", 10*time.Minute, "stop a session idle this long (it resumes from --dir on its next request; 0: never)")
	fs.BoolVar(&asJSON, "json", false, "print events as JSON objects on stdout, one per line")
	var tf tlsFlags
	tf.register(fs, "")
	var of obsFlags
	of.register(fs, "info")
	of.registerActorMetrics(fs)
	var metricsAddr string
	fs.StringVar(&metricsAddr, "metrics-addr", "", "serve the member's metrics (Prometheus text) at http://ADDR/metrics, on a listener of its own (loopback unless --insecure)")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "without TLS, bind a non-loopback --bind all the same (plaintext: anyone who reaches it can read every session)")
	if err := parseFlags(fs, args, memberUsage, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("member: unexpected argument %q", fs.Arg(0))
	}
	if !stores.given() {
		return usagef("member: --dir is required")
	}
	loc, err := stores.location("member")
	if err != nil {
		return err
	}
	if loc.Scheme != persister.SchemeJSONL {
		// Not usage (exit 2 and a hint): one line that says why.
		return fmt.Errorf("member: --store %s: a cluster shares a JSONL directory (--store jsonl:DIR); a SQLite file on a network file system is not safe for several writers", loc)
	}
	cfg.Dir = loc.Path
	cfg.Peers = splitPeers(peers)
	if tf.given() && cfg.Insecure {
		return usagef("member: --insecure goes without --tls-cert, --tls-key and --tls-ca")
	}
	if cfg.TLS, err = tf.load(); err != nil {
		return err
	}
	if err := cfg.Validate(); errors.Is(err, cluster.ErrInsecure) {
		return usagef("member: --bind %s is not a loopback address: without TLS anyone who reaches it could create sessions and read every session's messages; give --tls-cert, --tls-key and --tls-ca, or --insecure", cfg.Bind)
	} else if err != nil {
		return usagef("member: %v", err)
	}
	// The members record the model id as given: "" is the provider's.
	prov, _, err := modelFlags{provider: provider, model: model, speed: speed}.open("member: ")
	if err != nil {
		return err
	}
	if passivate < 0 {
		return usagef("member: --passivate-after must not be negative")
	}
	var errMu sync.Mutex // stderr is written from the refusals' goroutines too
	if metricsAddr != "" {
		host, _, err := net.SplitHostPort(metricsAddr)
		if err != nil {
			return usagef("member: --metrics-addr %q: %v", metricsAddr, err)
		}
		if !loopbackAddr(host) && !cfg.Insecure {
			return usagef("member: --metrics-addr %s is not a loopback address: the metrics name no session but are not authenticated; give --insecure to serve them there", metricsAddr)
		}
	}
	o, err := of.open(ctx, stderr, &errMu, metricsAddr != "", false /* hold */)
	if err != nil {
		return err
	}
	defer func() { _ = o.close(nil) }()
	tr, err := openTraces(ctx, lockedWriter{&errMu, stderr})
	if err != nil {
		return err
	}
	tr.countDropped(o)
	defer tr.close() // after m.Close below: its sessions' last spans end as they stop
	cfg.Session = supervisor.Config{Provider: prov, Model: model, IdleTimeout: passivate, Observers: tr.observers(),
		Logger: o.logger, MeterProvider: o.meterProvider()}
	if o.actorMetrics {
		// protoactor's instruments come from the global provider (see
		// obs.system).
		otel.SetMeterProvider(o.mp)
		cfg.ActorMetrics = true
	}
	if metricsAddr != "" {
		stopMetrics, url, err := serveMetrics(metricsAddr, o, &errMu, stderr)
		if err != nil {
			return fmt.Errorf("member: --metrics-addr: %w", err)
		}
		defer stopMetrics()
		errMu.Lock()
		fmt.Fprintf(stderr, "dsh member: metrics on %s\n", url)
		errMu.Unlock()
	}
	cfg.OnRefused = func(e *cluster.RefusedError) {
		errMu.Lock()
		defer errMu.Unlock()
		fmt.Fprintf(stderr, "dsh member: %v\n", e)
	}
	if cfg.Insecure {
		fmt.Fprintf(stderr, "dsh member: --insecure: no TLS on %s: anyone who reaches it can create sessions and read every session's messages\n", cfg.Bind)
	}

	m, err := cluster.Start(cfg)
	if err != nil {
		return err
	}
	addr := m.Address()
	emit := func(event string, members []string) {
		if asJSON {
			b, _ := json.Marshal(struct {
				Event   string   `json:"event"`
				Address string   `json:"address"`
				Cluster string   `json:"cluster"`
				Members []string `json:"members,omitempty"`
			}{event, addr, cfg.Name, members})
			fmt.Fprintf(stdout, "%s\n", b)
			return
		}
		errMu.Lock()
		defer errMu.Unlock()
		switch event {
		case "up":
			fmt.Fprintf(stderr, "dsh member %s: up in cluster %q on %s; members: %s\n", addr, cfg.Name, cfg.Dir, strings.Join(members, ", "))
		case "members":
			fmt.Fprintf(stderr, "dsh member %s: members: %s\n", addr, strings.Join(members, ", "))
		case "left":
			fmt.Fprintf(stderr, "dsh member %s: left the cluster\n", addr)
		}
	}
	seen := sortedMembers(m)
	emit("up", seen)
	tick := time.NewTicker(cfg.Refresh)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			if now := sortedMembers(m); !slices.Equal(now, seen) {
				seen = now
				emit("members", seen)
			}
		}
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), cfg.HandoffTimeout+time.Minute)
	defer cancel()
	if err := m.Close(closeCtx); err != nil {
		return fmt.Errorf("member %s: close: %w", addr, err)
	}
	emit("left", nil)
	return nil
}

// serveMetrics serves o's metrics at /metrics on a listener of its own
// (the cluster's health endpoint stays as it is), until stop.
func serveMetrics(addr string, o *obs, mu *sync.Mutex, stderr io.Writer) (stop func(), url string, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", o.mp.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			mu.Lock()
			fmt.Fprintf(stderr, "dsh member: metrics: %v\n", err)
			mu.Unlock()
		}
	}()
	return func() {
		_ = srv.Close()
		<-done
	}, "http://" + ln.Addr().String() + "/metrics", nil
}
