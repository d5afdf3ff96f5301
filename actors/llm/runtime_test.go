package llm

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dshgo/dsh/internal/invariants"
	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
)

// collect runs p and returns what the consumer saw and Run's result.
func collect(ctx context.Context, p Provider) ([]messages.StreamChunk, messages.FinishReason) {
	var seen []messages.StreamChunk
	r := Run(ctx, p, Request{}, func(c messages.StreamChunk) bool {
		seen = append(seen, c)
		return true
	})
	return seen, r
}

// requireOneFinish checks the runtime's contract on what the consumer saw:
// a grammatical stream whose last chunk, and only that one, is a finish
// with reason r.
func requireOneFinish(t *testing.T, seen []messages.StreamChunk, r messages.FinishReason) {
	t.Helper()
	require.NotEmpty(t, seen)
	for _, c := range seen[:len(seen)-1] {
		require.NotEqual(t, messages.ChunkFinish, c.Type())
	}
	last := seen[len(seen)-1]
	require.Equal(t, messages.ChunkFinish, last.Type())
	require.Equal(t, r, last.Reason())
	if r.Kind == messages.FinishError || r.Kind == messages.FinishAborted {
		require.NoError(t, r.Failure.Validate())
	}
}

func TestRunPassesACompleteStreamThrough(t *testing.T) {
	stream := []messages.StreamChunk{start(0, messages.BlockText), text(0, "hi"), end(0, messages.TextBlock("hi")),
		usage(1, 1), finish(messages.FinishStop)}
	seen, r := collect(t.Context(), chunks(nil, stream...))
	require.Equal(t, messages.FinishReason{Kind: messages.FinishStop}, r)
	require.Len(t, seen, len(stream))
	for i := range stream {
		require.Equal(t, stream[i].JSON(), seen[i].JSON())
	}
}

func TestRunMapsProviderErrorsToAnErrorFinish(t *testing.T) {
	rateLimited := messages.LlmFailure{Code: CodeRateLimit, Message: "slow down", Status: 429,
		ProviderRetryAfterMs: 1500, RequestID: "req-1"}
	for _, tc := range []struct {
		name string
		err  error
		kind messages.FinishKind
		want messages.LlmFailure
	}{
		{"an LlmFailure keeps its fields", rateLimited, messages.FinishError, rateLimited},
		{"a wrapped LlmFailure pointer", fmt.Errorf("deepseek: %w", &rateLimited), messages.FinishError, rateLimited},
		{"any other error is UNKNOWN", errors.New("boom"), messages.FinishError,
			messages.LlmFailure{Code: CodeUnknown, Message: "boom"}},
		{"a deadline is TIMEOUT", fmt.Errorf("read: %w", context.DeadlineExceeded), messages.FinishError,
			messages.LlmFailure{Code: CodeTimeout, Message: "read: context deadline exceeded"}},
		{"an ABORTED failure aborts", messages.LlmFailure{Code: CodeAborted, Message: "server cancelled"},
			messages.FinishAborted, messages.LlmFailure{Code: CodeAborted, Message: "server cancelled"}},
		{"an invalid failure is repaired", messages.LlmFailure{Status: 42, ProviderRetryAfterMs: -1},
			messages.FinishError, messages.LlmFailure{Code: CodeUnknown, Message: "llm: provider failure UNKNOWN"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen, r := collect(t.Context(), chunks(tc.err, start(0, messages.BlockText), text(0, "par")))
			require.Equal(t, messages.FinishReason{Kind: tc.kind, Failure: tc.want}, r)
			require.Len(t, seen, 3)
			requireOneFinish(t, seen, r)
		})
	}
}

func TestRunRecoversProviderPanics(t *testing.T) {
	midStream := providerFunc(func(context.Context, Request) iter.Seq2[messages.StreamChunk, error] {
		return func(yield func(messages.StreamChunk, error) bool) {
			yield(start(0, messages.BlockText), nil)
			panic("nil map")
		}
	})
	seen, r := collect(t.Context(), midStream)
	require.Equal(t, messages.FinishError, r.Kind)
	require.Equal(t, CodeUnknown, r.Failure.Code)
	require.Equal(t, "llm: provider panicked: nil map", r.Failure.Message)
	require.Len(t, seen, 2)
	requireOneFinish(t, seen, r)

	inStream := providerFunc(func(context.Context, Request) iter.Seq2[messages.StreamChunk, error] {
		panic(errors.New("bad config"))
	})
	seen, r = collect(t.Context(), inStream)
	require.Equal(t, "llm: provider panicked: bad config", r.Failure.Message)
	requireOneFinish(t, seen, r)

	// A panic when the context is already cancelled is an abort.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, r = collect(ctx, inStream)
	require.Equal(t, messages.FinishAborted, r.Kind)
}

