package agent

import (
	"context"
	"errors"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// cancelWatch wraps the mock and closes cancelled when the context of
// its first call is done (its stream actor was stopped or cancelled).
type cancelWatch struct {
	*mockProvider
	once      sync.Once
	cancelled chan struct{}
}

func (p *cancelWatch) Stream(ctx context.Context, req llm.Request) iter.Seq2[messages.StreamChunk, error] {
	p.once.Do(func() {
		go func() {
			<-ctx.Done()
			close(p.cancelled)
		}()
	})
	return p.mockProvider.Stream(ctx, req)
}

func lastEnd(t *testing.T, es []session.Event) session.TurnEndReason {
	t.Helper()
	ends := turnEnds(es)
	require.NotEmpty(t, ends)
	return ends[len(ends)-1]
}

// requireBalanced checks the log is valid and has no open turn.
func requireBalanced(t *testing.T, es []session.Event) {
	t.Helper()
	require.NoError(t, session.CheckTrace(es))
	require.Empty(t, session.InterruptedTurnClosers(es), "open turn")
}

// The restart path. The crash is injected as a real invariant breach:
// the session "refusing" one of the agent's appends (an AppendFailed
// carrying a ref of the running incarnation) makes the actor panic
// inside a turn, with a model stream open. protoactor restarts it: the
// old stream actor is stopped (its call cancelled), the new incarnation
// closes the open turn by repair (turn/end interrupted), the WaitIdle the
// dead incarnation held is answered, replies meant for the dead
// incarnation are ignored, and the next followup completes.
func TestRestartRepairsOpenTurn(t *testing.T) {
	mock := newMock(entry{chunks: []messages.StreamChunk{messages.BlockStartChunk(0, messages.BlockText),
		messages.TextDeltaChunk(0, "par")}, hang: true})
	w := &cancelWatch{mockProvider: mock, cancelled: make(chan struct{})}
	h := newHarness(t, mock, nil, func(_ *harness, c *Config) { c.Provider = w })
	h.followup("one")
	h.waitStarted()
	// Held by the first incarnation (the mailbox is FIFO), handed over.
	idle := h.sys.Root.RequestFuture(h.agent, WaitIdle{Ref: 99}, waitFor)
	h.sys.Root.Send(h.agent, session.AppendFailed{Ref: 1<<refShift | 1, Err: errors.New("injected")})
	select {
	case <-w.cancelled:
	case <-time.After(waitFor):
		t.Fatal("the dead incarnation's model call was not cancelled")
	}
	res, err := idle.Result()
	require.NoError(t, err)
	require.Equal(t, Idle{Ref: 99}, res)
	es := h.events()
	requireBalanced(t, es)
	require.Equal(t, session.EndInterrupted, lastEnd(t, es).Kind)
	require.Len(t, turnEnds(es), 1)

	// A reply meant for the dead incarnation is dropped, not taken for
	// the new one's (it would make it panic again).
	h.sys.Root.Send(h.agent, session.AppendFailed{Ref: 1<<refShift | 1, Err: errors.New("stale")})
	h.followup("two")
	h.waitIdle()
	es = h.events()
	requireBalanced(t, es)
	require.Len(t, turnEnds(es), 2)
	require.Equal(t, session.EndCompleted, lastEnd(t, es).Kind)
	// The second turn saw the first message and the interrupted partial.
	require.Equal(t, "two", texts(derive(es)[len(derive(es))-2]))
}

// panicOnce returns a func that panics on its first call only.
func panicOnce() func() {
	var once sync.Once
	return func() { once.Do(func() { panic("hook exploded") }) }
}

// A hook's panic is contained: the turn ends in error (as for a returned
// error) with a message naming the hook, the agent lives on, and the
// next followup completes.
func TestHookPanicIsContained(t *testing.T) {
	cases := map[string]struct {
		script []entry
		opt    func(boom func()) option
		hook   string
	}{
		"pre-step": {hook: "pre-step", opt: func(boom func()) option {
			return withPreStep(preStepFunc(func(_ context.Context, in PreStepInput) (PreStepDecision, error) {
				boom()
				return PreStepDecision{Messages: in.Messages}, nil
			}))
		}},
		"turn-stopping": {hook: "turn-stopping", opt: func(boom func()) option {
			return func(_ *harness, c *Config) {
				c.Hooks.TurnStopping = turnStoppingFunc(func(context.Context, TurnStoppingInput) error {
					boom()
					return nil
				})
			}
		}},
		"request": {hook: "request", opt: func(boom func()) option {
			return func(_ *harness, c *Config) {
				c.Hooks.Request = requestFunc(func(in RequestInput) (messages.CallConfig, error) {
					boom()
					return in.Seed, nil
				})
			}
		}},
		"request-error": {hook: "request-error",
			script: []entry{{err: errors.New("transport down")}},
			opt: func(boom func()) option {
				return func(_ *harness, c *Config) {
					c.Hooks.RequestError = requestErrorFunc(func(RequestErrorInput) (RequestErrorDecision, error) {
						boom()
						return DecideDefault, nil
					})
				}
			}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, newMock(tc.script...), nil, tc.opt(panicOnce()))
			h.followup("one")
			h.waitIdle()
			es := h.events()
			requireBalanced(t, es)
			end := lastEnd(t, es)
			require.Equal(t, session.EndError, end.Kind)
			require.Contains(t, end.Error.Message, tc.hook+" hook panicked")
			h.followup("two")
			h.waitIdle()
			es = h.events()
			requireBalanced(t, es)
			require.Equal(t, session.EndCompleted, lastEnd(t, es).Kind)
		})
	}
}

// A Routes callback's panic is contained like a hook's: the turn ends in
// error naming the panic, the observer gets TurnFailed, and the agent
// lives on (no restart: the next followup completes). The route is asked
// at pre-step for the pressure check (before step/start: no step is
// recorded) and when a request is built (inside the step).
func TestRoutesPanicIsContained(t *testing.T) {
	cases := map[string]struct {
		noPressure bool
		steps      int // step/starts of the failed turn
	}{
		"pressure": {steps: 0},
		"request":  {noPressure: true, steps: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			boom := panicOnce()
			failed := make(chan TurnFailed, 4)
			h := newHarness(t, newMock(), nil, withFailures(t, failed), func(_ *harness, c *Config) {
				c.Compaction.NoPressure = tc.noPressure
				c.Routes = func(string, string) Route {
					boom()
					return Route{ContextWindow: messages.Some(1_000_000)}
				}
			})
			h.followup("one")
			h.waitIdle()
			es := h.events()
			requireBalanced(t, es)
			require.Len(t, ofType(es, session.TypeStepStart), tc.steps)
			end := lastEnd(t, es)
			require.Equal(t, session.EndError, end.Kind)
			require.Equal(t, "agent: routes callback panicked: hook exploded", end.Error.Message)
			requireFailed(t, failed, TurnFailed{Turn: 1, Step: 1, Error: end.Error})
			h.followup("two")
			h.waitIdle()
			es = h.events()
			requireBalanced(t, es)
			require.Equal(t, []session.TurnEndReason{end, {Kind: session.EndCompleted}}, turnEnds(es),
				"no restart (one would have closed turn 1 interrupted)")
		})
	}
}
