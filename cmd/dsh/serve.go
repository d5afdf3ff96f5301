package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/agent/fstools"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/cluster"
	"github.com/dshgo/dsh/httpapi"
	"github.com/dshgo/dsh/supervisor"
)

const serveUsage = `Usage: dsh serve [flags]

Serves the sessions of --store (or --dir) over HTTP: a JSON API under /v1 with
Server-Sent Events for each session's log (see the httpapi package),
/healthz, and /metrics (the host's metrics in the Prometheus text format,
behind the token like /v1; docs/observability.md lists them). It prints
the address it listens on to stderr, and its log records (--log-level,
default info). OTEL_EXPORTER_OTLP_ENDPOINT (or ..._METRICS_ENDPOINT) also
pushes the metrics over OTLP/HTTP.

Auth: with --token-file F (or DSH_TOKEN) every /v1 route needs the header
"Authorization: Bearer TOKEN". Without a token there is no auth: dsh
serve then binds only a loopback --addr, says so on stderr, and answers
only requests whose Host header names the loopback (a web page elsewhere
cannot reach it by rebinding its own name). Cross-origin requests are
refused unless --cors-origin names the origin.

The model's file tools are off unless --workdir names the directory they
may read (a network service does not expose its working directory).

With --peers the sessions live on a cluster of "dsh member" processes:
dsh serve joins it as a client (hosting nothing) and --dir/--store must
name the store the members share, which it reads without locks to list
sessions (listing activates none). The model flags and --workdir are the
members'. Members run with TLS take --tls-cert, --tls-key and --tls-ca
here too.

On SIGINT or SIGTERM it stops accepting, ends the event streams, lets the
running turns end within --drain (then cancels them, cause disposed),
flushes every session and exits 0.

Flags:
`

// serveFlags are the flags of dsh serve.
type serveFlags struct {
	addr, tokenFile, cors string
	stores                storeFlags
	certFile, keyFile     string
	modelFlags
	workdir                     string
	maxBody                     int64
	passivate, drain, keepAlive time.Duration
	peers                       string
	tls                         tlsFlags
	obs                         obsFlags
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "address to listen on (host:port; port 0 picks a free one)")
	f.stores.register(fs, "data directory holding the sessions (default $XDG_DATA_HOME/dsh, else ~/.local/share/dsh); --store jsonl:DIR")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token every /v1 route needs (default: $DSH_TOKEN; none: no auth, loopback only)")
	fs.StringVar(&f.cors, "cors-origin", "", "the one foreign origin (scheme://host[:port]) allowed to call the API")
	fs.StringVar(&f.certFile, "https-cert", "", "serve HTTPS with this certificate (PEM; with --https-key)")
	fs.StringVar(&f.keyFile, "https-key", "", "the HTTPS certificate's private key (PEM)")
	f.modelFlags.register(fs)
	fs.StringVar(&f.workdir, "workdir", "", "directory the model's read-only file tools may read (default: no file tools)")
	fs.Int64Var(&f.maxBody, "max-body", httpapi.DefaultMaxBody, "largest request body, in bytes")
	fs.DurationVar(&f.passivate, "passivate-after", 10*time.Minute, "stop a session idle this long (it resumes from --dir on its next request; 0: never)")
	fs.DurationVar(&f.drain, "drain", 10*time.Second, "on SIGINT/SIGTERM, how long running turns may go on before they are cancelled")
	fs.DurationVar(&f.keepAlive, "keep-alive", httpapi.DefaultKeepAlive, "interval of the keep-alive comment on an idle event stream")
	fs.StringVar(&f.peers, "peers", "", "serve a cluster's sessions: the provider endpoints (host:port, comma-separated) of its members; --dir/--store then names the store they share (read, without locks, to list sessions)")
	f.tls.register(fs, "with --peers: ")
	f.obs.register(fs, "info")
	f.obs.registerActorMetrics(fs)
}

// serveEnv lets tests replace the model and learn the address.
type serveEnv struct {
	provider llm.Provider
	// listening, when set, is told the URL the server listens on.
	listening func(url string)
}

var cmdServeEnv serveEnv

