package session

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/internal/invariants"
	"github.com/dshgo/dsh/messages"
)

// traceOf appends drafts to a log that does not police the trace and
// returns the events, for CheckTrace.
func traceOf(t testing.TB, drafts ...Draft) []Event {
	t.Helper()
	l := looseLog(t)
	for _, d := range drafts {
		appendOK(t, l, d)
	}
	return l.Events().Slice()
}

func completed(turn int64) Draft {
	return TurnEnd{Turn: turn, Reason: TurnEndReason{Kind: EndCompleted}}.Draft()
}

// Scenario 37: turns are numbered from 1 by 1, and the core execution
// events sit inside their turn (and step).
func TestTraceEnforcesTurnNumberingAndEnclosure(t *testing.T) {
	header := RequestHeader{Header: testEpochHeader("s"), Reason: ReasonInitial}.Draft()
	user := UserMessage{Message: userText(t, "between turns")}.Draft()
	cases := []struct {
		name   string
		drafts []Draft
		want   string // "" when the trace is valid
	}{
		{"turns 1 and 2", []Draft{TurnStart{Turn: 1}.Draft(), completed(1), TurnStart{Turn: 2}.Draft(), completed(2)}, ""},
		{"first turn is 2", []Draft{TurnStart{Turn: 2}.Draft()}, "turn/start 2, want turn 1"},
		{"first turn is 0", []Draft{TurnStart{Turn: 0}.Draft()}, "want turn 1"},
		{"turn skips", []Draft{TurnStart{Turn: 1}.Draft(), completed(1), TurnStart{Turn: 3}.Draft()}, "turn/start 3, want turn 2"},
		{"turn repeats", []Draft{TurnStart{Turn: 1}.Draft(), completed(1), TurnStart{Turn: 1}.Draft()}, "want turn 2"},
		{"nested turn", []Draft{TurnStart{Turn: 1}.Draft(), TurnStart{Turn: 2}.Draft()}, "while turn 1 is open"},
		{"turn/end without turn", []Draft{completed(1)}, "turn/end 1 but the open turn is 0"},
		{"turn/end of another turn", []Draft{TurnStart{Turn: 1}.Draft(), completed(2)}, "turn/end 2"},
		{"turn/end with open step", []Draft{TurnStart{Turn: 1}.Draft(), StepStart{Turn: 1, Step: 1}.Draft(), completed(1)}, "while step 1 is open"},
		{"header outside a turn", []Draft{header}, "request/header outside a turn"},
		{"header after the turn", []Draft{TurnStart{Turn: 1}.Draft(), completed(1), header}, "request/header outside a turn"},
		{"header inside a turn", []Draft{TurnStart{Turn: 1}.Draft(), StepStart{Turn: 1, Step: 1}.Draft(), header}, ""},
		{"context outside a turn", []Draft{RequestContext{Provider: "p", Model: "m"}.Draft()}, "request/context outside a turn"},
		{"todo outside a turn", []Draft{NewTodoWrite(nil).Draft()}, "todo/write outside a turn"},
		{"step outside a turn", []Draft{StepStart{Turn: 1, Step: 1}.Draft()}, "step/start in turn 1 but the open turn is 0"},
		{"steps 1 and 2", []Draft{TurnStart{Turn: 1}.Draft(), StepStart{Turn: 1, Step: 1}.Draft(), StepEnd{Turn: 1, Step: 1}.Draft(),
			StepStart{Turn: 1, Step: 2}.Draft(), StepEnd{Turn: 1, Step: 2}.Draft(), completed(1)}, ""},
		{"first step is 2", []Draft{TurnStart{Turn: 1}.Draft(), StepStart{Turn: 1, Step: 2}.Draft()}, "step/start 2, want step 1"},
		{"steps restart in each turn", []Draft{TurnStart{Turn: 1}.Draft(), StepStart{Turn: 1, Step: 1}.Draft(), StepEnd{Turn: 1, Step: 1}.Draft(), completed(1),
			TurnStart{Turn: 2}.Draft(), StepStart{Turn: 2, Step: 2}.Draft()}, "want step 1"},
		{"nested step", []Draft{TurnStart{Turn: 1}.Draft(), StepStart{Turn: 1, Step: 1}.Draft(), StepStart{Turn: 1, Step: 2}.Draft()}, "while step 1 is open"},
		{"chunk outside a step", []Draft{TurnStart{Turn: 1}.Draft(), AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, "x")}.Draft()}, "assistant/chunk names turn 1 step 1"},
		{"assistant message of another step", []Draft{TurnStart{Turn: 1}.Draft(), StepStart{Turn: 1, Step: 1}.Draft(),
			AssistantMessage{Turn: 1, Step: 2, Message: assistantOf(t, messages.TextBlock("x"))}.Draft()}, "assistant/message names turn 1 step 2"},
		{"tool call outside a step", []Draft{TurnStart{Turn: 1}.Draft(), ToolCall{Turn: 1, Step: 1, CallID: "c"}.Draft()}, "tool/call names"},
		{"user messages and foreign events anywhere", []Draft{user, NewDraft("session/title", messages.MustParseJSON(`{"title":"t"}`)),
			TurnStart{Turn: 1}.Draft(), completed(1), user, EndSeed{}.Draft()}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			events := traceOf(t, tc.drafts...)
			err := CheckTrace(events)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.ErrorContains(t, err, tc.want)

			// In an invariants build the log itself vetoes the violation.
			if invariants.Enabled {
				l := newTestLog(t)
				var last error
				for _, d := range tc.drafts {
					if _, last = l.Append(d, testNow); last != nil {
						break
					}
				}
				require.ErrorIs(t, last, ErrInvalid)
				require.ErrorContains(t, last, tc.want)
			}
		})
	}
}

