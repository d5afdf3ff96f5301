package agent

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// The loop scenarios of the reference's test plan not covered by
// loop_test.go, named after them.

type turnStoppingFunc func(ctx context.Context, in TurnStoppingInput) error

func (f turnStoppingFunc) TurnStopping(ctx context.Context, in TurnStoppingInput) error {
	return f(ctx, in)
}

type requestFunc func(in RequestInput) (messages.CallConfig, error)

func (f requestFunc) Request(in RequestInput) (messages.CallConfig, error) { return f(in) }

type requestErrorFunc func(in RequestErrorInput) (RequestErrorDecision, error)

func (f requestErrorFunc) RequestError(in RequestErrorInput) (RequestErrorDecision, error) {
	return f(in)
}

// withFailures makes an actor collecting TurnFailed the agent's observer.
func withFailures(t *testing.T, ch chan TurnFailed) option {
	return func(h *harness, c *Config) {
		sys := h.sys
		pid := sys.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
			if m, ok := ctx.Message().(TurnFailed); ok {
				ch <- m
			}
		}))
		c.Observer = pid
		t.Cleanup(func() { require.NoError(t, sys.Root.PoisonFuture(pid).Wait()) })
	}
}

// withSessionObserver registers o on the session (called in the session
// actor, before the append is acknowledged).
func withSessionObserver(o func(h *harness, e session.Event)) option {
	return func(h *harness, _ *Config) {
		h.observers = append(h.observers, func(e session.Event) error { o(h, e); return nil })
	}
}

func userSeq(es []session.Event, id messages.MessageID) int64 {
	for _, e := range ofType(es, session.TypeUserMessage) {
		if m, _ := e.Message(); m.ID() == id {
			return e.Seq()
		}
	}
	return -1
}

func requestIDs(t *testing.T, h *harness, i int) []messages.MessageID {
	t.Helper()
	reqs := h.mock.Requests()
	require.Greater(t, len(reqs), i)
	var out []messages.MessageID
	for _, m := range reqs[i].Messages() {
		out = append(out, m.ID())
	}
	return out
}

// balanced checks the trace invariants and that no turn is left open.
func balanced(t *testing.T, es []session.Event) {
	t.Helper()
	require.NoError(t, session.CheckTrace(es))
	require.Equal(t, len(ofType(es, session.TypeTurnStart)), len(ofType(es, session.TypeTurnEnd)))
	require.Equal(t, len(ofType(es, session.TypeStepStart)), len(ofType(es, session.TypeStepEnd)))
}

// Scenario 48.
func TestDefersInjectDuringToolExecutionUntilAfterTheToolResult(t *testing.T) {
	release, running := make(chan struct{}), make(chan struct{})
	tool := fakeTool{name: "wait", fn: func(ctx context.Context, _ Call) (Result, error) {
		close(running)
		<-release
		return Result{Content: []messages.ContentBlock{messages.TextBlock("waited")}}, nil
	}}
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "wait", `{}`}), textResponse("done")), nil, withTools(t, tool))
	h.followup("go")
	<-running
	ctxMsg := h.send("inject", "context")
	close(release)
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	res := ofType(es, session.TypeToolResult)
	require.Len(t, res, 1)
	require.Greater(t, userSeq(es, ctxMsg.ID()), res[0].Seq())
	require.Len(t, ofType(es, session.TypeTurnStart), 1)
	require.Len(t, h.mock.Requests(), 2)
	require.Equal(t, ctxMsg.ID(), requestIDs(t, h, 1)[len(requestIDs(t, h, 1))-1])
}

// Scenario 49.
func TestTurnStoppingHookCanSteerAnotherStep(t *testing.T) {
	steers := []messages.Message{user(t, "again 1"), user(t, "again 2")}
	var calls atomic.Int32
	hook := turnStoppingFunc(func(_ context.Context, in TurnStoppingInput) error {
		if n := int(calls.Add(1)); n <= len(steers) {
			in.Steer(steers[n-1])
		}
		return nil
	})
	h := newHarness(t, newMock(), nil, func(_ *harness, c *Config) { c.Hooks.TurnStopping = hook })
	h.followup("a")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	require.Len(t, ofType(es, session.TypeTurnStart), 1)
	require.Len(t, ofType(es, session.TypeStepStart), 3)
	require.Len(t, h.mock.Requests(), 3)
	require.Equal(t, int32(3), calls.Load())
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
}

