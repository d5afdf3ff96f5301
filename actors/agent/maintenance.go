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

// maintenanceEffect answers a maintenance task's request to run: Err is
// nil when it may run, under the fresh abort signal of the newSignalEffect
// before it (a Cancel aborts it; its end comes back as maintenanceDone),
// or ErrNotIdle.
type maintenanceEffect struct{ Err error }

func (maintenanceEffect) isEffect() {}

// onStartMaintenance begins a maintenance task, unless the agent is not
// idle or is disposed (ErrNotIdle).
func (d *driver) onStartMaintenance() {
	if d.disposed || !d.Idle() || d.t != nil || d.cmp != nil {
		d.emit(maintenanceEffect{Err: ErrNotIdle})
		return
	}
	d.maintenance = true
	d.emit(newSignalEffect{})
	d.emit(maintenanceEffect{})
}

// Maintaining reports whether a maintenance task runs.
func (d *driver) Maintaining() bool { return d.maintenance }

// onMaintenanceDone ends the maintenance task. A wake latched during it
// replays now: a turn starts if input is pending.
func (d *driver) onMaintenanceDone() {
	if !d.maintenance {
		return
	}
	d.maintenance = false
	next := d.wakeRequested && !d.disposed && d.pendingTurn+d.pendingStep > 0
	d.wakeRequested = false
	if next {
		d.startTurn()
	}
}

// maintReq is a RunMaintenance with its sender (kept when buffered).
type maintReq struct {
	RunMaintenance
	from *actor.PID
}

// startMaintenance asks the driver whether a maintenance task may run
// (runMaintenance has the answer).
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
	a.maintAsk = &m
	a.step(ctx, startMaintenance{})
}

// runMaintenance answers the maintenance request the driver was asked
// about (a maintenanceEffect): it refuses it with err, or runs its task
// under the abort signal.
func (a *agentActor) runMaintenance(ctx actor.Context, err error) {
	m := a.maintAsk
	a.maintAsk = nil
	if m == nil {
		return
	}
	if err != nil {
		if m.from != nil {
			ctx.Send(m.from, MaintenanceDone{Ref: m.Ref, Err: err})
		}
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
