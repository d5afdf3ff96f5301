package agent

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// A turn whose second step calls tools again runs them: the per-step
// tool bookkeeping starts afresh at every step (acp/advanced-toolchain).
func TestASecondToolStepRunsItsTools(t *testing.T) {
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "echo", `{}`}),
		toolCallResponse(tc{"c2", "echo", `{}`}, tc{"c3", "echo", `{}`}), textResponse("done")), nil,
		withTools(t, fakeTool{name: "echo"}))
	h.followup("go")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	require.Equal(t, []string{"c1", "c2", "c3"}, resultIDs(es))
	require.Len(t, h.mock.Requests(), 3)
	var steps []int64
	for _, e := range ofType(es, session.TypeToolCall) {
		steps = append(steps, e.Payload().(session.ToolCall).Step)
	}
	require.Equal(t, []int64{1, 2, 2}, steps)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
}

// A tool's additional contexts are spliced into next-step right after
// its tool/result commits, before the next result and before step/end
// (docs/agent-loop.md#tool-calls; acp/hook-codex-posttool-context).
func TestToolContextsAreLoggedBeforeStepEnd(t *testing.T) {
	notes := map[string]messages.Message{"c1": user(t, "note 1"), "c2": user(t, "note 2")}
	tool := fakeTool{name: "echo", mode: Parallel, fn: func(_ context.Context, c Call) (Result, error) {
		return Result{Content: []messages.ContentBlock{messages.TextBlock("ran")},
			AdditionalContexts: []messages.Message{notes[c.ID]}}, nil
	}}
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "echo", `{}`}, tc{"c2", "echo", `{}`}), textResponse("done")),
		nil, withTools(t, tool))
	h.followup("go")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	var seen []string
	in := false
	for _, e := range es {
		switch p := e.Payload().(type) {
		case session.StepStart:
			in = p.Step == 1
		case session.ToolResult:
			if in {
				seen = append(seen, "result "+p.Message.Block(0).ToolCallID())
			}
		case session.InboxSpliced:
			if in {
				for _, m := range p.Inserted() {
					seen = append(seen, "context "+texts(m))
				}
			}
		case session.StepEnd:
			if in {
				seen = append(seen, "step/end")
				in = false
			}
		}
	}
	require.Equal(t, []string{"result c1", "context note 1", "result c2", "context note 2", "step/end"}, seen)
	// Both notes entered step 2.
	ids := requestIDs(t, h, 1)
	require.Equal(t, []messages.MessageID{notes["c1"].ID(), notes["c2"].ID()}, ids[len(ids)-2:])
}
