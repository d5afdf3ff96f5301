package persister

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
	"github.com/dshgo/dsh/messages"
)

// This file is the SQLite store: every session of a store in one SQLite
// database, in the reference's schema 17 (doc.go, "SQLite store"), so that
// the reference opens a database dsh wrote and the other way round.

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
	// mutating transaction, and epoch counts the changes of it: SQLite
	// changes data_version whenever another connection (another process,
	// the reference) committed to the database, and never for this
	// connection's own commits. A session's tail checked or written in
	// epoch e is still the stored tail while the epoch is e (see tailOf).
	dataVersion int64
	epoch       uint64
	tailChecks  int // tail checks run (tests)
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
	if err := opts.Validate(); err != nil {
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
		var le *vfs.LockedError
		if errors.As(err, &le) {
			return nil, &DatabaseLockedError{Path: path, Holder: le.Holder}
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
			c, err := startCheckpointer(ctx, conn, s.path, s.busy)
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
	var one int
	err := s.conn.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ?`, string(id)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// Append appends events in one transaction (BEGIN IMMEDIATE ... COMMIT,
// synchronous=FULL): durable when it returns, whatever durable says. The
// transaction repeats the ownership checks, checks the stored tail (an
// append that does not start at the stored next seq is a *FenceError and
// writes nothing), inserts the session's row on its first append, packs
// the batch into rows and bumps the session's revision. An empty batch
// does nothing.
func (s *SQLiteStore) Append(ctx context.Context, id session.SessionID, events []session.Event, durable bool) error {
	if err := s.lockOpen(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.readOnly {
		return fmt.Errorf("persister: append %s: %w", id, ErrReadOnly)
	}
	st, err := s.sessionLocked(ctx, id)
	if err != nil {
		return fmt.Errorf("persister: append %s: %w", id, err)
	}
	if err := s.appendLocked(ctx, id, st, events, durable); err != nil {
		if cerr := s.cutBack(id, st); cerr != nil {
			err = fmt.Errorf("%w; then %w", err, cerr)
		}
		return fmt.Errorf("persister: append %s: %w", id, err)
	}
	return nil
}

func (s *SQLiteStore) appendLocked(ctx context.Context, id session.SessionID, st *sqlSession, events []session.Event, durable bool) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if len(events) == 0 {
		if durable {
			return s.barrierLocked(st)
		}
		return nil
	}
	if err := checkBatch(id, events); err != nil {
		return err
	}
	first := !st.stored
	full := durable || first || !s.wal
	if err := s.setSync(ctx, full); err != nil {
		return dbError(s.path, s.busy, err)
	}
	err := s.inTx(ctx, "BEGIN IMMEDIATE", func() error {
		if err := s.checkMutation(ctx); err != nil {
			return err
		}
		return s.appendTx(ctx, s.stmts, id, st, events)
	})
	if err != nil {
		return s.txError(err)
	}
	s.committed(st, events, durable, full)
	return nil
}

// committed records a committed append of events to st: a barrier (a
// durable append) or not, committed with
// synchronous=FULL (full) or NORMAL. The first append a store makes to a
// session starts from a barrier: what was stored before is the session's
// durable past. A FULL commit outside a barrier is durable, but the
// session's barrier stays where its writer put it: a failed append cuts
// back to it, as the writer expects.
func (s *SQLiteStore) committed(st *sqlSession, events []session.Event, barrier, full bool) {
	next := events[len(events)-1].Seq() + 1
	if st.barrier < 0 {
		st.barrier = events[0].Seq()
	}
	st.stored, st.next, st.tailEpoch = true, next, s.epoch
	if barrier {
		st.barrier = next
	}
	s.unsynced = !full
}

// setSync sets the connection's synchronous to FULL (full) or NORMAL.
func (s *SQLiteStore) setSync(ctx context.Context, full bool) error {
	if s.normal == !full {
		return nil
	}
	value := "FULL"
	if !full {
		value = "NORMAL"
	}
	if _, err := s.conn.ExecContext(ctx, "PRAGMA synchronous = "+value); err != nil {
		return err
	}
	s.normal = !full
	return nil
}

// barrierLocked makes what st's appends without durable committed
// durable: if any commit since the last fsync was NORMAL, a FULL commit
// that changes nothing (store_id set to itself) fsyncs the WAL, which
// covers every commit before it.
func (s *SQLiteStore) barrierLocked(st *sqlSession) error {
	if s.unsynced {
		ctx := context.Background()
		if err := s.setSync(ctx, true); err != nil {
			return dbError(s.path, s.busy, err)
		}
		err := s.inTx(ctx, "BEGIN IMMEDIATE", func() error {
			_, err := s.stmts.ExecContext(ctx, `UPDATE persistence_state SET store_id = store_id WHERE singleton = 1`)
			return err
		})
		if err != nil {
			return dbError(s.path, s.busy, err)
		}
		s.unsynced = false
	}
	if st != nil {
		st.barrier = st.next
	}
	return nil
}

// cutBack deletes, after a failed append, the rows st's appends without
// durable committed since its last barrier (one transaction, which bumps
// the revision), so that the log is back at the barrier (see Writer).
func (s *SQLiteStore) cutBack(id session.SessionID, st *sqlSession) error {
	st.tailEpoch = 0 // the append failed: check the tail again
	if st.barrier < 0 || st.next <= st.barrier {
		return nil
	}
	ctx := context.Background()
	if err := s.setSync(ctx, true); err != nil {
		return dbError(s.path, s.busy, err)
	}
	err := s.inTx(ctx, "BEGIN IMMEDIATE", func() error {
		if _, err := s.stmts.ExecContext(ctx, `DELETE FROM events WHERE session_id = ? AND seq >= ?`, string(id), st.barrier); err != nil {
			return err
		}
		return bumpRevision(ctx, s.stmts, id)
	})
	if err != nil {
		return fmt.Errorf("cut back to seq %d: %w", st.barrier, dbError(s.path, s.busy, err))
	}
	st.next = st.barrier
	s.unsynced = false
	return nil
}

// txError wraps err from a transaction: a store error (a fence, a
// refusal, corruption) as it is, a SQLite error in the database's words.
func (s *SQLiteStore) txError(err error) error {
	var fe *FenceError
	var ce *session.CorruptError
	var de *DatabaseError
	if errors.As(err, &fe) || errors.As(err, &ce) || errors.As(err, &de) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return dbError(s.path, s.busy, err)
}

// checkBatch checks a batch is non-zero events with contiguous seqs.
func checkBatch(id session.SessionID, events []session.Event) error {
	for i := range events {
		if events[i].IsZero() {
			return fmt.Errorf("event %d of the batch is zero: %w", i, session.ErrInvalid)
		}
		if want := events[0].Seq() + int64(i); events[i].Seq() != want {
			return &FenceError{ID: id, Want: want, Got: events[i].Seq()}
		}
	}
	return nil
}

// sessionLocked returns what the store knows of id: registered by Create,
// or stored (its row is looked up when the store has not seen it yet).
// ErrNotFound if neither. s.mu must be held.
func (s *SQLiteStore) sessionLocked(ctx context.Context, id session.SessionID) (*sqlSession, error) {
	if st := s.sessions[id]; st != nil {
		return st, nil
	}
	found, err := s.rowExists(ctx, id)
	if err != nil {
		return nil, dbError(s.path, s.busy, err)
	}
	if !found {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	st := newSQLSession(session.Header{}, true)
	s.sessions[id] = st
	return st, nil
}

// appendTx is the body of one session's append inside an open mutating
// transaction on q, whose ownership checks are done: the tail check
// (fence), the session row on a first append (st.stored false; the caller
// sets st.stored after the transaction commits), the batch's rows and the
// revision bump. events is non-empty, with contiguous seqs (checkBatch).
// On error the caller rolls back (the transaction, or a savepoint around
// this call). s.mu must be held.
func (s *SQLiteStore) appendTx(ctx context.Context, q queryer, id session.SessionID, st *sqlSession, events []session.Event) error {
	next, err := s.tailOf(ctx, q, id, st)
	if err != nil {
		return err
	}
	if first := events[0].Seq(); first != next {
		return &FenceError{ID: id, Want: next, Got: first}
	}
	if !st.stored {
		h := st.header
		inc, err := uuid.NewRandom()
		if err != nil {
			return err
		}
		_, err = q.ExecContext(ctx, `INSERT INTO sessions (id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)
ON CONFLICT (id) DO UPDATE SET version = excluded.version, created_at = excluded.created_at, cwd = excluded.cwd,
  parent_session = excluded.parent_session, seed_length = excluded.seed_length, origin = excluded.origin,
  delegation_depth = excluded.delegation_depth, agent_preset = excluded.agent_preset`,
			string(h.ID), session.FormatVersion, h.CreatedAt, nullString(h.Cwd), nullString(h.ParentSession),
			nullOptInt(h.SeedLength), nullString(h.Origin), h.DelegationDepth, nullString(h.AgentPreset), inc.String())
		if err != nil {
			return err
		}
	}
	if err := s.insertRows(ctx, q, id, events, true); err != nil {
		return err
	}
	return bumpRevision(ctx, q, id)
}

// insertRows inserts the rows of events: packed per packRows, or one
// scalar row each (repair closers). Rows go in by insertRowsMax at a time,
// one statement each (see rowInserter).
func (s *SQLiteStore) insertRows(ctx context.Context, q queryer, id session.SessionID, events []session.Event, pack bool) error {
	in := rowInserter{q: q, id: id, fault: s.insertFault}
	if pack {
		if err := packRows(events, func(r sqlRow) error { return in.add(ctx, r) }); err != nil {
			return err
		}
		return in.flush(ctx)
	}
	for _, e := range events {
		r, err := scalarRow(e)
		if err != nil {
			return err
		}
		if err := in.add(ctx, r); err != nil {
			return err
		}
	}
	return in.flush(ctx)
}

// insertRowsMax is the most rows of one INSERT statement.
const insertRowsMax = 32

// rowInserter inserts a session's rows with multi-row INSERT statements:
// one statement of many rows costs the driver's per-statement work
// (binding through database/sql, stepping, resetting) once, which was
// most of an insert's CPU for the small rows of a short turn. The rows
// pending are inserted in statements of power-of-two sizes (at most a
// few texts to prepare, each prepared once per store: stmtCache).
type rowInserter struct {
	q     queryer
	id    session.SessionID
	fault func(session.SessionID, int64) error // SQLiteStore.insertFault
	rows  []sqlRow
	args  []any
}

func (in *rowInserter) add(ctx context.Context, r sqlRow) error {
	in.rows = append(in.rows, r)
	if len(in.rows) < insertRowsMax {
		return nil
	}
	return in.flush(ctx)
}

// flush inserts the rows pending.
func (in *rowInserter) flush(ctx context.Context) error {
	for len(in.rows) > 0 {
		k := 1
		for k*2 <= len(in.rows) {
			k *= 2
		}
		in.args = append(in.args[:0], string(in.id))
		for _, r := range in.rows[:k] {
			var ign any
			if r.ignorable >= 0 {
				ign = r.ignorable
			}
			var op any
			if r.op != "" {
				op = r.op
			}
			// An empty list is a zero-length BLOB, not NULL: X'' says so
			// whatever the driver binds for an empty []byte.
			src, empty := r.sources, false
			if b, ok := src.([]byte); ok && len(b) == 0 {
				src, empty = nil, true
			}
			in.args = append(in.args, r.seq, r.typ, r.time, r.data, src, op, ign, empty)
		}
		if in.fault != nil {
			if err := in.fault(in.id, in.rows[0].seq); err != nil {
				return err
			}
		}
		if _, err := in.q.ExecContext(ctx, insertRowsSQL(k), in.args...); err != nil {
			return err
		}
		clear(in.rows[:k])
		in.rows = in.rows[k:]
	}
	in.rows = in.rows[:0]
	return nil
}

// insertRowsSQLs are the INSERT statements of 1, 2, 4, ... rows.
var insertRowsSQLs = sync.OnceValue(func() []string {
	var out []string
	for k := 1; k <= insertRowsMax; k *= 2 {
		var b strings.Builder
		b.WriteString("INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable) VALUES ")
		for j := range k {
			p := func(i int) string { return "?" + strconv.Itoa(1+8*j+i) }
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "(?1, %s, %s, %s, %s, CASE WHEN %s THEN X'' ELSE %s END, %s, %s)",
				p(1), p(2), p(3), p(4), p(8), p(5), p(6), p(7))
		}
		out = append(out, b.String())
	}
	return out
})

// insertRowsSQL is the INSERT statement of k rows, k a power of two.
func insertRowsSQL(k int) string {
	i := 0
	for 1<<i < k {
		i++
	}
	return insertRowsSQLs()[i]
}

func bumpRevision(ctx context.Context, q queryer, id session.SessionID) error {
	res, err := q.ExecContext(ctx, `UPDATE sessions SET revision = revision + 1 WHERE id = ?`, string(id))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("session %s: revision update changed %d rows (%v)", id, n, err)
	}
	return nil
}

func nullString(v string) any {
	if v == "" {
		return nil
	}
	return v
}

func nullOptInt(v messages.OptInt) any {
	if n, ok := v.Get(); ok {
		return n
	}
	return nil
}

// checkMutation repeats the ownership checks at the start of a mutating
// transaction (already begun), then reads data_version: a change since
// the last mutating transaction means another connection committed, and
// starts a new epoch, in which every session's tail is checked again.
// s.mu must be held.
func (s *SQLiteStore) checkMutation(ctx context.Context) error {
	if err := checkMutation(ctx, s.stmts, s.path); err != nil {
		return err
	}
	v, err := pragmaInt(ctx, s.stmts, "data_version")
	if err != nil {
		return err
	}
	if v != s.dataVersion {
		s.dataVersion = v
		s.epoch++
	}
	return nil
}

// tailOf returns the stored next seq of id inside a mutating transaction
// whose checkMutation ran. The tail check (tailNext) reads and decodes
// the session's last rows, the largest cost of an append; it runs only
// when the store cannot know the tail: st.next is the tail this store
// checked or wrote in the current epoch, and no other connection has
// committed since (data_version is unchanged), so nothing can have moved
// it. A stale writer (another SQLite client that appended behind this
// store's back) changes data_version, so the next append checks the tail
// and is fenced as before; so is a row planted by hand without a
// revision bump, which a cache keyed on the revision would miss.
func (s *SQLiteStore) tailOf(ctx context.Context, q queryer, id session.SessionID, st *sqlSession) (int64, error) {
	if st.next >= 0 && st.tailEpoch == s.epoch {
		return st.next, nil
	}
	return s.tailNext(ctx, q, id)
}

// tailNext returns the stored next seq of id, checking the physical tail:
// the span from the older of the last two rows (widened back to a packed
// row covering it) must decode and be gapless.
func (s *SQLiteStore) tailNext(ctx context.Context, q queryer, id session.SessionID) (int64, error) {
	s.tailChecks++
	rows, err := q.QueryContext(ctx, `SELECT seq FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 2`, string(id))
	if err != nil {
		return 0, err
	}
	var last []int64
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			rows.Close()
			return 0, err
		}
		last = append(last, seq)
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	if len(last) == 0 {
		return 0, nil
	}
	from := last[len(last)-1]
	base, err := s.anchor(ctx, q, id, from)
	if err != nil {
		return 0, err
	}
	span, err := s.selectRows(ctx, q, id, base)
	if err != nil {
		return 0, err
	}
	next, missed, err := s.checkSpan(id, span, base)
	if err != nil && missed && base > 0 {
		// A row of an older shape needed an event before the span to
		// migrate (a replacing tool result's start node): check from the
		// start.
		if span, err = s.selectRows(ctx, q, id, 0); err != nil {
			return 0, err
		}
		next, _, err = s.checkSpan(id, span, 0)
	}
	return next, err
}

// checkSpan checks the rows of a tail span from seq base on decode and
// are gapless, returning the next seq; missed says a row of an older
// shape looked for an event before it that the span does not hold.
func (s *SQLiteStore) checkSpan(id session.SessionID, span []sqlRow, base int64) (int64, bool, error) {
	expected := base
	var all []session.Event
	lg := &legacyRows{id: id}
	for _, r := range span {
		n := len(all)
		var err error
		all, err = decodeStoredRow(all, r, lg)
		if err == nil && (len(all) == n || all[n].Seq() != expected) {
			err = fmt.Errorf("seq gap: want %d", expected)
		}
		if err != nil {
			return 0, lg.missed, &session.CorruptError{Path: s.path, Offset: -1, Seq: r.seq,
				Err: fmt.Errorf("session %s has an invalid physical tail at seq %d: %w", id, r.seq, err)}
		}
		expected = all[len(all)-1].Seq() + 1
	}
	return expected, lg.missed, nil
}

// anchor returns the seq the rows of a read from seq from must start at:
// from, or the seq of an earlier packed row that covers it (or that does
// not decode, and so might).
func (s *SQLiteStore) anchor(ctx context.Context, q queryer, id session.SessionID, from int64) (int64, error) {
	rows, err := s.queryRows(ctx, q, `SELECT seq, type, time, data, typeof(data), source_event_seqs, typeof(source_event_seqs), surface_op, ignorable
FROM events WHERE session_id = ? AND seq >= ? AND seq < ? AND ignorable = 0 AND type IN ('text-chunks', 'reasoning-chunks', 'tool-call-chunks') ORDER BY seq`,
		string(id), max(0, from-(sqlMaxPacked-1)), from)
	if err != nil {
		return 0, err
	}
	base := from
	var buf []session.Event
	for _, r := range rows {
		buf, err = decodeSQLRow(buf[:0], r)
		if err != nil || buf[len(buf)-1].Seq() >= from {
			base = min(base, r.seq)
		}
	}
	return base, nil
}

// selectRows returns id's rows from seq from on, in seq order.
func (s *SQLiteStore) selectRows(ctx context.Context, q queryer, id session.SessionID, from int64) ([]sqlRow, error) {
	return s.queryRows(ctx, q, `SELECT seq, type, time, data, typeof(data), source_event_seqs, typeof(source_event_seqs), surface_op, ignorable
FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq`, string(id), from)
}

// queryRows runs a select of event rows.
func (s *SQLiteStore) queryRows(ctx context.Context, q queryer, query string, args ...any) ([]sqlRow, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sqlRow
	for rows.Next() {
		var r sqlRow
		var dataType, srcType string
		var op sql.NullString
		var ign sql.NullInt64
		if err := rows.Scan(&r.seq, &r.typ, &r.time, &r.data, &dataType, &r.sources, &srcType, &op, &ign); err != nil {
			return nil, err
		}
		// The driver's Go types do not tell an empty TEXT or BLOB from
		// NULL; typeof does.
		r.data = sqlValue(r.data, dataType)
		r.sources = sqlValue(r.sources, srcType)
		r.op = op.String
		r.ignorable = -1
		if ign.Valid {
			r.ignorable = ign.Int64
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// sqlValue normalises a scanned ANY value to its SQLite type: "text" a
// string, "blob" a []byte, "null" nil.
func sqlValue(v any, typ string) any {
	switch typ {
	case "null":
		return nil
	case "text":
		switch v := v.(type) {
		case []byte:
			return string(v)
		case nil:
			return ""
		}
	case "blob":
		switch v := v.(type) {
		case string:
			return []byte(v)
		case nil:
			return []byte{}
		}
	}
	return v
}

// scanned is the outcome of scanRows.
type scanned struct {
	events []session.Event
	// torn is the seq of the first physical row of a torn tail, -1 when
	// there is none; next is the seq the first dropped event should have
	// had, and cause why the row was dropped.
	torn  int64
	next  int64
	cause error
	// upgraded and missed are the scan's legacyRows flags.
	upgraded, missed bool
}

// scanRows applies the recovery rules to a session's rows from seq base
// on: rows must decode and continue the seqs; a bad row followed by a row
// holding a turn/end is committed corruption (an error), a bad row after
// the last such row starts a torn tail, which is dropped. Rows of older
// shapes are migrated, as the JSONL reader migrates lines (legacyRows).
func (s *SQLiteStore) scanRows(id session.SessionID, rows []sqlRow, base int64) (scanned, error) {
	var all []session.Event
	spans := make([][2]int, len(rows))
	errs := make([]error, len(rows))
	lastEnd := -1
	lg := &legacyRows{id: id}
	for i, r := range rows {
		start := len(all)
		all, errs[i] = decodeStoredRow(all, r, lg)
		spans[i] = [2]int{start, len(all)}
		if errs[i] == nil {
			for _, e := range all[start:] {
				if e.Type() == session.TypeTurnEnd {
					lastEnd = i
				}
			}
		}
	}
	out := scanned{torn: -1, upgraded: lg.upgraded, missed: lg.missed}
	expected := base
	for i, r := range rows {
		err := errs[i]
		evs := all[spans[i][0]:spans[i][1]]
		if err == nil && evs[0].Seq() != expected {
			err = fmt.Errorf("row starts at seq %d, want %d", evs[0].Seq(), expected)
		}
		if err != nil {
			if i <= lastEnd {
				return scanned{missed: lg.missed}, &session.CorruptError{Path: s.path, Offset: -1, Seq: r.seq,
					Err: fmt.Errorf("corrupt session log %s: invalid committed physical row at seq %d: %w", id, r.seq, err)}
			}
			out.torn, out.next, out.cause = r.seq, expected, err
			break
		}
		out.events = append(out.events, evs...)
		expected += int64(len(evs))
	}
	return out, nil
}

// sessionRow is one row of the sessions table.
type sessionRow struct {
	header      session.Header
	incarnation string
	revision    int64
}

const sessionColumns = `id, version, created_at, cwd, parent_session, seed_length, origin, delegation_depth, agent_preset, incarnation, revision`

// scanSession reads and validates one sessions row.
func (s *SQLiteStore) scanSession(scan func(...any) error) (sessionRow, error) {
	var id string
	var version, created, revision int64
	var cwd, parent, origin, preset, incarnation sql.NullString
	var seed, depth sql.NullInt64
	if err := scan(&id, &version, &created, &cwd, &parent, &seed, &origin, &depth, &preset, &incarnation, &revision); err != nil {
		return sessionRow{}, err
	}
	bad := func(format string, args ...any) (sessionRow, error) {
		return sessionRow{}, &session.CorruptError{Path: s.path, Offset: -1, Seq: -1,
			Err: fmt.Errorf("session row %q: "+format, append([]any{id}, args...)...)}
	}
	switch {
	case id == "":
		return bad("id is empty")
	case version != session.FormatVersion:
		return sessionRow{}, &session.FormatVersionError{Version: version}
	case created < 0 || created > maxSafeInt:
		return bad("created_at %d is not a non-negative safe integer", created)
	case cwd.Valid && !filepath.IsAbs(cwd.String) && !strings.HasPrefix(cwd.String, "/"):
		return bad("cwd %q is not an absolute path", cwd.String)
	case seed.Valid && (seed.Int64 < 0 || seed.Int64 > maxSafeInt):
		return bad("seed_length %d is not a non-negative safe integer", seed.Int64)
	case origin.Valid && origin.String != "subagent":
		return bad("origin %q is not \"subagent\"", origin.String)
	case depth.Valid && (depth.Int64 < 0 || depth.Int64 > maxSafeInt):
		return bad("delegation_depth %d is not a non-negative safe integer", depth.Int64)
	case !uuidSyntax.MatchString(incarnation.String):
		return bad("incarnation %q is not a UUID", incarnation.String)
	case revision < 0 || revision > maxSafeInt:
		return bad("revision %d is not a non-negative safe integer", revision)
	}
	h := session.Header{ID: session.SessionID(id), CreatedAt: created, Cwd: cwd.String, ParentSession: parent.String,
		Origin: origin.String, DelegationDepth: depth.Int64, AgentPreset: preset.String}
	if seed.Valid {
		h.SeedLength = messages.Some(seed.Int64)
	}
	if err := h.Validate(); err != nil {
		return bad("%w", err)
	}
	return sessionRow{header: h, incarnation: incarnation.String, revision: revision}, nil
}

// revisionOf is the revision token of a session row.
func (s *SQLiteStore) revisionOf(r sessionRow) Revision {
	return Revision(s.identity + ":incarnation:" + r.incarnation + ":revision:" + strconv.FormatInt(r.revision, 10))
}

// readSession reads id's row; ErrNotFound if there is none.
func (s *SQLiteStore) readSession(ctx context.Context, q queryer, id session.SessionID) (sessionRow, error) {
	row := q.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = ?`, string(id))
	r, err := s.scanSession(row.Scan)
	if errors.Is(err, sql.ErrNoRows) {
		return sessionRow{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return r, err
}

// Load returns the log balanced and commits crash repair (see Reader): a
// torn tail's rows are deleted and an open turn's closers inserted, one
// scalar row each, in one transaction that checks the tail is still the
// one read.
func (s *SQLiteStore) Load(ctx context.Context, id session.SessionID) (Stored, error) {
	return s.load(ctx, id, commitRepair)
}

// Inspect is Load with the repair in memory only.
func (s *SQLiteStore) Inspect(ctx context.Context, id session.SessionID) (Stored, error) {
	return s.load(ctx, id, memoryRepair)
}

func (s *SQLiteStore) load(ctx context.Context, id session.SessionID, mode repairMode) (Stored, error) {
	if err := s.lockOpen(); err != nil {
		return Stored{}, err
	}
	defer s.mu.Unlock()
	out, err := s.loadLocked(ctx, id, mode)
	if err != nil {
		return Stored{}, fmt.Errorf("persister: load %s: %w", id, err)
	}
	return out, nil
}

func (s *SQLiteStore) loadLocked(ctx context.Context, id session.SessionID, mode repairMode) (Stored, error) {
	if err := ctxErr(ctx); err != nil {
		return Stored{}, err
	}
	var row sessionRow
	var sc scanned
	err := s.inTx(ctx, "BEGIN", func() error {
		var err error
		if row, err = s.readSession(ctx, s.conn, id); err != nil {
			return err
		}
		rows, err := s.selectRows(ctx, s.conn, id, 0)
		if err != nil {
			return err
		}
		sc, err = s.scanRows(id, rows, 0)
		return err
	})
	if err != nil {
		return Stored{}, s.txError(err)
	}
	if err := session.Validate(row.header, sc.events); err != nil {
		return Stored{}, invalidLog(s.path, err)
	}
	closers := session.InterruptedTurnClosers(sc.events)
	out := Stored{
		Header:   row.header,
		Events:   append(slices.Clip(sc.events), closers...),
		Closers:  closers,
		Revision: s.revisionOf(row),
	}
	if sc.torn >= 0 {
		out.Torn = &session.TornTail{Offset: sc.torn, NextSeq: sc.next, Err: sc.cause}
	}
	st := s.sessions[id]
	if st == nil {
		st = newSQLSession(row.header, true)
		s.sessions[id] = st
	}
	if mode == commitRepair && st.next < 0 && sc.torn < 0 {
		st.next, st.barrier, st.tailEpoch = int64(len(sc.events)), int64(len(sc.events)), 0
	}
	if mode == memoryRepair || (sc.torn < 0 && len(closers) == 0) {
		return out, nil
	}
	if s.readOnly {
		return Stored{}, fmt.Errorf("commit repair: %w", ErrReadOnly)
	}
	if err := s.setSync(ctx, true); err != nil {
		return Stored{}, fmt.Errorf("commit repair: %w", dbError(s.path, s.busy, err))
	}
	err = s.inTx(ctx, "BEGIN IMMEDIATE", func() error {
		if err := s.checkMutation(ctx); err != nil {
			return err
		}
		return s.repairTx(ctx, s.conn, id, sc.torn, closers)
	})
	if err != nil {
		return Stored{}, fmt.Errorf("commit repair: %w", s.txError(err))
	}
	// A repair is durable, and covers what was before it.
	st.next, st.tailEpoch = int64(len(out.Events)), 0
	st.barrier, s.unsynced = st.next, false
	row.revision++
	out.Revision = s.revisionOf(row)
	return out, nil
}

// repairTx commits a repair inside an open mutating transaction: the
// session's rows are scanned again under the lock; the torn tail must
// still start at torn (-1: there must be none), its rows are deleted, the
// closers inserted (each its own scalar row) right after the last kept
// event, and the revision bumped.
func (s *SQLiteStore) repairTx(ctx context.Context, q queryer, id session.SessionID, torn int64, closers []session.Event) error {
	if _, err := s.readSession(ctx, q, id); err != nil {
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("session %s metadata row is missing", id)
		}
		return err
	}
	rows, err := s.selectRows(ctx, q, id, 0)
	if err != nil {
		return err
	}
	sc, err := s.scanRows(id, rows, 0)
	if err != nil {
		return err
	}
	switch {
	case torn >= 0 && sc.torn != torn:
		return &FenceError{ID: id, Want: torn, Got: sc.torn}
	case torn < 0 && sc.torn >= 0:
		return fmt.Errorf("session %s repair omitted current torn tail at seq %d", id, sc.torn)
	}
	if torn >= 0 {
		if _, err := q.ExecContext(ctx, `DELETE FROM events WHERE session_id = ? AND seq >= ?`, string(id), torn); err != nil {
			return err
		}
	}
	if len(closers) > 0 {
		if next := int64(len(sc.events)); closers[0].Seq() != next {
			return &FenceError{ID: id, Want: next, Got: closers[0].Seq()}
		}
		if err := s.insertRows(ctx, q, id, closers, false); err != nil {
			return err
		}
	}
	return bumpRevision(ctx, q, id)
}

// ReadFrom returns the stored events from seq from on, as stored: no
// repair, no closers, a torn tail left out. A read from inside a packed
// row starts at that row.
func (s *SQLiteStore) ReadFrom(ctx context.Context, id session.SessionID, from int64) ([]session.Event, error) {
	if err := s.lockOpen(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if err := ctxErr(ctx); err != nil {
		return nil, fmt.Errorf("persister: read %s: %w", id, err)
	}
	if from < 0 || from > maxSafeInt {
		return nil, fmt.Errorf("persister: read %s from seq %d: not a non-negative safe integer", id, from)
	}
	var out []session.Event
	err := s.inTx(ctx, "BEGIN", func() error {
		if _, err := s.readSession(ctx, s.conn, id); err != nil {
			return err
		}
		base, err := s.anchor(ctx, s.conn, id, from)
		if err != nil {
			return err
		}
		rows, err := s.selectRows(ctx, s.conn, id, base)
		if err != nil {
			return err
		}
		sc, err := s.scanRows(id, rows, base)
		if sc.missed && base > 0 {
			// A row of an older shape needed an event before base to
			// migrate (a replacing tool result's start node): read from
			// the start, so that the suffix is what a load reads.
			if rows, err = s.selectRows(ctx, s.conn, id, 0); err != nil {
				return err
			}
			sc, err = s.scanRows(id, rows, 0)
		}
		if err != nil {
			return err
		}
		for i, e := range sc.events {
			if e.Seq() >= from {
				out = slices.Clone(sc.events[i:])
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("persister: read %s: %w", id, s.txError(err))
	}
	return out, nil
}

// List returns the stored sessions with their revisions, sorted by id.
// One invalid row fails the whole call.
func (s *SQLiteStore) List(ctx context.Context) ([]Listed, error) {
	if err := s.lockOpen(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if err := ctxErr(ctx); err != nil {
		return nil, fmt.Errorf("persister: list: %w", err)
	}
	rows, err := s.conn.QueryContext(ctx, `SELECT `+sessionColumns+` FROM sessions`)
	if err != nil {
		return nil, fmt.Errorf("persister: list: %w", dbError(s.path, s.busy, err))
	}
	defer rows.Close()
	var out []Listed
	for rows.Next() {
		r, err := s.scanSession(rows.Scan)
		if err != nil {
			return nil, fmt.Errorf("persister: list: %w", err)
		}
		out = append(out, Listed{Header: r.header, Revision: s.revisionOf(r)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("persister: list: %w", dbError(s.path, s.busy, err))
	}
	slices.SortFunc(out, func(a, b Listed) int { return cmp.Compare(a.Header.ID, b.Header.ID) })
	return out, nil
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
