package agent

import (
	"fmt"
	"slices"
	"time"

	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/invariants"
	"github.com/dshgo/dsh/messages"
)

// ---- the turn (docs/agent-loop.md#turns-and-steps) ----------------------

func abortedReason(c session.CancelCause) session.TurnEndReason {
	return session.TurnEndReason{Kind: session.EndAborted, Cause: c}
}

func (d *driver) startTurn() {
	d.lastTurn++
	d.t = &turnState{turn: d.lastTurn, firstClaim: true}
	d.wakeRequested = false
	d.setStatus(StatusRunning)
	d.emit(newSignalEffect{})
	d.appendDrafts(appendTag{}, session.TurnStart{Turn: d.t.turn}.Draft())
	// The claim's splice must follow turn/start in the log: the inbox
	// appends it, so the turn/start must be committed first.
	d.settle(func() {
		if d.t.aborted {
			d.endTurn(abortedReason(d.t.cause))
			return
		}
		d.claim(inbox.NextTurn)
	})
}

func (d *driver) claim(target inbox.Target) {
	d.phase = phClaim
	d.claimRef = d.ref()
	d.emit(claimEffect{Ref: d.claimRef, Target: target, Turn: d.t.turn})
}

// enter is the step boundary's entry (docs/agent-loop.md#turns-and-steps):
// break, complete empty, or open a step. preface is recorded first in every
// case; batch (nmsgs of which are messages) opens the step, or, when it holds
// no message, is recorded with the preface (its log-only events are not
// lost).
func (d *driver) enter(preface, batch []session.Draft, nmsgs int) {
	t := d.t
	if nmsgs == 0 {
		preface = append(preface, batch...)
	}
	if len(preface) > 0 {
		d.appendDrafts(appendTag{}, preface...)
	}
	switch {
	case t.ends != nil && nmsgs == 0:
		if d.cfg.TurnStopping && !t.stoppingRan {
			d.phase = phTurnStopping
			d.hookRef = d.ref()
			d.emit(runTurnStoppingEffect{Ref: d.hookRef, Turn: t.turn})
			return
		}
		d.endTurn(*t.ends)
		return
	case t.step == 0 && nmsgs == 0:
		t.stopAfter = true
		d.endTurn(session.TurnEndReason{Kind: session.EndCompleted})
		return
	}
	t.step++
	t.stoppingRan, t.stepEndRan = false, false
	t.retries = nil
	t.attempt = 0
	t.overflows = 0
	t.system = d.system
	drafts := append([]session.Draft{session.StepStart{Turn: t.turn, Step: t.step}.Draft()}, batch...)
	d.appendDrafts(appendTag{}, drafts...)
	d.beginAttempt()
}

// finishStep appends step/end and decides what follows
// (docs/agent-loop.md#turns-and-steps).
func (d *driver) finishStep(out stepOutcome, failure messages.LlmFailure) {
	t := d.t
	d.appendDrafts(appendTag{}, session.StepEnd{Turn: t.turn, Step: t.step}.Draft())
	switch out {
	case outAborted:
		d.endTurn(abortedReason(t.cause))
		return
	case outError:
		d.emit(turnErrorEffect{Turn: t.turn, Step: t.step, Error: failure})
		t.stopAfter = true
		d.endTurn(session.TurnEndReason{Kind: session.EndError, Error: failure})
		return
	case outMaxTokens:
		t.maxTokens = true
	}
	switch {
	case t.maxTokens:
		t.ends = &session.TurnEndReason{Kind: session.EndMaxTokens}
	case out == outCompleted:
		t.ends = &session.TurnEndReason{Kind: session.EndCompleted}
	default:
		t.ends = nil
	}
	// The next claim's splice must follow step/end (the tool results'
	// context pushes are committed before it).
	d.settle(func() {
		if t.aborted {
			d.endTurn(abortedReason(t.cause))
			return
		}
		d.claim(inbox.NextStep)
	})
}

// failTurn ends the turn in error between steps (a hook or a callback
// failed at a step boundary): agent/error names step, the step that ended
// or the one that would have started.
func (d *driver) failTurn(step int64, err error) {
	t := d.t
	f := messages.LlmFailure{Message: err.Error(), Code: llm.CodeUnknown}
	d.emit(turnErrorEffect{Turn: t.turn, Step: step, Error: f})
	t.stopAfter = true
	d.endTurn(session.TurnEndReason{Kind: session.EndError, Error: f})
}

