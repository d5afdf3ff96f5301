package persister

import (
	"context"
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
	for _, name := range []string{"sqlite", "sqlite-delete-journal"} {
		notApplicable[name] = map[string]bool{
			// Every SQLite append commits with synchronous=FULL: an append
			// without durable is durable too (a barrier may cover more than
			// it must), so a failed append has nothing to cut back.
			// TestSQLiteFailedAppendKeepsEveryCommittedAppend checks what
			// happens instead.
			"a failed append cuts back to the last barrier": true,
		}
	}
}

func openTestSQLite(t *testing.T, path string, opts SQLiteOptions) *SQLiteStore {
	t.Helper()
	s, err := OpenSQLite(path, opts)
	require.NoError(t, err)
	return s
}

// A failed append (here its context is done) stores nothing of its batch
// and leaves every append that returned before it, with or without
// durable: they were committed durably, so appending the failed batch
// again continues after them.
func TestSQLiteFailedAppendKeepsEveryCommittedAppend(t *testing.T) {
	ctx := t.Context()
	s := openTestSQLite(t, filepath.Join(t.TempDir(), "s.sqlite"), SQLiteOptions{})
	defer s.Close()
	b := newLogBuilder(t, "session-cut")
	b.textTurn("one", "1")
	k1 := b.len()
	b.textTurn("two", "2")
	k2 := b.len()
	b.textTurn("three", "3")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:k1], true))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[k1:k2], false))
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, s.Append(done, b.id(), b.from(k2), true), context.Canceled)
	got, err := s.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, b.events()[:k2], got)
	require.NoError(t, s.Append(ctx, b.id(), b.from(k2), true))
	requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)
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
	require.NoError(t, s.Append(ctx, b.id(), b.events(), true))
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
