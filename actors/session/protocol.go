package session

import (
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// The session actor's protocol. Every message is an immutable value;
// requests are answered to ctx.Sender() (use ctx.Request from an actor, or
// RequestFuture at the edges). Ref is the caller's correlation id, echoed
// in the reply.

// Append asks the session to commit drafts atomically, in order. Reply:
// AppendReply with the committed events, or AppendFailed (nothing was
// committed). Build it with NewAppend.
type Append struct {
	Ref     uint64
	drafts  []Draft
	deliver bool
}

// NewAppend returns an Append of drafts (copied).
func NewAppend(ref uint64, drafts ...Draft) Append {
	return Append{Ref: ref, drafts: slices.Clone(drafts)}
}

// NewAppendOwned returns an Append of drafts without copying them: the
// Append takes the slice, and the caller must never write to it again. It
// is for a caller that built the slice for this one message (the agent's
// streamed chunks, where NewAppend's copy cost an allocation per chunk or
// per batch of them).
func NewAppendOwned(ref uint64, drafts []Draft) Append {
	return Append{Ref: ref, drafts: drafts}
}

// Delivering returns a with its reply delivering its events to the
// sender's subscription: when the sender is a subscriber that has been
// sent every event before them, they are not sent to it as an
// EventsCommitted, and the AppendReply carries them with Delivered set.
// A subscriber that appends (the agent, one Append per streamed chunk)
// then gets one message per append instead of two, in the same order.
func (a Append) Delivering() Append {
	a.deliver = true
	return a
}

// Drafts returns a copy of the drafts, owned by the caller.
func (a Append) Drafts() []Draft { return slices.Clone(a.drafts) }

// AppendReply acknowledges an Append: the committed events (their seqs are
// contiguous). Delivered says that they were not sent to the sender's
// subscription, and this reply stands for that EventsCommitted, at its
// place in the subscription's order (see Append.Delivering).
type AppendReply struct {
	Ref       uint64
	Events    Events
	Delivered bool
}

// AppendFailed refuses an Append; the log is unchanged.
type AppendFailed struct {
	Ref uint64
	Err error
}

// Subscribe asks the session to send Subscriber every committed event from
// seq From on, as EventsCommitted messages in seq order: first the past
// (from the log), then live. Reply: Subscribed. Subscribing again replaces
// the earlier subscription of the same PID.
type Subscribe struct {
	Subscriber *actor.PID
	From       int64
	// Behind, when positive, is for a subscriber that writes the events
	// behind (the persister, which passes its write-behind window): a
	// commit of streamed chunks only may reach it up to Behind late, in
	// one EventsCommitted with the commits after it, which says how long
	// (EventsCommitted.Held). Any other commit, and any message the
	// session gets other than an Append, sends it everything first. See
	// heldCommits.
	Behind time.Duration
}

// Subscribed acknowledges a Subscribe: Next is the seq the first live
// event will have.
type Subscribed struct{ Next int64 }

// Unsubscribe ends a subscription. No reply.
type Unsubscribe struct{ Subscriber *actor.PID }

// EventsCommitted carries committed events to a subscriber, in order and
// without gaps.
type EventsCommitted struct {
	Session SessionID
	Events  Events
	// Held is how long the first of Events was kept from this subscriber
	// after its commit (Subscribe.Behind); zero when it was sent at once.
	Held time.Duration
}

// QueryMessages asks for the derived messages. Reply: MessagesReply.
type QueryMessages struct{ Ref uint64 }

// MessagesReply is the model-visible history at Len events.
type MessagesReply struct {
	Ref      uint64
	Len      int64
	Messages Messages
}

// QueryEvents asks for the events from seq From on. Reply: EventsReply.
type QueryEvents struct {
	Ref  uint64
	From int64
}

// EventsReply carries the requested events.
type EventsReply struct {
	Ref    uint64
	Events Events
}

// QueryHeader asks for the session header and the folded request header
// and context. Reply: HeaderReply.
type QueryHeader struct{ Ref uint64 }

// HeaderReply carries the headers at Len events.
type HeaderReply struct {
	Ref        uint64
	Len        int64
	Session    Header
	Request    EpochHeader
	HasRequest bool
	Context    RequestContext
	HasContext bool
}

// Fork asks for the seed of a child session forked at Boundary (inclusive;
// LastEvent for the end). Reply: ForkReply, or ForkFailed with a
// *ForkError. The parent is not changed; the caller spawns the child from
// the reply with NewSeeded.
type Fork struct {
	Ref       uint64
	Child     SessionID
	Boundary  int64
	CreatedAt int64
}

// ForkReply carries the child's header and seed.
type ForkReply struct {
	Ref    uint64
	Header Header
	Seed   Events
}

// ForkFailed refuses a Fork.
type ForkFailed struct {
	Ref uint64
	Err error
}
