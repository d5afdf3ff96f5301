package supervisor

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtimeYield()
	}
}

// runtimeYield waits a little without sleeping: a timer channel.
func runtimeYield() { <-time.After(time.Millisecond) }

// readLog reads the single stored log under dir, checks its trace and
// returns it.
func readLog(t *testing.T, path string) *session.Log {
	t.Helper()
	f, err := session.ReadFile(path)
	require.NoError(t, err)
	l, err := f.Log()
	require.NoError(t, err)
	require.NoError(t, session.CheckTrace(l.Events().Slice()))
	_, _, open := l.OpenTurn()
	require.False(t, open)
	return l
}

func TestPassivationManySessions(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	h := openHost(t, Config{Dir: dir, IdleTimeout: 20 * time.Millisecond})
	const n = 200
	ids := make([]session.SessionID, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			id, err := h.Create(ctx, CreateOptions{ID: session.SessionID(fmt.Sprintf("s-%03d", i))})
			if err == nil {
				err = h.Followup(ctx, id, userMsg(t, "hello"))
			}
			if err == nil {
				err = h.WaitIdle(ctx, id)
			}
			ids[i] = id
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	eventually(t, "every session to passivate", func() bool { return h.Resident() == 0 })
	require.GreaterOrEqual(t, h.Passivated(), int64(n))
	require.Zero(t, h.residentBytes())
	st, err := h.Stats(ctx, ids[7])
	require.NoError(t, err)
	require.False(t, st.Resident)
	require.EqualValues(t, 1, st.Turns)
	list, err := h.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, n)

	// A followup reactivates the session transparently; the turn number
	// continues.
	require.NoError(t, h.Followup(ctx, ids[7], userMsg(t, "again")))
	require.NoError(t, h.WaitIdle(ctx, ids[7]))
	evs, err := h.Events(ctx, ids[7], 0)
	require.NoError(t, err)
	var turns []int64
	for _, ev := range evs {
		if p, ok := ev.Payload().(session.TurnStart); ok {
			turns = append(turns, p.Turn)
		}
	}
	require.Equal(t, []int64{1, 2}, turns)
	st, err = h.Stats(ctx, ids[7])
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Turns)
	if st.Resident {
		require.Greater(t, st.ResidentBytes, int64(sessionOverheadBytes))
	}
	require.NoError(t, h.Close(ctx))

	files := logFiles(t, dir)
	require.Len(t, files, n)
	for _, f := range files {
		l := readLog(t, f)
		if l.ID() == ids[7] {
			require.EqualValues(t, 2, l.Turns())
		} else {
			require.EqualValues(t, 1, l.Turns())
		}
	}
}

func TestSubscriptionPinsResident(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t, Config{Dir: t.TempDir(), IdleTimeout: time.Millisecond})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	a, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	b, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	empty, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	sub, err := h.Subscribe(ctx, a, 0)
	require.NoError(t, err)
	for _, id := range []session.SessionID{a, b} {
		require.NoError(t, h.Followup(ctx, id, userMsg(t, "hi")))
		require.NoError(t, h.WaitIdle(ctx, id))
	}
	require.NoError(t, err)
	eventually(t, "b to passivate", func() bool { _, err := h.SessionPID(b); return err != nil })
	_, err = h.SessionPID(a)
	require.NoError(t, err)
	require.Equal(t, 2, h.Resident()) // a (subscribed) and the empty session
	sub.Close()
	eventually(t, "a to passivate", func() bool { return h.Resident() == 1 })
	_, err = h.SessionPID(empty)
	require.NoError(t, err, "an empty session is never passivated")
	require.NoError(t, h.Followup(ctx, b, userMsg(t, "back")))
	require.NoError(t, h.WaitIdle(ctx, b))
}

// gateProvider blocks every stream until released, counting the streams
// open at once.
type gateProvider struct {
	llm.Provider
	release       chan struct{}
	open, maxOpen atomic.Int64
}

func (g *gateProvider) Stream(ctx context.Context, req llm.Request) iter.Seq2[messages.StreamChunk, error] {
	return func(yield func(messages.StreamChunk, error) bool) {
		n := g.open.Add(1)
		defer g.open.Add(-1)
		for {
			m := g.maxOpen.Load()
			if n <= m || g.maxOpen.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-g.release:
		case <-ctx.Done():
			yield(messages.StreamChunk{}, ctx.Err())
			return
		}
		for c, err := range g.Provider.Stream(ctx, req) {
			if !yield(c, err) {
				return
			}
		}
	}
}

