//go:build !race

package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/supervisor"
)

// TestClusterSendTooLargeIsRefusedAtTheClient: a message whose record
// would be longer than the reader accepts is refused by the client with
// session.ErrTooLarge, in one line; the session's log is unchanged.
func TestClusterSendTooLargeIsRefusedAtTheClient(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	tc := startCluster(t, 1, synthetic.Config{Seed: 5, TextChunks: 5})
	m := tc.members[0]
	id, err := m.Create(ctx, supervisor.CreateOptions{})
	require.NoError(t, err)
	before, err := m.Events(ctx, id, 0)
	require.NoError(t, err)

	huge := userMsg(t, strings.Repeat("x", session.DefaultMaxRecordBytes))
	for name, send := range map[string]func() error{
		"followup": func() error { return m.Followup(ctx, id, huge) },
		"steer":    func() error { return m.Steer(ctx, id, huge) },
		"inject":   func() error { return m.Inject(ctx, id, huge) },
	} {
		err := send()
		require.ErrorIs(t, err, session.ErrTooLarge, name)
		require.NotContains(t, err.Error(), "\n")
		require.Contains(t, err.Error(), "too large")
	}
	after, err := m.Events(ctx, id, 0)
	require.NoError(t, err)
	require.Equal(t, len(before), len(after), "nothing was appended")
}
