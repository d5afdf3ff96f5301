package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/storefs"
	"github.com/dshgo/dsh/internal/testutil"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/telemetry"
)

// echoTool answers its arguments.
type echoTool struct{}

func (echoTool) Name() string { return "echo" }
func (echoTool) Schema() messages.ToolSchema {
	return messages.ToolSchema{Name: "echo", Description: "echoes", Parameters: messages.MustParseJSON(`{"type":"object"}`)}
}
func (echoTool) Mode(messages.JSON) agent.Mode { return agent.Parallel }
func (echoTool) Execute(_ context.Context, c agent.Call) (agent.Result, error) {
	return agent.Result{Content: []messages.ContentBlock{messages.TextBlock("echo")}}, nil
}

// scrape fetches url and parses it with Prometheus' own text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// sample returns the value of the family's sample whose labels include
// want (a counter's or gauge's value, a histogram's count), and whether
// there is one; several matching samples are summed.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	var sum float64
	found := false
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum, found
}

// The metrics are the log's: after scripted turns (two steps each, a tool
// call between them), a Prometheus scrape of the host's instruments,
// parsed with Prometheus' own parser, counts exactly the turns, chunks,
// tokens, tool calls and events by type that the session's log holds, and
// the histograms count one sample per model call (time to first token),
// per tool call and per turn (the turn-end flush).
func TestMetricsScrapeCountsTheLog(t *testing.T) {
	ctx := testCtx(t)
	mp, err := telemetry.NewMeterProvider(ctx, telemetry.ExportConfig{Prometheus: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, mp.Shutdown(ctx)) }()
	srv := httptest.NewServer(mp.Handler())
	defer srv.Close()

	model, err := synthetic.New(synthetic.Config{Seed: 3, TextChunks: 12, ReasoningChunks: 3, ReasoningRate: 0.5, ToolCallRate: 1})
	require.NoError(t, err)
	tools, err := agent.NewRegistry(echoTool{})
	require.NoError(t, err)
	h := openHost(t, Config{Dir: t.TempDir(), Provider: model, Tools: tools, MeterProvider: mp})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	const turns = 3
	for i := range turns {
		require.NoError(t, h.Followup(ctx, id, userMsg(t, "go "+string(rune('a'+i)))))
		require.NoError(t, h.WaitIdle(ctx, id))
	}
	evs, err := h.Events(ctx, id, 0)
	require.NoError(t, err)

	byType := map[session.EventType]int{}
	var usage messages.TokenUsage
	var calls int // assistant messages: model calls that ended ok
	for _, ev := range evs {
		byType[ev.Type()]++
		if p, ok := ev.Payload().(session.AssistantMessage); ok {
			calls++
			require.True(t, p.HasUsage)
			usage.InputTokens += p.Usage.InputTokens
			usage.OutputTokens += p.Usage.OutputTokens
		}
	}
	require.Equal(t, turns, byType[session.TypeTurnEnd])
	require.Equal(t, turns, byType[session.TypeToolResult], "one tool call per turn")
	require.Equal(t, 2*turns, calls, "two steps per turn")

	// The persister's Durable notice of the last turn end reaches the
	// host asynchronously (WaitIdle has its own answer): wait for it.
	var fams map[string]*dto.MetricFamily
	eventually(t, "the last turn end's flush recorded", func() bool {
		fams = scrape(t, srv.URL)
		n, _ := sample(fams, "dsh_turn_end_flush_duration_seconds", nil)
		return n >= turns
	})
	val := func(name string, labels map[string]string) float64 {
		t.Helper()
		v, ok := sample(fams, name, labels)
		require.True(t, ok, "%s %v in the scrape", name, labels)
		return v
	}
	require.EqualValues(t, turns, val("dsh_turns_started_total", nil))
	require.EqualValues(t, turns, val("dsh_turns_ended_total", map[string]string{"reason": "completed"}))
	require.EqualValues(t, turns, val("dsh_turn_duration_seconds", map[string]string{"reason": "completed"}))
	require.EqualValues(t, byType[session.TypeAssistantChunk], val("dsh_model_chunks_total", nil))
	for typ, n := range byType {
		require.EqualValues(t, n, val("dsh_events_appended_total", map[string]string{"type": string(typ)}), "events of type %s", typ)
	}
	require.EqualValues(t, usage.InputTokens, val("dsh_model_tokens_total", map[string]string{"kind": "input"}))
	require.EqualValues(t, usage.OutputTokens, val("dsh_model_tokens_total", map[string]string{"kind": "output"}))
	require.EqualValues(t, calls, val("dsh_model_calls_total", map[string]string{"outcome": "ok"}))
	require.EqualValues(t, calls, val("dsh_model_time_to_first_token_seconds", nil), "one first token per model call")
	require.EqualValues(t, turns, val("dsh_tool_calls_total", map[string]string{"tool": "echo", "outcome": "ok"}))
	require.EqualValues(t, turns, val("dsh_tool_duration_seconds", map[string]string{"tool": "echo", "outcome": "ok"}))
	require.EqualValues(t, turns, val("dsh_turn_end_flush_duration_seconds", nil), "one flush per turn end")
	require.EqualValues(t, 0, val("dsh_model_calls_open", nil))
	require.EqualValues(t, 1, val("dsh_sessions_resident", nil))
	require.EqualValues(t, 0, val("dsh_sessions_passivated", nil))
	_, failures := sample(fams, "dsh_persister_write_failures_total", nil)
	require.False(t, failures, "no write failed")
	// Each turn end's barrier is a durable write (two may share one).
	require.InDelta(t, (1+turns)/2.0, val("dsh_persister_fsync_duration_seconds", nil), (turns-1)/2.0, "one fsync per turn end at most")
	require.EqualValues(t, 0, val("dsh_persister_queue_writes", nil))
	require.EqualValues(t, 0, val("dsh_persister_queue_events", nil))
	require.EqualValues(t, 0, val("dsh_inbox_pending", nil))
}

