package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
)

// ErrDisposed refuses a send to a disposed agent.
var ErrDisposed = errors.New("agent: disposed")

// Messages the shell sends itself from the goroutines and timers it owns
// are the driver's inputs (toolDone, toolEmitted, preStepDone,
// turnStoppingDone, stepEndDone, retryTimerFired), except for the end of a
// maintenance task, whose reply the shell sends.
type (
	maintDone struct { // the maintenance task returned
		epoch uint64
		err   error
		stack []byte // the panic's stack when the task panicked
	}
)

type caller struct {
	pid *actor.PID
	ref uint64
}

// agentActor is the shell around driver. Everything is touched only in
// Receive, except what the goroutines capture (immutable values, the
// root context, and wg, which is safe for concurrent use).
type agentActor struct {
	cfg     *Config       // the Template's, shared: read only (its Session is nil)
	driver  *driverShared // the Template's core configuration, shared
	session *actor.PID    // the session actor the agent writes to
	lin     *lineage
	epoch   uint64
	d       *driver
	inbox   *actor.PID
	self    *actor.PID
	root    *actor.RootContext

	refs        uint64
	headerRef   uint64
	pendingRef  uint64
	header      session.Header
	past        []session.Event
	pendingSeen bool
	pendingTurn int
	pendingStep int
	booted      bool
	buffered    []any // inputs that arrived before boot, replayed in order
	repairRef   uint64
	repairing   bool // the closers of an open turn are appended, not yet seen
	subscribed  bool

	sends    map[uint64]caller // forwarded sends by inbox ref
	pushes   map[uint64]uint64 // context pushes: the driver's ref by inbox ref
	stepOps  map[uint64]uint64 // step-end inbox operations: the driver's ref by inbox ref
	waiters  []caller
	disposes []caller          // Dispose requests, answered once idle
	compacts map[uint64]caller // Compact requests by driver ref
	maint    *caller           // the running maintenance task's caller
	maintAsk *maintReq         // the maintenance request the driver is asked about
	stream   *actor.PID

	stopped      bool            // Stopping or Restarting came: every signal made is cancelled
	signal       context.Context // the running turn's abort signal; nil until needed (abortSignal)
	signalCancel context.CancelFunc
	timer        *time.Timer
	wg           sync.WaitGroup // tool and hook goroutines

	chunks chunkAppends
}

func (a *agentActor) nextRef() uint64 {
	a.refs++
	return a.refs
}

