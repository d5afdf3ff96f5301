package session

import (
	"testing"

	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
)

// TestTypedDraftsAgreeWithTheirDecodedData checks the hot-path shortcut of
// Log.build: a typed draft's payload must be exactly what decoding its data
// yields, so skipping the decode changes nothing.
func TestTypedDraftsAgreeWithTheirDecodedData(t *testing.T) {
	user, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("hi")}, messages.UserSource())
	require.NoError(t, err)
	asst, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.ReasoningBlock("r"),
		messages.ToolCallBlock("c1", "ls", "{}")}, messages.ModelSource{Provider: "p", Model: "m"})
	require.NoError(t, err)
	result := messages.NewToolResultMessage("c1", []messages.ContentBlock{messages.TextBlock("out")}, messages.ToolFailed)
	cfg := messages.CallConfig{Provider: "p", Model: "m", ReasoningEffort: "high", MaxTokens: messages.Some(100)}.WithStop("x")
	hdr := NewEpochHeader(cfg, AdapterDefaults{MaxTokens: true}, "sys",
		[]messages.ToolSchema{{Name: "ls", Description: "list", Parameters: messages.MustParseJSON(`{"type":"object"}`)}})
	usage := messages.TokenUsage{InputTokens: 3, OutputTokens: 4, CacheReadTokens: messages.Some(0)}
	drafts := []Draft{
		TurnStart{Turn: 1}.Draft(),
		TurnEnd{Turn: 1, Reason: TurnEndReason{Kind: EndAborted, Cause: CancelCause{Kind: CauseHook, Reason: "why"}}}.Draft(),
		TurnEnd{Turn: 1, Reason: TurnEndReason{Kind: EndError, Error: messages.LlmFailure{Message: "m", Code: "AUTH", Status: 401}}}.Draft(),
		StepStart{Turn: 1, Step: 2}.Draft(),
		StepEnd{Turn: 1, Step: 2}.Draft(),
		UserMessage{Message: user}.Draft(),
		AssistantChunk{Turn: 1, Step: 1, Chunk: messages.NamedToolCallDeltaChunk(1, "c1", "ls", "{")}.Draft(),
		AssistantChunk{Turn: 1, Step: 1, Chunk: messages.UsageChunk(usage)}.Draft(),
		AssistantMessage{Turn: 1, Step: 1, Message: asst, Usage: usage, HasUsage: true, Interrupted: true}.Draft(),
		ToolCall{Turn: 1, Step: 1, CallID: "c1", Name: "ls", Arguments: "{}"}.Draft(),
		ToolResult{Turn: 1, Step: 1, Message: result, Error: ToolError{Name: "E", Code: "X"},
			Meta: messages.MustParseJSON(`{"k":[1,2]}`)}.Draft(),
		RequestHeader{Header: hdr, Reason: ReasonChange}.Draft(),
		RequestHeader{Header: NewEpochHeader(cfg, AdapterDefaults{}, "", []messages.ToolSchema{}), Reason: ReasonInitial}.Draft(),
		RequestContext{Provider: "p", Model: "m", ContextWindow: messages.Some(64000)}.Draft(),
		NewInboxSpliced("next-step", 0, messages.Some(1), []messages.Message{user}, "canceled").Draft(),
		EndSeed{}.Draft(),
		NewTodoWrite([]Todo{{Content: "a", Status: "pending"}}).Draft(),
	}
	for _, d := range drafts {
		require.NotNil(t, d.payload, d.typ)
		decoded, err := decodePayload(d.typ, d.Data())
		require.NoError(t, err, d.typ)
		require.Equal(t, d.Data().String(), decoded.(interface{ Draft() Draft }).Draft().Data().String(), d.typ)
		require.NoError(t, checkPayload(d.payload), d.typ)
		if h, ok := d.payload.(RequestHeader); ok {
			require.True(t, h.Header.Equal(decoded.(RequestHeader).Header), "canonical header")
			require.Equal(t, len(decoded.(RequestHeader).Header.Tools()), len(h.Header.Tools()))
		}
	}
}

// TestTypedDraftsAreRefusedAsTheirDecodedData checks the other half of the
// shortcut: a typed draft that breaks a rule is refused with the error that
// decoding its data gives, because both apply the same rule functions.
func TestTypedDraftsAreRefusedAsTheirDecodedData(t *testing.T) {
	user, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("hi")}, messages.UserSource())
	require.NoError(t, err)
	cfg := messages.CallConfig{Provider: "p", Model: "m"}
	for _, d := range []Draft{
		TurnEnd{Turn: 1, Reason: TurnEndReason{Kind: "gone"}}.Draft(),
		TurnEnd{Turn: 1, Reason: TurnEndReason{Kind: EndAborted, Cause: CancelCause{Kind: "nobody"}}}.Draft(),
		RequestHeader{Header: NewEpochHeader(cfg, AdapterDefaults{}, "", nil), Reason: "later"}.Draft(),
		RequestHeader{Header: NewEpochHeader(cfg, AdapterDefaults{}, "", nil), Reason: "fallback"}.Draft(),
		NewInboxSpliced("elsewhere", 0, messages.OptInt{}, []messages.Message{user}, "").Draft(),
		NewInboxSpliced("next-turn", 0, messages.OptInt{}, []messages.Message{user}, "dropped").Draft(),
	} {
		typedErr := checkPayload(d.payload)
		require.Error(t, typedErr, d.Data().String())
		_, decodeErr := decodePayload(d.typ, d.Data())
		require.Error(t, decodeErr, d.Data().String())
		require.Equal(t, decodeErr.Error(), typedErr.Error())
	}
}
