package persister

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dshgo/dsh/actors/session"
)

// Group commit and the WAL checkpoint policy of the SQLite store.
//
// appendGroup (groupWriter) commits the batches of many sessions in one
// transaction: BEGIN IMMEDIATE, the ownership checks once, then each
// session's append (the tail check that fences a stale writer, the session
// row on a first append, the rows), the revision bumps of every session in
// one statement, then one COMMIT. It takes the batches one at a time while
// it writes them, so that a turn end queued meanwhile joins the transaction
// (the persister hands barriers out first) instead of waiting for it to
// commit. When the group starts with a barrier, its COMMIT
// (synchronous=FULL) is one sync of the WAL for every session in the group,
// where Append would sync once per session; when a barrier joins a group
// that began as write-behind (synchronous=NORMAL: the level cannot change
// inside a transaction), a FULL commit that changes nothing follows it and
// syncs the WAL.
//
// Failures. The appends are written without savepoints first (SAVEPOINT and
// RELEASE are two statements more per session, for a failure that almost
// never happens). If a session's append fails, that transaction is rolled
// back whole and written again with each session's append (and its revision
// bump) inside its own SAVEPOINT: a session whose append fails (refused by
// its fence, failing its checks, a SQLite error in its statements) is then
// rolled back to its savepoint and fails alone (cut back to its last
// barrier, as after a failed Append); the others commit. A failure of the
// transaction itself (BEGIN, the ownership checks, COMMIT, a rollback to a
// savepoint that fails) fails every session in the group: nothing of any of
// them is stored.
//
// Checkpoints. SQLite's default runs a checkpoint inside the COMMIT that
// takes the WAL past 1000 pages: that commit (and every session waiting
// on it) pays for copying the WAL into the database and syncing it, a
// latency spike every few megabytes written. The writer connection turns
// that off (wal_autocheckpoint=0); a checkpointer goroutine with its own
// connection runs PASSIVE checkpoints when the WAL has grown past
// walCheckpointBytes (it looks after every group commit, and every
// walCheckpointPoll for the other writes). A PASSIVE checkpoint takes no
// writer lock: commits go on while it copies, and a writer restarts the
// WAL from its start once a checkpoint has caught up, so the file stays
// near the threshold (it is reused, not grown). Under writes that never
// pause no PASSIVE checkpoint catches up, and the writer bounds the WAL
// with a RESTART checkpoint of its own (restartWAL), before a group
// without a turn end when it can. Once the store is idle (no commit for
// walCheckpointPoll), the checkpointer runs a PASSIVE checkpoint and then a TRUNCATE one, which
// empties the WAL file: the copy is done without the writer lock, and the
// truncation, which takes it, has nothing left to copy, so a commit that
// arrives meanwhile waits for a file truncation at most. Close
// checkpoints with TRUNCATE before the last connection closes (SQLite
// would checkpoint and remove the WAL then anyway; TRUNCATE says so, and
// empties it even if removing fails). Figures: docs/durability.md#sqlite-checkpoints.
//
// Rejected alternative: a larger wal_autocheckpoint. It makes the spikes
// rarer and each one longer; the commit path still pays for them.

// walCheckpointBytes is the WAL size past which the checkpointer runs a
// PASSIVE checkpoint: about SQLite's own default of 1000 pages of 4 KiB.
const walCheckpointBytes = 4 << 20

// walRestartBytes bounds the WAL under writes that never pause: past it,
// the writer runs a RESTART checkpoint before its next transaction without
// a turn end, past twice it before any (restartWAL).
const walRestartBytes = 4 * walCheckpointBytes

// walCheckpointPoll is how often the checkpointer looks at the WAL without
// being told of a commit (writes other than group commits).
const walCheckpointPoll = 250 * time.Millisecond

var _ groupWriter = (*SQLiteStore)(nil)

