package inbox

import (
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// ErrRestarted fails a request the actor was planning when it panicked:
// nothing was appended for it. (A request whose append was in flight is
// answered with the append's outcome instead; see settle.)
var ErrRestarted = errors.New("inbox: actor restarted while handling the request")

// ErrSessionStopped fails every request that needs an append once the
// inbox's session actor has terminated.
var ErrSessionStopped = errors.New("inbox: session stopped")

// ActorConfig configures an inbox actor. Session is required; every other
// field may be left zero.
type ActorConfig struct {
	// Session is the session actor whose log records the inbox. The inbox
	// rebuilds its lists from that log when it starts (and restarts), and
	// appends every splice to it.
	Session *actor.PID
	// Owner receives the notifications (Woken, Inserted, Discarded,
	// ClaimedNotice); normally the agent. Default: nil, nobody is told.
	Owner *actor.PID
	// Inbox configures the core: the bound on pending messages (default
	// DefaultMaxPending).
	Inbox Config
}

// Validate reports a missing session or a bad core config.
func (c ActorConfig) Validate() error {
	if c.Session == nil {
		return errors.New("inbox: config needs a session PID")
	}
	return c.Inbox.Validate()
}

// Props returns the props of an inbox actor.
func Props(cfg ActorConfig) (*actor.Props, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sh := new(shell)
	return actor.PropsFromProducer(func() actor.Actor {
		return &inboxActor{cfg: cfg, shell: sh}
	}), nil
}

// shell is the actor state that outlives the actor instances, shared
// through the producer closure: the requests, so that a restart (after a
// panic) answers every one of them exactly once, and the ref counter.
type shell struct {
	// refs: a restarted instance must not reuse the correlation id of an
	// append its predecessor left in flight, whose reply still comes to
	// the same PID.
	refs uint64
	// queue holds the requests not started yet, in arrival order; busy is
	// the one whose append is in flight (or committed and not yet
	// answered). Serialising is what makes each plan valid: it is made
	// against the state every earlier splice left, and applied before the
	// next plan is made. A rejected alternative, planning eagerly against
	// a projected state, would have to undo the projection of every later
	// plan when an append fails.
	queue []request
	busy  *inflight
	// starting is the request being planned (between leaving the queue
	// and being answered or appended): a panic there leaves it here.
	starting *request
}

// request is a queued protocol message and who to answer.
type request struct {
	sender *actor.PID
	msg    any
}

// inflight is the one request whose splices are being appended.
type inflight struct {
	ref   uint64
	req   request
	plans []splicePlan
	// The append's outcome, recorded as soon as its reply arrives, before
	// anything can panic: replied is set, with the committed events or
	// the refusal.
	replied bool
	events  session.Events
	err     error
	// applied counts the plans applied to the state and notified to the
	// owner; settle notifies the rest.
	applied int
}

// inboxActor is the shell around State. Everything here, shared shell
// included (incarnations never overlap), is touched only in
// Receive.
type inboxActor struct {
	cfg ActorConfig
	*shell
	state *State // nil until rebuilt from the log

	// Boot: the header (for seedLength) and the events, asked for at
	// Started; the state is rebuilt when both have arrived.
	headerRef, eventsRef uint64
	seedLength           int64
	haveHeader           bool
	events               session.Events
	haveEvents           bool

	// sessionStopped is set once the session has terminated: every
	// request that needs an append fails with ErrSessionStopped.
	sessionStopped bool
}

func (a *inboxActor) nextRef() uint64 {
	a.refs++
	return a.refs
}

// Receive handles the protocol of protocol.go and the session's replies.
// It never blocks: appends are requested and their replies handled as
// messages.
func (a *inboxActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ctx.Watch(a.cfg.Session)
		a.headerRef, a.eventsRef = a.nextRef(), a.nextRef()
		ctx.Request(a.cfg.Session, session.QueryHeader{Ref: a.headerRef})
		ctx.Request(a.cfg.Session, session.QueryEvents{Ref: a.eventsRef, From: 0})
	case session.HeaderReply:
		if a.state == nil && m.Ref == a.headerRef {
			a.seedLength, a.haveHeader = m.Session.SeedLength.Or(0), true
			a.boot(ctx)
		}
	case session.EventsReply:
		if a.state == nil && m.Ref == a.eventsRef {
			a.events, a.haveEvents = m.Events, true
			a.boot(ctx)
		}
	case session.AppendReply:
		if b := a.busy; b != nil && !b.replied && m.Ref == b.ref {
			b.replied, b.events = true, m.Events
			if a.state != nil {
				a.committed(ctx)
				a.pump(ctx)
			}
			// Before the rebuild (the reply to a predecessor's append),
			// boot settles it.
		}
	case session.AppendFailed:
		if b := a.busy; b != nil && !b.replied && m.Ref == b.ref {
			b.replied, b.err = true, fmt.Errorf("inbox: append splice: %w", m.Err)
			if a.state != nil {
				a.settle(ctx)
				a.pump(ctx)
			}
		}
	case *actor.Stopping:
		// A watch outlives the watcher: without this, the session's stop
		// would send Terminated to a dead PID (a dead letter). A session
		// known to be gone needs no unwatch (it would be one).
		if !a.sessionStopped {
			ctx.Unwatch(a.cfg.Session)
		}
	case *actor.Terminated:
		if m.Who.Equal(a.cfg.Session) {
			a.sessionGone(ctx)
		}
	case Send, Claim, Remove, Replace, Clear, QueryPending:
		a.queue = append(a.queue, request{sender: ctx.Sender(), msg: m})
		a.pump(ctx)
	}
}

