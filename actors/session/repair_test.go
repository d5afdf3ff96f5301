package session

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/messages"
)

// requireInterruptedEnd checks a turn/end {interrupted} closer.
func requireInterruptedEnd(t testing.TB, e Event, turn int64) {
	t.Helper()
	require.Equal(t, TypeTurnEnd, e.Type())
	p := e.Payload().(TurnEnd)
	require.Equal(t, turn, p.Turn)
	require.Equal(t, EndInterrupted, p.Reason.Kind)
	require.JSONEq(t, fmt.Sprintf(`{"turn":%d,"reason":{"kind":"interrupted"}}`, turn), e.Data().String())
}

// Scenario 31: an open step is closed before the turn; a balanced log
// needs no closers.
func TestRepairClosesOpenStepBeforeTurn(t *testing.T) {
	balanced := sampleLog(t)
	require.Empty(t, InterruptedTurnClosers(balanced.Events().Slice()))
	require.Empty(t, InterruptedTurnClosers(nil))
	closers, err := balanced.Repair()
	require.NoError(t, err)
	require.Empty(t, closers)

	l := sampleLog(t)
	s := beginTurn(t, l, "interrupted")
	appendOK(t, l, StepStart{Turn: s.Turn, Step: 1}.Draft())
	appendOK(t, l, AssistantChunk{Turn: s.Turn, Step: 1, Chunk: messages.TextDeltaChunk(0, "par")}.Draft())
	last := appendOK(t, l, UserMessage{Message: userText(t, "late")}.Draft())
	n := l.Len()

	closers = InterruptedTurnClosers(l.Events().Slice())
	require.Len(t, closers, 2)
	require.Equal(t, TypeStepEnd, closers[0].Type())
	require.JSONEq(t, `{"turn":3,"step":1}`, closers[0].Data().String())
	requireInterruptedEnd(t, closers[1], s.Turn)
	for i, c := range closers {
		require.Equal(t, n+int64(i), c.Seq())
		require.Equal(t, last.Time(), c.Time())
		require.Equal(t, OpNone, c.SurfaceOp().Kind())
	}
	require.Equal(t, n, l.Len(), "InterruptedTurnClosers is pure")

	applied, err := l.Repair()
	require.NoError(t, err)
	requireSameEvents(t, closers, applied)
	requireSameEvents(t, closers, l.Events().Slice()[n:])
	_, _, open := l.OpenTurn()
	require.False(t, open)
	require.NoError(t, CheckTrace(l.Events().Slice()))
	require.Empty(t, InterruptedTurnClosers(l.Events().Slice()))

	// A turn open between steps (or before its first) needs only turn/end.
	between := newTestLog(t)
	bs := beginTurn(t, between, "x")
	appendTextStep(t, between, bs.Turn, 1, "step one")
	closers = InterruptedTurnClosers(between.Events().Slice())
	require.Len(t, closers, 1)
	requireInterruptedEnd(t, closers[0], 1)
}

// TestInterruptedTurnClosersOfABalancedLogAllocateNothing: a balanced
// log (every load checks one) is not walked from its start, and the
// walk's maps are made only for the tool calls of an open turn: a loaded
// log of 1,000 turns made six maps a turn.
func TestInterruptedTurnClosersOfABalancedLogAllocateNothing(t *testing.T) {
	l := newTestLog(t)
	for range 50 {
		s := beginTurn(t, l, "again")
		appendTextStep(t, l, s.Turn, 1, "answer")
		appendOK(t, l, TurnEnd{Turn: s.Turn, Reason: TurnEndReason{Kind: EndCompleted}}.Draft())
	}
	events := l.Events().Slice()
	require.Zero(t, testing.AllocsPerRun(10, func() {
		if InterruptedTurnClosers(events) != nil {
			t.Fatal("a balanced log has no closers")
		}
	}))
}

// Scenario 32: a tool call the model asked for but that was never
// recorded as started gets a TOOL_NOT_STARTED result without provenance.
func TestRepairMarksUnrecordedToolCallNotStarted(t *testing.T) {
	l := newTestLog(t)
	s := beginTurn(t, l, "call a tool")
	appendOK(t, l, StepStart{Turn: s.Turn, Step: 1}.Draft())
	appendOK(t, l, AssistantMessage{Turn: 1, Step: 1, Message: assistantOf(t, messages.ToolCallBlock("never", "write", "{}"))}.Draft())
	n := l.Len()

	closers := InterruptedTurnClosers(l.Events().Slice())
	require.Len(t, closers, 3)
	r := closers[0]
	require.Equal(t, TypeToolResult, r.Type())
	require.Equal(t, n, r.Seq())
	require.Equal(t, OpAppend, r.SurfaceOp().Kind())
	_, has := r.SourceEventSeqs()
	require.False(t, has, "a call that never started cites nothing")
	p := r.Payload().(ToolResult)
	require.Equal(t, ToolError{Name: "ToolNotStartedError", Code: "TOOL_NOT_STARTED"}, p.Error)
	require.Equal(t, messages.MessageID("interrupted-tool-result-never-"+strconv.FormatInt(n, 10)), p.Message.ID())
	require.Equal(t, messages.SourceTool, p.Message.Source().Kind())
	require.Equal(t, "never", p.Message.Source().CallID())
	block := p.Message.Block(0)
	require.Equal(t, "never", block.ToolCallID())
	require.True(t, block.IsError())
	require.Contains(t, block.Content()[0].Text(), "before it started")
	require.Equal(t, TypeStepEnd, closers[1].Type())
	requireInterruptedEnd(t, closers[2], 1)

	_, err := l.Repair()
	require.NoError(t, err)
	require.NoError(t, CheckTrace(l.Events().Slice()))
	msgs := l.DeriveMessages()
	require.True(t, msgs.At(msgs.Len()-1).Equal(p.Message), "the synthetic result is model-visible")
}

