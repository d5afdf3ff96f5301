package agent

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// TestStressConcurrentSendsAndCancels hammers one agent with followups,
// steers, injects and cancels from many goroutines, over a seeded
// synthetic provider that calls tools and fails now and then. Whatever
// the interleaving, the log must be a valid, balanced trace, every
// request must rebuild from the log (checked at each dispatch by the
// harness), and nothing may leak (goleak in TestMain).
func TestStressConcurrentSendsAndCancels(t *testing.T) {
	const workers, ops = 8, 30
	syn, err := synthetic.New(synthetic.Config{Seed: 7, TextChunks: 6, ReasoningChunks: 2, ReasoningRate: 0.2,
		ToolCallRate: 0.4, MaxToolSteps: 2, MaxToolCalls: 3, FailureRate: 0.1, RetryAfter: time.Millisecond})
	require.NoError(t, err)
	mock := newMock()
	mock.inner = syn
	echo := fakeTool{name: "synthetic_echo", mode: Parallel}
	h := newHarness(t, mock, nil, withTools(t, echo, TodoWriteTool{}))

	var wg sync.WaitGroup
	errs := make(chan error, workers*ops)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for i := range ops {
				m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(fmt.Sprintf("w%d op%d", w, i))},
					messages.UserSource())
				if err != nil {
					errs <- err
					return
				}
				var msg any
				switch k := rng.IntN(10); {
				case k < 4:
					msg = Followup{Message: m}
				case k < 6:
					msg = Steer{Message: m}
				case k < 9:
					msg = Inject{Message: m}
				default:
					h.sys.Root.Send(h.agent, Cancel{Cause: session.CancelCause{Kind: session.CauseUser}, KeepInbox: rng.IntN(2) == 0})
					continue
				}
				res, err := h.sys.Root.RequestFuture(h.agent, msg, waitFor).Result()
				switch {
				case err != nil:
					errs <- err
				case !isSendReply(res):
					errs <- fmt.Errorf("unexpected reply %T", res)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	l, err := session.Restore(testHeader(), es)
	require.NoError(t, err)
	_, _, open := l.OpenTurn()
	require.False(t, open)
	require.NotEmpty(t, ofType(es, session.TypeTurnStart))
	t.Logf("%d events, %d turns, %d requests", len(es), len(ofType(es, session.TypeTurnStart)), len(mock.Requests()))
}

func isSendReply(v any) bool {
	switch v.(type) {
	case Sent, SendFailed:
		return true
	}
	return false
}

var _ llm.Provider = (*synthetic.Provider)(nil)
