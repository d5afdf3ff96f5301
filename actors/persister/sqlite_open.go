package persister

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// This file opens a SQLite store: the path and permission checks, the
// connection setup, the ownership transaction that initializes a pristine
// file or refuses an incompatible one, and the schema check every
// mutation repeats. The format is described in
// docs/log-format.md#sqlite-databases and at the top of sqlite.go.

const (
	// sqlAppID is the application id of a session database ("DSHP").
	sqlAppID = 0x44534850
	// sqlSchemaVersion is the user_version of the schema written and read.
	sqlSchemaVersion = 17
	// DefaultBusyTimeout is SQLiteOptions.BusyTimeout's default.
	DefaultBusyTimeout = 5 * time.Second
)

// sqlDDL creates the schema. Its text is the reference's: a reader
// compares every table's CREATE statement with this one (whitespace runs
// folded), so a change of a single keyword's case is a foreign schema.
var sqlDDL = []string{
	`CREATE TABLE persistence_state (
  singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
  store_id  TEXT NOT NULL
) STRICT`,
	`CREATE TABLE sessions (
  id               TEXT PRIMARY KEY,
  version          INTEGER NOT NULL,
  created_at       INTEGER NOT NULL,
  cwd              TEXT,
  parent_session   TEXT,
  seed_length      INTEGER,
  origin           TEXT,
  delegation_depth INTEGER,
  agent_preset     TEXT,
  incarnation      TEXT NOT NULL,
  revision         INTEGER NOT NULL
) STRICT`,
	`CREATE TABLE events (
  session_id        TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  seq               INTEGER NOT NULL,
  type              TEXT NOT NULL,
  time              INTEGER NOT NULL,
  data              ANY NOT NULL,
  source_event_seqs ANY,
  surface_op        TEXT,
  ignorable         INTEGER CHECK (ignorable IS NULL OR ignorable IN (0, 1)),
  PRIMARY KEY (session_id, seq)
) STRICT`,
}

// SQLiteOptions configures OpenSQLite. Every field may be left zero.
type SQLiteOptions struct {
	// ReadOnly opens the database for reading only, without the writer
	// lock: every write fails with ErrReadOnly. The database must exist
	// and be initialized. Default false.
	ReadOnly bool
	// JournalMode is selected on every writer open: "wal" (the default),
	// "delete", "truncate" or "persist". Case-insensitive. Not used with
	// ReadOnly.
	JournalMode string
	// BusyTimeout is how long a statement waits for another SQLite client
	// (the reference, another process) holding the database locked before
	// it fails. Default DefaultBusyTimeout (5 s); a negative value does not
	// wait at all.
	BusyTimeout time.Duration
	// NoWriterLock opens a writer without taking the lock file PATH.lock,
	// so that two stores of one process can write one database, as two
	// reference processes can: for tests of what SQLite's own locking and
	// the stale-writer check do. Default false.
	NoWriterLock bool
}

// validate checks the options.
func (o SQLiteOptions) validate() error {
	switch strings.ToLower(o.JournalMode) {
	case "", "wal", "delete", "truncate", "persist":
	default:
		return fmt.Errorf("persister: sqlite options: journal mode %q is not wal, delete, truncate or persist", o.JournalMode)
	}
	if o.BusyTimeout > time.Duration(1<<31-1)*time.Millisecond {
		return fmt.Errorf("persister: sqlite options: busy timeout %s is over 2^31-1 ms", o.BusyTimeout)
	}
	return nil
}

// ErrIncompatible matches a *DatabaseError refusing a file that is not a
// session database this build can use. (A write to a store opened
// ReadOnly fails with ErrReadOnly.)
var ErrIncompatible = errors.New("persister: incompatible session database")

// DatabaseError is a failure to open or use a session database, one line
// naming it: "persister: session database at "PATH" REASON[: cause]". When
// Refused is set the file is not one this build can use (not SQLite,
// another application's, another schema version, changed schema objects,
// no store identity, a symbolic link, wider permissions than allowed), and
// errors.Is(err, ErrIncompatible) holds. Nothing was changed.
type DatabaseError struct {
	Path    string
	Reason  string
	Refused bool
	Err     error
}

func (e *DatabaseError) Error() string {
	s := fmt.Sprintf("persister: session database at %q %s", e.Path, e.Reason)
	if e.Err != nil {
		s += ": " + oneLine(e.Err.Error())
	}
	return s
}

func (e *DatabaseError) Unwrap() error { return e.Err }

// Is makes a refusal match ErrIncompatible.
func (e *DatabaseError) Is(target error) bool { return e.Refused && target == ErrIncompatible }

// DatabaseLockedError refuses a writer open of a database whose writer
// lock (the file PATH.lock) another dsh writer holds. It names the holder
// and matches ErrLocked.
type DatabaseLockedError struct {
	Path   string // the database
	Holder string
}

