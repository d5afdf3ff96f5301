package session

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// Shared builders for the log core's tests. Every log they build obeys the
// session trace (docs/session-log.md#invariants), because builds with -race or
// -tags invariants run the traceChecker inside Append and veto a violation.
// Tests that need a trace-breaking event list use looseLog.

// testNow is the epoch-ms clock of the tests; appendOK stamps the event at
// seq testNow+Len so times differ between events.
const testNow int64 = 1_700_000_000_000

var testModel = messages.ModelSource{Provider: "deepseek-official", Model: "deepseek-v4-flash"}

func logHeader(id SessionID) Header {
	return Header{ID: id, CreatedAt: 1, Cwd: "/work/project"}
}

// newTestLog returns an empty fresh log.
func newTestLog(t testing.TB) *Log {
	t.Helper()
	l, err := New(logHeader("session-test"))
	require.NoError(t, err)
	return l
}

// looseLog returns an empty log that does not run the trace checker in any
// build, for event lists that deliberately break the trace (traceChecker
// tests). Every other rule of Append still holds.
func looseLog(t testing.TB) *Log {
	t.Helper()
	l := newTestLog(t)
	l.trace = nil
	return l
}

// appendOK appends d and fails the test on error.
func appendOK(t testing.TB, l *Log, d Draft) Event {
	t.Helper()
	e, err := l.Append(d, testNow+l.Len())
	require.NoError(t, err)
	return e
}

// userText returns a user message holding one text block.
func userText(t testing.TB, text string) messages.Message {
	t.Helper()
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
	require.NoError(t, err)
	return m
}

// assistantOf returns an assistant message with the given blocks (none for
// an empty completion anchor).
func assistantOf(t testing.TB, blocks ...messages.ContentBlock) messages.Message {
	t.Helper()
	m, err := messages.NewAssistantMessage(blocks, testModel)
	require.NoError(t, err)
	return m
}

// toolResultOf returns the result message of callID holding one text block.
func toolResultOf(callID, text string) messages.Message {
	return messages.NewToolResultMessage(callID, []messages.ContentBlock{messages.TextBlock(text)}, messages.ToolSucceeded)
}

// testEpochHeader returns a request header for the test model.
func testEpochHeader(system string, tools ...messages.ToolSchema) EpochHeader {
	cfg := messages.CallConfig{Provider: testModel.Provider, Model: testModel.Model}
	return NewEpochHeader(cfg, AdapterDefaults{}, system, tools)
}

// turnSeqs are the seqs of interest in a turn appended by a builder.
type turnSeqs struct {
	Turn      int64
	Start     int64 // turn/start
	User      int64 // user/message
	Assistant int64 // the last assistant/message
	Call      int64 // tool/call (tool turns)
	Result    int64 // tool/result (tool turns)
	End       int64 // turn/end
}

// beginTurn appends turn/start (numbered after the log's last turn) and a
// user message.
func beginTurn(t testing.TB, l *Log, prompt string) turnSeqs {
	t.Helper()
	s := turnSeqs{Turn: l.Turns() + 1}
	s.Start = appendOK(t, l, TurnStart{Turn: s.Turn}.Draft()).Seq()
	s.User = appendOK(t, l, UserMessage{Message: userText(t, prompt)}.Draft()).Seq()
	return s
}

// appendTextStep appends a step that streams reply as text-delta chunks
// and anchors it with an assistant message citing them. It returns the
// assistant/message seq.
func appendTextStep(t testing.TB, l *Log, turn, step int64, reply string) int64 {
	t.Helper()
	appendOK(t, l, StepStart{Turn: turn, Step: step}.Draft())
	if step == 1 {
		reason := ReasonInitial
		if _, ok := l.RequestHeader(); ok {
			reason = ReasonResume
		}
		appendOK(t, l, RequestHeader{Header: testEpochHeader("system"), Reason: reason}.Draft())
	}
	var sources []int64
	for _, part := range []string{reply[:len(reply)/2], reply[len(reply)/2:]} {
		c := AssistantChunk{Turn: turn, Step: step, Chunk: messages.TextDeltaChunk(0, part)}
		sources = append(sources, appendOK(t, l, c.Draft()).Seq())
	}
	a := AssistantMessage{Turn: turn, Step: step, Message: assistantOf(t, messages.TextBlock(reply)),
		Usage: messages.TokenUsage{InputTokens: 10, OutputTokens: 5}, HasUsage: true}
	seq := appendOK(t, l, a.Draft().WithSources(sources)).Seq()
	appendOK(t, l, StepEnd{Turn: turn, Step: step}.Draft())
	return seq
}

