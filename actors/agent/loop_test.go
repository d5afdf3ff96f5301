package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

var boundaries = []session.EventType{session.TypeTurnStart, session.TypeStepStart, session.TypeStepEnd, session.TypeTurnEnd}

// Scenario 42.
func TestRunsASimpleTurn(t *testing.T) {
	h := newHarness(t, newMock(textResponse("hello")), nil)
	h.followup("hi")
	h.waitIdle()
	es := h.events()
	require.Equal(t, boundaries, types(ofType(es, boundaries...)))
	require.Equal(t, session.TypeInboxSpliced, es[0].Type())
	hist := derive(es)
	require.Len(t, hist, 2)
	require.Equal(t, messages.RoleUser, hist[0].Role())
	require.Equal(t, messages.RoleAssistant, hist[1].Role())
	am := ofType(es, session.TypeAssistantMessage)[0].Payload().(session.AssistantMessage)
	require.True(t, am.HasUsage)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
}

// Scenario 43.
func TestRecordsRawChunksForReplay(t *testing.T) {
	h := newHarness(t, newMock(textResponse("abc")), nil)
	h.followup("hi")
	h.waitIdle()
	chunks := ofType(h.events(), session.TypeAssistantChunk)
	require.Len(t, chunks, 7)
	var joined string
	for _, e := range chunks {
		c := e.Payload().(session.AssistantChunk).Chunk
		if c.Type() == messages.ChunkTextDelta {
			joined += c.Text()
		}
	}
	require.Equal(t, "abc", joined)
}

// Scenario 44.
func TestRoundTripsToolCalls(t *testing.T) {
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "echo", `{"x":1}`}), textResponse("done")), nil,
		withTools(t, fakeTool{name: "echo"}))
	h.followup("use the tool")
	h.waitIdle()
	reqs := h.mock.Requests()
	require.Len(t, reqs, 2)
	last := reqs[1].Message(reqs[1].NumMessages() - 1)
	b := last.Block(0)
	require.Equal(t, messages.BlockToolResult, b.Type())
	require.Equal(t, "c1", b.ToolCallID())
	require.False(t, b.IsError())
	es := h.events()
	call := ofType(es, session.TypeToolCall)[0]
	res := ofType(es, session.TypeToolResult)[0]
	src, _ := res.SourceEventSeqs()
	require.Equal(t, []int64{call.Seq()}, src)
}

// Scenario 45.
func TestInjectsSteeringBetweenSteps(t *testing.T) {
	release := make(chan struct{})
	tool := fakeTool{name: "wait", fn: func(ctx context.Context, _ Call) (Result, error) {
		<-release
		return Result{Content: []messages.ContentBlock{messages.TextBlock("waited")}}, nil
	}}
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "wait", `{}`}), textResponse("done")), nil, withTools(t, tool))
	h.followup("go")
	h.waitStarted()
	steer := h.send("steer", "steering")
	close(release)
	h.waitIdle()
	es := h.events()
	steps := ofType(es, session.TypeStepStart)
	require.Len(t, steps, 2)
	var steerSeq int64 = -1
	for _, e := range ofType(es, session.TypeUserMessage) {
		if m, _ := e.Message(); m.ID() == steer.ID() {
			steerSeq = e.Seq()
		}
	}
	require.Greater(t, steerSeq, steps[1].Seq())
	req := h.mock.Requests()[1]
	require.Equal(t, steer.ID(), req.Message(req.NumMessages()-1).ID())
	require.Len(t, ofType(es, session.TypeTurnStart), 1)
}

// Scenario 46.
func TestStartsIdleSteeringAndEntersLaterSteeringAtTheNextStep(t *testing.T) {
	release := make(chan struct{})
	tool := fakeTool{name: "wait", fn: func(ctx context.Context, _ Call) (Result, error) {
		<-release
		return Result{}, nil
	}}
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "wait", `{}`}), textResponse("done")), nil, withTools(t, tool))
	h.send("steer", "first")
	require.Len(t, ofType(h.events(), session.TypeTurnStart), 1)
	h.waitStarted()
	h.send("steer", "second")
	close(release)
	h.waitIdle()
	es := h.events()
	require.Len(t, ofType(es, session.TypeTurnStart), 1)
	require.Len(t, h.mock.Requests(), 2)
}

