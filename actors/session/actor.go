package session

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Config configures a session actor. The zero value is not usable: Log is
// required.
type Config struct {
	// Log is the log the actor owns. Ownership passes to the actor at
	// Props: the caller must not touch it afterwards.
	Log *Log
	// Clock returns the time stamped on appends, in epoch ms. Default:
	// the wall clock.
	Clock func() int64
	// Observers are called in-process with every committed event, after
	// commit and before the append is acknowledged. See Observer.
	Observers []Observer
	// OnObserverFailure receives contained observer failures. Default:
	// logged at warn level on the actor system's logger.
	OnObserverFailure func(ObserverFailure)
}

// Validate reports a missing log.
func (c Config) Validate() error {
	if c.Log == nil {
		return errors.New("session: config needs a log")
	}
	return nil
}

// shell is the actor state that survives restarts: the log is the truth,
// and an append is atomic, so a restarted instance continues on it.
// Subscriptions survive too, and so does the Append being handled when
// the actor panicked (pending): the restarted instance answers it, so its
// sender is never left waiting (see settle).
type shell struct {
	log     *Log
	clock   func() int64
	subs    []subscription
	pending *pendingAppend
	// slot is where pending points while an Append is handled: one per
	// shell rather than one allocation per Append (the chunk hot path).
	slot pendingAppend
	held heldCommits
}

// pendingAppend is an Append whose reply has not been sent yet.
type pendingAppend struct {
	sender *actor.PID
	ref    uint64
	from   int64 // log length before the append
}

type subscription struct {
	pid    *actor.PID
	next   int64         // next seq to send
	behind time.Duration // Subscribe.Behind: streamed chunks may be held this long (heldCommits)
}

// Props returns the props of a session actor owning cfg.Log.
func Props(cfg Config) (*actor.Props, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	st := &shell{log: cfg.Log, clock: cfg.Clock}
	if st.clock == nil {
		st.clock = func() int64 { return time.Now().UnixMilli() }
	}
	for _, o := range cfg.Observers {
		cfg.Log.Observe(o)
	}
	onFail := cfg.OnObserverFailure
	return actor.PropsFromProducer(func() actor.Actor {
		a := &sessionActor{st: st}
		if onFail != nil {
			st.log.OnObserverFailure(onFail)
		}
		return a
	}), nil
}

type sessionActor struct {
	st *shell
}

// Receive handles the protocol of protocol.go. Nothing here blocks: every
// request is answered from memory.
func (a *sessionActor) Receive(ctx actor.Context) {
	st := a.st
	switch ctx.Message().(type) {
	case Append, *actor.Started:
	default:
		// Whatever else comes (a query, a subscription, the host's flush
		// asking for the log's length first, the stop) finds nothing held.
		st.fanOut(ctx, sendHeld)
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		st.held.self, st.held.root = ctx.Self(), ctx.ActorSystem().Root
		st.settle(ctx)
		if st.log.obs.onFailure == nil {
			logger := ctx.Logger()
			id := st.log.ID()
			st.log.OnObserverFailure(func(f ObserverFailure) {
				logger.Warn("session observer failed", "session", string(id), "seq", f.Seq, "err", f.Err)
			})
		}
	case Append:
		// A panic from here on (the observer failure hook runs inside
		// AppendBatch, after the commit) restarts the actor; pending
		// lets the next instance answer this Append.
		from := st.log.Len()
		st.slot = pendingAppend{sender: ctx.Sender(), ref: m.Ref, from: from}
		st.pending = &st.slot
		err := st.log.appendBatch(m.drafts, st.clock())
		st.pending, st.slot = nil, pendingAppend{}
		if err != nil {
			respond(ctx, AppendFailed{Ref: m.Ref, Err: err})
			return
		}
		if !chunksOnly(m.drafts) {
			st.held.breakAt = st.log.Len()
		}
		delivered := m.deliver && st.deliverTo(ctx.Sender(), from)
		st.fanOut(ctx, mayHold)
		// The reply is a view of the log (immutable, clipped), like the
		// subscribers' EventsCommitted: copying the batch cost an
		// allocation per chunk for nothing.
		respond(ctx, AppendReply{Ref: m.Ref, Events: st.log.EventsFrom(from), Delivered: delivered})
	case Subscribe:
		if m.Subscriber == nil {
			return
		}
		st.removeSub(m.Subscriber)
		from := min(max(m.From, 0), st.log.Len())
		st.subs = append(st.subs, subscription{pid: m.Subscriber, next: from, behind: max(m.Behind, 0)})
		st.held.limitTo(st.subs)
		ctx.Watch(m.Subscriber)
		st.fanOut(ctx, sendHeld)
		respond(ctx, Subscribed{Next: st.log.Len()})
	case Unsubscribe:
		if st.removeSub(m.Subscriber) {
			unwatch(ctx, m.Subscriber)
		}
	case *actor.Stopping:
		for _, s := range st.subs {
			unwatch(ctx, s.pid)
		}
	case heldDue:
		// Sent nothing more: the switch above sent what was held.
	case *actor.Stopped:
		st.held.stop()
		// Stopped is final (a restart is Restarting). Anything that still
		// holds the actor's PID holds the actor through it (protoactor
		// caches the process in the PID), and some holders outlive it for
		// a while: protoactor's watcher sets keep a removed PID in their
		// spare capacity. Dropping the log here keeps such a holder from
		// keeping a stopped session's events. The caller's own reference
		// to the Log (Config.Log) is untouched.
		*st = shell{}
	case *actor.Terminated:
		st.removeSub(m.Who)
	case QueryMessages:
		respond(ctx, MessagesReply{Ref: m.Ref, Len: st.log.Len(), Messages: st.log.DeriveMessages()})
	case QueryEvents:
		respond(ctx, EventsReply{Ref: m.Ref, Events: st.log.EventsFrom(m.From)})
	case QueryHeader:
		r := HeaderReply{Ref: m.Ref, Len: st.log.Len(), Session: st.log.Header()}
		r.Request, r.HasRequest = st.log.RequestHeader()
		r.Context, r.HasContext = st.log.RequestContext()
		respond(ctx, r)
	case Fork:
		prefix, err := st.log.ForkPrefix(m.Boundary)
		if err != nil {
			respond(ctx, ForkFailed{Ref: m.Ref, Err: err})
			return
		}
		h := st.log.forkHeader(m.Child, m.CreatedAt, len(prefix))
		if err := h.Validate(); err != nil {
			respond(ctx, ForkFailed{Ref: m.Ref, Err: fmt.Errorf("session: fork: %w", err)})
			return
		}
		respond(ctx, ForkReply{Ref: m.Ref, Header: h, Seed: EventsOf(prefix)})
	}
}