// sessionGone fails the request in flight and every queued one with
// ErrSessionStopped, and every later one too: without its session the
// inbox can record nothing, and a caller waiting forever is worse than a
// refusal. A query is still answered, from the lists as they were (empty
// if the session stopped before they were rebuilt).
func (a *inboxActor) sessionGone(ctx actor.Context) {
	a.sessionStopped = true
	if a.state == nil {
		a.state = emptyState(a.cfg.Inbox)
	}
	a.settle(ctx)
	if b := a.busy; b != nil {
		a.busy = nil
		a.fail(ctx, b.req, ErrSessionStopped)
	}
	a.pump(ctx)
}

// boot rebuilds the state once the header and the events have arrived.
// The log is the truth: a log whose splices do not replay cannot be served
// without guessing, so the actor panics (see doc.go).
func (a *inboxActor) boot(ctx actor.Context) {
	if !a.haveHeader || !a.haveEvents {
		return
	}
	s, err := Rebuild(a.events.All(), a.seedLength, a.cfg.Inbox)
	if err != nil {
		panic(fmt.Errorf("inbox: rebuild from session log: %w", err))
	}
	a.state, a.events = s, session.Events{}
	a.settle(ctx)
	a.pump(ctx)
}

// settle answers what a crashed predecessor left unanswered, once the
// state is rebuilt (or the session is gone), before the queue resumes.
//
// The request it was planning (starting) appended nothing: a query is
// served again, first; any other request fails with ErrRestarted (retrying
// it could panic again).
//
// The request whose append was in flight (busy) is answered with the
// append's outcome, recorded when its reply arrived. Its reply reaches
// this PID before the events this instance was rebuilt from (the session
// answers the crashed instance's Append before this one's QueryEvents,
// and protoactor keeps per-pair order), so the outcome is known here and
// the rebuilt lists already hold a committed batch: the request is
// answered as committed, from its plans, and the owner is told what the
// predecessor had not told it. A refused append is answered as refused.
// An outcome not known yet (a session that answers out of order) stays in
// flight and is handled when its reply comes.
//
// Outside a restart, settle answers a refused append.
func (a *inboxActor) settle(ctx actor.Context) {
	if r := a.starting; r != nil {
		a.starting = nil
		if _, ok := r.msg.(QueryPending); ok {
			a.queue = append([]request{*r}, a.queue...)
		} else {
			a.fail(ctx, *r, ErrRestarted)
		}
	}
	b := a.busy
	if b == nil || !b.replied {
		return
	}
	a.busy = nil
	if b.err != nil {
		a.fail(ctx, b.req, b.err)
		return
	}
	var taken []messages.Message // claimed or discarded, in order
	for i, p := range b.plans {
		if i >= b.applied {
			n := spliceNotices{Target: p.Target()}
			if p.IsClaim() {
				n.Claimed, n.Turn = p.Removed(), p.Turn()
			} else {
				n.Inserted, n.Discarded = p.Inserted(), p.Removed()
			}
			a.notify(ctx, n)
		}
		taken = append(taken, p.Removed()...)
	}
	a.answer(ctx, b, taken)
}

// pump starts queued requests, in order, until one needs an append or the
// queue is empty. Requests that need no append (a refusal, a no-op, a
// query) are answered at once.
func (a *inboxActor) pump(ctx actor.Context) {
	for a.state != nil && a.busy == nil && len(a.queue) > 0 {
		r := a.queue[0]
		a.queue[0] = request{}
		a.queue = a.queue[1:]
		a.starting = &r
		a.start(ctx, r)
		a.starting = nil
	}
	if len(a.queue) == 0 {
		a.queue = nil // release the drained backing array
	}
}