// Receive never blocks, except in Stopped, which joins the tool and hook
// goroutines it has just cancelled (tools must honour their context).
func (a *agentActor) Receive(ctx actor.Context) {
	if a.stale(ctx.Message()) {
		return
	}
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *actor.Stopping:
		a.stop()
		if a.timer != nil {
			a.timer.Stop()
		}
		ctx.Send(a.session, session.Unsubscribe{Subscriber: ctx.Self()})
	case *actor.Stopped:
		a.wg.Wait()
	case *actor.Restarting:
		a.restarting(ctx)
	case *actor.Terminated:
	case session.HeaderReply:
		if m.Ref == a.headerRef {
			a.header = m.Session
		}
	case session.EventsCommitted:
		a.committed(ctx, m.Events)
	case session.Subscribed:
		if a.d == nil && !a.subscribed {
			a.subscribed = true
			a.repair(ctx)
			a.build(ctx)
		}
	case session.AppendReply:
		if m.Delivered {
			// The reply stands for the subscription's EventsCommitted
			// (the driver's appends are Delivering): mirrored first, as
			// that message would have been.
			a.committed(ctx, m.Events)
		}
		if m.Ref == a.repairRef {
			return // the closers are taken from the subscription
		}
		if !a.chunkReply(ctx, m) {
			a.input(ctx, m)
		}
	case session.AppendFailed:
		if m.Ref == a.repairRef {
			// Let the next incarnation try again.
			panic(errors.Join(errors.New("agent: crash repair refused"), m.Err))
		}
		a.input(ctx, m)
	case inbox.Pending:
		if m.Ref == a.pendingRef {
			a.pendingSeen = true
			a.pendingTurn, a.pendingStep = len(m.NextTurn()), len(m.NextStep())
			a.boot(ctx)
		}
	case inbox.Inserted, inbox.Discarded, inbox.ClaimedNotice:
		// Before the boot query's answer, the counts it carries already
		// include these changes.
		if a.pendingSeen {
			if !a.booted {
				a.buffered = append(a.buffered, m)
				return
			}
			a.handle(ctx, m)
		}
	case llm.ChunkReceived:
		if !a.booted { // cannot be: only a booted driver streams
			a.buffered = append(a.buffered, m)
			return
		}
		eff, err := a.d.stepChunk(m.Ref, m.Chunk)
		a.performStep(ctx, eff, err)
	case Followup:
		a.forward(ctx, m.Ref, inbox.Followup(0, m.Message))
	case Steer:
		a.forward(ctx, m.Ref, inbox.Steer(0, m.Message))
	case Inject:
		a.forward(ctx, m.Ref, inbox.Inject(0, m.Message))
	case Dispose:
		a.disposes = append(a.disposes, caller{pid: ctx.Sender(), ref: m.Ref})
		if !a.booted {
			a.buffered = append(a.buffered, m)
			return
		}
		a.handle(ctx, m)
	case inbox.SendReply:
		if r, ok := a.pushes[m.Ref]; ok {
			delete(a.pushes, m.Ref)
			a.step(ctx, contextPushed{Ref: r})
			break
		}
		if a.stepOpAnswered(ctx, m.Ref, nil) {
			break
		}
		if c, ok := a.sends[m.Ref]; ok {
			delete(a.sends, m.Ref)
			if c.pid != nil {
				ctx.Send(c.pid, Sent{Ref: c.ref, ID: m.ID})
			}
		}
	case inbox.SendFailed:
		if r, ok := a.pushes[m.Ref]; ok {
			delete(a.pushes, m.Ref)
			a.step(ctx, contextPushed{Ref: r})
			break
		}
		if a.stepOpAnswered(ctx, m.Ref, m.Err) {
			break
		}
		if c, ok := a.sends[m.Ref]; ok {
			delete(a.sends, m.Ref)
			if c.pid != nil {
				ctx.Send(c.pid, SendFailed{Ref: c.ref, Err: m.Err})
			}
		}
	case inbox.RemoveReply:
		a.stepOpAnswered(ctx, m.Ref, nil)
	case inbox.RemoveFailed:
		a.stepOpAnswered(ctx, m.Ref, m.Err)
	case inbox.ClearReply, inbox.ClearFailed:
		// A failed clear leaves the inbox as it was; nothing to undo.
	case WaitIdle:
		a.waiters = append(a.waiters, caller{pid: ctx.Sender(), ref: m.Ref})
	case RunMaintenance:
		if !a.booted {
			a.buffered = append(a.buffered, maintReq{RunMaintenance: m, from: ctx.Sender()})
			return
		}
		a.handle(ctx, maintReq{RunMaintenance: m, from: ctx.Sender()})
	case Compact:
		if a.compacts == nil {
			a.compacts = map[uint64]caller{}
		}
		ref := a.nextRef()
		a.compacts[ref] = caller{pid: ctx.Sender(), ref: m.Ref}
		if !a.booted {
			a.buffered = append(a.buffered, compactRequested{Ref: ref})
			return
		}
		a.handle(ctx, compactRequested{Ref: ref})
	default:
		a.input(ctx, m)
	}
	a.answerWaiters(ctx)
}

// input handles m, or keeps it for the boot.
func (a *agentActor) input(ctx actor.Context, m any) {
	if !a.booted {
		a.buffered = append(a.buffered, m)
		return
	}
	a.handle(ctx, m)
}

