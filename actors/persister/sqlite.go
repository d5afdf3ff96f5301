package persister

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
)

// This file is the SQLite store: every session of a store in one SQLite
// database, in the reference's schema 17
// (docs/log-format.md#sqlite-databases), so that the reference opens a
// database dsh wrote and the other way round. What follows is how the store
// opens, checks and writes a database.
//
// Identity: application_id 0x44534850 ("DSHP"), user_version 17, one row
// in persistence_state holding a random UUID store_id. The schema is three
// STRICT tables, created with the reference's DDL text (sqlite_open.go)
// and nothing else: a reader compares every schema object's CREATE text
// (whitespace runs folded) with that DDL, at open and at the start of
// every mutating transaction after another connection committed (its
// data_version changed: see checkMutation), and refuses any difference
// (an index, a column, a keyword's case). Every open sets busy_timeout (default 5 s),
// trusted_schema OFF, mmap_size 0 and foreign_keys ON; a writer then runs
// the ownership transaction (BEGIN IMMEDIATE: initialize a pristine file,
// refuse an incompatible one), selects the journal mode (default wal,
// retrying SQLITE_BUSY within the busy timeout) and synchronous=FULL.
//
//	sessions  one row per materialized session: the header's fields
//	          (NULL when absent), a UUID incarnation minted when the row is
//	          inserted, and revision, bumped by every committed append or
//	          repair. The revision token is
//	          file:<dev>:<ino>:<birthNs>:store:<store_id>:incarnation:<uuid>:revision:<n>
//	events    (session_id, seq) primary key; a scalar row is one event
//	          (type, seq, time, data, source_event_seqs, surface_op,
//	          ignorable 1 or NULL); a packed row (ignorable 0, type
//	          text-chunks, reasoning-chunks or tool-call-chunks) is a run of
//	          3..1024 chunk deltas of one append batch, seq and time of its
//	          first member, data {"turn","step","index","dt":[gaps],
//	          "texts":[...]} (tool calls: "id", "name" when every member
//	          has one, "args"), at most 1 MiB uncompressed
//
// data is the event's JSON text: TEXT under 4 KiB; from 4 KiB a zstd frame
// (level 3, no checksum) stored as a BLOB when it is strictly shorter, else
// TEXT. source_event_seqs is NULL without the field, else a BLOB of
// varints: the first seq unsigned LEB128, each later one the ZigZag varint
// of its difference to the previous (an empty list is a zero-length BLOB).
// surface_op is the op's JSON text. A packed row's run is cut greedily: 1024
// members, or the most (at least 3) whose payload fits 1 MiB; what is left
// shorter than 3 stays scalar. Runs never cross append batches, and rows
// once written are never rewritten by an append.
//
// Append is one transaction (BEGIN IMMEDIATE ... COMMIT, synchronous=FULL,
// so every append is durable when it returns): the ownership checks, the
// tail check (the older of the last two rows, widened back to a packed row
// covering it, must decode and be gapless; the batch must start at the
// stored next seq, else a *FenceError), the session row on a first append,
// the rows, the revision bump. Reads run in a read transaction. A read
// from seq k anchors at a packed row covering k (or one that does not
// decode, so that a corrupt row fails the read instead of being skipped).
// Recovery scans a session's rows as the JSONL reader scans lines: a row
// that does not decode or does not continue the seqs, followed by a row
// holding a turn/end, is corruption (never repaired); after the last such
// row it starts a torn tail (SQLite commits are atomic, so only a foreign
// writer or a hand edit makes one), which Load deletes in its repair
// transaction (checking the tail is still the one it read), inserting the
// closers of an open turn as scalar rows. A packed row is all or nothing.
//
// Group commit (sqlite_group.go): the store implements the persister's
// group writes, so the persister writes it a group at a time: one
// transaction holds the writes that were due when it began and those that
// joined while it was written (barriers first, write-behind batches
// bounded), each session's append (tail check, rows), one revision bump for
// them all (each session's append and bump in its own SAVEPOINT when a
// first attempt without savepoints failed), and one COMMIT syncs them all
// (FULL when the group starts with a barrier or a first append, else
// NORMAL, as for one Append, and then a sync if a barrier joined it). A
// session refused inside the group (its fence, its checks) is rolled back
// to its savepoint and fails alone; a failed transaction fails every
// session in it. The writer connection never checkpoints on commit
// (wal_autocheckpoint 0): a goroutine with its own connection runs PASSIVE
// checkpoints once the WAL passes 4 MiB, a TRUNCATE one once the store is
// idle; the writer runs a RESTART one between transactions when the WAL
// still holds 16 MiB of frames (a PASSIVE checkpoint never catches up with
// a writer that never pauses), before a group without a turn end (from 32
// MiB, before any), and Close checkpoints with TRUNCATE.
//
// A writer holds the kernel lock of PATH.lock (the same kind as a JSONL
// session.lock) for its lifetime: a second dsh writer is refused at once,
// naming the holder (*DatabaseLockedError). Other SQLite clients (the
// reference) are fenced by SQLite's locking within the busy timeout, then
// by the tail check. A ReadOnly store takes no lock. OpenSQLite refuses,
// with one line and changing nothing (*DatabaseError, ErrIncompatible): a
// file that is not SQLite, another application's database, another schema
// version, changed schema objects, a missing or invalid store identity, a
// symbolic link or a non-regular file, a file with any group or other
// permission or not owned by the user, a parent directory that is a
// symbolic link, group- or world-writable or not the user's.

