package persister

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

func init() {
	storeFactories["sqlite"] = func(t *testing.T) Store {
		return openTestSQLite(t, filepath.Join(t.TempDir(), "s.sqlite"), SQLiteOptions{})
	}
	storeFactories["sqlite-delete-journal"] = func(t *testing.T) Store {
		return openTestSQLite(t, filepath.Join(t.TempDir(), "s.sqlite"), SQLiteOptions{JournalMode: "delete"})
	}
}

func openTestSQLite(t *testing.T, path string, opts SQLiteOptions) *SQLiteStore {
	t.Helper()
	s, err := OpenSQLite(path, opts)
	require.NoError(t, err)
	return s
}

// In WAL mode an append without durable commits with synchronous=NORMAL:
// committed (another connection reads it) but not yet fsynced; a barrier
// (a durable append, an empty durable append, Release, Close) commits
// FULL, which fsyncs it. In the other journal modes every commit is FULL.
func TestSQLiteWriteBehindCommitsThenBarriers(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	b := newLogBuilder(t, "session-wb")
	for range 4 {
		b.textTurn("more", "ok")
	}
	k := b.len() / 4
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:k], NoSync))
	require.False(t, s.unsynced, "a first append is durable with its header")
	require.NoError(t, s.Append(ctx, b.id(), b.events()[k:2*k], NoSync))
	require.True(t, s.unsynced)
	require.True(t, s.normal)
	var n int
	require.NoError(t, rawDB(t, path).QueryRow(`SELECT count(*) FROM events`).Scan(&n))
	require.Equal(t, int(2*k), n, "committed: another connection reads it")
	require.NoError(t, s.Append(ctx, b.id(), nil, Sync))
	require.False(t, s.unsynced, "an empty durable append is a barrier")
	require.NoError(t, s.Append(ctx, b.id(), b.events()[2*k:3*k], NoSync))
	require.True(t, s.unsynced)
	require.NoError(t, s.Release(b.id()))
	require.False(t, s.unsynced, "Release is a barrier")
	require.NoError(t, s.Append(ctx, b.id(), b.from(3*k), NoSync))
	require.True(t, s.unsynced)
	require.NoError(t, s.Close())
	r := openTestSQLite(t, path, SQLiteOptions{ReadOnly: true})
	defer r.Close()
	got, err := r.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, b.events(), got)

	d := openTestSQLite(t, filepath.Join(t.TempDir(), "d.sqlite"), SQLiteOptions{JournalMode: "delete"})
	defer d.Close()
	require.NoError(t, d.Create(b.header()))
	require.NoError(t, d.Append(ctx, b.id(), b.events()[:k], NoSync))
	require.NoError(t, d.Append(ctx, b.id(), b.events()[k:2*k], NoSync))
	require.False(t, d.unsynced, "outside WAL every commit is FULL")
	require.False(t, d.normal)
}

// An ignorable event typed as a packed-row tag, which a JSONL store
// refuses (TestJSONLRefusesAnEventOnlySQLiteHolds), is stored by a SQLite
// store as a scalar row and loads back as itself.
func TestSQLiteHoldsAnIgnorableEventTypedAsARowTag(t *testing.T) {
	ctx := t.Context()
	b := newLogBuilder(t, "session-tag")
	b.textTurn("hello", "hi")
	tag := b.add(session.NewDraft("text-chunks", messages.MustParseJSON(`{"note":"foreign"}`)).AsIgnorable())
	b.textTurn("again", "hi again")
	s := openTestSQLite(t, filepath.Join(t.TempDir(), "s.sqlite"), SQLiteOptions{})
	defer s.Close()
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
	requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)
	rows := physicalRows(t, s.Path(), b.id())
	var found bool
	for _, r := range rows {
		if r.Seq == tag.Seq() {
			found = true
			require.Equal(t, "text-chunks", r.Type)
			require.Equal(t, sql.NullInt64{Int64: 1, Valid: true}, r.Ignorable)
		}
	}
	require.True(t, found)
}

