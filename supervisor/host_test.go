package supervisor

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// TestMain runs the crash child (see crashChild) instead of the tests
// when the environment names its directory: the child never registers as
// a (skipped) test.
func TestMain(m *testing.M) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		crashChild(dir) // killed by the parent; returns only on failure
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}

func userMsg(t *testing.T, text string) messages.Message {
	t.Helper()
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
	require.NoError(t, err)
	return m
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func smallModel(t *testing.T) *synthetic.Provider {
	p, err := synthetic.New(synthetic.Config{Seed: 1, TextChunks: 20, ReasoningChunks: 5, ReasoningRate: 0.5})
	require.NoError(t, err)
	return p
}

func openHost(t *testing.T, cfg Config) *Host {
	t.Helper()
	if cfg.Provider == nil {
		cfg.Provider = smallModel(t)
	}
	h, err := Open(cfg)
	require.NoError(t, err)
	return h
}

func roles(ms []messages.Message) []messages.Role {
	var out []messages.Role
	for _, m := range ms {
		out = append(out, m.Role())
	}
	return out
}

// logFiles returns the session logs under dir.
func logFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), "session.jsonl") && !strings.HasSuffix(p, ".tmp") {
			files = append(files, p)
		}
		return err
	}))
	return files
}

func TestMemoryHostTurn(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t, Config{})
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "hello")))
	require.NoError(t, h.WaitIdle(ctx, id))
	ms, err := h.Messages(ctx, id)
	require.NoError(t, err)
	require.Equal(t, []messages.Role{messages.RoleUser, messages.RoleAssistant}, roles(ms))
	st, err := h.Stats(ctx, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Turns)
	require.Positive(t, st.Chunks)
	require.Positive(t, st.Usage.OutputTokens)
	_, err = h.Create(ctx, CreateOptions{ID: id})
	require.ErrorIs(t, err, ErrExists)
	_, err = h.Messages(ctx, "nope")
	require.ErrorIs(t, err, ErrNoSession)
	require.NoError(t, h.Close(ctx))
	require.ErrorIs(t, h.Close(ctx), ErrClosed)
	_, err = h.Messages(ctx, id)
	require.ErrorIs(t, err, ErrClosed)
}

func TestDurableAtWaitIdleResumeAndReopen(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	// A long window: only the turn-end checkpoint can make the turn
	// durable by the time WaitIdle returns.
	h := openHost(t, Config{Dir: dir, Window: time.Hour})
	id, err := h.Create(ctx, CreateOptions{Cwd: "/work/project"})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))

	files := logFiles(t, dir)
	require.Len(t, files, 1)
	f, err := session.ReadFile(files[0])
	require.NoError(t, err)
	require.Nil(t, f.Torn)
	l, err := f.Log()
	require.NoError(t, err)
	require.EqualValues(t, 1, l.Turns())
	last, _ := l.Last()
	require.Equal(t, session.TypeTurnEnd, last.Type())
	require.NoError(t, h.Close(ctx))

	// A reopened host lists the session and resumes it at turn 2.
	h2 := openHost(t, Config{Dir: dir})
	list, err := h2.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, id, list[0].Header.ID)
	require.False(t, list[0].Resident)
	require.NoError(t, h2.Resume(ctx, id))
	require.NoError(t, h2.Followup(ctx, id, userMsg(t, "two")))
	require.NoError(t, h2.WaitIdle(ctx, id))
	ms, err := h2.Messages(ctx, id)
	require.NoError(t, err)
	require.Equal(t, []messages.Role{messages.RoleUser, messages.RoleAssistant, messages.RoleUser, messages.RoleAssistant}, roles(ms))
	require.NoError(t, h2.Close(ctx))

	f, err = session.ReadFile(files[0])
	require.NoError(t, err)
	l, err = f.Log()
	require.NoError(t, err)
	require.EqualValues(t, 2, l.Turns())
}

func TestFork(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	h := openHost(t, Config{Dir: dir})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))
	child, err := h.Fork(ctx, id, session.LastEvent)
	require.NoError(t, err)
	require.NotEqual(t, id, child)
	require.NoError(t, h.Followup(ctx, child, userMsg(t, "two")))
	require.NoError(t, h.WaitIdle(ctx, child))
	pm, err := h.Messages(ctx, id)
	require.NoError(t, err)
	cm, err := h.Messages(ctx, child)
	require.NoError(t, err)
	require.Equal(t, 2, len(pm))
	require.Equal(t, 4, len(cm))
	list, err := h.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 2)
}

func TestSubscribeReplaysThenLive(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t, Config{})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))
	past, err := h.Events(ctx, id, 0)
	require.NoError(t, err)

	sub, err := h.Subscribe(ctx, id, 0)
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "two")))
	require.NoError(t, h.WaitIdle(ctx, id))
	all, err := h.Events(ctx, id, 0)
	require.NoError(t, err)
	require.Greater(t, len(all), len(past))

	for i := range len(all) {
		select {
		case ev, ok := <-sub.Events():
			require.True(t, ok, "closed early: %v", sub.Err())
			require.EqualValues(t, i, ev.Seq())
			require.Equal(t, all[i].Type(), ev.Type())
		case <-ctx.Done():
			t.Fatalf("event %d never came", i)
		}
	}
	sub.Close()
	require.NoError(t, sub.Err())
}

func TestSlowSubscriberIsDropped(t *testing.T) {
	ctx := testCtx(t)
	h := openHost(t, Config{SubscriberBuffer: 4})
	defer func() { require.NoError(t, h.Close(ctx)) }()
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	sub, err := h.Subscribe(ctx, id, 0)
	require.NoError(t, err)
	// Nobody reads: the turn still completes.
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "one")))
	require.NoError(t, h.WaitIdle(ctx, id))
	// The subscription's actor may still be delivering when the turn is
	// idle: wait for the drop (the turn has more events than the buffer
	// holds) before reading, or the reader would make room for more.
	require.Eventually(t, func() bool { return sub.Err() != nil }, 10*time.Second, time.Millisecond)
	n := 0
	for range sub.Events() {
		n++
	}
	require.LessOrEqual(t, n, 5)
	require.ErrorIs(t, sub.Err(), ErrSlowSubscriber)
	sub.Close()
	ms, err := h.Messages(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 2, len(ms))
}

func TestCloseDisposesRunningTurn(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	p, err := synthetic.New(synthetic.Config{Seed: 2, TextChunks: 1000, TokensPerSecond: 100})
	require.NoError(t, err)
	h := openHost(t, Config{Dir: dir, Provider: p})
	id, err := h.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, h.Followup(ctx, id, userMsg(t, "slow")))
	require.NoError(t, h.Close(ctx))
	files := logFiles(t, dir)
	require.Len(t, files, 1)
	f, err := session.ReadFile(files[0])
	require.NoError(t, err)
	require.Nil(t, f.Torn)
	l, err := f.Log()
	require.NoError(t, err)
	last, _ := l.Last()
	require.Equal(t, session.TypeTurnEnd, last.Type())
	te := last.Payload().(session.TurnEnd)
	require.Contains(t, te.Reason.JSON().String(), "disposed")
}
