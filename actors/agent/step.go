package agent

import (
	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// input is one thing that happened to the agent, fed to driver.Step: an
// answer to an effect (an append acknowledged, a claim answered, a hook
// or tool done, a timer fired), a notice from the session or the inbox,
// or a request of the agent's protocol (Cancel, SetSystem,
// SetRuntimeContext, Dispose). Refs name the effect answered: an input
// whose ref the driver is not waiting for is stale and changes nothing.
type input interface{ isInput() }

// The inputs that answer the driver's own effects and the session's and
// the inbox's notices. The shell builds them from the messages it
// receives (inputOf), or its goroutines and timers send them to it.
type (
	// eventsCommitted: the session committed Events (the agent's subscription),
	// in order and without gaps. A gap is an error.
	eventsCommitted struct{ Events session.Events }
	// inboxPending: the inbox's counts, the answer to a query made at boot.
	inboxPending struct{ NextTurn, NextStep int }
	// inboxChanged: list Target's count changed by Delta (an insert +1,
	// a discard or a claim −1).
	inboxChanged struct {
		Target inbox.Target
		Delta  int
	}
	// woken: a waking send to list Target was committed.
	woken struct{ Target inbox.Target }
	// appended: append Ref (an appendEffect) was committed as Events. An
	// acknowledgement the driver did not ask for is an error.
	appended struct {
		Ref    uint64
		Events session.Events
	}
	// claimed: the inbox answered claim Ref (a claimEffect).
	claimed struct {
		Ref      uint64
		Messages []messages.Message
	}
	// preStepDone: the pre-step hook run Ref (a runPreStepEffect) returned.
	preStepDone struct {
		Ref      uint64
		Decision PreStepDecision
		Err      error
	}
	// turnStoppingDone: the turn-stopping hook run Ref returned.
	turnStoppingDone struct {
		Ref uint64
		Err error
	}
	// stepEndDone: the step-end hook run Ref (a runStepEndEffect) returned.
	stepEndDone struct {
		Ref      uint64
		Decision StepEndDecision
		Err      error
	}
	// stepEndOpDone: the inbox answered step-end operation Ref (an
	// inboxOpEffect), or refused it.
	stepEndOpDone struct{ Ref uint64 }
	// streamChunk: model call Ref (a startStreamEffect) streamed Chunk.
	streamChunk struct {
		Ref   uint64
		Chunk messages.StreamChunk
	}
	// streamEnded: model call Ref ended with Finish; Cancelled when a
	// cancelStreamEffect stopped it.
	streamEnded struct {
		Ref       uint64
		Finish    messages.FinishReason
		Cancelled bool
	}
	// retryTimerFired: the backoff timer Gen (a startTimerEffect) fired.
	retryTimerFired struct{ Gen uint64 }
	// toolEmitted: running tool call Ref asked for Draft to be appended
	// (Call.Emit).
	toolEmitted struct {
		Ref   uint64
		Draft session.Draft
	}
	// toolDone: tool call Ref (a runToolEffect) returned Result.
	toolDone struct {
		Ref    uint64
		Result Result
	}
	// contextPushed: the inbox answered context push Ref (a
	// pushContextEffect): its splice is committed, or the send was refused.
	contextPushed struct{ Ref uint64 }
	// compactRequested: a manual compaction is asked for; its outcome
	// comes back as a compactDoneEffect with Ref.
	compactRequested struct{ Ref uint64 }
	// startMaintenance: a maintenance task asks to run; the answer is a
	// maintenanceEffect.
	startMaintenance struct{}
	// maintenanceDone: the maintenance task returned.
	maintenanceDone struct{}
)

func (eventsCommitted) isInput()   {}
func (inboxPending) isInput()      {}
func (inboxChanged) isInput()      {}
func (woken) isInput()             {}
func (appended) isInput()          {}
func (claimed) isInput()           {}
func (preStepDone) isInput()       {}
func (turnStoppingDone) isInput()  {}
func (stepEndDone) isInput()       {}
func (stepEndOpDone) isInput()     {}
func (streamChunk) isInput()       {}
func (streamEnded) isInput()       {}
func (retryTimerFired) isInput()   {}
func (toolEmitted) isInput()       {}
func (toolDone) isInput()          {}
func (contextPushed) isInput()     {}
func (compactRequested) isInput()  {}
func (startMaintenance) isInput()  {}
func (maintenanceDone) isInput()   {}
func (Cancel) isInput()            {}
func (SetSystem) isInput()         {}
func (SetRuntimeContext) isInput() {}
func (Dispose) isInput()           {}

// Step feeds one input to the driver and returns the effects the shell
// must perform, in order. An error means the agent's view of the log is
// wrong (a gap in the committed events, an acknowledgement of an append
// it did not make), which the driver cannot repair: the shell crashes the
// actor, whose restart rebuilds the driver from the log.
func (d *driver) Step(in input) (effects, error) {
	var err error
	switch in := in.(type) {
	case eventsCommitted:
		err = d.onCommitted(in.Events)
	case inboxPending:
		d.onInboxPending(in.NextTurn, in.NextStep)
	case inboxChanged:
		d.onInboxChanged(in.Target, in.Delta)
	case woken:
		d.onWoken(in.Target)
	case appended:
		err = d.onAppended(in.Ref, in.Events)
	case claimed:
		d.onClaimed(in.Ref, in.Messages)
	case preStepDone:
		d.onPreStepDone(in.Ref, in.Decision, in.Err)
	case turnStoppingDone:
		d.onTurnStoppingDone(in.Ref, in.Err)
	case stepEndDone:
		d.onStepEndDone(in.Ref, in.Decision, in.Err)
	case stepEndOpDone:
		d.onStepEndOpDone(in.Ref)
	case streamChunk:
		return d.stepChunk(in.Ref, in.Chunk)
	case streamEnded:
		d.onStreamEnded(in)
	case retryTimerFired:
		d.onRetryTimerFired(in.Gen)
	case toolEmitted:
		d.onToolEmitted(in.Ref, in.Draft)
	case toolDone:
		d.onToolDone(in.Ref, in.Result)
	case contextPushed:
		d.onContextPushed(in.Ref)
	case compactRequested:
		d.onCompact(in.Ref)
	case startMaintenance:
		d.onStartMaintenance()
	case maintenanceDone:
		d.onMaintenanceDone()
	case Cancel:
		d.onCancel(in)
	case SetSystem:
		d.onSetSystem(in.Prompt)
	case SetRuntimeContext:
		d.onSetRuntimeContext(in.Context)
	case Dispose:
		d.onDispose()
	}
	return d.result(err)
}

// result ends a step: its effects, or none and err.
func (d *driver) result(err error) (effects, error) {
	eff := d.flush()
	if err != nil {
		return nil, err
	}
	return eff, nil
}

// stepChunk is Step(streamChunk{Ref: ref, Chunk: c}), for the shell's
// ChunkReceived: made into an input by inputOf, the chunk was boxed on the
// heap, an allocation per chunk.
func (d *driver) stepChunk(ref uint64, c messages.StreamChunk) (effects, error) {
	d.onStreamChunk(ref, c)
	return d.result(nil)
}
