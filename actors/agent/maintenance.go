package agent

import "errors"

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
