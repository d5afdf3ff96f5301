package spans

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/telemetry"
)

// Exporter exports the spans of live sessions: a telemetry.Observer (for
// supervisor.Config.Observers) whose per-session observer feeds a Builder
// with each committed event and hands each span that ends to a batching
// span processor, which exports in the background. Safe for concurrent
// use.
//
// The session actor never waits on the export: a span is handed over
// without blocking, and dropped (and counted: Dropped) when the export is
// that far behind, rather than slowing the session. A host without an
// Exporter pays nothing: there is no observer.
//
// The hand-over: ended spans go into a buffer of handOff spans, which one
// goroutine empties into the SDK's batch span processor, made blocking:
// when the processor's queue (OTEL_BSP_MAX_QUEUE_SIZE) is full the
// goroutine waits, the buffer fills, and the next span is dropped here,
// where it is counted. Rejected: the processor dropping spans itself (its
// default), which counts them where no one can read the count.
type Exporter struct {
	proc sdktrace.SpanProcessor
	res  *resource.Resource

	mu      sync.RWMutex // guards closed against sends on spans
	closed  bool
	spans   chan handed
	done    chan struct{} // closed when the forwarder returns
	dropped atomic.Int64
}

// handed is one item of the hand-over: a span, or a flush's marker.
type handed struct {
	span  sdktrace.ReadOnlySpan
	flush chan struct{} // closed once every span before it is forwarded
}

// handOff is the size of the hand-over buffer.
const handOff = 1024

var _ telemetry.Observer = (*Exporter)(nil)

// NewExporter returns an Exporter sending spans of resource res through
// exp, batched by the SDK's BatchSpanProcessor (its defaults, and the
// standard OTEL_BSP_* variables). Shutdown flushes and shuts exp down.
func NewExporter(exp sdktrace.SpanExporter, res *resource.Resource) *Exporter {
	x := &Exporter{proc: sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBlocking()), res: res,
		spans: make(chan handed, handOff), done: make(chan struct{})}
	go x.forward()
	return x
}

// forward hands the spans to the processor, in order, until Shutdown.
func (x *Exporter) forward() {
	defer close(x.done)
	for h := range x.spans {
		if h.flush != nil {
			close(h.flush)
			continue
		}
		x.proc.OnEnd(h.span)
	}
}

// end hands an ended span over, or drops it if the buffer is full or the
// exporter shut down.
func (x *Exporter) end(s *Span) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.closed {
		x.dropped.Add(1)
		return
	}
	select {
	case x.spans <- handed{span: readOnly(s, x.res)}:
	default:
		x.dropped.Add(1)
	}
}

// Dropped returns the spans dropped so far: ended while the export was too
// far behind to take them, or after Shutdown.
func (x *Exporter) Dropped() int64 { return x.dropped.Load() }

// Open returns the observer of session id, which holds the events past:
// a Builder fed the turn past leaves open (so that a session reactivated
// in the middle of a turn, or repaired on load, ends that turn's spans as
// `dsh log trace` of its log does), then each committed event.
//
// Only the end of past is read: the last request/context (the model a call
// goes to) and the events from the last turn/start on. Spans that end
// within past were exported, live, by an earlier residency (or never, if
// tracing was off then); `dsh log trace` gives them.
func (x *Exporter) Open(id session.SessionID, past session.Events) session.Observer {
	b := NewBuilder(id, 0, func(s Span) { x.end(&s) })
	prime(b, past)
	return func(e session.Event) error {
		b.Add(e)
		return nil
	}
}