// hangAfter returns a provider that yields cs and then blocks until ctx is
// done, returning ctx's error; returned is closed when its iterator
// returns.
func hangAfter(returned chan<- struct{}, cs ...messages.StreamChunk) Provider {
	return providerFunc(func(ctx context.Context, _ Request) iter.Seq2[messages.StreamChunk, error] {
		return func(yield func(messages.StreamChunk, error) bool) {
			defer close(returned)
			for _, c := range cs {
				if !yield(c, nil) {
					return
				}
			}
			<-ctx.Done()
			yield(messages.StreamChunk{}, ctx.Err())
		}
	})
}

func TestRunAbortsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancelCause(t.Context())
	returned := make(chan struct{})
	p := hangAfter(returned, start(0, messages.BlockText), text(0, "partial"))
	var seen []messages.StreamChunk
	r := Run(ctx, p, Request{}, func(c messages.StreamChunk) bool {
		seen = append(seen, c)
		if len(seen) == 2 {
			cancel(errors.New("user pressed escape"))
		}
		return true
	})
	<-returned
	require.Equal(t, messages.FinishReason{Kind: messages.FinishAborted, Failure: messages.LlmFailure{
		Code: CodeAborted, Message: "llm: request aborted: user pressed escape"}}, r)
	require.Len(t, seen, 3)
	requireOneFinish(t, seen, r)
}

// A provider that ignores its context and keeps streaming is cut off at
// the next chunk.
func TestRunAbortsAProviderThatIgnoresCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	yielded := 0
	p := providerFunc(func(context.Context, Request) iter.Seq2[messages.StreamChunk, error] {
		return func(yield func(messages.StreamChunk, error) bool) {
			yield(start(0, messages.BlockText), nil)
			for i := 0; i < 1000; i++ {
				yielded++
				if !yield(text(0, "x"), nil) {
					return
				}
			}
		}
	})
	var seen []messages.StreamChunk
	r := Run(ctx, p, Request{}, func(c messages.StreamChunk) bool {
		seen = append(seen, c)
		if len(seen) == 6 {
			cancel()
		}
		return true
	})
	require.Equal(t, messages.FinishAborted, r.Kind)
	require.Equal(t, "llm: request aborted", r.Failure.Message)
	require.Equal(t, 6, yielded, "Run stops reading at the first chunk after the cancel")
	require.Len(t, seen, 7)
	requireOneFinish(t, seen, r)
}

func TestRunTimesOutAtTheContextDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		returned := make(chan struct{})
		seen, r := collect(ctx, hangAfter(returned, start(0, messages.BlockReasoning), thinking(0, "hmm")))
		<-returned
		require.Equal(t, messages.FinishReason{Kind: messages.FinishError, Failure: messages.LlmFailure{
			Code: CodeTimeout, Message: "llm: request deadline exceeded"}}, r)
		requireOneFinish(t, seen, r)
	})
}

// The decision documented on Run: a silent end is an error, not a stop.
func TestRunTurnsAMissingFinishIntoMalformedResponse(t *testing.T) {
	seen, r := collect(t.Context(), chunks(nil, start(0, messages.BlockText), text(0, "cut")))
	require.Equal(t, messages.FinishReason{Kind: messages.FinishError, Failure: messages.LlmFailure{
		Code: CodeMalformedResponse, Message: `llm: provider "fake" ended the stream without a finish`}}, r)
	requireOneFinish(t, seen, r)

	// A provider that stops silently because it was cancelled: aborted.
	ctx, cancel := context.WithCancel(t.Context())
	quiet := providerFunc(func(ctx context.Context, _ Request) iter.Seq2[messages.StreamChunk, error] {
		return func(func(messages.StreamChunk, error) bool) { cancel() }
	})
	seen, r = collect(ctx, quiet)
	require.Equal(t, messages.FinishAborted, r.Kind)
	require.Len(t, seen, 1)
}

