package spans

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dshgo/dsh/actors/session"
)

// liveRun opens an Exporter's observer on a session holding past, feeds
// it the events after, and returns what it exported.
func liveRun(t *testing.T, id session.SessionID, h session.Header, past, after []session.Event) tracetest.SpanStubs {
	t.Helper()
	mem := tracetest.NewInMemoryExporter()
	x := NewExporter(mem, resource.Empty())
	l, err := session.Restore(h, past)
	require.NoError(t, err)
	obs := x.Open(id, l.Events())
	for _, e := range after {
		require.NoError(t, obs(e))
	}
	require.NoError(t, x.ForceFlush(context.Background()))
	got := mem.GetSpans() // before Shutdown, which empties the in-memory exporter
	require.NoError(t, x.Shutdown(context.Background()))
	return got
}

// spanIDs maps the exported spans by id.
func spanIDs(stubs tracetest.SpanStubs) map[trace.SpanID]tracetest.SpanStub {
	m := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range stubs {
		m[s.SpanContext.SpanID()] = s
	}
	return m
}

// requireSameSpan checks that an exported span is the span Spans gives
// for the whole log: ids, parent, name, kind, times, attributes, events,
// status.
func requireSameSpan(t *testing.T, want Span, got tracetest.SpanStub) {
	t.Helper()
	require.Equal(t, want.TraceID, got.SpanContext.TraceID(), want.Name)
	require.Equal(t, want.Parent, got.Parent.SpanID(), want.Name)
	require.Equal(t, want.Name, got.Name)
	require.Equal(t, want.Kind, got.SpanKind)
	require.True(t, want.Start.Equal(got.StartTime), want.Name)
	require.True(t, want.End.Equal(got.EndTime), want.Name)
	require.Equal(t, want.Attrs, got.Attributes, want.Name)
	require.Len(t, got.Events, len(want.Events), want.Name)
	require.Equal(t, want.Status, got.Status.Code, want.Name)
	require.Equal(t, want.StatusMessage, got.Status.Description, want.Name)
}

// A session observed from its start exports exactly the spans of its
// whole log.
func TestExporterExportsTheSpansOfTheLog(t *testing.T) {
	f := corpusLog(t, "headless/snapshots_compaction-recovery/session.jsonl")
	want := fileSpans(f)
	got := spanIDs(liveRun(t, f.Header.ID, f.Header, nil, f.Events))
	require.Len(t, got, len(want))
	for _, w := range want {
		g, ok := got[w.SpanID]
		require.True(t, ok, "%s not exported", w.Name)
		requireSameSpan(t, w, g)
	}
}

// A session made resident again in the middle of a turn (reactivated,
// or loaded and repaired after a crash): the observer opened on its past
// ends the open turn's spans with the times of the events that opened
// them, as dsh log trace of the whole log does, and does not export again
// the spans that ended within the past.
func TestExporterResumesAnOpenTurn(t *testing.T) {
	f := corpusLog(t, "headless/snapshots_compaction-recovery/session.jsonl")
	want := fileSpans(f)
	// Seq 15 is step 1's tool result: the turn, step 1 and its tool call
	// are open there, step 1's model call has ended.
	got := spanIDs(liveRun(t, f.Header.ID, f.Header, f.Events[:15], f.Events[15:]))
	ended := ModelCallSpanID(f.Header.ID, 1, 1, 1)
	require.Len(t, got, len(want)-1)
	for _, w := range want {
		g, ok := got[w.SpanID]
		if w.SpanID == ended {
			require.False(t, ok, "a span that ended in the past is not exported again")
			continue
		}
		require.True(t, ok, "%s not exported", w.Name)
		requireSameSpan(t, w, g)
	}
}

// Opened between turns, the observer knows the model of the last
// request/context, and the turns that follow give the spans they give in
// the whole log.
func TestExporterOpenedBetweenTurns(t *testing.T) {
	f := corpusLog(t, "acp/multi-turn/session.jsonl")
	want := fileSpans(f)
	var cut int
	for i, e := range f.Events {
		if e.Type() == session.TypeTurnEnd {
			cut = i + 1
			break
		}
	}
	require.Positive(t, cut)
	got := spanIDs(liveRun(t, f.Header.ID, f.Header, f.Events[:cut], f.Events[cut:]))
	n := 0
	for _, w := range want {
		if w.TraceID == TraceID(f.Header.ID, 1) {
			continue
		}
		n++
		g, ok := got[w.SpanID]
		require.True(t, ok, "%s not exported", w.Name)
		requireSameSpan(t, w, g)
	}
	require.Positive(t, n)
	require.Len(t, got, n)
}

// heldExporter blocks every export until release is closed, and counts
// the spans it was given.
type heldExporter struct {
	release chan struct{}
	mu      sync.Mutex
	n       int
	shut    atomic.Bool // Shutdown was called
}

func (h *heldExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	h.mu.Lock()
	h.n += len(spans)
	h.mu.Unlock()
	return nil
}

func (h *heldExporter) Shutdown(context.Context) error {
	h.shut.Store(true)
	return nil
}

// Spans that end while the export is too far behind (its queue and the
// hand-over full) are dropped without waiting, and counted: after the
// shutdown, every span ended was either exported or counted as dropped.
func TestExporterCountsDroppedSpans(t *testing.T) {
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
	held := &heldExporter{release: make(chan struct{})}
	x := NewExporter(held, resource.Empty())
	const turns = 300 // six spans each: more than the hand-over and the queue hold
	obs := x.Open("s", session.Events{})
	for _, e := range benchTurns(t, turns, 3) {
		require.NoError(t, obs(e))
	}
	require.Positive(t, x.Dropped(), "the hand-over filled up")
	require.Less(t, x.Dropped(), int64(6*turns))
	close(held.release)
	require.NoError(t, x.Shutdown(context.Background()))
	held.mu.Lock()
	defer held.mu.Unlock()
	require.EqualValues(t, 6*turns, int64(held.n)+x.Dropped(), "exported or dropped, each span once")
}

// A Shutdown whose context ends while an export hangs returns the
// context's error, and still shuts the processor down: once the export
// returns, the span exporter is shut down and the hand-over's goroutine
// ends, rather than both staying blocked for the life of the process.
func TestExporterShutdownPastItsDeadlineStillShutsDown(t *testing.T) {
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
	held := &heldExporter{release: make(chan struct{})}
	x := NewExporter(held, resource.Empty())
	obs := x.Open("s", session.Events{})
	for _, e := range benchTurns(t, 300, 3) {
		require.NoError(t, obs(e))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, x.Shutdown(ctx), context.Canceled)
	close(held.release)
	require.Eventually(t, func() bool {
		select {
		case <-x.done:
			return held.shut.Load()
		default:
			return false
		}
	}, 10*time.Second, time.Millisecond, "the span exporter is shut down and the hand-over ends")
}
