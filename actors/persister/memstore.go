package persister

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"github.com/dshgo/dsh/actors/session"
)

// MemStore is a Store held in memory: the reference semantics of the Store
// interface without a disk, for tests of everything above the store (the
// persister actor, the supervisor) and as the executable definition the
// JSONL store is checked against by the conformance suite.
//
// A MemStore never has a torn tail (an append is a slice append under a
// lock, so it lands whole or not at all), but it does have open turns: a
// log whose writer stopped mid-turn is repaired by Load exactly as a file
// would be.
//
// MemStore is safe for concurrent use. One mutex guards everything; every
// operation is a short in-memory step, so finer locking (per session) would
// buy nothing a test could measure and cost a lock order.
type MemStore struct {
	mu sync.Mutex
	// The fields below are guarded by mu.
	sessions map[session.SessionID]*memSession
	closed   bool
	// clock is the last revision number handed out. It is store-wide, so a
	// revision is never reused, not even by another session.
	clock uint64
	// failures are the errors armed by failNext, consumed one per Append
	// in order.
	failures []error
}

// memSession is one registered session.
type memSession struct {
	header session.Header
	// events is the stored log, appended in place. The Event values are
	// immutable; the slice itself is never handed out, only copies, so a
	// caller can neither see later appends nor clobber stored ones.
	events []session.Event
	// rev is the revision of the stored log; "" until the first append.
	rev Revision
	// synced is the number of events durable: those appended by a barrier
	// or before it. A failed append cuts events back to it, as a file
	// store truncates back to its last synced size.
	synced int
}

// materialized reports whether anything is stored: the first Append with
// at least one event materializes a session (which stays so, its header
// stored, if a failure cuts it back to no event), and List, Load, Inspect
// and ReadFrom see only materialized sessions.
func (s *memSession) materialized() bool { return s.rev != "" }

var _ Store = (*MemStore)(nil)

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore {
	return &MemStore{sessions: make(map[session.SessionID]*memSession)}
}

// failNext arms a simulated write failure: the next Append that reaches the
// store (that is, not refused because the store is closed) fails with an
// error wrapping err, before its fence is checked, and the log is cut back
// to its last durable event (see Writer.Append). Each
// call arms one more failure; they are consumed in order, one per Append.
// A nil err disarms every pending failure. It exists for the tests of the
// persister actor's write-error path.
func (m *MemStore) failNext(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		m.failures = nil
		return
	}
	m.failures = append(m.failures, err)
}

