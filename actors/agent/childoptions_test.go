package agent

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
)

// TestChildOptionsConfigureTheInboxAndStreamActors: the agent spawns its
// inbox and each call's stream actor with Config.ChildOptions (the host
// runs them on its workers with them). Without, neither saw the option:
// protoactor's defaults started a goroutine per wake-up of theirs.
func TestChildOptionsConfigureTheInboxAndStreamActors(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{} // the message types the configured actors received
	record := actor.WithReceiverMiddleware(func(next actor.ReceiverFunc) actor.ReceiverFunc {
		return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
			mu.Lock()
			seen[fmt.Sprintf("%T", env.Message)] = true
			mu.Unlock()
			next(c, env)
		}
	})
	h := newHarness(t, newMock(textResponse("hello")), nil, func(_ *harness, c *Config) {
		c.ChildOptions = []actor.PropsOption{record}
	})
	h.followup("hi")
	h.waitIdle()
	saw := func(typ string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return seen[typ]
		}
	}
	require.True(t, saw("inbox.QueryPending")(), "the inbox is configured")
	// The stream actor gets its goroutine's last word after the agent
	// has had the stream's end, and may be idle already.
	require.Eventually(t, saw("llm.streamFinished"), 5*time.Second, time.Millisecond, "the stream actor is configured")
}
