// Package agent runs a session's agent loop (docs/agent-loop.md): it
// claims input from the session's inbox, runs turns of steps, each a
// model call streamed through a child stream actor and the tool calls it
// asks for, retries failed calls inside their step, compacts the history
// when it outgrows the model's context, handles cancellation, and records
// all of it in the session log, from which every request is rebuilt.
//
// # Using it
//
// The agent is an actor beside the session actor whose log it writes (a
// supervisor.Host runs one per session). Describe the agent once in a
// [Config]: the Provider and Model, the System prompt, the Tools (a
// [Registry] of [Tool] values), the [Hooks], the retry and [CompactionConfig]
// settings, and an Observer for status changes. [NewTemplate] validates it
// and prepares it once for many agents; [Template.Props] gives the props of
// the agent of one session actor ([Props] does both for a single agent).
// The agent spawns its own inbox and stream actors as children.
//
// Talk to it with the messages of its protocol (the table below): Followup
// queues a prompt as a turn of its own, Steer input for the running turn's
// next step, Inject input that waits for the next waking one; each is
// answered Sent once it is durable in the log. WaitIdle is answered once
// no turn runs; Cancel aborts the turn; Dispose ends the agent for good.
// The log then holds the whole turn (turn/start, step/start, the user
// message, request/header, the chunks, the assistant message, tool calls
// and results, step/end, turn/end). Example runs one turn.
//
// # Layers
//
// The driver (state.go) is the pure core: a state machine with no
// goroutines, clock or I/O. Its Step (step.go) takes one input (an append
// acknowledged, a claim answered, a chunk, a hook's or a tool's end, a
// timer, the inbox's notices, the committed events for the log mirror, and
// the protocol's Cancel, SetSystem, SetRuntimeContext and Dispose) and
// returns the effects (effects.go) the shell performs, in order.
// state_test.go drives it alone (inputs in, effects out). The core
// keeps a mirror of the session log (fed by the agent's subscription to the
// session; it shares the session's pages of immutable events rather than
// copying them, session.Log.MirrorAt) and builds every request from it: messages = DeriveMessages(),
// config = the folded request header, so a request always rebuilds from the
// log alone (docs/session-log.md#invariants); invariants builds re-derive
// from scratch at each dispatch. Appends are pipelined and acknowledged
// asynchronously; where seqs or a settled log are needed (an anchor citing
// its chunks, a tool/result citing its tool/call, a claim whose splice must
// follow our events) the core waits for every append in flight.
//
// The actor (actor.go) is the thin shell: it owns the driver, turns each
// message it receives into the driver's input (inputOf), spawns the inbox
// actor (owner = the agent) and one llm stream actor per model call as
// children, runs tool bodies and blocking hooks in goroutines it owns
// (workers.go, under the turn's abort signal), and arms retry timers with
// time.AfterFunc. The shell also coalesces chunk appends (chunkappends.go):
// while one is unanswered, the chunks after it are held and sent together
// as one Append when its answer comes; the driver still sees one append
// and one acknowledgement per chunk, and order is kept.
//
// # Messages
//
//	message                   from → to            reply / effect
//	------------------------  -------------------  ------------------------------------------
//	Followup, Steer, Inject   caller → agent       Sent | SendFailed (forwarded to the inbox;
//	                                               a waking send after an abort goes to
//	                                               next-turn and is latched)
//	Cancel                    caller → agent       none; aborts the turn, clears the inbox
//	SetSystem                 caller → agent       none; the system prompt from the next step
//	SetRuntimeContext         caller → agent       none; the runtime context from the next
//	                                               pre-step (snapshot on, see below)
//	Dispose                   caller → agent       Disposed once idle; turn/end {aborted,
//	                                               disposed}, inbox kept, sends then refused
//	                                               (ErrDisposed); the caller stops the actor
//	WaitIdle                  caller → agent       Idle, once idle (no turn, no latch, no append)
//	Compact                   caller → agent       Compacted (done | nothing | busy | failed |
//	                                               disabled), once the bracket is committed
//	RunMaintenance            caller → agent       MaintenanceDone once the task returned
//	                                               (ErrNotIdle at once unless idle)
//	StatusChanged, TurnFailed agent → Observer     status changes, agent/error
//	session.Append            agent → session      AppendReply | AppendFailed (Delivering:
//	                                               the reply brings its events to the mirror
//	                                               instead of an EventsCommitted)
//	session.QueryHeader,      agent → session      at start: header, then the whole log and
//	  Subscribe                                    every later event (EventsCommitted)
//	inbox.Claim, Clear, Send, agent → inbox        Claimed, ClearReply, SendReply,
//	  Remove                                       RemoveReply (Remove: step-end hook)
//	inbox.Woken, Inserted,    inbox → agent        wakes and inbox counts
//	  Discarded, ClaimedNotice
//	llm.CancelStream          agent → stream       ChunkReceived*, StreamEnded
//
// # Concurrency contract
//
// The actor is the lock: the driver is touched only in Receive, and
// Receive never blocks, except Stopped, which joins the tool and hook
// goroutines it has just cancelled (tools must honour their context).
// Tool goroutines report with Send(self, ...): a tool's emitted drafts
// arrive before its result. Hooks that may block (PreStep, TurnStopping,
// StepEnd, the tool pipeline PreExecute → Approver → body → PostExecute)
// run in goroutines; Request and RequestError run synchronously inside Receive
// and must not block. Tools and hooks must be safe for concurrent
// use. Log order across the agent's and the inbox's appends is kept by
// waiting for acknowledgements before asking the inbox to append.
//
// # Ownership
//
// Everything exchanged is immutable (messages.Message, session events,
// drafts). A tool's Result slices belong to the agent once returned.
//
// # What crashes and what replies
//
// Expected failures are recorded, not raised: a provider failure that is
// not retried, a hook error, a pre-step decision carrying a core-type or
// non-user entry, a bad request config end the turn with turn/end {error}
// (and TurnFailed); a cancel ends it {aborted, cause}. A tool hook's error
// is the call's error result (TOOL_HOOK_ERROR), not a turn error; a
// denial is TOOL_DENIED (Ask without an Approver is a denial that says
// so), a post-execute block TOOL_RESULT_BLOCKED.
// Send failures (a full inbox, a duplicate id, a message too large to
// record) are answered SendFailed.
// What the log could not hold is never asked of it (a record may be at
// most session.DefaultMaxRecordBytes, see actors/session/doc.go): a tool
// result that large becomes the call's error result
// TOOL_OUTPUT_TOO_LARGE, naming its size and the limit, and the turn goes
// on; a stream chunk or an assembled assistant message that large is not
// recorded and ends the turn {error} (CodeMessageTooLarge); a compaction
// summary that large fails the compaction (compaction/end {error}); an
// event a running tool emits that large is refused to the tool by
// Call.Emit (session.ErrTooLarge) and not appended. So a model's or a
// tool's output never crashes the agent into a restart.
// A hook's panic (PreStep, TurnStopping, StepEnd, Request, RequestError) is
// recovered and treated as its error: the turn ends {error} and the
// observer gets TurnFailed. So is a panic of the other embedder callbacks
// run inside Receive: Routes (asked for a request's adapter defaults and
// context window, and for the pressure check at pre-step), and
// CompactionConfig.EstimateTokens and NewID (at the pressure check, when
// a compaction picks its span or mints its id, in the pruner); the
// failure is "agent: <routes | estimate-tokens | new-id> callback
// panicked: <value>". A compaction bracket already open is closed
// compaction/end {error}; a manual Compact is answered CompactFailed
// (nothing logged when the bracket never opened). A tool's Mode panic is
// that call's error result, as a panicking body's is (TOOL_PANIC, "tool
// <name> mode panicked: <value>"): the body does not run, the turn goes
// on. A tool's Schema (and the provider's Name) are asked once, by Props,
// which refuses a panicking one with an error. A maintenance task's
// panic is recovered too, and answered as the task's error (see
// Maintenance). The actor panics, so that its supervisor restarts it
// from the log, when its view of the log is wrong: the session refuses
// one of its appends or the inbox a claim, the mirror sees a gap.
//
// # Restart
//
// On a restart protoactor stops the children (inbox, stream actor: the
// model call is cancelled) before the new incarnation starts with the same
// PID. The dying incarnation cancels its goroutines' context and its
// timer, re-queues the WaitIdle and Dispose requests it held (with their
// senders), carries the callers of its forwarded sends over (the old
// inbox's answer, if it gave one, is in the mailbox), and answers pending
// Compact and maintenance requests with an error. Every incarnation draws
// a new epoch that all its refs carry (refShift): replies, chunks, tool
// and hook results and timer ticks meant for a dead incarnation are
// dropped. If the log it replays has an open turn (the dead incarnation
// crashed inside it), it appends session.InterruptedTurnClosers
// (synthetic tool results, step/end, turn/end {interrupted}) through the
// session actor and builds its driver only once the subscription has
// delivered them. It then comes up idle: inbox work left pending stays
// parked until the next waking send (as after a resume from disk); a
// claim committed by the dead incarnation whose messages were not yet
// entered into a step is not re-delivered. A send in flight whose inbox
// answer was lost with the old inbox goes unanswered (the caller's
// timeout decides).
//
// # Extension points
//
// Hooks (docs/agent-loop.md#extension-points): PreStep (enter | reject; the
// decision may also carry Preface events, recorded before step/start, and
// Entries — plugin-sourced messages and foreign log-only events such as
// session/title — recorded in order after the entered messages, which is how
// the log replay re-inserts recorded plugin contributions), Request,
// RequestError, TurnStopping, and the tool pipeline PreExecute (allow | deny
// | ask), Approver, PostExecute (accept | block, additional contexts). The
// pre-step hook is not consulted at a step boundary that found next-step
// empty after a finished step (docs/agent-loop.md#turns-and-steps).
//
// StepEnd (agent/step-end, dsh's own; stepend.go) runs at every step
// boundary of a turn that goes on: once step/end is committed and the
// boundary's claim is answered, before pressure compaction, the pre-step
// hook, turn-stopping or the end of the turn. That is where the
// reference's plugins act on step/end (from a session/event listener,
// after the loop's synchronous claim). Its decision is a list of
// contributions performed in order before the loop goes on: log-only
// events (foreign or unknown types, as a Preface) and inbox operations
// (inject, steer, followup, remove; each waits for the appends before it
// and for the inbox's answer). A message it puts in next-step enters at
// the next boundary; when the turn would end here, the loop claims again
// and runs another step for it. A refused inbox operation is dropped (and
// logged); an error, a panic or an invalid contribution ends the turn
// {error}. The log replay delivers the recorded step-boundary
// contributions through it, so that they do not race the next claim.
//
// # Runtime-context snapshot
//
// runtimecontext.go (docs/agent-loop.md#runtime-context): the dynamic prompt
// sections (Config.RuntimeContext, a RuntimeContext of named sections such as
// sandbox:policy and approval:policy) are not in the system prompt. They
// travel as a user/message with source {kind:plugin,
// plugin:@deepseek-ai/dsh-system-prompt, form:snapshot, sections:[{name,
// text}...]} and one text block: a preamble (this snapshot supersedes earlier
// ones), then each section's text after a blank line (the reference's
// rendering, checked byte for byte against every snapshot of the corpus). At
// pre-step, after the pressure compaction, the candidate is appended to the
// default enter batch (claimed + [snapshot]) only when its text differs from
// the last snapshot still on the surface; with a pre-step hook it is offered
// as PreStepInput.Snapshot and appended to an entering decision that does not
// carry it already. It never opens a step alone (an empty first claim still
// completes the turn empty). The projection of the retained snapshot is
// rebuilt from the log the first time it is needed (after a resume: the last
// snapshot recorded, if still a surface node) and then follows the committed
// events: a snapshot is the retained one, a replace that shadows it forgets
// it (so it is sent again; the reference does not fall back on an earlier
// one). When every section is gone, a text saying that no runtime context
// applies any more is sent once, if a snapshot other than it is retained. Off
// by default: an empty Config.RuntimeContext sends nothing and builds no
// projection until a SetRuntimeContext (which turns it on even when empty, so
// that a cleared context sends the none text). Like SetSystem's prompt, a
// context set by message is not carried over a restart: the new incarnation
// starts from Config.RuntimeContext.
//
// # Compaction
//
// compaction.go (docs/agent-loop.md#compaction) compacts the surface on three
// triggers:
//
//   - context-overflow: a failed attempt whose failure code is
//     CONTEXT_WINDOW_EXCEEDED compacts first (before the RequestError
//     hook), then retries the attempt in the same step, with no llm/retry
//     and no backoff, only if the surface's replace generation advanced;
//     otherwise the failure takes the ordinary request-error path. At most
//     two per step.
//   - pressure: after a claim, before the pre-step hook (the reference's
//     compaction listener precedes the hook bridges), the request is
//     estimated (the surface's messages, the claimed batch, the system
//     prompt and the tool schemas; the default estimate or
//     CompactionConfig.EstimateTokens, the prompt and schemas at bytes/4)
//     against floor(contextWindow × 0.8), the window being the route's
//     (Route.ContextWindow) for the config in force. No window, no
//     pressure.
//   - manual: Compact between turns (turn null); answered CompactBusy
//     while a turn runs. A turn woken meanwhile starts after the bracket.
//
// The bracket is compaction/start, the summariser call (through a stream
// actor, purpose "compaction", the same system prompt and tools, the
// shadowed messages and a fixed final instruction that is sent, not
// logged; its chunks are not logged), compaction/summary, the checkpoint
// user/message (source {kind:plugin, plugin:compact, compactionId};
// a preamble (an automatically generated checkpoint) + the summary +
// </compacted-summary>; surface
// replace over the shadowed span; sourceEventSeqs [start, summary,
// ...shadowed]) and compaction/end. A failed, empty or cancelled summary
// writes compaction/end {error} and leaves the surface untouched. The
// shadowed span is the surface's prefix before the most recent tail that
// holds RetainRatio (0.16) of the estimated tokens, its edge moved back
// (retaining more) until no tool call is separated from its results. The
// lock is the durable bracket: an unmatched compaction/start after the
// newest session/end-seed is live and makes every trigger busy (it is
// rebuilt from the log at start). Ids come from CompactionConfig.NewID
// (the log replay hands out the recorded ones).
//
// The tool-result pruner (CompactionConfig.PruneToolResultBytes, off by
// default) runs after compaction/start is committed and before the
// summariser call, in compactions inside a turn only (the trace invariant
// puts a tool/result replace inside a turn; a manual compaction between
// turns does not prune): each tool result of the shadowed span whose
// model-visible content exceeds the bound gets compaction/prune
// {shadowedRange, shadowedSeqs, shadowedTokenCount} and a tool/result
// replace of that single node (same data, content = "[tool result pruned by compaction: N bytes omitted]"),
// in one atomic append. The summariser then sees the pruned content, and
// the checkpoint shadows the replacements. Prunes are durable: they stay
// when the summary fails.
//
// # Cancellation
//
// docs/agent-loop.md#cancellation is tested systematically
// (cancelpoints_test.go): one turn through every phase is cancelled (cause
// user, and by Dispose) at every event of its log, and each log must be
// balanced, pass CheckTrace, pair every tool/call with a tool/result, cite no
// chunk of a failed attempt from an assistant/message, and let the next turn
// complete. Chunks that arrive after the abort are dropped (no finish chunk
// is logged), and an attempt whose error finish arrived before the abort
// writes no assistant message.
//
// # Maintenance
//
// RunMaintenance (maintenance.go; docs/agent-loop.md#the-agent) runs a task on
// an idle agent, in a goroutine it owns, under a fresh abort signal:
// refused (ErrNotIdle) unless idle and not disposed; the status stays
// idle; WaitIdle waits for it; Compact and another task are busy; a
// waking send meanwhile is latched and its turn starts when the task
// returns (before the reply); Cancel and Dispose cancel the task's
// context (Cancel without KeepInbox also clears the inbox and drops the
// latch). A task's panic is recovered in its goroutine and is the task's
// error ("agent: maintenance task panicked: <value>"; the stack is logged
// at error level through the actor system's logger, not put in the
// error): the task ends as if it had returned that error, so the agent
// stays idle and a latched send starts its turn.
//
// # Not done yet
//
// Per-listener tools/execute wrapping. Post-execute runs in the call's
// goroutine right after the body rather than at commit time in model
// order (see ToolPostExecuteHook). The pressure estimate leaves the
// runtime-context snapshot candidate out (it is built after the pressure
// compaction, which may shadow the retained one).
package agent