// Scenario 50.
func TestAToolCanConcludeTheTurn(t *testing.T) {
	tool := fakeTool{name: "final", fn: func(context.Context, Call) (Result, error) {
		return Result{Content: []messages.ContentBlock{messages.TextBlock("concluded")}, ConcludesTurn: true}, nil
	}}
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "final", `{}`})), nil, withTools(t, tool))
	h.followup("a")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	require.Len(t, h.mock.Requests(), 1)
	require.Equal(t, []string{"c1"}, resultIDs(es))
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
}

// Scenario 51.
func TestRequestHookSwitchesModels(t *testing.T) {
	hook := requestFunc(func(in RequestInput) (messages.CallConfig, error) {
		c := in.Seed
		c.Model = "switched"
		return c, nil
	})
	h := newHarness(t, newMock(), nil, func(_ *harness, c *Config) { c.Hooks.Request = hook })
	h.followup("a")
	h.waitIdle()
	es := h.events()
	hdrs := ofType(es, session.TypeRequestHeader)
	require.Len(t, hdrs, 1)
	require.Equal(t, "switched", hdrs[0].Payload().(session.RequestHeader).Header.Config.Model)
	require.Equal(t, "switched", h.mock.Requests()[0].Config().Model)
	rc := ofType(es, session.TypeRequestContext)[0].Payload().(session.RequestContext)
	require.Equal(t, "switched", rc.Model)
}

// Scenario 52.
func TestAThrowingPreStepHookFailsTheProposalNotTheLoop(t *testing.T) {
	var calls atomic.Int32
	hook := preStepFunc(func(_ context.Context, in PreStepInput) (PreStepDecision, error) {
		if calls.Add(1) == 1 {
			return PreStepDecision{}, errors.New("listener exploded")
		}
		return PreStepDecision{Messages: in.Messages}, nil
	})
	failed := make(chan TurnFailed, 4)
	h := newHarness(t, newMock(), nil, withPreStep(hook), withFailures(t, failed))
	h.followup("a")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	require.Empty(t, ofType(es, session.TypeStepStart))
	require.Equal(t, session.EndError, turnEnds(es)[0].Kind)
	f := <-failed
	require.Equal(t, int64(1), f.Turn)
	require.Contains(t, f.Error.Message, "listener exploded")

	h.followup("b")
	h.waitIdle()
	es = h.events()
	balanced(t, es)
	require.Equal(t, session.EndCompleted, turnEnds(es)[1].Kind)
	require.Len(t, h.mock.Requests(), 1)
}

// Scenario 56.
func TestEnterWithContentRewritesThePromptBeforeItIsRecorded(t *testing.T) {
	hook := preStepFunc(func(_ context.Context, in PreStepInput) (PreStepDecision, error) {
		out := make([]messages.Message, len(in.Messages))
		for i, m := range in.Messages {
			out[i] = m.WithContent([]messages.ContentBlock{messages.TextBlock("REWRITTEN")})
		}
		return PreStepDecision{Messages: out}, nil
	})
	h := newHarness(t, newMock(), nil, withPreStep(hook))
	prompt := h.followup("original")
	h.waitIdle()
	es := h.events()
	um := ofType(es, session.TypeUserMessage)
	require.Len(t, um, 1)
	m, _ := um[0].Message()
	require.Equal(t, prompt.ID(), m.ID())
	require.Equal(t, "REWRITTEN", texts(m))
	req := h.mock.Requests()[0]
	for _, m := range req.Messages() {
		require.NotContains(t, texts(m), "original")
	}
}

