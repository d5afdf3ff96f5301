package supervisor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
)

// ManualResume: only Resume (and Create, Fork) make a session resident;
// the other methods refuse a stored session that is not.
func TestManualResumeLoadsOnlyOnResume(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	h := openHost(t, Config{Dir: dir})
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "hello")))
	require.NoError(t, h.WaitIdle(ctx, id))
	require.NoError(t, h.Close(ctx))

	h2 := openHost(t, Config{Dir: dir, ManualResume: true})
	defer h2.Close(ctx)
	require.ErrorIs(t, h2.Followup(ctx, id, userMsg(t, "again")), ErrNoSession)
	_, err = h2.Messages(ctx, id)
	require.ErrorIs(t, err, ErrNoSession)
	require.Zero(t, h2.Resident())

	require.NoError(t, h2.Resume(ctx, id))
	require.NoError(t, h2.Followup(ctx, id, userMsg(t, "again")))
	require.NoError(t, h2.WaitIdle(ctx, id))
	st, err := h2.Stats(ctx, id)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Turns)
}

// Evict disposes a running turn, flushes, ends the session's
// subscriptions with ErrEvicted and stops its actors; the stored log is
// complete and valid, and the session comes back on Resume.
func TestEvictMidTurnLeavesAValidLogAndResumes(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	h := openHost(t, Config{Dir: dir, ManualResume: true})
	defer h.Close(ctx)
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	sub, err := h.Subscribe(ctx, id, 0)
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "long")))
	// Wait until the turn is running (its first chunk is logged).
	for ev := range sub.Events() {
		if ev.Type() == session.TypeAssistantChunk {
			break
		}
	}
	require.NoError(t, h.Evict(ctx, id))
	for range sub.Events() {
	}
	require.ErrorIs(t, sub.Err(), ErrEvicted)
	require.Zero(t, h.Resident())
	require.NoError(t, h.Evict(ctx, id), "evicting a non-resident session does nothing")
	_, err = h.Messages(ctx, id)
	require.ErrorIs(t, err, ErrNoSession)

	files := logFiles(t, dir)
	require.Len(t, files, 1)
	f, err := session.ReadFile(files[0])
	require.NoError(t, err)
	l, err := session.Restore(f.Header, f.Events)
	require.NoError(t, err)
	_, _, open := l.OpenTurn()
	require.False(t, open, "the disposed turn was closed and flushed")

	require.NoError(t, h.Resume(ctx, id))
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "next")))
	require.NoError(t, h.WaitIdle(ctx, id))
	st, err := h.Stats(ctx, id)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Turns)
}

// A call cut short by its context's deadline says so as the context
// would, even when the actor request's own timer (derived from that
// deadline) fires first.
func TestWaitIdleDeadlineIsDeadlineExceeded(t *testing.T) {
	ctx := testCtx(t)
	p, err := synthetic.New(synthetic.Config{Seed: 1, TextChunks: 200, TokensPerSecond: 50})
	require.NoError(t, err)
	h := openHost(t, Config{Provider: p})
	defer h.Close(ctx)
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "long")))
	for range 20 {
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		err := h.WaitIdle(short, id)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	require.NoError(t, h.Cancel(ctx, id, session.CancelCause{Kind: session.CauseUser}))
	require.NoError(t, h.WaitIdle(ctx, id))
}
