package agent

import (
	"errors"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
)

// refShift splits a ref into its incarnation (the high bits) and a
// counter. Every incarnation of an agent actor (the first spawn and each
// restart after a panic) draws a fresh epoch, and every ref it makes
// (its own and its driver's) carries it: a reply, chunk, hook or tool
// result, or timer tick meant for a dead incarnation reaches the new
// one (same PID) and is dropped by its epoch instead of being taken for
// one of its own.
const refShift = 40

// lineage is shared by the incarnations made by one Props: the epoch
// counter, and what an incarnation that is restarting hands to the next
// one (by PID, as a Props may spawn several agents).
type lineage struct {
	mu      sync.Mutex
	epochs  uint64
	carried map[string]carried // nil until a restart hands something over
}

// carried is what survives a restart: the callers of forwarded sends
// still waiting for the inbox's answer (the answer, if the old inbox
// gave one before it was stopped, is already in the mailbox).
type carried struct {
	sends map[uint64]caller
}

func (l *lineage) nextEpoch() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epochs++
	return l.epochs
}

func (l *lineage) put(id string, c carried) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.carried == nil {
		l.carried = map[string]carried{}
	}
	l.carried[id] = c
}

func (l *lineage) take(id string) carried {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.carried[id]
	delete(l.carried, id)
	return c
}

// errRestarted answers the requests a crashed incarnation held that the
// next one cannot complete (a Compact, a maintenance task).
var errRestarted = errors.New("agent: restarted after a crash")

// stale reports a message meant for an earlier incarnation (see
// refShift): a reply to one of its refs, or a tick of its timer or
// maintenance task.
func (a *agentActor) stale(msg any) bool {
	var ref uint64
	switch m := msg.(type) {
	case session.AppendReply:
		ref = m.Ref
	case session.AppendFailed:
		ref = m.Ref
	case inbox.Claimed:
		ref = m.Ref
	case inbox.ClaimFailed:
		ref = m.Ref
	case llm.ChunkReceived:
		ref = m.Ref
	case llm.StreamEnded:
		ref = m.Ref
	case toolDone:
		ref = m.Ref
	case toolEmitted:
		ref = m.Ref
	case preStepDone:
		ref = m.Ref
	case turnStoppingDone:
		ref = m.Ref
	case stepEndDone:
		ref = m.Ref
	case retryTimerFired:
		ref = m.Gen
	case maintDone:
		return m.epoch != a.epoch
	default:
		return false
	}
	return ref>>refShift != a.epoch
}

// repair closes the turn the log leaves open (docs/architecture.md#actors):
// the previous incarnation crashed inside it. The closers (synthetic results
// for its pending tool calls, step/end, turn/end{interrupted}) are appended
// through the session actor; the driver is built once the subscription has
// delivered them, so it starts on a balanced log. Nothing else appends
// meanwhile that could conflict: the agent is the only writer of turn events,
// and inbox splices are valid anywhere.
func (a *agentActor) repair(ctx actor.Context) {
	closers := session.InterruptedTurnClosers(a.past)
	if len(closers) == 0 {
		return
	}
	drafts := make([]session.Draft, len(closers))
	for i, ev := range closers {
		d := session.NewDraft(ev.Type(), ev.Data())
		if srcs, ok := ev.SourceEventSeqs(); ok {
			d = d.WithSources(srcs)
		}
		drafts[i] = d
	}
	a.repairing = true
	a.repairRef = a.nextRef()
	ctx.Request(a.session, session.NewAppend(a.repairRef, drafts...))
}

// restarting runs on the crashed incarnation, before the next one is
// made (protoactor then stops the children, the inbox and any stream
// actor, and waits for them). It stops what this incarnation owns
// outside the actor (timer, goroutines' context), hands its waiting
// callers over: WaitIdle and Dispose requests are re-queued to self with
// their senders, forwarded sends are carried (see carried); and it
// answers what cannot survive (Compact, maintenance) with errRestarted.
func (a *agentActor) restarting(ctx actor.Context) {
	a.stop()
	if a.timer != nil {
		a.timer.Stop()
	}
	for _, w := range a.waiters {
		ctx.RequestWithCustomSender(ctx.Self(), WaitIdle{Ref: w.ref}, w.pid)
	}
	for _, w := range a.disposes {
		ctx.RequestWithCustomSender(ctx.Self(), Dispose{Ref: w.ref}, w.pid)
	}
	a.waiters, a.disposes = nil, nil
	for _, c := range a.compacts {
		if c.pid != nil {
			ctx.Send(c.pid, Compacted{Ref: c.ref, Outcome: CompactFailed, Error: errRestarted.Error()})
		}
	}
	if c := a.maint; c != nil && c.pid != nil {
		ctx.Send(c.pid, MaintenanceDone{Ref: c.ref, Err: errRestarted})
	}
	if len(a.sends) > 0 {
		a.lin.put(ctx.Self().String(), carried{sends: a.sends})
	}
}
