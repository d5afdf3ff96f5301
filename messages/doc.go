// Package messages is dsh's value vocabulary: [Message] and [MessageID],
// content blocks, sources, [TokenUsage], [StreamChunk], [FinishReason],
// [LlmFailure], [CallConfig], [ToolSchema], and [JSON], the lossless JSON value
// every payload travels as. docs/messages.md describes the vocabulary and
// its rules in prose.
//
// # Using it
//
// Build a message with the constructor for its role: [NewUserMessage] (a
// prompt, steering, an injection; its [Source] says which),
// [NewAssistantMessage] (a model's answer, with the [ModelSource] that
// produced it) or [NewToolResultMessage] (a tool's result answering one
// call, [ToolSucceeded] or [ToolFailed]). Content is a list of blocks:
// [TextBlock], [ReasoningBlock], [ToolCallBlock], [ToolResultBlock],
// [ImageBlock]. Read a message back through its getters (Role, Source,
// Blocks, Block(i).Text(), ...), and its JSON form with JSON; read one from
// JSON with [ImportMessage]. A model stream is a sequence of [StreamChunk]
// values (TextDeltaChunk, ToolCallDeltaChunk, ..., FinishChunk) ending in a
// [FinishReason]; a failed call is an [LlmFailure]. The examples show a
// conversation built, a message imported and rewritten, and JSON parsed.
//
// Every value here is immutable: fields are unexported (or scalars), built
// by constructors that validate and deep-copy their inputs, and read through
// getters that return scalars, strings, copies or iterators, never internal
// storage. Values are therefore safe to share between actors and goroutines
// without locks; a Message handed from inbox to log to request is the same
// value all the way.
//
// Constructors that create something new mint its id (NewUserMessage,
// NewAssistantMessage, NewToolResultMessage); ImportMessage is the only way
// to build a message with an existing id (loading a log, fixtures, repair).
//
// Values read from JSON keep their canonical text, so anything read from a
// reference log encodes back to the same JSON, including fields dsh does not
// interpret (extended sources, unknown block types).
//
// The package imports nothing from the project. It never panics on bad
// input: parse functions return errors that start with "messages:".
package messages
