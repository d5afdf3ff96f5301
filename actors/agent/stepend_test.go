package agent

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

var opNames = map[stepEndOpKind]string{opEvent: "event", opInject: "inject", opSteer: "steer",
	opFollowup: "followup", opRemove: "remove"}

func marker(name string) session.Draft {
	return session.NewDraft(session.EventType("x/"+name), messages.MustParseJSON(`{}`))
}

// The core at a step boundary: step/end, the claim, then the hook; its
// contributions in order (an inbox operation once the events before it
// are committed), then the step. What the hook puts in next-step waits for
// the next claim; at the end of a turn it makes the loop claim again and
// run another step.
func TestDriverStepEnd(t *testing.T) {
	r := newRig(t, driverConfig{StepEnd: true})
	answer := func(ops ...StepEndOp) {
		t.Helper()
		e := r.stepEnds[len(r.stepEnds)-1]
		r.out = nil
		r.run(r.input(stepEndDone{Ref: e.Ref, Decision: StepEndDecision{Ops: ops}}))
	}
	r.followup("go")
	r.chunks(toolCallResponse(tc{"c1", "echo", `{}`}).chunks...)
	r.end(messages.FinishToolCalls, messages.LlmFailure{}, false)
	r.out = nil
	r.run(r.input(toolDone{Ref: r.tools[0].Ref, Result: Result{}}))
	require.Equal(t, []string{"append tool/result", "append step/end", "claim next-step 0", "step-end 1.1"}, r.out,
		"the hook runs once the claim is answered")
	require.Equal(t, StatusRunning, r.d.Status())
	require.False(t, r.d.Idle())

	note := user(t, "note")
	answer(EventOp(marker("one")), InjectOp(note), EventOp(marker("two")))
	require.Equal(t, []string{"append x/one", "inbox-op inject", "append x/two", "append step/start",
		"stream mock-1"}, r.out, "the note waits for the next claim")

	r.chunks(textResponse("a").chunks[:4]...)
	r.out = nil
	r.end(messages.FinishStop, messages.LlmFailure{}, false)
	require.Equal(t, []string{"append assistant/message", "append step/end", "claim next-step 1", "step-end 1.2"}, r.out)
	answer()
	require.Equal(t, []string{"append step/start,user/message", "stream mock-1"}, r.out)

	r.chunks(textResponse("b").chunks[:4]...)
	r.end(messages.FinishStop, messages.LlmFailure{}, false)
	late := user(t, "late")
	gone := user(t, "gone")
	answer(InjectOp(gone), RemoveOp(gone.ID()), SteerOp(late))
	require.Equal(t, []string{"inbox-op inject", "inbox-op remove", "inbox-op steer", "claim next-step 1",
		"append step/start,user/message", "stream mock-1"}, r.out,
		"at the end of the turn, what the hook left in next-step is claimed at once")

	r.chunks(textResponse("c").chunks[:4]...)
	r.end(messages.FinishStop, messages.LlmFailure{}, false)
	answer()
	require.Equal(t, []string{"append turn/end", "status idle"}, r.out)
	require.Equal(t, []int64{1, 2, 3, 4}, func() []int64 {
		var out []int64
		for _, e := range r.stepEnds {
			out = append(out, e.Step)
		}
		return out
	}())

	es := r.l.Events().Slice()
	require.NoError(t, session.CheckTrace(es))
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
	users := ofType(es, session.TypeUserMessage)
	require.Len(t, users, 3)
	require.Equal(t, note.ID(), users[1].Payload().(session.UserMessage).Message.ID())
	require.Equal(t, late.ID(), users[2].Payload().(session.UserMessage).Message.ID())
	require.True(t, r.d.Idle())
}

// A stale or duplicate answer changes nothing; an abort while the hook
// runs drops its decision and ends the turn aborted.
func TestDriverStepEndAbort(t *testing.T) {
	r := newRig(t, driverConfig{StepEnd: true})
	r.followup("go")
	r.chunks(textResponse("a").chunks[:4]...)
	r.end(messages.FinishStop, messages.LlmFailure{}, false)
	e := r.stepEnds[0]
	r.out = nil
	r.run(r.input(stepEndDone{Ref: e.Ref + 1000, Decision: StepEndDecision{Ops: []StepEndOp{EventOp(marker("stale"))}}}))
	r.run(r.input(stepEndOpDone{Ref: 0}))
	require.Empty(t, r.out)
	r.run(r.input(Cancel{Cause: session.CancelCause{Kind: session.CauseUser}, KeepInbox: true}))
	r.run(r.input(stepEndDone{Ref: e.Ref, Decision: StepEndDecision{Ops: []StepEndOp{EventOp(marker("late"))}}}))
	require.Equal(t, []string{"abort user", "append turn/end", "status idle"}, r.out)
	es := r.l.Events().Slice()
	require.NoError(t, session.CheckTrace(es))
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndAborted, Cause: session.CancelCause{Kind: session.CauseUser}}},
		turnEnds(es))
	require.True(t, r.d.Idle())
}

// stepEndFunc is a StepEndHook made of a function.
type stepEndFunc func(ctx context.Context, in StepEndInput) (StepEndDecision, error)

func (f stepEndFunc) StepEnd(ctx context.Context, in StepEndInput) (StepEndDecision, error) {
	return f(ctx, in)
}

func withStepEnd(h StepEndHook) option {
	return func(_ *harness, c *Config) { c.Hooks.StepEnd = h }
}

