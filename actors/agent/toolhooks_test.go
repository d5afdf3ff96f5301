package agent

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

type preExecFunc func(ctx context.Context, c Call) (PreExecuteDecision, error)

func (f preExecFunc) PreExecute(ctx context.Context, c Call) (PreExecuteDecision, error) {
	return f(ctx, c)
}

type approverFunc func(ctx context.Context, c Call, reason string) (bool, error)

func (f approverFunc) Approve(ctx context.Context, c Call, reason string) (bool, error) {
	return f(ctx, c, reason)
}

type postExecFunc func(ctx context.Context, c Call, r Result) (PostExecuteDecision, error)

func (f postExecFunc) PostExecute(ctx context.Context, c Call, r Result) (PostExecuteDecision, error) {
	return f(ctx, c, r)
}

func toolResults(es []session.Event) []session.ToolResult {
	var out []session.ToolResult
	for _, e := range ofType(es, session.TypeToolResult) {
		out = append(out, e.Payload().(session.ToolResult))
	}
	return out
}

// tools/pre-execute (docs/agent-loop.md#extension-points): allow | deny | ask.
func TestToolPreExecuteHookGatesTheBody(t *testing.T) {
	for _, tt := range []struct {
		name     string
		dec      PreExecuteDecision
		approver ToolApprover
		err      error
		ran      bool
		code     string
		text     string
	}{
		{name: "allow", dec: PreExecuteDecision{Permission: Allow}, ran: true, text: "echo ran"},
		{name: "deny", dec: PreExecuteDecision{Permission: Deny, Reason: "policy"}, code: "TOOL_DENIED",
			text: "Error: tool call denied: policy"},
		{name: "ask without an approver", dec: PreExecuteDecision{Permission: Ask},
			code: "TOOL_DENIED", text: "Error: tool call denied: approval required and no approver is configured"},
		{name: "ask approved", dec: PreExecuteDecision{Permission: Ask},
			approver: approverFunc(func(context.Context, Call, string) (bool, error) { return true, nil }),
			ran:      true, text: "echo ran"},
		{name: "ask refused", dec: PreExecuteDecision{Permission: Ask},
			approver: approverFunc(func(context.Context, Call, string) (bool, error) { return false, nil }),
			code:     "TOOL_DENIED", text: "Error: tool call denied: not approved"},
		{name: "hook error", err: errors.New("boom"), code: "TOOL_HOOK_ERROR",
			text: "Error: pre-execute hook failed: boom"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var ran atomic.Bool
			tool := fakeTool{name: "echo", fn: func(context.Context, Call) (Result, error) {
				ran.Store(true)
				return Result{Content: []messages.ContentBlock{messages.TextBlock("echo ran")}}, nil
			}}
			hook := preExecFunc(func(_ context.Context, c Call) (PreExecuteDecision, error) {
				require.Equal(t, "c1", c.ID)
				return tt.dec, tt.err
			})
			h := newHarness(t, newMock(toolCallResponse(tc{"c1", "echo", `{}`}), textResponse("ok")), nil,
				withTools(t, tool), func(_ *harness, c *Config) { c.Hooks.PreExecute, c.Hooks.Approver = hook, tt.approver })
			h.followup("go")
			h.waitIdle()
			es := h.events()
			balanced(t, es)
			require.Equal(t, tt.ran, ran.Load())
			rs := toolResults(es)
			require.Len(t, rs, 1)
			require.Equal(t, tt.code, rs[0].Error.Code)
			require.Equal(t, tt.text, nestedText(rs[0]))
			require.Equal(t, tt.code != "", rs[0].Message.Block(0).IsError())
			require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
		})
	}
}

// tools/post-execute (docs/agent-loop.md#extension-points): accept | block,
// with additional contexts.
func TestToolPostExecuteHookBlocksAndAddsContexts(t *testing.T) {
	note := user(t, "post-execute note")
	hook := postExecFunc(func(_ context.Context, c Call, r Result) (PostExecuteDecision, error) {
		return PostExecuteDecision{Block: c.ID == "c2", Reason: "secret", AdditionalContexts: []messages.Message{note}}, nil
	})
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "echo", `{}`}, tc{"c2", "echo", `{}`}), textResponse("ok")), nil,
		withTools(t, fakeTool{name: "echo"}), func(_ *harness, c *Config) { c.Hooks.PostExecute = postExecHookOnce(hook) })
	h.followup("go")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	rs := toolResults(es)
	require.Len(t, rs, 2)
	require.Empty(t, rs[0].Error.Code)
	require.Equal(t, "TOOL_RESULT_BLOCKED", rs[1].Error.Code)
	require.Equal(t, "Error: tool result blocked: secret", nestedText(rs[1]))
	// The note entered the next step, after both results.
	require.Greater(t, userSeq(es, note.ID()), ofType(es, session.TypeToolResult)[1].Seq())
}

// postExecHookOnce adds the contexts of the first call only (one note).
func postExecHookOnce(f postExecFunc) ToolPostExecuteHook {
	return postExecFunc(func(ctx context.Context, c Call, r Result) (PostExecuteDecision, error) {
		d, err := f(ctx, c, r)
		if c.ID != "c1" {
			d.AdditionalContexts = nil
		}
		return d, err
	})
}

// The pre-step hook is not consulted when a completed turn finds next-step
// empty (docs/agent-loop.md#turns-and-steps): it cannot block a finished
// turn.
func TestPreStepIsNotConsultedWhenNothingIsLeftToEnter(t *testing.T) {
	var mu sync.Mutex // guards steps
	var steps []int64
	hook := preStepFunc(func(_ context.Context, in PreStepInput) (PreStepDecision, error) {
		mu.Lock()
		steps = append(steps, in.Step)
		mu.Unlock()
		if in.Step > 1 {
			return PreStepDecision{Reject: true}, nil
		}
		return PreStepDecision{Messages: in.Messages}, nil
	})
	h := newHarness(t, newMock(), nil, withPreStep(hook))
	h.followup("a")
	h.waitIdle()
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(h.events()))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int64{1}, steps)
}

func nestedText(r session.ToolResult) string {
	var s string
	for b := range r.Message.Block(0).NestedBlocks() {
		s += b.Text()
	}
	return s
}