// Create registers h lazily: nothing is stored, and List does not show the
// session, until its first Append. It fails with ErrExists if the id is
// registered or stored already, and with the validation error of an
// invalid header.
func (m *MemStore) Create(h session.Header) error {
	if err := h.Validate(); err != nil {
		return fmt.Errorf("persister: create %s: %w", h.ID, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if _, ok := m.sessions[h.ID]; ok {
		return fmt.Errorf("%w: %s", ErrExists, h.ID)
	}
	m.sessions[h.ID] = &memSession{header: h}
	return nil
}

// Append stores events after the session's log; durable makes them and
// every event before them durable (see Writer.Append). The first event's
// seq must be the stored next seq and the rest contiguous, or the error is
// a *FenceError naming the first offending seq; an unknown id is
// ErrNotFound; a zero Event is refused with an error matching
// session.ErrInvalid. On any error nothing of the batch is stored and the
// log is cut back to its last durable event (the revision changes only if
// that cut something). An empty batch stores nothing and does not
// materialize the session. The events are copied; the caller keeps
// ownership of the slice.
func (m *MemStore) Append(ctx context.Context, id session.SessionID, events []session.Event, durable Durability) (err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.lookupLocked(ctx, "append", id, false)
	if err != nil {
		if s := m.sessions[id]; s != nil {
			m.cutBackLocked(s)
		}
		return err
	}
	defer func() {
		if err != nil {
			m.cutBackLocked(s)
		}
	}()
	if len(m.failures) > 0 {
		injected := m.failures[0]
		m.failures = m.failures[1:]
		return fmt.Errorf("persister: append %s: %w", id, injected)
	}
	// Check the whole batch before touching the log: all or nothing.
	next := int64(len(s.events))
	for i := range events {
		if events[i].IsZero() {
			return fmt.Errorf("persister: append %s: event %d of the batch is zero: %w", id, i, session.ErrInvalid)
		}
		if want := next + int64(i); events[i].Seq() != want {
			return &FenceError{ID: id, Want: want, Got: events[i].Seq()}
		}
	}
	if len(events) > 0 {
		s.events = append(s.events, events...)
		s.rev = m.tickLocked()
	}
	if durable {
		s.synced = len(s.events)
	}
	return nil
}

// cutBackLocked drops the events of s appended since its last barrier.
func (m *MemStore) cutBackLocked(s *memSession) {
	if s.synced < len(s.events) {
		clear(s.events[s.synced:])
		s.events = s.events[:s.synced]
		s.rev = m.tickLocked()
	}
}

// Release makes what was appended without durable durable and checks the
// store is open: a MemStore takes no lock and caches nothing about a log,
// which lives in this process only. It fails with ErrClosed after Close,
// nil otherwise (any id).
func (m *MemStore) Release(id session.SessionID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	if s := m.sessions[id]; s != nil {
		s.synced = len(s.events)
	}
	return nil
}

// Load returns the stored log balanced: when a turn is open, the closers of
// session.InterruptedTurnClosers are appended to the stored log (a new
// revision) and returned both in Events and in Closers. A MemStore has no
// torn tails, so Torn is always nil. ErrNotFound if nothing is stored. The
// result is owned by the caller.
func (m *MemStore) Load(ctx context.Context, id session.SessionID) (Stored, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.lookupLocked(ctx, "load", id, true)
	if err != nil {
		return Stored{}, err
	}
	closers := session.InterruptedTurnClosers(s.events)
	if len(closers) > 0 {
		s.events = append(s.events, closers...)
		s.rev = m.tickLocked()
	}
	s.synced = len(s.events) // a repair is durable, and covers what was before it
	return Stored{Header: s.header, Events: slices.Clone(s.events), Closers: closers, Revision: s.rev}, nil
}

// Inspect is Load with the repair in memory only: the closers are in the
// result, not in the store, and the revision does not change. The result is
// owned by the caller.
func (m *MemStore) Inspect(ctx context.Context, id session.SessionID) (Stored, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.lookupLocked(ctx, "inspect", id, true)
	if err != nil {
		return Stored{}, err
	}
	closers := session.InterruptedTurnClosers(s.events)
	return Stored{Header: s.header, Events: slices.Concat(s.events, closers), Closers: closers, Revision: s.rev}, nil
}

// ReadFrom returns a copy of the stored events from seq from on, with no
// repair; none when from is at or past the end. A negative from is an
// error (a caller bug, not "from the start"). ErrNotFound if nothing is
// stored. The slice is owned by the caller.
func (m *MemStore) ReadFrom(ctx context.Context, id session.SessionID, from int64) ([]session.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.lookupLocked(ctx, "read", id, true)
	if err != nil {
		return nil, err
	}
	if from < 0 {
		return nil, fmt.Errorf("persister: read %s from seq %d: negative seq", id, from)
	}
	if from >= int64(len(s.events)) {
		return nil, nil
	}
	return slices.Clone(s.events[from:]), nil
}

// List returns the materialized sessions with their revisions, sorted by
// id. The slice is owned by the caller.
func (m *MemStore) List(ctx context.Context) ([]Listed, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("persister: list: %w", context.Cause(ctx))
	}
	var out []Listed
	for _, s := range m.sessions {
		if s.materialized() {
			out = append(out, Listed{Header: s.header, Revision: s.rev})
		}
	}
	slices.SortFunc(out, func(a, b Listed) int { return cmp.Compare(a.Header.ID, b.Header.ID) })
	return out, nil
}

// Close releases the store; every later call, Close included, fails with
// ErrClosed. The stored logs are dropped.
func (m *MemStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.closed, m.sessions, m.failures = true, nil, nil
	return nil
}

// lookupLocked is the common prologue of the per-session operations: the
// store must be open, ctx not done, and id registered (and materialized,
// when stored is set). m.mu must be held.
func (m *MemStore) lookupLocked(ctx context.Context, op string, id session.SessionID, stored bool) (*memSession, error) {
	if m.closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("persister: %s %s: %w", op, id, context.Cause(ctx))
	}
	s, ok := m.sessions[id]
	if !ok || (stored && !s.materialized()) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return s, nil
}

// tickLocked returns a fresh revision. m.mu must be held.
func (m *MemStore) tickLocked() Revision {
	m.clock++
	return Revision("mem:" + strconv.FormatUint(m.clock, 10))
}
