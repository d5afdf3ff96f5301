package agent

import (
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
	// cancelled (HeldRetryDelay): llm/retry is written, llm/retry-started
	// is not. Log replay uses it to reproduce a recording cancelled during
	// a retry's backoff (docs/replay.md).
	DecideRetryHeld
)

// HeldRetryDelay is the backoff of DecideRetryHeld: longer than any run
// that means to cancel it.
const HeldRetryDelay = 24 * time.Hour