// SQLiteStore is the Store of one SQLite database. It is safe for
// concurrent use: one connection serves every operation, one at a time
// (SQLite has one writer per database anyway). A writer holds the
// exclusive lock file PATH.lock for its lifetime, so a second dsh writer
// is refused at once (a *DatabaseLockedError); other SQLite clients are
// fenced by SQLite's own locking (BEGIN IMMEDIATE, the busy timeout) and
// by the tail check of every append.
//
// Every append commits a transaction. A durable one commits with
// synchronous=FULL: SQLite fsyncs the WAL, which makes it and every commit
// before it durable, of any session. In WAL mode an append without
// durable commits with synchronous=NORMAL (no fsync: committed and seen
// by every reader, durable at the next barrier); in the other journal
// modes, where NORMAL is not safe against power loss, every commit is
// FULL. A failed append cuts the session back to its last barrier (the
// rows of the appends without durable since are deleted), as the Writer
// contract says: the persister appends them again.
type SQLiteStore struct {
	path     string
	readOnly bool
	wal      bool // journal mode WAL: appends without durable commit with synchronous=NORMAL
	busy     time.Duration
	identity string // "file:<dev>:<ino>:<birthNs>:store:<store_id>"

	// mu serialises every operation and guards the fields below.
	mu       sync.Mutex
	closed   bool
	db       *sql.DB
	conn     *sql.Conn
	lock     vfs.Lock // the writer lock; nil for ReadOnly or NoWriterLock
	sessions map[session.SessionID]*sqlSession
	// normal says the connection's synchronous is NORMAL (else FULL);
	// unsynced that a NORMAL commit was made since the last fsync.
	normal, unsynced bool
	// checkpoints runs the WAL checkpoints of a writer in WAL mode (nil
	// otherwise): sqlite_group.go.
	checkpoints *checkpointer
	// stmts prepares the statements of the write path once, for the
	// store's lifetime (nil for ReadOnly).
	stmts *stmtCache
	// dataVersion is the connection's data_version as last read in a
	// mutating transaction whose ownership checks passed (versionChecked:
	// there was one), and epoch counts the changes of it: SQLite
	// changes data_version whenever another connection (another process,
	// the reference) committed to the database, and never for this
	// connection's own commits. A session's tail checked or written in
	// epoch e is still the stored tail while the epoch is e (see tailOf).
	dataVersion    int64
	versionChecked bool
	epoch          uint64
	tailChecks     int // tail checks run (tests)
	// bumpBuf is bumpRevisions' scratch buffer, and inserter insertRows'.
	bumpBuf  []byte
	inserter rowInserter
	// ownershipChecks counts the ownership checks run by mutating
	// transactions (tests).
	ownershipChecks int
	// insertFault, when set (tests), is called before each INSERT of
	// event rows with the session and the seq of the statement's first
	// row; an error fails the statement.
	insertFault func(id session.SessionID, seq int64) error
}

// sqlSession is what the store knows about one session id.
type sqlSession struct {
	header session.Header
	// stored says the session's row is known to exist (the session is
	// materialized); otherwise the header is from Create and the first
	// append inserts the row.
	stored bool
	// next is the stored next seq as this store last committed it, and
	// barrier the next seq as of the session's last barrier (a durable
	// append, or where the first append this store made started): a
	// failed append cuts the rows from barrier on. Both -1 until the
	// store appends.
	next, barrier int64
	// tailEpoch is the store epoch in which next was last known to be the
	// stored tail (by the tail check, or by a commit of this store); 0
	// when it is not known (before the first append, after a failure).
	tailEpoch uint64
}

// newSQLSession is the state of a session the store has not appended to.
func newSQLSession(h session.Header, stored bool) *sqlSession {
	return &sqlSession{header: h, stored: stored, next: -1, barrier: -1}
}

var _ Store = (*SQLiteStore)(nil)

