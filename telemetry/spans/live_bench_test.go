package spans

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// benchTurns returns the events of turns shaped like dsh bench's: per
// turn a step streaming a tool call and a step streaming chunks text
// deltas, with usage and finish chunks.
func benchTurns(b testing.TB, turns, chunks int) []session.Event {
	l, err := session.New(session.Header{ID: "bench", CreatedAt: 1, Cwd: "/w"})
	require.NoError(b, err)
	add := func(d session.Draft) {
		_, err := l.Append(d, 1000)
		require.NoError(b, err)
	}
	for turn := int64(1); turn <= int64(turns); turn++ {
		u, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("go")}, messages.UserSource())
		require.NoError(b, err)
		add(session.UserMessage{Message: u}.Draft())
		add(session.TurnStart{Turn: turn}.Draft())
		src := messages.ModelSource{Provider: "synthetic", Model: "synthetic-1"}
		add(session.StepStart{Turn: turn, Step: 1}.Draft())
		callID := fmt.Sprintf("c%d", turn)
		add(session.AssistantChunk{Turn: turn, Step: 1, Chunk: messages.NamedToolCallDeltaChunk(0, callID, "echo", `{}`)}.Draft())
		add(session.AssistantChunk{Turn: turn, Step: 1, Chunk: messages.FinishChunk(messages.FinishReason{Kind: messages.FinishToolCalls}, messages.JSON{})}.Draft())
		m, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.ToolCallBlock(callID, "echo", `{}`)}, src)
		require.NoError(b, err)
		add(session.AssistantMessage{Turn: turn, Step: 1, Message: m, Usage: messages.TokenUsage{InputTokens: 9, OutputTokens: 1}, HasUsage: true}.Draft().WithSurface(session.AppendOp()))
		add(session.ToolCall{Turn: turn, Step: 1, CallID: callID, Name: "echo", Arguments: "{}"}.Draft())
		add(session.ToolResult{Turn: turn, Step: 1, Message: messages.NewToolResultMessage(callID,
			[]messages.ContentBlock{messages.TextBlock("ok")}, messages.ToolSucceeded)}.Draft().WithSurface(session.AppendOp()))
		add(session.StepEnd{Turn: turn, Step: 1}.Draft())
		add(session.StepStart{Turn: turn, Step: 2}.Draft())
		add(session.AssistantChunk{Turn: turn, Step: 2, Chunk: messages.BlockStartChunk(0, messages.BlockText)}.Draft())
		for range chunks {
			add(session.AssistantChunk{Turn: turn, Step: 2, Chunk: messages.TextDeltaChunk(0, "word")}.Draft())
		}
		add(session.AssistantChunk{Turn: turn, Step: 2, Chunk: messages.UsageChunk(messages.TokenUsage{InputTokens: 9, OutputTokens: int64(chunks)})}.Draft())
		add(session.AssistantChunk{Turn: turn, Step: 2, Chunk: messages.FinishChunk(messages.FinishReason{Kind: messages.FinishStop}, messages.JSON{})}.Draft())
		a, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.TextBlock("words")}, src)
		require.NoError(b, err)
		add(session.AssistantMessage{Turn: turn, Step: 2, Message: a}.Draft().WithSurface(session.AppendOp()))
		add(session.StepEnd{Turn: turn, Step: 2}.Draft())
		add(session.TurnEnd{Turn: turn, Reason: session.TurnEndReason{Kind: session.EndCompleted}}.Draft())
	}
	return l.Events().Slice()
}

// BenchmarkExporterPerChunk is the live exporter's CPU per streamed chunk
// (ns/chunk): every event of turns shaped like dsh bench's (200 text
// deltas, a tool step) through a session's observer, each span handed to
// the batch processor of an exporter that discards, flushed at the end.
// Compare with dsh bench's cpu_per_chunk_ns.
func BenchmarkExporterPerChunk(b *testing.B) {
	const turns, chunks = 20, 200
	events := benchTurns(b, turns, chunks)
	x := NewExporter(tracetest.NewNoopExporter(), resource.Empty())
	defer x.Shutdown(context.Background())
	b.ReportAllocs()
	for b.Loop() {
		obs := x.Open("bench", session.Events{})
		for _, e := range events {
			_ = obs(e)
		}
	}
	require.NoError(b, x.ForceFlush(context.Background()))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*turns*(chunks+4)), "ns/chunk")
}
