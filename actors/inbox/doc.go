// Package inbox is a session's inbox: the two ordered lists of user
// messages waiting for the agent (docs/agent-loop.md#the-inbox), kept durable by
// recording every change in the session log as an agent/inbox/spliced
// event before memory changes.
//
// # The pure core
//
// [State] holds the lists next-turn (prompts, one per turn) and next-step
// (steering and injected context). Message ids are unique across both.
// Every change is one normalised splice (JavaScript splice clamping; a
// splice that deletes and inserts nothing is a no-op). Inside the package
// the core plans and applies in two steps: a plan validates a change
// against the current lists and carries the event to append; applying it
// changes the lists only with the committed event, and says what to tell
// the owner (inserted, discarded, claimed). A splice that deletes
// something for a user-level reason carries outcome "canceled"; claims
// carry none. [Rebuild] replays a log's splices after its seed length (a
// fork does not inherit its parent's inbox; a resume gets its own back):
// that, and State's getters, is what other packages use, to read what a
// stored session has pending.
//
// External inserts are bounded ([Config].MaxPending, default 1024): past
// the bound they are refused with [ErrInboxFull], never dropped. The
// loop's own inserts ([Loop] origin: a tool's additional contexts) are
// never refused.
//
// # The actor
//
// The inbox actor ([Props]) owns a State and talks to the session actor
// (ActorConfig.Session) only asynchronously. It accepts, and answers to the
// sender:
//
//	message       reply                        effect
//	Send          SendReply | SendFailed       appends to a list (followup, steer, inject)
//	Claim         Claimed | ClaimFailed        takes next-step and, for next-turn, the prompt
//	Remove        RemoveReply | RemoveFailed   cancels one pending message
//	Replace       ReplaceReply | ReplaceFailed replaces one pending message in place
//	Clear         ClearReply | ClearFailed     cancels everything, next-step first
//	QueryPending  Pending                      the two lists
//
// It sends the session Append (one batch per request: a claim or a clear of
// both lists is one atomic append), QueryHeader and QueryEvents (at start,
// when it also watches the session), and tells ActorConfig.Owner (the agent),
// after each commit and before the reply: Inserted, Discarded and
// ClaimedNotice per message, and Woken when a waking Send committed. Because
// the owner is told before the requester is answered, anything the requester
// does after the reply reaches the owner after the notification.
//
// # Concurrency contract
//
// The actor is the lock: the State is touched only in Receive, and nothing
// blocks there. Requests are served one at a time, in the order they
// arrive: a request's plan is made against the state every earlier
// request left, its splices are appended with ctx.Request, and later
// requests wait in a queue (drained in order) until the session answers.
// So splices reach the log in request order, each applies to the state
// the previous one produced, and a query answers with the state after
// every earlier request. The append reply is correlated by Ref; refs are
// never reused, even across a restart.
//
// At start (and after a restart) the actor rebuilds its lists from the
// session log: it asks for the header (seedLength) and all events, and
// queues requests until both have arrived. An append the previous
// instance left in flight was sent earlier from the same PID, so the
// session commits it before it answers the query (protoactor keeps
// per-pair order) and the rebuilt lists include it.
//
// # Ownership
//
// Everything exchanged is immutable: messages.Message values, session
// event views, and protocol values whose slices sit behind copying
// getters. State's getters return copies owned by the caller.
//
// # Errors and crashes
//
// Expected failures are answered with the request's …Failed reply and
// change nothing: [ErrInboxFull], [ErrDuplicateID], [ErrNotPending],
// [ErrInvalid], a refused append (wrapping the session's error), or
// [ErrSessionStopped] once the session actor (which the inbox watches) has
// terminated, for the request in flight, the queued ones and every later
// one, so that no caller waits forever. A
// Remove of an id that is no longer pending is not a failure: RemoveReply
// says Removed false. The actor panics, so that its supervisor restarts it
// and the restart rebuilds the lists from the log, when the log and its
// memory disagree: a committed batch that does not match its plans
// ([ErrStalePlan]), or a log whose splices do not replay ([*SpliceError]).
// The requests it held survive the restart and are answered exactly once:
// the one whose append was in flight by its outcome in the log (success,
// or the session's refusal), one caught mid-planning with [ErrRestarted]
// (a query is simply retried), and the queued ones in order afterwards.
package inbox
