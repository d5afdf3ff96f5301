package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// PreStepDecision is the pre-step hook's answer: Reject closes the turn
// blocked; otherwise Messages enter the step (the claimed batch, possibly
// rewritten; keep the ids), followed by Entries.
//
// Entries and Preface let a hook contribute what the reference's plugins
// write during a pre-step (docs/replay.md: the log replay re-inserts recorded
// plugin contributions): Entries are recorded inside the step, after
// step/start and the Messages, in order (a plugin-sourced message such as
// the runtime-context snapshot, or a log-only plugin event such as
// session/title); Preface events are recorded at once, before step/start
// (or before turn/end when the decision rejects or enters nothing), as a
// pre-step listener's own appends would be. Their log-only events must be
// of a foreign or unknown type (dsh writes its own core events; an
// unknown type is recorded ignorable); anything else ends the turn in
// error. The slices belong to the agent once returned.
type PreStepDecision struct {
	Reject   bool
	Messages []messages.Message
	Entries  []Entry
	Preface  []session.Draft
}

// Entry is one item of a step's enter batch: a message, recorded as a
// user/message (surface append, verbatim, id kept), or, when Message is
// zero, a log-only event, recorded as is. Build it with MessageEntry or
// EventEntry.
type Entry struct {
	Message messages.Message
	Event   session.Draft
}

// MessageEntry returns the entry of message m.
func MessageEntry(m messages.Message) Entry { return Entry{Message: m} }

// EventEntry returns the entry of the log-only event d.
func EventEntry(d session.Draft) Entry { return Entry{Event: d} }

// logOnlyDraft vets a hook's log-only event: it rebuilds the draft from
// its type and data (so that no surface operation rides along), and
// refuses core types, which dsh writes itself and whose data the session
// would check (a refused append would crash the agent).
func logOnlyDraft(hook string, d session.Draft) (session.Draft, error) {
	t := d.Type()
	switch {
	case t == "":
		return session.Draft{}, fmt.Errorf("agent: %s event without a type", hook)
	case t.IsCore():
		return session.Draft{}, fmt.Errorf("agent: %s event of core type %q", hook, t)
	case t.IsForeign():
		return session.NewDraft(t, d.Data()), nil
	}
	return session.NewDraft(t, d.Data()).AsIgnorable(), nil
}

// enterBatch is a decision's recorded form: the drafts after step/start
// and how many of them are messages.
func enterBatch(dec PreStepDecision) (preface, batch []session.Draft, nmsgs int, err error) {
	for _, d := range dec.Preface {
		v, err := logOnlyDraft("pre-step", d)
		if err != nil {
			return nil, nil, 0, err
		}
		preface = append(preface, v)
	}
	for _, m := range dec.Messages {
		if m.IsZero() || m.Role() != messages.RoleUser {
			return nil, nil, 0, errors.New("agent: pre-step entered a message that is not a user message")
		}
		batch = append(batch, session.UserMessage{Message: m}.Draft())
		nmsgs++
	}
	for _, e := range dec.Entries {
		if !e.Message.IsZero() {
			if e.Message.Role() != messages.RoleUser {
				return nil, nil, 0, errors.New("agent: pre-step entered a message that is not a user message")
			}
			batch = append(batch, session.UserMessage{Message: e.Message}.Draft())
			nmsgs++
			continue
		}
		v, err := logOnlyDraft("pre-step", e.Event)
		if err != nil {
			return nil, nil, 0, err
		}
		batch = append(batch, v)
	}
	return preface, batch, nmsgs, nil
}

// RequestInput is what the request hook sees.
type RequestInput struct {
	Turn, Step int64
	Seed       messages.CallConfig
}

// RequestErrorInput is what the request-error hook sees.
type RequestErrorInput struct {
	Turn, Step int64
	Provider   string
	Failure    messages.LlmFailure
	Attempt    int // 1 for the first call of the step
}

