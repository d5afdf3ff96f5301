package spans

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
)

// corpusLog reads a reference log of the corpus (placeholders
// substituted) and checks that it is a valid log.
func corpusLog(t *testing.T, rel string) *session.File {
	t.Helper()
	root, err := fixtures.CorpusDir()
	require.NoError(t, err)
	data, err := os.ReadFile(filepath.Join(root, rel))
	require.NoError(t, err)
	f, err := session.ParseFile(fixtures.Substitute(data), rel)
	require.NoError(t, err)
	require.Nil(t, f.Torn)
	_, err = f.Log()
	require.NoError(t, err)
	return f
}

// parseLog reads a log given as JSONL text and checks that it is valid.
func parseLog(t *testing.T, text string) *session.File {
	t.Helper()
	f, err := session.ParseFile([]byte(text), "test.jsonl")
	require.NoError(t, err)
	_, err = f.Log()
	require.NoError(t, err)
	return f
}

func fileSpans(f *session.File) []Span {
	return Spans(f.Header.ID, f.Header.SeedLength.Or(0), f.Events)
}

// render is WriteTree without its trace lines and their indentation:
// one line a span, indented under its parent, with its start and end in
// ms from its trace's root.
func render(spans []Span) string {
	var b strings.Builder
	if err := WriteTree(&b, spans); err != nil {
		panic(err)
	}
	var out strings.Builder
	for _, l := range strings.SplitAfter(b.String(), "\n") {
		if l != "" && !strings.HasPrefix(l, "trace ") {
			out.WriteString(strings.TrimPrefix(l, "  "))
		}
	}
	return out.String()
}

// checkWellFormed checks what every set of spans must satisfy: valid and
// unique span ids; each turn the root of its own trace; every other span's
// parent present, in the same trace, opened before it, and enclosing its
// times; no span ending before it starts.
func checkWellFormed(t *testing.T, spans []Span) {
	t.Helper()
	byID := map[trace.SpanID]Span{}
	for _, s := range spans {
		require.True(t, s.TraceID.IsValid() && s.SpanID.IsValid(), "%s: invalid ids", s.Name)
		_, dup := byID[s.SpanID]
		require.False(t, dup, "%s: span id %s twice", s.Name, s.SpanID)
		byID[s.SpanID] = s
		require.False(t, s.End.Before(s.Start), "%s ends before it starts", s.Name)
	}
	for _, s := range spans {
		if s.Name == NameTurn {
			require.False(t, s.Parent.IsValid(), "a turn has no parent")
			continue
		}
		p, ok := byID[s.Parent]
		require.True(t, ok, "%s (seq %d): parent %s missing", s.Name, s.Seq, s.Parent)
		require.Equal(t, p.TraceID, s.TraceID)
		require.Less(t, p.Seq, s.Seq)
		require.False(t, s.Start.Before(p.Start), "%s starts before its parent %s", s.Name, p.Name)
		require.False(t, s.End.After(p.End), "%s ends after its parent %s", s.Name, p.Name)
	}
}

// A turn cancelled mid-stream: the model call ends at its interrupted
// assistant message, after its first token; the turn says who cancelled
// it.
func TestSpansCancelledMidStream(t *testing.T) {
	f := corpusLog(t, "acp/cancel/session.jsonl")
	spans := fileSpans(f)
	checkWellFormed(t, spans)
	// The log's step/start has time 0: the step starts with its turn. The
	// stream's events are 603 s apart in this recording.
	require.Equal(t, `turn [0..513389778] dsh.turn.end_reason=aborted dsh.turn.cancel_cause=user
  step [0..513389778]
    chat deepseek-v4-flash [0..513389778] dsh.model.attempt=1 dsh.model.chunks=2 gen_ai.provider.name=deepseek-official gen_ai.request.model=deepseek-v4-flash gen_ai.response.finish_reasons=["none"] dsh.model.interrupted=true {first_token@0}
`, render(spans))
}