// OpenSQLite opens (creating it if missing, unless opts.ReadOnly) the
// session database at path. It checks the path as the reference does,
// takes the writer lock PATH.lock (not with ReadOnly or NoWriterLock),
// sets up the connection (trusted_schema off, mmap off, foreign keys on,
// the journal mode, synchronous=FULL), initializes a pristine file and
// refuses an incompatible one, all with one-line errors (a *DatabaseError,
// a *DatabaseLockedError) that change nothing.
func OpenSQLite(path string, opts SQLiteOptions) (*SQLiteStore, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if path == "" || strings.ContainsRune(path, 0) {
		return nil, &DatabaseError{Path: path, Reason: "is not a valid path"}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &DatabaseError{Path: path, Reason: "is not a valid path", Err: err}
	}
	path = abs
	busy := opts.BusyTimeout
	switch {
	case busy == 0:
		busy = DefaultBusyTimeout
	case busy < 0:
		busy = 0
	}
	mode := strings.ToLower(opts.JournalMode)
	if mode == "" {
		mode = "wal"
	}
	s := &SQLiteStore{path: path, readOnly: opts.ReadOnly, wal: mode == "wal", busy: busy, sessions: map[session.SessionID]*sqlSession{},
		epoch: 1}
	start := time.Now()
	if !opts.ReadOnly {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, &DatabaseError{Path: path, Reason: "cannot be created", Err: err}
		}
	}
	exists, err := checkPath(path)
	if err != nil {
		return nil, err
	}
	if opts.ReadOnly && !exists {
		return nil, &DatabaseError{Path: path, Reason: "does not exist", Err: os.ErrNotExist}
	}
	if !opts.ReadOnly && !opts.NoWriterLock {
		l, err := vfs.OS().Lock(path+".lock", []byte(defaultHolder()+"\n"))
		if holder, locked := vfs.LockHolder(err); locked {
			return nil, &DatabaseLockedError{Path: path, Holder: holder}
		}
		if err != nil {
			return nil, &DatabaseError{Path: path, Reason: "cannot take its writer lock", Err: err}
		}
		s.lock = l
	}
	if err := s.open(exists, mode, start); err != nil {
		s.shut()
		return nil, err
	}
	return s, nil
}

// open does the connection setup of OpenSQLite, the lock taken.
func (s *SQLiteStore) open(exists bool, mode string, start time.Time) error {
	ctx := context.Background()
	if !s.readOnly && !exists {
		f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			err = f.Close()
		}
		if err != nil && !errors.Is(err, os.ErrExist) {
			return &DatabaseError{Path: s.path, Reason: "cannot be created", Err: err}
		}
		if _, err := checkPath(s.path); err != nil {
			return err
		}
	}
	query := "_pragma=busy_timeout(" + strconv.FormatInt(s.busy.Milliseconds(), 10) + ")"
	if s.readOnly {
		query += "&mode=ro"
	}
	db, err := sql.Open("sqlite", sqlURI(s.path, query))
	if err != nil {
		return dbError(s.path, s.busy, err)
	}
	db.SetMaxOpenConns(1)
	s.db = db
	conn, err := db.Conn(ctx)
	if err != nil {
		return dbError(s.path, s.busy, err)
	}
	s.conn = conn
	if !s.readOnly {
		s.stmts = &stmtCache{conn: conn}
	}
	if err := checkPragma(ctx, conn, "trusted_schema", "OFF", 0); err != nil {
		return dbError(s.path, s.busy, err)
	}
	if err := checkPragma(ctx, conn, "mmap_size", "0", 0); err != nil {
		return dbError(s.path, s.busy, err)
	}
	if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = ON"); err != nil {
		return dbError(s.path, s.busy, err)
	}
	begin := "BEGIN IMMEDIATE"
	if s.readOnly {
		begin = "BEGIN"
	}
	err = s.inTx(ctx, begin, func() error { return ownership(ctx, conn, s.path, !s.readOnly) })
	if err != nil {
		return dbError(s.path, s.busy, err)
	}
	if !s.readOnly {
		if err := setJournalMode(ctx, conn, mode, start.Add(s.busy)); err != nil {
			return dbError(s.path, s.busy, fmt.Errorf("journal mode %s: %w", mode, err))
		}
		if err := checkPragma(ctx, conn, "synchronous", "FULL", 2); err != nil {
			return dbError(s.path, s.busy, err)
		}
		if mode == "wal" {
			c, err := startCheckpointer(ctx, conn, s.path, s.busy, s.truncateWAL)
			if err != nil {
				return dbError(s.path, s.busy, err)
			}
			s.checkpoints = c
		}
	}
	id, err := storeID(ctx, conn, s.path)
	if err != nil {
		return dbError(s.path, s.busy, err)
	}
	dev, ino, birth, err := fileIdentity(s.path)
	if err != nil {
		return &DatabaseError{Path: s.path, Reason: "cannot be opened", Err: err}
	}
	s.identity = fmt.Sprintf("file:%d:%d:%d:store:%s", dev, ino, birth, id)
	return nil
}

