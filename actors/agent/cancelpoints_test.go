package agent

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// The systematic test of docs/agent-loop.md#cancellation: one turn that goes
// through every phase (pre-step hook, a failed attempt with chunks and its
// retry, a streamed response with reasoning, text and two tool calls — a
// parallel one that blocks until released or cancelled, then an exclusive one
// —, a second step, the turn-stopping hook), cancelled as soon as the log
// reaches k events, for every k.

// cancelPointScript is the model script of the turn.
func cancelPointScript() []entry {
	failed := entry{chunks: []messages.StreamChunk{
		messages.BlockStartChunk(0, messages.BlockText),
		messages.TextDeltaChunk(0, "par"),
		messages.TextDeltaChunk(0, "tial"),
		failFinish(messages.LlmFailure{Message: "overloaded", Code: "SERVER"}),
	}}
	calls := []messages.StreamChunk{
		messages.BlockStartChunk(0, messages.BlockReasoning),
		messages.ReasoningDeltaChunk(0, "think"),
		messages.ReasoningDeltaChunk(0, "ing"),
		messages.BlockEndChunk(0, messages.ReasoningBlock("thinking")),
		messages.BlockStartChunk(1, messages.BlockText),
		messages.TextDeltaChunk(1, "let me "),
		messages.TextDeltaChunk(1, "look"),
		messages.BlockEndChunk(1, messages.TextBlock("let me look")),
	}
	tools := toolCallResponse(tc{"c-wait", "wait", `{"a":1}`}, tc{"c-echo", "echo", `{"b":2}`})
	for _, c := range tools.chunks {
		calls = append(calls, shiftIndex(c, 2))
	}
	return []entry{failed, {chunks: calls}, textResponse("done")}
}

// shiftIndex moves a block chunk's index by n.
func shiftIndex(c messages.StreamChunk, n int) messages.StreamChunk {
	switch c.Type() {
	case messages.ChunkBlockStart:
		return messages.BlockStartChunk(c.Index()+n, c.BlockType())
	case messages.ChunkToolCallDelta:
		if name, ok := c.Name(); ok {
			return messages.NamedToolCallDeltaChunk(c.Index()+n, c.CallID(), name, c.ArgumentsDelta())
		}
		return messages.ToolCallDeltaChunk(c.Index()+n, c.CallID(), c.ArgumentsDelta())
	case messages.ChunkBlockEnd:
		return messages.BlockEndChunk(c.Index()+n, c.Block())
	}
	return c
}

// cancelPointRun is one run of the turn, cancelled at event k (never when
// k < 0) by Cancel{cause} or, for CauseDisposed, by Dispose.
type cancelPointRun struct {
	h       *harness
	release chan struct{}
	once    sync.Once
	waitRan atomic.Int32
}

func (r *cancelPointRun) open() { r.once.Do(func() { close(r.release) }) }