// ErrRestarted refuses an Append that was being handled when the session
// actor panicked before committing it: the log is unchanged.
var ErrRestarted = errors.New("session: actor restarted before the append committed")

// settle runs at every start. After a restart it answers the Append the
// crashed instance was handling: an append is atomic, so either the log
// grew by the whole batch (committed: AppendReply with those events) or it
// did not (AppendFailed with ErrRestarted). Then it sends the subscribers
// whatever the crash kept from them, first, as a normal append does.
// Observers that had not yet seen the crashed batch when the panic unwound
// do not see it: observers are the
// embedder's in-process code, and the log and the subscriptions are what
// the session guarantees.
func (st *shell) settle(ctx actor.Context) {
	st.fanOut(ctx, sendHeld)
	if p := st.pending; p != nil {
		st.pending = nil
		var msg any = AppendFailed{Ref: p.ref, Err: ErrRestarted}
		if st.log.Len() > p.from {
			msg = AppendReply{Ref: p.ref, Events: st.log.EventsFrom(p.from)}
		}
		if p.sender != nil {
			ctx.Send(p.sender, msg)
		}
	}
}

// fanOut sends every subscriber the events it has not seen yet, as one
// EventsCommitted each, except what hold lets it keep from a Behind
// subscriber (heldCommits). Views are O(1): no copying.
func (st *shell) fanOut(ctx actor.Context, hold holdMode) {
	n := st.log.Len()
	holding := false
	held := st.held.heldFor()
	for i := range st.subs {
		s := &st.subs[i]
		if s.next >= n {
			continue
		}
		if hold == mayHold && s.behind > 0 && s.next >= st.held.breakAt && st.held.mayHold() {
			holding = true
			continue
		}
		m := EventsCommitted{Session: st.log.ID(), Events: st.log.EventsFrom(s.next)}
		if s.behind > 0 {
			m.Held = held
		}
		ctx.Send(s.pid, m)
		s.next = n
	}
	st.held.holding(holding)
}

// deliverTo marks the events from seq from on as sent to sender's
// subscription, if sender is a subscriber that was sent every event
// before them, and reports whether it did: the reply to its Append then
// delivers them (Append.Delivering).
func (st *shell) deliverTo(sender *actor.PID, from int64) bool {
	if sender == nil {
		return false
	}
	for i := range st.subs {
		if s := &st.subs[i]; s.pid.Equal(sender) {
			if s.next != from {
				return false
			}
			s.next = st.log.Len()
			return true
		}
	}
	return false
}

func (st *shell) removeSub(pid *actor.PID) bool {
	for i, s := range st.subs {
		if s.pid.Equal(pid) {
			st.subs = append(st.subs[:i:i], st.subs[i+1:]...)
			st.held.limitTo(st.subs)
			return true
		}
	}
	return false
}

// unwatch undoes the Watch of a subscription. A watched actor keeps its
// watchers until they unwatch it, and a subscriber may outlive the session
// by far (the persister's shards live as long as the host): one that kept
// watching every session it ever tracked kept each one reachable, log and
// all. A subscriber already gone is not sent the Unwatch (it would only
// become a dead letter); the check can race with its stop, which costs one
// dead letter and nothing else.
func unwatch(ctx actor.Context, pid *actor.PID) {
	if _, ok := ctx.ActorSystem().ProcessRegistry.Get(pid); ok {
		ctx.Unwatch(pid)
	}
}

// respond answers the sender, if there is one (a Send without a sender
// gets no reply, by design).
func respond(ctx actor.Context, msg any) {
	if ctx.Sender() != nil {
		ctx.Respond(msg)
	}
}
