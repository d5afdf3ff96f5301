package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/dshgo/dsh/actors/session"
)

// Defaults of Config (the other defaults are in its fields' comments).
const (
	DefaultMaxBody      = 1 << 20
	defaultMaxText      = 256 << 10
	DefaultKeepAlive    = 15 * time.Second
	defaultWriteTimeout = 10 * time.Second
	defaultPageLimit    = 50
	maxPageLimit        = 500
	// maxIDLen bounds a session id or a client message id.
	maxIDLen = 128
)

// Config configures a Server. Every field but Backend works at its zero
// value.
type Config struct {
	// Backend holds the sessions. Required.
	Backend Backend
	// Token, when set, is the bearer token every /v1 route needs
	// (Authorization: Bearer TOKEN, compared in constant time). "": no
	// auth.
	Token string
	// LoopbackOnly refuses a request whose Host header is not a loopback
	// name or address (a page on another site that resolves its own name
	// to 127.0.0.1 must not reach an unauthenticated server). Set it
	// whenever Token is "".
	LoopbackOnly bool
	// CORSOrigin is the one foreign origin allowed to call the API (for
	// example "https://app.example"). "": cross-origin requests are
	// refused.
	CORSOrigin string
	// MaxBody caps a request body in bytes (TOO_LARGE beyond). Default
	// 1 MiB.
	MaxBody int64
	// MaxText caps a message's text in bytes (BAD_REQUEST beyond).
	// Default 256 KiB.
	MaxText int
	// KeepAlive is the interval of the comment an event stream sends when
	// it has nothing else to send. Default 15s.
	KeepAlive time.Duration
	// WriteTimeout bounds each write to an event stream's client: a client
	// that does not take the bytes within it is disconnected (it resumes by
	// reconnecting with Last-Event-ID). Default 10s.
	WriteTimeout time.Duration
	// Logger gets the errors answered INTERNAL. nil: discarded.
	Logger *slog.Logger
	// Metrics, when set, is served at GET /metrics (the Prometheus text
	// format: telemetry.MeterProvider.Handler), behind the bearer token
	// like the /v1 routes. nil: no /metrics route.
	Metrics http.Handler
}

// validate reports a config that cannot work.
func (c Config) validate() error {
	var errs []error
	if c.Backend == nil {
		errs = append(errs, errors.New("httpapi: Config.Backend is required"))
	}
	if c.MaxBody < 0 || c.MaxText < 0 || c.KeepAlive < 0 || c.WriteTimeout < 0 {
		errs = append(errs, errors.New("httpapi: negative MaxBody, MaxText, KeepAlive or WriteTimeout"))
	}
	if c.CORSOrigin != "" {
		if u, err := url.Parse(c.CORSOrigin); err != nil || u.Scheme == "" || u.Host == "" || u.Path != "" {
			errs = append(errs, fmt.Errorf("httpapi: CORSOrigin %q is not an origin (scheme://host[:port])", c.CORSOrigin))
		}
	}
	return errors.Join(errs...)
}

// Server is the HTTP face of a Backend. It is an http.Handler.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	token   [sha256.Size]byte
	closing chan struct{}
	once    sync.Once

	streams sync.WaitGroup
	open    atomic.Int64 // event streams being served
	keys    keyLocks
}

// New returns a server over cfg.Backend.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxText == 0 {
		cfg.MaxText = defaultMaxText
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = DefaultKeepAlive
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = defaultWriteTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), closing: make(chan struct{}), keys: keyLocks{m: map[string]*keyLock{}}}
	s.token = sha256.Sum256([]byte(cfg.Token))
	s.routes()
	return s, nil
}

// Close ends every event stream (cleanly, at an event boundary) and makes
// new ones fail with CLOSED. Call it before http.Server.Shutdown, which
// waits for the handlers (or register it with RegisterOnShutdown).
func (s *Server) Close() {
	s.once.Do(func() { close(s.closing) })
}

// Wait waits for the event streams to end (after Close).
func (s *Server) Wait() { s.streams.Wait() }

// Streams returns the number of event streams being served.
func (s *Server) openStreams() int { return int(s.open.Load()) }

