package main

import (
	"context"
	"fmt"
	"io"
	"strings"
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
	x *spans.Exporter
}

// openTraces reads the OTEL_* variables. A configuration dsh cannot
// export with (a gRPC protocol, another exporter) is an error, not a
// silent lack of traces. Export failures go to OpenTelemetry's global
// error handler, the command's (otelErrors, set by obsFlags.open).
func openTraces(ctx context.Context, _ io.Writer) (traceExport, error) {
	x, err := spans.FromEnv(ctx)
	if err != nil {
		return traceExport{}, fmt.Errorf("traces: %s", strings.TrimPrefix(err.Error(), "spans: "))
	}
	return traceExport{x: x}, nil
}

// observers returns the host observers the export needs (none when off).
func (t traceExport) observers() []telemetry.Observer {
	if t.x == nil {
		return nil
	}
	return []telemetry.Observer{t.x}
}

// countDropped registers the export's dropped spans as dsh.spans.dropped
// on the command's meter provider (when it has both).
func (t traceExport) countDropped(o *obs) {
	if t.x == nil || o.mp == nil {
		return
	}
	if _, err := telemetry.ObserveSpansDropped(o.mp, t.x.Dropped); err != nil {
		o.logger.Warn("metrics: dsh.spans.dropped", "err", err)
	}
}

// close exports the spans still queued, bounded by a timeout; call it
// after the host closed (a session's last spans end as it stops). A
// failure goes to the error handler (a warn record): the command's own
// result stands. Spans dropped because the export fell behind are said
// once, to the handler too.
func (t traceExport) close() {
	if t.x == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := t.x.Shutdown(ctx); err != nil {
		otel.Handle(err)
	}
	if n := t.x.Dropped(); n > 0 {
		otel.Handle(fmt.Errorf("traces: %d spans dropped: the export fell behind (OTEL_BSP_MAX_QUEUE_SIZE)", n))
	}
}
