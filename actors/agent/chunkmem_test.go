package agent

import (
	"strings"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
)

// inspected wraps the agent actor so a test can read its state inside
// Receive (the actor's own goroutine, so no race), through inspect.
type inspected struct{ *agentActor }

type inspect struct {
	fn   func(*agentActor)
	done chan struct{}
}

func (w inspected) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(inspect); ok {
		m.fn(w.agentActor)
		close(m.done)
		return
	}
	w.agentActor.Receive(ctx)
}

// withInspection makes the harness's agent an inspected one.
func withInspection(t *testing.T) option {
	return func(h *harness, _ *Config) {
		h.props = func(cfg Config) *actor.Props {
			dc, err := cfg.driverConfig()
			require.NoError(t, err)
			lin := &lineage{carried: map[string]carried{}}
			return actor.PropsFromProducer(func() actor.Actor {
				return inspected{&agentActor{cfg: cfg, dcfg: dc, lin: lin}}
			})
		}
	}
}

// inspect runs fn on the agent actor's state, in its Receive.
func (h *harness) inspect(fn func(*agentActor)) {
	h.t.Helper()
	done := make(chan struct{})
	h.sys.Root.Send(h.agent, inspect{fn: fn, done: done})
	select {
	case <-done:
	case <-h.t.Context().Done():
	}
}

// An idle agent holds no chunk buffers: the coalescing buffer grows to
// the longest run of chunks held behind one Append, and a thousand idle
// sessions each kept theirs (38 MB of a default dsh bench's heap).
func TestIdleAgentHoldsNoChunkBuffers(t *testing.T) {
	text := strings.Repeat("a", 2000) // one chunk per character
	h := newHarness(t, newMock(textResponse(text)), nil, withInspection(t))
	h.followup("go")
	h.waitIdle()
	var held, flight, refs int
	h.inspect(func(a *agentActor) {
		held = cap(a.chunks.heldDrafts) + cap(a.chunks.heldRefs)
		flight = cap(a.chunks.flight)
		refs = cap(a.d.chunkRefs)
	})
	require.Zero(t, held, "held chunk buffers")
	require.Zero(t, flight, "chunk appends in flight")
	require.Zero(t, refs, "the driver's chunk refs")
	require.Equal(t, text, texts(derive(h.events())[1]))
}