func (e *DatabaseLockedError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "another writer (unnamed)"
	}
	return fmt.Sprintf("persister: session database %s is in use by %s", e.Path, holder)
}

// Is makes every DatabaseLockedError match ErrLocked.
func (e *DatabaseLockedError) Is(target error) bool { return target == ErrLocked }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// refused is a DatabaseError refusing the file at path.
func refused(path, reason string, err error) *DatabaseError {
	return &DatabaseError{Path: path, Reason: reason, Refused: true, Err: err}
}

// sqlCode returns the primary SQLite result code of err, or 0.
func sqlCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code() & 0xff
	}
	return 0
}

// dbError wraps an error of SQLite on the database at path: a busy
// database and a file that is not SQLite get their own words.
func dbError(path string, busy time.Duration, err error) error {
	switch sqlCode(err) {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return &DatabaseError{Path: path, Reason: fmt.Sprintf("is locked by another writer (waited %s)", busy), Err: err}
	case sqlite3.SQLITE_NOTADB:
		return refused(path, "is not a SQLite database", nil)
	case sqlite3.SQLITE_CORRUPT:
		return &DatabaseError{Path: path, Reason: "is damaged", Err: err}
	}
	var de *DatabaseError
	if errors.As(err, &de) {
		return err
	}
	return &DatabaseError{Path: path, Reason: "failed", Err: err}
}

var uuidSyntax = regexp.MustCompile(`^(?i)[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// checkPath checks the database's directory and, when it exists, the
// file, as the reference does: the parent a real directory (not a
// symbolic link) owned by this user and not group- or world-writable; the
// file a regular file (not a symbolic link) owned by this user with no
// group or world permission. It reports whether the file exists.
func checkPath(path string) (bool, error) {
	dir := filepath.Dir(path)
	fi, err := os.Lstat(dir)
	if err != nil {
		return false, &DatabaseError{Path: path, Reason: "cannot be opened", Err: err}
	}
	if !fi.IsDir() || fi.Mode()&fs.ModeSymlink != 0 {
		return false, refused(path, fmt.Sprintf("has a parent %q that is not a real directory", dir), nil)
	}
	if !ownedByUs(fi) || fi.Mode().Perm()&0o022 != 0 {
		return false, refused(path, fmt.Sprintf("has a parent %q that is not owned by the current user, or is group- or world-writable", dir), nil)
	}
	fi, err = os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, &DatabaseError{Path: path, Reason: "cannot be opened", Err: err}
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return false, refused(path, "is a symbolic link, not a regular file", nil)
	}
	if !fi.Mode().IsRegular() {
		return false, refused(path, "is not a regular file", nil)
	}
	if !ownedByUs(fi) || fi.Mode().Perm()&0o077 != 0 {
		return false, refused(path, fmt.Sprintf("must be owned by the current user and accessible only by that user (mode %04o)", fi.Mode().Perm()), nil)
	}
	return true, nil
}

// sqlURI is the SQLite URI of path, with query.
func sqlURI(path, query string) string {
	r := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")
	return "file:" + r.Replace(path) + "?" + query
}

// canonicalSchema is the schema-object list of a database made by sqlDDL,
// computed once in an in-memory database as the reference does.
var canonicalSchema = sync.OnceValues(func() ([]string, error) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	for _, stmt := range sqlDDL {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return nil, err
		}
	}
	return schemaObjects(ctx, db)
})

// queryer is what reads and writes run on: a *sql.Conn (or *sql.DB).
type queryer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// schemaObjects lists the schema objects that are not SQLite's own, each
// as "type|name|tbl_name|sql" with whitespace runs of sql folded.
func schemaObjects(ctx context.Context, q queryer) ([]string, error) {
	rows, err := q.QueryContext(ctx, `SELECT type, name, tbl_name, sql FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*' ORDER BY type, name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ, name, tbl string
		var text sql.NullString
		if err := rows.Scan(&typ, &name, &tbl, &text); err != nil {
			return nil, err
		}
		out = append(out, typ+"|"+name+"|"+tbl+"|"+strings.Join(strings.Fields(text.String), " "))
	}
	return out, rows.Err()
}

// checkSchema refuses a database whose schema objects are not sqlDDL's.
func checkSchema(ctx context.Context, q queryer, path string) error {
	want, err := canonicalSchema()
	if err != nil {
		return fmt.Errorf("persister: sqlite: canonical schema: %w", err)
	}
	got, err := schemaObjects(ctx, q)
	if err != nil {
		return err
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		return refused(path, "does not contain the required schema objects", nil)
	}
	return nil
}

// pragmaInt reads an integer pragma.
func pragmaInt(ctx context.Context, q queryer, name string) (int64, error) {
	var v int64
	if err := q.QueryRowContext(ctx, "PRAGMA "+name).Scan(&v); err != nil {
		return 0, err
	}
	return v, nil
}

