package persister

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
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
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:3], NoSync))
	first := rowIDs(t, db)
	require.NoError(t, s.Append(ctx, b.id(), b.events()[3:4], Sync))
	require.Equal(t, first, rowIDs(t, db)[:3])
	second := rowIDs(t, db)
	require.NoError(t, s.Append(ctx, b.id(), b.events()[4:], Sync))
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
	require.NoError(t, s.Append(ctx, b.id(), b.events()[:n], Sync))
	require.NoError(t, s.Append(ctx, b.id(), b.from(n), NoSync))
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
	require.NoError(t, s.Append(ctx, h.ID, b.events(), Sync))
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
	require.NoError(t, s.Append(ctx, b.id(), nil, Sync))
	db := rawDB(t, path)
	var n int
	require.NoError(t, db.QueryRow("SELECT count(*) FROM sessions").Scan(&n))
	require.Zero(t, n)
	require.NoError(t, s.Append(ctx, b.id(), b.events(), Sync))
	rev := revisionOf(t, s, b.id())
	require.NoError(t, s.Append(ctx, b.id(), nil, Sync))
	require.Equal(t, rev, revisionOf(t, s, b.id()))
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
