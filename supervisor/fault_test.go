package supervisor

import (
	"context"
	"errors"
	"iter"
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// lastTurnEnd returns the reason of the log's last turn/end.
func lastTurnEnd(t *testing.T, all []session.Event) session.TurnEndReason {
	t.Helper()
	for i := len(all) - 1; i >= 0; i-- {
		if p, ok := all[i].Payload().(session.TurnEnd); ok {
			return p.Reason
		}
	}
	t.Fatal("no turn/end")
	return session.TurnEndReason{}
}

// requireHealthy checks that the session's log is valid and balanced
// after WaitIdle, that it holds at least turnsBefore turns, and that it
// answers the next followup with a completed turn.
func requireHealthy(t *testing.T, h *Host, id session.SessionID, turnsBefore int64) {
	t.Helper()
	ctx := testCtx(t)
	require.NoError(t, h.WaitIdle(ctx, id))
	evs, err := h.Events(ctx, id, 0)
	require.NoError(t, err)
	all := evs.Slice()
	require.NoError(t, session.CheckTrace(all))
	require.Empty(t, session.InterruptedTurnClosers(all), "open turn after WaitIdle")
	var turns int64
	for _, ev := range all {
		if ev.Type() == session.TypeTurnEnd {
			turns++
		}
	}
	require.GreaterOrEqual(t, turns, turnsBefore)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "are you there?")))
	require.NoError(t, h.WaitIdle(ctx, id))
	evs, err = h.Events(ctx, id, 0)
	require.NoError(t, err)
	all = evs.Slice()
	require.NoError(t, session.CheckTrace(all))
	require.Equal(t, session.TypeTurnEnd, all[len(all)-1].Type())
	require.Equal(t, session.EndCompleted, lastTurnEnd(t, all).Kind)
}

// panicTool panics in its body the first time it runs.
type panicTool struct{ calls atomic.Int64 }

func (*panicTool) Name() string { return "boom" }
func (*panicTool) Schema() messages.ToolSchema {
	return messages.ToolSchema{Name: "boom", Description: "panics", Parameters: messages.MustParseJSON(`{"type":"object"}`)}
}
func (*panicTool) Mode(messages.JSON) agent.Mode { return agent.Parallel }
func (p *panicTool) Execute(context.Context, agent.Call) (agent.Result, error) {
	if p.calls.Add(1) == 1 {
		panic("tool body exploded")
	}
	return agent.Result{Content: []messages.ContentBlock{messages.TextBlock("ok")}}, nil
}

func TestFaultToolPanic(t *testing.T) {
	ctx := testCtx(t)
	p, err := synthetic.New(synthetic.Config{Seed: 3, TextChunks: 5, ToolCallRate: 1, ToolName: "boom"})
	require.NoError(t, err)
	tool := &panicTool{}
	reg, err := agent.NewRegistry(tool)
	require.NoError(t, err)
	h := openHost(t, Config{Dir: t.TempDir(), Provider: p, Tools: reg})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "use the tool")))
	require.NoError(t, h.WaitIdle(ctx, id))
	evs, err := h.Events(ctx, id, 0)
	require.NoError(t, err)
	// The panic is the call's error result (TOOL_PANIC); the turn goes on.
	var sawPanic bool
	for ev := range evs.All() {
		if p, ok := ev.Payload().(session.ToolResult); ok && p.Error.Code == "TOOL_PANIC" {
			sawPanic = true
		}
	}
	require.True(t, sawPanic)
	requireHealthy(t, h, id, 1)
}

// panicProvider panics inside Stream (in the stream actor's goroutine)
// on its first n calls.
type panicProvider struct {
	llm.Provider
	left atomic.Int64
}

func (p *panicProvider) Stream(ctx context.Context, req llm.Request) iter.Seq2[messages.StreamChunk, error] {
	if p.left.Add(-1) >= 0 {
		return func(func(messages.StreamChunk, error) bool) { panic("provider exploded") }
	}
	return p.Provider.Stream(ctx, req)
}

func TestFaultProviderPanic(t *testing.T) {
	ctx := testCtx(t)
	pp := &panicProvider{Provider: smallModel(t)}
	pp.left.Store(1)
	h := openHost(t, Config{Dir: t.TempDir(), Provider: pp})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	// The panic is recovered by llm.Run: a failed call (UNKNOWN), which
	// the turn records (retried or ended in error).
	requireHealthy(t, h, id, 1)
}

func TestFaultObserverPanic(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t, Config{Dir: t.TempDir()})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	var fired atomic.Int64
	h.testObserve = func(ev session.Event) {
		if ev.Type() == session.TypeAssistantChunk && fired.Add(1) == 1 {
			panic("observer exploded")
		}
	}
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	requireHealthy(t, h, id, 1)
	require.Positive(t, fired.Load())
	st, err := h.Stats(id)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Turns)
}