// ownership runs the checks and initialization of the ownership
// transaction (already begun): it refuses an incompatible file and
// initializes a pristine one when init is set (a pristine file is refused
// otherwise).
func ownership(ctx context.Context, q queryer, path string, init bool) error {
	uv, err := pragmaInt(ctx, q, "user_version")
	if err != nil {
		return err
	}
	appID, err := pragmaInt(ctx, q, "application_id")
	if err != nil {
		return err
	}
	var objects int64
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*'`).Scan(&objects); err != nil {
		return err
	}
	switch {
	case uv == 0 && (appID != 0 || objects > 0):
		return refused(path, "has an unversioned schema or application identity", nil)
	case uv == 0 && !init:
		return refused(path, "is empty: it holds no session store", nil)
	case uv == 0:
		for _, stmt := range sqlDDL {
			if _, err := q.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		id, err := uuid.NewRandom()
		if err != nil {
			return err
		}
		if _, err := q.ExecContext(ctx, `INSERT INTO persistence_state (singleton, store_id) VALUES (1, ?)`, id.String()); err != nil {
			return err
		}
		if _, err := q.ExecContext(ctx, "PRAGMA application_id = "+strconv.Itoa(sqlAppID)); err != nil {
			return err
		}
		if _, err := q.ExecContext(ctx, "PRAGMA user_version = "+strconv.Itoa(sqlSchemaVersion)); err != nil {
			return err
		}
	case uv != sqlSchemaVersion:
		return refused(path, fmt.Sprintf("has schema version %d, incompatible with this build (%d)", uv, sqlSchemaVersion), nil)
	case appID != sqlAppID:
		return refused(path, fmt.Sprintf("has application id %d, expected %d", appID, sqlAppID), nil)
	}
	return checkSchema(ctx, q, path)
}

// checkMutation repeats the ownership checks at the start of a mutating
// transaction (already begun), in the reference's order.
func checkMutation(ctx context.Context, q queryer, path string) error {
	appID, err := pragmaInt(ctx, q, "application_id")
	if err != nil {
		return err
	}
	if appID != sqlAppID {
		return refused(path, "application id changed before mutation", nil)
	}
	if err := checkSchema(ctx, q, path); err != nil {
		return err
	}
	uv, err := pragmaInt(ctx, q, "user_version")
	if err != nil {
		return err
	}
	if uv != sqlSchemaVersion {
		return refused(path, "schema changed before mutation", nil)
	}
	return nil
}

// storeID reads and checks the store identity.
func storeID(ctx context.Context, q queryer, path string) (string, error) {
	var id sql.NullString
	err := q.QueryRowContext(ctx, `SELECT store_id FROM persistence_state WHERE singleton = 1`).Scan(&id)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", err
	}
	if !id.Valid || !uuidSyntax.MatchString(id.String) {
		return "", refused(path, "has no valid store identity", nil)
	}
	return id.String, nil
}

// setJournalMode selects mode, retrying only SQLITE_BUSY (see
// retryBusy).
func setJournalMode(ctx context.Context, q queryer, mode string, deadline time.Time) error {
	_, err := retryBusy(func() error {
		var got string
		if err := q.QueryRowContext(ctx, "PRAGMA journal_mode = "+mode).Scan(&got); err != nil {
			return err
		}
		if strings.ToLower(got) != mode {
			return fmt.Errorf("journal mode is %q after selecting %q", got, mode)
		}
		return nil
	}, func(err error) bool { return sqlCode(err) == sqlite3.SQLITE_BUSY }, deadline, time.Now, time.Sleep)
	return err
}

// retryBusy runs attempt until it succeeds or fails with an error that is
// not busy, or the deadline comes: SQLite may answer a journal mode change
// with SQLITE_BUSY at once, without its busy handler. Between attempts it
// sleeps min(10 ms, the time left); no attempt starts at or after the
// deadline, so a zero budget makes exactly one. It returns the attempts
// made.
func retryBusy(attempt func() error, busy func(error) bool, deadline time.Time, now func() time.Time,
	sleep func(time.Duration)) (attempts int, err error) {
	for {
		attempts++
		err = attempt()
		if err == nil || !busy(err) {
			return attempts, err
		}
		left := deadline.Sub(now())
		if left <= 0 {
			return attempts, err
		}
		sleep(min(10*time.Millisecond, left))
		if !now().Before(deadline) {
			return attempts, err
		}
	}
}

// checkPragma sets pragma name to value and reads it back.
func checkPragma(ctx context.Context, q queryer, name, value string, want int64) error {
	if _, err := q.ExecContext(ctx, "PRAGMA "+name+" = "+value); err != nil {
		return err
	}
	got, err := pragmaInt(ctx, q, name)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("pragma %s reads back %d, want %d", name, got, want)
	}
	return nil
}
