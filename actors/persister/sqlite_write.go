package persister

import (
	"context"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// Append appends events in one transaction (BEGIN IMMEDIATE ... COMMIT,
// synchronous=FULL): durable when it returns, whatever durable says. The
// transaction repeats the ownership checks, checks the stored tail (an
// append that does not start at the stored next seq is a *FenceError and
// writes nothing), inserts the session's row on its first append, packs
// the batch into rows and bumps the session's revision. An empty batch
// does nothing.
func (s *SQLiteStore) Append(ctx context.Context, id session.SessionID, events []session.Event, durable Durability) error {
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
	if err := s.appendLocked(ctx, id, st, events, bool(durable)); err != nil {
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
		// The write lock is held: the statements run on stepCtx.
		if err := s.checkMutation(stepCtx(ctx)); err != nil {
			return err
		}
		return s.appendTx(stepCtx(ctx), s.stmts, id, st, events, true)
	})
	if err != nil {
		return s.txError(err)
	}
	s.committed(st, events, durable, full)
	s.checkpoints.kick()
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
// sets st.stored after the transaction commits), the batch's rows and,
// if bump, the revision bump (else the caller bumps it: bumpRevisions).
// events is non-empty, with contiguous seqs (checkBatch). On error the
// caller rolls back (the transaction, or a savepoint around this call).
// s.mu must be held.
func (s *SQLiteStore) appendTx(ctx context.Context, q queryer, id session.SessionID, st *sqlSession, events []session.Event, bump bool) error {
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
	if !bump {
		return nil
	}
	return bumpRevision(ctx, q, id)
}

// insertRows inserts the rows of events: packed per packRows, or one
// scalar row each (repair closers). Rows go in by insertRowsMax at a time,
// one statement each (see rowInserter).
func (s *SQLiteStore) insertRows(ctx context.Context, q queryer, id session.SessionID, events []session.Event, pack bool) error {
	in := &s.inserter
	in.q, in.id, in.fault = q, id, s.insertFault
	in.raw, _ = q.(*stmtCache)
	defer in.reset()
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
// pending go in one statement of exactly their number (up to
// insertRowsMax; each size prepared once per store, when first used:
// stmtCache). Statements of power-of-two sizes only (fewer texts) took
// up to five statements for a short turn's seven or so rows. On the
// store's statement cache (raw), the statements run on the driver's
// connection directly (stmtCache.execRaw). The store keeps one
// (SQLiteStore.inserter), so that its buffers are reused.
type rowInserter struct {
	q     queryer
	raw   *stmtCache // q, when it is the store's statement cache
	id    session.SessionID
	fault func(session.SessionID, int64) error // SQLiteStore.insertFault
	rows  []sqlRow
	args  []sqldriver.NamedValue
	boxed []any // args for a q that is not raw
}

// reset drops what the last insert left in the buffers, keeping them.
func (in *rowInserter) reset() {
	clear(in.rows)
	clear(in.args[:cap(in.args)])
	clear(in.boxed[:cap(in.boxed)])
	in.q, in.raw, in.fault = nil, nil, nil
	in.rows, in.args, in.boxed = in.rows[:0], in.args[:0], in.boxed[:0]
}

// arg appends the statement's next argument.
func (in *rowInserter) arg(v any) {
	in.args = append(in.args, sqldriver.NamedValue{Ordinal: len(in.args) + 1, Value: v})
}

func (in *rowInserter) add(ctx context.Context, r sqlRow) error {
	in.rows = append(in.rows, r)
	if len(in.rows) < insertRowsMax {
		return nil
	}
	return in.flush(ctx)
}

// flush inserts the rows pending, insertRowsMax at a time, and empties
// in.rows, keeping its array: slicing past the rows inserted would shrink
// its capacity to nothing, and the next session's rows would allocate it
// again.
func (in *rowInserter) flush(ctx context.Context) error {
	for done := 0; done < len(in.rows); {
		rows := in.rows[done:min(len(in.rows), done+insertRowsMax)]
		in.args = in.args[:0]
		in.arg(string(in.id))
		for _, r := range rows {
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
			in.arg(r.seq)
			in.arg(r.typ)
			in.arg(r.time)
			in.arg(r.data)
			in.arg(empty)
			in.arg(src)
			in.arg(op)
			in.arg(ign)
		}
		if in.fault != nil {
			if err := in.fault(in.id, rows[0].seq); err != nil {
				return err
			}
		}
		if err := in.exec(ctx, insertRowsSQL(len(rows))); err != nil {
			return err
		}
		done += len(rows)
	}
	clear(in.rows)
	in.rows = in.rows[:0]
	return nil
}

// exec runs query with the arguments in in.args.
func (in *rowInserter) exec(ctx context.Context, query string) error {
	if in.raw != nil {
		return in.raw.execRaw(ctx, query, in.args)
	}
	in.boxed = in.boxed[:0]
	for _, a := range in.args {
		in.boxed = append(in.boxed, a.Value)
	}
	_, err := in.q.ExecContext(ctx, query, in.boxed...)
	return err
}

// insertRowsSQLs are the INSERT statements of 1, 2, ... insertRowsMax
// rows. Only the session id is a numbered parameter (?1, shared by the
// rows); the others are anonymous, numbered in order. The driver asks
// SQLite for every parameter's name when it binds, which scans the
// statement's list of named parameters: with every parameter numbered,
// binding a statement of n parameters took n² steps, an eighth of the
// insert's CPU.
var insertRowsSQLs = sync.OnceValue(func() []string {
	var out []string
	for k := 1; k <= insertRowsMax; k++ {
		var b strings.Builder
		b.WriteString("INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, surface_op, ignorable) VALUES ")
		for j := range k {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?1, ?, ?, ?, ?, CASE WHEN ? THEN X'' ELSE ? END, ?, ?)")
		}
		out = append(out, b.String())
	}
	return out
})

// insertRowsSQL is the INSERT statement of k rows, 1 <= k <= insertRowsMax.
func insertRowsSQL(k int) string { return insertRowsSQLs()[k-1] }

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

// bumpRevisions bumps the revisions of the sessions ids (distinct, each
// with a row) with one statement: a group commit's, where one statement
// per session was a twentieth of its CPU. buf is a scratch buffer; the
// one returned may be reused.
func bumpRevisions(ctx context.Context, q queryer, ids []session.SessionID, buf []byte) ([]byte, error) {
	if len(ids) == 1 {
		return buf, bumpRevision(ctx, q, ids[0])
	}
	buf = append(buf[:0], '[')
	for i, id := range ids {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = messages.AppendQuoted(buf, string(id))
	}
	buf = append(buf, ']')
	res, err := q.ExecContext(ctx, `UPDATE sessions SET revision = revision + 1 WHERE id IN (SELECT value FROM json_each(?))`, string(buf))
	if err != nil {
		return buf, err
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(ids)) {
		return buf, fmt.Errorf("revision update of %d sessions changed %d rows (%v)", len(ids), n, err)
	}
	return buf, nil
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

// checkMutation reads data_version at the start of a mutating
// transaction (already begun) and repeats the ownership checks if it
// changed since they last passed: a change means another connection
// committed, and starts a new epoch, in which every session's tail is
// checked again. Unchanged, nothing but this connection wrote to the
// database since (the write lock is held from BEGIN IMMEDIATE on), and it
// never changes the application id, the schema or the user version, so
// the checks would pass as they did: they were a sixth of the cost of a
// small group's transaction. s.mu must be held.
func (s *SQLiteStore) checkMutation(ctx context.Context) error {
	v, err := pragmaInt(ctx, s.stmts, "data_version")
	if err != nil {
		return err
	}
	if s.versionChecked && v == s.dataVersion {
		return nil
	}
	s.ownershipChecks++
	if err := checkMutation(ctx, s.stmts, s.path); err != nil {
		return err
	}
	if !s.versionChecked || v != s.dataVersion {
		s.dataVersion, s.versionChecked = v, true
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
