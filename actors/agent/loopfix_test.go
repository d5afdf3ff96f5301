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

// A route's adapter defaults fill the fields a request leaves out and are
// marked in the header (docs/session-log.md#request-headers); a later request
// seeds without them, so the header does not change. Its context window is
// logged in request/context (docs/agent-loop.md#building-a-request).
func TestRouteDefaultsAreMarkedAndTheContextWindowLogged(t *testing.T) {
	route := Route{ReasoningEffort: "max", MaxTokens: messages.Some(4096), ContextWindow: messages.Some(128000)}
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "echo", `{}`}), textResponse("done")), nil,
		withTools(t, fakeTool{name: "echo"}), func(_ *harness, c *Config) {
			c.Routes = func(provider, model string) Route {
				if provider == "mock" && model == "mock-1" {
					return route
				}
				return Route{}
			}
		})
	h.followup("go")
	h.waitIdle()
	es := h.events()
	hs := ofType(es, session.TypeRequestHeader)
	require.Len(t, hs, 1, "the second request keeps the header")
	hdr := hs[0].Payload().(session.RequestHeader).Header
	require.Equal(t, session.AdapterDefaults{ReasoningEffort: true, MaxTokens: true}, hdr.AdapterDefaults)
	require.Equal(t, "max", hdr.Config.ReasoningEffort)
	require.Equal(t, messages.Some(4096), hdr.Config.MaxTokens)
	cs := ofType(es, session.TypeRequestContext)
	require.Len(t, cs, 1)
	require.Equal(t, messages.Some(128000), cs[0].Payload().(session.RequestContext).ContextWindow)
	for _, r := range h.mock.Requests() {
		require.Equal(t, "max", r.Config().ReasoningEffort)
		require.Equal(t, messages.Some(4096), r.Config().MaxTokens)
	}
}

// A field the caller sets is not an adapter default, even when the route
// has a default for it.
func TestRouteDefaultsDoNotMarkCallerFields(t *testing.T) {
	h := newHarness(t, newMock(textResponse("done")), nil, func(_ *harness, c *Config) {
		c.MaxTokens = messages.Some(100)
		c.Routes = func(string, string) Route { return Route{MaxTokens: messages.Some(4096)} }
	})
	h.followup("go")
	h.waitIdle()
	hdr := ofType(h.events(), session.TypeRequestHeader)[0].Payload().(session.RequestHeader).Header
	require.Equal(t, session.AdapterDefaults{}, hdr.AdapterDefaults)
	require.Equal(t, messages.Some(100), hdr.Config.MaxTokens)
	cs := ofType(h.events(), session.TypeRequestContext)
	_, has := cs[0].Payload().(session.RequestContext).ContextWindow.Get()
	require.False(t, has)
}