// panicRequestHook panics (inside the agent's Receive) on its first call.
type panicRequestHook struct{ calls atomic.Int64 }

func (p *panicRequestHook) Request(in agent.RequestInput) (messages.CallConfig, error) {
	if p.calls.Add(1) == 1 {
		panic("hook exploded")
	}
	return in.Seed, nil
}

// A Request hook runs inside the agent's Receive; its panic is recovered
// and ends the turn in error (as a hook error would), without a restart.
func TestFaultAgentHookPanic(t *testing.T) {
	ctx := testCtx(t)
	hook := &panicRequestHook{}
	h := openHost(t, Config{Dir: t.TempDir(), Hooks: agent.Hooks{Request: hook}})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))
	evs, err := h.Events(ctx, id, 0)
	require.NoError(t, err)
	end := lastTurnEnd(t, evs.Slice())
	require.Equal(t, session.EndError, end.Kind)
	require.Contains(t, end.Error.Message, "request hook panicked")
	requireHealthy(t, h, id, 1)
}

// panicPreStepHook panics (in an agent goroutine) on its first call.
type panicPreStepHook struct{ calls atomic.Int64 }

func (p *panicPreStepHook) PreStep(_ context.Context, in agent.PreStepInput) (agent.PreStepDecision, error) {
	if p.calls.Add(1) == 1 {
		panic("pre-step exploded")
	}
	return agent.PreStepDecision{Messages: in.Messages}, nil
}

// A PreStep hook runs in a goroutine of the agent: its panic is recovered
// there (it used to take the process down) and ends the turn in error.
func TestFaultPreStepHookPanic(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t, Config{Dir: t.TempDir(), Hooks: agent.Hooks{PreStep: &panicPreStepHook{}}})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))
	evs, err := h.Events(ctx, id, 0)
	require.NoError(t, err)
	end := lastTurnEnd(t, evs.Slice())
	require.Equal(t, session.EndError, end.Kind)
	require.Contains(t, end.Error.Message, "pre-step hook panicked")
	requireHealthy(t, h, id, 1)
}

// A panic inside the session actor: a session observer fails once, mid-
// turn, and the failure hook panics (inside the session actor's Receive,
// after the commit). protoactor restarts the session actor; the restarted
// instance keeps the log and the persister's subscription and answers the
// agent's interrupted append, so the turn completes, everything committed
// is written, and the session answers the next followup.
func TestFaultSessionActorPanic(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	var failed, hooked atomic.Int64
	var crashedAt atomic.Int64
	crashedAt.Store(-1)
	h := openHost(t, Config{Dir: dir,
		SessionObservers: []session.Observer{func(ev session.Event) error {
			if ev.Type() == session.TypeAssistantChunk && failed.Add(1) == 1 {
				return errors.New("observer fails once")
			}
			return nil
		}},
		OnObserverFailure: func(_ session.SessionID, f session.ObserverFailure) {
			if hooked.Add(1) == 1 {
				crashedAt.Store(f.Seq)
				panic("failure hook exploded")
			}
		},
	})
	crashed := make(chan struct{}, 1)
	sub := h.sys.EventStream.Subscribe(func(evt any) {
		if _, ok := evt.(*actor.SupervisorEvent); ok {
			select {
			case crashed <- struct{}{}:
			default:
			}
		}
	})
	defer h.sys.EventStream.Unsubscribe(sub)
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))
	select {
	case <-crashed:
	default:
		t.Fatal("the session actor did not crash")
	}
	require.GreaterOrEqual(t, crashedAt.Load(), int64(0))
	evs, err := h.Events(ctx, id, 0)
	require.NoError(t, err)
	require.Equal(t, session.EndCompleted, lastTurnEnd(t, evs.Slice()).Kind, "the turn went on")
	requireHealthy(t, h, id, 1)
	st, err := h.Stats(id)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Turns)
	evs, err = h.Events(ctx, id, 0)
	require.NoError(t, err)
	want := evs.Slice()
	require.NoError(t, h.Close(ctx))

	// Everything acknowledged was written: a fresh host loads it all.
	h2 := openHost(t, Config{Dir: dir})
	defer func() { require.NoError(t, h2.Close(ctx)) }()
	got, err := h2.Events(ctx, id, 0)
	require.NoError(t, err)
	// (The resumed session may append after them.)
	require.GreaterOrEqual(t, got.Len(), len(want))
	for i, ev := range want {
		require.Equal(t, ev.Type(), got.At(i).Type(), "seq %d", i)
		require.Equal(t, ev.Data().String(), got.At(i).Data().String(), "seq %d", i)
	}
	require.NoError(t, session.CheckTrace(got.Slice()))
}
