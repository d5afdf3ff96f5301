package supervisor

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/persister"
)

// TestCloseReportsAFailedFlushOnceOnOneLine: when the store keeps failing,
// Close reports the session's failed flush once, on one line (dsh prints
// it as its one error line), and errors.Is still finds the cause.
func TestCloseReportsAFailedFlushOnceOnOneLine(t *testing.T) {
	ctx := testCtx(t)
	store := &failingStore{MemStore: persister.NewMemStore()}
	h := openHost(t, Config{Store: store, Policy: persister.PolicyTurnEnd, Window: time.Hour})
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))

	boom := errors.New("disk on fire")
	store.failing.Store(&boom)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "two")))
	require.ErrorIs(t, h.WaitIdle(ctx, id), boom)

	err = h.Close(ctx)
	require.ErrorIs(t, err, boom)
	require.Equal(t, "session "+string(id)+": flush: disk on fire", err.Error())
}

func TestJoinErrorsIsOneLine(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	require.NoError(t, joinErrors(nil))
	require.NoError(t, joinErrors([]error{nil}))
	require.Same(t, a, joinErrors([]error{nil, a}))
	err := joinErrors([]error{a, nil, b})
	require.Equal(t, "a; b", err.Error())
	require.ErrorIs(t, err, a)
	require.ErrorIs(t, err, b)
}
