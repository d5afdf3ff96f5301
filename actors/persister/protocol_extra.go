package persister

import (
	"errors"

	"github.com/dshgo/dsh/actors/session"
)

// Messages and errors of the persister actor beyond protocol.go.
//
// Why they exist: protocol.go gives Track only a success reply, but Track
// can fail — the store refuses to register the header (an invalid header, a
// closed store) or the request itself is malformed (no session PID, a
// negative From) — and a caller blocked on a future must hear about it
// rather than time out. Flush and Untrack of an id the persister does not
// track, and waiters still pending when the persister stops, need an error
// to carry in FlushFailed.

// TrackFailed refuses a Track: nothing is tracked and the session actor was
// not subscribed to.
type TrackFailed struct {
	Ref uint64
	ID  session.SessionID
	Err error
}

// Errors carried by TrackFailed and FlushFailed. Match them with errors.Is.
var (
	// ErrNotTracked answers a Flush or Untrack of a session the persister
	// does not track (never tracked, untracked already, or its Track
	// failed).
	ErrNotTracked = errors.New("persister: session not tracked")
	// ErrStopped answers the waiters still pending when the persister
	// stops. Their events were not all made durable; they remain in the
	// session actor's log.
	ErrStopped = errors.New("persister: stopped")
)