// Scenario 57.
func TestRejectClosesTheClaimedPromptTurnWithoutAStep(t *testing.T) {
	hook := preStepFunc(func(context.Context, PreStepInput) (PreStepDecision, error) {
		return PreStepDecision{Reject: true}, nil
	})
	h := newHarness(t, newMock(), nil, withPreStep(hook))
	h.followup("a")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	require.Equal(t, []session.EventType{session.TypeTurnStart, session.TypeTurnEnd}, types(ofType(es, boundaries...)))
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndBlocked}}, turnEnds(es))
	require.Empty(t, ofType(es, session.TypeUserMessage))
	require.Empty(t, h.mock.Requests())
}

// Scenario 58.
func TestStagesInjectAndSteerDuringPreStepForTheEnteredTurn(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	hook := preStepFunc(func(_ context.Context, in PreStepInput) (PreStepDecision, error) {
		if in.Step == 1 {
			close(entered)
			<-release
		}
		return PreStepDecision{Messages: in.Messages}, nil
	})
	h := newHarness(t, newMock(), nil, withPreStep(hook))
	prompt := h.followup("prompt")
	<-entered
	ctxMsg := h.send("inject", "context")
	steer := h.send("steer", "steering")
	close(release)
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	require.Len(t, ofType(es, session.TypeTurnStart), 1)
	require.Equal(t, []messages.MessageID{prompt.ID()}, requestIDs(t, h, 0))
	ids := requestIDs(t, h, 1)
	require.Equal(t, []messages.MessageID{ctxMsg.ID(), steer.ID()}, ids[len(ids)-2:])
}

// Scenario 59.
func TestPreservesLaterQueuedWorkWhenAStepIsRejected(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	hook := preStepFunc(func(_ context.Context, in PreStepInput) (PreStepDecision, error) {
		if calls.Add(1) == 1 {
			close(entered)
			<-release
			return PreStepDecision{Reject: true}, nil
		}
		return PreStepDecision{Messages: in.Messages}, nil
	})
	h := newHarness(t, newMock(), nil, withPreStep(hook))
	h.followup("blocked")
	<-entered
	ctxMsg := h.send("inject", "context")
	later := h.followup("later")
	close(release)
	h.waitIdle()
	es := h.events()
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndBlocked}}, turnEnds(es))
	require.Len(t, ofType(es, session.TypeTurnStart), 1, "the queued work is parked")

	wake := h.followup("wake")
	h.waitIdle()
	es = h.events()
	balanced(t, es)
	require.Equal(t, []messages.MessageID{ctxMsg.ID(), later.ID()}, requestIDs(t, h, 0))
	require.Equal(t, wake.ID(), requestIDs(t, h, 1)[len(requestIDs(t, h, 1))-1])
	require.Len(t, ofType(es, session.TypeTurnStart), 3)
}

// Scenario 63.
func TestCancelFromAnAssistantMessageObserverSkipsExecutionButBalancesReplay(t *testing.T) {
	var ran, fired atomic.Bool
	tool := fakeTool{name: "echo", fn: func(context.Context, Call) (Result, error) {
		ran.Store(true)
		return Result{}, nil
	}}
	cancelOnAnchor := withSessionObserver(func(h *harness, e session.Event) {
		if e.Type() == session.TypeAssistantMessage && fired.CompareAndSwap(false, true) {
			h.sys.Root.Send(h.agentPID.Load(), Cancel{Cause: session.CancelCause{Kind: session.CauseUser}})
		}
	})
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "echo", `{}`}), textResponse("after")), nil,
		withTools(t, tool), cancelOnAnchor)
	h.followup("a")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	require.False(t, ran.Load())
	calls, results := ofType(es, session.TypeToolCall), ofType(es, session.TypeToolResult)
	require.Len(t, calls, 1)
	require.Len(t, results, 1)
	tr := results[0].Payload().(session.ToolResult)
	require.Equal(t, "ABORTED_BEFORE_DISPATCH", tr.Error.Code)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndAborted, Cause: session.CancelCause{Kind: session.CauseUser}}}, turnEnds(es))

	h.followup("b")
	h.waitIdle()
	req := h.mock.Requests()[1]
	var found bool
	for _, m := range req.Messages() {
		if b := m.Block(0); b.Type() == messages.BlockToolResult && b.ToolCallID() == "c1" {
			found = true
			require.True(t, b.IsError())
		}
	}
	require.True(t, found, "the next turn replays the error result")
}

