package inbox

import (
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

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
	// refs outlives the actor instances: a restarted instance must not
	// reuse the correlation id of an append its predecessor left in flight,
	// whose reply still comes to the same PID.
	refs := new(uint64)
	return actor.PropsFromProducer(func() actor.Actor {
		return &inboxActor{cfg: cfg, refs: refs}
	}), nil
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
	plans []Plan
}

// inboxActor is the shell around State. Everything here is touched only in
// Receive.
type inboxActor struct {
	cfg   ActorConfig
	refs  *uint64
	state *State // nil until rebuilt from the log

	// Boot: the header (for seedLength) and the events, asked for at
	// Started; the state is rebuilt when both have arrived.
	headerRef, eventsRef uint64
	seedLength           int64
	haveHeader           bool
	events               session.Events
	haveEvents           bool

	// queue holds the requests not started yet, in arrival order; busy is
	// the one whose append is in flight. Serialising is what makes each
	// plan valid: it is made against the state every earlier splice left,
	// and applied before the next plan is made. A rejected alternative,
	// planning eagerly against a projected state, would have to undo the
	// projection of every later plan when an append fails.
	queue []request
	busy  *inflight
	// sessionStopped is set once the session has terminated: every
	// request that needs an append fails with ErrSessionStopped.
	sessionStopped bool
}

func (a *inboxActor) nextRef() uint64 {
	*a.refs++
	return *a.refs
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
		if a.busy != nil && m.Ref == a.busy.ref {
			a.committed(ctx, m.Events)
			a.pump(ctx)
		}
		// Any other ref is a reply to a predecessor's append: the log
		// this instance was rebuilt from already holds it.
	case session.AppendFailed:
		if a.busy != nil && m.Ref == a.busy.ref {
			b := a.busy
			a.busy = nil
			a.fail(ctx, b.req, fmt.Errorf("inbox: append splice: %w", m.Err))
			a.pump(ctx)
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
	a.pump(ctx)
}

// pump starts queued requests, in order, until one needs an append or the
// queue is empty. Requests that need no append (a refusal, a no-op, a
// query) are answered at once.
func (a *inboxActor) pump(ctx actor.Context) {
	for a.state != nil && a.busy == nil && len(a.queue) > 0 {
		r := a.queue[0]
		a.queue[0] = request{}
		a.queue = a.queue[1:]
		a.start(ctx, r)
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
		p, err := s.PlanAppend(m.Target, m.Message, m.Origin)
		if err != nil {
			a.fail(ctx, r, err)
			return
		}
		a.append(ctx, r, []Plan{p})
	case Claim:
		if plans := s.PlanClaim(m.Target, m.Turn); len(plans) > 0 {
			a.append(ctx, r, plans)
			return
		}
		reply(ctx, r, Claimed{Ref: m.Ref})
	case Remove:
		p, ok := s.PlanRemove(m.ID)
		if !ok {
			reply(ctx, r, RemoveReply{Ref: m.Ref})
			return
		}
		a.append(ctx, r, []Plan{p})
	case Replace:
		p, err := s.PlanReplace(m.ID, m.Message)
		if err != nil {
			a.fail(ctx, r, err)
			return
		}
		a.append(ctx, r, []Plan{p})
	case Clear:
		if plans := s.PlanClear(); len(plans) > 0 {
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
func (a *inboxActor) append(ctx actor.Context, r request, plans []Plan) {
	if a.sessionStopped {
		a.fail(ctx, r, ErrSessionStopped)
		return
	}
	ref := a.nextRef()
	a.busy = &inflight{ref: ref, req: r, plans: plans}
	ctx.Request(a.cfg.Session, session.NewAppend(ref, Drafts(plans)...))
}

// committed applies the in-flight plans to the committed events, tells
// the owner, and answers the requester.
//
// A mismatch between the plans and the events (a wrong count, a stale
// plan) means the lists no longer match the log: the actor panics, and
// its restart rebuilds the lists from the log.
func (a *inboxActor) committed(ctx actor.Context, events session.Events) {
	b := a.busy
	a.busy = nil
	if events.Len() != len(b.plans) {
		panic(fmt.Errorf("inbox: %d splices appended, %d events committed", len(b.plans), events.Len()))
	}
	var taken []messages.Message // claimed or discarded, in order
	for i, p := range b.plans {
		n, err := a.state.Apply(p, events.At(i))
		if err != nil {
			panic(fmt.Errorf("inbox: apply committed splice: %w", err))
		}
		a.notify(ctx, n)
		taken = append(taken, n.Claimed...)
		taken = append(taken, n.Discarded...)
	}
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
func (a *inboxActor) notify(ctx actor.Context, n Notifications) {
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
