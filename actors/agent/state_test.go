package agent

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// Core tests: the driver alone, with no actor. A rig plays the session
// (appends go to a session.Log and are acknowledged in issue order, after
// the input that issued them) and the inbox (a scripted next-turn list);
// the test feeds stream chunks, timers and cancels. Each case reads as
// inputs in, effects out.

type rig struct {
	t      *testing.T
	d      *driver
	l      *session.Log
	turn   []messages.Message // next-turn list
	step   []messages.Message // next-step list
	acks   []appendEffect     // issued, not acknowledged
	stream uint64             // the running call, 0 for none
	timer  uint64             // the armed timer generation, 0 for none
	out    []string           // the transcript of effects
	tools  []runToolEffect    // tool calls started
	held   []uint64           // unanswered context pushes (holdPushes)
	hold   bool               // holdPushes: do not answer context pushes

	stepEnds []runStepEndEffect // step-end hook runs, answered by the test
}

func newRig(t *testing.T, cfg driverConfig) *rig {
	l, err := session.New(testHeader())
	require.NoError(t, err)
	if cfg.Provider == "" {
		cfg.Provider, cfg.Model = "mock", "mock-1"
	}
	d, err := newDriver(cfg, testHeader(), nil)
	require.NoError(t, err)
	return &rig{t: t, d: d, l: l}
}

// input feeds in to the driver, which must not fail, and returns the
// effects.
func (r *rig) input(in input) effects {
	r.t.Helper()
	eff, err := r.d.Step(in)
	require.NoError(r.t, err)
	return eff
}

// run performs eff, then acknowledges appends until none is in flight.
func (r *rig) run(eff effects) {
	r.t.Helper()
	r.perform(eff)
	for len(r.acks) > 0 {
		a := r.acks[0]
		r.acks = r.acks[1:]
		start := r.l.Len()
		for _, dr := range a.Drafts {
			_, err := r.l.Append(dr, 1)
			require.NoError(r.t, err)
		}
		evs := r.l.EventsFrom(start)
		r.input(eventsCommitted{Events: evs})
		r.perform(r.input(appended{Ref: a.Ref, Events: evs}))
	}
}

func (r *rig) perform(eff effects) {
	for _, e := range eff {
		if ce, ok := e.(chunkAppendEffect); ok {
			e = *ce.appendEffect
		}
		switch e := e.(type) {
		case appendEffect:
			r.acks = append(r.acks, e)
			var ts []string
			for _, dr := range e.Drafts {
				ts = append(ts, string(dr.Type()))
			}
			r.out = append(r.out, "append "+strings.Join(ts, ","))
		case claimEffect:
			var got []messages.Message
			got, r.step = r.step, nil
			if e.Target == inbox.NextTurn && len(r.turn) > 0 {
				got, r.turn = append(got, r.turn[0]), r.turn[1:]
			}
			for range got {
				r.input(inboxChanged{Target: e.Target, Delta: -1})
			}
			r.out = append(r.out, fmt.Sprintf("claim %s %d", e.Target, len(got)))
			r.perform(r.input(claimed{Ref: e.Ref, Messages: got}))
		case startStreamEffect:
			r.stream = e.Ref
			r.out = append(r.out, "stream "+e.Request.Config().Model)
		case cancelStreamEffect:
			r.out = append(r.out, "cancel-stream")
		case startTimerEffect:
			r.timer = e.Gen
			r.out = append(r.out, "timer")
		case statusEffect:
			r.out = append(r.out, "status "+e.Status.String())
		case abortEffect:
			r.out = append(r.out, "abort "+string(e.Cause.Kind))
		case newSignalEffect:
			r.out = append(r.out, "signal")
		case turnErrorEffect:
			r.out = append(r.out, "turn-error "+e.Error.Code)
		case pushContextEffect:
			r.step = append(r.step, e.Message)
			r.input(inboxChanged{Target: inbox.NextStep, Delta: 1})
			r.out = append(r.out, "push")
			if r.hold {
				r.held = append(r.held, e.Ref)
				continue
			}
			r.perform(r.input(contextPushed{Ref: e.Ref}))
		case runToolEffect:
			r.tools = append(r.tools, e)
			r.out = append(r.out, "tool "+e.Call.ID)
		case runStepEndEffect:
			r.stepEnds = append(r.stepEnds, e)
			r.out = append(r.out, fmt.Sprintf("step-end %d.%d", e.Turn, e.Step))
		case inboxOpEffect:
			op := e.Op
			switch s, ok := op.send(); {
			case ok && s.Target == inbox.NextTurn:
				r.turn = append(r.turn, s.Message)
				r.input(inboxChanged{Target: inbox.NextTurn, Delta: 1})
			case ok:
				r.step = append(r.step, s.Message)
				r.input(inboxChanged{Target: inbox.NextStep, Delta: 1})
			default:
				n := len(r.step)
				r.step = slices.DeleteFunc(r.step, func(m messages.Message) bool { return m.ID() == op.id })
				if len(r.step) < n {
					r.input(inboxChanged{Target: inbox.NextStep, Delta: -1})
				}
			}
			r.out = append(r.out, "inbox-op "+opNames[op.kind])
			r.perform(r.input(stepEndOpDone{Ref: e.Ref}))
		case clearInboxEffect:
			r.turn, r.step = nil, nil
			r.input(inboxPending{NextTurn: 0, NextStep: 0})
			r.out = append(r.out, "clear-inbox")
		default:
			r.out = append(r.out, fmt.Sprintf("%T", e))
		}
	}
}