// appendGroup commits the batches next hands it in one transaction (with
// a savepoint per session when a first attempt without them failed: see
// the top of this file), taking
// them while it writes: a barrier queued meanwhile joins the group. The
// commit is FULL (one fsync, covering every commit before it) when the
// first batch with events is durable or a session's first append, or the
// journal is not WAL; otherwise it is NORMAL, like an Append without
// durable, and a barrier or a first append that joined it later is made
// durable by a sync right after (barrierLocked: a FULL commit that
// changes nothing). In a durable group every session that succeeds is at
// a barrier; a session that fails is cut back to its last barrier, as
// after a failed Append. Safe for concurrent use.
func (s *SQLiteStore) appendGroup(ctx context.Context, next func() (groupBatch, bool)) []error {
	var (
		batches []groupBatch
		errs    []error
		sts     []*sqlSession
	)
	fail := func(i int, err error) { errs[i] = fmt.Errorf("persister: append %s: %w", batches[i].ID, err) }
	// take takes the next batch and what it needs before it is written:
	// its session known, its seqs contiguous. -1 when there is none.
	take := func() int {
		b, ok := next()
		if !ok {
			return -1
		}
		i := len(batches)
		batches, errs, sts = append(batches, b), append(errs, nil), append(sts, nil)
		st, err := s.sessionLocked(ctx, b.ID)
		if err == nil && len(b.Events) > 0 {
			err = checkBatch(b.ID, b.Events)
		}
		if err != nil {
			fail(i, err)
		} else {
			sts[i] = st
		}
		return i
	}
	if err := s.lockOpen(); err != nil {
		if _, ok := next(); ok {
			errs = append(errs, err)
		}
		return errs
	}
	defer s.mu.Unlock()
	if err := ctxErr(ctx); err != nil || s.readOnly {
		if err == nil {
			err = ErrReadOnly
		}
		if take() >= 0 {
			fail(0, err)
		}
		return errs
	}
	// Batches without events are barriers alone: they need a sync, not a
	// transaction. The first batch with events opens it.
	var todo, empty []int
	durable := false
	first := -1
	for first < 0 {
		i := take()
		if i < 0 {
			break
		}
		if i == 0 {
			// The persister hands out barriers first: a group whose first
			// write is not one has no turn end waiting on it.
			s.restartWAL(batches[0].Durable)
		}
		if errs[i] != nil {
			continue
		}
		durable = durable || batches[i].Durable
		if len(batches[i].Events) > 0 {
			first = i
		} else {
			empty = append(empty, i)
		}
	}
	if first < 0 {
		var err error
		if durable {
			err = s.barrierLocked(nil)
		}
		for _, i := range empty {
			if err != nil {
				fail(i, err)
			} else if durable {
				sts[i].barrier = sts[i].next
			}
		}
		return errs
	}
	todo = append(todo, first)
	full := !s.wal || durable || !sts[first].stored
	syncAfter := false // a barrier or a first append joined a NORMAL commit
	// more takes batches until one with events joins todo, false when
	// none is left.
	more := func() bool {
		for {
			i := take()
			if i < 0 {
				return false
			}
			b := batches[i]
			if errs[i] != nil {
				continue
			}
			durable = durable || b.Durable
			if len(b.Events) == 0 {
				empty = append(empty, i)
				continue
			}
			todo = append(todo, i)
			syncAfter = syncAfter || (!full && (b.Durable || !sts[i].stored))
			return true
		}
	}
	// write runs the transaction over the batches in todo, then over those
	// taken while it runs. Without savepoints, a session's failure is the
	// attempt's (retryWithSavepoints): it is rolled back whole and run
	// again with a savepoint per session, which fails that session alone.
	var ids []session.SessionID
	write := func(savepoints bool) error {
		return s.inTx(ctx, "BEGIN IMMEDIATE", func() error {
			// The statements run on stepCtx: the driver watches a
			// cancellable context with a goroutine per statement, a tenth
			// of a commit's CPU. They wait for nothing (the write lock is
			// held since BEGIN), so ctx is checked between sessions, and
			// COMMIT runs on it.
			plain := stepCtx(ctx)
			if err := s.checkMutation(plain); err != nil {
				return err
			}
			for n := 0; n < len(todo) || more(); n++ {
				i := todo[n]
				if err := ctxErr(ctx); err != nil {
					return err
				}
				b := batches[i]
				if !savepoints {
					if err := s.appendTx(plain, s.stmts, b.ID, sts[i], b.Events, false); err != nil {
						return retryWithSavepoints{err}
					}
					continue
				}
				if err := s.appendSavepoint(plain, s.stmts, b, sts[i]); err != nil {
					if _, ok := err.(savepointError); ok {
						return err
					}
					fail(i, s.txError(err))
				}
			}
			if !savepoints {
				// Every session's append succeeded: their revisions are
				// bumped at once.
				ids = ids[:0]
				for _, i := range todo {
					ids = append(ids, batches[i].ID)
				}
				var err error
				if s.bumpBuf, err = bumpRevisions(plain, s.stmts, ids, s.bumpBuf); err != nil {
					return retryWithSavepoints{err}
				}
			}
			return nil
		})
	}
	err := s.setSync(ctx, full)
	if err == nil {
		err = write(false)
		if errors.As(err, new(retryWithSavepoints)) {
			err = write(true)
		}
	}
	if err == nil && syncAfter {
		// Committed, but not durable yet: what succeeded is written (as
		// NORMAL commits are) until the sync below.
		for _, i := range todo {
			if errs[i] == nil {
				s.committed(sts[i], batches[i].Events, false, false)
			}
		}
		if err = s.barrierLocked(nil); err == nil {
			for _, i := range todo {
				if errs[i] == nil && durable {
					sts[i].barrier = sts[i].next
				}
			}
		}
	} else if err == nil {
		for _, i := range todo {
			if errs[i] == nil {
				s.committed(sts[i], batches[i].Events, durable, full)
			}
		}
	}
	if err != nil {
		err = s.txError(err)
		for _, i := range append(todo, empty...) {
			errs[i] = nil
			fail(i, err)
		}
	}
	for _, i := range todo {
		if errs[i] != nil {
			if cerr := s.cutBack(batches[i].ID, sts[i]); cerr != nil {
				errs[i] = fmt.Errorf("%w; then %w", errs[i], cerr)
			}
		}
	}
	if err == nil && durable {
		for _, i := range empty {
			sts[i].barrier = sts[i].next
		}
	}
	s.checkpoints.kick()
	return errs
}