// endTurn appends turn/end and, once it is committed, either runs the
// next turn or goes idle (docs/agent-loop.md#turns-and-steps).
func (d *driver) endTurn(reason session.TurnEndReason) {
	t := d.t
	t.ending = true
	d.appendDrafts(appendTag{}, session.TurnEnd{Turn: t.turn, Reason: reason}.Draft())
	d.settle(func() {
		d.phase = phIdle
		next := false
		switch {
		case d.disposed:
		case t.aborted || reason.Kind == session.EndAborted:
			// Only a latched wake continues after an abort
			// (docs/agent-loop.md#delivery).
			next = d.wakeRequested && d.pendingTurn+d.pendingStep > 0
		case t.stopAfter || reason.Kind == session.EndBlocked || reason.Kind == session.EndError:
			// parked until the next waking send
			// (docs/session-log.md#where-dsh-differs-from-the-reference)
		default:
			next = d.pendingTurn > 0 || (d.stepWoke && d.pendingStep > 0)
		}
		d.wakeRequested = false
		if next {
			d.startTurn()
			return
		}
		d.t = nil
		d.setStatus(StatusIdle)
	})
}

// ---- the step (docs/agent-loop.md#building-a-request) ------------------

// seedConfig is the request's seed config
// (docs/agent-loop.md#building-a-request).
func (d *driver) seedConfig() messages.CallConfig {
	folded, has := d.mirror.RequestHeader()
	if d.firstRequest || !has {
		cfg := messages.CallConfig{Provider: d.cfg.Provider, Model: d.cfg.Model, MaxTokens: d.cfg.MaxTokens}
		if has && folded.Config.Provider == cfg.Provider && folded.Config.Model == cfg.Model &&
			!folded.AdapterDefaults.ReasoningEffort {
			cfg.ReasoningEffort = folded.Config.ReasoningEffort
		}
		return cfg
	}
	return folded.CallerConfig()
}

// beginAttempt builds the attempt's config and header drafts, then, once
// the log has settled, dispatches the request built from it.
func (d *driver) beginAttempt() {
	t := d.t
	t.attempt++
	cfg := d.seedConfig()
	if d.cfg.Request != nil {
		c, err := d.cfg.Request(RequestInput{Turn: t.turn, Step: t.step, Seed: cfg})
		if err != nil {
			d.finishStep(outError, messages.LlmFailure{Message: err.Error(), Code: llm.CodeUnknown})
			return
		}
		cfg = c
	}
	if err := cfg.Validate(); err != nil {
		d.finishStep(outError, messages.LlmFailure{Message: err.Error(), Code: llm.CodeUnknown})
		return
	}
	// The route's adapter fills what the config leaves out,
	// and the header marks those fields.
	route, err := d.route(cfg)
	if err != nil {
		d.finishStep(outError, messages.LlmFailure{Message: err.Error(), Code: llm.CodeUnknown})
		return
	}
	var marks session.AdapterDefaults
	if cfg.ReasoningEffort == "" && route.ReasoningEffort != "" {
		cfg.ReasoningEffort, marks.ReasoningEffort = route.ReasoningEffort, true
	}
	if _, has := cfg.MaxTokens.Get(); !has {
		if _, ok := route.MaxTokens.Get(); ok {
			cfg.MaxTokens, marks.MaxTokens = route.MaxTokens, true
		}
	}
	if err := cfg.Validate(); err != nil {
		d.finishStep(outError, messages.LlmFailure{Message: err.Error(), Code: llm.CodeUnknown})
		return
	}
	t.cfg = cfg
	header := session.NewEpochHeader(cfg, marks, t.system, d.cfg.Tools).Canonical()
	folded, has := d.mirror.RequestHeader()
	var drafts []session.Draft
	switch {
	case d.firstRequest && !has:
		drafts = append(drafts, session.RequestHeader{Header: header, Reason: session.ReasonInitial}.Draft())
	case d.firstRequest:
		drafts = append(drafts, session.RequestHeader{Header: header, Reason: session.ReasonResume}.Draft())
	case !folded.Equal(header):
		drafts = append(drafts, session.RequestHeader{Header: header, Reason: session.ReasonChange}.Draft())
	}
	d.firstRequest = false
	if rc, has := d.mirror.RequestContext(); !has || rc.Provider != cfg.Provider || rc.Model != cfg.Model ||
		rc.ContextWindow != route.ContextWindow {
		drafts = append(drafts, session.RequestContext{Provider: cfg.Provider, Model: cfg.Model,
			ContextWindow: route.ContextWindow}.Draft())
	}
	if len(drafts) > 0 {
		d.appendDrafts(appendTag{}, drafts...)
	}
	d.settle(func() {
		if t.aborted {
			d.finishStep(outAborted, messages.LlmFailure{})
			return
		}
		d.dispatch()
	})
}

