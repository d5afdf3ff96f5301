package agent

import (
	"fmt"
	"slices"

	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// The driver's handlers of its inputs (Step, step.go dispatches).

// onCommittedEvents is Committed for a view, as the session's
// EventsCommitted carries it: the shell need not copy the events out of
// it first (a copy per chunk on the streaming path).
func (d *driver) onCommitted(events session.Events) error {
	for i := range events.Len() {
		if err := d.committed(events, i); err != nil {
			return err
		}
	}
	return nil
}

// committed mirrors event i of events.
func (d *driver) committed(events session.Events, i int) error {
	e := events.At(i)
	if e.Seq() != d.mirror.Len() {
		if e.Seq() < d.mirror.Len() {
			return nil // already mirrored
		}
		return fmt.Errorf("agent: mirror at %d got event %d", d.mirror.Len(), e.Seq())
	}
	// The event is the session's committed value: mirror it as is
	// (its typed payload included) rather than re-encoding it as a
	// draft, which would decode every event a second time; and in the
	// session's own pages, which the mirror shares instead of copying
	// them (session.Log.MirrorAt).
	if err := d.mirror.MirrorAt(events, i); err != nil {
		return fmt.Errorf("agent: mirror event %d: %w", e.Seq(), err)
	}
	d.observeCompaction(e)
	d.followSnapshot(e)
	return nil
}

// onInboxPending sets the inbox counts (the answer to a query made at boot).
func (d *driver) onInboxPending(nextTurn, nextStep int) {
	d.pendingTurn, d.pendingStep = nextTurn, nextStep
}

// onInboxChanged adjusts the count of list t by delta (an insert +1, a
// discard or claim −1).
func (d *driver) onInboxChanged(t inbox.Target, delta int) {
	if t == inbox.NextTurn {
		d.pendingTurn = max(d.pendingTurn+delta, 0)
	} else {
		d.pendingStep = max(d.pendingStep+delta, 0)
	}
}

// onWake handles a committed waking send to list t (docs/agent-loop.md#delivery).
// A wake that arrives after the turn's abort fired is latched and replays
// once the turn has closed, unless the cause is disposal; a disposed
// driver never starts a turn again.
func (d *driver) onWoken(t inbox.Target) {
	switch {
	case d.disposed:
	case d.maintenance:
		d.wakeRequested = true // replays when the task finishes
	case d.phase == phIdle:
		d.startTurn()
	case d.t == nil:
		// a manual compaction runs: the turn starts after it
		d.wakeRequested = true
	case d.t.aborted:
		if d.t.cause.Kind != session.CauseDisposed {
			d.wakeRequested = true
		}
	case t == inbox.NextStep:
		d.stepWoke = true
	}
}

// onCancel aborts the running turn with c.Cause (the first cause wins)
// and, unless c.KeepInbox, clears the inbox and drops a latched wake
// (docs/agent-loop.md#cancellation).
func (d *driver) onCancel(c Cancel) {
	if !c.KeepInbox {
		d.emit(clearInboxEffect{})
		d.wakeRequested = false
	}
	if d.maintenance {
		// The task's context is the signal: abort it. Its end comes back
		// as maintenanceDone.
		d.emit(abortEffect{Cause: c.Cause})
		return
	}
	if d.t == nil && d.cmp != nil {
		d.cancelCompaction() // a manual compaction
		return
	}
	if d.phase == phIdle || d.t == nil || d.t.aborted {
		return
	}
	t := d.t
	t.aborted, t.cause = true, c.Cause
	d.emit(abortEffect{Cause: c.Cause})
	if d.cmp != nil {
		d.cancelCompaction()
	}
	if t.ending {
		// turn/end is already issued with its own reason; the abort only
		// stops the continuation (the cleared inbox's counts lag behind)
		// and makes later wakes latch.
		return
	}
	switch d.phase {
	case phStream:
		d.emit(cancelStreamEffect{Ref: t.streamRef})
	case phRetryWait:
		t.timerGen = d.ref()
		d.finishStep(outAborted, messages.LlmFailure{})
	case phTools:
		d.commitTools()
	}
}

// onSetSystem sets the system prompt. It takes effect at the next step (a
// step keeps the prompt it started with, across its retries): the next
// request logs a request/header {change} snapshot when the prompt really
// changed, and nothing when it did not (docs/session-log.md#request-headers).
func (d *driver) onSetSystem(prompt string) {
	d.system = prompt
}

// onDispose aborts the running turn with cause disposed, keeping the inbox
// (what is pending stays durable for a later agent), drops a latched wake,
// and makes the driver inert: no turn starts again
// (docs/agent-loop.md#cancellation). The caller waits for Idle and then stops
// the agent.
func (d *driver) onDispose() {
	d.disposed = true
	d.wakeRequested = false
	d.onCancel(Cancel{Cause: session.CancelCause{Kind: session.CauseDisposed}, KeepInbox: true})
}

// onAppended acknowledges append ref with its committed events.
func (d *driver) onAppended(ref uint64, events session.Events) error {
	if d.inflight == 0 {
		return fmt.Errorf("agent: unexpected append ack %d", ref)
	}
	d.inflight--
	if tag, ok := d.takeTag(ref); ok {
		if events.Len() != 1 {
			return fmt.Errorf("agent: append %d committed %d events, want 1", ref, events.Len())
		}
		seq := events.At(0).Seq()
		switch {
		case tag.compaction > 0:
			d.compactionSeq(tag.compaction, seq)
		case tag.chunk && d.t != nil:
			d.t.chunkSeqs = append(d.t.chunkSeqs, seq)
		case tag.toolCall > 0 && d.t != nil && tag.toolCall <= len(d.t.calls):
			d.t.calls[tag.toolCall-1].seq = seq
			if d.phase == phTools {
				d.commitTools()
			}
		}
	}
	if d.inflight == 0 && d.settled != nil {
		fn := d.settled
		d.settled = nil
		fn()
	}
	return nil
}

// takeTag removes and returns the tag of append ref, if it has one.
func (d *driver) takeTag(ref uint64) (appendTag, bool) {
	if q := d.chunkRefs[d.chunkHead:]; len(q) > 0 {
		if q[0] == ref {
			d.chunkHead++
			d.chunkRefsTaken()
			return appendTag{chunk: true}, true
		}
		if i := slices.Index(q, ref); i >= 0 {
			d.chunkRefs = slices.Delete(d.chunkRefs, d.chunkHead+i, d.chunkHead+i+1)
			d.chunkRefsTaken()
			return appendTag{chunk: true}, true
		}
	}
	tag, ok := d.tags[ref]
	if ok {
		delete(d.tags, ref)
	}
	return tag, ok
}

// chunkRefsTaken empties the chunk queue once every ref in it is
// acknowledged: its array is kept for the next chunk while the stream
// runs, and dropped otherwise (an idle driver keeps no array).
func (d *driver) chunkRefsTaken() {
	switch {
	case d.chunkHead < len(d.chunkRefs):
	case d.phase == phStream:
		d.chunkRefs, d.chunkHead = d.chunkRefs[:0], 0
	default:
		d.chunkRefs, d.chunkHead = nil, 0
	}
}

// Streaming reports whether a model call's chunks are being received (the
// shell keeps its chunk buffers meanwhile).
func (d *driver) Streaming() bool { return d.phase == phStream }

// onClaimed delivers the inbox's answer to the claim ref.
func (d *driver) onClaimed(ref uint64, msgs []messages.Message) {
	if d.phase != phClaim || ref != d.claimRef {
		return
	}
	d.stepWoke = false
	t := d.t
	switch {
	case t.aborted:
		d.endTurn(abortedReason(t.cause))
	case d.cfg.StepEnd && t.step > 0 && !t.stepEndRan:
		d.runStepEnd(msgs)
	default:
		d.afterClaim(msgs)
	}
}

// afterClaim goes on from a claim's batch: the end of the turn, or the
// pressure check and the pre-step (docs/agent-loop.md#turns-and-steps).
func (d *driver) afterClaim(msgs []messages.Message) {
	t := d.t
	switch {
	case t.ends != nil && len(msgs) == 0:
		// The step boundary found next-step empty: the reference checks
		// the list and goes to turn-stopping without a pre-step; running the hook here would let it block a turn
		// that already completed.
		d.enter(nil, nil, 0)
	default:
		// The pressure trigger runs before the pre-step hook
		// (docs/agent-loop.md#extension-points: the reference's compaction
		// listener precedes the hook bridges).
		d.pressureCompaction(msgs, func() {
			if t.aborted {
				d.endTurn(abortedReason(t.cause))
				return
			}
			// The snapshot candidate is built after the pressure
			// compaction, which may have shadowed the retained one. It
			// never opens a step alone: a first claim that brought
			// nothing still completes the turn empty.
			var snap messages.Message
			if len(msgs) > 0 || t.step > 0 {
				snap, _ = d.snapshotCandidate()
			}
			if d.cfg.PreStep {
				d.phase = phPreStep
				d.hookRef = d.ref()
				t.snapshot = snap
				d.emit(runPreStepEffect{Ref: d.hookRef, Turn: t.turn, Step: t.step + 1, Messages: slices.Clone(msgs),
					Snapshot: snap})
				return
			}
			dec := PreStepDecision{Messages: msgs}
			if !snap.IsZero() {
				dec.Entries = []Entry{MessageEntry(snap)}
			}
			_, batch, n, _ := enterBatch(dec)
			d.enter(nil, batch, n)
		})
	}
}

// onPreStepDone delivers the pre-step hook's decision.
func (d *driver) onPreStepDone(ref uint64, dec PreStepDecision, err error) {
	if d.phase != phPreStep || ref != d.hookRef {
		return
	}
	t := d.t
	snap := t.snapshot
	t.snapshot = messages.Message{}
	switch {
	case t.aborted:
		d.endTurn(abortedReason(t.cause))
	case err != nil:
		d.failTurn(t.step+1, err)
	default:
		preface, batch, n, verr := enterBatch(withSnapshot(dec, snap, t.step > 0))
		switch {
		case verr != nil:
			d.failTurn(t.step+1, verr)
		case dec.Reject:
			if len(preface) > 0 {
				d.appendDrafts(appendTag{}, preface...)
			}
			t.stopAfter = true
			d.endTurn(session.TurnEndReason{Kind: session.EndBlocked})
		default:
			d.enter(preface, batch, n)
		}
	}
}

// onTurnStoppingDone delivers the end of the turn-stopping hook.
func (d *driver) onTurnStoppingDone(ref uint64, err error) {
	if d.phase != phTurnStopping || ref != d.hookRef {
		return
	}
	t := d.t
	switch {
	case t.aborted:
		d.endTurn(abortedReason(t.cause))
	case err != nil:
		d.failTurn(t.step, err)
	default:
		t.stoppingRan = true
		d.claim(inbox.NextStep)
	}
}

// onStreamChunk delivers chunk c of call ref.
func (d *driver) onStreamChunk(ref uint64, c messages.StreamChunk) {
	if d.cmp != nil && ref != 0 && ref == d.cmp.streamRef {
		d.compactionChunk(c)
		return
	}
	if d.phase != phStream || ref != d.t.streamRef {
		return
	}
	t := d.t
	if t.aborted {
		// The abort stopped the stream (docs/agent-loop.md#cancellation: the
		// chunks so far, no finish chunk); what was already in flight is
		// dropped.
		return
	}
	if c.Type() == messages.ChunkFinish {
		if k := c.Reason().Kind; k == messages.FinishError || k == messages.FinishAborted {
			t.failedFinish = true
		}
	}
	if t.tooLarge != nil {
		return // the step ends in error at the stream's end
	}
	draft := session.AssistantChunk{Turn: t.turn, Step: t.step, Chunk: c}.Draft()
	if err := session.CheckDraftSize(draft); err != nil {
		t.tooLarge = fmt.Errorf("a stream chunk is too large to record: %w", err)
		return
	}
	d.appendDrafts(appendTag{chunk: true}, d.chunkDraft(draft)...)
	t.asm.Push(c)
}

// onStreamEnded delivers the end of call in.Ref.
func (d *driver) onStreamEnded(in streamEnded) {
	if d.cmp != nil && in.Ref != 0 && in.Ref == d.cmp.streamRef {
		d.compactionStreamDone(in)
		return
	}
	if d.phase != phStream || in.Ref != d.t.streamRef {
		return
	}
	d.t.streamRef = 0
	d.settle(func() { d.streamDone(in) })
	d.chunkRefsTaken() // no longer streaming: an empty queue drops its array
	d.chunkDrafts, d.chunkEffs = nil, nil
}

// onRetryTimerFired delivers the backoff timer of generation gen.
func (d *driver) onRetryTimerFired(gen uint64) {
	if d.phase != phRetryWait || gen != d.t.timerGen {
		return
	}
	t := d.t
	d.appendDrafts(appendTag{}, session.NewDraft(session.TypeLlmRetryStarted,
		llm.RetryStartedData(retryID(t), t.turn, t.step, t.attempt-1)))
	d.beginAttempt()
}

// onToolEmitted appends a draft a running tool asked for. Call.Emit has
// refused a draft too large to record; one that got here anyway is
// dropped rather than refused by the session, which would crash the agent.
func (d *driver) onToolEmitted(ref uint64, dr session.Draft) {
	if d.t == nil || session.CheckDraftSize(dr) != nil {
		return
	}
	for _, c := range d.t.calls {
		if c.ref == ref && c.started && !c.done {
			d.appendDrafts(appendTag{}, dr)
			break
		}
	}
}

// onToolDone delivers the result of tool call ref.
func (d *driver) onToolDone(ref uint64, r Result) {
	if d.phase != phTools {
		return
	}
	t := d.t
	for i := range t.calls {
		c := &t.calls[i]
		if c.ref == ref && c.started && !c.done {
			c.done, c.result = true, r
			t.running--
			if t.running == 0 {
				t.exclusive = false
			}
			d.scheduleTools()
			d.commitTools()
			break
		}
	}
}

// onContextPushed delivers the inbox's answer to context push ref: its
// splice is committed, or the send was refused (the context is then lost,
// as a refused loop insert leaves the inbox unchanged). The step's commit
// goes on.
func (d *driver) onContextPushed(ref uint64) {
	if d.t == nil || !d.t.pushes[ref] {
		return
	}
	delete(d.t.pushes, ref)
	if d.phase == phTools && len(d.t.pushes) == 0 {
		d.commitTools()
	}
}
