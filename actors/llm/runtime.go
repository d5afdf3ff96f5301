package llm

import (
	"context"
	"errors"
	"fmt"

	"github.com/dshgo/dsh/internal/invariants"
	"github.com/dshgo/dsh/messages"
)

// Run performs one model call through p and hands every chunk of it to emit,
// in order, from the calling goroutine. It is the counterpart of the
// reference's LlmRuntime.stream (docs/messages.md#stream-chunks): whatever
// the provider does, the consumer sees a stream that ends in exactly one
// finish chunk, and never an error or a panic. Run returns that finish's
// reason.
//
//   - A provider error (a non-nil error from the iterator) or a panic
//     (recovered, from Stream or from the iterator) ends the stream with a
//     synthesised finish: aborted when ctx was cancelled or the normalised
//     code is ABORTED, error with the canonical code otherwise: ABORTED
//     for a cancelled ctx, TIMEOUT past its deadline, the failure the
//     error carries (an LlmFailure, its empty fields filled in), UNKNOWN
//     with the error's text for anything else, a panic included.
//   - Cancelling ctx ends the stream promptly even if the provider ignores
//     it while it keeps yielding: Run checks ctx before each chunk, stops
//     reading, and emits an aborted finish (an error TIMEOUT finish when
//     ctx's deadline passed).
//   - A finish chunk is terminal: Run stops reading after it, so chunks a
//     provider would yield after its finish are never emitted.
//   - A provider whose iterator ends without a finish and without an error
//     gets a synthesised finish error MALFORMED_RESPONSE (aborted if ctx was
//     cancelled meanwhile: a provider may stop silently on cancellation). The
//     assembler's "a missing finish means stop"
//     (docs/messages.md#stream-chunks) is a tolerance for reading recorded
//     streams; at run time a silent end means the end of the response was
//     lost, and calling it stop would commit a possibly truncated answer, or
//     a tool call cut mid-arguments, as complete. The error finish makes the
//     turn fail visibly instead.
//   - emit returning false means the consumer wants no more: Run stops
//     reading, calls emit no more (not even with a finish), and returns an
//     aborted reason with code ABORTED. When emit returns false for the
//     finish chunk itself, the stream was complete and Run returns that
//     finish.
//
// A panic raised by emit is the consumer's: Run does not hide it, it
// propagates to Run's caller.
//
// In invariants builds (-tags invariants, -race) Run checks the emitted
// stream with a GrammarChecker and panics, after the provider has returned,
// on a violation (with the max-tokens tolerance documented there). What is
// checked is what the consumer sees, so a missing finish, which Run
// repairs, is not a violation; a provider that sends a delta for a block it
// never opened is. Production builds do not run the checker: the assembler
// tolerates what it would reject.
//
// Run is safe for concurrent use with distinct emit functions; it keeps no
// state between calls. The chunks passed to emit are immutable values.
func Run(ctx context.Context, p Provider, req Request, emit func(messages.StreamChunk) bool) messages.FinishReason {
	r := runState{ctx: ctx, emit: emit}
	r.iterate(p, req)
	if !r.done {
		var f messages.LlmFailure
		switch {
		case r.err != nil:
			f = normalizeError(ctx, r.err)
		case ctx.Err() != nil:
			f = normalizeError(ctx, ctx.Err())
		default:
			f = messages.LlmFailure{Code: CodeMalformedResponse,
				Message: fmt.Sprintf("llm: provider %q ended the stream without a finish", providerName(p))}
		}
		r.send(messages.FinishChunk(reasonFor(f), messages.JSON{}))
	}
	if invariants.Enabled && !r.stopped {
		if r.violation == nil {
			r.violation = r.grammar.End()
		}
		// Asserted here, after the provider has returned, rather than in
		// the loop body: a panic there would unwind through the
		// provider's iterator, and iterate's recover would turn it into an
		// error finish, hiding the violation.
		_ = invariants.Assertf(r.violation == nil, "llm: provider %q: %v", providerName(p), r.violation)
	}
	return r.finish
}

// runState is one Run in progress; it lives on Run's stack.
type runState struct {
	ctx  context.Context
	emit func(messages.StreamChunk) bool

	finish  messages.FinishReason
	done    bool // a finish was emitted, or the consumer stopped: emit no more
	stopped bool // the consumer stopped the stream (emit returned false)
	inEmit  bool // emit is on the stack: a panic now is the consumer's
	err     error

	grammar   GrammarChecker // used only when invariants.Enabled
	violation error
}

