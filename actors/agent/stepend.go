package agent

import (
	"context"
	"errors"

	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// The step-end hook (agent/step-end, dsh's own): what a plugin does at a
// step boundary, run inside the loop at a fixed point (after step/end is
// committed and the boundary's claim answered, before anything else is
// decided), so that the contributions the reference's plugins make from
// the log's events land where its recordings put them instead of racing
// the next claim (docs/agent-loop.md#the-step-end-hook).

// StepEndInput is what the step-end hook sees: the step that ended.
type StepEndInput struct {
	Turn, Step int64
}

// StepEndHook runs at every step boundary of a turn that goes on (after a
// step that ended completed, max-tokens or owing tool work; not after a
// step that ended aborted or in error, whose turn ends at once): once the
// step's step/end is committed and the boundary's claim of next-step has
// been answered, and before the loop decides what follows. Its
// contributions (StepEndDecision) are performed in order before it does.
// An inbox operation's message waits in the inbox for the next claim: it
// enters at the next boundary, or, when the turn would end here (the step
// completed and nothing was claimed), the loop claims again and runs
// another step for it, as after turn-stopping steering.
//
// It runs in a goroutine owned by the agent and may block; ctx is
// cancelled when the turn is aborted or the agent stops (the decision is
// then dropped). An error, a panic, or an invalid contribution ends the
// turn in error (agent/error names the step that ended).
type StepEndHook interface {
	StepEnd(ctx context.Context, in StepEndInput) (StepEndDecision, error)
}

// StepEndDecision is the step-end hook's answer: Ops are performed in
// order. The slice belongs to the agent once returned.
type StepEndDecision struct {
	Ops []StepEndOp
}

// StepEndOp is one contribution of the step-end hook: a log-only event,
// or an inbox operation. Build it with EventOp, InjectOp, SteerOp,
// FollowupOp or RemoveOp.
type StepEndOp struct {
	kind    stepEndOpKind
	event   session.Draft
	message messages.Message
	id      messages.MessageID
}

type stepEndOpKind uint8

const (
	opEvent stepEndOpKind = iota + 1
	opInject
	opSteer
	opFollowup
	opRemove
)

// EventOp records the log-only event d (a foreign or unknown type, as a
// pre-step decision's Preface: dsh writes its core events itself).
func EventOp(d session.Draft) StepEndOp { return StepEndOp{kind: opEvent, event: d} }

// InjectOp inserts user message m into next-step without waking the
// agent (Inject).
func InjectOp(m messages.Message) StepEndOp { return StepEndOp{kind: opInject, message: m} }

// SteerOp inserts user message m into next-step, waking (Steer).
func SteerOp(m messages.Message) StepEndOp { return StepEndOp{kind: opSteer, message: m} }

// FollowupOp queues user message m as a later turn (Followup).
func FollowupOp(m messages.Message) StepEndOp { return StepEndOp{kind: opFollowup, message: m} }

// RemoveOp cancels the pending inbox message id (a user-level removal,
// recorded with outcome canceled; nothing when it is no longer pending).
func RemoveOp(id messages.MessageID) StepEndOp { return StepEndOp{kind: opRemove, id: id} }

// send returns the inbox Send of a send op (ok false for an event or a
// removal). The shell fills in the ref.
func (o StepEndOp) send() (s inbox.Send, ok bool) {
	switch o.kind {
	case opInject:
		return inbox.Inject(0, o.message), true
	case opSteer:
		return inbox.Steer(0, o.message), true
	case opFollowup:
		return inbox.Followup(0, o.message), true
	}
	return inbox.Send{}, false
}

// vetStepEndOps checks a decision's contributions and returns them in
// their recorded form (events rebuilt by logOnlyDraft). An invalid one
// fails the whole decision: nothing of it is performed.
func vetStepEndOps(ops []StepEndOp) ([]StepEndOp, error) {
	out := make([]StepEndOp, 0, len(ops))
	for _, o := range ops {
		switch o.kind {
		case opEvent:
			d, err := logOnlyDraft("step-end", o.event)
			if err != nil {
				return nil, err
			}
			o.event = d
		case opInject, opSteer, opFollowup:
			if o.message.IsZero() || o.message.Role() != messages.RoleUser {
				return nil, errors.New("agent: step-end hook sent a message that is not a user message")
			}
		case opRemove:
			if o.id == "" {
				return nil, errors.New("agent: step-end hook removed a message without an id")
			}
		default:
			return nil, errors.New("agent: step-end hook returned an empty operation")
		}
		out = append(out, o)
	}
	return out, nil
}

// runStepEndEffect runs the step-end hook for step Step of turn Turn; its
// decision comes back as stepEndDone{Ref}.
type runStepEndEffect struct {
	Ref        uint64
	Turn, Step int64
}

// inboxOpEffect performs a step-end hook's inbox operation (a Send or a
// Remove, see StepEndOp). The inbox's answer, whatever it is (a refused
// operation changes nothing and is dropped, as a refused context push
// is), comes back as stepEndOpDone{Ref}.
type inboxOpEffect struct {
	Ref uint64
	Op  StepEndOp
}

func (runStepEndEffect) isEffect() {}
func (inboxOpEffect) isEffect()    {}

// runStepEnd runs the step-end hook over a boundary's claimed batch,
// which is held until its contributions are performed.
func (d *driver) runStepEnd(claimed []messages.Message) {
	t := d.t
	t.stepEndRan = true
	t.held = claimed
	d.phase = phStepEnd
	d.hookRef = d.ref()
	d.emit(runStepEndEffect{Ref: d.hookRef, Turn: t.turn, Step: t.step})
}

// onStepEndDone delivers the step-end hook's decision.
func (d *driver) onStepEndDone(ref uint64, dec StepEndDecision, err error) {
	if d.phase != phStepEnd || d.t == nil || ref != d.hookRef || d.t.opRef != 0 {
		return
	}
	t := d.t
	d.hookRef = 0
	if t.aborted {
		d.endTurn(abortedReason(t.cause))
		return
	}
	var ops []StepEndOp
	if err == nil {
		ops, err = vetStepEndOps(dec.Ops)
	}
	if err != nil {
		t.held = nil
		d.failTurn(t.step, err)
		return
	}
	t.ops = ops
	d.nextStepEndOp()
}

// onStepEndOpDone delivers the inbox's answer to step-end operation ref.
func (d *driver) onStepEndOpDone(ref uint64) {
	if d.phase != phStepEnd || d.t == nil || ref == 0 || ref != d.t.opRef {
		return
	}
	d.t.opRef = 0
	d.nextStepEndOp()
}

// nextStepEndOp performs the contributions left, in order: a run of
// events is appended at once; an inbox operation waits until everything
// before it is committed (the inbox appends its splice itself, and log
// order across the two writers is kept by acknowledgements) and is
// answered before the next contribution.
func (d *driver) nextStepEndOp() {
	t := d.t
	var evs []session.Draft
	for len(t.ops) > 0 && t.ops[0].kind == opEvent {
		evs = append(evs, t.ops[0].event)
		t.ops = t.ops[1:]
	}
	if len(evs) > 0 {
		d.appendDrafts(appendTag{}, evs...)
	}
	d.settle(func() {
		switch {
		case t.aborted:
			t.ops, t.held = nil, nil
			d.endTurn(abortedReason(t.cause))
		case len(t.ops) > 0:
			op := t.ops[0]
			t.ops = t.ops[1:]
			d.phase = phStepEnd
			t.opRef = d.ref()
			d.emit(inboxOpEffect{Ref: t.opRef, Op: op})
		default:
			d.stepEndFinished()
		}
	})
}

// stepEndFinished goes on from the boundary's claim. When the turn would
// end here (the step completed, nothing claimed) and next-step is no
// longer empty, the loop claims again (a turn ends only with next-step
// empty, docs/agent-loop.md#turns-and-steps).
func (d *driver) stepEndFinished() {
	t := d.t
	msgs := t.held
	t.held = nil
	if len(msgs) == 0 && t.ends != nil && d.pendingStep > 0 {
		d.claim(inbox.NextStep)
		return
	}
	d.afterClaim(msgs)
}