func TestMaxConcurrentModelCalls(t *testing.T) {
	ctx := testCtx(t)
	g := &gateProvider{Provider: smallModel(t), release: make(chan struct{})}
	h := openHost(t, Config{Provider: g, MaxConcurrentModelCalls: 2})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	const n = 8
	ids := make([]session.SessionID, n)
	for i := range n {
		id, err := h.Create(ctx, CreateOptions{})
		require.NoError(t, err)
		ids[i] = id
		require.NoError(t, h.Followup(ctx, id, userMsg(t, "go")))
	}
	eventually(t, "2 open and 6 queued", func() bool {
		open, queued := h.modelCalls()
		return open == 2 && queued == n-2
	})
	require.EqualValues(t, 2, g.open.Load())
	close(g.release)
	for _, id := range ids {
		require.NoError(t, h.WaitIdle(ctx, id))
		ms, err := h.Messages(ctx, id)
		require.NoError(t, err)
		require.Equal(t, 2, len(ms))
	}
	require.EqualValues(t, 2, g.maxOpen.Load())
	open, queued := h.modelCalls()
	require.Zero(t, open)
	require.Zero(t, queued)
}

func TestQueuedModelCallHonoursCancel(t *testing.T) {
	ctx := testCtx(t)
	g := &gateProvider{Provider: smallModel(t), release: make(chan struct{})}
	h := openHost(t, Config{Provider: g, MaxConcurrentModelCalls: 1})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	a, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	b, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, a, userMsg(t, "a")))
	eventually(t, "a open", func() bool { open, _ := h.modelCalls(); return open == 1 })
	require.NoError(t, h.Followup(ctx, b, userMsg(t, "b")))
	eventually(t, "b queued", func() bool { _, q := h.modelCalls(); return q == 1 })
	require.NoError(t, h.Cancel(ctx, b, session.CancelCause{Kind: session.CauseUser}))
	require.NoError(t, h.WaitIdle(ctx, b))
	_, queued := h.modelCalls()
	require.Zero(t, queued)
	close(g.release)
	require.NoError(t, h.WaitIdle(ctx, a))
}

func TestUsageSurvivesResume(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	h := openHost(t, Config{Dir: dir})
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))
	u1st, err := h.Stats(ctx, id)
	require.NoError(t, err)
	u1 := u1st.Usage
	require.Positive(t, u1.OutputTokens)
	require.NoError(t, h.Close(ctx))

	h2 := openHost(t, Config{Dir: dir})
	defer func() { require.NoError(t, h2.Close(ctx)) }()
	_, err = h2.Stats(ctx, id)
	require.ErrorIs(t, err, ErrNoSession)
	require.NoError(t, h2.Resume(ctx, id))
	ust, err := h2.Stats(ctx, id)
	require.NoError(t, err)
	u := ust.Usage
	require.Equal(t, u1, u)
	require.NoError(t, h2.Followup(ctx, id, userMsg(t, "two")))
	require.NoError(t, h2.WaitIdle(ctx, id))
	u2st, err := h2.Stats(ctx, id)
	require.NoError(t, err)
	u2 := u2st.Usage
	require.Greater(t, u2.OutputTokens, u1.OutputTokens)
	require.Greater(t, u2.InputTokens, u1.InputTokens)
	st, err := h2.Stats(ctx, id)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Turns)
}

// failingStore fails every Append while failing is set.
type failingStore struct {
	*persister.MemStore
	failing atomic.Pointer[error]
}

func (f *failingStore) Append(ctx context.Context, id session.SessionID, events []session.Event, durable persister.Durability) error {
	if err := f.failing.Load(); err != nil {
		return *err
	}
	return f.MemStore.Append(ctx, id, events, durable)
}

func TestFailClosedUntilFlushSucceeds(t *testing.T) {
	ctx := testCtx(t)
	store := &failingStore{MemStore: persister.NewMemStore()}
	var failed atomic.Int64
	h := openHost(t, Config{Store: store, Policy: persister.PolicyTurnEnd, Window: time.Hour,
		OnWriteFailed: func(session.SessionID, error) { failed.Add(1) }})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))

	boom := errors.New("disk on fire")
	store.failing.Store(&boom)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "two")))
	require.ErrorIs(t, h.WaitIdle(ctx, id), boom)
	eventually(t, "the write failure notice", func() bool { return failed.Load() > 0 })

	// Fail closed: no new turn starts.
	err = h.Followup(ctx, id, userMsg(t, "three"))
	require.ErrorIs(t, err, ErrNotDurable)
	require.ErrorIs(t, err, boom)
	require.ErrorIs(t, h.Steer(ctx, id, userMsg(t, "three")), ErrNotDurable)
	st, err := h.Stats(ctx, id)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Turns)

	// While the store fails, retries fail and the session stays closed.
	_, err = h.Flush(ctx, id)
	require.ErrorIs(t, err, boom)
	require.ErrorIs(t, h.Followup(ctx, id, userMsg(t, "three")), ErrNotDurable)

	// A retry succeeds: turns start again, nothing was lost.
	store.failing.Store(nil)
	d, err := h.Flush(ctx, id)
	require.NoError(t, err)
	require.Equal(t, st.Events-1, d)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "three")))
	require.NoError(t, h.WaitIdle(ctx, id))
	stored, err := store.Load(ctx, id)
	require.NoError(t, err)
	require.NoError(t, session.CheckTrace(stored.Events))
	l, err := session.Restore(stored.Header, stored.Events)
	require.NoError(t, err)
	require.EqualValues(t, 3, l.Turns())
	require.Equal(t, 6, l.DeriveMessages().Len())
}
