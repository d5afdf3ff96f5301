package main

import (
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/otlptest"
	"github.com/dshgo/dsh/telemetry/spans"
)

func attrPB(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			v := kv.GetValue()
			switch {
			case v.GetStringValue() != "":
				return v.GetStringValue()
			case v.GetArrayValue() != nil:
				var out string
				for _, e := range v.GetArrayValue().GetValues() {
					out += e.GetStringValue()
				}
				return out
			default:
				return strconv.FormatInt(v.GetIntValue(), 10)
			}
		}
	}
	return ""
}

func nsOf(ms int64) uint64 { return uint64(ms) * 1e6 }

// With OTEL_EXPORTER_OTLP_ENDPOINT set, dsh run exports the spans of its
// turn over OTLP/HTTP as the session commits them: a turn whose first step
// calls a tool and whose second answers gives turn → step → chat /
// execute_tool, with the parents, the times of the log's events and the
// attributes the log says; dsh log trace of the written log then gives
// the same ids, so a backend would see no duplicates.
func TestRunExportsSpansOfItsTurn(t *testing.T) {
	r := otlptest.New(t)
	t.Setenv("DEEPSEEK_API_KEY", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.URL())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	p, err := synthetic.New(synthetic.Config{Seed: 7, TextChunks: 6, ToolCallRate: 1, MaxToolSteps: 1})
	require.NoError(t, err)
	cmdTalkEnv = talkEnv{provider: p}
	t.Cleanup(func() { cmdTalkEnv = talkEnv{} })
	dir := t.TempDir()
	code, _, errOut := runDsh("run", "--dir", dir, "--workdir", t.TempDir(), "hello")
	require.Equal(t, exitOK, code, errOut)
	require.NotContains(t, errOut, "traces")

	// The spans arrived before dsh run returned (its exit flushes them).
	got := r.Spans()
	require.Len(t, got, 6, "turn, two steps, two model calls, one tool call")
	path := findLog(t, dir)
	f, err := session.ReadFile(path)
	require.NoError(t, err)
	id := f.Header.ID
	ev := map[session.EventType][]session.Event{}
	for _, e := range f.Events {
		ev[e.Type()] = append(ev[e.Type()], e)
	}
	require.Len(t, ev[session.TypeStepStart], 2)
	require.Len(t, ev[session.TypeToolCall], 1)
	call := ev[session.TypeToolCall][0].Payload().(session.ToolCall)
	byID := map[string]*tracepb.Span{}
	for _, s := range got {
		byID[hex.EncodeToString(s.GetSpanId())] = s
	}
	span := func(sid [8]byte) *tracepb.Span {
		t.Helper()
		s, ok := byID[hex.EncodeToString(sid[:])]
		require.True(t, ok, "no span %x", sid)
		return s
	}
	tid := spans.TraceID(id, 1)
	for _, s := range got {
		require.Equal(t, tid[:], s.GetTraceId(), s.GetName())
	}
	turn := span(spans.TurnSpanID(id, 1))
	require.Equal(t, "turn", turn.GetName())
	require.Empty(t, turn.GetParentSpanId())
	require.Equal(t, nsOf(ev[session.TypeTurnStart][0].Time()), turn.GetStartTimeUnixNano())
	require.Equal(t, nsOf(ev[session.TypeTurnEnd][0].Time()), turn.GetEndTimeUnixNano())
	require.Equal(t, "completed", attrPB(turn, "dsh.turn.end_reason"))
	require.Equal(t, string(id), attrPB(turn, "dsh.session.id"))
	for step := int64(1); step <= 2; step++ {
		st := span(spans.StepSpanID(id, 1, step))
		require.Equal(t, "step", st.GetName())
		require.Equal(t, turn.GetSpanId(), st.GetParentSpanId())
		require.Equal(t, nsOf(ev[session.TypeStepStart][step-1].Time()), st.GetStartTimeUnixNano())
		require.Equal(t, nsOf(ev[session.TypeStepEnd][step-1].Time()), st.GetEndTimeUnixNano())
		chat := span(spans.ModelCallSpanID(id, 1, step, 1))
		require.Equal(t, "chat synthetic-1", chat.GetName())
		require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, chat.GetKind())
		require.Equal(t, st.GetSpanId(), chat.GetParentSpanId())
		msg := ev[session.TypeAssistantMessage][step-1].Payload().(session.AssistantMessage)
		require.Equal(t, nsOf(ev[session.TypeAssistantMessage][step-1].Time()), chat.GetEndTimeUnixNano())
		require.Equal(t, strconv.FormatInt(msg.Usage.InputTokens, 10), attrPB(chat, "gen_ai.usage.input_tokens"))
		require.Equal(t, strconv.FormatInt(msg.Usage.OutputTokens, 10), attrPB(chat, "gen_ai.usage.output_tokens"))
		require.Equal(t, "synthetic", attrPB(chat, "gen_ai.provider.name"))
		require.Len(t, chat.GetEvents(), 1)
		require.Equal(t, "first_token", chat.GetEvents()[0].GetName())
		require.GreaterOrEqual(t, chat.GetEvents()[0].GetTimeUnixNano(), chat.GetStartTimeUnixNano())
		require.LessOrEqual(t, chat.GetEvents()[0].GetTimeUnixNano(), chat.GetEndTimeUnixNano())
	}
	require.Equal(t, "tool-calls", attrPB(span(spans.ModelCallSpanID(id, 1, 1, 1)), "gen_ai.response.finish_reasons"))
	require.Equal(t, "stop", attrPB(span(spans.ModelCallSpanID(id, 1, 2, 1)), "gen_ai.response.finish_reasons"))
	tool := span(spans.ToolCallSpanID(id, 1, 1, call.CallID))
	require.Equal(t, "execute_tool "+call.Name, tool.GetName())
	step1 := spans.StepSpanID(id, 1, 1)
	require.Equal(t, step1[:], tool.GetParentSpanId())
	require.Equal(t, call.CallID, attrPB(tool, "gen_ai.tool.call.id"))
	require.Equal(t, nsOf(ev[session.TypeToolCall][0].Time()), tool.GetStartTimeUnixNano())
	require.Equal(t, nsOf(ev[session.TypeToolResult][0].Time()), tool.GetEndTimeUnixNano())

	// dsh log trace of the log: the same spans, ids, parents and times.
	printed := traceJSON(t, path)
	require.Len(t, printed, len(got))
	for _, p := range printed {
		s, ok := byID[p.SpanID]
		require.True(t, ok, "printed span %s (%s) was not exported live", p.SpanID, p.Name)
		require.Equal(t, p.TraceID, hex.EncodeToString(s.GetTraceId()))
		require.Equal(t, p.ParentSpanID, hex.EncodeToString(s.GetParentSpanId()))
		require.Equal(t, p.Name, s.GetName())
		require.Equal(t, p.Start, strconv.FormatUint(s.GetStartTimeUnixNano(), 10))
		require.Equal(t, p.End, strconv.FormatUint(s.GetEndTimeUnixNano(), 10))
	}
}