// Scenario 47.
func TestInjectWhileIdleStagesContextWithoutATurn(t *testing.T) {
	h := newHarness(t, newMock(), nil)
	ctxMsg := h.send("inject", "context")
	h.waitIdle()
	es := h.events()
	last := es[len(es)-1]
	require.Equal(t, session.TypeInboxSpliced, last.Type())
	require.Equal(t, "next-step", last.Payload().(session.InboxSpliced).Target)
	require.Empty(t, ofType(es, session.TypeTurnStart))
	prompt := h.followup("now")
	h.waitIdle()
	es = h.events()
	require.Len(t, ofType(es, session.TypeTurnStart), 1)
	users := ofType(es, session.TypeUserMessage)
	require.Len(t, users, 2)
	m0, _ := users[0].Message()
	m1, _ := users[1].Message()
	require.Equal(t, []messages.MessageID{ctxMsg.ID(), prompt.ID()}, []messages.MessageID{m0.ID(), m1.ID()})
}

// Scenario 53.
func TestSurfacesMaxTokensStickyForTheTurn(t *testing.T) {
	maxed := textResponse("trunc")
	maxed.chunks[len(maxed.chunks)-1] = finishChunk(messages.FinishMaxTokens)
	h := newHarness(t, newMock(maxed), nil)
	h.followup("a")
	h.waitIdle()
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndMaxTokens}}, turnEnds(h.events()))

	// A max-tokens step followed by a completed step (steering forced it).
	release, entered := make(chan struct{}), make(chan struct{})
	h2 := newHarness(t, newMock(textResponseFinish("x", messages.FinishMaxTokens), textResponse("y")), nil,
		withPreStep(preStepFunc(func(ctx context.Context, in PreStepInput) (PreStepDecision, error) {
			if in.Step == 1 {
				close(entered)
				<-release
			}
			return PreStepDecision{Messages: in.Messages}, nil
		})))
	h2.followup("a")
	<-entered
	h2.send("steer", "more")
	close(release)
	h2.waitIdle()
	es := h2.events()
	require.Len(t, ofType(es, session.TypeStepStart), 2)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndMaxTokens}}, turnEnds(es))
}

func textResponseFinish(s string, k messages.FinishKind) entry {
	e := textResponse(s)
	e.chunks[len(e.chunks)-1] = finishChunk(k)
	return e
}

// Scenario 54.
func TestDoesNotDispatchToolCallsFromAMaxTokensStep(t *testing.T) {
	e := toolCallResponse(tc{"c1", "echo", `{"a":1}`})
	e.chunks[len(e.chunks)-1] = finishChunk(messages.FinishMaxTokens)
	ran := false
	h := newHarness(t, newMock(e), nil, withTools(t, fakeTool{name: "echo", fn: func(context.Context, Call) (Result, error) {
		ran = true
		return Result{}, nil
	}}))
	h.followup("a")
	h.waitIdle()
	es := h.events()
	require.False(t, ran)
	require.Empty(t, ofType(es, session.TypeToolCall))
	am := ofType(es, session.TypeAssistantMessage)[0].Payload().(session.AssistantMessage)
	require.Equal(t, 0, am.Message.NumBlocks())
	require.True(t, am.HasUsage)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndMaxTokens}}, turnEnds(es))
}

// Scenario 55.
func TestAppendsAnEmptyCompletionAnchorForANormalStop(t *testing.T) {
	h := newHarness(t, newMock(entry{chunks: []messages.StreamChunk{finishChunk(messages.FinishStop)}}), nil)
	h.followup("a")
	h.waitIdle()
	es := h.events()
	anchor := ofType(es, session.TypeAssistantMessage)[0]
	am := anchor.Payload().(session.AssistantMessage)
	require.Equal(t, 0, am.Message.NumBlocks())
	require.False(t, am.HasUsage)
	src, ok := anchor.SourceEventSeqs()
	require.True(t, ok)
	require.Len(t, src, 1)
	hist := derive(es)
	require.Len(t, hist, 1)
	require.Equal(t, messages.RoleUser, hist[0].Role())
}

