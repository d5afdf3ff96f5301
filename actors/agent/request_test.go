package agent

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

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