// prime feeds b the part of past it needs, emitting nothing.
func prime(b *Builder, past session.Events) {
	n := past.Len()
	turnAt, ctxAt := -1, -1
	for i := n - 1; i >= 0 && (turnAt < 0 || ctxAt < 0); i-- {
		switch past.At(i).Type() {
		case session.TypeTurnStart:
			if turnAt < 0 {
				turnAt = i
			}
		case session.TypeTurnEnd:
			if turnAt < 0 {
				turnAt = n // the last turn ended: none to feed
			}
		case session.TypeRequestContext:
			if ctxAt < 0 {
				ctxAt = i
			}
		}
	}
	emit := b.emit
	b.emit = func(Span) {}
	defer func() { b.emit = emit }()
	if ctxAt >= 0 && (turnAt < 0 || ctxAt < turnAt) {
		b.Add(past.At(ctxAt))
	}
	for i := max(turnAt, 0); turnAt >= 0 && i < n; i++ {
		b.Add(past.At(i))
	}
	if n > 0 {
		// Whatever was fed, the next live event follows the last past one.
		last := past.At(n - 1)
		b.prevTime, b.prevSeq = last.Time(), last.Seq()
	}
}

// ForceFlush exports the spans ended so far.
func (x *Exporter) ForceFlush(ctx context.Context) error {
	x.mu.RLock()
	if x.closed {
		x.mu.RUnlock()
		return x.proc.ForceFlush(ctx)
	}
	mark := make(chan struct{})
	select {
	case x.spans <- handed{flush: mark}:
	case <-ctx.Done():
		x.mu.RUnlock()
		return ctx.Err()
	}
	x.mu.RUnlock()
	select {
	case <-mark:
	case <-ctx.Done():
		return ctx.Err()
	}
	return x.proc.ForceFlush(ctx)
}

// Shutdown exports the spans ended so far and shuts the exporter down;
// spans that end later are dropped. Call it after the host has closed
// (its sessions' last spans end as they stop). When ctx ends first (an
// export hangs), it returns ctx's error but still shuts the processor
// down, so that nothing stays blocked once the export returns: the spans
// not yet exported are lost.
func (x *Exporter) Shutdown(ctx context.Context) error {
	x.mu.Lock()
	if !x.closed {
		x.closed = true
		close(x.spans)
	}
	x.mu.Unlock()
	select {
	case <-x.done:
	case <-ctx.Done():
		// The processor drops what is handed to it after this, which
		// unblocks the hand-over's goroutine.
		if err := x.proc.Shutdown(ctx); err != nil && !errors.Is(err, ctx.Err()) {
			return errors.Join(ctx.Err(), err)
		}
		return ctx.Err()
	}
	return x.proc.Shutdown(ctx)
}

// ErrUnsupportedProtocol reports an OTLP protocol the environment asks for
// that dsh does not export with (gRPC).
var ErrUnsupportedProtocol = errors.New("spans: only the http/protobuf and http/json OTLP protocols are supported")

// FromEnv returns an Exporter configured by the standard OpenTelemetry
// variables, or nil when they ask for no trace export: nil unless
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is set,
// and nil when OTEL_TRACES_EXPORTER is "none" or OTEL_SDK_DISABLED is
// "true". The exporter reads the other OTEL_EXPORTER_OTLP_* variables
// (headers, timeout, compression, certificates, protocol) and the
// resource reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
// OTEL_EXPORTER_OTLP_PROTOCOL (or _TRACES_PROTOCOL) "grpc" is refused
// with ErrUnsupportedProtocol.
func FromEnv(ctx context.Context) (*Exporter, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return nil, nil
	}
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	for _, v := range strings.Split(os.Getenv("OTEL_TRACES_EXPORTER"), ",") {
		switch strings.TrimSpace(v) {
		case "", "otlp":
		case "none":
			return nil, nil
		default:
			return nil, fmt.Errorf("spans: OTEL_TRACES_EXPORTER=%q: only otlp (or none) is supported", v)
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := os.Getenv(k); p != "" && p != "http/protobuf" && p != "http/json" {
			return nil, fmt.Errorf("%w (%s=%q)", ErrUnsupportedProtocol, k, p)
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("spans: OTLP exporter: %w", err)
	}
	res, err := Resource(ctx)
	if err != nil {
		return nil, fmt.Errorf("spans: resource: %w", err)
	}
	return NewExporter(exp, res), nil
}
