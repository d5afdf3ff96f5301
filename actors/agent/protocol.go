package agent

import (
	"context"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// The agent actor's protocol. Every message is an immutable value.
// Requests are answered to the sender (RequestFuture at the edges,
// ctx.Request from an actor); Ref is the caller's correlation id, echoed.

// Followup queues Message (a complete message: the agent never mints its id)
// as its own later turn (docs/agent-loop.md#delivery). Reply: Sent or
// SendFailed. When the agent was idle, the turn has started (status running,
// turn/start issued) by the time Sent arrives.
type Followup struct {
	Ref     uint64
	Message messages.Message
}

// Steer queues Message for the next step boundary of the running turn,
// or starts a turn when idle. Reply: Sent or SendFailed.
type Steer struct {
	Ref     uint64
	Message messages.Message
}

// Inject stages Message in next-step without waking the agent: it rides
// with the next waking input. Reply: Sent or SendFailed.
type Inject struct {
	Ref     uint64
	Message messages.Message
}

// Sent acknowledges a committed Followup, Steer or Inject.
type Sent struct {
	Ref uint64
	ID  messages.MessageID
}

// SendFailed refuses a Followup, Steer or Inject (inbox.ErrInboxFull,
// inbox.ErrDuplicateID, ...); nothing changed.
type SendFailed struct {
	Ref uint64
	Err error
}

// Cancel aborts the running turn with Cause (the first cause wins) and,
// unless KeepInbox, cancels everything pending in the inbox
// (docs/agent-loop.md#cancellation). A no-op on an idle agent, except for the
// inbox. No reply: follow it with WaitIdle.
type Cancel struct {
	Cause     session.CancelCause
	KeepInbox bool
}

// WaitIdle asks to be told when the agent is idle: no turn running,
// nothing latched, no append in flight. Reply: Idle, at once if idle.
type WaitIdle struct{ Ref uint64 }

// Idle answers WaitIdle.
type Idle struct{ Ref uint64 }

// StatusChanged tells Config.Observer the status changed.
type StatusChanged struct{ Status Status }

// TurnFailed tells Config.Observer a turn ended in error (agent/error).
type TurnFailed struct {
	Turn, Step int64
	Error      messages.LlmFailure
}

// SetSystem replaces the system prompt (Config.System) from the next step
// on. A real change is logged as a request/header {change} snapshot by
// the next request; setting the same prompt logs nothing. No reply:
// messages from one sender are handled in order, so a Followup sent after
// it runs under the new prompt.
type SetSystem struct{ Prompt string }

// SetRuntimeContext replaces the runtime context (Config.RuntimeContext)
// from the next pre-step on, and turns the snapshot on even when Context
// is empty: the first step after it enters a snapshot of the new context
// if its text differs from the last snapshot on the surface, or, when
// every section is gone, a text saying that no runtime context applies
// any more, once. No reply; handled in
// order with the sender's other messages, as SetSystem is.
type SetRuntimeContext struct{ Context RuntimeContext }

// Dispose ends the agent's activity for good
// (docs/agent-loop.md#cancellation): the running turn, if any, is aborted
// with cause disposed (turn/end {aborted, disposed}, balanced), a latched
// wake is dropped, the inbox is kept (pending input stays durable for a later
// agent), and from then on no turn starts and every Followup, Steer or Inject
// is refused with ErrDisposed. Reply: Disposed, once the activity has
// converged to idle. The caller then stops the actor.
type Dispose struct{ Ref uint64 }

// Disposed answers Dispose.
type Disposed struct{ Ref uint64 }

// Compact asks for a manual compaction between turns (the /compact command,
// docs/agent-loop.md#compaction): the bracket compaction/start {turn: null} …
// compaction/end. Reply: Compacted, once the bracket is committed (at once
// when the agent is busy or there is nothing to compact). A turn woken
// meanwhile starts after it.
type Compact struct{ Ref uint64 }

// Compacted answers Compact. Error is compaction/end's error for
// CompactFailed, or why nothing was done.
type Compacted struct {
	Ref          uint64
	Outcome      CompactOutcome
	CompactionID string
	Error        string
}

// RunMaintenance runs Task on the idle agent (docs/agent-loop.md#the-agent).
// It is refused with ErrNotIdle unless the agent is idle (no turn, no
// compaction, nothing latched or in flight, not disposed). The status
// stays idle during the task; a waking input that arrives meanwhile is
// latched and replays when the task finishes; Cancel (and Dispose)
// cancels the task's ctx. Task runs in a goroutine owned by the agent and
// must honour ctx. Reply: MaintenanceDone, once the task has returned (a
// latched turn has then started).
type RunMaintenance struct {
	Ref  uint64
	Task func(ctx context.Context) error
}

// MaintenanceDone answers RunMaintenance: Err is ErrNotIdle for a refused
// task, otherwise the task's error (a task that panicked: an error naming
// the panic's value).
type MaintenanceDone struct {
	Ref uint64
	Err error
}
