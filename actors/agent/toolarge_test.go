package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// waitIdleSlow is harness.waitIdle with room for turns that move tens of
// MiB (seconds under the race detector on a loaded machine).
func waitIdleSlow(h *harness) {
	h.t.Helper()
	h.refs++
	res, err := h.sys.Root.RequestFuture(h.agent, WaitIdle{Ref: h.refs}, time.Minute).Result()
	require.NoError(h.t, err)
	require.Equal(h.t, Idle{Ref: h.refs}, res)
}

// requireRecordable checks that every event of es has a record the log
// reader accepts.
func requireRecordable(t *testing.T, es []session.Event) {
	t.Helper()
	for _, e := range es {
		require.LessOrEqual(t, len(session.AppendEvent(nil, e)), session.DefaultMaxRecordBytes, "event %d (%s)", e.Seq(), e.Type())
	}
}

// TestToolOutputTooLargeToRecordIsAnErrorResult: a tool whose result the
// log could not hold (its record would be longer than the reader accepts)
// gets the error result TOOL_OUTPUT_TOO_LARGE naming the size and the
// limit, and the turn goes on to its next step.
func TestToolOutputTooLargeToRecordIsAnErrorResult(t *testing.T) {
	huge := strings.Repeat("x", 17<<20)
	tool := fakeTool{name: "dump", fn: func(context.Context, Call) (Result, error) {
		return Result{Content: []messages.ContentBlock{messages.TextBlock(huge)}}, nil
	}}
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "dump", `{}`}), textResponse("ok")), nil, withTools(t, tool))
	h.followup("dump it")
	waitIdleSlow(h)
	es := h.events()
	requireRecordable(t, es)
	res := ofType(es, session.TypeToolResult)
	require.Len(t, res, 1)
	tr := res[0].Payload().(session.ToolResult)
	require.Equal(t, "TOOL_OUTPUT_TOO_LARGE", tr.Error.Code)
	require.True(t, tr.Message.Block(0).IsError())
	var text string
	for b := range tr.Message.Block(0).NestedBlocks() {
		text += b.Text()
	}
	require.Contains(t, text, `tool "dump" is too large to record`)
	require.Contains(t, text, "limit of 16777216 bytes")
	require.Less(t, len(text), 1000)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
	require.Len(t, h.mock.Requests(), 2, "the turn went on to the model")
}

// TestAssistantMessageTooLargeToRecordEndsTheTurn: a stream whose chunks
// each fit a record but whose assembled message does not ends the turn in
// error (MESSAGE_TOO_LARGE), without the message; the agent is idle and
// takes the next prompt.
func TestAssistantMessageTooLargeToRecordEndsTheTurn(t *testing.T) {
	// Two text blocks of 9 MiB, streamed 1 MiB a chunk: each chunk (the
	// block ends carry their whole block) fits a record, the message does
	// not.
	piece := strings.Repeat("y", 1<<20)
	var cs []messages.StreamChunk
	for i := range 2 {
		cs = append(cs, messages.BlockStartChunk(i, messages.BlockText))
		for range 9 {
			cs = append(cs, messages.TextDeltaChunk(i, piece))
		}
		cs = append(cs, messages.BlockEndChunk(i, messages.TextBlock(strings.Repeat(piece, 9))))
	}
	cs = append(cs, finishChunk(messages.FinishStop))
	h := newHarness(t, newMock(entry{chunks: cs}, textResponse("ok")), nil)
	h.followup("talk a lot")
	waitIdleSlow(h)
	es := h.events()
	requireRecordable(t, es)
	require.Empty(t, ofType(es, session.TypeAssistantMessage))
	ends := turnEnds(es)
	require.Len(t, ends, 1)
	require.Equal(t, session.EndError, ends[0].Kind)
	require.Equal(t, CodeMessageTooLarge, ends[0].Error.Code)
	require.Contains(t, ends[0].Error.Message, "assistant message is too large to record")

	h.followup("again")
	waitIdleSlow(h)
	ends = turnEnds(h.events())
	require.Len(t, ends, 2)
	require.Equal(t, session.EndCompleted, ends[1].Kind)
}

