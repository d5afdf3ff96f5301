package supervisor

import (
	"context"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// Sessions is a place where sessions live: a *Host (the sessions of one
// process) or a *cluster.Client (the sessions of a cluster, wherever each
// one lives). Code written against it, such as dsh run and chat or the
// HTTP server of package httpapi, works with either.
//
// Every method is bounded by its context. The errors are the host's
// (ErrNoSession, ErrExists, ErrNotDurable, ErrClosed, ...); a cluster's
// unwrap to the same values, so errors.Is works with both. The slices
// returned are the caller's.
type Sessions interface {
	// Create starts a new, empty session (opts.ID, or a minted UUID) and
	// returns its id.
	Create(ctx context.Context, opts CreateOptions) (session.SessionID, error)
	// Followup queues msg as its own later turn, starting one when the
	// session is idle.
	Followup(ctx context.Context, id session.SessionID, msg messages.Message) error
	// Steer queues msg for the next step of the running turn, or starts a
	// turn when idle.
	Steer(ctx context.Context, id session.SessionID, msg messages.Message) error
	// Inject stages msg without waking the session: it rides with the
	// next waking input.
	Inject(ctx context.Context, id session.SessionID, msg messages.Message) error
	// Cancel aborts the running turn with cause and cancels what is
	// pending in the inbox.
	Cancel(ctx context.Context, id session.SessionID, cause session.CancelCause) error
	// SetSystem replaces the session's system prompt from its next step
	// on.
	SetSystem(ctx context.Context, id session.SessionID, prompt string) error
	// WaitIdle returns once the session is idle and everything it logged
	// is durable.
	WaitIdle(ctx context.Context, id session.SessionID) error
	// Flush makes everything the session logged durable and returns the
	// last durable seq.
	Flush(ctx context.Context, id session.SessionID) (int64, error)
	// Messages returns the session's derived (model-visible) messages.
	Messages(ctx context.Context, id session.SessionID) ([]messages.Message, error)
	// Events returns the session's events from seq from on, all of them
	// committed so far.
	Events(ctx context.Context, id session.SessionID, from int64) ([]session.Event, error)
	// Fork creates a session seeded with the events of id up to boundary
	// (inclusive; session.LastEvent for the end) and returns its id.
	Fork(ctx context.Context, id session.SessionID, boundary int64) (session.SessionID, error)
	// Stats returns the session's counters.
	Stats(ctx context.Context, id session.SessionID) (Stats, error)
	// List names every session, sorted by id, bringing none of them in
	// (a cluster client reads the members' shared store, and fails
	// without one).
	List(ctx context.Context) ([]Info, error)
	// Peek describes the session and returns its events from seq from on
	// without bringing it in: a session that is not running here is read
	// from the store, which may lag the live log by the write-behind
	// window (a cluster client without the store asks the session's
	// member, which activates it there).
	Peek(ctx context.Context, id session.SessionID, from int64) (Info, []session.Event, error)
	// Subscribe delivers the session's events from seq from on: the past,
	// then live ones as they commit.
	Subscribe(ctx context.Context, id session.SessionID, from int64) (Subscription, error)
}

// Subscription is an open subscription to a session's events (see
// Sessions.Subscribe).
type Subscription interface {
	// Events carries the events, in seq order and without gaps; it is
	// closed when the subscription ends.
	Events() <-chan session.Event
	// Err says why the subscription ended (nil after Close). Read it
	// after Events is closed.
	Err() error
	// Close ends the subscription and waits for it to stop.
	Close()
}

var _ Sessions = (*Host)(nil)
