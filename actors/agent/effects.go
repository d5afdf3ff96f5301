package agent

import (
	"time"

	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// Effect is one thing the shell must do. The concrete types are below.
type Effect interface{ effect() }

// Effects is the ordered list an input produced.
type Effects []Effect

// AppendEffect appends Drafts to the session log, atomically, in order.
type AppendEffect struct {
	Ref    uint64
	Drafts []session.Draft
}

// ClaimEffect claims inbox input for turn Turn.
type ClaimEffect struct {
	Ref    uint64
	Target inbox.Target
	Turn   int64
}

// ClearInboxEffect cancels everything pending in the inbox.
type ClearInboxEffect struct{}

// PushContextEffect appends Message to the inbox's next-step list with
// loop origin (a tool's additional context). The inbox's answer (the
// splice committed, or the send refused) comes back as contextPushed{Ref}:
// the core waits for it before it commits anything else of the step, so
// that the splice follows its tool/result and precedes the next result
// and step/end (docs/agent-loop.md#tool-calls).
type PushContextEffect struct {
	Ref     uint64
	Message messages.Message
}

// StartStreamEffect starts model call Ref.
type StartStreamEffect struct {
	Ref     uint64
	Request llm.Request
}

// CancelStreamEffect cancels model call Ref.
type CancelStreamEffect struct{ Ref uint64 }

// RunToolEffect runs a tool call; its result comes back as toolDone{Ref}.
type RunToolEffect struct {
	Ref  uint64
	Call Call
}

// RunPreStepEffect runs the pre-step hook; the decision comes back as
// preStepDone{Ref}. Snapshot, when not zero, is the runtime-context
// snapshot the default decision enters (see PreStepInput).
type RunPreStepEffect struct {
	Ref      uint64
	Turn     int64
	Step     int64
	Messages []messages.Message
	Snapshot messages.Message
}

// RunTurnStoppingEffect runs the turn-stopping hook; it comes back as
// turnStoppingDone{Ref}.
type RunTurnStoppingEffect struct {
	Ref  uint64
	Turn int64
}

// StartTimerEffect arms the retry backoff timer; it fires as
// retryTimerFired{Gen}.
type StartTimerEffect struct {
	Gen   uint64
	Delay time.Duration
}

// NewSignalEffect: a turn starts; the shell makes a fresh abort signal
// (the context its hooks and tools run under).
type NewSignalEffect struct{}

// AbortEffect: the turn was cancelled with Cause; the shell cancels the
// signal (in-flight hooks and tool bodies).
type AbortEffect struct{ Cause session.CancelCause }

// StatusEffect reports a status change.
type StatusEffect struct{ Status Status }

// TurnErrorEffect reports a turn that ended in error (agent/error).
type TurnErrorEffect struct {
	Turn, Step int64
	Error      messages.LlmFailure
}

func (AppendEffect) effect()          {}
func (ClaimEffect) effect()           {}
func (ClearInboxEffect) effect()      {}
func (PushContextEffect) effect()     {}
func (StartStreamEffect) effect()     {}
func (CancelStreamEffect) effect()    {}
func (RunToolEffect) effect()         {}
func (RunPreStepEffect) effect()      {}
func (RunTurnStoppingEffect) effect() {}
func (StartTimerEffect) effect()      {}
func (NewSignalEffect) effect()       {}
func (AbortEffect) effect()           {}
func (StatusEffect) effect()          {}
func (TurnErrorEffect) effect()       {}
