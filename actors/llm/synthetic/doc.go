// Package synthetic is an offline model: a [llm.Provider] that writes
// seeded text, reasoning and tool calls at a configured speed, with no
// network and no key. It is the default model of `dsh bench` (thousands of
// sessions at once) and of trying dsh out, so a stream costs next to
// nothing: deltas are pregenerated at [New] and emitting one allocates
// nothing (BenchmarkSynthetic: about 0.14 allocations per chunk, the block
// ends and the usage; tens of millions of chunks per second per core).
//
// # Determinism
//
// Every call draws from its own random source, seeded from [Config.Seed]
// and a hash of the request: its session id, purpose, number of messages,
// and the role and content of its last message. Message ids are left out,
// so a re-run that mints fresh ids reproduces the same output; the session
// id is in, so sessions that share a prompt still write different text.
// Same seed and same request history, same chunks, whatever else runs
// concurrently. The order of the draws is part of this contract.
//
// # Shape of a response
//
// Chunks follow the grammar of docs/messages.md#stream-chunks and the
// DeepSeek adapter's emission order:
//
//	[reasoning]  block-start 0 reasoning, reasoning-delta × n   (probability ReasoningRate)
//	text         block-start i text, text-delta × n             (finish stop)
//	  or calls   block-start i tool-call, tool-call-delta × n … (probability ToolCallRate; finish tool-calls)
//	tail         block-end for every block in index order, usage, finish
//
// A block opens with its first delta and stays open until the tail, as
// DeepSeek holds every block-end back until [DONE]. Block lengths are
// uniform in [mean/2, mean*3/2] deltas of [Config.ChunkSize] bytes. The
// first delta of a tool call carries its id and name; its arguments are a
// small JSON object cut into ChunkSize pieces. The tool is one the request
// offers, or [Config.ToolName] when it offers none. A response that ends in
// tool calls has no text block.
//
// Usage: inputTokens is the history's JSON size plus the system prompt over
// four; outputTokens the number of deltas; reasoningTokens, when there is a
// reasoning block, its deltas. A request whose config sets maxTokens below
// the planned deltas is cut there: its open blocks end with what they
// have, and the finish is max-tokens.
//
// Turns terminate: a response calls tools only while fewer than
// [Config.MaxToolSteps] (default 1) assistant messages follow the last
// message a person wrote (source user). Tool results and plugin context
// neither count nor reset that budget; with the default, the response after
// a tool result is plain text.
//
// # Latency
//
// With [Config.FirstTokenLatency] or [Config.TokensPerSecond] set, delta k
// is due FirstTokenLatency + k/TokensPerSecond after the call, and the tail
// after n deltas at FirstTokenLatency + n/TokensPerSecond. Every due time
// is computed from the start of the call, so the schedule never drifts;
// deltas due within a millisecond are sent at once (one timer per delta
// would dominate at high rates), the first delta and the tail always wait
// for their exact time. Waits are time.Timer waits selected against the
// context, so testing/synctest runs them in fake time. With neither set, a
// stream never reads the clock.
//
// # Failures
//
// With probability [Config.FailureRate] an attempt fails, the kind drawn by
// the weights of [Config.Failures]: RATE_LIMIT (HTTP 429,
// providerRetryAfterMs from RetryAfter) or SERVER (HTTP 500), yielded as an
// [messages.LlmFailure] error after the first-token latency and before any
// chunk; or STREAM_CLOSED, the response's chunks cut after a drawn number
// of deltas, without block ends, usage or finish. A retry sends the same
// request, so the provider counts the failed attempts of each request (by
// its hash, under a mutex) and draws each attempt anew; a request that
// succeeds is forgotten, and the successful attempt writes what a clean
// call would have. The count is bounded (cleared at 65,536 abandoned
// requests).
//
// # Concurrency, ownership, errors
//
// A [Provider] is safe for concurrent use; build one and share it. The
// iterator [Provider.Stream] returns runs in the caller's goroutine,
// starts none, and may be ranged over once. It stops promptly when the
// consumer stops iterating, and when the context is cancelled: then it
// yields one [messages.LlmFailure] with code ABORTED naming the cause, and
// nothing after. Chunks are immutable values the caller may keep. [New]
// fails only on an invalid [Config] ([Config.Validate] names the field);
// nothing in the package panics on its input.
package synthetic