// RequestErrorDecision is the request-error hook's answer.
type RequestErrorDecision uint8

const (
	// DecideDefault applies the retry policy.
	DecideDefault RequestErrorDecision = iota
	// DecideRetry retries now (after the policy's backoff for this retry
	// number, or InitialDelay when the policy would not retry).
	DecideRetry
	// DecideFail ends the turn with the failure.
	DecideFail
	// DecideRetryHeld retries after a backoff that lasts until the turn is
	// cancelled (24 hours): llm/retry is written, llm/retry-started
	// is not. Log replay uses it to reproduce a recording cancelled during
	// a retry's backoff (docs/replay.md).
	DecideRetryHeld
)

// heldRetryDelay is the backoff of DecideRetryHeld: longer than any run
// that means to cancel it.
const heldRetryDelay = 24 * time.Hour

// PreStepInput is what the pre-step hook sees (agent/pre-step).
type PreStepInput struct {
	Turn, Step int64
	// Messages is the claimed batch; the hook owns the slice.
	Messages []messages.Message
	// Snapshot, when not zero, is the runtime-context snapshot
	// (docs/agent-loop.md#runtime-context; Config.RuntimeContext) the default
	// decision enters after Messages. The agent appends it to an entering
	// decision's batch unless the decision already carries it (same id): a
	// hook that wants it elsewhere in the batch puts it there. A rejecting
	// decision drops it, and a decision that enters nothing at the first step
	// does not open a step for it alone; the next pre-step offers it again.
	Snapshot messages.Message
}

// PreStepHook decides what enters a step
// (docs/agent-loop.md#turns-and-steps). It runs in a goroutine owned by the
// agent and may block; ctx is cancelled when the turn is aborted or the agent
// stops. An error ends the turn in error.
type PreStepHook interface {
	PreStep(ctx context.Context, in PreStepInput) (PreStepDecision, error)
}

// TurnStoppingInput is what the turn-stopping hook sees. Steer queues
// steering that forces another step (it reaches the inbox before the
// hook's end is handled).
type TurnStoppingInput struct {
	Turn  int64
	Steer func(messages.Message)
}

// TurnStoppingHook runs when a turn is about to end with nothing owed
// (docs/agent-loop.md#turns-and-steps). It runs in a goroutine owned by the
// agent and may block; ctx is cancelled on abort or stop. An error ends the
// turn in error.
type TurnStoppingHook interface {
	TurnStopping(ctx context.Context, in TurnStoppingInput) error
}

// RequestHook is agent/request: it may replace the call config seed (to
// switch models). It is called synchronously inside the agent's Receive
// and must not block.
type RequestHook interface {
	Request(in RequestInput) (messages.CallConfig, error)
}

// RequestErrorHook is agent/request-error: it decides whether a failed
// call is retried. Called synchronously inside Receive; must not block.
type RequestErrorHook interface {
	RequestError(in RequestErrorInput) (RequestErrorDecision, error)
}

// Hooks are the extension points an embedder registers
// (docs/agent-loop.md#extension-points). Any may be nil. Implementations must
// be safe for concurrent use.
type Hooks struct {
	PreStep      PreStepHook
	TurnStopping TurnStoppingHook
	// StepEnd runs at each step boundary of a turn that goes on; see
	// StepEndHook.
	StepEnd      StepEndHook
	Request      RequestHook
	RequestError RequestErrorHook
	// PreExecute, Approver and PostExecute are the tool pipeline
	// (tools/pre-execute, tools/post-execute); see ToolPreExecuteHook.
	PreExecute  ToolPreExecuteHook
	Approver    ToolApprover
	PostExecute ToolPostExecuteHook
}

// recoverHook turns a hook's panic into its error (deferred by the
// callers of every hook): the turn ends in error, as for a returned
// error, and the agent lives on. A contained panic is better than a
// restart, which interrupts the turn and loses in-flight replies.
func recoverHook(name string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("agent: %s hook panicked: %v", name, r)
	}
}
