package persister

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

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

// readCheckRows is how many rows a read steps through between two looks
// at its context (see stepCtx).
const readCheckRows = 256

// stepCtx is the context a read's or a locked write's statements run on:
// ctx without its cancellation. The driver watches a statement run on a
// cancellable context with a goroutine of its own (one per statement,
// living as long as its rows), and these statements wait for nothing that
// a deadline should cut short: a read in WAL mode takes no lock that a
// writer holds, and a write's statements run once its transaction holds
// the write lock. So ctx is checked between statements, and every
// readCheckRows rows of a long read, instead; only the statements that
// may wait for another connection's lock (BEGIN IMMEDIATE, COMMIT) run on
// ctx itself.
func stepCtx(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// queryRows runs a select of event rows, checking ctx as it goes (see
// stepCtx).
func (s *SQLiteStore) queryRows(ctx context.Context, q queryer, query string, args ...any) ([]sqlRow, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	rows, err := q.QueryContext(stepCtx(ctx), query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sqlRow
	for rows.Next() {
		if len(out)%readCheckRows == readCheckRows-1 {
			if err := ctxErr(ctx); err != nil {
				return nil, err
			}
		}
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
	if err := ctxErr(ctx); err != nil {
		return sessionRow{}, err
	}
	row := q.QueryRowContext(stepCtx(ctx), `SELECT `+sessionColumns+` FROM sessions WHERE id = ?`, string(id))
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
	// A read transaction waits for no lock: BEGIN and COMMIT run on
	// stepCtx too, the steps check ctx.
	err := s.inTx(stepCtx(ctx), "BEGIN", func() error {
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
		if err := s.checkMutation(stepCtx(ctx)); err != nil {
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
	if err := ctxErr(ctx); err != nil {
		return err
	}
	ctx = stepCtx(ctx)
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
	err := s.inTx(stepCtx(ctx), "BEGIN", func() error { // see loadLocked
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
	rows, err := s.conn.QueryContext(stepCtx(ctx), `SELECT `+sessionColumns+` FROM sessions`)
	if err != nil {
		return nil, fmt.Errorf("persister: list: %w", dbError(s.path, s.busy, err))
	}
	defer rows.Close()
	var out []Listed
	for rows.Next() {
		if len(out)%readCheckRows == readCheckRows-1 {
			if err := ctxErr(ctx); err != nil {
				return nil, fmt.Errorf("persister: list: %w", err)
			}
		}
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
