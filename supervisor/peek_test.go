package supervisor

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
)

// TestPeekAndListResumeNothing: List and Peek read a stored session
// without making it resident or writing to its log, and List reports
// which sessions are running and which were passivated.
func TestPeekAndListResumeNothing(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	a := openHost(t, Config{Dir: dir})
	stored, err := a.Create(ctx, CreateOptions{ID: "stored"})
	require.NoError(t, err)
	require.NoError(t, a.Followup(ctx, stored, userMsg(t, "hello")))
	require.NoError(t, a.WaitIdle(ctx, stored))
	want, err := a.Events(ctx, stored, 0)
	require.NoError(t, err)
	require.NoError(t, a.Close(ctx))
	files := logFiles(t, dir)
	require.Len(t, files, 1)
	before, err := os.ReadFile(files[0])
	require.NoError(t, err)

	h := openHost(t, Config{Dir: dir, IdleTimeout: time.Millisecond})
	info, evs, err := h.Peek(ctx, stored, 2)
	require.NoError(t, err)
	require.Equal(t, Info{Header: info.Header}, info)
	require.Equal(t, stored, info.Header.ID)
	require.Equal(t, len(want)-2, len(evs))
	require.EqualValues(t, 2, evs[0].Seq())
	_, _, err = h.Peek(ctx, "nobody", 0)
	require.ErrorIs(t, err, ErrNoSession)

	list, err := h.List(ctx)
	require.NoError(t, err)
	require.Equal(t, []Info{{Header: list[0].Header}}, list)
	require.Zero(t, h.Resident())
	after, err := os.ReadFile(files[0])
	require.NoError(t, err)
	require.Equal(t, before, after, "peeking and listing wrote to the log")

	// A resident session is peeked through its actor; one that passivated
	// is listed as such.
	fresh, err := h.Create(ctx, CreateOptions{ID: "fresh"})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, fresh, userMsg(t, "hi")))
	require.NoError(t, h.WaitIdle(ctx, fresh))
	eventually(t, "the session to passivate", func() bool { return h.Resident() == 0 })
	list, err = h.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, session.SessionID("fresh"), list[0].Header.ID)
	require.True(t, list[0].Passivated)
	require.False(t, list[1].Passivated)
	info, _, err = h.Peek(ctx, fresh, 0)
	require.NoError(t, err)
	require.True(t, info.Passivated)
	require.Zero(t, h.Resident())
	require.NoError(t, h.Close(ctx))
}

// TestListRunning: a resident session with a turn open is listed as
// running, and Peek reads it from its actor.
func TestListRunning(t *testing.T) {
	ctx := testCtx(t)
	slow, err := synthetic.New(synthetic.Config{Seed: 1, TextChunks: 1000, TokensPerSecond: 50})
	require.NoError(t, err)
	h := openHost(t, Config{Provider: slow})
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "go on")))
	eventually(t, "the session to be listed as running", func() bool {
		list, err := h.List(ctx)
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.True(t, list[0].Resident)
		return list[0].Running
	})
	info, evs, err := h.Peek(ctx, id, 0)
	require.NoError(t, err)
	require.True(t, info.Running)
	require.Positive(t, len(evs))
	require.NoError(t, h.Cancel(ctx, id, session.CancelCause{Kind: session.CauseUser}))
	require.NoError(t, h.WaitIdle(ctx, id))
	list, err := h.List(ctx)
	require.NoError(t, err)
	require.False(t, list[0].Running)
	require.NoError(t, h.Close(ctx))
}
