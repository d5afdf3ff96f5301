package persister

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// makeDB creates a database with setup run on a fresh file (or, with
// dsh, on a database dsh initialized and closed).
func makeDB(t *testing.T, dsh bool, setup ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	if dsh {
		s := openTestSQLite(t, path, SQLiteOptions{})
		require.NoError(t, s.Close())
	} else {
		require.NoError(t, os.WriteFile(path, nil, 0o600))
	}
	if len(setup) > 0 {
		db, err := sql.Open("sqlite", sqlURI(path, ""))
		require.NoError(t, err)
		for _, q := range setup {
			_, err := db.Exec(q)
			require.NoError(t, err, q)
		}
		require.NoError(t, db.Close())
	}
	return path
}

// Files that are not a session database this build can use are refused at
// open with one line, and left byte for byte as they were.
func TestSQLiteRefusesIncompatibleDatabases(t *testing.T) {
	events := `CREATE TABLE events (
  session_id        TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  seq               INTEGER NOT NULL,
  type              TEXT NOT NULL,
  time              INTEGER NOT NULL,
  data              ANY NOT NULL,
  source_event_seqs ANY,
  surface_op        TEXT,
  ignorable         INTEGER CHECK (ignorable IS NULL OR ignorable IN (0, 1)),
  PRIMARY KEY (session_id, seq)
)`
	cases := []struct {
		name  string
		path  func(t *testing.T) string
		words string
	}{
		{"not SQLite", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "s.sqlite")
			require.NoError(t, os.WriteFile(path, []byte(strings.Repeat("this is not a database\n", 300)), 0o600))
			return path
		}, "is not a SQLite database"},
		{"another application's database", func(t *testing.T) string {
			return makeDB(t, false, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
		}, "has an unversioned schema or application identity"},
		{"another application id, unversioned", func(t *testing.T) string {
			return makeDB(t, false, "PRAGMA application_id = 7")
		}, "has an unversioned schema or application identity"},
		{"an older schema", func(t *testing.T) string { return makeDB(t, true, "PRAGMA user_version = 16") },
			"has schema version 16, incompatible with this build (17)"},
		{"a newer schema", func(t *testing.T) string { return makeDB(t, true, "PRAGMA user_version = 18") },
			"has schema version 18, incompatible with this build (17)"},
		{"another application id", func(t *testing.T) string { return makeDB(t, true, "PRAGMA application_id = 1") },
			"has application id 1, expected 1146308688"},
		{"an added column", func(t *testing.T) string { return makeDB(t, true, "ALTER TABLE events ADD COLUMN extra TEXT") },
			"does not contain the required schema objects"},
		{"an extra index", func(t *testing.T) string { return makeDB(t, true, "CREATE INDEX events_by_type ON events(type)") },
			"does not contain the required schema objects"},
		{"a non-STRICT events table", func(t *testing.T) string {
			return makeDB(t, true, "DROP TABLE events", events)
		}, "does not contain the required schema objects"},
		{"strict in lower case", func(t *testing.T) string {
			return makeDB(t, true, "DROP TABLE events", events+" strict")
		}, "does not contain the required schema objects"},
		{"no space before a column list", func(t *testing.T) string {
			return makeDB(t, true, "DROP TABLE persistence_state", "CREATE TABLE persistence_state (singleton INTEGER PRIMARY KEY CHECK (singleton = 1), store_id TEXT NOT NULL) STRICT")
		}, "does not contain the required schema objects"},
		{"an empty store id", func(t *testing.T) string { return makeDB(t, true, "UPDATE persistence_state SET store_id = ''") },
			"has no valid store identity"},
		{"no store id", func(t *testing.T) string { return makeDB(t, true, "DELETE FROM persistence_state") },
			"has no valid store identity"},
		{"a store id that is not a UUID", func(t *testing.T) string {
			return makeDB(t, true, "UPDATE persistence_state SET store_id = 'not-a-uuid'")
		}, "has no valid store identity"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.path(t)
			before := fileSum(t, path)
			for _, ro := range []bool{false, true} {
				_, err := OpenSQLite(path, SQLiteOptions{ReadOnly: ro})
				require.ErrorIs(t, err, ErrIncompatible)
				require.ErrorContains(t, err, fmt.Sprintf("persister: session database at %q %s", path, c.words))
				require.NotContains(t, err.Error(), "\n")
				require.Equal(t, before, fileSum(t, path), "a refused open changes nothing")
			}
		})
	}
}

