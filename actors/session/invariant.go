package session

import (
	"fmt"
)

// traceChecker checks the session trace invariants of the reference
// (docs/session-log.md#invariants) one event at a time. Check validates without
// changing state; Commit advances. Tests run it over every log they build, and
// builds with -tags invariants (or -race) run it inside Log.Append, where a
// violation vetoes the append. Not safe for concurrent use.
//
// The rules:
//   - seq strictly increases;
//   - turn/start needs no open turn and turn == next turn (from 1, +1);
//   - turn/end needs its turn open and no step open;
//   - step/start needs an open turn, no open step and step == next step
//     (restarting at 1 in every turn);
//   - step/end, assistant/chunk, assistant/message and tool/call name the
//     open turn and step;
//   - an appended tool/result needs a tool/call for its call id in the same
//     step, unless it is a synthetic TOOL_NOT_STARTED error; a replacing
//     tool/result only needs an open turn;
//   - todo/write, request/header and request/context sit inside an open
//     turn;
//   - user/message, session/end-seed and foreign events are unconstrained.
type traceChecker struct {
	lastSeq  int64
	nextTurn int64
	turn     int64 // open turn, 0 if none
	step     int64 // open step, 0 if none
	nextStep int64
	calls    map[string]bool // tool/call ids of the open step
}

// newTraceChecker returns a checker for a log that starts at seq 0.
func newTraceChecker() *traceChecker {
	return &traceChecker{lastSeq: -1, nextTurn: 1}
}

// Check reports whether e may come next.
func (c *traceChecker) Check(e *Event) error {
	if e.seq <= c.lastSeq {
		return fmt.Errorf("invariant: seq %d does not increase past %d", e.seq, c.lastSeq)
	}
	needStep := func(turn, step int64) error {
		if c.turn == 0 || c.step == 0 || turn != c.turn || step != c.step {
			return fmt.Errorf("invariant: %s names turn %d step %d but the open turn/step is %d/%d", e.Type(), turn, step, c.turn, c.step)
		}
		return nil
	}
	switch p := e.payload.(type) {
	case TurnStart:
		if c.turn != 0 {
			return fmt.Errorf("invariant: turn/start %d while turn %d is open", p.Turn, c.turn)
		}
		if p.Turn != c.nextTurn {
			return fmt.Errorf("invariant: turn/start %d, want turn %d", p.Turn, c.nextTurn)
		}
	case TurnEnd:
		if c.turn == 0 || p.Turn != c.turn {
			return fmt.Errorf("invariant: turn/end %d but the open turn is %d", p.Turn, c.turn)
		}
		if c.step != 0 {
			return fmt.Errorf("invariant: turn/end %d while step %d is open", p.Turn, c.step)
		}
	case StepStart:
		if c.turn == 0 || p.Turn != c.turn {
			return fmt.Errorf("invariant: step/start in turn %d but the open turn is %d", p.Turn, c.turn)
		}
		if c.step != 0 {
			return fmt.Errorf("invariant: step/start %d while step %d is open", p.Step, c.step)
		}
		if p.Step != c.nextStep {
			return fmt.Errorf("invariant: step/start %d, want step %d", p.Step, c.nextStep)
		}
	case StepEnd:
		return needStep(p.Turn, p.Step)
	case *chunkStep:
		return needStep(p.turn, p.step)
	case AssistantChunk:
		return needStep(p.Turn, p.Step)
	case AssistantMessage:
		return needStep(p.Turn, p.Step)
	case ToolCall:
		return needStep(p.Turn, p.Step)
	case ToolResult:
		if e.opKind() == OpReplace {
			if c.turn == 0 {
				return fmt.Errorf("invariant: replacing tool/result outside a turn")
			}
			return nil
		}
		if p.Error.Code == "TOOL_NOT_STARTED" {
			return nil
		}
		if err := needStep(p.Turn, p.Step); err != nil {
			return err
		}
		if !c.calls[p.Message.Source().CallID()] {
			return fmt.Errorf("invariant: tool/result for %q has no tool/call in step %d", p.Message.Source().CallID(), c.step)
		}
	case TodoWrite, RequestHeader, RequestContext:
		if c.turn == 0 {
			return fmt.Errorf("invariant: %s outside a turn", e.Type())
		}
	}
	return nil
}

// Commit advances the checker past e, which Check accepted.
func (c *traceChecker) Commit(e *Event) {
	c.lastSeq = e.seq
	switch p := e.payload.(type) {
	case TurnStart:
		c.turn, c.step, c.nextStep, c.calls = p.Turn, 0, 1, nil
		c.nextTurn = p.Turn + 1
	case TurnEnd:
		c.turn, c.step, c.calls = 0, 0, nil
	case StepStart:
		c.step, c.nextStep, c.calls = p.Step, p.Step+1, nil
	case StepEnd:
		c.step, c.calls = 0, nil
	case ToolCall:
		if c.calls == nil {
			c.calls = make(map[string]bool)
		}
		c.calls[p.CallID] = true
	}
}

// CheckTrace runs a fresh checker over events and returns the first
// violation, if any.
func CheckTrace(events []Event) error {
	c := newTraceChecker()
	for i := range events {
		if err := c.Check(&events[i]); err != nil {
			return fmt.Errorf("seq %d: %w", events[i].seq, err)
		}
		c.Commit(&events[i])
	}
	return nil
}
