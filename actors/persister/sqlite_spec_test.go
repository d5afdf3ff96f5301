package persister

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// The behaviours the reference's own SQLite tests check, and dsh's
// refusals, on real database files.

// rawDB opens a second, plain connection to the database at path (another
// SQLite client, as the reference would be).
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", sqlURI(path, "_pragma=busy_timeout(5000)"))
	require.NoError(t, err)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func mustExec(t *testing.T, db *sql.DB, query string, args ...any) {
	t.Helper()
	_, err := db.Exec(query, args...)
	require.NoError(t, err, query)
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha256.Sum256(b)
}

// chunkTurn appends an open turn whose step streams: a block-start, n text
// deltas, a block-end.
func chunkTurn(b *logBuilder, n int) (turn int64) {
	turn = b.beginTurn("stream")
	b.beginStep(turn, 1)
	b.add(session.AssistantChunk{Turn: turn, Step: 1, Chunk: messages.BlockStartChunk(0, messages.BlockText)}.Draft())
	var text strings.Builder
	for i := range n {
		piece := fmt.Sprintf("piece %d ", i)
		text.WriteString(piece)
		b.add(session.AssistantChunk{Turn: turn, Step: 1, Chunk: messages.TextDeltaChunk(0, piece)}.Draft())
	}
	b.add(session.AssistantChunk{Turn: turn, Step: 1, Chunk: messages.BlockEndChunk(0, messages.TextBlock(text.String()))}.Draft())
	return turn
}

type rowID struct {
	rowid, seq int64
	typ        string
}

func rowIDs(t *testing.T, db *sql.DB) []rowID {
	t.Helper()
	rows, err := db.Query(`SELECT rowid, seq, type FROM events ORDER BY seq`)
	require.NoError(t, err)
	defer rows.Close()
	var out []rowID
	for rows.Next() {
		var r rowID
		require.NoError(t, rows.Scan(&r.rowid, &r.seq, &r.typ))
		out = append(out, r)
	}
	return out
}

// Appends of 3, 1 and 100 events make 7 rows, one of them packed; an
// append never touches earlier rows; a read from inside the packed row
// starts at the right event.
func TestSQLitePacksEachAppendOnceAndSeeksInsidePackedRows(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	defer s.Close()
	b := newLogBuilder(t, "session-pack")
	chunkTurn(b, 98) // 0 turn/start, 1 user, 2 step/start, 3 request/header, 4 block-start, 5..102 deltas, 103 block-end
	require.Equal(t, int64(104), b.len())
	require.NoError(t, s.Create(b.header()))
	db := rawDB(t, path)
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:3], false))
	first := rowIDs(t, db)
	require.NoError(t, s.Append(ctx, b.id(), b.events()[3:4], true))
	require.Equal(t, first, rowIDs(t, db)[:3])
	second := rowIDs(t, db)
	require.NoError(t, s.Append(ctx, b.id(), b.events()[4:], true))
	all := rowIDs(t, db)
	require.Len(t, all, 7)
	require.Equal(t, second, all[:4], "earlier rows keep their rowids")
	require.Equal(t, rowID{all[5].rowid, 5, sqlTagText}, all[5])
	for _, from := range []int64{0, 2, 25, 101, 104, 105} {
		got, err := s.ReadFrom(ctx, b.id(), from)
		require.NoError(t, err)
		if from >= 104 {
			require.Empty(t, got)
			continue
		}
		requireSameEvents(t, b.from(from), got)
	}
	uv, err := pragmaInt(ctx, db, "user_version")
	require.NoError(t, err)
	require.Equal(t, int64(17), uv)
}