// A model call that fails and is retried in the same step (here after a
// compaction, without llm/retry) gives two attempts under one step: the
// first failed with its code, the second with usage and finish reason.
func TestSpansFailedAttemptThenRetry(t *testing.T) {
	f := corpusLog(t, "headless/snapshots_compaction-recovery/session.jsonl")
	spans := fileSpans(f)
	checkWellFormed(t, spans)
	require.Equal(t, `turn [0..116] dsh.turn.end_reason=completed
  step [53..86]
    chat deepseek-v4-flash [55..66] dsh.model.attempt=1 dsh.model.chunks=5 gen_ai.provider.name=deepseek-official gen_ai.request.model=deepseek-v4-flash gen_ai.response.finish_reasons=["tool-calls"] gen_ai.usage.input_tokens=24 gen_ai.usage.output_tokens=6 {first_token@55}
    execute_tool bash [66..86] gen_ai.tool.name=bash gen_ai.tool.call.id=call_compaction_marker
  step [96..116]
    chat deepseek-v4-flash [96..101] ERROR(snapshot request exceeded the model context window) dsh.model.attempt=1 dsh.model.chunks=1 gen_ai.provider.name=deepseek-official gen_ai.request.model=deepseek-v4-flash gen_ai.response.finish_reasons=["error"] error.type=CONTEXT_WINDOW_EXCEEDED
    chat deepseek-v4-flash [111..116] dsh.model.attempt=2 dsh.model.chunks=5 gen_ai.provider.name=deepseek-official gen_ai.request.model=deepseek-v4-flash gen_ai.response.finish_reasons=["stop"] gen_ai.usage.input_tokens=20 gen_ai.usage.output_tokens=4 {first_token@116}
`, render(spans))
	// The ids are the documented functions of the positions.
	id := f.Header.ID
	require.Equal(t, ModelCallSpanID(id, 1, 2, 2), spans[6].SpanID)
	require.Equal(t, StepSpanID(id, 1, 2), spans[6].Parent)
	require.Equal(t, TraceID(id, 1), spans[6].TraceID)
}

// A tool that fails: its span has the error status and error.type.
func TestSpansToolError(t *testing.T) {
	f := corpusLog(t, "acp/missing-sandbox-runner/session.jsonl")
	spans := fileSpans(f)
	checkWellFormed(t, spans)
	var tools []Span
	for _, s := range spans {
		if strings.HasPrefix(s.Name, NameToolCall+" ") {
			tools = append(tools, s)
		}
	}
	require.Len(t, tools, 3)
	require.Equal(t, "execute_tool bash", tools[0].Name)
	require.Equal(t, codes.Error, tools[0].Status)
	require.Equal(t, "SANDBOX_UNAVAILABLE", tools[0].StatusMessage)
	require.Contains(t, tools[0].Attrs, AttrErrorType.String("SANDBOX_UNAVAILABLE"))
	require.Contains(t, tools[0].Attrs, AttrToolCallID.String("missing-runner-foreground"))
	require.Equal(t, ToolCallSpanID(f.Header.ID, 1, 1, "missing-runner-foreground"), tools[0].SpanID)
	require.Equal(t, StepSpanID(f.Header.ID, 1, 1), tools[0].Parent)
	require.Equal(t, int64(1785916902469), tools[0].Start.UnixMilli())
	require.Equal(t, int64(1785916902487), tools[0].End.UnixMilli())
}