func TestRunDropsChunksAfterTheFinish(t *testing.T) {
	seen, r := collect(t.Context(), chunks(errors.New("late"), finish(messages.FinishStop), text(0, "late")))
	require.Equal(t, messages.FinishReason{Kind: messages.FinishStop}, r)
	require.Len(t, seen, 1)

	// A provider that ignores the end of the loop (yield returned false)
	// makes the Go runtime panic inside it; Run recovers, and the consumer
	// still sees exactly one finish.
	rude := providerFunc(func(context.Context, Request) iter.Seq2[messages.StreamChunk, error] {
		return func(yield func(messages.StreamChunk, error) bool) {
			yield(finish(messages.FinishToolCalls), nil)
			yield(text(0, "after"), nil)
		}
	})
	seen, r = collect(t.Context(), rude)
	require.Equal(t, messages.FinishReason{Kind: messages.FinishToolCalls}, r)
	require.Len(t, seen, 1)
}

func TestRunStopsWhenTheConsumerStops(t *testing.T) {
	returned := make(chan struct{})
	p := hangAfter(returned, start(0, messages.BlockText), text(0, "b"), text(0, "c"))
	calls := 0
	r := Run(t.Context(), p, Request{}, func(messages.StreamChunk) bool {
		calls++
		return calls < 2
	})
	<-returned
	require.Equal(t, 2, calls, "no finish is emitted to a consumer that stopped")
	require.Equal(t, messages.FinishAborted, r.Kind)
	require.Equal(t, CodeAborted, r.Failure.Code)

	// Stopping on the finish itself: the stream was complete.
	r = Run(t.Context(), chunks(nil, finish(messages.FinishStop)), Request{},
		func(messages.StreamChunk) bool { return false })
	require.Equal(t, messages.FinishReason{Kind: messages.FinishStop}, r)
}

func TestRunLetsConsumerPanicsThrough(t *testing.T) {
	require.PanicsWithValue(t, "consumer bug", func() {
		Run(t.Context(), chunks(nil, start(0, messages.BlockText), finish(messages.FinishStop)), Request{},
			func(messages.StreamChunk) bool { panic("consumer bug") })
	})
}

func TestRunChecksTheGrammarInInvariantsBuilds(t *testing.T) {
	bad := chunks(nil, start(0, messages.BlockText), thinking(0, "wrong type"), end(0, messages.TextBlock("")),
		finish(messages.FinishStop))
	run := func() { collect(t.Context(), bad) }
	if !invariants.Enabled {
		require.NotPanics(t, run, "production builds tolerate what the assembler tolerates")
		return
	}
	require.PanicsWithError(t, `invariants: assertion failed: llm: provider "fake": `+
		`llm: stream grammar violation: chunk 1: rule 3: reasoning-delta targets "text" block 0`, run)

	// The recorded max-tokens quirk is not a violation.
	require.NotPanics(t, func() {
		collect(t.Context(), chunks(nil, start(0, messages.BlockToolCall), toolName(0, "c", "f", "{"),
			finish(messages.FinishMaxTokens)))
	})
}

func TestNormalizeError(t *testing.T) {
	bg := t.Context()
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	withCause, cancelCause := context.WithCancelCause(bg)
	cancelCause(errors.New("hook said stop"))
	expired, cancelExpired := context.WithDeadline(bg, time.Unix(0, 0))
	defer cancelExpired()
	transport := messages.LlmFailure{Code: CodeTransport, Message: "connection reset", RequestID: "r"}

	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want messages.LlmFailure
	}{
		{"cancelled ctx wins over the provider's failure", cancelled, transport,
			messages.LlmFailure{Code: CodeAborted, Message: "llm: request aborted"}},
		{"the cause is in the message", withCause, errors.New("x"),
			messages.LlmFailure{Code: CodeAborted, Message: "llm: request aborted: hook said stop"}},
		{"expired ctx is a timeout", expired, transport,
			messages.LlmFailure{Code: CodeTimeout, Message: "llm: request deadline exceeded"}},
		{"failure kept", bg, transport, transport},
		{"nil ctx", nil, transport, transport},
		{"nil error", bg, nil, messages.LlmFailure{Code: CodeUnknown, Message: "llm: unknown failure"}},
		{"canceled error without a cancelled ctx", bg, fmt.Errorf("inner: %w", context.Canceled),
			messages.LlmFailure{Code: CodeAborted, Message: "inner: context canceled"}},
		{"panic error", bg, &PanicError{Value: 42},
			messages.LlmFailure{Code: CodeUnknown, Message: "llm: provider panicked: 42"}},
		{"empty message kept valid", bg, messages.LlmFailure{Code: CodeServer},
			messages.LlmFailure{Code: CodeServer, Message: "llm: provider failure SERVER"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := normalizeError(tc.ctx, tc.err)
			require.Equal(t, tc.want, got)
			require.NoError(t, got.Validate())
		})
	}
	require.ErrorIs(t, &PanicError{Value: context.Canceled}, context.Canceled)
}
