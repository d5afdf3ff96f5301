package persister

import (
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/dshgo/dsh/actors/session"
)

// The persister actor's protocol. Every message is an immutable value.
// Requests are answered to ctx.Sender(); Ref is the caller's correlation
// id, echoed in the reply.

// Track asks the persister to persist a session: it registers the header
// with the store (lazily: nothing is written before the first event),
// subscribes to the session actor from seq From (the stored next seq: 0
// for a new session, the loaded length for a resumed one) and writes its
// committed events behind. Owner, if set, is told about write failures
// (WriteFailed) and durability progress (Durable). Reply: Tracked, or
// TrackFailed.
type Track struct {
	Ref     uint64
	Header  session.Header
	Session *actor.PID
	From    int64
	Owner   *actor.PID
}

// Tracked acknowledges a Track.
type Tracked struct {
	Ref uint64
	ID  session.SessionID
}

// TrackFailed refuses a Track: the store refused to register the header
// (an invalid header, a closed store) or the request is malformed (no
// session PID, a negative From). Nothing is tracked and the session actor
// was not subscribed to.
type TrackFailed struct {
	Ref uint64
	ID  session.SessionID
	Err error
}

// Flush asks for a durability barrier: every event of the session
// committed before the persister received this message is written and
// fsynced before the reply. The session may hold streamed chunks back
// from the persister for a while (session.Subscribe.Behind): UpTo waits
// for them. Reply: Flushed, or FlushFailed (the events are
// kept and retried; see WriteFailed).
type Flush struct {
	Ref uint64
	ID  session.SessionID
	// UpTo, when ≥ 0, makes the barrier wait until the persister has
	// received (from the session actor) and made durable every event up to
	// and including this seq, even if it had not arrived yet. -1 means
	// "what has arrived so far".
	UpTo int64
}

// Flushed says the session is durable up to and including seq Durable
// (-1: nothing stored yet).
type Flushed struct {
	Ref     uint64
	ID      session.SessionID
	Durable int64
}

// FlushFailed says a barrier's write failed. Durable is what was durable
// before the failure; the failed events stay queued.
type FlushFailed struct {
	Ref     uint64
	ID      session.SessionID
	Durable int64
	Err     error
}

// Durable is sent to a session's owner whenever its durable watermark
// advances: every event up to and including Seq is written and fsynced.
type Durable struct {
	ID  session.SessionID
	Seq int64
}

// WriteFailed is sent to a session's owner when a write fails. The events
// are kept at the front of the queue and retried with the next write,
// which the persister starts on its own RetryIn after the failure (a
// Retrying notice) unless a flush, a checkpoint or the window starts it
// sooner; no event is ever dropped while the process lives. The first
// write that succeeds afterwards is reported as Durable.
type WriteFailed struct {
	ID  session.SessionID
	Err error
	// Attempt counts the consecutive failed writes of the session, this
	// one included (1: the first failure since a write succeeded).
	Attempt int
	// RetryIn is when the background retry comes (RetryMin doubled per
	// earlier failure, at most RetryMax: see Config); 0 when none comes because no retry can succeed: another
	// writer owns the session (ErrFenced, ErrLocked), the stored log is
	// corrupt (IsCorruption) or the store is closed.
	RetryIn time.Duration
}

// Retrying is sent to a session's owner when the persister retries a
// failed write on its own (a background retry: a flush barrier of
// everything received, started by the retry timer). Attempt is the
// number of consecutive failed writes it follows. Its outcome comes as
// Durable or as another WriteFailed.
type Retrying struct {
	ID      session.SessionID
	Attempt int
}

// Untrack asks the persister to flush a session and forget it (the session
// is stopping or passivating). Once everything received is durable, the
// session is released in the store (Store.Release: a JSONL store with
// locks gives its writer lock up, so that another process may take the
// session over) and only then answered. Reply: Flushed, or FlushFailed
// with the error of the flush or of the release (on failure the session
// stays tracked; a later Untrack tries again).
type Untrack struct {
	Ref uint64
	ID  session.SessionID
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