// committed takes events the subscription delivered: into the driver's
// mirror, or, before the driver exists, into the log being replayed.
func (a *agentActor) committed(ctx actor.Context, events session.Events) {
	if a.d == nil {
		a.mirror(events.Slice())
		a.build(ctx) // may boot: the waiters are answered by Receive
	} else {
		a.step(ctx, eventsCommitted{Events: events})
	}
}

// mirror adds evs to the log being replayed before the driver exists. A
// restarted incarnation may first receive events its predecessor's
// subscription fanned out before the new one replays from the start:
// an event that does not follow the last one restarts the mirror at its
// seq.
func (a *agentActor) mirror(evs []session.Event) {
	for _, ev := range evs {
		if n := len(a.past); n > 0 && ev.Seq() <= a.past[n-1].Seq() {
			i := 0
			for i < n && a.past[i].Seq() < ev.Seq() {
				i++
			}
			a.past = a.past[:i]
		}
		a.past = append(a.past, ev)
	}
}

// build makes the driver once the log is replayed and balanced.
func (a *agentActor) build(ctx actor.Context) {
	if a.d != nil || !a.subscribed {
		return
	}
	if a.repairing {
		if len(session.InterruptedTurnClosers(a.past)) > 0 {
			return
		}
		a.repairing = false
	}
	d, err := newDriverFrom(a.driver, a.header, a.past)
	if err != nil {
		panic(err)
	}
	// The driver's refs are apart from the shell's (the crash-repair
	// append's reply may arrive after the driver's first appends).
	d.refs = a.epoch<<refShift | 1<<(refShift-1)
	a.d, a.past = d, nil
	a.boot(ctx)
}

// stop cancels the abort signal for good: the goroutines the agent
// started are told to return, and any it starts from now on are born
// cancelled.
func (a *agentActor) stop() {
	a.stopped = true
	if a.signalCancel != nil {
		a.signalCancel()
	}
}

// abortSignal returns the running turn's abort signal, for a goroutine
// the agent starts under it. It is made on first use, so an agent that
// starts none (an idle session) holds no context: each cancellable one
// costs a few hundred bytes.
func (a *agentActor) abortSignal() context.Context {
	if a.signal == nil {
		a.signal, a.signalCancel = context.WithCancel(context.Background())
		if a.stopped {
			a.signalCancel()
		}
	}
	return a.signal
}

func (a *agentActor) start(ctx actor.Context) {
	a.self, a.root = ctx.Self(), ctx.ActorSystem().Root
	a.epoch = a.lin.nextEpoch()
	a.refs = a.epoch << refShift
	// The maps of requests in flight are made on first use: an idle
	// session's agent holds none.
	a.sends = a.lin.take(ctx.Self().String()).sends
	props, err := inbox.Props(inbox.ActorConfig{Session: a.session, Owner: ctx.Self(), Inbox: a.cfg.Inbox})
	if err != nil {
		panic(err)
	}
	a.inbox = ctx.Spawn(props.Configure(a.cfg.ChildOptions...))
	a.headerRef, a.pendingRef = a.nextRef(), a.nextRef()
	// The header arrives before the subscription's first events (same
	// sender, sent in this order), and the subscription replays the
	// whole log before Subscribed.
	ctx.Request(a.session, session.QueryHeader{Ref: a.headerRef})
	ctx.Request(a.session, session.Subscribe{Subscriber: ctx.Self(), From: 0})
	ctx.Request(a.inbox, inbox.QueryPending{Ref: a.pendingRef})
}

// boot completes once the mirror is built and the inbox counts are known,
// then replays the inputs that waited.
func (a *agentActor) boot(ctx actor.Context) {
	if a.booted || a.d == nil || !a.pendingSeen {
		return
	}
	a.booted = true
	a.step(ctx, inboxPending{NextTurn: a.pendingTurn, NextStep: a.pendingStep})
	buf := a.buffered
	a.buffered = nil
	for _, m := range buf {
		a.handle(ctx, m)
	}
}

