package agent

import (
	"fmt"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// ---- tool calls (docs/agent-loop.md#tool-calls) ------------------------

// modeOf classifies a call with the Modes callback (a tool's Mode). The
// callback is the embedder's code, run inside Receive: its panic is
// recovered and is the error of that call alone, answered as a panicking
// tool body's is (TOOL_PANIC, see runTool), so that the log stays
// balanced, the model sees why, and the other calls run. The rejected
// alternative, the reference's "internal scheduler failure" (the turn
// ends in error with the call unanswered until crash repair), punishes
// the whole turn for one tool's fault.
func (d *driver) modeOf(c *toolCall) (m Mode, err error) {
	if d.cfg.Modes == nil {
		return Exclusive, nil
	}
	defer func() {
		if v := recover(); v != nil {
			m, err = Exclusive, fmt.Errorf("tool %q mode panicked: %v", c.block.Name(), v)
		}
	}()
	return d.cfg.Modes(c.block.Name(), c.input), nil
}

// scheduleTools starts calls in model order: an exclusive call alone, a
// run of parallel calls in a rolling pool of MaxParallelTools. A call
// whose mode cannot be told is answered at once with its error result
// (its body never runs, so it needs no slot in the pool).
func (d *driver) scheduleTools() {
	t := d.t
	for !t.aborted && t.next < len(t.calls) && !t.exclusive {
		c := &t.calls[t.next]
		mode, err := d.modeOf(c)
		if err != nil {
			d.recordCall(t.next)
			c.done, c.result = true, errorResult("ToolPanicError", "TOOL_PANIC", err)
			t.next++
			continue
		}
		if mode == Exclusive {
			if t.running > 0 {
				return
			}
			t.exclusive = true
		} else if t.running >= d.cfg.MaxParallelTools {
			return
		}
		d.startCall(t.next)
		t.next++
	}
}

// startCall records call i's tool/call and runs it.
func (d *driver) startCall(i int) {
	t := d.t
	c := &t.calls[i]
	d.recordCall(i)
	t.running++
	b := c.block
	d.emit(runToolEffect{Ref: c.ref, Call: Call{Turn: t.turn, Step: t.step, ID: b.ID(), Name: b.Name(),
		Arguments: b.Arguments(), Input: c.input}})
}

// recordCall marks call i started and appends its tool/call (whose seq
// its result cites).
func (d *driver) recordCall(i int) {
	t := d.t
	c := &t.calls[i]
	c.started = true
	c.ref = d.ref()
	b := c.block
	d.appendDrafts(appendTag{toolCall: i + 1}, session.ToolCall{Turn: t.turn, Step: t.step, CallID: b.ID(),
		Name: b.Name(), Arguments: b.Arguments()}.Draft())
}

// commitTools commits settled results strictly in model order; after an
// abort, each never-started call gets a synthetic tool/call + tool/result
// pair once the calls before it are committed.
func (d *driver) commitTools() {
	t := d.t
	for t.commitIdx < len(t.calls) {
		if len(t.pushes) > 0 {
			return // the last result's contexts are not spliced yet
		}
		c := &t.calls[t.commitIdx]
		if !c.started {
			if !t.aborted {
				return
			}
			c.started, c.done, c.result = true, true, abortedBeforeDispatch()
			b := c.block
			d.appendDrafts(appendTag{toolCall: t.commitIdx + 1}, session.ToolCall{Turn: t.turn, Step: t.step,
				CallID: b.ID(), Name: b.Name(), Arguments: b.Arguments()}.Draft())
			t.next = max(t.next, t.commitIdx+1)
			return // the result needs the call's seq
		}
		if !c.done || c.seq < 0 {
			return
		}
		resultDraft := func(r Result) session.Draft {
			msg := messages.NewToolResultMessage(c.block.ID(), r.Content, messages.ToolOutcome(r.IsError))
			return session.ToolResult{Turn: t.turn, Step: t.step, Message: msg, Error: r.Error,
				Meta: r.Meta}.Draft().WithSources([]int64{c.seq})
		}
		r := c.result
		draft := resultDraft(r)
		if err := session.CheckDraftSize(draft); err != nil {
			// The log could not hold this result (its reader would refuse
			// the record): the model is told so instead, and the turn goes
			// on. The result's contexts still ride.
			r = tooLargeResult(c.block.Name(), r, err)
			draft = resultDraft(r)
		}
		d.appendDrafts(appendTag{}, draft)
		for _, m := range r.AdditionalContexts {
			ref := d.ref()
			if t.pushes == nil {
				t.pushes = map[uint64]bool{}
			}
			t.pushes[ref] = true
			d.emit(pushContextEffect{Ref: ref, Message: m})
		}
		if r.ConcludesTurn {
			t.concludes = true
		}
		c.committed = true
		t.commitIdx++
	}
	if len(t.pushes) > 0 {
		return // step/end follows the last result's splices
	}
	out := outMore
	switch {
	case t.aborted:
		out = outAborted
	case t.concludes:
		out = outCompleted
	}
	d.finishStep(out, messages.LlmFailure{})
}
