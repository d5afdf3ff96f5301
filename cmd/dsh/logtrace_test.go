package main

import (
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/internal/otlptest"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/telemetry/spans"
)

// otlpJSONSpan is the part of an OTLP/JSON span the tests read.
type otlpJSONSpan struct {
	TraceID      string `json:"traceId"`
	SpanID       string `json:"spanId"`
	ParentSpanID string `json:"parentSpanId"`
	Name         string `json:"name"`
	Kind         int    `json:"kind"`
	Start        string `json:"startTimeUnixNano"`
	End          string `json:"endTimeUnixNano"`
	Attributes   []struct {
		Key   string         `json:"key"`
		Value map[string]any `json:"value"`
	} `json:"attributes"`
	Events []struct {
		Name string `json:"name"`
		Time string `json:"timeUnixNano"`
	} `json:"events"`
	Status struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"status"`
}

// traceJSON runs dsh log trace and decodes its one OTLP/JSON value.
func traceJSON(t *testing.T, args ...string) []otlpJSONSpan {
	t.Helper()
	code, out, errOut := runDsh(append([]string{"log", "trace"}, args...)...)
	require.Equal(t, exitOK, code, errOut)
	require.Empty(t, errOut)
	require.Equal(t, 1, strings.Count(out, "\n"), "one JSON value on one line")
	var doc struct {
		ResourceSpans []struct {
			Resource struct {
				Attributes []struct {
					Key   string         `json:"key"`
					Value map[string]any `json:"value"`
				} `json:"attributes"`
			} `json:"resource"`
			ScopeSpans []struct {
				Scope struct {
					Name string `json:"name"`
				} `json:"scope"`
				Spans []otlpJSONSpan `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Len(t, doc.ResourceSpans, 1)
	require.Len(t, doc.ResourceSpans[0].ScopeSpans, 1)
	require.Equal(t, spans.ScopeName, doc.ResourceSpans[0].ScopeSpans[0].Scope.Name)
	require.Contains(t, doc.ResourceSpans[0].Resource.Attributes[0].Key, "service.name")
	return doc.ResourceSpans[0].ScopeSpans[0].Spans
}

func corpusPath(t *testing.T, rel string) string {
	t.Helper()
	root, err := fixtures.CorpusDir()
	require.NoError(t, err)
	return filepath.Join(root, rel)
}

func attrOf(s otlpJSONSpan, key string) any {
	for _, a := range s.Attributes {
		if a.Key == key {
			for _, v := range a.Value {
				return v
			}
		}
	}
	return nil
}

// dsh log trace prints the spans of a log as OTLP/JSON: hex ids that are
// the documented functions of the session id and the span's position,
// parents, times in nanoseconds, OTLP's enums.
func TestLogTracePrintsOTLPJSON(t *testing.T) {
	ss := traceJSON(t, "--fixture", corpusPath(t, "headless/snapshots_compaction-recovery/session.jsonl"))
	const id = session.SessionID("fixture-session")
	var names []string
	for _, s := range ss {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"turn", "step", "chat deepseek-v4-flash", "execute_tool bash", "step",
		"chat deepseek-v4-flash", "chat deepseek-v4-flash"}, names)
	hexOf := func(b []byte) string { return hex.EncodeToString(b) }
	tid, turn := spans.TraceID(id, 1), spans.TurnSpanID(id, 1)
	step2, failed, retried := spans.StepSpanID(id, 1, 2), spans.ModelCallSpanID(id, 1, 2, 1), spans.ModelCallSpanID(id, 1, 2, 2)
	for _, s := range ss {
		require.Equal(t, hexOf(tid[:]), s.TraceID)
	}
	require.Equal(t, hexOf(turn[:]), ss[0].SpanID)
	require.Empty(t, ss[0].ParentSpanID)
	require.Equal(t, hexOf(turn[:]), ss[4].ParentSpanID)
	require.Equal(t, hexOf(step2[:]), ss[4].SpanID)
	require.Equal(t, hexOf(failed[:]), ss[5].SpanID)
	require.Equal(t, hexOf(retried[:]), ss[6].SpanID)
	require.Equal(t, hexOf(step2[:]), ss[5].ParentSpanID)
	require.Equal(t, hexOf(step2[:]), ss[6].ParentSpanID)
	// The failed attempt: status error (2), error.type, client kind (3).
	require.Equal(t, 2, ss[5].Status.Code)
	require.Equal(t, "snapshot request exceeded the model context window", ss[5].Status.Message)
	require.Equal(t, "CONTEXT_WINDOW_EXCEEDED", attrOf(ss[5], "error.type"))
	require.Equal(t, 3, ss[5].Kind)
	require.Equal(t, 1, ss[0].Kind)
	// Times: the turn from turn/start (seq 1) to turn/end (seq 30).
	require.Equal(t, strconv.FormatInt(1786123401614*1e6, 10), ss[0].Start)
	require.Equal(t, strconv.FormatInt(1786123401730*1e6, 10), ss[0].End)
	// Usage and the first token of the retried attempt; ints as strings.
	require.Equal(t, "20", attrOf(ss[6], "gen_ai.usage.input_tokens"))
	require.Equal(t, "4", attrOf(ss[6], "gen_ai.usage.output_tokens"))
	require.Len(t, ss[6].Events, 1)
	require.Equal(t, "first_token", ss[6].Events[0].Name)
	require.Equal(t, strconv.FormatInt(1786123401730*1e6, 10), ss[6].Events[0].Time)
}