// The checks of the file's path: a directory, a symbolic link (to the file
// or as its parent), a file readable by others, a parent writable by its
// group, a parent that is a file.
func TestSQLiteRefusesUnsafePaths(t *testing.T) {
	good := func(t *testing.T) string {
		path := filepath.Join(t.TempDir(), "s.sqlite")
		s := openTestSQLite(t, path, SQLiteOptions{})
		require.NoError(t, s.Close())
		return path
	}
	cases := []struct {
		name  string
		path  func(t *testing.T) string
		words string
	}{
		{"a directory", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "s.sqlite")
			require.NoError(t, os.Mkdir(path, 0o700))
			return path
		}, "is not a regular file"},
		{"a symbolic link", func(t *testing.T) string {
			link := filepath.Join(t.TempDir(), "link.sqlite")
			require.NoError(t, os.Symlink(good(t), link))
			return link
		}, "is a symbolic link, not a regular file"},
		{"a symbolic link as parent", func(t *testing.T) string {
			real := good(t)
			link := filepath.Join(t.TempDir(), "dir")
			require.NoError(t, os.Symlink(filepath.Dir(real), link))
			return filepath.Join(link, filepath.Base(real))
		}, "that is not a real directory"},
		{"a file others may read", func(t *testing.T) string {
			path := good(t)
			require.NoError(t, os.Chmod(path, 0o644))
			return path
		}, "must be owned by the current user and accessible only by that user (mode 0644)"},
		{"a parent its group may write", func(t *testing.T) string {
			path := good(t)
			require.NoError(t, os.Chmod(filepath.Dir(path), 0o770))
			return path
		}, "or is group- or world-writable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := c.path(t)
			for _, ro := range []bool{false, true} {
				_, err := OpenSQLite(path, SQLiteOptions{ReadOnly: ro})
				require.ErrorIs(t, err, ErrIncompatible)
				require.ErrorContains(t, err, c.words)
			}
		})
	}
	t.Run("a parent that is a file", func(t *testing.T) {
		parent := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(parent, nil, 0o600))
		_, err := OpenSQLite(filepath.Join(parent, "s.sqlite"), SQLiteOptions{})
		require.ErrorContains(t, err, "not a directory")
	})
	t.Run("a path with a NUL byte", func(t *testing.T) {
		_, err := OpenSQLite(filepath.Join(t.TempDir(), "s\x00.sqlite"), SQLiteOptions{})
		require.ErrorContains(t, err, "is not a valid path")
	})
	t.Run("a read-only open of nothing", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "s.sqlite")
		_, err := OpenSQLite(path, SQLiteOptions{ReadOnly: true})
		require.ErrorIs(t, err, os.ErrNotExist)
		_, err = os.Stat(path)
		require.ErrorIs(t, err, os.ErrNotExist, "a read-only open creates nothing")
	})
}

// One dsh writer per database: a second writer is refused at once naming
// the holder; a reader opens beside it; closing lets the next writer in.
func TestSQLiteWriterLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	_, err := OpenSQLite(path, SQLiteOptions{})
	var le *DatabaseLockedError
	require.ErrorAs(t, err, &le)
	require.ErrorIs(t, err, ErrLocked)
	require.Equal(t, fmt.Sprintf("persister: session database %s is in use by pid %d on", path, os.Getpid()),
		err.Error()[:len(fmt.Sprintf("persister: session database %s is in use by pid %d on", path, os.Getpid()))])
	r := openTestSQLite(t, path, SQLiteOptions{ReadOnly: true})
	require.ErrorIs(t, r.Create(storeTestHeader("session-ro")), ErrReadOnly)
	require.NoError(t, r.Close())
	require.NoError(t, s.Close())
	s2 := openTestSQLite(t, path, SQLiteOptions{})
	require.NoError(t, s2.Close())
}

// A database another SQLite client holds locked (BEGIN IMMEDIATE): an
// append fails with one clear line after the busy timeout, changing
// nothing, and succeeds once the other client commits, also while it
// waits.
func TestSQLiteBusyDatabase(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{BusyTimeout: 50 * time.Millisecond})
	defer s.Close()
	b := newLogBuilder(t, "session-busy")
	b.textTurn("one", "1")
	n := b.len()
	b.textTurn("two", "2")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:n], Sync))
	rev := revisionOf(t, s, b.id())

	other := rawDB(t, path)
	conn, err := other.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	err = s.Append(ctx, b.id(), b.from(n), Sync)
	require.ErrorContains(t, err, fmt.Sprintf("persister: append %s: persister: session database at %q is locked by another writer (waited 50ms)", b.id(), path))
	require.NotContains(t, err.Error(), "\n")
	require.Equal(t, rev, revisionOf(t, s, b.id()))
	_, err = conn.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	require.NoError(t, s.Append(ctx, b.id(), b.from(n), Sync))
	requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)

	// A writer with a longer timeout waits the other client out.
	w := openTestSQLite(t, filepath.Join(t.TempDir(), "w.sqlite"), SQLiteOptions{BusyTimeout: 10 * time.Second})
	defer w.Close()
	other = rawDB(t, w.Path())
	conn2, err := other.Conn(ctx)
	require.NoError(t, err)
	defer conn2.Close()
	_, err = conn2.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	require.NoError(t, w.Create(b.header()))
	done := make(chan error, 1)
	go func() { done <- w.Append(ctx, b.id(), b.events(), Sync) }()
	_, err = conn2.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	require.NoError(t, <-done)
}

