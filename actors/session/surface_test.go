package session

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

// userLog returns a log of n user messages (seqs 0..n-1) and the messages.
func userLog(t testing.TB, n int) (*Log, []messages.Message) {
	t.Helper()
	l := newTestLog(t)
	var msgs []messages.Message
	for i := range n {
		m := userText(t, string(rune('a'+i)))
		appendOK(t, l, UserMessage{Message: m}.Draft())
		msgs = append(msgs, m)
	}
	return l, msgs
}

// Scenario 22: a replace splices the shadowed span out and puts the new
// node at its start; start == end replaces one node; bounds are
// positional, so they work after surface order stopped matching seq order.
func TestReplaceSplicesOutShadowedNodes(t *testing.T) {
	l, u := userLog(t, 4)
	gen := l.surface.generation

	summary := userText(t, "summary of b and c")
	e := appendOK(t, l, UserMessage{Message: summary}.Draft().WithSurface(ReplaceOp(1, 2)).WithSources([]int64{1, 2}))
	require.Equal(t, OpReplace, e.SurfaceOp().Kind())
	start, end := e.SurfaceOp().Range()
	require.Equal(t, [2]int64{1, 2}, [2]int64{start, end})
	require.Equal(t, []int64{0, 4, 3}, l.SurfaceNodes())
	requireSameMessages(t, []messages.Message{u[0], summary, u[3]}, l.DeriveMessages().Slice())
	require.Equal(t, gen+1, l.surface.generation)

	// Single node: start == end.
	single := userText(t, "d, shortened")
	appendOK(t, l, UserMessage{Message: single}.Draft().WithSurface(ReplaceOp(3, 3)))
	require.Equal(t, []int64{0, 4, 5}, l.SurfaceNodes())
	requireSameMessages(t, []messages.Message{u[0], summary, single}, l.DeriveMessages().Slice())

	// Positional, not numeric: after an append the surface is [0 4 5 6].
	// Replacing 0..4 leaves [7 5 6], where surface order no longer follows
	// seq order; 7..6 is then a valid span (7 comes first on the surface)
	// even though 7 > 6.
	tail := appendOK(t, l, UserMessage{Message: userText(t, "e")}.Draft())
	require.Equal(t, []int64{0, 4, 5, tail.Seq()}, l.SurfaceNodes())
	head := userText(t, "head")
	appendOK(t, l, UserMessage{Message: head}.Draft().WithSurface(ReplaceOp(0, 4)))
	require.Equal(t, []int64{7, 5, 6}, l.SurfaceNodes())
	all := userText(t, "all")
	appendOK(t, l, UserMessage{Message: all}.Draft().WithSurface(ReplaceOp(7, 6)))
	require.Equal(t, []int64{8}, l.SurfaceNodes())
	requireSameMessages(t, []messages.Message{all}, l.DeriveMessages().Slice())

	events := l.Events().Slice()
	require.Equal(t, l.SurfaceNodes(), FoldSurface(events))
	requireSameMessages(t, DeriveFromScratch(events), l.DeriveMessages().Slice())
}

// Scenario 23: a replace whose start or end is not a current node, or
// whose start comes after its end on the surface, is refused.
func TestRejectsReplaceWithMissingOrInvertedBounds(t *testing.T) {
	l, _ := userLog(t, 4)
	appendOK(t, l, UserMessage{Message: userText(t, "s")}.Draft().WithSurface(ReplaceOp(1, 2))) // surface [0 4 3]
	appendOK(t, l, TurnStart{Turn: 1}.Draft())                                                  // seq 5, log-only
	before := stateOf(l)

	cases := []struct {
		name       string
		start, end int64
		want       string
	}{
		{"start shadowed", 1, 3, "replace start 1 is not a current surface node"},
		{"start is log-only", 5, 3, "replace start 5 is not a current surface node"},
		{"start in the future", 42, 3, "replace start 42 is not a current surface node"},
		{"end shadowed", 0, 2, "replace end 2 is not a current surface node"},
		{"end in the future", 0, 6, "replace end 6 is not a current surface node"},
		{"start after end", 3, 0, "replace start 3 comes after end 0"},
		{"start after end, numerically before", 3, 4, "replace start 3 comes after end 4"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Append(UserMessage{Message: userText(t, "x")}.Draft().WithSurface(ReplaceOp(tc.start, tc.end)), testNow)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tc.want)
			requireUnchanged(t, l, before)
		})
	}

	// The same rule holds for a replace arriving in a seed.
	seed := l.Events().Slice()
	seed = append(seed, seedEvent(TypeUserMessage, int64(len(seed)), userText(t, "x").JSON().String()))
	seed[len(seed)-1].setOp(ReplaceOp(3, 0))
	_, err := Restore(logHeader("s"), seed)
	require.ErrorContains(t, err, "comes after end")

	_, err = parseSurfaceOp(messages.MustParseJSON(`{"op":"replace","start":-1,"end":2}`))
	require.Error(t, err)
	_, err = parseSurfaceOp(messages.MustParseJSON(`{"op":"replace","start":1,"end":2,"x":0}`))
	require.Error(t, err)
	op, err := parseSurfaceOp(messages.MustParseJSON(`{"end":2,"op":"replace","start":1}`))
	require.NoError(t, err)
	require.Equal(t, ReplaceOp(1, 2), op)
	require.JSONEq(t, `{"op":"replace","start":1,"end":2}`, op.JSON().String())
	op, err = parseSurfaceOp(messages.MustParseJSON(`"append"`))
	require.NoError(t, err)
	require.Equal(t, `"append"`, op.JSON().String())
}

