package inbox

import (
	"slices"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// The inbox actor's protocol. Every message is an immutable value. Requests
// are answered to the sender (use ctx.Request from an actor, RequestFuture
// at the edges); Ref is the caller's correlation id, echoed in the reply.
// Requests are served one at a time in arrival order (see doc.go).

// Send inserts Message at the end of list Target
// (docs/agent-loop.md#delivery): followup is
// {NextTurn, Wake}, steer {NextStep, Wake}, inject {NextStep} (no wake).
// Origin Loop marks the loop's own pushes (a tool's additional contexts),
// which the bound never refuses. Reply: SendReply once the splice is
// committed, or SendFailed (ErrInboxFull, ErrDuplicateID, ErrInvalid, or
// the session refused the append); on failure nothing changed. A waking
// send that committed also tells the owner Woken.
type Send struct {
	Ref     uint64
	Message messages.Message
	Target  Target
	Wake    bool
	Origin  Origin
}

// Followup returns the Send of a prompt for its own later turn.
func Followup(ref uint64, m messages.Message) Send {
	return Send{Ref: ref, Message: m, Target: NextTurn, Wake: true}
}

// Steer returns the Send of steering for the next step boundary.
func Steer(ref uint64, m messages.Message) Send {
	return Send{Ref: ref, Message: m, Target: NextStep, Wake: true}
}

// Inject returns the Send of context that rides with the next waking input.
func Inject(ref uint64, m messages.Message) Send {
	return Send{Ref: ref, Message: m, Target: NextStep}
}

// SendReply acknowledges a committed Send.
type SendReply struct {
	Ref uint64
	ID  messages.MessageID
}

// SendFailed refuses a Send; the inbox is unchanged.
type SendFailed struct {
	Ref uint64
	Err error
}

// Claim takes a turn's input (loop-internal,
// docs/agent-loop.md#the-inbox): all of next-step
// and, for Target NextTurn, the first next-turn message, recorded as claim
// splices of turn Turn. Reply: Claimed (possibly empty), or ClaimFailed
// when the session refused the append (nothing was taken).
type Claim struct {
	Ref    uint64
	Target Target
	Turn   int64
}

// Claimed answers a Claim: the claimed messages, next-step messages first
// and then the prompt, and the committed splice events (none when there was
// nothing to claim).
type Claimed struct {
	Ref      uint64
	messages []messages.Message
	Events   session.Events
}

// Messages returns a copy of the claimed batch, owned by the caller.
func (c Claimed) Messages() []messages.Message { return slices.Clone(c.messages) }

// ClaimFailed refuses a Claim; the inbox is unchanged.
type ClaimFailed struct {
	Ref uint64
	Err error
}

// Remove cancels the pending message ID. Reply: RemoveReply, or
// RemoveFailed when the session refused the append.
type Remove struct {
	Ref uint64
	ID  messages.MessageID
}

// RemoveReply answers a Remove: Removed is false when the id was not
// pending (nothing was appended).
type RemoveReply struct {
	Ref     uint64
	Removed bool
}

// RemoveFailed refuses a Remove; the inbox is unchanged.
type RemoveFailed struct {
	Ref uint64
	Err error
}

// Replace replaces the pending message ID, in place, by Message (whose id
// may differ). Reply: ReplaceReply, or ReplaceFailed (ErrNotPending,
// ErrDuplicateID, ErrInvalid, or the session refused the append).
type Replace struct {
	Ref     uint64
	ID      messages.MessageID
	Message messages.Message
}

// ReplaceReply acknowledges a committed Replace.
type ReplaceReply struct{ Ref uint64 }

// ReplaceFailed refuses a Replace; the inbox is unchanged.
type ReplaceFailed struct {
	Ref uint64
	Err error
}

// Clear cancels everything pending, next-step first, then next-turn, in
// one atomic append. Reply: ClearReply, or ClearFailed when the session
// refused the append.
type Clear struct{ Ref uint64 }

// ClearReply answers a Clear with the discarded messages, next-step first.
type ClearReply struct {
	Ref       uint64
	discarded []messages.Message
}

// Discarded returns a copy of the discarded messages, owned by the caller.
func (c ClearReply) Discarded() []messages.Message { return slices.Clone(c.discarded) }

// ClearFailed refuses a Clear; the inbox is unchanged.
type ClearFailed struct {
	Ref uint64
	Err error
}

// QueryPending asks for the pending lists, as they are after every request
// received before it. Reply: Pending.
type QueryPending struct{ Ref uint64 }

// Pending answers QueryPending.
type Pending struct {
	Ref      uint64
	nextTurn []messages.Message
	nextStep []messages.Message
}

// NextTurn returns a copy of the next-turn list, owned by the caller.
func (p Pending) NextTurn() []messages.Message { return slices.Clone(p.nextTurn) }

// NextStep returns a copy of the next-step list, owned by the caller.
func (p Pending) NextStep() []messages.Message { return slices.Clone(p.nextStep) }

// Notices to the owner (Config.Owner, the agent), sent after the
// splice is committed and applied, and before the requester's reply.

// Woken tells the owner that a waking Send committed message ID to list
// Target.
type Woken struct {
	Target Target
	ID     messages.MessageID
}

// Inserted tells the owner a message was inserted (the committed event's
// copy).
type Inserted struct {
	Target  Target
	Message messages.Message
}

// Discarded tells the owner a user-level removal (remove, replace, clear)
// deleted a pending message.
type Discarded struct {
	Target  Target
	Message messages.Message
}

// ClaimedNotice tells the owner turn Turn claimed a message.
type ClaimedNotice struct {
	Target  Target
	Message messages.Message
	Turn    int64
}
