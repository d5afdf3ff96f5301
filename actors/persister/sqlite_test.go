package persister

import (
	"database/sql"
	"path/filepath"
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