// The hook through the actor: it sees each step that ended, its events
// and inbox operations are recorded in order at the boundary (the inbox's
// splices among the agent's appends), a message it injects after a tool
// step enters at the next boundary, and one it steers after the last step
// runs another step. It is not run after a step that ended in error.
func TestStepEndHook(t *testing.T) {
	var mu sync.Mutex
	var seen []StepEndInput
	note, late, gone := user(t, "note"), user(t, "late"), user(t, "gone")
	hook := stepEndFunc(func(_ context.Context, in StepEndInput) (StepEndDecision, error) {
		mu.Lock()
		seen = append(seen, in)
		mu.Unlock()
		switch in.Step {
		case 1:
			return StepEndDecision{Ops: []StepEndOp{EventOp(marker("one")), InjectOp(note), InjectOp(gone),
				RemoveOp(gone.ID()), EventOp(marker("two"))}}, nil
		case 3:
			return StepEndDecision{Ops: []StepEndOp{SteerOp(late)}}, nil
		}
		return StepEndDecision{}, nil
	})
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "echo", `{}`}), textResponse("a"), textResponse("b"),
		textResponse("c"), entry{err: errors.New("down")}), nil,
		withTools(t, fakeTool{name: "echo"}), withStepEnd(hook), func(_ *harness, c *Config) { c.NoRetry = true })
	h.followup("go")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
	i := slices.IndexFunc(es, func(e session.Event) bool { return e.Type() == session.TypeStepEnd })
	require.Equal(t, []session.EventType{session.TypeStepEnd, "x/one", session.TypeInboxSpliced,
		session.TypeInboxSpliced, session.TypeInboxSpliced, "x/two", session.TypeStepStart,
		session.TypeAssistantChunk}, types(es[i:i+8]), "the contributions at the boundary, in order")
	canceled := es[i+4].Payload().(session.InboxSpliced)
	require.Equal(t, "canceled", canceled.Outcome)
	var entered []messages.MessageID
	for _, e := range ofType(es, session.TypeUserMessage) {
		entered = append(entered, e.Payload().(session.UserMessage).Message.ID())
	}
	require.Equal(t, []messages.MessageID{entered[0], note.ID(), late.ID()}, entered,
		"the note enters step 3, the steering a fourth step")
	require.Len(t, ofType(es, session.TypeStepStart), 4)
	mu.Lock()
	require.Equal(t, []StepEndInput{{1, 1}, {1, 2}, {1, 3}, {1, 4}}, seen)
	mu.Unlock()

	// A failed step ends the turn at once: no hook.
	h.followup("fails")
	h.waitIdle()
	require.Equal(t, session.EndError, lastEnd(t, h.events()).Kind)
	mu.Lock()
	require.Len(t, seen, 4)
	mu.Unlock()
}

// A hook's error, panic or invalid contribution ends the turn in error
// (TurnFailed names the step that ended) and records nothing of the
// decision; the agent lives on. A cancel while the hook blocks ends the
// turn aborted.
func TestStepEndHookFailures(t *testing.T) {
	cases := map[string]struct {
		fn   func() (StepEndDecision, error)
		want string
	}{
		"error": {fn: func() (StepEndDecision, error) { return StepEndDecision{}, errors.New("no") }, want: "no"},
		"panic": {fn: func() (StepEndDecision, error) { panic("hook exploded") },
			want: "agent: step-end hook panicked: hook exploded"},
		"core event": {fn: func() (StepEndDecision, error) {
			return StepEndDecision{Ops: []StepEndOp{EventOp(marker("ok")),
				EventOp(session.StepStart{Turn: 1, Step: 9}.Draft())}}, nil
		}, want: `agent: step-end event of core type "step/start"`},
		"assistant message": {fn: func() (StepEndDecision, error) {
			m, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.TextBlock("x")},
				messages.ModelSource{Provider: "p", Model: "m"})
			return StepEndDecision{Ops: []StepEndOp{InjectOp(m)}}, err
		}, want: "agent: step-end hook sent a message that is not a user message"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var once sync.Once
			failed := make(chan TurnFailed, 4)
			h := newHarness(t, newMock(), nil, withFailures(t, failed),
				withStepEnd(stepEndFunc(func(context.Context, StepEndInput) (dec StepEndDecision, err error) {
					once.Do(func() { dec, err = tc.fn() })
					return dec, err
				})))
			h.followup("one")
			h.waitIdle()
			es := h.events()
			requireBalanced(t, es)
			end := lastEnd(t, es)
			require.Equal(t, session.EndError, end.Kind)
			require.Equal(t, tc.want, end.Error.Message)
			require.Empty(t, ofType(es, "x/ok"), "nothing of a refused decision is recorded")
			requireFailed(t, failed, TurnFailed{Turn: 1, Step: 1, Error: end.Error})
			h.followup("two")
			h.waitIdle()
			require.Equal(t, session.EndCompleted, lastEnd(t, h.events()).Kind)
		})
	}

	t.Run("cancel", func(t *testing.T) {
		running := make(chan struct{})
		h := newHarness(t, newMock(), nil, withStepEnd(stepEndFunc(
			func(ctx context.Context, _ StepEndInput) (StepEndDecision, error) {
				close(running)
				<-ctx.Done()
				return StepEndDecision{Ops: []StepEndOp{EventOp(marker("late"))}}, ctx.Err()
			})))
		h.followup("one")
		<-running
		h.cancel(session.CauseUser)
		h.waitIdle()
		es := h.events()
		requireBalanced(t, es)
		require.Equal(t, session.EndAborted, lastEnd(t, es).Kind)
		require.Empty(t, ofType(es, "x/late"))
	})
}
