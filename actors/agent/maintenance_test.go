package agent

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
)

// A maintenance task is refused while a turn runs.
func TestMaintenanceIsRefusedUnlessIdle(t *testing.T) {
	h := newHarness(t, newMock(entry{hang: true}), nil)
	h.followup("a")
	h.waitStarted()
	ran := false
	r := h.ask(RunMaintenance{Ref: 7, Task: func(context.Context) error { ran = true; return nil }})
	require.Equal(t, MaintenanceDone{Ref: 7, Err: ErrNotIdle}, r)
	h.cancel(session.CauseUser)
	h.waitIdle()
	require.False(t, ran)

	// Idle again: it runs and is answered with the task's error.
	boom := errors.New("boom")
	r = h.ask(RunMaintenance{Ref: 8, Task: func(context.Context) error { return boom }})
	require.Equal(t, MaintenanceDone{Ref: 8, Err: boom}, r)
	h.waitIdle()
}

// The status stays idle during the task; a followup that arrives during it
// is latched and its turn runs when the task finishes; Compact and a second
// task are busy meanwhile.
func TestMaintenanceLatchesAWakeAndReplaysIt(t *testing.T) {
	o := &observer{ch: make(chan Status, 16)}
	h := newHarness(t, newMock(textResponse("hello")), nil, withObserver(t, o))
	started, release := make(chan struct{}), make(chan struct{})
	fut := h.sys.Root.RequestFuture(h.agent, RunMaintenance{Ref: 1, Task: func(ctx context.Context) error {
		close(started)
		<-release
		return nil
	}}, waitFor)
	<-started
	h.followup("during")
	require.Empty(t, ofType(h.events(), session.TypeTurnStart), "no turn while the task runs")
	h.refs++
	require.Equal(t, CompactBusy, h.ask(Compact{Ref: h.refs}).(Compacted).Outcome)
	require.Equal(t, MaintenanceDone{Ref: 2, Err: ErrNotIdle},
		h.ask(RunMaintenance{Ref: 2, Task: func(context.Context) error { return nil }}))
	select {
	case s := <-o.ch:
		t.Fatalf("status changed to %v during maintenance", s)
	default:
	}
	close(release)
	r, err := fut.Result()
	require.NoError(t, err)
	require.Equal(t, MaintenanceDone{Ref: 1}, r)
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es))
	require.Equal(t, []Status{StatusRunning, StatusIdle}, o.statuses(2))
}

// Cancel aborts the task's context, clears the inbox and drops the latched
// wake: no turn follows. Dispose aborts it too.
func TestCancelAbortsAMaintenanceTask(t *testing.T) {
	h := newHarness(t, newMock(), nil)
	started := make(chan struct{})
	task := func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}
	fut := h.sys.Root.RequestFuture(h.agent, RunMaintenance{Ref: 1, Task: task}, waitFor)
	<-started
	h.followup("dropped")
	h.cancel(session.CauseUser)
	r, err := fut.Result()
	require.NoError(t, err)
	require.Equal(t, MaintenanceDone{Ref: 1, Err: context.Canceled}, r)
	h.waitIdle()
	require.Empty(t, ofType(h.events(), session.TypeTurnStart))

	// Keep-inbox cancel: the latched followup replays after the task.
	started = make(chan struct{})
	fut = h.sys.Root.RequestFuture(h.agent, RunMaintenance{Ref: 2, Task: task}, waitFor)
	<-started
	h.followup("kept")
	h.sys.Root.Send(h.agent, Cancel{Cause: session.CancelCause{Kind: session.CauseUser}, KeepInbox: true})
	r, err = fut.Result()
	require.NoError(t, err)
	require.Equal(t, MaintenanceDone{Ref: 2, Err: context.Canceled}, r)
	h.waitIdle()
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(h.events()))

	// Dispose aborts a running task and is answered once it returned.
	started = make(chan struct{})
	fut = h.sys.Root.RequestFuture(h.agent, RunMaintenance{Ref: 3, Task: task}, waitFor)
	<-started
	require.Equal(t, Disposed{Ref: 9}, h.ask(Dispose{Ref: 9}))
	r, err = fut.Result()
	require.NoError(t, err)
	require.Equal(t, MaintenanceDone{Ref: 3, Err: context.Canceled}, r)
	require.Equal(t, MaintenanceDone{Ref: 4, Err: ErrNotIdle},
		h.ask(RunMaintenance{Ref: 4, Task: func(context.Context) error { return nil }}))
}

// A panicking task is contained like a hook's panic: the requester gets
// an error that names the panic (without the stack, which is logged at
// error level), the agent stays idle and healthy, a followup latched
// during the task starts its turn, and the next followup runs a turn.
func TestMaintenancePanicIsContained(t *testing.T) {
	h := newHarness(t, newMock(textResponse("latched"), textResponse("next")), nil)
	started, release := make(chan struct{}), make(chan struct{})
	fut := h.sys.Root.RequestFuture(h.agent, RunMaintenance{Ref: 1, Task: func(context.Context) error {
		close(started)
		<-release
		panic("task exploded")
	}}, waitFor)
	<-started
	h.followup("during")
	close(release)
	r, err := fut.Result()
	require.NoError(t, err)
	done := r.(MaintenanceDone)
	require.Equal(t, uint64(1), done.Ref)
	require.EqualError(t, done.Err, "agent: maintenance task panicked: task exploded")
	h.waitIdle()
	es := h.events()
	balanced(t, es)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}}, turnEnds(es), "the latched followup ran")

	logged := h.logs.errors()
	require.Len(t, logged, 1)
	require.Contains(t, logged[0], "maintenance task panicked")
	require.Contains(t, logged[0], "task exploded")
	require.Contains(t, logged[0], "runMaintenanceTask", "the stack is logged")

	// Idle and healthy: another task runs, and so does the next turn.
	require.Equal(t, MaintenanceDone{Ref: 2},
		h.ask(RunMaintenance{Ref: 2, Task: func(context.Context) error { return nil }}))
	h.followup("after")
	h.waitIdle()
	es = h.events()
	balanced(t, es)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndCompleted}, {Kind: session.EndCompleted}}, turnEnds(es))
	require.Equal(t, "next", texts(derive(es)[len(derive(es))-1]))
}
