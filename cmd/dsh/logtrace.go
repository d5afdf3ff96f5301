package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/dshgo/dsh/telemetry/spans"
)

const traceSynopsis = `[--fixture] [--otlp URL | --tree] FILE
       dsh log trace [--otlp URL | --tree] --store URL --session ID

Prints the session's spans as one OTLP/JSON value (TracesData, the body an
OTLP/HTTP receiver takes as application/json): a trace per turn, a span
per turn, step, model call attempt and tool call. The ids derive from the
session id and the span's position (turn, step, attempt, call), so they
equal those a live export of the same session gave (OTEL_EXPORTER_OTLP_*
set on dsh run, chat, serve, member or bench): a backend that has them
gets no duplicates. A turn the log does not end (a session still running,
or a crash not yet repaired) ends at the last event, with the attribute
dsh.unfinished. See docs/observability.md.

With --otlp URL the spans are sent to that OTLP/HTTP endpoint instead (a
URL without a path gets /v1/traces), and one line says how many. With
--tree they are printed for people: a line per turn's trace, then a line
per span indented under its parent, with its start and end in ms from the
turn's start, its error, attributes and events.`

// logTrace is `dsh log trace`.
func logTrace(args []string, stdout, _ io.Writer) error {
	var endpoint string
	var tree bool
	a, err := logSourceFlags("trace", traceSynopsis, args, stdout, false, func(fs *flag.FlagSet) {
		fs.StringVar(&endpoint, "otlp", "", "send the spans to this OTLP/HTTP endpoint (http:// or https://) instead of printing them")
		fs.BoolVar(&tree, "tree", false, "print the spans as an indented tree for people instead of OTLP/JSON")
	})
	if err != nil {
		return err
	}
	if tree && endpoint != "" {
		return usagef("log trace: --tree or --otlp, not both")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var exp sdktrace.SpanExporter
	if endpoint != "" {
		// Checked before the log is read: a bad URL is bad usage.
		if exp, err = spans.NewHTTPExporter(ctx, endpoint); errors.Is(err, spans.ErrBadEndpoint) {
			return usagef("log trace: --otlp: %s", strings.TrimPrefix(err.Error(), "spans: "))
		} else if err != nil {
			return fmt.Errorf("log trace: %s", strings.TrimPrefix(err.Error(), "spans: "))
		}
		defer exp.Shutdown(context.WithoutCancel(ctx))
	}
	f, _, err := oneLog(a)
	if err != nil {
		return err
	}
	res, err := spans.Resource(ctx)
	if err != nil {
		return fmt.Errorf("log trace: %v", err)
	}
	ss := spans.Spans(f.Header.ID, f.Header.SeedLength.Or(0), f.Events)
	if tree {
		var b strings.Builder
		if err := spans.WriteTree(&b, ss); err != nil {
			return err
		}
		w := bufio.NewWriter(stdout)
		for _, l := range strings.SplitAfter(b.String(), "\n") {
			if l != "" {
				// Names and values come from the log: shown, never sent raw.
				fmt.Fprintln(w, visibleLine(strings.TrimSuffix(l, "\n")))
			}
		}
		return w.Flush()
	}
	if exp == nil {
		return spans.WriteJSON(stdout, ss, res)
	}
	if len(ss) > 0 {
		if err := exp.ExportSpans(ctx, spans.ReadOnly(ss, res)); err != nil {
			return fmt.Errorf("log trace: sending to %s: %v", endpoint, err)
		}
	}
	_, err = fmt.Fprintf(stdout, "sent %s to %s\n", plural(int64(len(ss)), "span"), endpoint)
	return err
}