// Scenario 69.
func TestRequestErrorHookRetriesEachFailedRequestInsideTheTurn(t *testing.T) {
	auth := messages.LlmFailure{Message: "denied", Code: "AUTH"}
	var mu sync.Mutex
	var seen []RequestErrorInput
	hook := requestErrorFunc(func(in RequestErrorInput) (RequestErrorDecision, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, in)
		return DecideRetry, nil
	})
	fail := entry{chunks: []messages.StreamChunk{failFinish(auth)}}
	h := newHarness(t, newMock(fail, fail, textResponse("ok")), nil,
		func(_ *harness, c *Config) { c.Hooks.RequestError = hook })
	h.followup("a")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	require.Len(t, ofType(es, session.TypeTurnStart), 1)
	require.Len(t, h.mock.Requests(), 3)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 2)
	for _, in := range seen {
		require.Equal(t, [2]int64{1, 1}, [2]int64{in.Turn, in.Step})
	}
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
}

// Scenario 70.
func TestDoesNotRetryWhenTheRecoveryHookFails(t *testing.T) {
	hook := requestErrorFunc(func(RequestErrorInput) (RequestErrorDecision, error) {
		return DecideDefault, errors.New("recovery failed")
	})
	fail := entry{chunks: []messages.StreamChunk{failFinish(messages.LlmFailure{Message: "busy", Code: "SERVER"})}}
	h := newHarness(t, newMock(fail), nil, func(_ *harness, c *Config) { c.Hooks.RequestError = hook })
	h.followup("a")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	require.Len(t, h.mock.Requests(), 1)
	require.Empty(t, ofType(es, session.TypeLlmRetry))
	require.Equal(t, session.EndError, turnEnds(es)[0].Kind)
}

// Scenario 72.
func TestDisposalDuringARunningTurnEndsItAbortedDisposed(t *testing.T) {
	h := newHarness(t, newMock(entry{hang: true}), nil)
	h.followup("a")
	h.waitStarted()
	queued := h.followup("queued")
	h.refs++
	require.Equal(t, Disposed{Ref: h.refs}, h.ask(Dispose{Ref: h.refs}))
	es := h.events()
	balanced(t, es)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndAborted, Cause: session.CancelCause{Kind: session.CauseDisposed}}}, turnEnds(es))
	require.Len(t, ofType(es, session.TypeTurnStart), 1, "no latched replay after disposal")
	require.Equal(t, int64(-1), userSeq(es, queued.ID()), "the queued prompt stays pending")
	for _, e := range ofType(es, session.TypeInboxSpliced) {
		require.Empty(t, e.Payload().(session.InboxSpliced).Outcome, "disposal keeps the inbox")
	}
	r := h.ask(Followup{Ref: 99, Message: user(t, "late")})
	require.Equal(t, SendFailed{Ref: 99, Err: ErrDisposed}, r)
}

// Scenario 75.
func TestARealSystemPromptChangeIsAFullChangedHeaderSnapshot(t *testing.T) {
	h := newHarness(t, newMock(), nil, func(_ *harness, c *Config) { c.System = "one" })
	h.followup("a")
	h.waitIdle()
	h.followup("b") // stable prompt: no header
	h.waitIdle()
	h.sys.Root.Send(h.agent, SetSystem{Prompt: "two"})
	h.followup("c")
	h.waitIdle()
	h.sys.Root.Send(h.agent, SetSystem{Prompt: "two"})
	h.followup("d")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	hdrs := ofType(es, session.TypeRequestHeader)
	require.Len(t, hdrs, 2)
	first, second := hdrs[0].Payload().(session.RequestHeader), hdrs[1].Payload().(session.RequestHeader)
	require.Equal(t, session.ReasonInitial, first.Reason)
	require.Equal(t, "one", first.Header.System)
	require.Equal(t, session.ReasonChange, second.Reason)
	require.Equal(t, "two", second.Header.System)
	require.True(t, second.Header.Config.Equal(first.Header.Config), "a full snapshot, config included")
	var systems []string
	for _, r := range h.mock.Requests() {
		systems = append(systems, r.System())
	}
	require.Equal(t, []string{"one", "one", "two", "two"}, systems)
}

