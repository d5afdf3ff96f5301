// Package replay serves a recorded session's model output back: a
// [llm.Provider] whose k-th stream call gets the k-th recorded stream of a
// session log, so that `dsh log replay` can re-run a recorded session
// through dsh's own loop (docs/replay.md) and the harness corpus becomes a
// regression test.
//
// # The script
//
// [Script] turns a log's events into the ordered list of its stream calls
// ([Entry]): the assistant/chunk groups, per turn, step and attempt, and the
// summariser streams of compaction/summary events with llmStreamCall: true,
// rebuilt in a canonical form (one delta per block). See Script for the
// grouping rules and for which groups may lack a finish: those whose turn
// ended aborted or interrupted, and the log's last stream call (a crash may
// have cut it). An open group is served as its chunks, then a hang until
// the call is cancelled, which is where a replay driver cancels a turn
// recorded as aborted {user}.
//
// A replay.override.json beside the log ([FromFile] applies it unless
// [Options] say otherwise) replaces the script ([Override]): a bare array is
// the whole script, {patches:[{at, entry}]} replaces entry at. Entries are
// chunks (served as given), throw (chunks, then the failure as an error)
// and hang (blocks until cancelled; creates readyFile first, resolved
// against [Options.ReadyDir]).
//
// # Serving
//
// [Provider.Stream] takes the next call number when it is called and serves
// that entry, whatever the request says: calls are matched by order only.
// [Provider.NextCall] says how many calls were made. A call beyond the
// script yields an [messages.LlmFailure] with code UNKNOWN, "replay: no
// recorded stream for call k" (k counted from 0). A cancelled call yields
// one failure with code ABORTED and ends; the runtime maps it to an aborted
// finish.
//
// Not supported, from the reference's replay mechanism: several sessions
// bound to several recorded scripts (one Provider serves one log; build one
// per session), {{fromRequest:<regex>}} placeholders (served verbatim), and
// recording-side LLM calls dsh does not make (session/title-llm-request has
// no recorded stream and is not in the script; the session-title scenario's
// override scripts that title call, so replaying it through dsh's loop,
// which makes no title call, serves the title to the first loop step).
//
// # Concurrency, ownership, errors
//
// A [Provider] is safe for concurrent use: the call counter is atomic and
// the script immutable. A stream's iterator runs in the caller's goroutine,
// starts none, and returns promptly when the consumer stops or the context
// is done; a hang entry or open group with a context that is never done
// blocks forever, as the recorded stream did. Entries, chunks and overrides
// are immutable values, safe to share. Construction fails with an error
// (never a panic) on a log that does not read, a group without a finish
// where one is required, a compaction summary that cannot be rebuilt, or an
// override that does not parse or patches beyond the script's end.
package replay