// retryWithSavepoints is a session's failure in a group written without
// savepoints: the transaction is rolled back and written again with them.
type retryWithSavepoints struct{ err error }

func (e retryWithSavepoints) Error() string { return e.err.Error() }
func (e retryWithSavepoints) Unwrap() error { return e.err }

// savepointError is a failure of the savepoint statements themselves: the
// transaction's state is unknown, so the whole group fails.
type savepointError struct{ err error }

func (e savepointError) Error() string { return e.err.Error() }
func (e savepointError) Unwrap() error { return e.err }

// appendSavepoint runs one session's append inside SAVEPOINT group_batch:
// released when it succeeds, rolled back to (and released) when it fails,
// so that the transaction goes on without any of its rows. s.mu must be
// held and a mutating transaction open.
func (s *SQLiteStore) appendSavepoint(ctx context.Context, q *stmtCache, b groupBatch, st *sqlSession) error {
	if _, err := q.ExecContext(ctx, "SAVEPOINT group_batch"); err != nil {
		return savepointError{err}
	}
	err := s.appendTx(ctx, q, b.ID, st, b.Events, true)
	if err != nil {
		// On a fresh context: a done ctx must not leave the session's
		// rows in the transaction.
		if _, rerr := q.ExecContext(context.Background(), "ROLLBACK TO group_batch"); rerr != nil {
			return savepointError{fmt.Errorf("%w; rollback to savepoint: %w", err, rerr)}
		}
	}
	if _, rerr := q.ExecContext(context.Background(), "RELEASE group_batch"); rerr != nil {
		return savepointError{fmt.Errorf("release savepoint: %w", rerr)}
	}
	return err
}

// stmtCache is a queryer over conn that prepares each statement text once
// and reuses it: every append runs the same few statements (the ownership
// checks, the tail check, the row insert, the revision bump, the
// savepoints), and compiling each one again per call was a fifth of a
// commit's CPU. It lives as long as the store's connection (close
// releases the statements); SQLite prepares a statement again by itself
// when the schema changed. Not safe for concurrent use (s.mu serialises
// it with everything on conn).
type stmtCache struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
	raw   map[string]sqldriver.Stmt // execRaw's
}

var _ queryer = (*stmtCache)(nil)

func (c *stmtCache) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st := c.stmts[query]; st != nil {
		return st, nil
	}
	st, err := c.conn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if c.stmts == nil {
		c.stmts = map[string]*sql.Stmt{}
	}
	c.stmts[query] = st
	return st, nil
}

