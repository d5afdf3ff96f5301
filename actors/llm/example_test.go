package llm_test

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
)

// echo is a provider: it streams the last user message back as one text
// block. Stream is all a provider has to write; Run makes whatever it
// yields well-formed for the consumer.
type echo struct{ failAfter int }

func (echo) Name() string { return "echo" }

func (e echo) Stream(ctx context.Context, req llm.Request) iter.Seq2[messages.StreamChunk, error] {
	return func(yield func(messages.StreamChunk, error) bool) {
		var text string
		for _, m := range req.Messages() {
			text = m.Content()[0].Text()
		}
		if !yield(messages.BlockStartChunk(0, messages.BlockText), nil) {
			return
		}
		for i, word := range []string{text[:2], text[2:]} {
			if e.failAfter > 0 && i == e.failAfter {
				yield(messages.StreamChunk{}, errors.New("connection reset"))
				return
			}
			if !yield(messages.TextDeltaChunk(0, word), nil) {
				return
			}
		}
		if !yield(messages.BlockEndChunk(0, messages.TextBlock(text)), nil) {
			return
		}
		yield(messages.FinishChunk(messages.FinishReason{Kind: messages.FinishStop}, messages.JSON{}), nil)
	}
}

// Run streams one call through a provider, handing each chunk to a
// consumer (here a BlockAssembler, as the agent does) and returning the
// finish reason. A provider's error never reaches the consumer as an
// error: the stream ends in a finish error with a canonical code instead.
func Example() {
	prompt, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("hello")}, messages.UserSource())
	if err != nil {
		panic(err)
	}
	req := llm.NewRequest(messages.CallConfig{Provider: "echo", Model: "echo-1"}, "", []messages.Message{prompt}, nil)

	for _, p := range []echo{{}, {failAfter: 1}} {
		var a llm.BlockAssembler
		finish := llm.Run(context.Background(), p, req, func(c messages.StreamChunk) bool {
			a.Push(c)
			return true // false would stop the call
		})
		if finish.Kind == messages.FinishStop {
			fmt.Printf("%s: %q\n", finish.Kind, a.Blocks()[0].Text())
		} else {
			fmt.Printf("%s %s: %s\n", finish.Kind, finish.Failure.Code, finish.Failure.Message)
		}
	}
	// Output:
	// stop: "hello"
	// error UNKNOWN: connection reset
}