// The inbox gauge counts the messages waiting in resident sessions'
// inboxes: followups sent while a turn runs, until a turn claims them.
func TestMetricsInboxPending(t *testing.T) {
	ctx := testCtx(t)
	mp, err := telemetry.NewMeterProvider(ctx, telemetry.ExportConfig{Prometheus: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, mp.Shutdown(ctx)) }()
	srv := httptest.NewServer(mp.Handler())
	defer srv.Close()
	g := &gateProvider{Provider: smallModel(t), release: make(chan struct{})}
	h := openHost(t, Config{Provider: g, MeterProvider: mp})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	pending := func() float64 {
		v, ok := sample(scrape(t, srv.URL), "dsh_inbox_pending", nil)
		require.True(t, ok)
		return v
	}
	a, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	b, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, a, userMsg(t, "one")))
	eventually(t, "a's turn to call the model", func() bool { return g.open.Load() == 1 })
	require.EqualValues(t, 0, pending(), "the first followup was claimed by its turn")
	require.NoError(t, h.Followup(ctx, a, userMsg(t, "two")))
	require.NoError(t, h.Followup(ctx, a, userMsg(t, "three")))
	require.NoError(t, h.Followup(ctx, b, userMsg(t, "four")))
	eventually(t, "b's turn to call the model", func() bool { return g.open.Load() == 2 })
	require.EqualValues(t, 2, pending(), "a's two followups wait behind its turn")
	close(g.release)
	require.NoError(t, h.WaitIdle(ctx, a))
	require.NoError(t, h.WaitIdle(ctx, b))
	require.EqualValues(t, 0, pending())
}

// A store that fails several writes in a row (the turn end's and the
// background retries') and then recovers gives exactly one warn record
// (the failure) and one info record (the recovery), each naming the
// session; the failed retries are at debug.
func TestLogWriteFailureOnceAndItsRecovery(t *testing.T) {
	ctx := testCtx(t)
	fsys := newDiskFull()
	store, err := storefs.NewJSONLStore(persister.JSONLConfig{Root: "/data"}, fsys)
	require.NoError(t, err)
	rec := &testutil.LogRecords{}
	h := openHost(t, Config{Store: store, Window: time.Hour, WriteRetryMin: time.Millisecond, WriteRetryMax: 5 * time.Millisecond,
		Logger: slog.New(rec)})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))

	fsys.full.Store(true)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "two")))
	require.ErrorIs(t, h.WaitIdle(ctx, id), syscall.ENOSPC)
	eventually(t, "three failed writes", func() bool {
		st, err := h.Stats(ctx, id)
		require.NoError(t, err)
		return st.WriteFailures >= 3
	})
	fsys.full.Store(false)
	followupAccepted(t, h, id, "three")
	require.NoError(t, h.WaitIdle(ctx, id))
	// The host logs the recovery when the persister's Durable notice
	// reaches it, which can be after WaitIdle has returned.
	eventually(t, "the recovery's info record", func() bool { return len(rec.AtLevel(slog.LevelInfo)) > 0 })

	warns := rec.AtLevel(slog.LevelWarn)
	require.Len(t, warns, 1, "one warning for the run of failures")
	require.Equal(t, string(id), testutil.Attr(warns[0], "session"))
	require.Contains(t, testutil.Attr(warns[0], "err"), syscall.ENOSPC.Error())
	infos := rec.AtLevel(slog.LevelInfo)
	require.Len(t, infos, 1, "one info record for the recovery")
	require.Equal(t, "session write recovered", infos[0].Message)
	require.Equal(t, string(id), testutil.Attr(infos[0], "session"))
	require.NotEmpty(t, rec.AtLevel(slog.LevelDebug), "the failed retries")
	require.Empty(t, rec.AtLevel(slog.LevelError))
}

