package agent

import (
	"time"

	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// effect is one thing the shell must do. The concrete types are below.
type effect interface{ isEffect() }

// effects is the ordered list an input produced.
type effects []effect

// appendEffect appends Drafts to the session log, atomically, in order.
type appendEffect struct {
	Ref    uint64
	Drafts []session.Draft
}

// chunkAppendEffect is the appendEffect of one streamed chunk, made in
// the driver's block of them (driver.chunkEffs) and never written again.
// A pointer-shaped value: an effect list holds it without an allocation.
type chunkAppendEffect struct{ *appendEffect }

// claimEffect claims inbox input for turn Turn.
type claimEffect struct {
	Ref    uint64
	Target inbox.Target
	Turn   int64
}

// clearInboxEffect cancels everything pending in the inbox.
type clearInboxEffect struct{}

// pushContextEffect appends Message to the inbox's next-step list with
// loop origin (a tool's additional context). The inbox's answer (the
// splice committed, or the send refused) comes back as contextPushed{Ref}:
// the core waits for it before it commits anything else of the step, so
// that the splice follows its tool/result and precedes the next result
// and step/end (docs/agent-loop.md#tool-calls).
type pushContextEffect struct {
	Ref     uint64
	Message messages.Message
}

// startStreamEffect starts model call Ref.
type startStreamEffect struct {
	Ref     uint64
	Request llm.Request
}

// cancelStreamEffect cancels model call Ref.
type cancelStreamEffect struct{ Ref uint64 }

// runToolEffect runs a tool call; its result comes back as toolDone{Ref}.
type runToolEffect struct {
	Ref  uint64
	Call Call
}

// runPreStepEffect runs the pre-step hook; the decision comes back as
// preStepDone{Ref}. Snapshot, when not zero, is the runtime-context
// snapshot the default decision enters (see PreStepInput).
type runPreStepEffect struct {
	Ref      uint64
	Turn     int64
	Step     int64
	Messages []messages.Message
	Snapshot messages.Message
}

// runTurnStoppingEffect runs the turn-stopping hook; it comes back as
// turnStoppingDone{Ref}.
type runTurnStoppingEffect struct {
	Ref  uint64
	Turn int64
}

// startTimerEffect arms the retry backoff timer; it fires as
// retryTimerFired{Gen}.
type startTimerEffect struct {
	Gen   uint64
	Delay time.Duration
}

// newSignalEffect: a turn starts; the shell makes a fresh abort signal
// (the context its hooks and tools run under).
type newSignalEffect struct{}

// abortEffect: the turn was cancelled with Cause; the shell cancels the
// signal (in-flight hooks and tool bodies).
type abortEffect struct{ Cause session.CancelCause }

// statusEffect reports a status change.
type statusEffect struct{ Status Status }

// turnErrorEffect reports a turn that ended in error (agent/error).
type turnErrorEffect struct {
	Turn, Step int64
	Error      messages.LlmFailure
}

func (appendEffect) isEffect()          {}
func (chunkAppendEffect) isEffect()     {}
func (claimEffect) isEffect()           {}
func (clearInboxEffect) isEffect()      {}
func (pushContextEffect) isEffect()     {}
func (startStreamEffect) isEffect()     {}
func (cancelStreamEffect) isEffect()    {}
func (runToolEffect) isEffect()         {}
func (runPreStepEffect) isEffect()      {}
func (runTurnStoppingEffect) isEffect() {}
func (startTimerEffect) isEffect()      {}
func (newSignalEffect) isEffect()       {}
func (abortEffect) isEffect()           {}
func (statusEffect) isEffect()          {}
func (turnErrorEffect) isEffect()       {}