// A database dsh writes has the reference's identity, schema text,
// pragmas and row encodings, checked with SQL against the closed file.
func TestSQLiteDatabaseHasTheReferenceFormat(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	b := newLogBuilder(t, "session-format")
	b.textTurn("hello", "hi")
	n := b.len()
	b.toolTurn("call-1")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:n], true))
	require.NoError(t, s.Append(ctx, b.id(), b.from(n), false))
	require.NoError(t, s.Close())

	for _, leftover := range []string{path + "-wal", path + "-shm"} {
		_, err := os.Stat(leftover)
		require.ErrorIs(t, err, os.ErrNotExist, "closing checkpoints and removes %s", leftover)
	}
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "SQLite format 3\x00", string(raw[:16]))
	require.Equal(t, []byte{2, 2}, raw[18:20], "WAL journal mode, in the header")
	require.Equal(t, uint32(17), binary.BigEndian.Uint32(raw[60:64]), "user_version")
	require.Equal(t, uint32(0x44534850), binary.BigEndian.Uint32(raw[68:72]), "application_id DSHP")

	db := rawDB(t, path)
	rows, err := db.Query(`SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name`)
	require.NoError(t, err)
	var objects []string
	var ddl []string
	for rows.Next() {
		var typ, name, tbl string
		var text sql.NullString
		require.NoError(t, rows.Scan(&typ, &name, &tbl, &text))
		objects = append(objects, typ+" "+name)
		if text.Valid {
			ddl = append(ddl, text.String)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"index sqlite_autoindex_events_1", "index sqlite_autoindex_sessions_1",
		"table events", "table persistence_state", "table sessions"}, objects)
	require.ElementsMatch(t, sqlDDL, ddl, "the reference's DDL, verbatim")

	var singleton int
	var storeID string
	require.NoError(t, db.QueryRow(`SELECT singleton, store_id FROM persistence_state`).Scan(&singleton, &storeID))
	require.Equal(t, 1, singleton)
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, storeID)

	var version, created, depth, revision int64
	var cwd, incarnation string
	var parent, seed, origin, preset any
	require.NoError(t, db.QueryRow(`SELECT version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision FROM sessions WHERE id = ?`,
		string(b.id())).Scan(&version, &created, &cwd, &parent, &seed, &origin, &depth, &preset, &incarnation, &revision))
	require.Equal(t, int64(0), version)
	require.Equal(t, b.header().CreatedAt, created)
	require.Equal(t, b.header().Cwd, cwd)
	require.Nil(t, parent)
	require.Nil(t, seed)
	require.Nil(t, origin)
	require.Nil(t, preset)
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4`, incarnation)
	require.Equal(t, int64(2), revision, "one per append")

	// Row encodings: data is the event's JSON text, surface_op the op's
	// JSON, provenance a varint BLOB, ignorable NULL on scalar rows.
	got := physicalRows(t, path, b.id())
	require.Len(t, got, len(b.events()))
	for i, e := range b.events() {
		r := got[i]
		require.Equal(t, e.Seq(), r.Seq)
		require.Equal(t, string(e.Type()), r.Type)
		require.Equal(t, e.Time(), r.Time)
		require.Equal(t, e.Data().String(), r.Data)
		require.False(t, r.Blob)
		require.False(t, r.Ignorable.Valid)
		if op := e.SurfaceOp(); op.Kind() != session.OpNone {
			require.Equal(t, op.JSON().String(), r.SurfaceOp.String)
		} else {
			require.False(t, r.SurfaceOp.Valid)
		}
		if src, has := e.SourceEventSeqs(); has {
			enc, err := appendSources(nil, src)
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("%X", enc), r.Sources)
		} else {
			require.Equal(t, "null", r.Sources)
		}
	}
}

// Opening for writing selects the journal mode asked for, and every open
// reads back trusted_schema 0, mmap_size 0 and synchronous FULL (2).
func TestSQLiteJournalModesAndPragmas(t *testing.T) {
	ctx := t.Context()
	for _, mode := range []string{"wal", "delete", "truncate", "persist", "WAL", ""} {
		t.Run(mode, func(t *testing.T) {
			s := openTestSQLite(t, filepath.Join(t.TempDir(), "s.sqlite"), SQLiteOptions{JournalMode: mode})
			defer s.Close()
			var got string
			require.NoError(t, s.conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&got))
			want := strings.ToLower(mode)
			if want == "" {
				want = "wal"
			}
			require.Equal(t, want, got)
			for name, want := range map[string]int64{"trusted_schema": 0, "mmap_size": 0, "synchronous": 2, "foreign_keys": 1} {
				v, err := pragmaInt(ctx, s.conn, name)
				require.NoError(t, err)
				require.Equal(t, want, v, name)
			}
		})
	}
	_, err := OpenSQLite(filepath.Join(t.TempDir(), "s.sqlite"), SQLiteOptions{JournalMode: "memory"})
	require.ErrorContains(t, err, `journal mode "memory"`)
}

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
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:n], true))
	rev := revisionOf(t, s, b.id())

	other := rawDB(t, path)
	conn, err := other.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	err = s.Append(ctx, b.id(), b.from(n), true)
	require.ErrorContains(t, err, fmt.Sprintf("persister: append %s: persister: session database at %q is locked by another writer (waited 50ms)", b.id(), path))
	require.NotContains(t, err.Error(), "\n")
	require.Equal(t, rev, revisionOf(t, s, b.id()))
	_, err = conn.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	require.NoError(t, s.Append(ctx, b.id(), b.from(n), true))
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
	go func() { done <- w.Append(ctx, b.id(), b.events(), true) }()
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
	require.NoError(t, a.Append(ctx, lb.id(), lb.events()[:1], true))
	require.NoError(t, a.Append(ctx, lb.id(), lb.events()[1:2], true))
	err := b.Append(ctx, lb.id(), lb.events()[1:3], true)
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
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:2], true))
	db := rawDB(t, path)
	mustExec(t, db, "PRAGMA user_version = 16")
	err := s.Append(ctx, b.id(), b.from(2), true)
	require.ErrorIs(t, err, ErrIncompatible)
	require.ErrorContains(t, err, "schema changed before mutation")
	mustExec(t, db, "PRAGMA user_version = 17")
	mustExec(t, db, "PRAGMA application_id = 5")
	err = s.Append(ctx, b.id(), b.from(2), true)
	require.ErrorContains(t, err, "application id changed before mutation")
	mustExec(t, db, fmt.Sprintf("PRAGMA application_id = %d", sqlAppID))
	mustExec(t, db, "CREATE INDEX extra ON events(type)")
	err = s.Append(ctx, b.id(), b.from(2), true)
	require.ErrorContains(t, err, "does not contain the required schema objects")
	mustExec(t, db, "DROP INDEX extra")
	require.NoError(t, s.Append(ctx, b.id(), b.from(2), true))
	requireSameEvents(t, b.events(), loadBalanced(t, s, b.id()).Events)
}

// Every optional header field round-trips through the session row; a row
// with an invalid field fails List, Load and ReadFrom with corruption.
func TestSQLiteSessionRows(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	defer s.Close()
	h := session.Header{ID: "session-full", CreatedAt: 5, Cwd: "/srv/work", ParentSession: "session-parent",
		SeedLength: messages.Some(int64(3)), Origin: "subagent", DelegationDepth: 2, AgentPreset: "reviewer"}
	b := restoreBuilder(t, h, nil)
	b.textTurn("one", "1")
	require.NoError(t, s.Create(h))
	require.NoError(t, s.Append(ctx, h.ID, b.events(), true))
	require.Equal(t, h, loadBalanced(t, s, h.ID).Header)
	listed, err := s.List(ctx)
	require.NoError(t, err)
	require.Equal(t, h, listed[0].Header)

	db := rawDB(t, path)
	var inc string
	require.NoError(t, db.QueryRow(`SELECT incarnation FROM sessions`).Scan(&inc))
	restore := fmt.Sprintf(`UPDATE sessions SET created_at = 5, origin = 'subagent', delegation_depth = 2, seed_length = 3,
  cwd = '/srv/work', incarnation = '%s', version = 0`, inc)
	for _, bad := range []string{"created_at = -1", "origin = 'parent'", "delegation_depth = -1", "seed_length = -2",
		"cwd = 'relative/dir'", "incarnation = 'x'", "version = 1"} {
		mustExec(t, db, "UPDATE sessions SET "+bad)
		_, err := s.List(ctx)
		require.Error(t, err, bad)
		_, err = s.Load(ctx, h.ID)
		require.Error(t, err, bad)
		if bad == "version = 1" {
			var fv *session.FormatVersionError
			require.ErrorAs(t, err, &fv)
		} else {
			require.True(t, IsCorruption(err), "%s: %v", bad, err)
		}
		mustExec(t, db, restore)
	}
	require.Equal(t, h, loadBalanced(t, s, h.ID).Header)
}

// An empty append writes nothing: no session row, no revision bump.
func TestSQLiteEmptyAppendIsInert(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	defer s.Close()
	b := newLogBuilder(t, "session-empty")
	b.textTurn("one", "1")
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), nil, true))
	db := rawDB(t, path)
	var n int
	require.NoError(t, db.QueryRow("SELECT count(*) FROM sessions").Scan(&n))
	require.Zero(t, n)
	require.NoError(t, s.Append(ctx, b.id(), b.events(), true))
	rev := revisionOf(t, s, b.id())
	require.NoError(t, s.Append(ctx, b.id(), nil, true))
	require.Equal(t, rev, revisionOf(t, s, b.id()))
}

// plantRow inserts an event row behind the store's back.
func plantRow(t *testing.T, db *sql.DB, id session.SessionID, seq int64, typ string, data any, ignorable any) {
	t.Helper()
	mustExec(t, db, `INSERT INTO events (session_id, seq, type, time, data, ignorable) VALUES (?, ?, ?, ?, ?, ?)`,
		string(id), seq, typ, storeTestNow, data, ignorable)
}

// A read from inside a packed row anchors at it: a stray scalar row hidden
// behind it is a torn start, and a malformed packed row that may cover the
// read's start fails it closed (nothing is read past it).
func TestSQLiteReadFromAnchorsAtPackedRows(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	defer s.Close()
	b := newLogBuilder(t, "session-anchor")
	turn := b.beginTurn("go")
	b.beginStep(turn, 1)
	for i := range 3 {
		b.add(session.AssistantChunk{Turn: turn, Step: 1, Chunk: messages.TextDeltaChunk(0, fmt.Sprint(i))}.Draft())
	}
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:4], true))
	require.NoError(t, s.Append(ctx, b.id(), b.from(4), true)) // one packed row at seq 4
	db := rawDB(t, path)
	// A stray scalar at seq 5, hidden behind the packed row 4..6.
	plantRow(t, db, b.id(), 5, "assistant/chunk", b.events()[5].Data().String(), nil)
	got, err := s.ReadFrom(ctx, b.id(), 6)
	require.NoError(t, err)
	requireSameEvents(t, b.from(6), got)
	in, err := s.Inspect(ctx, b.id())
	require.NoError(t, err)
	require.Equal(t, int64(5), in.Torn.Offset)
	requireSameEvents(t, b.events(), in.Events[:7])

	mustExec(t, db, `DELETE FROM events WHERE seq = 5`)
	mustExec(t, db, `UPDATE events SET data = '{"turn":1' WHERE seq = 4`)
	got, err = s.ReadFrom(ctx, b.id(), 6)
	require.NoError(t, err)
	require.Empty(t, got)
}

// Torn tail versus committed corruption: a bad row with no turn/end after
// it is a torn tail (Inspect drops it, Load deletes it and closes the
// turn, and appends go on after the closers); a bad row followed by a
// turn/end is corruption, never repaired.
func TestSQLiteTornTailAndCorruption(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "s.sqlite")
	s := openTestSQLite(t, path, SQLiteOptions{})
	defer s.Close()
	b := newLogBuilder(t, "session-torn")
	b.textTurn("one", "1")
	turn := b.beginTurn("two")
	b.beginStep(turn, 1)
	n := b.len()
	require.NoError(t, s.Create(b.header()))
	require.NoError(t, s.Append(ctx, b.id(), b.events(), true))
	db := rawDB(t, path)
	plantRow(t, db, b.id(), n, "assistant/chunk", "{not valid json", nil)
	rev := revisionOf(t, s, b.id())

	in, err := s.Inspect(ctx, b.id())
	require.NoError(t, err)
	require.NotNil(t, in.Torn)
	require.Equal(t, n, in.Torn.Offset)
	require.Len(t, in.Closers, 2)
	require.Equal(t, rev, revisionOf(t, s, b.id()))
	more := restoreBuilder(t, b.header(), b.events())
	more.add(session.AssistantChunk{Turn: turn, Step: 1, Chunk: messages.TextDeltaChunk(0, "late")}.Draft())
	err = s.Append(ctx, b.id(), more.from(n), true)
	require.ErrorContains(t, err, fmt.Sprintf("session %s has an invalid physical tail at seq %d", b.id(), n))
	require.True(t, IsCorruption(err))

	loaded, err := s.Load(ctx, b.id())
	require.NoError(t, err)
	require.Len(t, loaded.Closers, 2)
	require.Equal(t, n, loaded.Closers[0].Seq())
	requireInterruptedEnd(t, loaded.Closers[1], turn)
	require.NotEqual(t, rev, loaded.Revision)
	stored, err := s.ReadFrom(ctx, b.id(), 0)
	require.NoError(t, err)
	requireSameEvents(t, loaded.Events, stored)
	next := restoreBuilder(t, b.header(), loaded.Events)
	next.textTurn("three", "3")
	require.NoError(t, s.Append(ctx, b.id(), next.from(n+2), true))
	requireSameEvents(t, next.events(), loadBalanced(t, s, b.id()).Events)

	// Damage before the last turn/end: corruption, for every reader.
	mustExec(t, db, `UPDATE events SET data = 7 WHERE seq = 2`)
	_, err = s.Load(ctx, b.id())
	require.True(t, IsCorruption(err), "%v", err)
	require.ErrorContains(t, err, "invalid committed physical row at seq 2")
	_, err = s.Inspect(ctx, b.id())
	require.True(t, IsCorruption(err))
	_, err = s.ReadFrom(ctx, b.id(), 0)
	require.True(t, IsCorruption(err))
	err = s.Append(ctx, b.id(), nil, true)
	require.NoError(t, err, "an empty append reads nothing")
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
	require.NoError(t, s.Append(ctx, b.id(), b.events(), true))
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

// packed runs packRows over events and returns the rows.
func packed(t *testing.T, events []session.Event) []sqlRow {
	t.Helper()
	var rows []sqlRow
	require.NoError(t, packRows(events, func(r sqlRow) error { rows = append(rows, r); return nil }))
	// Every row decodes back to its events, and together they are the batch.
	var back []session.Event
	for _, r := range rows {
		var err error
		back, err = decodeSQLRow(back, r)
		require.NoError(t, err)
	}
	requireSameEvents(t, events, back)
	return rows
}

func rowShape(rows []sqlRow) []string {
	var out []string
	for _, r := range rows {
		n := 1
		if r.ignorable == 0 {
			text, _ := dataText(r.data, sqlMaxPackedData, sqlPackedDecoder())
			j := messages.MustParseJSON(string(text))
			key := "texts"
			if r.typ == sqlTagToolCall {
				key = "args"
			}
			v, _ := j.Field(key)
			n = 0
			for range v.Elements() {
				n++
			}
		}
		out = append(out, fmt.Sprintf("%s:%d", r.typ, n))
	}
	return out
}

// chunkEvents builds a step's chunk events with mk, after the turn's
// scalar prologue (returned separately).
func chunkEvents(t *testing.T, n int, mk func(i int) messages.StreamChunk) (prologue, chunks []session.Event) {
	b := newLogBuilder(t, "session-chunks")
	turn := b.beginTurn("go")
	b.beginStep(turn, 1)
	k := b.len()
	for i := range n {
		b.add(session.AssistantChunk{Turn: turn, Step: 1, Chunk: mk(i)}.Draft())
	}
	return b.events()[:k], b.from(k)
}

// The partition of runs: at most 1024 members a row, at most 1 MiB of
// data, at least 3 members (shorter leftovers and members too large alone
// stay scalar); every kind packs; named and unnamed tool runs stay apart.
func TestSQLitePackingPartition(t *testing.T) {
	text := func(size int) func(int) messages.StreamChunk {
		return func(i int) messages.StreamChunk { return messages.TextDeltaChunk(0, strings.Repeat("x", size)) }
	}
	cases := []struct {
		name string
		n    int
		mk   func(int) messages.StreamChunk
		want []string
	}{
		{"100 members", 100, text(3), []string{"text-chunks:100"}},
		{"1027 members", 1027, text(1), []string{"text-chunks:1024", "text-chunks:3"}},
		{"1025 members", 1025, text(1), []string{"text-chunks:1024", "assistant/chunk:1"}},
		{"4 x 300 KB", 4, text(300 << 10), []string{"text-chunks:3", "assistant/chunk:1"}},
		{"3 x 400 KB", 3, text(400 << 10), []string{"assistant/chunk:1", "assistant/chunk:1", "assistant/chunk:1"}},
		{"2 members", 2, text(1), []string{"assistant/chunk:1", "assistant/chunk:1"}},
		{"reasoning", 5, func(i int) messages.StreamChunk { return messages.ReasoningDeltaChunk(0, "r") }, []string{"reasoning-chunks:5"}},
		{"named tool", 4, func(i int) messages.StreamChunk { return messages.NamedToolCallDeltaChunk(1, "call-1", "shell", "{") },
			[]string{"tool-call-chunks:4"}},
		{"named first, then unnamed", 5, func(i int) messages.StreamChunk {
			if i == 0 {
				return messages.NamedToolCallDeltaChunk(1, "call-1", "shell", "")
			}
			return messages.ToolCallDeltaChunk(1, "call-1", "x")
		}, []string{"assistant/chunk:1", "tool-call-chunks:4"}},
		{"index change breaks a run", 6, func(i int) messages.StreamChunk { return messages.TextDeltaChunk(i/3, "t") },
			[]string{"text-chunks:3", "text-chunks:3"}},
		{"kind change breaks a run", 6, func(i int) messages.StreamChunk {
			if i < 3 {
				return messages.TextDeltaChunk(0, "t")
			}
			return messages.ReasoningDeltaChunk(0, "r")
		}, []string{"text-chunks:3", "reasoning-chunks:3"}},
		{"a usage chunk stays scalar", 7, func(i int) messages.StreamChunk {
			if i == 3 {
				return messages.UsageChunk(messages.TokenUsage{InputTokens: 1})
			}
			return messages.TextDeltaChunk(0, "t")
		}, []string{"text-chunks:3", "assistant/chunk:1", "text-chunks:3"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, chunks := chunkEvents(t, c.n, c.mk)
			rows := packed(t, chunks)
			require.Equal(t, c.want, rowShape(rows))
			for _, r := range rows {
				if r.ignorable == 0 {
					text, err := dataText(r.data, sqlMaxPackedData, sqlPackedDecoder())
					require.NoError(t, err)
					require.LessOrEqual(t, len(text), sqlMaxPackedData)
				}
			}
		})
	}
	// A run broken by a time difference that is not a safe integer, and a
	// gap in seqs (two batches' worth glued), are covered by Continues.
	member := func(seq, time int64) session.PackMember {
		e, err := session.DecodeEvent(fmt.Appendf(nil, `{"type":"assistant/chunk","seq":%d,"time":%d,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"x"}}}`, seq, time))
		require.NoError(t, err)
		m, ok := session.Packable(e)
		require.True(t, ok)
		return m
	}
	a := member(1, -maxSafeInt)
	require.False(t, a.Continues(member(2, maxSafeInt)))
	require.False(t, a.Continues(member(3, -maxSafeInt)))
	require.True(t, a.Continues(member(2, -maxSafeInt)))
}

// The compression rule: under 4 KiB TEXT; from 4 KiB a zstd BLOB when
// shorter, else TEXT; a long provenance list is a BLOB far smaller than its
// JSON.
func TestSQLiteCompressionRule(t *testing.T) {
	small := strings.Repeat("a", 4095)
	require.IsType(t, "", dataValue([]byte(small)))
	big := []byte(`"` + strings.Repeat("abc", 3000) + `"`)
	blob, ok := dataValue(big).([]byte)
	require.True(t, ok)
	require.Less(t, len(blob), len(big))
	text, err := dataText(blob, sqlMaxScalarData, sqlScalarDecoder())
	require.NoError(t, err)
	require.Equal(t, big, text)
	incompressible := []byte(fmt.Sprintf("%q", sha256Chain(8192)))
	require.IsType(t, "", dataValue(incompressible), "a frame not shorter stays TEXT")

	seqs := make([]int64, 2000)
	for i := range seqs {
		seqs[i] = int64(i + 9)
	}
	enc, err := appendSources(nil, seqs)
	require.NoError(t, err)
	require.Equal(t, 2000, len(enc))
	require.Less(t, len(enc), len(fmt.Sprint(seqs)))
}

// sha256Chain returns n bytes that do not compress.
func sha256Chain(n int) string {
	var out []byte
	sum := sha256.Sum256(nil)
	for len(out) < n {
		sum = sha256.Sum256(sum[:])
		out = append(out, fmt.Sprintf("%x", sum)...)
	}
	return string(out[:n])
}

// The provenance codec on the reference's worked examples, its edges and
// its refusals.
func TestSQLiteProvenanceCodec(t *testing.T) {
	for _, c := range []struct {
		seqs []int64
		hex  string
	}{
		{[]int64{}, ""},
		{[]int64{64}, "40"},
		{[]int64{2956}, "8C17"},
		{[]int64{9, 10, 11, 12}, "09020202"},
		{[]int64{300, 4, 1500, 2}, "AC02CF04B017B317"},
		{[]int64{1<<53 - 2, 0, 1<<53 - 3}, ""},
	} {
		enc, err := appendSources(nil, c.seqs)
		require.NoError(t, err)
		if c.hex != "" || len(c.seqs) == 0 {
			require.Equal(t, c.hex, fmt.Sprintf("%X", enc))
		}
		dec, err := decodeSources(enc)
		require.NoError(t, err)
		require.Equal(t, c.seqs, dec)
	}
	_, err := appendSources(nil, []int64{-1})
	require.ErrorIs(t, err, errSrcNegative)
	for _, c := range []struct {
		in   []byte
		want error
	}{
		{[]byte{0x80}, errSrcTruncated},
		{[]byte{0x80, 0x00}, errSrcNonCanonical},
		{[]byte{0x00, 0x01}, errSrcSeqRange},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x10}, errSrcRange},
		{[]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}, errSrcRange},
	} {
		_, err := decodeSources(c.in)
		require.ErrorIs(t, err, c.want, "% X", c.in)
	}
}

// Malformed rows are refused whole, each with its reason; a well-formed
// TEXT packed row with negative gaps expands to its members' times.
func TestSQLiteMalformedRows(t *testing.T) {
	good := `{"turn":1,"step":1,"index":0,"dt":[2,-1],"texts":["a","b","c"]}`
	evs, err := decodeSQLRow(nil, sqlRow{seq: 4, time: 90, typ: sqlTagText, data: good, ignorable: 0})
	require.NoError(t, err)
	require.Len(t, evs, 3)
	require.Equal(t, []int64{90, 92, 91}, []int64{evs[0].Time(), evs[1].Time(), evs[2].Time()})
	require.Equal(t, int64(6), evs[2].Seq())

	tool := `{"turn":1,"step":1,"index":0,"dt":[0,0],"id":"c","args":["a","b","c"]}`
	packedCases := map[string]sqlRow{
		"extra key":               {typ: sqlTagText, data: `{"turn":1,"step":1,"index":0,"dt":[0,0],"texts":["a","b","c"],"x":1}`},
		"primitive data":          {typ: sqlTagText, data: `7`},
		"text row with tool keys": {typ: sqlTagText, data: `{"turn":1,"step":1,"index":0,"dt":[0,0],"id":"c","texts":["a","b","c"]}`},
		"tool row without id":     {typ: sqlTagToolCall, data: `{"turn":1,"step":1,"index":0,"dt":[0,0],"args":["a","b","c"]}`},
		"non-string tool id":      {typ: sqlTagToolCall, data: strings.Replace(tool, `"c"`, `5`, 1)},
		"non-string tool name":    {typ: sqlTagToolCall, data: strings.Replace(tool, `"id":"c"`, `"id":"c","name":5`, 1)},
		"string turn":             {typ: sqlTagText, data: strings.Replace(good, `"turn":1`, `"turn":"1"`, 1)},
		"non-array members":       {typ: sqlTagText, data: strings.Replace(good, `["a","b","c"]`, `"abc"`, 1)},
		"two members":             {typ: sqlTagText, data: `{"turn":1,"step":1,"index":0,"dt":[0],"texts":["a","b"]}`},
		"1025 members": {typ: sqlTagText, data: `{"turn":1,"step":1,"index":0,"dt":[` + strings.Repeat("0,", 1023) + `0],"texts":[` +
			strings.Repeat(`"a",`, 1024) + `"a"]}`},
		"non-string member":    {typ: sqlTagText, data: strings.Replace(good, `"b"`, `2`, 1)},
		"non-integer gap":      {typ: sqlTagText, data: strings.Replace(good, `[2,-1]`, `[2,0.5]`, 1)},
		"non-array dt":         {typ: sqlTagText, data: strings.Replace(good, `[2,-1]`, `2`, 1)},
		"dt of the wrong size": {typ: sqlTagText, data: strings.Replace(good, `[2,-1]`, `[2]`, 1)},
		"time overflow":        {typ: sqlTagText, time: maxSafeInt, data: strings.Replace(good, `[2,-1]`, `[2,0]`, 1)},
		"seq overflow":         {typ: sqlTagText, seq: maxSafeInt - 1, data: good},
		"data over 1 MiB":      {typ: sqlTagText, data: strings.Repeat(" ", sqlMaxPackedData+1)},
		"not zstd":             {typ: sqlTagText, data: []byte("not a frame")},
		"expands past 1 MiB":   {typ: sqlTagText, data: sqlEncoder().EncodeAll([]byte(strings.Repeat(" ", sqlMaxPackedData+1)), nil)},
		"a chunk tag needed":   {typ: "turn/start", data: good},
		"surface_op":           {typ: sqlTagText, data: good, op: `"append"`},
		"empty provenance":     {typ: sqlTagText, data: good, sources: []byte{}},
		"integer data":         {typ: sqlTagText, data: int64(5)},
	}
	for name, r := range packedCases {
		r.ignorable = 0
		out, err := decodeSQLRow([]session.Event{}, r)
		require.Error(t, err, name)
		require.Empty(t, out, name)
		var re *rowError
		require.ErrorAs(t, err, &re, name)
		require.NotContains(t, err.Error(), "\n", name)
	}
	scalarCases := map[string]sqlRow{
		"text provenance": {typ: "turn/start", data: `{"turn":1}`, sources: "[1]", ignorable: -1},
		"real data":       {typ: "turn/start", data: 1.5, ignorable: -1},
		"bad ignorable":   {typ: "turn/start", data: `{"turn":1}`, ignorable: 2},
		"not JSON":        {typ: "turn/start", data: `{"turn":`, ignorable: -1},
		"empty type":      {typ: "", data: `{"turn":1}`, ignorable: -1},
		"bad surface_op":  {typ: "turn/start", data: `{"turn":1}`, op: `{`, ignorable: -1},
		"not a zstd blob": {typ: "turn/start", data: []byte{1, 2, 3}, ignorable: -1},
		"negative seq":    {typ: "turn/start", seq: -1, data: `{"turn":1}`, ignorable: -1},
	}
	for name, r := range scalarCases {
		_, err := decodeSQLRow(nil, r)
		require.Error(t, err, name)
	}
	// A scalar row whose type is a chunk tag, marked ignorable, is that
	// logical event, not a packed row.
	evs, err = decodeSQLRow(nil, sqlRow{typ: sqlTagText, data: `{"x":1}`, ignorable: 1})
	require.NoError(t, err)
	require.Equal(t, session.EventType(sqlTagText), evs[0].Type())
	require.True(t, evs[0].Ignorable())
}

func TestSQLiteContextDone(t *testing.T) {
	s := openTestSQLite(t, filepath.Join(t.TempDir(), "s.sqlite"), SQLiteOptions{})
	defer s.Close()
	done, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.List(done)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.ReadFrom(done, "x", 0)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Load(done, "x")
	require.ErrorIs(t, err, context.Canceled)
}

// The journal mode change retries SQLITE_BUSY only, paced, within the busy
// timeout counted from the open's start (on a fake clock).
func TestSQLiteJournalModeRetries(t *testing.T) {
	errBusy := errors.New("busy")
	isBusy := func(err error) bool { return errors.Is(err, errBusy) }
	run := func(budget time.Duration, results ...error) (int, time.Duration, error) {
		clock := time.Unix(1000, 0)
		start := clock
		i := 0
		n, err := retryBusy(func() error {
			r := results[min(i, len(results)-1)]
			i++
			return r
		}, isBusy, start.Add(budget), func() time.Time { return clock }, func(d time.Duration) { clock = clock.Add(d) })
		return n, clock.Sub(start), err
	}
	n, _, err := run(time.Second, errBusy, nil)
	require.NoError(t, err)
	require.Equal(t, 2, n, "one busy answer, then success")
	n, _, err = run(0, errBusy)
	require.ErrorIs(t, err, errBusy)
	require.Equal(t, 1, n, "no budget: one attempt")
	other := errors.New("disk I/O error")
	n, _, err = run(time.Second, other)
	require.ErrorIs(t, err, other)
	require.Equal(t, 1, n, "only busy is retried")
	n, _, err = run(5*time.Millisecond, errBusy)
	require.ErrorIs(t, err, errBusy)
	require.Equal(t, 1, n, "the sleep reaches the deadline: no attempt starts at it")
	n, took, err := run(50*time.Millisecond, errBusy)
	require.ErrorIs(t, err, errBusy)
	require.GreaterOrEqual(t, n, 2)
	require.LessOrEqual(t, n, 6)
	require.Equal(t, 50*time.Millisecond, took)
}

// Differential: random streams of every chunk kind (with runs broken by
// index, kind, name and ignorable foreign events) appended in random batch
// partitions read back the same from the SQLite store as from the JSONL
// store and as appended: Load, Inspect, List and every ReadFrom, before and
// after a reopen.
func TestSQLiteMatchesJSONLAcrossPartitions(t *testing.T) {
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(0x5A17E, 1))
	path := filepath.Join(t.TempDir(), "s.sqlite")
	sq := openTestSQLite(t, path, SQLiteOptions{})
	js, err := NewJSONLStore(JSONLConfig{Root: t.TempDir()})
	require.NoError(t, err)
	defer js.Close()
	var ids []session.SessionID
	for run := range 8 {
		b := newLogBuilder(t, session.SessionID(fmt.Sprintf("session-diff-%02d", run)))
		turn := b.beginTurn("go")
		b.beginStep(turn, 1)
		for range 20 + rng.IntN(100) {
			var c messages.StreamChunk
			switch k := rng.IntN(20); {
			case k < 8:
				c = messages.TextDeltaChunk(rng.IntN(2), strings.Repeat("t", rng.IntN(5)))
			case k < 14:
				c = messages.ReasoningDeltaChunk(0, "r")
			case k < 17:
				c = messages.ToolCallDeltaChunk(2, "call-1", "{")
			case k < 18:
				c = messages.NamedToolCallDeltaChunk(2, "call-1", "shell", "")
			case k < 19:
				c = messages.UsageChunk(messages.TokenUsage{InputTokens: 1})
			default:
				b.add(session.NewDraft("plugin/note", messages.MustParseJSON(`{"n":1}`)).AsIgnorable())
				continue
			}
			b.now += int64(rng.IntN(3)) - 1 // gaps of 0, 1 and 2 ms
			b.add(session.AssistantChunk{Turn: turn, Step: 1, Chunk: c}.Draft())
		}
		require.NoError(t, sq.Create(b.header()))
		require.NoError(t, js.Create(b.header()))
		events := b.events()
		for start := 0; start < len(events); {
			end := min(len(events), start+1+rng.IntN(40))
			durable := rng.IntN(2) == 0
			require.NoError(t, sq.Append(ctx, b.id(), events[start:end], durable))
			require.NoError(t, js.Append(ctx, b.id(), events[start:end], durable))
			start = end
		}
		ids = append(ids, b.id())
	}
	compare := func(sq Store) {
		for _, id := range ids {
			want, err := js.Inspect(ctx, id)
			require.NoError(t, err)
			got, err := sq.Inspect(ctx, id)
			require.NoError(t, err)
			require.Equal(t, want.Header, got.Header)
			requireSameEvents(t, want.Events, got.Events)
			for from := int64(0); from <= int64(len(want.Events)-len(want.Closers)); from++ {
				w, err := js.ReadFrom(ctx, id, from)
				require.NoError(t, err)
				g, err := sq.ReadFrom(ctx, id, from)
				require.NoError(t, err)
				requireSameEvents(t, w, g)
			}
		}
		wl, err := js.List(ctx)
		require.NoError(t, err)
		gl, err := sq.List(ctx)
		require.NoError(t, err)
		require.Len(t, gl, len(wl))
		for i := range wl {
			require.Equal(t, wl[i].Header, gl[i].Header)
		}
	}
	compare(sq)
	require.NoError(t, sq.Close())
	re := openTestSQLite(t, path, SQLiteOptions{})
	defer re.Close()
	compare(re)
}