func (s *Server) routes() {
	v1 := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		s.mux.Handle(pattern, s.api(h))
	}
	v1("POST /v1/sessions", s.create)
	v1("GET /v1/sessions", s.list)
	v1("GET /v1/sessions/{id}", s.get)
	v1("POST /v1/sessions/{id}/messages", s.send)
	v1("GET /v1/sessions/{id}/messages", s.messages)
	v1("POST /v1/sessions/{id}/cancel", s.cancel)
	v1("POST /v1/sessions/{id}/fork", s.fork)
	v1("GET /v1/sessions/{id}/events", s.events)
	if s.cfg.Metrics != nil {
		s.mux.Handle("GET /metrics", s.authed(s.cfg.Metrics))
	}
	s.mux.HandleFunc("GET /openapi.json", serveOpenAPI)
	s.mux.HandleFunc("GET /{$}", webFile("index.html"))
	s.mux.HandleFunc("GET /app.js", webFile("app.js"))
	s.mux.HandleFunc("GET /app.css", webFile("app.css"))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{codeNotFound, "no route " + r.Method + " " + r.URL.Path})
	})
}

// ServeHTTP checks the Host header and the origin, then routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.cfg.LoopbackOnly && !loopbackHost(r.Host) {
		writeError(w, &apiError{codeForbidden, "this server answers only to a loopback host name"})
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		switch {
		case origin == s.cfg.CORSOrigin:
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Vary", "Origin")
			if r.Method == http.MethodOptions {
				h.Set("Access-Control-Allow-Methods", "GET, POST")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		case sameOrigin(origin, r.Host):
		default:
			writeError(w, &apiError{codeForbidden, "cross-origin requests are refused"})
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// api wraps a /v1 handler: bearer auth, the body cap, and the error
// envelope for the error it returns.
func (s *Server) api(h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dsh"`)
			writeError(w, &apiError{codeUnauthorized, "a valid bearer token is required"})
			return
		}
		if r.ContentLength > s.cfg.MaxBody {
			writeError(w, &apiError{codeTooLarge, fmt.Sprintf("the request body is over %d bytes", s.cfg.MaxBody)})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
		if err := h(w, r); err != nil {
			ae := classify(err)
			if ae.code == codeInternal {
				s.cfg.Logger.Error("httpapi: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			}
			writeError(w, ae)
		}
	})
}

// authed serves h to a request with the bearer token, and refuses the
// others as the /v1 routes do.
func (s *Server) authed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dsh"`)
			writeError(w, &apiError{codeUnauthorized, "a valid bearer token is required"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.Token == "" {
		return true
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	// Hashing first makes the comparison's time independent of the
	// length of either token.
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
}

// loopbackHost reports whether a Host header names this machine's
// loopback: localhost, 127.0.0.0/8 or ::1, with or without a port.
func loopbackHost(host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// sameOrigin reports whether origin names the host the request was sent
// to (a page this server served).
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, host)
}

// decode reads a JSON object body into v: unknown fields, trailing data
// and wrong types are BAD_REQUEST, a body over the cap TOO_LARGE. An
// empty body leaves v as it is when optional.
func decode(r *http.Request, v any, optional bool) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var me *http.MaxBytesError
		if errors.As(err, &me) {
			return &apiError{codeTooLarge, fmt.Sprintf("the request body is over %d bytes", me.Limit)}
		}
		return badRequest("reading the request body: " + err.Error())
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		if optional {
			return nil
		}
		return badRequest("a JSON body is required")
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("invalid JSON body: " + strings.TrimPrefix(err.Error(), "json: "))
	}
	if dec.More() {
		return badRequest("invalid JSON body: data after the object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("invalid JSON body: data after the object")
	}
	return nil
}

// checkID reports an id the API does not accept: empty, too long, not
// UTF-8, or with a control character, a slash or a backslash.
func checkID(what, id string) error {
	switch {
	case id == "":
		return badRequest(what + " is empty")
	case len(id) > maxIDLen:
		return badRequest(fmt.Sprintf("%s is over %d bytes", what, maxIDLen))
	case !utf8.ValidString(id):
		return badRequest(what + " is not UTF-8")
	case strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '/' || r == '\\' }):
		return badRequest(what + " has a control character or a slash")
	case id == "." || id == "..":
		return badRequest(what + " is . or ..")
	}
	return nil
}

// pathID is the {id} of the route, NO_SESSION when it cannot name one.
func pathID(r *http.Request) (session.SessionID, error) {
	id := r.PathValue("id")
	if checkID("the session id", id) != nil {
		return "", &apiError{codeNoSession, "no such session"}
	}
	return session.SessionID(id), nil
}

// keyLocks serialises the requests that carry the same client message
// id, so a retry racing its original is delivered once.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

func (k *keyLocks) lock(key string) func() {
	k.mu.Lock()
	l := k.m[key]
	if l == nil {
		l = &keyLock{}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