// forward sends s to the inbox on behalf of the caller. Before boot the
// driver's abort state is unknown, but then no turn is running either.
func (a *agentActor) forward(ctx actor.Context, callerRef uint64, s inbox.Send) {
	a.sendHeld(ctx) // the inbox appends too: what the agent received first goes first
	if a.d != nil && a.d.Disposed() {
		if p := ctx.Sender(); p != nil {
			ctx.Send(p, SendFailed{Ref: callerRef, Err: ErrDisposed})
		}
		return
	}
	if a.d != nil {
		s.Target = a.d.SendTarget(s)
	}
	s.Ref = a.nextRef()
	if a.sends == nil {
		a.sends = map[uint64]caller{}
	}
	a.sends[s.Ref] = caller{pid: ctx.Sender(), ref: callerRef}
	ctx.Request(a.inbox, s)
}

// handle feeds message msg to the driver, as the input it stands for
// (inputOf), and performs the effects. A driver error means the agent's
// view of the log is wrong (so does a refused append or claim): panic,
// and let the restart rebuild it from the log.
func (a *agentActor) handle(ctx actor.Context, msg any) {
	switch m := msg.(type) {
	case maintReq:
		a.startMaintenance(ctx, m)
		return
	case maintDone:
		a.maintenanceDone(ctx, m)
		return
	case inbox.ClaimFailed:
		panic(errors.Join(errors.New("agent: claim refused"), m.Err))
	case session.AppendFailed:
		panic(fmt.Errorf("agent: session refused append %d: %w", m.Ref, m.Err))
	case llm.StreamEnded:
		defer a.releaseChunkBuffers() // after the effects: what they hold is sent
	}
	if in, ok := inputOf(msg); ok {
		a.step(ctx, in)
	}
}

// inputOf returns the driver input that message m stands for: the
// driver's own inputs (sent by the shell's goroutines and timers) and the
// protocol requests it takes (Cancel, SetSystem, SetRuntimeContext,
// Dispose) are inputs already; the inbox's, the session's and the
// stream's messages carry one.
func inputOf(m any) (input, bool) {
	switch m := m.(type) {
	case input:
		return m, true
	case inbox.Woken:
		return woken{Target: m.Target}, true
	case inbox.Inserted:
		return inboxChanged{Target: m.Target, Delta: 1}, true
	case inbox.Discarded:
		return inboxChanged{Target: m.Target, Delta: -1}, true
	case inbox.ClaimedNotice:
		return inboxChanged{Target: m.Target, Delta: -1}, true
	case inbox.Claimed:
		return claimed{Ref: m.Ref, Messages: m.Messages()}, true
	case session.AppendReply:
		return appended{Ref: m.Ref, Events: m.Events}, true
	case llm.ChunkReceived:
		return streamChunk{Ref: m.Ref, Chunk: m.Chunk}, true
	case llm.StreamEnded:
		return streamEnded{Ref: m.Ref, Finish: m.Finish, Cancelled: m.Cancelled}, true
	}
	return nil, false
}

// step feeds in to the driver and performs the effects.
func (a *agentActor) step(ctx actor.Context, in input) {
	eff, err := a.d.Step(in)
	a.performStep(ctx, eff, err)
}

// performStep performs the effects of a step, or panics with its error.
func (a *agentActor) performStep(ctx actor.Context, eff effects, err error) {
	if err != nil {
		panic(err)
	}
	a.perform(ctx, eff)
	a.d.recycle(eff) // performed, and nothing of it kept
}

// maintenanceDone ends the maintenance task: the driver replays a wake
// latched meanwhile, then the requester gets the task's error.
func (a *agentActor) maintenanceDone(ctx actor.Context, m maintDone) {
	if m.stack != nil {
		if l := ctx.Logger(); l != nil {
			l.Error("agent: maintenance task panicked", "err", m.err, "stack", string(m.stack))
		}
	}
	c := a.maint
	a.maint = nil
	a.step(ctx, maintenanceDone{})
	if c != nil && c.pid != nil {
		ctx.Send(c.pid, MaintenanceDone{Ref: c.ref, Err: m.err})
	}
}

