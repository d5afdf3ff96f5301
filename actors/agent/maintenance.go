package agent

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/asynkron/protoactor-go/actor"
)

// Maintenance tasks (docs/agent-loop.md#the-agent): work an embedder runs on
// an idle agent, under the agent's cancellation, without a turn. The
// status stays idle during the task; a waking input that arrives meanwhile
// is latched and replays when the task finishes; Cancel (and Dispose)
// aborts the task's context (without KeepInbox, Cancel also clears the
// inbox and drops the latched wake).

// ErrNotIdle refuses a maintenance task: a turn, a compaction, an append
// or a latched wake is in flight, another task runs, or the agent is
// disposed.
var ErrNotIdle = errors.New("agent: not idle")

// StartMaintenance begins a maintenance task. It is refused (ErrNotIdle)
// unless the agent is idle and not disposed. On success the effects hold
// a NewSignalEffect: the shell runs the task under the fresh signal, which
// a Cancel aborts, and reports its end with MaintenanceDone.
func (d *Driver) StartMaintenance() (Effects, error) {
	if d.disposed || !d.Idle() || d.t != nil || d.cmp != nil {
		return d.flush(), ErrNotIdle
	}
	d.maintenance = true
	d.emit(NewSignalEffect{})
	return d.flush(), nil
}

// Maintaining reports whether a maintenance task runs.
func (d *Driver) Maintaining() bool { return d.maintenance }

// MaintenanceDone ends the maintenance task. A wake latched during it
// replays now: a turn starts if input is pending.
func (d *Driver) MaintenanceDone() Effects {
	if !d.maintenance {
		return d.flush()
	}
	d.maintenance = false
	next := d.wakeRequested && !d.disposed && d.pendingTurn+d.pendingStep > 0
	d.wakeRequested = false
	if next {
		d.startTurn()
	}
	return d.flush()
}

// maintReq is a RunMaintenance with its sender (kept when buffered).
type maintReq struct {
	RunMaintenance
	from *actor.PID
}

// startMaintenance runs a maintenance task under a fresh abort signal, or
// refuses it.
func (a *agentActor) startMaintenance(ctx actor.Context, m maintReq) {
	reply := func(err error) {
		if m.from != nil {
			ctx.Send(m.from, MaintenanceDone{Ref: m.Ref, Err: err})
		}
	}
	if m.Task == nil {
		reply(errors.New("agent: maintenance without a task"))
		return
	}
	eff, err := a.d.StartMaintenance()
	a.perform(ctx, eff)
	if err != nil {
		reply(err)
		return
	}
	a.maint = &caller{pid: m.from, ref: m.Ref}
	root, self, sig, task, epoch := a.root, a.self, a.abortSignal(), m.Task, a.epoch
	a.wg.Go(func() {
		stack, err := runMaintenanceTask(sig, task)
		root.Send(self, maintDone{epoch: epoch, err: err, stack: stack})
	})
}

// runMaintenanceTask runs task, turning a panic into its error (as a
// hook's panic is, see recoverHook): the goroutine is the agent's, so an
// escaped panic would take the whole process down, not just the task.
// The stack stays out of the error, which reaches the requester; the
// shell logs it.
func runMaintenanceTask(ctx context.Context, task func(context.Context) error) (stack []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			stack, err = debug.Stack(), fmt.Errorf("agent: maintenance task panicked: %v", r)
		}
	}()
	return nil, task(ctx)
}
