// Package deepseek is the model provider for DeepSeek and for any other
// OpenAI-compatible chat-completions endpoint that streams server-sent
// events (OpenAI, OpenRouter, vLLM, aimock, ...). It implements
// llm.Provider (docs/architecture.md#models).
//
// # Use
//
//	p, err := deepseek.New(deepseek.Config{}) // api.deepseek.com, key from DEEPSEEK_API_KEY
//	for chunk, err := range p.Stream(ctx, req) { ... }
//
// Consumers normally go through the llm runtime, which wraps Stream so that
// every stream ends in exactly one finish chunk.
//
// # The request
//
// One call is one POST {BaseURL}/chat/completions with stream: true and
// stream_options.include_usage: true. From the llm.Request it sends model,
// messages (the system prompt first), tools (type function: name,
// description, parameters), max_tokens, temperature, stop and
// reasoning_effort. reasoning_effort is passed through verbatim: DeepSeek's
// thinking mode takes "low" | "high" | "max" (mapping other values itself),
// OpenAI's reasoning models take "minimal" ... "high"; validating the value
// against a model's list is the runtime's job (UNSUPPORTED_REASONING_EFFORT).
// The thinking toggle ({"thinking": {...}}) is not sent: the model's
// default applies. Note that some OpenAI models want max_completion_tokens
// instead of max_tokens; DeepSeek wants max_tokens, which is what is sent.
//
// Message mapping: user text (one string when all blocks are text, joined
// with "\n"; a list of parts when there is an image), images as image_url
// parts (Config.ImageURL resolves the opaque attachment), each tool-result
// block as a role "tool" message with tool_call_id and the result's text,
// assistant text as content with tool-call blocks as tool_calls (id, type
// function, name, arguments; empty arguments are sent as "{}").
//
// reasoning_content round trip: DeepSeek's thinking mode requires the
// reasoning of the assistant messages of a turn that made tool calls to be
// sent back in every later request, and answers 400 otherwise; for turns
// without tool calls the field is ignored (older R1 models even refused
// it). The provider therefore sends reasoning_content (the message's
// reasoning blocks joined with "\n") on every assistant message of a turn
// (the span from one real user message to the next; tool results do not
// start a turn) in which some assistant message has a tool call, when that
// message has reasoning text, and never elsewhere.
//
// The API key goes into the Authorization header and nowhere else. It is
// not in the body, and a server echoing it back gets "[redacted]" in its
// place in everything the provider passes on: failure messages, codes and
// request ids (X-Request-Id, X-Ds-Trace-Id), streamed text, reasoning,
// tool-call ids, names and arguments, and finish reasons (see
// Provider.redact for the one gap, a key split across deltas). Config and
// Provider print and log it redacted.
//
// # The stream
//
// The SSE reader (sse.go) follows the event-stream rules: data lines joined
// with "\n", comment lines (": keep-alive", ": OPENROUTER PROCESSING")
// skipped, blank lines end events, LF, CRLF and CR line ends. The decoder
// (translate.go, the pure core: no I/O, clock or goroutine) maps each
// payload:
//
//	delta.reasoning_content (or .reasoning)  → reasoning block (opened before text)
//	delta.content                            → text block
//	delta.tool_calls[i] (by index)           → tool-call block; the first delta
//	                                           carries id and name, later ones
//	                                           argument fragments
//	usage (in any chunk, last wins)          → usage (cache hits subtracted from input)
//	finish_reason stop / tool_calls / length → finish stop / tool-calls / max-tokens
//	[DONE]                                   → block-ends, usage, finish
//
// Deltas stream as they arrive; the block-ends (carrying the assembled
// blocks), the usage and the finish are held back until [DONE] (the DeepSeek
// adapter's emission order). Usage is read wherever it comes: DeepSeek puts
// it in the finish chunk, OpenAI and aimock in a later chunk with choices:
// [].
//
// # Failures
//
// A failed call yields one error, a messages.LlmFailure (llm.Failure reads
// it), and nothing after it; Provider.Stream documents the code of every
// case. HTTP errors carry Status, the provider's message text,
// ProviderRetryAfterMs from Retry-After (seconds or HTTP date; OpenAI's
// retry-after-ms first) and RequestID from X-Request-Id or DeepSeek's
// X-Ds-Trace-Id. A finish_reason that is not a success (EMPTY_RESPONSE for a
// stop with no content, CONTENT_FILTER, ...) is yielded as an error too,
// after the block-ends and usage the stream did produce.
//
// The idle watchdog (Config.IdleTimeout, default 60 s) fails the call with
// TIMEOUT when no data event arrives for that long, the wait for the
// response headers included. SSE comments do not re-arm it: DeepSeek sends
// ": keep-alive" for as long as a request waits in its queue (up to ten
// minutes), and a watchdog those re-armed would never fire on a stalled
// call.
//
// # Concurrency and ownership
//
// A Provider is immutable after New and safe for concurrent use; every
// Stream call has its own state. The response body is read on the
// consumer's goroutine, inside the iterator; besides the HTTP client's own,
// the only goroutines are the watchdog timer's and context.AfterFunc's
// short callbacks, all finished or stopped when the iterator returns.
// Cancelling ctx or stopping the iteration closes the response promptly.
// Chunks yielded are immutable values owned by the consumer. Nothing here
// panics on provider input; a panic would be a bug.
//
// # Tests
//
// The tests replay the recorded streams in testdata/llm (real DeepSeek,
// OpenAI and OpenRouter responses; see SOURCES.md there) through httptest
// servers written in several ways (whole, per event, tiny writes, CRLF,
// lone CR, keep-alive comments), and run the provider against aimock
// (@copilotkit/aimock, installed from npm into the user cache directory on
// first use; node and npm are required).
package deepseek