// Scenario 71.
func TestTranslatesFinishErrorIntoATurnError(t *testing.T) {
	f := messages.LlmFailure{Message: "bad key", Code: "AUTH", Status: 401, ProviderRetryAfterMs: 5, RequestID: "r-1"}
	h := newHarness(t, newMock(entry{chunks: []messages.StreamChunk{failFinish(f)}}), nil)
	h.followup("a")
	h.waitIdle()
	es := h.events()
	require.Empty(t, ofType(es, session.TypeAssistantMessage))
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndError, Error: f}}, turnEnds(es))

	ab := messages.LlmFailure{Message: "provider aborted", Code: "ABORTED"}
	h2 := newHarness(t, newMock(entry{chunks: []messages.StreamChunk{messages.FinishChunk(
		messages.FinishReason{Kind: messages.FinishAborted, Failure: ab}, messages.JSON{})}}), nil)
	h2.followup("a")
	h2.waitIdle()
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndError, Error: ab}}, turnEnds(h2.events()))
}

// Scenario 73: besides the live check every test makes at dispatch, the
// final log reproduces each request from the prefix before its first
// chunk.
func TestEveryRequestRebuildsFromTheLogAlone(t *testing.T) {
	h := newHarness(t, newMock(toolCallResponse(tc{"c1", "echo", `{}`}), textResponse("one"), textResponse("two")), nil,
		withTools(t, fakeTool{name: "echo"}))
	h.followup("first")
	h.waitIdle()
	h.followup("second")
	h.waitIdle()
	es := h.events()
	reqs := h.mock.Requests()
	var firsts []int64
	prev := int64(-2)
	for _, e := range ofType(es, session.TypeAssistantChunk) {
		if e.Seq() != prev+1 {
			firsts = append(firsts, e.Seq())
		}
		prev = e.Seq()
	}
	require.Len(t, firsts, len(reqs))
	for i, req := range reqs {
		prefix := es[:firsts[i]]
		l, err := session.Restore(testHeader(), prefix)
		require.NoError(t, err)
		want := l.DeriveMessages().Slice()
		require.Equal(t, len(want), req.NumMessages())
		for j, m := range want {
			require.True(t, m.Equal(req.Message(j)))
		}
		hdr, ok := l.RequestHeader()
		require.True(t, ok)
		require.True(t, hdr.Config.Equal(req.Config()))
	}
}

// Scenarios 74 and 79: a fresh loop over a seeded log logs a resume
// header, and numbering continues.
func TestAFreshLoopOverASeededLogAnchorsWithAResumeSnapshot(t *testing.T) {
	h := newHarness(t, newMock(textResponse("one")), nil)
	h.followup("first")
	h.waitIdle()
	old := h.events()
	firstReq := h.mock.Requests()[0]

	l, err := session.NewSeeded(testHeader(), old, 1)
	require.NoError(t, err)
	require.Equal(t, int64(len(old)), l.FirstLiveSeq())
	h2 := newHarness(t, newMock(textResponse("two")), l)
	h2.followup("second")
	h2.waitIdle()
	es := h2.events()
	require.Equal(t, session.TypeEndSeed, es[len(old)].Type())
	for i, e := range es {
		require.Equal(t, int64(i), e.Seq())
	}
	hdrs := ofType(es, session.TypeRequestHeader)
	require.Len(t, hdrs, 2)
	require.Equal(t, session.ReasonInitial, hdrs[0].Payload().(session.RequestHeader).Reason)
	require.Equal(t, session.ReasonResume, hdrs[1].Payload().(session.RequestHeader).Reason)
	starts := ofType(es, session.TypeTurnStart)
	require.Equal(t, int64(2), starts[len(starts)-1].Payload().(session.TurnStart).Turn)
	second := h2.mock.Requests()[0]
	require.Greater(t, second.NumMessages(), firstReq.NumMessages())
	for i := range firstReq.NumMessages() {
		require.True(t, firstReq.Message(i).Equal(second.Message(i)))
	}
}