// followup queues a prompt and wakes the driver, as the inbox would.
func (r *rig) followup(text string) {
	r.turn = append(r.turn, user(r.t, text))
	r.input(inboxChanged{Target: inbox.NextTurn, Delta: 1})
	r.run(r.input(woken{Target: inbox.NextTurn}))
}

// chunks streams cs on the running call.
func (r *rig) chunks(cs ...messages.StreamChunk) {
	for _, c := range cs {
		r.run(r.input(streamChunk{Ref: r.stream, Chunk: c}))
	}
}

func (r *rig) end(k messages.FinishKind, f messages.LlmFailure, cancelled bool) {
	ref := r.stream
	r.stream = 0
	r.run(r.input(streamEnded{Ref: ref, Finish: messages.FinishReason{Kind: k, Failure: f}, Cancelled: cancelled}))
}

func (r *rig) logTypes() []string {
	var out []string
	prev := ""
	for _, e := range r.l.Events().Slice() {
		s := string(e.Type())
		if s == string(session.TypeAssistantChunk) && prev == s {
			continue // runs of chunks read as one
		}
		prev = s
		out = append(out, s)
	}
	return out
}

// Turns driven by hand on the rig's acknowledgements. The cases that read
// as inputs in, effects out are transcripts (testdata/driver,
// TestDriverTranscripts).
func TestDriverTurns(t *testing.T) {
	text := textResponse("hi").chunks
	body, finish := text[:len(text)-1], messages.FinishStop
	for _, tt := range []struct {
		name    string
		cfg     driverConfig
		drive   func(r *rig)
		effects []string
		log     []string
		ends    []session.TurnEndReason
	}{{
		// A cancel that lands while turn/end is being committed stops the
		// continuation even though the inbox counts still show work: the
		// clear will remove it.
		name: "a cancel during turn/end does not start a spurious turn",
		drive: func(r *rig) {
			r.turn = append(r.turn, user(r.t, "queued"))
			r.input(inboxChanged{Target: inbox.NextTurn, Delta: 1})
			r.followup("a") // queued is claimed first
			r.chunks(body...)
			ref := r.stream
			r.perform(r.input(streamEnded{Ref: ref, Finish: messages.FinishReason{Kind: finish}}))
			// Acknowledge up to turn/end, then cancel before its ack.
			for len(r.acks) > 0 {
				a := r.acks[0]
				if a.Drafts[0].Type() == session.TypeTurnEnd {
					r.perform(r.input(Cancel{Cause: session.CancelCause{Kind: session.CauseUser}, KeepInbox: false}))
					r.input(inboxPending{NextTurn: 1, NextStep: 0}) // the clear's notices are still on their way
				}
				r.acks = r.acks[1:]
				start := r.l.Len()
				for _, dr := range a.Drafts {
					_, err := r.l.Append(dr, 1)
					require.NoError(r.t, err)
				}
				evs := r.l.EventsFrom(start)
				r.input(eventsCommitted{Events: evs})
				r.perform(r.input(appended{Ref: a.Ref, Events: evs}))
			}
		},
		ends: []session.TurnEndReason{{Kind: session.EndCompleted}},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, tt.cfg)
			tt.drive(r)
			if tt.effects != nil {
				require.Equal(t, tt.effects, r.out)
			}
			if tt.log != nil {
				require.Equal(t, tt.log, r.logTypes())
			}
			es := r.l.Events().Slice()
			require.NoError(t, session.CheckTrace(es))
			require.Equal(t, tt.ends, turnEnds(es))
			require.True(t, r.d.Idle())
			require.Equal(t, StatusIdle, r.d.Status())
		})
	}
}