// Scenario 38: an appended tool/result needs a tool/call for its call in
// the same step; a result in a later step does not satisfy an earlier
// call.
func TestTraceDoesNotLetLaterStepResultSatisfyEarlierCall(t *testing.T) {
	call := func(step int64) []Draft {
		return []Draft{
			AssistantMessage{Turn: 1, Step: step, Message: assistantOf(t, messages.ToolCallBlock("c1", "read", "{}"))}.Draft(),
			ToolCall{Turn: 1, Step: step, CallID: "c1", Name: "read", Arguments: "{}"}.Draft(),
		}
	}
	result := func(step int64) Draft {
		return ToolResult{Turn: 1, Step: step, Message: toolResultOf("c1", "out")}.Draft()
	}
	var later []Draft
	later = append(later, TurnStart{Turn: 1}.Draft(), StepStart{Turn: 1, Step: 1}.Draft())
	later = append(later, call(1)...)
	later = append(later, StepEnd{Turn: 1, Step: 1}.Draft(), StepStart{Turn: 1, Step: 2}.Draft(), result(2))
	err := CheckTrace(traceOf(t, later...))
	require.ErrorContains(t, err, `tool/result for "c1" has no tool/call in step 2`)

	var same []Draft
	same = append(same, TurnStart{Turn: 1}.Draft(), StepStart{Turn: 1, Step: 1}.Draft())
	same = append(same, call(1)...)
	same = append(same, result(1), StepEnd{Turn: 1, Step: 1}.Draft(), completed(1))
	require.NoError(t, CheckTrace(traceOf(t, same...)))

	// A result naming the step it sits in but without any call fails too;
	// a synthetic TOOL_NOT_STARTED result needs no call.
	noCall := []Draft{TurnStart{Turn: 1}.Draft(), StepStart{Turn: 1, Step: 1}.Draft(), result(1)}
	require.ErrorContains(t, CheckTrace(traceOf(t, noCall...)), "has no tool/call")
	notStarted := ToolResult{Turn: 1, Step: 1, Message: toolResultOf("c1", "never ran"),
		Error: ToolError{Name: "ToolNotStartedError", Code: "TOOL_NOT_STARTED"}}.Draft()
	require.NoError(t, CheckTrace(traceOf(t, TurnStart{Turn: 1}.Draft(), StepStart{Turn: 1, Step: 1}.Draft(), notStarted)))

	// A content-only replace of a result only needs an open turn.
	l := looseLog(t)
	for _, d := range same[:len(same)-2] { // turn and step still open
		appendOK(t, l, d)
	}
	resultSeq := l.Len() - 1
	appendOK(t, l, StepEnd{Turn: 1, Step: 1}.Draft())
	pruned := appendOK(t, l, prunedResult(t, l, resultSeq, "[pruned]").Draft().WithSurface(ReplaceOp(resultSeq, resultSeq))).Seq()
	require.NoError(t, CheckTrace(l.Events().Slice()))
	appendOK(t, l, completed(1))
	appendOK(t, l, prunedResult(t, l, pruned, "again").Draft().WithSurface(ReplaceOp(pruned, pruned)))
	require.ErrorContains(t, CheckTrace(l.Events().Slice()), "replacing tool/result outside a turn")

	// Seqs must increase.
	ordered := traceOf(t, TurnStart{Turn: 1}.Draft(), completed(1))
	ordered[1].seq = 0
	require.ErrorContains(t, CheckTrace(ordered), "does not increase")
}