// An OTLP protocol dsh cannot export with is refused with one line before
// anything runs, rather than running without the traces asked for.
func TestRunRefusesAGRPCTraceExport(t *testing.T) {
	t.Setenv("DEEPSEEK_API_KEY", "")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	code, out, errOut := runDsh("run", "--dir", t.TempDir(), "--workdir", t.TempDir(), "hello")
	require.Equal(t, exitFailure, code)
	require.Empty(t, out)
	require.Equal(t, "dsh: traces: only the http/protobuf and http/json OTLP protocols are supported (OTEL_EXPORTER_OTLP_PROTOCOL=\"grpc\")\n", errOut)
}

// OpenTelemetry has one error handler per process: the metric and the
// span export share the command's, which logs the first failure as a
// warn record and counts the others in one more record at the end. A
// collector refusing every export (400) costs those two lines, whatever
// failed, and the command's result stands.
func TestExportFailuresShareOneHandler(t *testing.T) {
	var posts atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Error(w, "refused", http.StatusBadRequest)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	code, _, errOut := runDsh("bench", "--quiet", "--sessions", "1", "--turns", "1", "--chunks", "5", "--no-baselines", "--no-verify")
	require.Equal(t, exitOK, code, errOut)
	require.GreaterOrEqual(t, posts.Load(), int64(2), "spans and metrics were both sent")
	var first, again []string
	for _, l := range strings.Split(strings.TrimSpace(errOut), "\n") {
		switch {
		case strings.Contains(l, `msg="telemetry export failed"`):
			first = append(first, l)
		case strings.Contains(l, `msg="telemetry export failed again"`):
			again = append(again, l)
		default:
			t.Errorf("unexpected line on stderr: %s", l)
		}
	}
	require.Len(t, first, 1, errOut)
	require.Contains(t, first[0], "level=WARN")
	require.Contains(t, first[0], "400")
	require.Len(t, again, 1, errOut)
	require.Regexp(t, `more=[1-9]`, again[0])
}

// dsh serve exports its sessions' spans as dsh run does (the same
// wiring): a turn run through the API arrives at the collector as its
// turn, step and model call, with the ids dsh log trace gives its log.
func TestServeExportsSpans(t *testing.T) {
	r := otlptest.New(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", r.URL())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	dir := t.TempDir()
	prov, err := synthetic.New(synthetic.Config{Seed: 2, TextChunks: 5})
	require.NoError(t, err)
	url, stop := serveInProcess(t, serveEnv{provider: prov}, "--addr", "127.0.0.1:0", "--dir", dir)
	res, err := http.Post(url+"/v1/sessions", "application/json", strings.NewReader(`{"id":"traced"}`))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusCreated, res.StatusCode)
	res, err = http.Post(url+"/v1/sessions/traced/messages?wait=true", "application/json", strings.NewReader(`{"text":"hello"}`))
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	stop() // the export is flushed as serve ends

	got := r.Spans()
	require.Len(t, got, 3, "turn, step, model call")
	tid := spans.TraceID("traced", 1)
	turn := spans.TurnSpanID("traced", 1)
	step := spans.StepSpanID("traced", 1, 1)
	call := spans.ModelCallSpanID("traced", 1, 1, 1)
	want := map[string]string{hex.EncodeToString(turn[:]): "", hex.EncodeToString(step[:]): hex.EncodeToString(turn[:]),
		hex.EncodeToString(call[:]): hex.EncodeToString(step[:])}
	for _, s := range got {
		require.Equal(t, tid[:], s.GetTraceId(), s.GetName())
		parent, ok := want[hex.EncodeToString(s.GetSpanId())]
		require.True(t, ok, "span %s %x", s.GetName(), s.GetSpanId())
		require.Equal(t, parent, hex.EncodeToString(s.GetParentSpanId()), s.GetName())
	}
}