func TestDriverDisposeIsFinal(t *testing.T) {
	r := newRig(t, driverConfig{})
	r.followup("a")
	r.run(r.input(Dispose{}))
	require.Equal(t, "cancel-stream", r.out[len(r.out)-1])
	r.end(messages.FinishAborted, messages.LlmFailure{}, true)
	require.Equal(t, []session.TurnEndReason{{Kind: session.EndAborted,
		Cause: session.CancelCause{Kind: session.CauseDisposed}}}, turnEnds(r.l.Events().Slice()))
	n := len(r.out)
	r.followup("b")
	require.Len(t, r.out, n, "a disposed driver starts nothing")
	require.True(t, r.d.Idle())
}

func TestDriverSendTarget(t *testing.T) {
	r := newRig(t, driverConfig{})
	require.Equal(t, inbox.NextStep, r.d.SendTarget(inbox.Send{Target: inbox.NextStep, Wake: true}))
	r.followup("a")
	require.Equal(t, inbox.NextStep, r.d.SendTarget(inbox.Send{Target: inbox.NextStep, Wake: true}))
	r.run(r.input(Cancel{Cause: session.CancelCause{Kind: session.CauseUser}, KeepInbox: true}))
	require.Equal(t, inbox.NextTurn, r.d.SendTarget(inbox.Send{Target: inbox.NextStep, Wake: true}), "a wake after the abort")
	require.Equal(t, inbox.NextStep, r.d.SendTarget(inbox.Send{Target: inbox.NextStep}), "an inject is not a wake")
}

// The core starts a second tool step's calls, and holds step/end until
// the inbox has answered every context push.
func TestDriverToolStepsAndContextPushes(t *testing.T) {
	r := newRig(t, driverConfig{})
	r.hold = true
	r.followup("go")
	r.chunks(toolCallResponse(tc{"c1", "echo", `{}`}).chunks...)
	r.end(messages.FinishToolCalls, messages.LlmFailure{}, false)
	require.Len(t, r.tools, 1)
	note := user(t, "note")
	r.run(r.input(toolDone{Ref: r.tools[0].Ref, Result: Result{AdditionalContexts: []messages.Message{note}}}))
	require.Len(t, r.held, 1)
	require.Equal(t, "tool/result", r.logTypes()[len(r.logTypes())-1], "step/end waits for the push")
	r.run(r.input(contextPushed{Ref: r.held[0] + 1000})) // a stale answer changes nothing
	require.Equal(t, "tool/result", r.logTypes()[len(r.logTypes())-1])
	r.run(r.input(contextPushed{Ref: r.held[0]}))
	// Step 2 entered the note and calls a tool again.
	r.chunks(toolCallResponse(tc{"c2", "echo", `{}`}).chunks...)
	r.end(messages.FinishToolCalls, messages.LlmFailure{}, false)
	require.Len(t, r.tools, 2)
	require.Equal(t, "c2", r.tools[1].Call.ID)
	require.Equal(t, int64(2), r.tools[1].Call.Step)
	r.run(r.input(toolDone{Ref: r.tools[1].Ref, Result: Result{}}))
	r.chunks(textResponse("done").chunks...)
	r.end(messages.FinishStop, messages.LlmFailure{}, false)
	require.Equal(t, []string{"turn/start", "step/start", "user/message", "request/header", "request/context",
		"assistant/chunk", "assistant/message", "tool/call", "tool/result", "step/end",
		"step/start", "user/message", "assistant/chunk", "assistant/message", "tool/call", "tool/result", "step/end",
		"step/start", "assistant/chunk", "assistant/message", "step/end", "turn/end"}, r.logTypes())
	require.Equal(t, StatusIdle, r.d.Status())
}