// TestStreamChunkTooLargeToRecordEndsTheTurn: one chunk the log could not
// hold is not recorded and ends the turn in error (MESSAGE_TOO_LARGE).
func TestStreamChunkTooLargeToRecordEndsTheTurn(t *testing.T) {
	huge := strings.Repeat("z", 17<<20)
	cs := []messages.StreamChunk{messages.BlockStartChunk(0, messages.BlockText), messages.TextDeltaChunk(0, "a"),
		messages.TextDeltaChunk(0, huge), messages.BlockEndChunk(0, messages.TextBlock("a"+huge)), finishChunk(messages.FinishStop)}
	h := newHarness(t, newMock(entry{chunks: cs}), nil)
	h.followup("one huge chunk")
	waitIdleSlow(h)
	es := h.events()
	requireRecordable(t, es)
	require.Empty(t, ofType(es, session.TypeAssistantMessage))
	ends := turnEnds(es)
	require.Len(t, ends, 1)
	require.Equal(t, session.EndError, ends[0].Kind)
	require.Equal(t, CodeMessageTooLarge, ends[0].Error.Code)
	require.Contains(t, ends[0].Error.Message, "stream chunk is too large to record")
}

// TestCompactionSummaryTooLargeToRecordFails: a compaction whose summary
// the log could not hold fails (compaction/end {error}), leaving the
// surface as it was, instead of a refused append crashing the agent.
func TestCompactionSummaryTooLargeToRecordFails(t *testing.T) {
	big := strings.Repeat("s", 9<<20) // the summary record holds it twice (summary, rawOutput)
	sum := entry{chunks: []messages.StreamChunk{messages.BlockStartChunk(0, messages.BlockText),
		messages.TextDeltaChunk(0, big), messages.BlockEndChunk(0, messages.TextBlock(big)), finishChunk(messages.FinishStop)}}
	h := newHarness(t, newMock(textResponse("ok"), sum), nil, withCompaction(CompactionConfig{NewID: fixedIDs("cmp-big")}))
	h.followup(longPremise)
	waitIdleSlow(h)
	h.refs++
	res, err := h.sys.Root.RequestFuture(h.agent, Compact{Ref: h.refs}, time.Minute).Result()
	require.NoError(t, err)
	r := res.(Compacted)
	require.Equal(t, CompactFailed, r.Outcome)
	require.Contains(t, r.Error, "compaction summary is too large to record")
	es := h.events()
	requireRecordable(t, es)
	require.Empty(t, ofType(es, session.TypeCompactionSum))
	end := ofType(es, session.TypeCompactionEnd)
	require.Len(t, end, 1)
	require.Contains(t, end[0].Data().String(), "limit of 16777216 bytes")
}

// TestToolEmitTooLargeToRecordIsRefusedToTheTool: a running tool that
// emits an event the log could not hold gets ErrTooLarge from Emit,
// nothing is appended, and the turn goes on (the session refused such an
// append before, and the agent crashed into a restart).
func TestToolEmitTooLargeToRecordIsRefusedToTheTool(t *testing.T) {
	huge := strings.Repeat("t", 17<<20)
	emitted := make(chan error, 1)
	tool := fakeTool{name: "plan", fn: func(_ context.Context, call Call) (Result, error) {
		err := call.Emit(session.NewTodoWrite([]session.Todo{{Content: huge, Status: "pending"}}).Draft())
		emitted <- err
		return Result{Content: []messages.ContentBlock{messages.TextBlock("planned")}}, nil
	}}
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "plan", `{}`}), textResponse("ok")), nil, withTools(t, tool))
	h.followup("plan it")
	waitIdleSlow(h)
	require.ErrorIs(t, <-emitted, session.ErrTooLarge)
	es := h.events()
	requireRecordable(t, es)
	require.Empty(t, ofType(es, session.TypeTodoWrite))
	require.Len(t, ofType(es, session.TypeToolResult), 1)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
}