// Scenario 76.
func TestCommitsToolResultsInModelOrder(t *testing.T) {
	t.Run("a later call settles first", func(t *testing.T) {
		c2done := make(chan struct{})
		slow := fakeTool{name: "slow", mode: Parallel, fn: func(ctx context.Context, _ Call) (Result, error) {
			<-c2done
			return Result{Content: []messages.ContentBlock{messages.TextBlock("slow")}}, nil
		}}
		fast := fakeTool{name: "fast", mode: Parallel, fn: func(context.Context, Call) (Result, error) {
			defer close(c2done)
			return Result{Content: []messages.ContentBlock{messages.TextBlock("fast")}}, nil
		}}
		h := newHarness(t, newMock(toolCallResponse(tc{"c1", "slow", `{}`}, tc{"c2", "fast", `{}`})), nil,
			withTools(t, slow, fast))
		h.followup("go")
		h.waitIdle()
		require.Equal(t, []string{"c1", "c2"}, resultIDs(h.events()))
	})
	t.Run("an exclusive call is a barrier", func(t *testing.T) {
		var mu chanLog
		par := func(name string) fakeTool {
			return fakeTool{name: name, mode: Parallel, fn: func(context.Context, Call) (Result, error) {
				mu.add("start " + name)
				mu.add("end " + name)
				return Result{}, nil
			}}
		}
		ex := fakeTool{name: "ex", mode: Exclusive, fn: func(context.Context, Call) (Result, error) {
			mu.add("start ex")
			mu.add("end ex")
			return Result{}, nil
		}}
		h := newHarness(t, newMock(toolCallResponse(tc{"c1", "p1", `{}`}, tc{"c2", "ex", `{}`}, tc{"c3", "p2", `{}`})), nil,
			withTools(t, par("p1"), ex, par("p2")))
		h.followup("go")
		h.waitIdle()
		require.Equal(t, []string{"start p1", "end p1", "start ex", "end ex", "start p2", "end p2"}, mu.get())
		require.Equal(t, []string{"c1", "c2", "c3"}, resultIDs(h.events()))
	})
	t.Run("maxParallelToolCalls 1 is serial", func(t *testing.T) {
		var mu chanLog
		par := func(name string) fakeTool {
			return fakeTool{name: name, mode: Parallel, fn: func(context.Context, Call) (Result, error) {
				mu.add("start " + name)
				mu.add("end " + name)
				return Result{}, nil
			}}
		}
		h := newHarness(t, newMock(toolCallResponse(tc{"c1", "a", `{}`}, tc{"c2", "b", `{}`}, tc{"c3", "c", `{}`})), nil,
			withTools(t, par("a"), par("b"), par("c")), func(_ *harness, c *Config) { c.MaxParallelTools = 1 })
		h.followup("go")
		h.waitIdle()
		require.Equal(t, []string{"start a", "end a", "start b", "end b", "start c", "end c"}, mu.get())
	})
}

func resultIDs(es []session.Event) []string {
	var out []string
	for _, e := range ofType(es, session.TypeToolResult) {
		out = append(out, e.Payload().(session.ToolResult).Message.Block(0).ToolCallID())
	}
	return out
}

// chanLog is a concurrency-safe list of strings.
type chanLog struct {
	ch chan string
	l  []string
}

func (c *chanLog) add(s string) {
	if c.ch == nil {
		c.ch = make(chan string, 64)
	}
	c.ch <- s
}

func (c *chanLog) get() []string {
	for {
		select {
		case s := <-c.ch:
			c.l = append(c.l, s)
		default:
			return c.l
		}
	}
}

// Scenario 78.
func TestABurstGivesEveryMessageItsOwnTurn(t *testing.T) {
	const n = 5
	obs := &observer{ch: make(chan Status, 64)}
	// The first turn's model call waits for the whole burst: otherwise a
	// loaded machine may finish it before the next followup is queued,
	// and the agent goes idle in between.
	gate := make(chan struct{})
	h := newHarness(t, newMock(entry{chunks: textResponse("ok").chunks, gate: gate}), nil, withObserver(t, obs))
	for i := range n {
		h.followup(strings.Repeat("x", i+1))
	}
	close(gate)
	h.waitIdle()
	es := h.events()
	starts := ofType(es, session.TypeTurnStart)
	require.Len(t, starts, n)
	for i, e := range starts {
		require.Equal(t, int64(i+1), e.Payload().(session.TurnStart).Turn)
	}
	require.Len(t, ofType(es, session.TypeUserMessage), n)
	require.Equal(t, []Status{StatusRunning, StatusIdle}, obs.statuses(2))
}

