package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/dshgo/dsh/supervisor"
	"github.com/dshgo/dsh/telemetry"
)

// obsFlags are the logging and metrics flags of the commands that run
// sessions (run, chat, bench, serve, member).
type obsFlags struct {
	level, format string
	actorMetrics  bool
}

func (f *obsFlags) register(fs *flag.FlagSet, defLevel string) {
	fs.StringVar(&f.level, "log-level", defLevel, "log records on stderr from this level: debug, info, warn or error (debug includes protoactor's own)")
	fs.StringVar(&f.format, "log-format", "text", "log record format: text or json")
}

// registerActorMetrics adds --actor-metrics, for the commands whose host
// runs in an actor system the flags may make.
func (f *obsFlags) registerActorMetrics(fs *flag.FlagSet) {
	fs.BoolVar(&f.actorMetrics, "actor-metrics", false, "also export protoactor's per-actor metrics (a histogram per message: costly)")
}

// parseLevel reads a --log-level.
func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(s))); err != nil {
		return 0, usagef("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// obs is what the flags set up: the logger, the meter provider (nil when
// nothing exports metrics) and, with --actor-metrics, the actor system
// the host runs in.
type obs struct {
	logger *slog.Logger
	held   *heldHandler // nil unless hold
	mp     *telemetry.MeterProvider
	errs   *otelErrors // the process's OpenTelemetry error handler
	// actorMetrics: --actor-metrics was given (and there is an mp).
	actorMetrics bool
	sys          *actor.ActorSystem // made by system; nil: the host makes its own
}

// openObs sets up logging on stderr (mu serialises it with the command's
// own lines) and the metric exporters: a Prometheus registry when
// prometheus is set, OTLP/HTTP when the OTEL_* variables ask for it.
// hold keeps warnings that carry an error until release (see
// heldHandler): dsh run and chat, which print a failure themselves.
func (f *obsFlags) open(ctx context.Context, stderr io.Writer, mu *sync.Mutex, prometheus, hold bool) (*obs, error) {
	level, err := parseLevel(f.level)
	if err != nil {
		return nil, err
	}
	w := lockedWriter{mu, stderr}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch f.format {
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, usagef("--log-format %q: want text or json", f.format)
	}
	o := &obs{}
	if hold {
		o.held = &heldHandler{next: h, shared: &heldRecords{}}
		h = o.held
	}
	o.logger = slog.New(h)
	o.errs = &otelErrors{logger: o.logger}
	otel.SetErrorHandler(o.errs)
	o.mp, err = telemetry.NewMeterProvider(ctx, telemetry.ExportConfig{Prometheus: prometheus, OTLP: telemetry.OTLPFromEnv()})
	if err != nil {
		return nil, err
	}
	if f.actorMetrics {
		if o.mp == nil {
			_ = o.close(nil)
			return nil, usagef("--actor-metrics: no metrics exporter (set OTEL_EXPORTER_OTLP_ENDPOINT, or use --metrics-out, dsh serve or dsh member --metrics-addr)")
		}
		o.actorMetrics = true
	}
	return o, nil
}

// system returns the actor system the host runs in: with --actor-metrics,
// one that also records protoactor's per-actor metrics (made on the first
// call, shut down by close); nil otherwise (the host makes its own).
//
// protoactor takes its instruments from OpenTelemetry's global meter
// provider (the one it is given only switches them on), so the provider
// becomes the process's global one: a command runs one.
func (o *obs) system() *actor.ActorSystem {
	if o.actorMetrics && o.sys == nil {
		otel.SetMeterProvider(o.mp)
		o.sys = supervisor.NewSystem(o.logger, actor.WithMetricProviders(o.mp))
	}
	return o.sys
}

// meterProvider is the provider for supervisor.Config: a nil interface
// when nothing exports metrics (no instrument is created then).
func (o *obs) meterProvider() metric.MeterProvider {
	if o.mp == nil {
		return nil
	}
	return o.mp
}

// close prints the warnings still held but those of cmdErr (the error the
// command is about to print), then shuts the actor system (if the flags
// made one) and the exporters down, after the host closed: an OTLP
// exporter pushes what it has. An export that fails is logged (warn),
// not the command's failure: its own result stands. It returns nil; the
// error result is for symmetry with the other closers.
func (o *obs) close(cmdErr error) error {
	defer o.release(cmdErr)
	if o.sys != nil {
		o.sys.Shutdown()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := o.mp.Shutdown(ctx); err != nil {
		o.errs.Handle(err)
	}
	o.errs.flush()
	return nil
}

// otelErrors is the process's OpenTelemetry error handler
// (otel.SetErrorHandler: there is one per process), shared by the metric
// and the span export, which report their failures there (an unreachable
// collector, a refused batch): the first is a warn record of the
// command's logger, the others are counted and reported in one more
// record when the command ends (flush), so that a collector that is down
// costs two lines, not one per batch. It never changes the command's
// result. Safe for concurrent use.
type otelErrors struct {
	logger *slog.Logger
	mu     sync.Mutex
	n      int // errors since the last flush; guarded by mu
}

// Handle implements otel.ErrorHandler.
func (e *otelErrors) Handle(err error) {
	e.mu.Lock()
	e.n++
	first := e.n == 1
	e.mu.Unlock()
	if first {
		e.logger.Warn("telemetry export failed", "err", visibleLine(err.Error()))
	}
}

// flush reports the errors after the first.
func (e *otelErrors) flush() {
	e.mu.Lock()
	more := e.n - 1
	e.n = 0
	e.mu.Unlock()
	if more > 0 {
		e.logger.Warn("telemetry export failed again", "more", more)
	}
}

// release prints the held warnings, but those whose error is err's (the
// command prints that one itself, as its one line).
func (o *obs) release(err error) {
	if o.held != nil {
		o.held.release(err)
	}
}

// heldHandler holds the records at warn level or above that carry an
// "err" attribute until release: dsh run and chat report a failed turn
// end themselves, as their one-line error, and the host's warning of the
// same write failure would say it twice. Released records whose error the
// command's does not contain are printed then (at the end of each turn),
// the others dropped. At most maxHeld are held; past that they are
// printed at once. Safe for concurrent use.
type heldHandler struct {
	next   slog.Handler
	shared *heldRecords
}

type heldRecords struct {
	mu   sync.Mutex
	recs []heldRecord // guarded by mu
}

type heldRecord struct {
	h   slog.Handler
	r   slog.Record
	err string
}

const maxHeld = 64

func (h *heldHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *heldHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		var errText string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" {
				errText = a.Value.String()
				return false
			}
			return true
		})
		if errText != "" {
			s := h.shared
			s.mu.Lock()
			if len(s.recs) < maxHeld {
				s.recs = append(s.recs, heldRecord{h: h.next, r: r.Clone(), err: errText})
				s.mu.Unlock()
				return nil
			}
			s.mu.Unlock()
		}
	}
	return h.next.Handle(ctx, r)
}

func (h *heldHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &heldHandler{next: h.next.WithAttrs(as), shared: h.shared}
}

func (h *heldHandler) WithGroup(name string) slog.Handler {
	return &heldHandler{next: h.next.WithGroup(name), shared: h.shared}
}

// release prints the held records but those whose error err's text
// contains (err nil: all).
func (h *heldHandler) release(err error) {
	s := h.shared
	s.mu.Lock()
	recs := s.recs
	s.recs = nil
	s.mu.Unlock()
	for _, hr := range recs {
		if err != nil && strings.Contains(err.Error(), hr.err) {
			continue
		}
		_ = hr.h.Handle(context.Background(), hr.r)
	}
}