// Two stores writing one database (as two reference processes can; dsh
// excludes it with the writer lock, turned off here): the stale one's
// append is fenced by the tail check and the winner's rows stay.
func TestSQLiteStaleWriterIsFenced(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	a := openTestSQLite(t, path, SQLiteOptions{NoWriterLock: true})
	defer a.Close()
	b := openTestSQLite(t, path, SQLiteOptions{NoWriterLock: true})
	defer b.Close()
	lb := newLogBuilder(t, "session-stale")
	lb.textTurn("one", "1")
	require.NoError(t, a.Create(lb.header()))
	require.NoError(t, a.Append(ctx, lb.id(), lb.events()[:1], Sync))
	require.NoError(t, a.Append(ctx, lb.id(), lb.events()[1:2], Sync))
	err := b.Append(ctx, lb.id(), lb.events()[1:3], Sync)
	requireFenced(t, err, lb.id(), 2, 1)
	got, err := b.ReadFrom(ctx, lb.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, lb.events()[:2], got)
}

// The ownership checks run again in every mutation: a schema version or
// application id changed behind an open store refuses its next append.
func TestSQLiteOwnershipChecksAtMutation(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	defer s.Close()
	b := newLogBuilder(t, "session-own")
	b.textTurn("one", "1")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:2], Sync))
	db := rawDB(t, path)
	mustExec(t, db, "PRAGMA user_version = 16")
	err := s.Append(ctx, b.id(), b.from(2), Sync)
	require.ErrorIs(t, err, ErrIncompatible)
	require.ErrorContains(t, err, "schema changed before mutation")
	mustExec(t, db, "PRAGMA user_version = 17")
	mustExec(t, db, "PRAGMA application_id = 5")
	err = s.Append(ctx, b.id(), b.from(2), Sync)
	require.ErrorContains(t, err, "application id changed before mutation")
	mustExec(t, db, fmt.Sprintf("PRAGMA application_id = %d", sqlAppID))
	mustExec(t, db, "CREATE INDEX extra ON events(type)")
	err = s.Append(ctx, b.id(), b.from(2), Sync)
	require.ErrorContains(t, err, "does not contain the required schema objects")
	mustExec(t, db, "DROP INDEX extra")
	require.NoError(t, s.Append(ctx, b.id(), b.from(2), Sync))
	requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)
}

// A repair computed from a tail that changed before it commits (another
// writer repaired and appended meanwhile) is refused and deletes nothing.
func TestSQLiteStaleRepairIsRefused(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	defer s.Close()
	b := newLogBuilder(t, "session-stale-repair")
	b.textTurn("one", "1")
	n := b.len()
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
	db := rawDB(t, path)
	plantRow(t, db, b.id(), n, "assistant/chunk", "{torn", nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	// The winner repaired (deleted the torn row) and appended since.
	mustExec(t, db, `DELETE FROM events WHERE seq = ?`, n)
	next := restoreBuilder(t, b.header(), b.events())
	next.textTurn("two", "2")
	for _, e := range next.from(n) {
		r, err := scalarRow(e)
		require.NoError(t, err)
		mustExec(t, db, `INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			string(b.id()), r.seq, r.typ, r.time, r.data, r.sources, nullString(r.op))
	}
	err := s.inTx(ctx, "BEGIN IMMEDIATE", func() error { return s.repairTx(ctx, s.conn, b.id(), n, nil) })
	var fe *FenceError
	require.ErrorAs(t, err, &fe)
	var count int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM events`).Scan(&count))
	require.Equal(t, int(next.len()), count, "the stale repair deleted nothing")
	err = s.inTx(ctx, "BEGIN IMMEDIATE", func() error { return s.repairTx(ctx, s.conn, "session-missing", -1, nil) })
	require.ErrorContains(t, err, "metadata row is missing")
}