// Scenario 60.
func TestCancelOnAnIdleAgentIsANoOp(t *testing.T) {
	h := newHarness(t, newMock(), nil)
	h.cancel(session.CauseUser)
	h.waitIdle()
	require.Empty(t, h.events())
	h.followup("a")
	h.waitIdle()
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(h.events()))
}

// Scenario 61 (the abort lands in the pre-step of the opened turn).
func TestCancelAfterWakingSendClosesTheTurnWithoutAStep(t *testing.T) {
	entered := make(chan struct{})
	h := newHarness(t, newMock(), nil, withPreStep(preStepFunc(func(ctx context.Context, in PreStepInput) (PreStepDecision, error) {
		close(entered)
		<-ctx.Done()
		return PreStepDecision{Messages: in.Messages}, nil
	})))
	h.followup("a")
	<-entered
	h.cancel(session.CauseUser)
	h.waitIdle()
	es := h.events()
	require.Len(t, ofType(es, session.TypeTurnStart), 1)
	require.Empty(t, ofType(es, session.TypeStepStart))
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndAborted, Cause: session.CancelCause{Kind: session.CauseUser}}}, turnEnds(es))
}

// Scenario 62.
func TestCancelMidStepAbortsAndDropsQueuedWork(t *testing.T) {
	h := newHarness(t, newMock(entry{hang: true}), nil)
	h.followup("a")
	h.waitStarted()
	h.followup("queued")
	h.cancel(session.CauseUser)
	h.waitIdle()
	es := h.events()
	require.Len(t, ofType(es, session.TypeTurnStart), 1)
	require.Len(t, h.mock.Requests(), 1)
	require.Equal(t, session.EndAborted, turnEnds(es)[0].Kind)
}

// Scenario 64.
func TestCancelMidStreamFinalizesTheStreamedPrefix(t *testing.T) {
	prefix := []messages.StreamChunk{messages.BlockStartChunk(0, messages.BlockText)}
	for _, r := range "partial" {
		prefix = append(prefix, messages.TextDeltaChunk(0, string(r)))
	}
	h := newHarness(t, newMock(entry{chunks: prefix, hang: true}, textResponse("next")), nil)
	h.followup("a")
	h.waitStarted()
	h.eventually(func(es []session.Event) bool { return len(ofType(es, session.TypeAssistantChunk)) == len(prefix) })
	h.cancel(session.CauseUser)
	h.waitIdle()
	es := h.events()
	anchor := ofType(es, session.TypeAssistantMessage)[0]
	am := anchor.Payload().(session.AssistantMessage)
	require.True(t, am.Interrupted)
	require.Equal(t, "partial", texts(am.Message))
	var chunkSeqs []int64
	for _, e := range ofType(es, session.TypeAssistantChunk) {
		chunkSeqs = append(chunkSeqs, e.Seq())
	}
	src, _ := anchor.SourceEventSeqs()
	require.Equal(t, chunkSeqs, src)
	tail := types(es[anchor.Seq():])
	require.Equal(t, []session.EventType{session.TypeAssistantMessage, session.TypeStepEnd, session.TypeTurnEnd}, tail)

	h.followup("again")
	h.waitIdle()
	req := h.mock.Requests()[1]
	require.Equal(t, "partial", texts(req.Message(1)))
}

