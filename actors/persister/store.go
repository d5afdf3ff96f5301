package persister

import (
	"context"
	"errors"
	"fmt"

	"github.com/dshgo/dsh/actors/session"
)

// Store is where session logs live: the semantics of the reference's
// persistence service (docs/durability.md#the-store). Three implementations
// share one conformance suite: MemStore, JSONLStore and SQLiteStore.
// Implementations are safe for concurrent use; operations on one session id
// are serialised.
type Store interface {
	Writer
	Reader
}

// Durability says whether an Append is a durability barrier: Sync or
// NoSync (Writer.Append).
type Durability bool

const (
	// NoSync appends the events written (a reader of the store sees them)
	// but not necessarily durable: a crash may drop them.
	NoSync Durability = false
	// Sync makes the Append a barrier: when it returns nil, its events and
	// every event appended before them are durable.
	Sync Durability = true
)

// Writer is the write side of a store.
type Writer interface {
	// Create registers a session lazily: nothing is stored (and List does
	// not show it) until its first Append. ErrExists if the id is already
	// registered or stored.
	Create(h session.Header) error
	// Append appends events to a created or stored session; durable (Sync
	// or NoSync) says whether the call is a durability barrier. The first event's seq must
	// be the stored next seq and the rest contiguous, or nothing is
	// written and the error is a *FenceError (this is what keeps two
	// writers from interleaving).
	//
	// Without durable the events are written (committed: a reader of the
	// store sees them) but need not be durable yet: a crash may drop any
	// suffix of what was appended since the last barrier. With durable the
	// call is a barrier: when it returns nil, these events and every event
	// appended before them are durable (written and fsynced), whichever
	// call wrote them. An empty durable batch is a barrier alone (it syncs
	// what earlier calls wrote). On the first append the header and the
	// batch are made durable together, durable or not; but only a durable
	// call is a barrier: a failure after a first append without durable
	// cuts the session back to its header (still stored, with no events),
	// so the caller, which holds those events as not yet durable, appends
	// them again from seq 0.
	//
	// On any error the session's stored log is cut back to its last
	// durable event: nothing of the batch is stored, nor anything appended
	// without durable since the last barrier that succeeded. The caller
	// appends those again (the persister does: it keeps them until a
	// barrier covers them). The error names the operation and the session
	// ("persister: append ID: ..."): the persister passes it on as it is.
	//
	// A store may make a barrier cover more than it must (MemStore keeps
	// nothing unsynced; a store may group the barriers of many sessions in
	// one commit): the flag is what lets it leave the rest to the next
	// barrier.
	Append(ctx context.Context, id session.SessionID, events []session.Event, durable Durability) error
	// Release ends this writer's hold on id: the writer lock, if the
	// store takes one, is released and what the store cached about the
	// file is dropped, so another process can take the session over. It
	// is idempotent, and an id the store knows nothing about is released
	// already. It is a barrier: what was appended without durable is made
	// durable first (if that fails, the log is cut back to its last
	// durable event, as after a failed Append, and Release fails keeping
	// the lock). A later write takes the lock again (and reads the file
	// again). It fails, keeping the lock, only when it cannot leave the
	// file as acknowledged (removing what a failed append left behind);
	// after Close it fails with ErrClosed.
	Release(id session.SessionID) error
}

// Reader is the read side of a store.
type Reader interface {
	// Load returns the stored log balanced, and commits crash repair: a
	// torn tail is truncated (recovered records re-appended) and an open
	// turn is closed with the closers of session.InterruptedTurnClosers.
	// Damage before the last turn/end is corruption (IsCorruption), never
	// repaired. ErrNotFound if nothing is stored.
	Load(ctx context.Context, id session.SessionID) (Stored, error)
	// Inspect is Load with the repair done in memory only: nothing is
	// truncated or appended and the revision does not change.
	Inspect(ctx context.Context, id session.SessionID) (Stored, error)
	// ReadFrom returns the stored events from seq from on, as stored: no
	// repair, no closers. A from past the end returns none.
	ReadFrom(ctx context.Context, id session.SessionID, from int64) ([]session.Event, error)
	// List returns the sessions that have been materialized (appended to
	// at least once), with their revisions, sorted by id.
	List(ctx context.Context) ([]Listed, error)
	// Close releases the store, a barrier of every session first (what
	// was appended without durable is made durable). Later calls fail
	// with ErrClosed.
	Close() error
}

// Revision is an opaque token that changes whenever a stored log changes.
type Revision string

// Stored is a loaded or inspected log. The caller owns it.
type Stored struct {
	Header session.Header
	// Events is the balanced log: the stored events (after any torn tail
	// was dropped) followed by Closers. The slice is the caller's: a store
	// keeps no reference to it (a host hands it over to the session's log,
	// session.AdoptSeeded).
	Events []session.Event
	// Closers are the repair events appended to close an open turn:
	// committed by Load, in memory only for Inspect.
	Closers []session.Event
	// Torn describes the torn tail that was (Load) or would be (Inspect)
	// truncated; nil if the log ended cleanly.
	Torn *session.TornTail
	// Revision is the stored revision after the operation.
	Revision Revision
}

// Listed is one entry of List.
type Listed struct {
	Header   session.Header
	Revision Revision
	// Superseded names the newer format's log beside this one when a
	// newer reference migrated the session (superseded.go): it lists,
	// but does not open.
	Superseded string
}

// Errors of the stores. Match them with errors.Is.
var (
	ErrNotFound = errors.New("persister: session not found")
	ErrExists   = errors.New("persister: session already exists")
	ErrClosed   = errors.New("persister: store closed")
	ErrFenced   = errors.New("persister: append fenced")
	ErrLocked   = errors.New("persister: session locked by another writer")
)

// FenceError refuses an append whose first seq is not the stored next seq,
// or whose seqs are not contiguous. errors.Is(err, ErrFenced) holds.
type FenceError struct {
	ID   session.SessionID
	Want int64 // the seq the append had to carry
	Got  int64 // the seq it carried
}

func (e *FenceError) Error() string {
	return fmt.Sprintf("persister: append to %s: seq %d, want %d (another writer, or a gap)", e.ID, e.Got, e.Want)
}

// Is makes every FenceError match ErrFenced.
func (e *FenceError) Is(target error) bool { return target == ErrFenced }

// LockedError refuses a write (an Append, a repairing Load) to a session
// whose writer lock another writer holds: another process, or another
// store in this one. Nothing was changed. errors.Is(err, ErrLocked) and
// errors.Is(err, ErrFenced) hold: like a fenced append, it means another
// writer owns the session, and it is detected before anything is written.
//
// Its text is one line naming the holder, "persister: session S is in
// use by pid N on HOST" (the holder's text; a member's names itself
// "member ADDR pid N on HOST"), so that a refused writer can print it as
// it is. The lock file's path is in Path, not in the text: the session
// and the holder are what a user acts on.
type LockedError struct {
	ID     session.SessionID
	Path   string // the lock file
	Holder string // the holder's text in the lock file (JSONLConfig.Holder); may be empty
}

func (e *LockedError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "another writer (unnamed)"
	}
	return fmt.Sprintf("persister: session %s is in use by %s", e.ID, holder)
}

// Is makes every LockedError match ErrLocked and ErrFenced.
func (e *LockedError) Is(target error) bool { return target == ErrLocked || target == ErrFenced }

// IsCorruption reports whether err says a stored log is damaged in its
// committed region.
func IsCorruption(err error) bool {
	var ce *session.CorruptError
	return errors.As(err, &ce)
}
