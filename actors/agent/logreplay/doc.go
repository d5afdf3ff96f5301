// Package logreplay re-runs a recorded session log through dsh's own
// agent loop, in process, and says whether dsh reproduces it (docs/replay.md):
// `dsh log replay` and the conformance tests over the harness corpus.
// Read the recording with [Load] (a log file, and the override beside it)
// or [LoadFixture] (a reference snapshot with placeholders), then [Run] it;
// the [Result] says whether it conforms, or where it first diverges.
// Example replays one recording of the corpus.
//
// # What a run does
//
// [Run] starts a fresh actor system (quiet logger), a session actor over a
// fresh log with the recorded header (seeded with the recorded seed prefix
// for a seeded or forked recording), and an agent actor configured from the
// recording:
//
//   - model output: actors/llm/replay over the recorded script, with the
//     override ([Options.Override]; [Load] reads replay.override.json beside
//     the file) applied; the provider is named after the recorded provider;
//   - system prompt, tools and call config: those of the recorded
//     request/header (tools answer from the recording: content, isError,
//     error and meta of the recorded tool/result, after re-appending the
//     log-only events recorded between the tool/call and the tool/result;
//     inbox inserts recorded right after a tool/result come back as the
//     result's additional contexts);
//   - plugin contributions: a pre-step hook returns, as its decision's
//     Preface, the foreign events the recording has between a turn's
//     first claim and its step/start, and, as its Entries, the recorded
//     step's enter batch in recorded order: the claimed messages, the
//     plugin-sourced messages (such as the runtime-context snapshot) and
//     the foreign events recorded before the request header
//     (session/title). A step-end hook returns what the recording has at
//     the boundary after each step (between its step/end and the next
//     step/start or turn/end, the loop's own claims aside), in order: the
//     foreign events, the inserts into the inbox (steer; followup for
//     next-turn) and the cancellations of pending input (remove, the
//     removed ids taken from the recorded inbox lists); the agent
//     performs them inside its loop, after the boundary's claim, where the
//     reference's step/end listeners land. Where dsh runs no step-end
//     hook (after a step that ended its turn aborted or in error), the
//     driver delivers them instead. The foreign events recorded between a
//     request's header and its first chunk (the title plugin's
//     session/title-llm-request) are appended by the replay provider before
//     that call streams. Foreign events between turns are appended by the
//     driver at their recorded positions;
//   - call config: the recorded header's config for each step (request
//     hook);
//   - retries: a request-error hook retries exactly where the recording has
//     an llm/retry, with a 1ms backoff.
//   - compaction: the agent's own (actors/agent/doc.go); the recorded
//     compaction/* events are not re-appended, the recording gives the
//     compaction ids (handed out in order) and the summariser's maxTokens,
//     and the replay provider serves each compaction/summary with
//     llmStreamCall as the summariser's stream.
//
// A driver goroutine re-sends every other recorded inbox insert as the same
// delivery (next-turn: followup; next-step: steer, or inject when the
// recording shows it did not wake the agent) with the recorded message
// ids, once dsh's log has reached the insert's recorded position (for an
// insert between turns: once the agent is idle). A turn the recording
// shows cancelled is cancelled where it was (docs/replay.md): when a
// replayed stream hangs (a hang entry, or a recorded group cut by a
// cancel whose chunks ran out), when a replayed tool reaches a recorded
// ABORTED result (it blocks instead of answering), in the pre-step of a
// step the aborted turn never opened (the hook blocks), in the backoff
// of a retry never started (DecideRetryHeld), and in the summariser call
// of a compaction the cancellation cut (a hang entry is inserted at its
// place). The driver then cancels the turn, once, with the recorded
// turn's abort cause (user when the recorded turn did not abort).
//
// # What is compared
//
// [Compare] walks both logs event by event after renumbering seqs by
// position. Within a step's tool phase both logs are first put in the
// exclusive order (each tool/call just before the events of its
// execution), so that the interleaving of tool/calls with earlier
// tool/results, which depends on execution modes, is not compared; results
// still have to commit in model order. Then: the type; for core events
// every data field except message ids (the "id" of any object with a
// "role") and times; surfaceOp and sourceEventSeqs mapped through the
// renumbering; request/header in canonical form (Canonical, Equal) plus
// its reason; foreign events and llm/retry* by type and position only.
//
// # Model output
//
// Where the override puts a hang over a recorded group that the recording
// shows was cut open (its turn aborted), the recorded group is served
// instead: its chunks, then the same hang. A hang's ready file is not
// created (the hang is detected in process).
//
// # Fixtures
//
// [Load] with fixture substitutes the corpus placeholders; "{{tools}}"
// stands for one minimal schema per tool the recording calls
// ([replayToolSchema]), since the replayed loop must offer a tool to run
// it, and then logs that list in its header.
//
// # Concurrency
//
// Run is safe to call concurrently (each run has its own actor system); it
// returns once every actor it started has stopped.
package logreplay