// watchedCtx is a cancellable context that counts the calls of Done (what
// the driver calls to decide whether to watch a statement with a
// goroutine of its own) and, when errAfter is not negative, reports
// itself cancelled from its errAfter+1th call of Err on.
type watchedCtx struct {
	context.Context
	dones, errs atomic.Int64
	errAfter    int64
}

func newWatchedCtx(t *testing.T, errAfter int64) *watchedCtx {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &watchedCtx{Context: ctx, errAfter: errAfter}
}

func (c *watchedCtx) Done() <-chan struct{} {
	c.dones.Add(1)
	return c.Context.Done()
}

func (c *watchedCtx) Err() error {
	if n := c.errs.Add(1); c.errAfter >= 0 && n > c.errAfter {
		return context.Canceled
	}
	return c.Context.Err()
}

// TestSQLiteReadsCheckTheirContextBetweenSteps: Load, Inspect, ReadFrom
// and List run their statements on a context the driver does not watch
// (no goroutine per statement: Done is never called), and check the
// caller's context between statements and along a long read instead:
// cancelled at any of those checks, the read fails with the context's
// error.
func TestSQLiteReadsCheckTheirContextBetweenSteps(t *testing.T) {
	s := openTestSQLite(t, filepath.Join(t.TempDir(), "s.sqlite"), SQLiteOptions{})
	defer s.Close()
	b := newLogBuilder(t, "session-steps")
	for range 3 * readCheckRows / 8 { // about three checks' worth of rows
		b.textTurn("more", "ok")
	}
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(t.Context(), b.id(), b.events(), Sync))
	reads := map[string]func(ctx context.Context) error{
		"load":    func(ctx context.Context) error { _, err := s.Load(ctx, b.id()); return err },
		"inspect": func(ctx context.Context) error { _, err := s.Inspect(ctx, b.id()); return err },
		"read":    func(ctx context.Context) error { _, err := s.ReadFrom(ctx, b.id(), 5); return err },
		"list":    func(ctx context.Context) error { _, err := s.List(ctx); return err },
	}
	for name, read := range reads {
		ctx := newWatchedCtx(t, -1)
		require.NoError(t, read(ctx), name)
		require.Zero(t, ctx.dones.Load(), "%s: no statement ran on the cancellable context", name)
		checks := ctx.errs.Load()
		require.Positive(t, checks, name)
		for n := range checks {
			ctx := newWatchedCtx(t, n)
			require.ErrorIs(t, read(ctx), context.Canceled, "%s cancelled at check %d of %d", name, n+1, checks)
		}
	}
	requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)
}

// TestSQLiteRowBufferIsReused: the store inserts every append's rows from
// one buffer (rowInserter.rows), emptied but kept after each insert, so
// that an append of no more rows than the last one allocates none. It
// was sliced past the rows inserted instead, which left it no capacity:
// every session's rows allocated it again.
func TestSQLiteRowBufferIsReused(t *testing.T) {
	ctx := t.Context()
	s := openTestSQLite(t, filepath.Join(t.TempDir(), "s.sqlite"), SQLiteOptions{})
	defer s.Close()
	b := newLogBuilder(t, "session-rows")
	b.textTurn("one", "1")
	k := b.len()
	b.textTurn("two", "2")
	require.LessOrEqual(t, b.len()-k, k, "the second turn has no more events (rows) than the first")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:k], Sync))
	require.Empty(t, s.inserter.rows, "emptied after the insert")
	require.GreaterOrEqual(t, cap(s.inserter.rows), int(k), "but its capacity kept")
	first := s.inserter.rows[:1]
	require.NoError(t, s.Append(ctx, b.id(), b.from(k), Sync))
	require.Same(t, &first[0], &s.inserter.rows[:1][0], "the second append's rows went in the same array")
	requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)
}