// endTurn appends turn/end {completed}.
func endTurn(t testing.TB, l *Log, turn int64) int64 {
	t.Helper()
	return appendOK(t, l, TurnEnd{Turn: turn, Reason: TurnEndReason{Kind: EndCompleted}}.Draft()).Seq()
}

// appendTextTurn appends a complete one-step text turn.
func appendTextTurn(t testing.TB, l *Log, prompt, reply string) turnSeqs {
	t.Helper()
	s := beginTurn(t, l, prompt)
	s.Assistant = appendTextStep(t, l, s.Turn, 1, reply)
	s.End = endTurn(t, l, s.Turn)
	return s
}

// appendToolTurn appends a complete two-step tool turn: step 1 asks for
// tool callID and records its call and result, step 2 answers in text.
func appendToolTurn(t testing.TB, l *Log, callID string) turnSeqs {
	t.Helper()
	s := beginTurn(t, l, "run "+callID)
	s.Call, s.Result = appendToolStep(t, l, s.Turn, 1, callID)
	s.Assistant = appendTextStep(t, l, s.Turn, 2, "done with "+callID)
	s.End = endTurn(t, l, s.Turn)
	return s
}

// appendToolStep appends a closed step in which the model calls callID and
// the tool answers. It returns the tool/call and tool/result seqs.
func appendToolStep(t testing.TB, l *Log, turn, step int64, callID string) (call, result int64) {
	t.Helper()
	appendOK(t, l, StepStart{Turn: turn, Step: step}.Draft())
	args := fmt.Sprintf(`{"id":%q}`, callID)
	a := AssistantMessage{Turn: turn, Step: step, Message: assistantOf(t, messages.ToolCallBlock(callID, "read", args))}
	appendOK(t, l, a.Draft())
	call = appendOK(t, l, ToolCall{Turn: turn, Step: step, CallID: callID, Name: "read", Arguments: args}.Draft()).Seq()
	r := ToolResult{Turn: turn, Step: step, Message: toolResultOf(callID, "result of "+callID)}
	result = appendOK(t, l, r.Draft().WithSources([]int64{call})).Seq()
	appendOK(t, l, StepEnd{Turn: turn, Step: step}.Draft())
	return call, result
}

// sampleLog returns a log with a text turn and a tool turn.
func sampleLog(t testing.TB) *Log {
	t.Helper()
	l := newTestLog(t)
	appendTextTurn(t, l, "hello", "hi there")
	appendToolTurn(t, l, "call-1")
	return l
}

// logState is what a failed append must leave as it was.
type logState struct {
	n      int64
	events []Event
	msgs   []messages.Message
	nodes  []int64
}

func stateOf(l *Log) logState {
	return logState{n: l.Len(), events: l.Events().Slice(), msgs: l.DeriveMessages().Slice(), nodes: l.SurfaceNodes()}
}

// requireUnchanged checks that l still has the state before was taken
// from: length, events, derived messages and surface.
func requireUnchanged(t testing.TB, l *Log, before logState) {
	t.Helper()
	require.Equal(t, before.n, l.Len(), "Len changed")
	require.Equal(t, before.nodes, l.SurfaceNodes(), "surface changed")
	requireSameEvents(t, before.events, l.Events().Slice())
	requireSameMessages(t, before.msgs, l.DeriveMessages().Slice())
}

func requireSameEvents(t testing.TB, want, got []Event) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.Truef(t, want[i].Equal(got[i]), "event %d: want %s %s, got %s %s",
			i, want[i].Type(), want[i].Data(), got[i].Type(), got[i].Data())
	}
}

func requireSameMessages(t testing.TB, want, got []messages.Message) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.Truef(t, want[i].Equal(got[i]), "message %d: want %s, got %s", i, want[i].JSON(), got[i].JSON())
	}
}

// seedEvent builds an event the way a decoder hands one to Restore: an
// envelope with no decoded payload, so the log's seed checks decode it.
func seedEvent(typ EventType, seq int64, data string) Event {
	return newEvent(typ, seq, testNow, messages.MustParseJSON(data))
}