// Scenario 33: a recorded but unanswered tool call gets a
// TOOL_OUTCOME_UNKNOWN result that is a surface append citing the
// tool/call; answered calls get nothing; pending calls close in the order
// they were requested.
func TestRepairCitesRecordedToolCall(t *testing.T) {
	l := newTestLog(t)
	s := beginTurn(t, l, "three calls")
	appendOK(t, l, StepStart{Turn: s.Turn, Step: 1}.Draft())
	appendOK(t, l, AssistantMessage{Turn: 1, Step: 1, Message: assistantOf(t,
		messages.ToolCallBlock("answered", "read", "{}"),
		messages.ToolCallBlock("recorded", "write", "{}"),
		messages.ToolCallBlock("unstarted", "write", "{}"))}.Draft())
	appendOK(t, l, ToolCall{Turn: 1, Step: 1, CallID: "answered", Name: "read", Arguments: "{}"}.Draft())
	appendOK(t, l, ToolResult{Turn: 1, Step: 1, Message: toolResultOf("answered", "ok")}.Draft())
	call := appendOK(t, l, ToolCall{Turn: 1, Step: 1, CallID: "recorded", Name: "write", Arguments: "{}"}.Draft())
	n := l.Len()

	closers := InterruptedTurnClosers(l.Events().Slice())
	require.Len(t, closers, 4)

	unknown := closers[0]
	require.Equal(t, TypeToolResult, unknown.Type())
	require.Equal(t, OpAppend, unknown.SurfaceOp().Kind())
	src, has := unknown.SourceEventSeqs()
	require.True(t, has)
	require.Equal(t, []int64{call.Seq()}, src)
	p := unknown.Payload().(ToolResult)
	require.Equal(t, ToolError{Name: "ToolOutcomeUnknownError", Code: "TOOL_OUTCOME_UNKNOWN"}, p.Error)
	require.Equal(t, "recorded", p.Message.Source().CallID())
	require.Equal(t, messages.MessageID("interrupted-tool-result-recorded-"+strconv.FormatInt(n, 10)), p.Message.ID())
	text := p.Message.Block(0).Content()[0].Text()
	require.Contains(t, text, "outcome is unknown")
	require.Contains(t, text, "read-only or idempotent")

	notStarted := closers[1].Payload().(ToolResult)
	require.Equal(t, "TOOL_NOT_STARTED", notStarted.Error.Code)
	require.Equal(t, "unstarted", notStarted.Message.Source().CallID())
	require.Equal(t, n+1, closers[1].Seq())
	require.Equal(t, TypeStepEnd, closers[2].Type())
	requireInterruptedEnd(t, closers[3], 1)

	_, err := l.Repair()
	require.NoError(t, err)
	require.NoError(t, CheckTrace(l.Events().Slice()))
}

// Crash repair reproduces the closers the reference wrote into its
// tool-outcome-unknown fixture: the same types, seqs, times, data,
// surface ops and provenance.
func TestRepairReproducesReferenceFixtureClosers(t *testing.T) {
	root, err := fixtures.CorpusDir()
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "headless", "semantic-checkpoint-snapshots_tool-outcome-unknown", "session.expected.jsonl"))
	require.NoError(t, err)
	lines := bytes.Split(bytes.TrimSpace(fixtures.Substitute(raw)), []byte("\n"))
	h, err := parseHeaderLine(lines[0])
	require.NoError(t, err)

	var events []Event
	for i, line := range lines[1:] {
		e, err := DecodeEvent(line)
		require.NoError(t, err, "line %d", i+2)
		events = append(events, e)
	}
	// The closers are the run that ends with the first turn/end
	// {interrupted}: the synthetic results and step/end before it.
	end := -1
	for i, e := range events {
		if p, ok := e.Payload().(TurnEnd); ok && p.Reason.Kind == EndInterrupted {
			end = i
			break
		}
	}
	require.Positive(t, end, "the fixture has an interrupted turn")
	first := end
	for first > 0 {
		prev := events[first-1]
		if prev.Type() == TypeStepEnd {
			first--
			continue
		}
		if p, ok := prev.Payload().(ToolResult); ok && strings.HasPrefix(string(p.Message.ID()), "interrupted-tool-result-") {
			first--
			continue
		}
		break
	}
	want := events[first : end+1]
	require.Len(t, want, 3, "tool/result, step/end, turn/end")

	got := InterruptedTurnClosers(events[:first])
	require.Len(t, got, len(want))
	for i := range want {
		w, g := want[i], got[i]
		require.Equal(t, w.Type(), g.Type(), "closer %d", i)
		require.Equal(t, w.Seq(), g.Seq(), "closer %d", i)
		require.Equal(t, w.Time(), g.Time(), "closer %d", i)
		require.Truef(t, w.Data().Equal(g.Data()), "closer %d data:\nwant %s\ngot  %s", i, w.Data(), g.Data())
		require.Equal(t, w.SurfaceOp(), g.SurfaceOp(), "closer %d", i)
		ws, wok := w.SourceEventSeqs()
		gs, gok := g.SourceEventSeqs()
		require.Equal(t, wok, gok, "closer %d", i)
		require.Equal(t, ws, gs, "closer %d", i)
		require.True(t, w.Equal(g), "closer %d", i)
	}

	// The whole fixture is a valid log, and repairing its crashed prefix
	// in a log gives the same closers.
	whole, err := Restore(h, events)
	require.NoError(t, err)
	require.Equal(t, int64(len(events)), whole.Len())
	crashed, err := Restore(h, events[:first])
	require.NoError(t, err)
	applied, err := crashed.Repair()
	require.NoError(t, err)
	requireSameEvents(t, want, applied)
}
