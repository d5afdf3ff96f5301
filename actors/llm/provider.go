package llm

import (
	"context"
	"errors"
	"iter"
	"slices"

	"github.com/dshgo/dsh/messages"
)

// Request is one model call: the history (the derived messages of the
// session log), the system prompt, the tools and the call configuration.
// It is immutable; build it with NewRequest. Safe for concurrent use.
type Request struct {
	messages  []messages.Message
	system    string
	tools     []messages.ToolSchema
	config    messages.CallConfig
	sessionID string
	purpose   string // "" for a loop step, or "compaction", "session-title"
}

// NewRequest returns a request; msgs and tools are copied (the messages
// themselves are immutable values and are shared).
func NewRequest(cfg messages.CallConfig, system string, msgs []messages.Message, tools []messages.ToolSchema) Request {
	return Request{config: cfg, system: system, messages: slices.Clone(msgs), tools: slices.Clone(tools)}
}

// WithSession returns r tagged with the session it serves.
func (r Request) WithSession(id string) Request {
	r.sessionID = id
	return r
}

// WithPurpose returns r tagged with a purpose other than a loop step.
func (r Request) WithPurpose(p string) Request {
	r.purpose = p
	return r
}

// Config returns the call configuration.
func (r Request) Config() messages.CallConfig { return r.config }

// System returns the system prompt ("" for none).
func (r Request) System() string { return r.system }

// Messages iterates the history in order.
func (r Request) Messages() iter.Seq2[int, messages.Message] { return slices.All(r.messages) }

// NumMessages returns the length of the history.
func (r Request) NumMessages() int { return len(r.messages) }

// Message returns history entry i.
func (r Request) Message(i int) messages.Message { return r.messages[i] }

// Tools returns a copy of the tool schemas, owned by the caller.
func (r Request) Tools() []messages.ToolSchema { return slices.Clone(r.tools) }

// SessionID returns the session the request serves ("" if none).
func (r Request) SessionID() string { return r.sessionID }

// Purpose returns the request's purpose ("" for a loop step).
func (r Request) Purpose() string { return r.purpose }

// Provider is a model endpoint. Stream starts one call and yields its
// chunks in order. A provider should end a successful stream with a
// finish chunk; it reports a failure by yielding a non-nil error (an
// LlmFailure value, or any error, which the runtime maps to a canonical
// code) and stopping. It must stop promptly when ctx is cancelled or when
// the consumer stops iterating, and it must not keep goroutines running
// after the iterator returns.
//
// Consumers do not call Stream directly: Run (runtime.go) wraps it so that
// every stream ends in exactly one finish chunk and never in an error or a
// panic. Implementations are safe for concurrent use: one provider serves
// many calls at once.
type Provider interface {
	// Name is the provider id written into model sources (e.g. "deepseek").
	Name() string
	// Stream performs one call.
	Stream(ctx context.Context, req Request) iter.Seq2[messages.StreamChunk, error]
}

// The canonical failure codes (docs/messages.md#finish-reasons-and-failures).
const (
	CodeContextWindowExceeded = "CONTEXT_WINDOW_EXCEEDED"
	CodeQuota                 = "QUOTA"
	CodeEmptyResponse         = "EMPTY_RESPONSE"
	CodeInvalidCredential     = "INVALID_CREDENTIAL"
	CodeRateLimit             = "RATE_LIMIT"
	CodeServer                = "SERVER"
	CodeTimeout               = "TIMEOUT"
	CodeTransport             = "TRANSPORT"
	CodeAuth                  = "AUTH"
	CodeInvalidRequest        = "INVALID_REQUEST"
	CodeMalformedResponse     = "MALFORMED_RESPONSE"
	CodeStreamClosed          = "STREAM_CLOSED"
	CodeAborted               = "ABORTED"
	CodeUnknown               = "UNKNOWN"
)

// Failure returns the LlmFailure carried by err, if any (errors.As).
func Failure(err error) (messages.LlmFailure, bool) {
	var f messages.LlmFailure
	if errors.As(err, &f) {
		return f, true
	}
	var pf *messages.LlmFailure
	if errors.As(err, &pf) && pf != nil {
		return *pf, true
	}
	return messages.LlmFailure{}, false
}