// shut closes the connection and releases the writer lock.
func (s *SQLiteStore) shut() error {
	var errs []error
	errs = append(errs, s.checkpoints.stop())
	s.stmts.close()
	if s.conn != nil {
		if s.checkpoints != nil {
			// The WAL into the database, and emptied (sqlite_group.go).
			_, err := s.conn.ExecContext(context.Background(), "PRAGMA wal_checkpoint(TRUNCATE)")
			errs = append(errs, err)
		}
		errs = append(errs, s.conn.Close())
	}
	if s.db != nil {
		errs = append(errs, s.db.Close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Release())
	}
	s.conn, s.db, s.lock, s.checkpoints, s.stmts = nil, nil, nil, nil, nil
	return errors.Join(errs...)
}

// Path returns the database's absolute path.
func (s *SQLiteStore) Path() string { return s.path }

// inTx runs fn in a transaction begun with begin ("BEGIN" or "BEGIN
// IMMEDIATE"), committing if it returns nil and rolling back otherwise.
// s.mu must be held (or s not yet shared).
func (s *SQLiteStore) inTx(ctx context.Context, begin string, fn func() error) (err error) {
	var q queryer = s.conn
	if s.stmts != nil {
		q = s.stmts
	}
	if _, err := q.ExecContext(ctx, begin); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// A rollback on a fresh context: a done ctx must not leave the
			// transaction open.
			if _, rerr := q.ExecContext(context.Background(), "ROLLBACK"); rerr != nil {
				err = fmt.Errorf("%w; rollback: %w", err, rerr)
			}
		}
	}()
	if err := fn(); err != nil {
		return err
	}
	_, err = q.ExecContext(ctx, "COMMIT")
	return err
}

// lockOpen takes s.mu and checks the store is open.
func (s *SQLiteStore) lockOpen() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// Create registers h lazily: nothing is written until the first Append.
// ErrExists if the id is registered or stored.
func (s *SQLiteStore) Create(h session.Header) error {
	if err := h.Validate(); err != nil {
		return fmt.Errorf("persister: create: %w", err)
	}
	if err := s.lockOpen(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.readOnly {
		return fmt.Errorf("persister: create %s: %w", h.ID, ErrReadOnly)
	}
	if _, ok := s.sessions[h.ID]; ok {
		return fmt.Errorf("persister: create %s: %w", h.ID, ErrExists)
	}
	found, err := s.rowExists(context.Background(), h.ID)
	if err != nil {
		return fmt.Errorf("persister: create %s: %w", h.ID, dbError(s.path, s.busy, err))
	}
	if found {
		return fmt.Errorf("persister: create %s: %w", h.ID, ErrExists)
	}
	s.sessions[h.ID] = newSQLSession(h, false)
	return nil
}

// rowExists reports whether the session's row exists. s.mu must be held.
func (s *SQLiteStore) rowExists(ctx context.Context, id session.SessionID) (bool, error) {
	if err := ctxErr(ctx); err != nil {
		return false, err
	}
	var one int
	err := s.conn.QueryRowContext(stepCtx(ctx), `SELECT 1 FROM sessions WHERE id = ?`, string(id)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// Release is a barrier of the session: what its appends without durable
// committed is made durable. The writer lock is the database's, held until
// Close, so there is nothing else to give back.
func (s *SQLiteStore) Release(id session.SessionID) error {
	if err := s.lockOpen(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	st := s.sessions[id]
	if st == nil || st.next <= st.barrier {
		return nil
	}
	if err := s.barrierLocked(st); err != nil {
		if cerr := s.cutBack(id, st); cerr != nil {
			err = fmt.Errorf("%w; then %w", err, cerr)
		}
		return fmt.Errorf("persister: release %s: %w", id, err)
	}
	return nil
}

// Close closes the database (SQLite checkpoints the WAL into it and
// removes the -wal and -shm files) and releases the writer lock. Later
// calls fail with ErrClosed.
func (s *SQLiteStore) Close() error {
	if err := s.lockOpen(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.closed = true
	s.sessions = nil
	var err error
	if s.unsynced {
		err = s.barrierLocked(nil)
	}
	if err = errors.Join(err, s.shut()); err != nil {
		return fmt.Errorf("persister: close %s: %w", s.path, err)
	}
	return nil
}