func (c *stmtCache) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (c *stmtCache) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// QueryRowContext is conn's: a *sql.Row cannot carry a preparation error,
// and the store runs few single-row queries per session.
func (c *stmtCache) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := c.stmt(ctx, query)
	if err != nil {
		return c.conn.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// execRaw runs query, prepared once on the driver's connection, with
// args, without database/sql in between: its checks and conversions of
// every argument, its locks and its connection bookkeeping per statement
// were a tenth of a group commit's CPU, spent on the row inserts, a
// statement of up to 257 arguments each (rowInserter).
func (c *stmtCache) execRaw(ctx context.Context, query string, args []sqldriver.NamedValue) error {
	return c.conn.Raw(func(dc any) error {
		st := c.raw[query]
		if st == nil {
			pc, ok := dc.(sqldriver.ConnPrepareContext)
			if !ok {
				return fmt.Errorf("driver connection %T cannot prepare with a context", dc)
			}
			var err error
			if st, err = pc.PrepareContext(ctx, query); err != nil {
				return err
			}
			if c.raw == nil {
				c.raw = map[string]sqldriver.Stmt{}
			}
			c.raw[query] = st
		}
		ex, ok := st.(sqldriver.StmtExecContext)
		if !ok {
			return fmt.Errorf("driver statement %T cannot execute with a context", st)
		}
		_, err := ex.ExecContext(ctx, args)
		return err
	})
}

// close releases the prepared statements. A nil cache has none.
func (c *stmtCache) close() {
	if c == nil {
		return
	}
	for _, st := range c.stmts {
		_ = st.Close()
	}
	if len(c.raw) > 0 {
		_ = c.conn.Raw(func(any) error {
			for _, st := range c.raw {
				_ = st.Close()
			}
			return nil
		})
	}
}

// checkpointer runs PASSIVE checkpoints of a WAL database off the commit
// path (see the top of this file). Its methods are safe for concurrent use
// and do nothing on a nil checkpointer (a read-only store, or a journal
// mode other than WAL).
type checkpointer struct {
	db     *sql.DB       // its own connection: a checkpoint never waits for the writer's
	wal    string        // the WAL file
	limit  atomic.Int64  // the WAL size that calls for a checkpoint
	wake   chan struct{} // 1-buffered
	done   chan struct{}
	wg     sync.WaitGroup
	writes atomic.Uint64 // commits told of (kick)
	// truncate runs the TRUNCATE checkpoint of an idle store
	// (SQLiteStore.truncateWAL), reporting whether it ran.
	truncate func() bool
	// frames is the number of frames the WAL held at the last PASSIVE
	// checkpoint, and restartAt the size of them past which the writer
	// runs a RESTART one (restartWAL).
	frames    atomic.Int64
	restartAt atomic.Int64
	mu        sync.Mutex // guards runs, truncates and restarts
	runs      int        // PASSIVE checkpoints run (tests)
	// truncates and restarts count the TRUNCATE checkpoints of an idle
	// store and the RESTART ones (tests).
	truncates, restarts int
	stopped             sync.Once
}

// startCheckpointer opens the checkpointer's connection to the database
// at path and starts its goroutine; the writer's conn gets
// wal_autocheckpoint=0. busy is the store's busy timeout.
func startCheckpointer(ctx context.Context, conn *sql.Conn, path string, busy time.Duration, truncate func() bool) (*checkpointer, error) {
	c, err := newCheckpointer(ctx, conn, path, busy)
	if err != nil {
		return nil, err
	}
	c.truncate = truncate
	c.wg.Go(c.run)
	return c, nil
}

// newCheckpointer is startCheckpointer without the goroutine.
func newCheckpointer(ctx context.Context, conn *sql.Conn, path string, busy time.Duration) (*checkpointer, error) {
	if _, err := conn.ExecContext(ctx, "PRAGMA wal_autocheckpoint = 0"); err != nil {
		return nil, fmt.Errorf("wal_autocheckpoint: %w", err)
	}
	db, err := sql.Open("sqlite", sqlURI(path, "_pragma=busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")"))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	c := &checkpointer{db: db, wal: path + "-wal", wake: make(chan struct{}, 1), done: make(chan struct{})}
	c.limit.Store(walCheckpointBytes)
	c.restartAt.Store(walRestartBytes)
	return c, nil
}

// kick tells the checkpointer that a commit may have grown the WAL.
func (c *checkpointer) kick() {
	if c == nil {
		return
	}
	c.writes.Add(1)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *checkpointer) run() {
	poll := time.NewTicker(walCheckpointPoll)
	defer poll.Stop()
	var seen uint64    // c.writes at the last tick
	var last time.Time // when the last checkpoint ran
	for {
		idle := false
		select {
		case <-c.wake:
			if time.Since(last) < walCheckpointPoll {
				// The WAL file keeps its size once a writer restarts it
				// from its start: past the threshold once, it stays
				// there, and each commit would be followed by a
				// checkpoint (and a sync of the database file) of its
				// few pages. At most one per poll, then.
				continue
			}
		case <-poll.C:
			w := c.writes.Load()
			idle, seen = w == seen, w
		case <-c.done:
			return
		}
		fi, err := os.Stat(c.wal)
		if err != nil || fi.Size() == 0 || (!idle && fi.Size() < c.limit.Load()) {
			continue
		}
		last = time.Now()
		c.pass(idle)
	}
}

// pass runs the checkpoints of one look at a WAL that calls for them: a
// PASSIVE one, then, on an idle store, a TRUNCATE one. A failure
// (SQLITE_BUSY while another checkpoint runs, an I/O error) leaves the
// WAL to the next attempt: nothing is lost, the WAL only stays longer.
func (c *checkpointer) pass(idle bool) {
	if ok, _ := c.checkpoint("PASSIVE"); ok && idle && c.truncate != nil {
		if c.truncate() {
			c.mu.Lock()
			c.truncates++
			c.mu.Unlock()
		}
	}
}

// truncateWAL runs the TRUNCATE checkpoint of an idle store on the
// writer's connection, unless the store is busy (or closed): a WAL
// started again by another connection changes the writer's data_version,
// which would make it check every session's tail again (see tailOf).
func (s *SQLiteStore) truncateWAL() bool {
	if !s.mu.TryLock() {
		return false
	}
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	var busy, logFrames, done int64
	err := s.conn.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logFrames, &done)
	return err == nil && busy == 0
}

// restartWAL runs a RESTART checkpoint on the writer's connection when the
// last PASSIVE one found the WAL holding restartAt bytes of frames or more,
// before a group that holds no barrier so far (barrier false), or before
// any group from twice restartAt on: a RESTART stalls the group after it (a
// copy and a sync of the database file), which a group without a turn end
// waiting on it pays for, when there is one. Under writes that never pause,
// no PASSIVE checkpoint catches up (commits land while it copies), so no
// writer starts the WAL again and it grows; a RESTART run by a background
// connection would wait for a moment without a writer that a busy committer
// does not leave. Run by the writer between its transactions, it copies
// what the PASSIVE ones left (little, when they keep up), syncs the
// database file and makes the next commit start the WAL again: a short
// stall of one commit, once per restartAt bytes written. s.mu must be held,
// no transaction open.
func (s *SQLiteStore) restartWAL(barrier bool) {
	c := s.checkpoints
	if c == nil {
		return
	}
	size, at := c.frames.Load()*walFrameBytes, c.restartAt.Load()
	if size < at || (barrier && size < 2*at) {
		return
	}
	c.frames.Store(0)
	var busy, logFrames, done int64
	err := s.conn.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(RESTART)").Scan(&busy, &logFrames, &done)
	if err == nil && busy == 0 {
		c.mu.Lock()
		c.restarts++
		c.mu.Unlock()
	}
}

// walFrameBytes is the size of one WAL frame: a page (the store's 4 KiB
// default) and its header.
const walFrameBytes = 4096 + 24

// checkpoint runs a checkpoint of mode, reporting whether it ran and how
// many frames the WAL holds.
func (c *checkpointer) checkpoint(mode string) (bool, int64) {
	var busy, logFrames, done int64
	if c.db.QueryRow("PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &logFrames, &done) != nil || busy != 0 {
		return false, 0
	}
	if mode == "PASSIVE" {
		c.frames.Store(logFrames)
		c.mu.Lock()
		c.runs++
		c.mu.Unlock()
	}
	return true, logFrames
}

// stop ends the goroutine and closes the connection. Idempotent.
func (c *checkpointer) stop() error {
	if c == nil {
		return nil
	}
	var err error
	c.stopped.Do(func() {
		close(c.done)
		c.wg.Wait()
		err = c.db.Close()
	})
	return err
}

// checkpointRuns returns how many PASSIVE checkpoints ran, and how many
// TRUNCATE ones.
func (c *checkpointer) checkpointRuns() (passive, truncate int) {
	if c == nil {
		return 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs, c.truncates
}
