package supervisor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// TestSendTooLargeToRecordIsRefused: a followup, steering or injection
// whose record would be longer than the reader accepts is refused at once
// with session.ErrTooLarge, in one line naming the size and the limit;
// nothing is appended or queued, and the session goes on.
func TestSendTooLargeToRecordIsRefused(t *testing.T) {
	// Not testCtx's 30 s: each send below measures a 16 MiB record, and
	// under -race on a loaded machine the copies alone took 26–28 s.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := openHost(t, Config{Dir: t.TempDir()})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	before, err := h.Events(ctx, id, 0)
	require.NoError(t, err)

	huge := userMsg(t, strings.Repeat("x", session.DefaultMaxRecordBytes))
	for name, send := range map[string]func() error{
		"followup": func() error { return h.Followup(ctx, id, huge) },
		"steer":    func() error { return h.Steer(ctx, id, huge) },
		"inject":   func() error { return h.Inject(ctx, id, huge) },
	} {
		err := send()
		require.ErrorIs(t, err, session.ErrTooLarge, name)
		require.NotContains(t, err.Error(), "\n")
		require.Contains(t, err.Error(), "too large")
		require.Contains(t, err.Error(), "limit of 16777216 bytes")
	}
	after, err := h.Events(ctx, id, 0)
	require.NoError(t, err)
	require.Equal(t, len(before), len(after), "nothing was appended")

	require.NoError(t, h.Followup(ctx, id, userMsg(t, "hello")))
	require.NoError(t, h.WaitIdle(ctx, id))
	ms, err := h.Messages(ctx, id)
	require.NoError(t, err)
	require.Equal(t, []messages.Role{messages.RoleUser, messages.RoleAssistant}, roles(ms), "only the small message was queued")
}
