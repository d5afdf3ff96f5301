package replay_test

import (
	"context"
	"fmt"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/replay"
	"github.com/dshgo/dsh/messages"
)

// A replay provider serves a script of calls in order, whatever the
// request: here a recorded answer, then a call that failed. FromFile and
// FromEvents build the script from a session log's assistant/chunk events,
// which is how `dsh log replay` re-runs a recorded session.
func Example() {
	answer := []messages.StreamChunk{
		messages.BlockStartChunk(0, messages.BlockText),
		messages.TextDeltaChunk(0, "hi "),
		messages.TextDeltaChunk(0, "there"),
		messages.BlockEndChunk(0, messages.TextBlock("hi there")),
		messages.FinishChunk(messages.FinishReason{Kind: messages.FinishStop}, messages.JSON{}),
	}
	failure := messages.LlmFailure{Message: "rate limited", Code: llm.CodeRateLimit, Status: 429}
	p := replay.New([]replay.Entry{replay.ChunksEntry(answer), replay.ThrowEntry(nil, failure)}, replay.Options{})

	req := llm.NewRequest(messages.CallConfig{Provider: p.Name(), Model: "recorded"}, "", nil, nil)
	for range p.Len() {
		var a llm.BlockAssembler
		finish := llm.Run(context.Background(), p, req, func(c messages.StreamChunk) bool { a.Push(c); return true })
		if finish.Kind == messages.FinishStop {
			fmt.Printf("call %d: %q\n", p.NextCall()-1, a.Blocks()[0].Text())
		} else {
			fmt.Printf("call %d: %s %s\n", p.NextCall()-1, finish.Kind, finish.Failure.Code)
		}
	}
	// Output:
	// call 0: "hi there"
	// call 1: error RATE_LIMIT
}