// With --otlp the same spans go to an OTLP/HTTP receiver, with the ids,
// parents, names and times the printed JSON has.
func TestLogTraceSendsToOTLPEndpoint(t *testing.T) {
	path := corpusPath(t, "headless/snapshots_compaction-recovery/session.jsonl")
	printed := traceJSON(t, "--fixture", path)
	r := otlptest.New(t)
	code, out, errOut := runDsh("log", "trace", "--fixture", "--otlp", r.URL(), path)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "sent 7 spans to "+r.URL()+"\n", out)
	got := r.Spans()
	require.Len(t, got, len(printed))
	byID := map[string]otlpJSONSpan{}
	for _, s := range printed {
		byID[s.SpanID] = s
	}
	for _, g := range got {
		p, ok := byID[hex.EncodeToString(g.GetSpanId())]
		require.True(t, ok, "received span %s was not printed", g.GetName())
		require.Equal(t, p.TraceID, hex.EncodeToString(g.GetTraceId()))
		require.Equal(t, p.ParentSpanID, hex.EncodeToString(g.GetParentSpanId()))
		require.Equal(t, p.Name, g.GetName())
		require.Equal(t, p.Kind, int(g.GetKind()))
		require.Equal(t, p.Start, strconv.FormatUint(g.GetStartTimeUnixNano(), 10))
		require.Equal(t, p.End, strconv.FormatUint(g.GetEndTimeUnixNano(), 10))
		require.Equal(t, p.Status.Code, int(g.GetStatus().GetCode()))
		require.Len(t, g.GetAttributes(), len(p.Attributes))
	}
}

// A session of a store traces as its file does.
func TestLogTraceFromAStore(t *testing.T) {
	dir, ids := twoSessions(t)
	fromStore := traceJSON(t, "--store", "jsonl:"+dir, "--session", ids[0])
	require.NotEmpty(t, fromStore)
	var turns int
	for _, s := range fromStore {
		if s.Name == spans.NameTurn {
			turns++
		}
	}
	require.Equal(t, 2, turns, "the session had two turns")
	path := findLog(t, filepath.Join(dir))
	f, err := session.ReadFile(path)
	require.NoError(t, err)
	fromFile := traceJSON(t, path)
	require.Equal(t, traceJSON(t, "--store", "jsonl:"+dir, "--session", string(f.Header.ID)), fromFile)
}

// A bad endpoint is bad usage, and nothing is read or sent.
func TestLogTraceRefusesABadEndpoint(t *testing.T) {
	for _, u := range []string{"ftp://127.0.0.1/x", "127.0.0.1:4318", "http://"} {
		code, out, errOut := runDsh("log", "trace", "--otlp", u, "--fixture", corpusPath(t, "acp/cancel/session.jsonl"))
		require.Equal(t, exitUsage, code, u)
		require.Empty(t, out)
		require.Contains(t, errOut, "dsh: log trace: --otlp: the OTLP endpoint must be an http:// or https:// URL with a host")
	}
}

// --tree prints the spans for people, a line per trace and per span, with
// the log's text shown escaped (a tool name carrying a terminal escape is
// printed as \x1b, never raw); it does not go with --otlp.
func TestLogTraceTree(t *testing.T) {
	path := writeLog(t, "tree.jsonl", func(l *session.Log) {
		appendOK(t, l, session.TurnStart{Turn: 1}.Draft())
		appendOK(t, l, session.StepStart{Turn: 1, Step: 1}.Draft())
		appendOK(t, l, session.ToolCall{Turn: 1, Step: 1, CallID: "c1", Name: "evil\x1b[2J", Arguments: "{}"}.Draft())
		appendOK(t, l, session.ToolResult{Turn: 1, Step: 1,
			Message: messages.NewToolResultMessage("c1", []messages.ContentBlock{messages.TextBlock("no")}, messages.ToolFailed),
			Error:   session.ToolError{Name: "E", Code: "TOOL_FAILED"}}.Draft())
		appendOK(t, l, session.StepEnd{Turn: 1, Step: 1}.Draft())
		appendOK(t, l, session.TurnEnd{Turn: 1, Reason: session.TurnEndReason{Kind: session.EndCompleted}}.Draft())
	})
	code, out, errOut := runDsh("log", "trace", "--tree", path)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, "trace "+spans.TraceID("cli-test", 1).String()+" (session cli-test, turn 1)\n"+
		"  turn [0..0] dsh.turn.end_reason=completed\n"+
		"    step [0..0]\n"+
		`      execute_tool evil\x1b[2J [0..0] ERROR(TOOL_FAILED) gen_ai.tool.name=evil\x1b[2J gen_ai.tool.call.id=c1 error.type=TOOL_FAILED`+"\n", out)

	code, out, errOut = runDsh("log", "trace", "--tree", "--otlp", "http://127.0.0.1:1", path)
	require.Equal(t, exitUsage, code)
	require.Empty(t, out)
	require.Contains(t, errOut, "dsh: log trace: --tree or --otlp, not both")
}