// route returns what the configuration knows of cfg's route. The Routes
// callback is the embedder's code, run inside Receive: its panic is
// recovered and is the callback's error (as a hook's is, see
// recoverHook), which ends the turn in error; letting it crash the actor
// would restart it and interrupt the turn for a fault a restart cannot
// mend.
func (d *driver) route(cfg messages.CallConfig) (r Route, err error) {
	if d.cfg.Routes == nil {
		return Route{}, nil
	}
	defer recoverCallback("routes", &err)
	return d.cfg.Routes(cfg.Provider, cfg.Model), nil
}

// dispatch builds the request from the mirror and starts the call.
func (d *driver) dispatch() {
	t := d.t
	msgs := d.mirror.DeriveMessages().Slice()
	if invariants.Enabled {
		// Request reconstruction (docs/session-log.md#invariants): the
		// request is the log's projection, re-derived from scratch, under the
		// folded header.
		scratch := session.DeriveFromScratch(d.mirror.Events().Slice())
		_ = invariants.Assertf(slices.EqualFunc(msgs, scratch, messages.Message.Equal),
			"agent: request messages differ from the log's projection")
		h, ok := d.mirror.RequestHeader()
		_ = invariants.Assertf(ok && h.Config.Equal(t.cfg) && h.System == t.system,
			"agent: request config differs from the folded header")
	}
	req := llm.NewRequest(t.cfg, t.system, msgs, d.cfg.Tools).WithSession(string(d.mirror.ID()))
	t.asm.Reset()
	t.chunkSeqs = nil
	t.failedFinish = false
	t.tooLarge = nil
	t.streamRef = d.ref()
	d.phase = phStream
	d.emit(startStreamEffect{Ref: t.streamRef, Request: req})
}

func retryID(t *turnState) string { return fmt.Sprintf("retry-%d-%d-%d", t.turn, t.step, t.attempt) }

// streamDone handles the end of an attempt, once its chunks are
// committed (docs/agent-loop.md#turns-and-steps).
func (d *driver) streamDone(in streamEnded) {
	finish := in.Finish
	t := d.t
	src := messages.ModelSource{Provider: t.cfg.Provider, Model: t.cfg.Model}
	usage, hasUsage := t.asm.Usage()
	if t.aborted || in.Cancelled {
		// An attempt that had already failed (its error finish arrived before
		// the abort) writes no assistant message: the abort landed in
		// request-error (docs/agent-loop.md#cancellation), and its chunks
		// belong to a failed attempt.
		if blocks := t.asm.InterruptedBlocks(); len(blocks) > 0 && !t.failedFinish {
			m, err := messages.NewAssistantMessage(blocks, src)
			if err == nil {
				draft := session.AssistantMessage{Turn: t.turn, Step: t.step, Message: m,
					Usage: usage, HasUsage: hasUsage, Interrupted: true}.Draft().WithSources(t.chunkSeqs)
				if session.CheckDraftSize(draft) == nil {
					d.appendDrafts(appendTag{}, draft)
				}
			}
		}
		d.finishStep(outAborted, messages.LlmFailure{})
		return
	}
	if t.tooLarge != nil {
		d.finishStep(outError, tooLargeFailure(t.tooLarge))
		return
	}
	if finish.Kind == messages.FinishError || finish.Kind == messages.FinishAborted {
		d.failedAttempt(finish.Failure)
		return
	}
	src.ReplayState = t.asm.ReplayState()
	blocks := t.asm.Blocks()
	m, err := messages.NewAssistantMessage(blocks, src)
	if err != nil {
		d.finishStep(outError, messages.LlmFailure{Message: err.Error(), Code: llm.CodeUnknown})
		return
	}
	draft := session.AssistantMessage{Turn: t.turn, Step: t.step, Message: m,
		Usage: usage, HasUsage: hasUsage}.Draft().WithSources(t.chunkSeqs)
	if err := session.CheckDraftSize(draft); err != nil {
		// The log could not hold the message (its reader would refuse the
		// record): the step ends without it, the turn in error.
		d.finishStep(outError, tooLargeFailure(fmt.Errorf("the assistant message is too large to record: %w", err)))
		return
	}
	d.appendDrafts(appendTag{}, draft)
	var calls []toolCall
	if finish.Kind != messages.FinishMaxTokens {
		for _, b := range blocks {
			if b.Type() == messages.BlockToolCall {
				calls = append(calls, toolCall{block: b, input: parseInput(b.Arguments()), seq: -1})
			}
		}
	}
	switch {
	case finish.Kind == messages.FinishMaxTokens:
		d.finishStep(outMaxTokens, messages.LlmFailure{})
	case len(calls) == 0:
		d.finishStep(outCompleted, messages.LlmFailure{})
	default:
		// Tools start once the anchor is committed: a cancel that lands in
		// between gives every call a synthetic pair
		// (docs/agent-loop.md#cancellation). The tool bookkeeping is the
		// step's: a previous tool step of the turn left its cursors at the
		// end of its own calls.
		t.calls, t.next, t.commitIdx, t.running, t.exclusive, t.concludes = calls, 0, 0, 0, false, false
		clear(t.pushes)
		d.settle(func() {
			d.phase = phTools
			d.scheduleTools()
			d.commitTools()
		})
	}
}