func (a *agentActor) perform(ctx actor.Context, eff effects) {
	for _, e := range eff {
		if ce, ok := e.(chunkAppendEffect); ok {
			a.appendChunk(ctx, *ce.appendEffect)
			continue
		}
		a.sendHeld(ctx) // everything else goes after the chunks before it
		switch e := e.(type) {
		case appendEffect:
			ctx.Request(a.session, session.NewAppend(e.Ref, e.Drafts...).Delivering())
		case claimEffect:
			ctx.Request(a.inbox, inbox.Claim{Ref: e.Ref, Target: e.Target, Turn: e.Turn})
		case clearInboxEffect:
			ctx.Request(a.inbox, inbox.Clear{Ref: a.nextRef()})
		case pushContextEffect:
			ref := a.nextRef()
			if a.pushes == nil {
				a.pushes = map[uint64]uint64{}
			}
			a.pushes[ref] = e.Ref
			ctx.Request(a.inbox, inbox.Send{Ref: ref, Message: e.Message, Target: inbox.NextStep, Origin: inbox.Loop})
		case startStreamEffect:
			props, err := llm.StreamProps(llm.StreamConfig{Provider: a.cfg.Provider, Request: e.Request, Ref: e.Ref,
				Timeout: a.cfg.StreamTimeout})
			if err != nil {
				panic(err)
			}
			a.stream = ctx.Spawn(props.Configure(a.cfg.ChildOptions...))
		case cancelStreamEffect:
			if a.stream != nil {
				ctx.Send(a.stream, llm.CancelStream{Ref: e.Ref})
			}
		case runToolEffect:
			a.runTool(e)
		case runPreStepEffect:
			a.runPreStep(e)
		case runTurnStoppingEffect:
			a.runTurnStopping(e)
		case runStepEndEffect:
			a.runStepEnd(e)
		case inboxOpEffect:
			ref := a.nextRef()
			if a.stepOps == nil {
				a.stepOps = map[uint64]uint64{}
			}
			a.stepOps[ref] = e.Ref
			if s, ok := e.Op.send(); ok {
				s.Ref = ref
				ctx.Request(a.inbox, s)
			} else {
				ctx.Request(a.inbox, inbox.Remove{Ref: ref, ID: e.Op.id})
			}
		case startTimerEffect:
			root, self, gen := a.root, a.self, e.Gen
			if a.timer != nil {
				a.timer.Stop()
			}
			a.timer = time.AfterFunc(e.Delay, func() { root.Send(self, retryTimerFired{Gen: gen}) })
		case newSignalEffect:
			if a.signalCancel != nil {
				a.signalCancel()
			}
			a.signal, a.signalCancel = nil, nil // made again when needed
		case abortEffect:
			a.abortSignal()
			a.signalCancel()
			if a.timer != nil {
				a.timer.Stop()
			}
		case statusEffect:
			if a.cfg.Observer != nil {
				ctx.Send(a.cfg.Observer, StatusChanged(e))
			}
		case turnErrorEffect:
			if a.cfg.Observer != nil {
				ctx.Send(a.cfg.Observer, TurnFailed(e))
			}
		case maintenanceEffect:
			a.runMaintenance(ctx, e.Err)
		case compactDoneEffect:
			c, ok := a.compacts[e.Ref]
			delete(a.compacts, e.Ref)
			if ok && c.pid != nil {
				ctx.Send(c.pid, Compacted{Ref: c.ref, Outcome: e.Outcome, CompactionID: e.CompactionID, Error: e.Err})
			}
		}
	}
}

func (a *agentActor) answerWaiters(ctx actor.Context) {
	if !a.booted || !a.d.Idle() {
		return
	}
	for _, w := range a.waiters {
		if w.pid != nil {
			ctx.Send(w.pid, Idle{Ref: w.ref})
		}
	}
	a.waiters = nil
	if a.d.Disposed() {
		for _, w := range a.disposes {
			if w.pid != nil {
				ctx.Send(w.pid, Disposed{Ref: w.ref})
			}
		}
		a.disposes = nil
	}
}