// iterate reads the provider's stream until it ends, fails, panics, is
// cancelled, or a finish has been emitted.
func (r *runState) iterate(p Provider, req Request) {
	defer func() {
		if v := recover(); v != nil {
			if r.inEmit {
				panic(v)
			}
			r.err = &PanicError{Value: v}
		}
	}()
	done := r.ctx.Done()
	for c, err := range p.Stream(r.ctx, req) {
		if err != nil {
			r.err = err
			return
		}
		select {
		case <-done:
			return
		default:
		}
		if !r.send(c) {
			return
		}
	}
}

// send emits c and reports whether reading should go on.
func (r *runState) send(c messages.StreamChunk) bool {
	if invariants.Enabled && r.violation == nil {
		r.violation = r.grammar.Check(c)
	}
	isFinish := c.Type() == messages.ChunkFinish
	if isFinish {
		r.done, r.finish = true, c.Reason()
	}
	r.inEmit = true
	ok := r.emit(c)
	r.inEmit = false
	if isFinish {
		return false
	}
	if !ok {
		r.done, r.stopped = true, true
		r.finish = messages.FinishReason{Kind: messages.FinishAborted,
			Failure: messages.LlmFailure{Code: CodeAborted, Message: "llm: the consumer stopped the stream"}}
	}
	return ok
}

// reasonFor returns the finish a failure ends a stream with.
func reasonFor(f messages.LlmFailure) messages.FinishReason {
	if f.Code == CodeAborted {
		return messages.FinishReason{Kind: messages.FinishAborted, Failure: f}
	}
	return messages.FinishReason{Kind: messages.FinishError, Failure: f}
}

// providerName returns p's name without trusting p: Name may panic too.
func providerName(p Provider) (name string) {
	defer func() {
		if recover() != nil {
			name = "?"
		}
	}()
	return p.Name()
}

// PanicError is the error a recovered provider panic becomes. Its Value is
// what was passed to panic. Immutable once built.
type PanicError struct {
	Value any
}

// Error returns "llm: provider panicked: <value>".
func (e *PanicError) Error() string { return fmt.Sprintf("llm: provider panicked: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// normalizeError maps err, which ended a call made under ctx, to a
// canonical failure (docs/messages.md#finish-reasons-and-failures,
// docs/architecture.md#models). The result always passes
// LlmFailure.Validate. In order:
//
//   - ctx cancelled: ABORTED, with context.Cause in the message (the
//     cancellation is the cause, whatever the provider made of it; a
//     connection torn down by the cancel is not a TRANSPORT failure);
//   - ctx past its deadline: TIMEOUT;
//   - err carries an LlmFailure (errors.As, see Failure): that failure, its
//     fields kept; an empty message or code is filled in (the code with
//     UNKNOWN) and an out-of-range status or retry hint is dropped, so a
//     sloppy provider cannot produce an invalid finish;
//   - err is or wraps context.DeadlineExceeded: TIMEOUT;
//   - err is or wraps context.Canceled: ABORTED;
//   - anything else, a recovered panic included: UNKNOWN with err's text.
//
// A nil ctx is treated as one never cancelled; a nil err, outside a
// cancelled ctx, gives UNKNOWN.
func normalizeError(ctx context.Context, err error) messages.LlmFailure {
	if ctx != nil {
		switch ctx.Err() {
		case nil:
		case context.DeadlineExceeded:
			return messages.LlmFailure{Code: CodeTimeout, Message: "llm: request deadline exceeded"}
		default:
			msg := "llm: request aborted"
			if cause := context.Cause(ctx); cause != nil && cause != context.Canceled {
				msg += ": " + cause.Error()
			}
			return messages.LlmFailure{Code: CodeAborted, Message: msg}
		}
	}
	if err == nil {
		return messages.LlmFailure{Code: CodeUnknown, Message: "llm: unknown failure"}
	}
	if f, ok := Failure(err); ok {
		return repairFailure(f)
	}
	code := CodeUnknown
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code = CodeTimeout
	case errors.Is(err, context.Canceled):
		code = CodeAborted
	}
	msg := err.Error()
	if msg == "" {
		msg = "llm: " + code
	}
	return messages.LlmFailure{Code: code, Message: msg}
}

// repairFailure makes a provider's failure valid, keeping what is valid.
func repairFailure(f messages.LlmFailure) messages.LlmFailure {
	if f.Code == "" {
		f.Code = CodeUnknown
	}
	if f.Message == "" {
		f.Message = "llm: provider failure " + f.Code
	}
	if f.Status != 0 && (f.Status < 100 || f.Status > 599) {
		f.Status = 0
	}
	if f.ProviderRetryAfterMs < 0 {
		f.ProviderRetryAfterMs = 0
	}
	return f
}