// CodeMessageTooLarge is the failure code of a turn that ended because
// the model's output could not be recorded: a stream chunk or the
// assistant message assembled from a stream was longer than a log record
// may be (session.DefaultMaxRecordBytes).
const CodeMessageTooLarge = "MESSAGE_TOO_LARGE"

func tooLargeFailure(err error) messages.LlmFailure {
	return messages.LlmFailure{Code: CodeMessageTooLarge, Message: "agent: " + err.Error()}
}

// failedAttempt is docs/agent-loop.md#errors-and-retries: retry inside the
// step, or end the turn in error. No assistant message is written.
func (d *driver) failedAttempt(f messages.LlmFailure) {
	if f.Code == "" {
		f.Code = llm.CodeUnknown
	}
	if f.Message == "" {
		f.Message = f.Code
	}
	if d.overflowCompaction(f) {
		return
	}
	d.requestError(f)
}

// requestError runs the request-error hook and the retry policy over a
// failed attempt's failure.
func (d *driver) requestError(f messages.LlmFailure) {
	t := d.t
	dec := DecideDefault
	if d.cfg.RequestError != nil {
		var err error
		dec, err = d.cfg.RequestError(RequestErrorInput{Turn: t.turn, Step: t.step, Provider: t.cfg.Provider,
			Failure: f, Attempt: t.attempt})
		if err != nil {
			d.finishStep(outError, messages.LlmFailure{Message: err.Error(), Code: llm.CodeUnknown})
			return
		}
	}
	policy := d.cfg.Retry
	key := t.cfg.Provider + "\x00" + policy.Key()
	if t.retries == nil {
		t.retries = map[string]int{}
	}
	n := t.retries[key] + 1
	delay, ok := time.Duration(0), false
	switch dec {
	case DecideRetry:
		if delay, ok = policy.Decide(n, f, nil); !ok {
			delay, ok = policy.WithDefaults().InitialDelay, true
		}
	case DecideRetryHeld:
		delay, ok = heldRetryDelay, true
	case DecideDefault:
		if !d.cfg.NoRetry {
			delay, ok = policy.Decide(n, f, nil)
		}
	}
	if !ok {
		d.finishStep(outError, f)
		return
	}
	t.retries[key] = n
	d.appendDrafts(appendTag{}, session.NewDraft(session.TypeLlmRetry, policy.RetryData(llm.RetryEvent{
		RetryID: retryID(t), Turn: t.turn, Step: t.step, Provider: t.cfg.Provider, Retry: n, Delay: delay, Failure: f})))
	t.timerGen = d.ref()
	d.phase = phRetryWait
	d.emit(startTimerEffect{Gen: t.timerGen, Delay: delay})
}