// Retries through llm/retry: a failure before any chunk is an attempt of
// its own, one whose error finish chunk ended it is not counted twice, and
// the step carries each retry as an event. The backoff between attempts
// belongs to no model call.
func TestSpansRetries(t *testing.T) {
	f := parseLog(t, `{"type":"session","version":0,"id":"s-retry","createdAt":0,"cwd":"/w","delegationDepth":0}
{"type":"turn/start","seq":0,"time":1000,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":1001,"data":{"turn":1,"step":1}}
{"type":"user/message","seq":2,"time":1002,"data":{"id":"u1","role":"user","content":[{"type":"text","text":"hi"}],"source":{"kind":"user"}},"surfaceOp":"append"}
{"type":"request/context","seq":3,"time":1003,"data":{"provider":"p","model":"m"}}
{"type":"llm/retry","seq":4,"time":1010,"data":{"retryId":"r1","turn":1,"step":1,"provider":"p","mode":"normal","policyKey":"k","retry":1,"maxRetries":3,"delayMs":100,"failure":{"message":"busy","code":"RATE_LIMIT","status":429}}}
{"type":"llm/retry-started","seq":5,"time":1110,"data":{"retryId":"r1","turn":1,"step":1,"retry":1}}
{"type":"assistant/chunk","seq":6,"time":1120,"data":{"turn":1,"step":1,"chunk":{"type":"block-start","index":0,"blockType":"text"}}}
{"type":"assistant/chunk","seq":7,"time":1130,"data":{"turn":1,"step":1,"chunk":{"type":"finish","reason":{"kind":"error","failure":{"message":"cut","code":"STREAM_CLOSED"}}}}}
{"type":"llm/retry","seq":8,"time":1131,"data":{"retryId":"r2","turn":1,"step":1,"provider":"p","mode":"normal","policyKey":"k","retry":2,"maxRetries":3,"delayMs":200,"failure":{"message":"cut","code":"STREAM_CLOSED"}}}
{"type":"llm/retry-started","seq":9,"time":1331,"data":{"retryId":"r2","turn":1,"step":1,"retry":2}}
{"type":"assistant/chunk","seq":10,"time":1340,"data":{"turn":1,"step":1,"chunk":{"type":"block-start","index":0,"blockType":"text"}}}
{"type":"assistant/chunk","seq":11,"time":1350,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"ok"}}}
{"type":"assistant/chunk","seq":12,"time":1360,"data":{"turn":1,"step":1,"chunk":{"type":"block-end","index":0,"block":{"type":"text","text":"ok"}}}}
{"type":"assistant/chunk","seq":13,"time":1361,"data":{"turn":1,"step":1,"chunk":{"type":"usage","usage":{"inputTokens":7,"outputTokens":1,"cacheReadTokens":3,"reasoningTokens":0}}}}
{"type":"assistant/chunk","seq":14,"time":1362,"data":{"turn":1,"step":1,"chunk":{"type":"finish","reason":{"kind":"stop"}}}}
{"type":"assistant/message","seq":15,"time":1363,"data":{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","content":[{"type":"text","text":"ok"}],"source":{"kind":"model","provider":"p","model":"m"}},"usage":{"inputTokens":7,"outputTokens":1,"cacheReadTokens":3,"reasoningTokens":0}},"surfaceOp":"append","sourceEventSeqs":[10,11,12,13,14]}
{"type":"step/end","seq":16,"time":1364,"data":{"turn":1,"step":1}}
{"type":"turn/end","seq":17,"time":1365,"data":{"turn":1,"reason":{"kind":"completed"}}}
`)
	spans := fileSpans(f)
	checkWellFormed(t, spans)
	var tree strings.Builder
	require.NoError(t, WriteTree(&tree, spans))
	require.True(t, strings.HasPrefix(tree.String(), "trace "+TraceID("s-retry", 1).String()+" (session s-retry, turn 1)\n  turn [0..365] "), tree.String())
	require.Equal(t, `turn [0..365] dsh.turn.end_reason=completed
  step [1..364] {retry@10 dsh.retry=1 dsh.retry.delay_ms=100 dsh.retry.failure=RATE_LIMIT} {retry@131 dsh.retry=2 dsh.retry.delay_ms=200 dsh.retry.failure=STREAM_CLOSED}
    chat m [3..10] ERROR(busy) dsh.model.attempt=1 dsh.model.chunks=0 gen_ai.provider.name=p gen_ai.request.model=m gen_ai.response.finish_reasons=["none"] error.type=RATE_LIMIT
    chat m [110..130] ERROR(cut) dsh.model.attempt=2 dsh.model.chunks=2 gen_ai.provider.name=p gen_ai.request.model=m gen_ai.response.finish_reasons=["error"] error.type=STREAM_CLOSED
    chat m [331..363] dsh.model.attempt=3 dsh.model.chunks=5 gen_ai.provider.name=p gen_ai.request.model=m gen_ai.response.finish_reasons=["stop"] gen_ai.usage.input_tokens=7 gen_ai.usage.output_tokens=1 dsh.usage.cache_read_tokens=3 dsh.usage.reasoning_tokens=0 {first_token@350}
`, render(spans))
}

// A log that ends inside a turn (a session still running, or a crash not
// yet repaired): the open spans end at the last event, marked unfinished,
// with the ids the finished turn gives them.
func TestSpansUnfinishedTurn(t *testing.T) {
	f := corpusLog(t, "headless/snapshots_compaction-recovery/session.jsonl")
	full := fileSpans(f)
	// Cut the log in step 1's tool call: seq 14 is tool/call, 15 its result.
	cut := Spans(f.Header.ID, 0, f.Events[:15])
	checkWellFormed(t, cut)
	require.Equal(t, `turn [0..66] dsh.unfinished=true
  step [53..66] dsh.unfinished=true
    chat deepseek-v4-flash [55..66] dsh.model.attempt=1 dsh.model.chunks=5 gen_ai.provider.name=deepseek-official gen_ai.request.model=deepseek-v4-flash gen_ai.response.finish_reasons=["tool-calls"] gen_ai.usage.input_tokens=24 gen_ai.usage.output_tokens=6 {first_token@55}
    execute_tool bash [66..66] gen_ai.tool.name=bash gen_ai.tool.call.id=call_compaction_marker dsh.unfinished=true
`, render(cut))
	for i := range cut {
		require.Equal(t, full[i].SpanID, cut[i].SpanID, "%s", cut[i].Name)
		require.Equal(t, full[i].Parent, cut[i].Parent, "%s", cut[i].Name)
	}
}

