package session

import (
	"fmt"
	"slices"

	"github.com/dshgo/dsh/messages"
)

// The texts of synthetic results for tool calls a crash interrupted. They
// tell the model what it may safely do next.
const (
	toolOutcomeUnknownText = "The tool call was interrupted after it was recorded, but no result was durably recorded. " +
		"Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is " +
		"read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly."
	toolNotStartedText = "The tool call was interrupted before it started, so it did not run. Retry it if it is still needed."
)

// InterruptedTurnClosers is crash repair (docs/session-log.md#crash-repair): a
// pure function of the events that returns the events to append after them so
// that no turn is left open. For a balanced log it returns nil. Otherwise, in
// order: one synthetic error tool/result per pending call of the open step
// (with TOOL_OUTCOME_UNKNOWN citing the tool/call when one was recorded,
// TOOL_NOT_STARTED otherwise), step/end if a step is open, then turn/end
// {interrupted}. Each closer's seq follows the last event and its time is the
// last event's time. Plugin brackets (compaction/*) are never closed. The
// returned slice is owned by the caller.
func InterruptedTurnClosers(events []Event) []Event {
	return interruptedTurnClosers(eventsOver(events))
}

func interruptedTurnClosers(events Events) []Event {
	var (
		turn, step int64
		open       bool
		stepOpen   bool
		pending    []string         // call ids in insertion order
		callSeq    map[string]int64 // recorded tool/call seqs
		answered   map[string]bool
	)
	reset := func() { pending, callSeq, answered = nil, nil, nil }
	// A turn/end leaves nothing open: the closers depend only on the
	// events from the last one on, so a balanced log (which ends with
	// one) is not walked from its start.
	from := events.Len() - 1
	for from > 0 && events.at(from).Type() != TypeTurnEnd {
		from--
	}
	for i := max(from, 0); i < events.Len(); i++ {
		switch p := events.at(i).payload.(type) {
		case TurnStart:
			turn, open, stepOpen, step = p.Turn, true, false, 0
			reset()
		case TurnEnd:
			open, stepOpen = false, false
			reset()
		case StepStart:
			step, stepOpen = p.Step, true
		case StepEnd:
			stepOpen = false
			reset()
		case AssistantMessage:
			for b := range p.Message.Blocks() {
				if b.Type() == messages.BlockToolCall {
					if _, seen := callSeq[b.ID()]; !seen && !slices.Contains(pending, b.ID()) {
						pending = append(pending, b.ID())
					}
				}
			}
		case ToolCall:
			if callSeq == nil {
				callSeq = map[string]int64{}
			}
			callSeq[p.CallID] = events.at(i).seq
			if !slices.Contains(pending, p.CallID) {
				pending = append(pending, p.CallID)
			}
		case ToolResult:
			if answered == nil {
				answered = map[string]bool{}
			}
			answered[p.Message.Source().CallID()] = true
		}
	}
	if !open {
		return nil
	}
	last := events.at(events.Len() - 1)
	seq, at := last.seq+1, last.time
	var out []Event
	add := func(d Draft) {
		p, err := decodePayload(d.typ, d.data)
		if err != nil {
			panic(fmt.Sprintf("session: repair built an invalid %s: %v", d.typ, err)) // a bug in this file
		}
		e := d.event(seq, at)
		e.setPayload(p)
		out = append(out, e)
		seq++
	}
	if stepOpen {
		for _, id := range pending {
			if answered[id] {
				continue
			}
			r := ToolResult{Turn: turn, Step: step}
			text := toolNotStartedText
			r.Error = ToolError{Name: "ToolNotStartedError", Code: "TOOL_NOT_STARTED"}
			cs, recorded := callSeq[id]
			if recorded {
				text = toolOutcomeUnknownText
				r.Error = ToolError{Name: "ToolOutcomeUnknownError", Code: "TOOL_OUTCOME_UNKNOWN"}
			}
			r.Message = syntheticToolResult(fmt.Sprintf("interrupted-tool-result-%s-%d", id, seq), id, text)
			d := r.Draft()
			if recorded {
				d = d.WithSources([]int64{cs})
			}
			add(d)
		}
		add(StepEnd{Turn: turn, Step: step}.Draft())
	}
	add(TurnEnd{Turn: turn, Reason: TurnEndReason{Kind: EndInterrupted}}.Draft())
	return out
}

// syntheticToolResult builds an error tool-result message with a given id.
func syntheticToolResult(id, callID, text string) messages.Message {
	block := messages.ToolResultBlock(callID, []messages.ContentBlock{messages.TextBlock(text)}, messages.ToolFailed)
	var o messages.ObjectBuilder
	o.String("id", id).String("role", string(messages.RoleUser)).
		Raw("source", messages.ToolSource(callID).JSON()).Raw("content", messages.ArrayOf(block.JSON()))
	m, err := messages.ImportMessage(o.Build())
	if err != nil {
		panic(fmt.Sprintf("session: synthetic tool result: %v", err)) // a bug in this file
	}
	return m
}

// Repair appends the crash-repair closers to l (see
// InterruptedTurnClosers) and returns them. A balanced log is unchanged.
func (l *Log) Repair() ([]Event, error) {
	closers := interruptedTurnClosers(l.Events())
	for _, c := range closers {
		if err := l.commit(c, false); err != nil {
			return nil, fmt.Errorf("session: repair: %w", err)
		}
	}
	return closers, nil
}