// Scenario 77.
func TestStopsReplenishingAfterAbortCommitsStartedResultsAndParksContexts(t *testing.T) {
	started := make(chan string, 4)
	var ranLate atomic.Bool
	ctxFor := map[string]messages.Message{"p1": user(t, "ctx 1"), "p2": user(t, "ctx 2")}
	slow := func(name string) fakeTool {
		return fakeTool{name: name, mode: Parallel, fn: func(ctx context.Context, _ Call) (Result, error) {
			if _, ok := ctxFor[name]; !ok {
				ranLate.Store(true)
				return Result{}, nil
			}
			started <- name
			<-ctx.Done()
			return Result{Content: []messages.ContentBlock{messages.TextBlock(name + " real")},
				AdditionalContexts: []messages.Message{ctxFor[name]}}, nil
		}}
	}
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "p1", `{}`}, tc{"c2", "p2", `{}`}, tc{"c3", "p3", `{}`},
		tc{"c4", "p4", `{}`}), textResponse("next")), nil,
		withTools(t, slow("p1"), slow("p2"), slow("p3"), slow("p4")),
		func(_ *harness, c *Config) { c.MaxParallelTools = 2 })
	h.followup("go")
	<-started
	<-started
	h.cancel(session.CauseUser)
	h.waitIdle()
	h.eventually(func(es []session.Event) bool {
		n := 0
		for _, e := range ofType(es, session.TypeInboxSpliced) {
			n += len(e.Payload().(session.InboxSpliced).Inserted())
		}
		return n == 3 // the prompt and the two contexts
	})
	es := h.events()
	balanced(t, es)
	require.False(t, ranLate.Load())
	var codes []string
	for _, e := range ofType(es, session.TypeToolResult) {
		codes = append(codes, e.Payload().(session.ToolResult).Error.Code)
	}
	require.Equal(t, []string{"", "", "ABORTED_BEFORE_DISPATCH", "ABORTED_BEFORE_DISPATCH"}, codes)
	require.Equal(t, []string{"c1", "c2", "c3", "c4"}, resultIDs(es))
	require.Len(t, ofType(es, session.TypeTurnStart), 1, "the contexts are parked")
	require.Equal(t, int64(-1), userSeq(es, ctxFor["p1"].ID()))

	wake := h.followup("wake")
	h.waitIdle()
	ids := requestIDs(t, h, 1)
	require.Equal(t, []messages.MessageID{ctxFor["p1"].ID(), ctxFor["p2"].ID(), wake.ID()}, ids[len(ids)-3:])
}

func TestTodoWriteRecordsTodoWriteBetweenItsCallAndResult(t *testing.T) {
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "todo_write",
		`{"todos":[{"content":"write tests","status":"in_progress"}]}`}), textResponse("noted")), nil,
		withTools(t, TodoWriteTool{}))
	h.followup("plan")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	got := types(ofType(es, session.TypeToolCall, session.TypeTodoWrite, session.TypeToolResult))
	require.Equal(t, []session.EventType{session.TypeToolCall, session.TypeTodoWrite, session.TypeToolResult}, got)
	tw := ofType(es, session.TypeTodoWrite)[0].Payload().(session.TodoWrite)
	require.Equal(t, []session.Todo{{Content: "write tests", Status: "in_progress"}}, tw.Todos())
	require.False(t, ofType(es, session.TypeToolResult)[0].Payload().(session.ToolResult).Message.Block(0).IsError())
}

