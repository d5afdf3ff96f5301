// Package persister makes session logs durable: the Store where logs live
// (an in-memory MemStore and the JSONL store on disk) and the persister
// actor that writes a session's committed events behind it.
//
// # The Store contract
//
// A [Store] keeps one append-only log per session id: a [session.Header]
// and the events, seqs contiguous from 0. It has the semantics of the
// reference's persistence service (spec §3.1–§3.3, §3.6):
//
//   - Create registers a header lazily. Nothing is stored before the first
//     Append, and a session that was never appended to is not in List.
//   - Append is durable and all or nothing. Its first event must carry the
//     stored next seq and the rest must follow contiguously; otherwise
//     nothing is written and the error is a [*FenceError]. The fence is what
//     keeps two writers of one session from interleaving: the loser of a
//     race learns it from the error, and the winner's events stand. On a
//     session's first Append the header and the batch become durable
//     together.
//   - Load returns the log balanced and commits crash repair: a torn tail
//     (records a crash left half written after the last turn/end) is cut
//     off, and a turn left open is closed by appending the closers of
//     [session.InterruptedTurnClosers] (synthetic tool results, step/end,
//     turn/end {interrupted}). Damage before the last turn/end is never
//     repaired: it is corruption ([IsCorruption]).
//   - Inspect computes the same repair in memory only: nothing is written
//     and the revision stays. A reader (a status command, a viewer) uses it
//     so that looking at a session never changes it.
//   - ReadFrom returns stored events from a seq on, as stored: no repair.
//   - List names the materialized sessions, sorted by id, each with its
//     [Revision]: an opaque token that changes whenever the stored log
//     changes (an Append, a repair), so a cache can tell it is stale.
//   - Close releases the store; every later call fails with [ErrClosed].
//
// Resuming a session goes through Load: the session actor is rebuilt with
// [session.NewSeeded] from the loaded events, which appends a
// session/end-seed, and the persister writes only the suffix past the
// stored cursor (the loaded length), normally just that end-seed. Creating
// a new session under an id that is already stored fails with [ErrExists].
//
// The same conformance suite (conformance_test.go) runs against every
// Store implementation; a behaviour it pins is part of the contract.
//
// # Errors
//
// Match store errors with errors.Is and errors.As:
//
//	error          meaning
//	ErrNotFound    nothing is stored under the id (Load, Inspect, ReadFrom),
//	               or it is neither registered nor stored (Append)
//	ErrExists      Create of an id already registered or stored
//	ErrFenced      an Append's seqs do not continue the stored log; the
//	               error is a *FenceError with the seq wanted and the seq got
//	ErrClosed      the store was closed
//	IsCorruption   the committed region of a stored log is damaged (a
//	               *session.CorruptError); never repaired automatically
//
// Loading a log written in another format version fails with a
// *session.FormatVersionError, and one holding an unknown event type not
// marked ignorable with an error matching session.ErrInvalid (a
// *session.UnsupportedTypeError): both are refusals to guess, not damage.
// An unknown type marked ignorable round-trips untouched. Operations given
// a done context fail with its cause and change nothing.
//
// # The actor
//
// The persister actor tracks sessions and writes their committed events
// behind, batching them, through a Store. It answers to ctx.Sender(),
// echoing each request's Ref:
//
//	message    reply                     effect
//	Track      Tracked                   registers the header, subscribes to the
//	                                     session actor from seq From, writes behind
//	Flush      Flushed | FlushFailed     durability barrier for the session
//	Untrack    Flushed | FlushFailed     flushes, then forgets the session
//
// and tells a tracked session's Owner, one way:
//
//	message      when
//	Durable      the durable watermark advanced to Seq
//	WriteFailed  a write failed; its events are kept and retried
//
// A failed write is an expected failure: the events stay queued at the
// front, in order, and are retried with the next write; no event is
// dropped while the process lives. Barrier waiters get FlushFailed with the
// error and the watermark that was durable before it.
//
// # Concurrency and ownership
//
// Stores are safe for concurrent use; operations on one session id are
// serialised. A Store copies the event slices it is given (the caller keeps
// ownership) and hands out slices the caller owns; the session.Event values
// themselves are immutable and shared freely. The actor's state is touched
// only inside Receive; store I/O runs off the actor's goroutine.
//
// # On-disk format
//
// See jsonl.go.
package persister