// serveCmd is `dsh serve`.
func serveCmd(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runServe(ctx, args, stdout, stderr, cmdServeEnv)
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer, env serveEnv) error {
	fs := newFlagSet("serve")
	var f serveFlags
	f.register(fs)
	if err := parseFlags(fs, args, serveUsage, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("serve: unexpected argument %q", fs.Arg(0))
	}
	if f.maxBody <= 0 || f.drain < 0 || f.passivate < 0 || f.keepAlive <= 0 {
		return usagef("serve: --max-body and --keep-alive must be positive, --drain and --passivate-after not negative")
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return usagef("serve: --https-cert and --https-key go together")
	}
	token := os.Getenv("DSH_TOKEN")
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return fmt.Errorf("--token-file %s is empty", f.tokenFile)
		}
	}
	host, _, err := net.SplitHostPort(f.addr)
	if err != nil {
		return usagef("serve: --addr %q: %v", f.addr, err)
	}
	if token == "" && !loopbackAddr(host) {
		return usagef("serve: --addr %s is not a loopback address: without a token (--token-file or DSH_TOKEN) dsh serve binds only the loopback", f.addr)
	}
	loc, err := f.stores.location("serve")
	if err != nil {
		return err
	}
	var logMu sync.Mutex
	o, err := f.obs.open(ctx, stderr, &logMu, true /* prometheus */, false /* hold */)
	if err != nil {
		return err
	}
	defer func() { _ = o.close(nil) }()
	logger := o.logger
	if f.peers != "" {
		if !f.stores.given() {
			return usagef("serve: --peers needs --dir or --store: the store the members share (to list sessions)")
		}
		return servePeers(ctx, f, loc, token, o, &logMu, stderr, env)
	}
	if f.tls.given() {
		return usagef("serve: --tls-cert, --tls-key and --tls-ca go with --peers")
	}
	prov, model, err := serveProvider(f, env)
	if err != nil {
		return err
	}
	var tools []agent.Tool
	if f.workdir != "" {
		fst, err := fstools.New(f.workdir)
		if err != nil {
			return fmt.Errorf("--workdir: %w", err)
		}
		defer fst.Close()
		tools = fst.Tools()
	}
	reg, err := agent.NewRegistry(append(tools, agent.TodoWriteTool{})...)
	if err != nil {
		return err
	}
	st, err := openTalkStore(loc, nil)
	if err != nil {
		return err
	}
	tr, err := openTraces(ctx, lockedWriter{&logMu, stderr})
	if err != nil {
		_ = st.Close()
		return err
	}
	tr.countDropped(o)
	h, err := supervisor.Open(supervisor.Config{Store: st, Provider: prov, Model: model, Tools: reg,
		Policy: persister.PolicyTurnEnd, IdleTimeout: f.passivate, Observers: tr.observers(),
		Logger: logger, MeterProvider: o.meterProvider(), System: o.system()})
	if err != nil {
		tr.close()
		_ = st.Close()
		return err
	}
	closeHost := func(drain time.Duration) error {
		defer tr.close() // after the host: its sessions' last spans end as they stop
		return drainHost(h, drain)
	}
	return listenAndServe(ctx, f, h, token, o, &logMu, stderr, env, loc.String(), closeHost)
}

// servePeers serves the sessions of the cluster of --peers.
func servePeers(ctx context.Context, f serveFlags, loc persister.Location, token string, o *obs, logMu *sync.Mutex,
	stderr io.Writer, env serveEnv) error {
	tc, err := f.tls.load()
	if err != nil {
		return err
	}
	rd, err := persister.OpenReader(loc.String())
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cl, err := cluster.Dial(dctx, cluster.ClientConfig{Peers: splitPeers(f.peers), TLS: tc, Store: rd})
	if err != nil {
		_ = rd.Close()
		return err
	}
	closeAll := func(time.Duration) error {
		return errors.Join(cl.Close(), rd.Close())
	}
	return listenAndServe(ctx, f, cl, token, o, logMu, stderr, env, "the cluster of "+f.peers, closeAll)
}

// listenAndServe serves be on --addr until ctx ends, then shuts down:
// stops accepting, ends the event streams, lets running turns end within
// --drain, and closes the backend with closeBackend.
func listenAndServe(ctx context.Context, f serveFlags, be httpapi.Backend, token string, o *obs, logMu *sync.Mutex,
	stderr io.Writer, env serveEnv, where string, closeBackend func(drain time.Duration) error) error {
	logger := o.logger
	srv, err := httpapi.New(httpapi.Config{Backend: be, Token: token, LoopbackOnly: token == "",
		CORSOrigin: f.cors, MaxBody: f.maxBody, KeepAlive: f.keepAlive, Logger: logger, Metrics: o.mp.Handler()})
	if err != nil {
		_ = closeBackend(0)
		return usagef("serve: %v", err)
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		_ = closeBackend(0)
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	hs.RegisterOnShutdown(srv.Close)
	scheme := "http"
	if f.certFile != "" {
		scheme = "https"
	}
	url := scheme + "://" + ln.Addr().String()
	logMu.Lock()
	if token == "" {
		fmt.Fprintf(stderr, "dsh serve: no token (--token-file or DSH_TOKEN): no auth, loopback only\n")
	}
	fmt.Fprintf(stderr, "dsh serve: listening on %s (sessions in %s)\n", url, where)
	logMu.Unlock()
	if env.listening != nil {
		env.listening(url)
	}
	served := make(chan error, 1)
	go func() {
		if f.certFile != "" {
			served <- hs.ServeTLS(ln, f.certFile, f.keyFile)
		} else {
			served <- hs.Serve(ln)
		}
	}()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	logMu.Lock()
	fmt.Fprintf(stderr, "dsh serve: shutting down (running turns may end within %v)\n", f.drain)
	logMu.Unlock()
	start := time.Now()
	dctx, cancel := context.WithTimeout(context.Background(), f.drain)
	defer cancel()
	srv.Close()
	if err := hs.Shutdown(dctx); err != nil {
		_ = hs.Close()
	}
	srv.Wait()
	cerr := closeBackend(max(f.drain-time.Since(start), 0))
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return cerr
}

// drainHost lets the host's running turns end within drain, then closes
// it (which cancels what still runs, cause disposed, and flushes every
// session).
func drainHost(h *supervisor.Host, drain time.Duration) error {
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if list, err := h.List(dctx); err == nil {
		var wg sync.WaitGroup
		for _, i := range list {
			if i.Running {
				wg.Go(func() { _ = h.WaitIdle(dctx, i.Header.ID) })
			}
		}
		wg.Wait()
	}
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	defer ccancel()
	return h.Close(cctx)
}

// serveProvider builds the model provider of the flags.
func serveProvider(f serveFlags, env serveEnv) (llm.Provider, string, error) {
	if env.provider != nil {
		return env.provider, f.model, nil
	}
	return f.modelFlags.open("serve: ")
}

// loopbackAddr reports whether a listen host is a loopback name or
// address.
func loopbackAddr(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