// The edge rule of docs/agent-loop.md#delivery: a waking send after the abort
// fired goes to next-turn and is latched; it replays once the aborted turn is
// closed, unless the cause is disposal.
func TestAWakeAfterAbortIsForcedToNextTurnAndLatched(t *testing.T) {
	for _, tt := range []struct {
		cause  session.CauseKind
		replay bool
	}{{session.CauseUser, true}, {session.CauseDisposed, false}} {
		t.Run(string(tt.cause), func(t *testing.T) {
			running, release := make(chan struct{}), make(chan struct{})
			stubborn := fakeTool{name: "stubborn", fn: func(context.Context, Call) (Result, error) {
				close(running)
				<-release // ignores the abort until released
				return Result{}, nil
			}}
			h := newHarness(t, newMock(toolCallResponse(tc{"c1", "stubborn", `{}`})), nil, withTools(t, stubborn))
			h.followup("a")
			<-running
			h.sys.Root.Send(h.agent, Cancel{Cause: session.CancelCause{Kind: tt.cause}, KeepInbox: true})
			steer := h.send("steer", "after the abort")
			close(release)
			h.waitIdle()
			es := h.events()
			balanced(t, es)
			spl := ofType(es, session.TypeInboxSpliced)
			var target string
			for _, e := range spl {
				p := e.Payload().(session.InboxSpliced)
				if len(p.Inserted()) == 1 && p.Inserted()[0].ID() == steer.ID() {
					target = p.Target
				}
			}
			require.Equal(t, "next-turn", target)
			if !tt.replay {
				require.Len(t, ofType(es, session.TypeTurnStart), 1)
				require.Equal(t, int64(-1), userSeq(es, steer.ID()))
				return
			}
			require.Len(t, ofType(es, session.TypeTurnStart), 2)
			require.Equal(t, session.EndCompleted, turnEnds(es)[1].Kind)
			require.Greater(t, userSeq(es, steer.ID()), ofType(es, session.TypeTurnStart)[1].Seq())
		})
	}
}

func TestPreStepContributesPluginEventsAndMessagesInPlace(t *testing.T) {
	snapSrc, err := messages.PluginSource("@deepseek-ai/dsh-system-prompt", messages.MustParseJSON(`{"form":"snapshot"}`))
	require.NoError(t, err)
	snap, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("Current runtime context: none.")}, snapSrc)
	require.NoError(t, err)
	title := session.NewDraft("session/title", messages.MustParseJSON(`{"title":"A title"}`))
	invoked := session.NewDraft("hook/invoked", messages.MustParseJSON(`{"turn":1,"point":"UserPromptSubmit","dialect":"x","handlerId":"h"}`))
	hook := preStepFunc(func(_ context.Context, in PreStepInput) (PreStepDecision, error) {
		return PreStepDecision{Messages: in.Messages, Preface: []session.Draft{invoked},
			Entries: []Entry{MessageEntry(snap), EventEntry(title)}}, nil
	})
	h := newHarness(t, newMock(), nil, withPreStep(hook))
	prompt := h.followup("a")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	var got []string
	for _, e := range es {
		s := string(e.Type())
		if m, ok := e.Message(); ok && e.Type() == session.TypeUserMessage {
			s += " " + string(m.ID())
		}
		got = append(got, s)
	}
	i := slices.Index(got, "hook/invoked")
	require.Positive(t, i)
	require.Equal(t, []string{"hook/invoked", "step/start", "user/message " + string(prompt.ID()),
		"user/message " + string(snap.ID()), "session/title"}, got[i:i+5])
	require.Equal(t, []messages.MessageID{prompt.ID(), snap.ID()}, requestIDs(t, h, 0))

	// A core type is refused: the turn ends in error, balanced.
	bad := preStepFunc(func(_ context.Context, in PreStepInput) (PreStepDecision, error) {
		return PreStepDecision{Messages: in.Messages, Entries: []Entry{EventEntry(session.StepEnd{Turn: 1, Step: 1}.Draft())}}, nil
	})
	h2 := newHarness(t, newMock(), nil, withPreStep(bad))
	h2.followup("a")
	h2.waitIdle()
	es = h2.events()
	balanced(t, es)
	require.Equal(t, session.EndError, turnEnds(es)[0].Kind)
	require.Empty(t, ofType(es, session.TypeStepStart))
}
