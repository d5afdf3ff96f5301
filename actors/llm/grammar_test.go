package llm

import (
	"testing"

	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
)

// checkStream runs a whole stream through a checker: the first error of
// Check, or End's.
func checkStream(cs ...messages.StreamChunk) error {
	var g GrammarChecker
	for _, c := range cs {
		if err := g.Check(c); err != nil {
			return err
		}
	}
	return g.End()
}

// Scenario 11 (invariant.spec.ts): accepts a complete interleaved stream
// grammar.
func TestAcceptsCompleteInterleavedStreamGrammar(t *testing.T) {
	err := checkStream(
		start(0, messages.BlockReasoning),
		thinking(0, "let me "),
		start(1, messages.BlockText),
		thinking(0, "think"),
		text(1, "Hello"),
		start(2, messages.BlockToolCall),
		toolName(2, "call_1", "read", `{"path":`),
		text(1, " world"),
		toolArgs(2, "call_1", `"a.go"}`),
		end(0, messages.ReasoningBlock("let me think")),
		end(2, messages.ToolCallBlock("call_1", "read", `{"path":"a.go"}`)),
		end(1, messages.TextBlock("Hello world")),
		usage(10, 20),
		finish(messages.FinishToolCalls),
	)
	require.NoError(t, err)

	// A closed index may be opened again (rule 2 speaks only of open
	// blocks); error and aborted finishes may leave blocks open (rule 7).
	require.NoError(t, checkStream(start(0, messages.BlockText), end(0, messages.TextBlock("")),
		start(0, messages.BlockText), text(0, "x"), failed(messages.FinishError, CodeServer, "boom")))
	require.NoError(t, checkStream(start(0, messages.BlockText), text(0, "x"),
		failed(messages.FinishAborted, CodeAborted, "cancelled")))
	// The recorded quirk
	// (docs/session-log.md#where-dsh-differs-from-the-reference):
	// max-tokens with an open tool call.
	require.NoError(t, checkStream(start(0, messages.BlockText), text(0, "x"), end(0, messages.TextBlock("x")),
		start(1, messages.BlockToolCall), toolName(1, "c", "write", `{"con`), finish(messages.FinishMaxTokens)))
	// The smallest stream.
	require.NoError(t, checkStream(finish(messages.FinishStop)))
}

// Scenario 11, the violations: a delta on a closed index, a second usage, a
// chunk after the finish, no finish; and the other rules, one by one.
func TestRejectsStreamGrammarViolations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rule   string
		stream []messages.StreamChunk
	}{
		{"delta on a closed index", "rule 3", []messages.StreamChunk{
			start(0, messages.BlockText), text(0, "a"), end(0, messages.TextBlock("a")), text(0, "b"),
			finish(messages.FinishStop)}},
		{"second usage", "rule 5", []messages.StreamChunk{usage(1, 2), usage(1, 3), finish(messages.FinishStop)}},
		{"chunk after finish", "rule 6", []messages.StreamChunk{finish(messages.FinishStop), usage(1, 2)}},
		{"second finish", "rule 6", []messages.StreamChunk{finish(messages.FinishStop), finish(messages.FinishStop)}},
		{"no finish", "rule 6", []messages.StreamChunk{start(0, messages.BlockText), text(0, "a"),
			end(0, messages.TextBlock("a"))}},
		{"empty stream", "rule 6", nil},
		{"negative index", "rule 1", []messages.StreamChunk{start(-1, messages.BlockText)}},
		{"index beyond safe integers", "rule 1", []messages.StreamChunk{text(1<<53, "a")}},
		{"block-start repeated while open", "rule 2", []messages.StreamChunk{
			start(0, messages.BlockText), start(0, messages.BlockText)}},
		{"delta without block-start", "rule 3", []messages.StreamChunk{text(0, "a")}},
		{"delta of the wrong type", "rule 3", []messages.StreamChunk{
			start(0, messages.BlockText), thinking(0, "a")}},
		{"tool delta into a text block", "rule 3", []messages.StreamChunk{
			start(0, messages.BlockText), toolArgs(0, "c", "{}")}},
		{"block-end without block-start", "rule 4", []messages.StreamChunk{end(0, messages.TextBlock("a"))}},
		{"block-end closes twice", "rule 4", []messages.StreamChunk{
			start(0, messages.BlockText), end(0, messages.TextBlock("")), end(0, messages.TextBlock(""))}},
		{"block-end of another type", "rule 4", []messages.StreamChunk{
			start(0, messages.BlockText), end(0, messages.ReasoningBlock(""))}},
		{"stop with an open block", "rule 7", []messages.StreamChunk{
			start(0, messages.BlockText), text(0, "a"), finish(messages.FinishStop)}},
		{"tool-calls with an open tool call", "rule 7", []messages.StreamChunk{
			start(0, messages.BlockToolCall), toolName(0, "c", "f", "{}"), finish(messages.FinishToolCalls)}},
		{"max-tokens with an open text block", "rule 7", []messages.StreamChunk{
			start(0, messages.BlockText), text(0, "a"), finish(messages.FinishMaxTokens)}},
		{"zero chunk", "rule 0", []messages.StreamChunk{{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkStream(tc.stream...)
			require.ErrorIs(t, err, ErrGrammar)
			require.Contains(t, err.Error(), tc.rule+":")
		})
	}
}