// Scenario 65.
func TestCancelDropsAHalfStreamedToolCallAndKeepsText(t *testing.T) {
	t.Run("keeps the text", func(t *testing.T) {
		cs := []messages.StreamChunk{messages.BlockStartChunk(0, messages.BlockText), messages.TextDeltaChunk(0, "kept"),
			messages.BlockEndChunk(0, messages.TextBlock("kept")), messages.BlockStartChunk(1, messages.BlockToolCall),
			messages.NamedToolCallDeltaChunk(1, "c1", "echo", `{"a"`)}
		h := newHarness(t, newMock(entry{chunks: cs, hang: true}), nil, withTools(t, fakeTool{name: "echo"}))
		h.followup("a")
		h.waitStarted()
		h.eventually(func(es []session.Event) bool { return len(ofType(es, session.TypeAssistantChunk)) == len(cs) })
		h.cancel(session.CauseUser)
		h.waitIdle()
		es := h.events()
		am := ofType(es, session.TypeAssistantMessage)[0].Payload().(session.AssistantMessage)
		require.Equal(t, 1, am.Message.NumBlocks())
		require.Equal(t, "kept", texts(am.Message))
		require.Empty(t, ofType(es, session.TypeToolCall))
	})
	t.Run("nothing visible finalizes nothing", func(t *testing.T) {
		cs := []messages.StreamChunk{messages.BlockStartChunk(0, messages.BlockText), messages.TextDeltaChunk(0, "  ")}
		h := newHarness(t, newMock(entry{chunks: cs, hang: true}), nil)
		h.followup("a")
		h.waitStarted()
		h.eventually(func(es []session.Event) bool { return len(ofType(es, session.TypeAssistantChunk)) == len(cs) })
		h.cancel(session.CauseUser)
		h.waitIdle()
		require.Empty(t, ofType(h.events(), session.TypeAssistantMessage))
	})
}

// Scenario 66.
func TestRetryDiscardsTheFailedAttempt(t *testing.T) {
	doomed := entry{chunks: []messages.StreamChunk{messages.BlockStartChunk(0, messages.BlockText),
		messages.TextDeltaChunk(0, "doomed"), failFinish(messages.LlmFailure{Message: "overloaded", Code: "SERVER"})}}
	h := newHarness(t, newMock(doomed, textResponse("fine")), nil)
	h.followup("a")
	h.waitIdle()
	es := h.events()
	anchors := ofType(es, session.TypeAssistantMessage)
	require.Len(t, anchors, 1)
	src, _ := anchors[0].SourceEventSeqs()
	chunks := ofType(es, session.TypeAssistantChunk)
	for _, c := range chunks[:3] {
		require.NotContains(t, src, c.Seq())
	}
	require.Len(t, src, len(chunks)-3)
	require.Len(t, ofType(es, session.TypeTurnStart), 1)
	require.Len(t, ofType(es, session.TypeStepStart), 1)
	require.Len(t, ofType(es, session.TypeLlmRetry), 1)
	require.Len(t, ofType(es, session.TypeLlmRetryStarted), 1)
	require.Less(t, ofType(es, session.TypeLlmRetry)[0].Seq(), ofType(es, session.TypeLlmRetryStarted)[0].Seq())
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
}

// Scenario 67.
func TestCancelDuringErrorRecoveryDoesNotFinalize(t *testing.T) {
	doomed := entry{chunks: []messages.StreamChunk{messages.BlockStartChunk(0, messages.BlockText),
		messages.TextDeltaChunk(0, "doomed"), failFinish(messages.LlmFailure{Message: "overloaded", Code: "SERVER"})}}
	h := newHarness(t, newMock(doomed), nil, func(_ *harness, c *Config) { c.Retry.InitialDelay, c.Retry.MaxDelay = 1e12, 1e12 })
	h.followup("a")
	h.eventually(func(es []session.Event) bool { return len(ofType(es, session.TypeLlmRetry)) == 1 })
	h.cancel(session.CauseUser)
	h.waitIdle()
	es := h.events()
	require.Empty(t, ofType(es, session.TypeAssistantMessage))
	require.Empty(t, ofType(es, session.TypeLlmRetryStarted))
	require.Equal(t, session.EndAborted, turnEnds(es)[0].Kind)
}

// Scenario 68.
func TestKeepsTheFirstTypedCause(t *testing.T) {
	h := newHarness(t, newMock(entry{hang: true}), nil)
	h.followup("a")
	h.waitStarted()
	h.sys.Root.Send(h.agent, Cancel{Cause: session.CancelCause{Kind: session.CauseParent}, KeepInbox: true})
	h.cancel(session.CauseUser)
	h.waitIdle()
	require.Equal(t, session.CancelCause{Kind: session.CauseParent}, turnEnds(h.events())[0].Cause)
}
