package session

import (
	"fmt"
	"testing"
	"time"

	"github.com/dshgo/dsh/messages"
)

// benchLog returns a log of about n events shaped like real sessions: each
// turn has a user message, a header, a tool step (streamed chunks, a
// tool-call completion, the call and its result) and a text step (many
// text-delta chunks and the final answer). The tail is padded with user
// messages to exactly n events.
func benchLog(b *testing.B, n int) *Log {
	b.Helper()
	const deltas = 40
	l := newTestLog(b)
	header := RequestHeader{Header: testEpochHeader("You are a coding agent."), Reason: ReasonInitial}.Draft()
	const perTurn = 2 + 1 + (2 + deltas + 1 + 2) + (1 + deltas + 2) + 1
	for turn := int64(1); l.Len()+perTurn <= int64(n); turn++ {
		appendOK(b, l, TurnStart{Turn: turn}.Draft())
		appendOK(b, l, UserMessage{Message: userText(b, fmt.Sprintf("request %d", turn))}.Draft())

		appendOK(b, l, StepStart{Turn: turn, Step: 1}.Draft())
		appendOK(b, l, header)
		header = RequestHeader{Header: testEpochHeader("You are a coding agent."), Reason: ReasonResume}.Draft()
		callID := fmt.Sprintf("call-%d", turn)
		for i := range deltas {
			appendOK(b, l, AssistantChunk{Turn: turn, Step: 1, Chunk: messages.ToolCallDeltaChunk(0, callID, fmt.Sprintf(`"a%d"`, i))}.Draft())
		}
		appendOK(b, l, AssistantMessage{Turn: turn, Step: 1, Message: assistantOf(b, messages.ToolCallBlock(callID, "read", `{"path":"x"}`)),
			Usage: messages.TokenUsage{InputTokens: 1000, OutputTokens: 40}, HasUsage: true}.Draft())
		call := appendOK(b, l, ToolCall{Turn: turn, Step: 1, CallID: callID, Name: "read", Arguments: `{"path":"x"}`}.Draft())
		appendOK(b, l, ToolResult{Turn: turn, Step: 1, Message: toolResultOf(callID, "file contents")}.Draft().WithSources([]int64{call.Seq()}))
		appendOK(b, l, StepEnd{Turn: turn, Step: 1}.Draft())

		appendOK(b, l, StepStart{Turn: turn, Step: 2}.Draft())
		for i := range deltas {
			appendOK(b, l, AssistantChunk{Turn: turn, Step: 2, Chunk: messages.TextDeltaChunk(0, fmt.Sprintf("word%d ", i))}.Draft())
		}
		appendOK(b, l, AssistantMessage{Turn: turn, Step: 2, Message: assistantOf(b, messages.TextBlock("the answer")),
			Usage: messages.TokenUsage{InputTokens: 1100, OutputTokens: 40}, HasUsage: true}.Draft())
		appendOK(b, l, StepEnd{Turn: turn, Step: 2}.Draft())
		appendOK(b, l, TurnEnd{Turn: turn, Reason: TurnEndReason{Kind: EndCompleted}}.Draft())
	}
	for l.Len() < int64(n) {
		appendOK(b, l, UserMessage{Message: userText(b, "padding")}.Draft())
	}
	return l
}

// BenchmarkDeriveAfterOneAppend measures what the agent pays per model
// request: one more event, then the derived history. The cost must not
// depend on the log's length.
func BenchmarkDeriveAfterOneAppend(b *testing.B) {
	for _, n := range []int{1_000, 1_000_000} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			l := benchLog(b, n)
			want := l.DeriveMessages().Len()
			d := UserMessage{Message: userText(b, "one more")}.Draft()
			b.ReportAllocs()
			var derive time.Duration // the DeriveMessages calls alone
			for b.Loop() {
				if _, err := l.Append(d, testNow); err != nil {
					b.Fatal(err)
				}
				want++
				start := time.Now()
				got := l.DeriveMessages().Len()
				derive += time.Since(start)
				if got != want {
					b.Fatalf("derived %d messages, want %d", got, want)
				}
			}
			b.ReportMetric(float64(derive.Nanoseconds())/float64(b.N), "derive-ns/op")
		})
	}
}

// BenchmarkLogAppendChunk measures appending streamed text-delta chunks,
// the most frequent event.
func BenchmarkLogAppendChunk(b *testing.B) {
	l := newTestLog(b)
	appendOK(b, l, TurnStart{Turn: 1}.Draft())
	appendOK(b, l, StepStart{Turn: 1, Step: 1}.Draft())
	d := AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, " the quick brown fox")}.Draft()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Append(d, testNow); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
