package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/dshgo/dsh/telemetry"
	"github.com/dshgo/dsh/telemetry/spans"
)

// traceExport is the live span export of a command that hosts sessions
// (run, chat, serve, member, bench): on when the standard
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set
// (spans.FromEnv); the zero value is off, and then nothing observes the
// sessions.
type traceExport struct {
	x    *spans.Exporter
	errs *exportErrors
}

// openTraces reads the OTEL_* variables. A configuration dsh cannot
// export with (a gRPC protocol, another exporter) is an error, not a
// silent lack of traces. Export failures, which the SDK reports through
// OpenTelemetry's global error handler, go to stderr: the first as one
// line, the others counted when the export closes.
func openTraces(ctx context.Context, stderr io.Writer) (traceExport, error) {
	x, err := spans.FromEnv(ctx)
	if err != nil {
		return traceExport{}, fmt.Errorf("traces: %s", strings.TrimPrefix(err.Error(), "spans: "))
	}
	if x == nil {
		return traceExport{}, nil
	}
	errs := &exportErrors{w: stderr}
	otel.SetErrorHandler(errs)
	return traceExport{x: x, errs: errs}, nil
}

// observers returns the host observers the export needs (none when off).
func (t traceExport) observers() []telemetry.Observer {
	if t.x == nil {
		return nil
	}
	return []telemetry.Observer{t.x}
}

// close exports the spans still queued, bounded by a timeout; call it
// after the host closed (a session's last spans end as it stops). A
// failure is reported on stderr only: the command's own result stands.
func (t traceExport) close() {
	if t.x == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := t.x.Shutdown(ctx); err != nil {
		t.errs.Handle(err)
	}
	t.errs.flush()
}

// exportErrors prints the first export error and counts the rest, so that
// an unreachable collector costs one line, not one per batch.
type exportErrors struct {
	w  io.Writer
	mu sync.Mutex
	n  int // errors seen; guarded by mu
}

func (e *exportErrors) Handle(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if e.n == 1 {
		fmt.Fprintf(e.w, "dsh: traces: %s\n", visibleLine(err.Error()))
	}
}

func (e *exportErrors) flush() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n > 1 {
		fmt.Fprintf(e.w, "dsh: traces: %d more export errors\n", e.n-1)
	}
	e.n = 0
}
