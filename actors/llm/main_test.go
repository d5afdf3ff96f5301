package llm

import (
	"context"
	"iter"
	"testing"

	"github.com/dshgo/dsh/messages"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: the
// stream actor's goroutine must be joined.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// providerFunc is a Provider made of a function; Name is "fake".
type providerFunc func(ctx context.Context, req Request) iter.Seq2[messages.StreamChunk, error]

func (providerFunc) Name() string { return "fake" }

func (f providerFunc) Stream(ctx context.Context, req Request) iter.Seq2[messages.StreamChunk, error] {
	return f(ctx, req)
}

// chunks returns a provider that yields cs, then err if not nil.
func chunks(err error, cs ...messages.StreamChunk) Provider {
	return providerFunc(func(context.Context, Request) iter.Seq2[messages.StreamChunk, error] {
		return func(yield func(messages.StreamChunk, error) bool) {
			for _, c := range cs {
				if !yield(c, nil) {
					return
				}
			}
			if err != nil {
				yield(messages.StreamChunk{}, err)
			}
		}
	})
}

// Shorthands for building streams in tests.
var (
	start    = messages.BlockStartChunk
	text     = messages.TextDeltaChunk
	thinking = messages.ReasoningDeltaChunk
	toolArgs = messages.ToolCallDeltaChunk
	toolName = messages.NamedToolCallDeltaChunk
	end      = messages.BlockEndChunk
)

func finish(kind messages.FinishKind) messages.StreamChunk {
	return messages.FinishChunk(messages.FinishReason{Kind: kind}, messages.JSON{})
}

func failed(kind messages.FinishKind, code, msg string) messages.StreamChunk {
	return messages.FinishChunk(messages.FinishReason{Kind: kind,
		Failure: messages.LlmFailure{Code: code, Message: msg}}, messages.JSON{})
}

func usage(in, out int64) messages.StreamChunk {
	return messages.UsageChunk(messages.TokenUsage{InputTokens: in, OutputTokens: out})
}

// jsonTexts renders blocks as their JSON texts, for readable comparisons.
func jsonTexts(bs []messages.ContentBlock) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.JSON().String()
	}
	return out
}
