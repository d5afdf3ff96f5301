package supervisor

import (
	"context"
	"errors"
	"iter"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/storefs"
	"github.com/dshgo/dsh/internal/vfs"
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
	all := evs
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
	all = evs
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
	for _, ev := range evs {
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
	st, err := h.Stats(ctx, id)
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
	end := lastTurnEnd(t, evs)
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
// there (unrecovered, it would take the process down) and ends the turn in error.
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
	end := lastTurnEnd(t, evs)
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
	require.Equal(t, session.EndCompleted, lastTurnEnd(t, evs).Kind, "the turn went on")
	requireHealthy(t, h, id, 1)
	st, err := h.Stats(ctx, id)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Turns)
	evs, err = h.Events(ctx, id, 0)
	require.NoError(t, err)
	want := evs
	require.NoError(t, h.Close(ctx))

	// Everything acknowledged was written: a fresh host loads it all.
	h2 := openHost(t, Config{Dir: dir})
	defer func() { require.NoError(t, h2.Close(ctx)) }()
	got, err := h2.Events(ctx, id, 0)
	require.NoError(t, err)
	// (The resumed session may append after them.)
	require.GreaterOrEqual(t, len(got), len(want))
	for i, ev := range want {
		require.Equal(t, ev.Type(), got[i].Type(), "seq %d", i)
		require.Equal(t, ev.Data().String(), got[i].Data().String(), "seq %d", i)
	}
	require.NoError(t, session.CheckTrace(got))
}

// diskFull is a MemFS whose writes fail with ENOSPC while full is set (a
// write stores its first bytes, then fails, as on a disk that fills up
// mid-write).
type diskFull struct {
	*vfs.MemFS
	full atomic.Bool
}

func newDiskFull() *diskFull {
	d := &diskFull{MemFS: vfs.NewMem()}
	d.InjectError(func(op vfs.Op, _ string) error {
		if op == vfs.OpWrite && d.full.Load() {
			return &vfs.ShortWrite{N: 7, Err: syscall.ENOSPC}
		}
		return nil
	})
	return d
}

// followupAccepted polls Followup while it answers ErrNotDurable; any other
// error fails the test.
func followupAccepted(t *testing.T, h *Host, id session.SessionID, text string) {
	t.Helper()
	ctx := testCtx(t)
	eventually(t, "a followup accepted", func() bool {
		err := h.Followup(ctx, id, userMsg(t, text))
		if errors.Is(err, ErrNotDurable) {
			return false
		}
		require.NoError(t, err)
		return true
	})
}

// TestFaultDiskFullTurnEndRetriedInTheBackground: the disk fills, a turn
// ends and its end cannot be written: WaitIdle fails with the write error
// and sends are refused (ErrNotDurable) while the persister retries in
// the background. Space is freed; nobody calls Flush, yet a followup is
// soon accepted, the turn's end is on disk (synced: it survives a power
// loss), and the stats count the failures and the retries.
func TestFaultDiskFullTurnEndRetriedInTheBackground(t *testing.T) {
	ctx := testCtx(t)
	fsys := newDiskFull()
	store, err := storefs.NewJSONLStore(persister.JSONLConfig{Root: "/data"}, fsys)
	require.NoError(t, err)
	var hooked atomic.Int64
	h := openHost(t, Config{Store: store, Window: time.Hour,
		OnWriteFailed: func(_ session.SessionID, err error) {
			if errors.Is(err, syscall.ENOSPC) {
				hooked.Add(1)
			}
		}})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))

	fsys.full.Store(true)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "two")))
	require.ErrorIs(t, h.WaitIdle(ctx, id), syscall.ENOSPC, "the turn's end is not durable")
	err = h.Followup(ctx, id, userMsg(t, "three"))
	require.ErrorIs(t, err, ErrNotDurable)
	require.ErrorIs(t, err, syscall.ENOSPC)

	// The persister retries by itself; while the disk is full each retry
	// fails and the session stays closed.
	eventually(t, "two background retries", func() bool {
		st, err := h.Stats(ctx, id)
		require.NoError(t, err)
		return st.WriteRetries >= 2
	})
	require.ErrorIs(t, h.Steer(ctx, id, userMsg(t, "three")), ErrNotDurable)
	st, err := h.Stats(ctx, id)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Turns)
	require.GreaterOrEqual(t, st.WriteFailures, int64(2), "the turn end's write and the first retry (the second started after it failed)")
	retried := st.WriteRetries

	// Space is freed: the next retry succeeds and sends are taken again.
	fsys.full.Store(false)
	followupAccepted(t, h, id, "three")
	require.NoError(t, h.WaitIdle(ctx, id))
	eventually(t, "the durable notice of the last event", func() bool {
		st, err = h.Stats(ctx, id)
		require.NoError(t, err)
		return st.Durable == st.Events-1
	})
	require.EqualValues(t, 3, st.Turns)
	// Only a background retry can have written it: sends were refused and
	// nobody flushed (the retry that succeeded may be one counted above,
	// started before the space was freed).
	require.GreaterOrEqual(t, st.WriteRetries, retried)
	require.GreaterOrEqual(t, st.WriteFailures, retried, "each retry counted followed a failure")
	require.Equal(t, st.WriteFailures, hooked.Load(), "each failure reached OnWriteFailed")

	// On disk, synced: the log as a power loss would leave it holds the
	// three turns, each ended.
	crashed, err := storefs.NewJSONLStore(persister.JSONLConfig{Root: "/data"}, fsys.CrashClone())
	require.NoError(t, err)
	defer crashed.Close()
	stored, err := crashed.Inspect(ctx, id)
	require.NoError(t, err)
	require.NoError(t, session.CheckTrace(stored.Events))
	require.Empty(t, session.InterruptedTurnClosers(stored.Events))
	l, err := session.Restore(stored.Header, stored.Events)
	require.NoError(t, err)
	require.EqualValues(t, 3, l.Turns())
	require.Equal(t, session.EndCompleted, lastTurnEnd(t, stored.Events).Kind)
}

// TestFaultRetryingSessionEvictedAndClosed: a session whose writes keep
// failing is evicted (the error says so) and the host closed while the
// persister retries it: nothing is left running (goleak, in TestMain).
func TestFaultRetryingSessionEvictedAndClosed(t *testing.T) {
	ctx := testCtx(t)
	fsys := newDiskFull()
	store, err := storefs.NewJSONLStore(persister.JSONLConfig{Root: "/data"}, fsys)
	require.NoError(t, err)
	h := openHost(t, Config{Store: store, Window: time.Hour, WriteRetryMin: time.Millisecond, WriteRetryMax: 2 * time.Millisecond})
	ids := make([]session.SessionID, 2)
	for i := range ids {
		ids[i], err = h.Create(ctx, CreateOptions{})
		require.NoError(t, err)
	}
	fsys.full.Store(true)
	for _, id := range ids {
		require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
		require.ErrorIs(t, h.WaitIdle(ctx, id), syscall.ENOSPC)
	}
	eventually(t, "background retries", func() bool {
		st, err := h.Stats(ctx, ids[0])
		require.NoError(t, err)
		return st.WriteRetries >= 3
	})
	require.ErrorIs(t, h.Evict(ctx, ids[0]), syscall.ENOSPC)
	require.ErrorIs(t, h.Close(ctx), syscall.ENOSPC)
}