// Every log of the corpus gives well-formed spans, one turn span per turn
// started after the seed, and the same spans when read again (the ids
// depend on the log alone).
func TestSpansCorpus(t *testing.T) {
	files, err := fixtures.CorpusFiles()
	require.NoError(t, err)
	root, err := fixtures.CorpusDir()
	require.NoError(t, err)
	n := 0
	for _, path := range files {
		rel, err := filepath.Rel(root, path)
		require.NoError(t, err)
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		f, err := session.ParseFile(fixtures.Substitute(data), rel)
		if err != nil || f.Torn != nil {
			continue // the corpus holds a few deliberately broken files
		}
		if _, err := f.Log(); err != nil {
			continue
		}
		t.Run(rel, func(t *testing.T) {
			spans := fileSpans(f)
			checkWellFormed(t, spans)
			turns := 0
			for _, e := range f.Events[f.Header.SeedLength.Or(0):] {
				if e.Type() == session.TypeTurnStart {
					turns++
				}
			}
			got := 0
			for _, s := range spans {
				if s.Name == NameTurn {
					got++
				}
			}
			require.Equal(t, turns, got)
			require.Equal(t, spans, fileSpans(f))
		})
		n++
	}
	require.Greater(t, n, 50)
}

// Ids differ between sessions, turns, steps, attempts and calls, and
// between the kinds of span at the same position.
func TestIDsDistinct(t *testing.T) {
	seen := map[trace.SpanID]string{}
	add := func(id trace.SpanID, what string) {
		t.Helper()
		prev, dup := seen[id]
		require.False(t, dup, "%s and %s share %s", what, prev, id)
		seen[id] = what
	}
	for _, sid := range []session.SessionID{"a", "b"} {
		for turn := int64(1); turn <= 3; turn++ {
			add(TurnSpanID(sid, turn), fmt.Sprint(sid, turn))
			for step := int64(1); step <= 3; step++ {
				add(StepSpanID(sid, turn, step), fmt.Sprint(sid, turn, step))
				add(ToolCallSpanID(sid, turn, step, ""), fmt.Sprint(sid, turn, step, "tool ''"))
				add(ToolCallSpanID(sid, turn, step, "c1"), fmt.Sprint(sid, turn, step, "tool c1"))
				for attempt := int64(1); attempt <= 3; attempt++ {
					add(ModelCallSpanID(sid, turn, step, attempt), fmt.Sprint(sid, turn, step, "attempt", attempt))
				}
			}
		}
	}
	require.NotEqual(t, TraceID("a", 1), TraceID("a", 2))
	require.NotEqual(t, TraceID("a", 1), TraceID("b", 1))
	require.Equal(t, TraceID("a", 1), TraceID("a", 1))
	_ = attribute.Key("")
}

// The type a chunk's raw data names (read without decoding it, for the
// chunks after a call's first token) is the decoded chunk's type, for
// every chunk of the corpus and of bench-shaped turns; data written in
// another key order is not read that way.
func TestRawChunkTypeAgreesWithTheDecoder(t *testing.T) {
	files, err := fixtures.CorpusFiles()
	require.NoError(t, err)
	events := benchTurns(t, 1, 3)
	for _, path := range files {
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		f, err := session.ParseFile(fixtures.Substitute(data), filepath.Base(path))
		if err != nil {
			continue
		}
		events = append(events, f.Events...)
	}
	read := 0
	for _, e := range events {
		if e.Type() != session.TypeAssistantChunk {
			continue
		}
		p, ok := e.Payload().(session.AssistantChunk)
		require.True(t, ok)
		k, ok := rawChunkType(e)
		if ok {
			read++
			require.Equal(t, p.Chunk.Type(), k, "seq %d: %s", e.Seq(), e.Data())
		}
	}
	require.Greater(t, read, 100)

	f := parseLog(t, `{"type":"session","version":0,"id":"s","createdAt":0,"cwd":"/w","delegationDepth":0}
{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"step/start","seq":1,"time":1,"data":{"turn":1,"step":1}}
{"type":"assistant/chunk","seq":2,"time":1,"data":{"step":1,"turn":1,"chunk":{"type":"usage","usage":{"inputTokens":1,"outputTokens":2}}}}
`)
	_, ok := rawChunkType(f.Events[2])
	require.False(t, ok, "turn is not the first key")
}
