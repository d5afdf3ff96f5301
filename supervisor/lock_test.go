package supervisor

import (
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/testutil"
)

// requireInUse checks that err refuses a session because another writer
// in this process (whose default holder text is "pid N on HOST") holds
// its lock.
func requireInUse(t *testing.T, err error, id session.SessionID) {
	t.Helper()
	host, herr := os.Hostname()
	require.NoError(t, herr)
	var le *persister.LockedError
	require.ErrorAs(t, err, &le)
	require.ErrorIs(t, err, persister.ErrLocked)
	require.ErrorIs(t, err, persister.ErrFenced)
	require.Equal(t, id, le.ID)
	require.Equal(t, fmt.Sprintf("pid %d on %s", os.Getpid(), host), le.Holder)
	require.Equal(t, fmt.Sprintf("persister: session %s is in use by pid %d on %s", id, os.Getpid(), host), le.Error())
}

// Two plain hosts on one directory stand for two processes (two dsh run,
// or an embedder and a dsh chat): while the first has a session resident,
// the second can neither resume it nor send it a turn. It fails at once,
// naming the holder, and the file is untouched; the first goes on.
func TestSecondHostOnOneDirectoryIsRefusedTheSession(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	a := openHost(t, Config{Dir: dir})
	defer a.Close(ctx)
	id, err := a.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, a.Followup(ctx, id, userMsg(t, "hello")))
	require.NoError(t, a.WaitIdle(ctx, id))
	files := logFiles(t, dir)
	require.Len(t, files, 1)
	before, err := os.ReadFile(files[0])
	require.NoError(t, err)

	rec := &testutil.LogRecords{}
	b := openHost(t, Config{Dir: dir, Logger: slog.New(rec)})
	defer b.Close(ctx)
	requireInUse(t, b.Followup(ctx, id, userMsg(t, "from b")), id)
	warns := rec.AtLevel(slog.LevelWarn)
	require.Len(t, warns, 1, "the refusal is logged once")
	require.Equal(t, "session in use by another writer", warns[0].Message)
	require.Equal(t, string(id), testutil.Attr(warns[0], "session"))
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("pid %d on %s", os.Getpid(), host), testutil.Attr(warns[0], "holder"))
	requireInUse(t, b.Resume(ctx, id), id)
	_, err = b.Create(ctx, CreateOptions{ID: id})
	require.ErrorIs(t, err, ErrExists, "a new session under a stored id is refused at once, not when its first write fails")
	require.Zero(t, b.Resident())
	after, err := os.ReadFile(files[0])
	require.NoError(t, err)
	require.Equal(t, before, after, "the refused host changed nothing")

	require.NoError(t, a.Followup(ctx, id, userMsg(t, "again")))
	require.NoError(t, a.WaitIdle(ctx, id))
	require.EqualValues(t, 2, readLog(t, files[0]).Turns())
}

// Passivation and eviction give the session's writer lock up (another
// host takes the session at once) and resuming takes it again (so the
// first host is refused while the second holds it).
func TestPassivationAndEvictionReleaseTheWriterLock(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	a := openHost(t, Config{Dir: dir, IdleTimeout: 10 * time.Millisecond})
	defer a.Close(ctx)
	id, err := a.Create(ctx, CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, a.Followup(ctx, id, userMsg(t, "hello")))
	require.NoError(t, a.WaitIdle(ctx, id))
	eventually(t, "the session to passivate", func() bool { return a.Resident() == 0 })

	b := openHost(t, Config{Dir: dir, ManualResume: true})
	defer b.Close(ctx)
	require.NoError(t, b.Resume(ctx, id), "a passivated session's lock is free")
	requireInUse(t, a.Followup(ctx, id, userMsg(t, "from a")), id)
	require.Zero(t, a.Resident())
	require.NoError(t, b.Followup(ctx, id, userMsg(t, "from b")))
	require.NoError(t, b.WaitIdle(ctx, id))

	require.NoError(t, b.Evict(ctx, id))
	require.NoError(t, a.Followup(ctx, id, userMsg(t, "a again")), "an evicted session's lock is free")
	require.NoError(t, a.WaitIdle(ctx, id))
	requireInUse(t, b.Resume(ctx, id), id)

	files := logFiles(t, dir)
	require.Len(t, files, 1)
	require.EqualValues(t, 3, readLog(t, files[0]).Turns())
}