// Scenario 24: an explicit empty sourceEventSeqs is legal on an assistant
// message (a known-empty provider stream) and nowhere else.
func TestAcceptsExplicitEmptySourcesOnlyOnAssistantMessage(t *testing.T) {
	l := newTestLog(t)
	s := beginTurn(t, l, "hi")
	appendOK(t, l, StepStart{Turn: s.Turn, Step: 1}.Draft())
	a := appendOK(t, l, AssistantMessage{Turn: s.Turn, Step: 1, Message: assistantOf(t, messages.ToolCallBlock("c1", "read", "{}"))}.Draft().WithSources([]int64{}))
	src, ok := a.SourceEventSeqs()
	require.True(t, ok)
	require.Empty(t, src)
	call := appendOK(t, l, ToolCall{Turn: s.Turn, Step: 1, CallID: "c1", Name: "read", Arguments: "{}"}.Draft())

	// nil is an explicit empty list too once WithSources is called; absent
	// is "provenance unknown".
	none := appendOK(t, l, UserMessage{Message: userText(t, "no provenance")}.Draft())
	_, ok = none.SourceEventSeqs()
	require.False(t, ok)

	before := stateOf(l)
	for name, d := range map[string]Draft{
		"user message, empty":   UserMessage{Message: userText(t, "x")}.Draft().WithSources([]int64{}),
		"user message, nil":     UserMessage{Message: userText(t, "x")}.Draft().WithSources(nil),
		"tool result, empty":    ToolResult{Turn: s.Turn, Step: 1, Message: toolResultOf("c1", "x")}.Draft().WithSources([]int64{}),
		"user replace, empty":   UserMessage{Message: userText(t, "x")}.Draft().WithSurface(ReplaceOp(s.User, s.User)).WithSources([]int64{}),
		"tool result, future":   ToolResult{Turn: s.Turn, Step: 1, Message: toolResultOf("c1", "x")}.Draft().WithSources([]int64{l.Len()}),
		"tool result, negative": ToolResult{Turn: s.Turn, Step: 1, Message: toolResultOf("c1", "x")}.Draft().WithSources([]int64{-1}),
	} {
		_, err := l.Append(d, testNow)
		require.ErrorIs(t, err, ErrInvalid, name)
		requireUnchanged(t, l, before)
	}
	appendOK(t, l, ToolResult{Turn: s.Turn, Step: 1, Message: toolResultOf("c1", "x")}.Draft().WithSources([]int64{call.Seq()}))
}

// toolStepLog returns a log whose open turn 1, step 1 called a and b and
// got both results, and the seqs of the assistant message and the
// results.
func toolStepLog(t testing.TB) (l *Log, assistant, resultA, resultB int64) {
	t.Helper()
	l = newTestLog(t)
	s := beginTurn(t, l, "two calls")
	appendOK(t, l, StepStart{Turn: s.Turn, Step: 1}.Draft())
	assistant = appendOK(t, l, AssistantMessage{Turn: 1, Step: 1, Message: assistantOf(t,
		messages.ToolCallBlock("a", "read", "{}"), messages.ToolCallBlock("b", "read", "{}"))}.Draft()).Seq()
	appendOK(t, l, ToolCall{Turn: 1, Step: 1, CallID: "a", Name: "read", Arguments: "{}"}.Draft())
	resultA = appendOK(t, l, ToolResult{Turn: 1, Step: 1, Message: toolResultOf("a", "long output of a")}.Draft()).Seq()
	appendOK(t, l, ToolCall{Turn: 1, Step: 1, CallID: "b", Name: "read", Arguments: "{}"}.Draft())
	resultB = appendOK(t, l, ToolResult{Turn: 1, Step: 1, Message: toolResultOf("b", "long output of b")}.Draft()).Seq()
	return l, assistant, resultA, resultB
}

// prunedResult returns the tool/result replacing the one at seq with
// new content and nothing else changed.
func prunedResult(t testing.TB, l *Log, seq int64, text string) ToolResult {
	t.Helper()
	old := mustEvent(t, l, seq).Payload().(ToolResult)
	block := old.Message.Block(0)
	nb := messages.ToolResultBlock(block.ToolCallID(), []messages.ContentBlock{messages.TextBlock(text)}, messages.ToolOutcome(block.IsError()))
	old.Message = old.Message.WithContent([]messages.ContentBlock{nb})
	return old
}