// protoactor's own records reach Config.Logger at debug level only.
func TestProtoactorLogsAtDebug(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) })
	sys := newSystem(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})))
	defer sys.Shutdown()
	sys.Logger().Info("an info record of protoactor")
	sys.Logger().Error("an error record of protoactor")
	mu.Lock()
	require.Empty(t, buf.String(), "nothing above debug at info level")
	mu.Unlock()

	buf.Reset()
	sys2 := newSystem(slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer sys2.Shutdown()
	sys = sys2
	sys.Logger().Error("an error record of protoactor")
	mu.Lock()
	require.Contains(t, buf.String(), "level=DEBUG")
	require.Contains(t, buf.String(), "an error record of protoactor")
	mu.Unlock()
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// A write the store refuses because another writer has the session
// (fenced) is logged as such, once, with the session id: retrying cannot
// help until that writer goes, which a plain failure would not say.
func TestLogFencedWriteOnce(t *testing.T) {
	ctx := testCtx(t)
	store := &failingStore{MemStore: persister.NewMemStore()}
	rec := &testutil.LogRecords{}
	h := openHost(t, Config{Store: store, Policy: persister.PolicyTurnEnd, Window: time.Hour,
		WriteRetryMin: time.Millisecond, WriteRetryMax: 5 * time.Millisecond, Logger: slog.New(rec)})
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))

	fenced := fmt.Errorf("%w: another writer appended", persister.ErrFenced)
	store.failing.Store(&fenced)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "two")))
	require.ErrorIs(t, h.WaitIdle(ctx, id), persister.ErrFenced)
	eventually(t, "the refusal's warning", func() bool { return len(rec.AtLevel(slog.LevelWarn)) > 0 })
	warns := rec.AtLevel(slog.LevelWarn)
	require.Len(t, warns, 1, "one warning for the refusal")
	require.Equal(t, "session write fenced", warns[0].Message)
	require.Equal(t, string(id), testutil.Attr(warns[0], "session"))
	require.Contains(t, testutil.Attr(warns[0], "err"), "another writer appended")
	require.ErrorIs(t, h.Close(ctx), persister.ErrFenced, "closing cannot make the refused events durable")
}

// A session actor that panics is restarted by protoactor, and the host
// logs that once, at warn, with the session's id and which actor it was.
func TestLogSessionActorRestart(t *testing.T) {
	ctx := testCtx(t)
	rec := &testutil.LogRecords{}
	var hooked atomic.Int64
	h := openHost(t, Config{Logger: slog.New(rec),
		SessionObservers: []session.Observer{func(ev session.Event) error {
			if ev.Type() == session.TypeAssistantChunk {
				return errors.New("observer fails")
			}
			return nil
		}},
		OnObserverFailure: func(session.SessionID, session.ObserverFailure) {
			if hooked.Add(1) == 1 {
				panic("failure hook exploded")
			}
		},
	})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	other, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))

	var restarts []slog.Record
	for _, r := range rec.AtLevel(slog.LevelWarn) {
		if r.Message == "session actor restarted" {
			restarts = append(restarts, r)
		}
	}
	require.Len(t, restarts, 1)
	require.Equal(t, string(id), testutil.Attr(restarts[0], "session"))
	require.NotEqual(t, string(other), testutil.Attr(restarts[0], "session"))
	require.Equal(t, "session", testutil.Attr(restarts[0], "actor"))
	require.Contains(t, testutil.Attr(restarts[0], "reason"), "failure hook exploded")
}

// Each model call the agent retries (an llm/retry in the log) is one info
// record with the session's id, the retry's number, its delay and the
// failure.
func TestLogModelCallRetries(t *testing.T) {
	ctx := testCtx(t)
	model, err := synthetic.New(synthetic.Config{Seed: 5, TextChunks: 3, FailureRate: 0.6,
		Failures: synthetic.FailureMix{Server: 1}})
	require.NoError(t, err)
	rec := &testutil.LogRecords{}
	h := openHost(t, Config{Provider: model, Logger: slog.New(rec),
		Retry: llm.RetryPolicy{Mode: llm.RetryAlways, InitialDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	// A fixed id: the synthetic model draws its failures from a hash of
	// the request, which includes the session id.
	id, err := h.Create(ctx, CreateOptions{ID: "retried-session"})
	require.NoError(t, err)
	for _, text := range []string{"one", "two", "three"} {
		require.NoError(t, h.Followup(ctx, id, userMsg(t, text)))
		require.NoError(t, h.WaitIdle(ctx, id))
	}
	evs, err := h.Events(ctx, id, 0)
	require.NoError(t, err)
	var retries []session.Event
	for _, ev := range evs {
		if ev.Type() == session.TypeLlmRetry {
			retries = append(retries, ev)
		}
	}
	require.NotEmpty(t, retries, "the seed makes some calls fail")

	var logged []slog.Record
	for _, r := range rec.AtLevel(slog.LevelInfo) {
		if r.Message == "model call retried" {
			logged = append(logged, r)
		}
	}
	require.Len(t, logged, len(retries), "one record per llm/retry")
	for i, r := range logged {
		d := retries[i].Data()
		n, _ := d.Field("retry")
		attempt, _ := n.AsInt()
		delay, _ := d.Field("delayMs")
		ms, _ := delay.AsInt()
		require.Equal(t, string(id), testutil.Attr(r, "session"))
		require.Equal(t, fmt.Sprint(attempt), testutil.Attr(r, "attempt"))
		require.Equal(t, (time.Duration(ms) * time.Millisecond).String(), testutil.Attr(r, "delay"))
		require.Equal(t, "SERVER", testutil.Attr(r, "failure"))
	}
}
