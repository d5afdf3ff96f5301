// Package llm is dsh's model layer (docs/architecture.md#models): the
// Provider interface, the runtime that makes any provider's stream
// well-formed (Run), the stream grammar (GrammarChecker), the block
// assembler (BlockAssembler), the retry policy (RetryPolicy), and the
// stream actor, one per model call, that runs a call off the agent's
// mailbox goroutine. The providers themselves live in subpackages
// (deepseek, synthetic, replay).
//
// # Pieces
//
//	piece           file            pure?  used by
//	--------------  --------------  -----  ------------------------------------------
//	Provider        provider.go     -      the providers; Run
//	Run             runtime.go      no¹    the stream actor (and tests, tools)
//	GrammarChecker  grammar.go      yes    Run in invariants builds; provider tests
//	BlockAssembler  assembler.go    yes    the agent, per step, over ChunkReceived
//	RetryPolicy     retry.go        yes    the agent, on a failed finish
//	stream actor    streamactor.go  no     the agent spawns one per call
//
// ¹ Run does no I/O of its own, but it calls the provider, which does.
//
// # The stream actor's messages
//
//	message        direction                  when
//	-------------  -------------------------  ---------------------------------------------
//	CancelStream   parent → stream actor      cancel the call Ref (user cancel, hook, ...)
//	ChunkReceived  stream actor → parent      each chunk, in order; the last is the finish
//	                                          (none after a CancelStream)
//	StreamEnded    stream actor → parent      once, last; then the actor stops itself (the
//	                                          parent sees Terminated)
//
// A call's life: the parent spawns the actor from StreamProps (as a child);
// on Started the actor launches one goroutine running Run with a context it
// owns; the goroutine sends every chunk to the parent as ChunkReceived,
// then StreamEnded, then tells its actor to stop. CancelStream cancels the
// context, and from then on the goroutine delivers no chunk, not even the
// aborted finish Run synthesises: the consumer is the one who stopped, as
// in the reference, whose loop records no finish for a cancelled attempt
// (fixture acp/cancel). StreamEnded then has Cancelled set and an aborted
// Finish; the parent assembles what it got (BlockAssembler's
// InterruptedBlocks). Stopping the actor (the parent's ctx.Stop, or the
// parent stopping) cancels the context too, but then nothing more is sent
// at all: the parent asked for it or is going away, and the child's
// Terminated is the signal. The goroutine is joined in Stopped.
//
// Every message to the parent carries the call's Ref. StreamEnded, not the
// child's Terminated, is the end of a call: Terminated is a system message
// and overtakes queued user messages, so the Terminated of a stream actor
// that stopped itself usually reaches the parent before that call's last
// chunks and its StreamEnded, which are still queued. A parent must
// therefore not treat a stream actor's Terminated as the end (or failure)
// of its call, and, having stopped a stream actor itself, must drop the
// messages of that call still in its mailbox (their Ref is no longer the
// call in flight).
//
// # Concurrency contract
//
// Run, RetryPolicy and the message types are safe for
// concurrent use. GrammarChecker and BlockAssembler are not: each belongs
// to one consumer (the agent actor, inside Receive). Providers are safe for
// concurrent use (provider.go).
//
// The stream actor's Receive never blocks, with one documented exception:
// Stopped waits, at most StreamConfig.JoinTimeout, for the goroutine it
// has just cancelled, so that no goroutine outlives its owner. Only the
// goroutine sends to the parent, so ChunkReceived messages arrive in
// stream order and StreamEnded after the last of them; the actor itself
// sends the parent nothing. Sends go to the parent's unbounded mailbox,
// never blocking the goroutine: a provider that outruns its consumer grows
// the parent's mailbox (a bounded parent mailbox would block the stream,
// and one that drops would lose chunks; neither is supported).
//
// # Ownership
//
// Chunks, blocks, failures and requests are immutable values, shared
// freely. Slices returned by BlockAssembler (Blocks, InterruptedBlocks) and
// by DefaultRetryableCodes are owned by the caller. RetryPolicy does not
// copy RetryableCodes: the caller must not modify it afterwards. The
// StreamConfig handed to StreamProps belongs to the actor from then on; its
// props serve one spawn.
//
// # What crashes and what replies
//
// Nothing a provider does crashes anything: errors, panics, a missing or
// extra finish, a context it ignores, all end as one finish chunk (error or
// aborted) that the parent receives like any other; an error finish is the
// agent's to retry (RetryPolicy) or to end the turn with. In invariants
// builds (-tags invariants, -race) a provider stream that breaks the grammar
// of docs/messages.md#stream-chunks panics inside Run, in the stream's
// goroutine, which takes the test binary down at the violation: the grammar
// is a contract between providers and dsh, and CI is where it is enforced. A
// panic in the parent's emit path (Run's emit callback) is not recovered
// either: it is a bug of the consumer, not a provider failure.
//
// The stream actor never panics by design. If it did, a restart would not
// repeat the call: its incarnations share the call, which goes on. Props
// spawned a second time, or an actor without a parent, stop at once with
// an error logged, and make no call.
package llm