// Scenario 25: a tool/result replace (the pruner's rewrite) shadows
// exactly one current tool/result and changes only the nested content.
func TestRejectsInvalidToolResultRewrites(t *testing.T) {
	l, assistant, ra, rb := toolStepLog(t)

	pruned := prunedResult(t, l, ra, "[pruned]")
	e := appendOK(t, l, pruned.Draft().WithSurface(ReplaceOp(ra, ra)).WithSources([]int64{ra}))
	require.Equal(t, []int64{1, assistant, e.Seq(), rb}, l.SurfaceNodes())
	msgs := l.DeriveMessages()
	require.True(t, msgs.At(2).Equal(pruned.Message))
	require.Equal(t, mustEvent(t, l, ra).Payload().(ToolResult).Message.ID(), msgs.At(2).ID())

	before := stateOf(l)
	prunedB := prunedResult(t, l, rb, "[pruned]")
	changedID := prunedResult(t, l, rb, "[pruned]")
	changedID.Message = toolResultOf("b", "[pruned]") // fresh id
	changedError := prunedResult(t, l, rb, "[pruned]")
	changedError.Error = ToolError{Name: "X", Code: "Y"}
	changedMeta := prunedResult(t, l, rb, "[pruned]")
	changedMeta.Meta = messages.MustParseJSON(`{"bytes":10}`)
	changedStep := prunedResult(t, l, rb, "[pruned]")
	changedStep.Step = 2
	flipped := mustEvent(t, l, rb).Payload().(ToolResult)
	flipped.Message = flipped.Message.WithContent([]messages.ContentBlock{
		messages.ToolResultBlock("b", []messages.ContentBlock{messages.TextBlock("[pruned]")}, messages.ToolFailed)})

	cases := []struct {
		name string
		d    Draft
		want string
	}{
		{"spans two results", prunedB.Draft().WithSurface(ReplaceOp(e.Seq(), rb)), "exactly one node, not 2"},
		{"spans assistant and result", prunedB.Draft().WithSurface(ReplaceOp(assistant, rb)), "exactly one node, not 3"},
		{"targets the assistant message", prunedB.Draft().WithSurface(ReplaceOp(assistant, assistant)), "targets a assistant/message node"},
		{"targets the user message", prunedB.Draft().WithSurface(ReplaceOp(1, 1)), "targets a user/message node"},
		{"changes the message id", changedID.Draft().WithSurface(ReplaceOp(rb, rb)), "changes more than the result content"},
		{"changes the error", changedError.Draft().WithSurface(ReplaceOp(rb, rb)), "changes more than the result content"},
		{"adds meta", changedMeta.Draft().WithSurface(ReplaceOp(rb, rb)), "changes more than the result content"},
		{"changes the step", changedStep.Draft().WithSurface(ReplaceOp(rb, rb)), "changes more than the result content"},
		{"flips isError", flipped.Draft().WithSurface(ReplaceOp(rb, rb)), "changes more than the result content"},
		{"answers another call", ToolResult{Turn: 1, Step: 1, Message: toolResultOf("a", "x")}.Draft().WithSurface(ReplaceOp(rb, rb)), "changes more than the result content"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := l.Append(tc.d, testNow)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tc.want)
			requireUnchanged(t, l, before)
		})
	}

	// A replaced result can itself be pruned again (it is a current
	// tool/result node), and the replaced one cannot.
	_, err := l.Append(prunedResult(t, l, ra, "again").Draft().WithSurface(ReplaceOp(ra, ra)), testNow)
	require.ErrorContains(t, err, "not a current surface node")
	appendOK(t, l, prunedResult(t, l, e.Seq(), "again").Draft().WithSurface(ReplaceOp(e.Seq(), e.Seq())))
	requireSameMessages(t, DeriveFromScratch(l.Events().Slice()), l.DeriveMessages().Slice())
}

// Scenario 26: an assistant message with empty content is a surface node
// that derives to nothing.
func TestDeriveSkipsEmptyAssistantMessage(t *testing.T) {
	l := newTestLog(t)
	s := beginTurn(t, l, "hi")
	appendOK(t, l, StepStart{Turn: s.Turn, Step: 1}.Draft())
	anchor := AssistantMessage{Turn: 1, Step: 1, Message: assistantOf(t), HasUsage: true,
		Usage: messages.TokenUsage{InputTokens: 3, OutputTokens: 0}}
	e := appendOK(t, l, anchor.Draft().WithSources([]int64{}))
	appendOK(t, l, StepEnd{Turn: 1, Step: 1}.Draft())
	endTurn(t, l, 1)

	require.Equal(t, []int64{s.User, e.Seq()}, l.SurfaceNodes())
	msgs := l.DeriveMessages()
	require.Equal(t, 1, msgs.Len())
	require.Equal(t, messages.RoleUser, msgs.At(0).Role())
	m, ok := e.Message()
	require.True(t, ok)
	require.Equal(t, 0, m.NumBlocks())
	p := e.Payload().(AssistantMessage)
	require.True(t, p.HasUsage)
	require.Equal(t, int64(3), p.Usage.InputTokens)
	require.Len(t, DeriveFromScratch(l.Events().Slice()), 1)
}