func newCancelPointRun(t *testing.T, k int64, cause session.CauseKind) *cancelPointRun {
	r := &cancelPointRun{release: make(chan struct{})}
	wait := fakeTool{name: "wait", mode: Parallel, fn: func(ctx context.Context, _ Call) (Result, error) {
		r.waitRan.Add(1)
		select {
		case <-r.release:
			return Result{Content: []messages.ContentBlock{messages.TextBlock("released")}}, nil
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
	}}
	echo := fakeTool{name: "echo", mode: Exclusive}
	var fired atomic.Bool
	trigger := withSessionObserver(func(h *harness, e session.Event) {
		if k >= 0 && e.Seq() == k && fired.CompareAndSwap(false, true) {
			if cause == session.CauseDisposed {
				h.sys.Root.Send(h.agentPID.Load(), Dispose{Ref: 1 << 40})
			} else {
				h.sys.Root.Send(h.agentPID.Load(), Cancel{Cause: session.CancelCause{Kind: cause}})
			}
		}
		// Past the cancel point, the blocking tool is released as soon as
		// it is called (it cannot be the cancel's target any more).
		if p, ok := e.Payload().(session.ToolCall); ok && p.Name == "wait" && (k < 0 || e.Seq() < k) {
			r.open()
		}
	})
	pre := withPreStep(preStepFunc(func(_ context.Context, in PreStepInput) (PreStepDecision, error) {
		return PreStepDecision{Messages: in.Messages}, nil
	}))
	stopping := func(_ *harness, c *Config) {
		c.Hooks.TurnStopping = turnStoppingFunc(func(context.Context, TurnStoppingInput) error { return nil })
		c.Hooks.RequestError = requestErrorFunc(func(RequestErrorInput) (RequestErrorDecision, error) {
			return DecideRetry, nil
		})
	}
	r.h = newHarness(t, newMock(cancelPointScript()...), nil, withTools(t, wait, echo), trigger, pre, stopping)
	t.Cleanup(r.open)
	return r
}

// failedAttemptChunks returns the seqs of the chunks of failed attempts:
// an attempt whose chunks include an error finish, or that is followed by
// llm/retry before its step ends.
func failedAttemptChunks(es []session.Event) map[int64]bool {
	failed := map[int64]bool{}
	var cur []int64
	bad := false
	flush := func(f bool) {
		if f || bad {
			for _, s := range cur {
				failed[s] = true
			}
		}
		cur, bad = nil, false
	}
	for _, e := range es {
		switch p := e.Payload().(type) {
		case session.AssistantChunk:
			cur = append(cur, e.Seq())
			if p.Chunk.Type() == messages.ChunkFinish {
				if k := p.Chunk.Reason().Kind; k == messages.FinishError || k == messages.FinishAborted {
					bad = true
				}
			}
		case session.AssistantMessage, session.StepEnd:
			flush(false)
		default:
			if e.Type() == session.TypeLlmRetry {
				flush(true)
			}
		}
	}
	flush(false)
	return failed
}

// checkCancelledLog checks the cancellation guarantees of a log.
func checkCancelledLog(t *testing.T, es []session.Event) {
	t.Helper()
	require.Empty(t, session.InterruptedTurnClosers(es), "the log is balanced")
	require.NoError(t, session.CheckTrace(es))
	results := map[string]bool{}
	for _, e := range ofType(es, session.TypeToolResult) {
		m := e.Payload().(session.ToolResult).Message
		results[m.Block(0).ToolCallID()] = true
	}
	for _, e := range ofType(es, session.TypeToolCall) {
		id := e.Payload().(session.ToolCall).CallID
		require.True(t, results[id], "tool/call %s (seq %d) has its tool/result", id, e.Seq())
	}
	failed := failedAttemptChunks(es)
	for _, e := range ofType(es, session.TypeAssistantMessage) {
		src, _ := e.SourceEventSeqs()
		for _, s := range src {
			require.False(t, failed[s], "assistant/message %d cites chunk %d of a failed attempt", e.Seq(), s)
		}
	}
}

func TestCancellationAtEveryPointLeavesABalancedLogAndTheNextTurnRuns(t *testing.T) {
	// The uncancelled run gives the number of events and where turn 1 ends.
	base := newCancelPointRun(t, -1, session.CauseUser)
	base.h.followup("go")
	base.h.waitIdle()
	es := base.h.events()
	checkCancelledLog(t, es)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
	require.Len(t, ofType(es, session.TypeStepStart), 2)
	require.Len(t, ofType(es, session.TypeLlmRetry), 1)
	require.Len(t, ofType(es, session.TypeToolResult), 2)
	end := ofType(es, session.TypeTurnEnd)[0].Seq()
	n := int64(len(es))

	for _, cause := range []session.CauseKind{session.CauseUser, session.CauseDisposed} {
		for k := int64(1); k < n; k++ {
			t.Run(fmt.Sprintf("%s/%d-%s", cause, k, es[k].Type()), func(t *testing.T) {
				r := newCancelPointRun(t, k, cause)
				h := r.h
				h.followup("go")
				h.waitIdle()
				got := h.events()
				checkCancelledLog(t, got)
				ends := turnEnds(got)
				require.Len(t, ends, 1)
				want := session.TurnEndReason{Kind: session.EndCompleted}
				if k < end {
					want = session.TurnEndReason{Kind: session.EndAborted, Cause: session.CancelCause{Kind: cause}}
				}
				require.Equal(t, want, ends[0])
				require.Equal(t, types(es[:k+1]), types(got[:k+1]), "the prefix up to the cancel point is the uncancelled run's")

				// The next turn runs to completion (a fresh agent over the
				// same session after a disposal).
				r.open()
				h.mock.mu.Lock()
				h.mock.script = nil
				h.mock.mu.Unlock()
				if cause == session.CauseDisposed {
					old := h.agent
					require.NoError(t, h.sys.Root.PoisonFuture(old).Wait())
					ap, err := Props(h.cfg)
					require.NoError(t, err)
					h.agent = h.sys.Root.Spawn(ap)
					h.agentPID.Store(h.agent)
				}
				h.followup("next")
				h.waitIdle()
				got = h.events()
				checkCancelledLog(t, got)
				ends = turnEnds(got)
				require.Greater(t, len(ends), 1)
				require.Equal(t, session.EndCompleted, ends[len(ends)-1].Kind)
				last := ofType(got, session.TypeAssistantMessage)
				require.Equal(t, "ok", texts(last[len(last)-1].Payload().(session.AssistantMessage).Message))
			})
		}
	}
}