// start plans r against the current state and either answers it or
// appends its splices.
func (a *inboxActor) start(ctx actor.Context, r request) {
	s := a.state
	switch m := r.msg.(type) {
	case Send:
		p, err := s.planAppend(m.Target, m.Message, m.Origin)
		if err != nil {
			a.fail(ctx, r, err)
			return
		}
		a.append(ctx, r, []splicePlan{p})
	case Claim:
		if plans := s.planClaim(m.Target, m.Turn); len(plans) > 0 {
			a.append(ctx, r, plans)
			return
		}
		reply(ctx, r, Claimed{Ref: m.Ref})
	case Remove:
		p, ok := s.planRemove(m.ID)
		if !ok {
			reply(ctx, r, RemoveReply{Ref: m.Ref})
			return
		}
		a.append(ctx, r, []splicePlan{p})
	case Replace:
		p, err := s.planReplace(m.ID, m.Message)
		if err != nil {
			a.fail(ctx, r, err)
			return
		}
		a.append(ctx, r, []splicePlan{p})
	case Clear:
		if plans := s.planClear(); len(plans) > 0 {
			a.append(ctx, r, plans)
			return
		}
		reply(ctx, r, ClearReply{Ref: m.Ref})
	case QueryPending:
		reply(ctx, r, Pending{Ref: m.Ref, nextTurn: s.NextTurn(), nextStep: s.NextStep()})
	}
}

// append asks the session to commit the plans' splices atomically, in one
// batch, and marks r in flight.
func (a *inboxActor) append(ctx actor.Context, r request, plans []splicePlan) {
	if a.sessionStopped {
		a.fail(ctx, r, ErrSessionStopped)
		return
	}
	ref := a.nextRef()
	a.busy = &inflight{ref: ref, req: r, plans: plans}
	ctx.Request(a.cfg.Session, session.NewAppend(ref, planDrafts(plans)...))
}

// committed applies the in-flight plans to the committed events, tells
// the owner, and answers the requester.
//
// A mismatch between the plans and the events (a wrong count, a stale
// plan) means the lists no longer match the log: the actor panics, and
// its restart rebuilds the lists from the log and answers the request
// (see settle).
func (a *inboxActor) committed(ctx actor.Context) {
	b := a.busy
	events := b.events
	if events.Len() != len(b.plans) {
		panic(fmt.Errorf("inbox: %d splices appended, %d events committed", len(b.plans), events.Len()))
	}
	var taken []messages.Message // claimed or discarded, in order
	for i, p := range b.plans {
		n, err := a.state.apply(p, events.At(i))
		if err != nil {
			panic(fmt.Errorf("inbox: apply committed splice: %w", err))
		}
		b.applied++
		a.notify(ctx, n)
		taken = append(taken, n.Claimed...)
		taken = append(taken, n.Discarded...)
	}
	a.busy = nil
	a.answer(ctx, b, taken)
}

// answer answers a committed request: taken are the messages its splices
// claimed or discarded, in order. A waking Send also tells the owner.
func (a *inboxActor) answer(ctx actor.Context, b *inflight, taken []messages.Message) {
	events := b.events
	switch m := b.req.msg.(type) {
	case Send:
		if m.Wake && a.cfg.Owner != nil {
			ctx.Send(a.cfg.Owner, Woken{Target: m.Target, ID: m.Message.ID()})
		}
		reply(ctx, b.req, SendReply{Ref: m.Ref, ID: m.Message.ID()})
	case Claim:
		reply(ctx, b.req, Claimed{Ref: m.Ref, messages: taken, Events: events})
	case Remove:
		reply(ctx, b.req, RemoveReply{Ref: m.Ref, Removed: true})
	case Replace:
		reply(ctx, b.req, ReplaceReply{Ref: m.Ref})
	case Clear:
		reply(ctx, b.req, ClearReply{Ref: m.Ref, discarded: taken})
	}
}

// notify sends the owner one message per notified message.
func (a *inboxActor) notify(ctx actor.Context, n spliceNotices) {
	if a.cfg.Owner == nil {
		return
	}
	for _, m := range n.Inserted {
		ctx.Send(a.cfg.Owner, Inserted{Target: n.Target, Message: m})
	}
	for _, m := range n.Discarded {
		ctx.Send(a.cfg.Owner, Discarded{Target: n.Target, Message: m})
	}
	for _, m := range n.Claimed {
		ctx.Send(a.cfg.Owner, ClaimedNotice{Target: n.Target, Message: m, Turn: n.Turn})
	}
}

// fail answers r with the failure reply of its kind.
func (a *inboxActor) fail(ctx actor.Context, r request, err error) {
	switch m := r.msg.(type) {
	case Send:
		reply(ctx, r, SendFailed{Ref: m.Ref, Err: err})
	case Claim:
		reply(ctx, r, ClaimFailed{Ref: m.Ref, Err: err})
	case Remove:
		reply(ctx, r, RemoveFailed{Ref: m.Ref, Err: err})
	case Replace:
		reply(ctx, r, ReplaceFailed{Ref: m.Ref, Err: err})
	case Clear:
		reply(ctx, r, ClearFailed{Ref: m.Ref, Err: err})
	}
}

// reply answers the sender of r, if it had one (a Send without a sender
// gets no reply, by design).
func reply(ctx actor.Context, r request, msg any) {
	if r.sender != nil {
		ctx.Send(r.sender, msg)
	}
}
