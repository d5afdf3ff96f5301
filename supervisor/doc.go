// Package supervisor is the host: many sessions in one process
// (docs/architecture.md#actors, docs/architecture.md#interfaces-for-people).
// A [Host] owns a persister, a store and, for each resident session,
// a session actor (the only writer of its log) and an agent actor (which
// spawns its inbox and one stream actor per model call as children).
//
// # Embedding
//
//	h, err := supervisor.Open(supervisor.Config{Dir: dir}) // "" = memory only
//	id, err := h.Create(ctx, supervisor.CreateOptions{})
//	err = h.Followup(ctx, id, msg)
//	err = h.WaitIdle(ctx, id) // idle, and the turn is durable
//	msgs, err := h.Messages(ctx, id)
//	err = h.Close(ctx)
//
// [Sessions] is the interface of a place where sessions live, with those
// verbs: a *Host implements it, and so does a cluster's client
// (cluster.Client), so code written against Sessions (dsh run and chat,
// the HTTP server of package httpapi) runs on one process or a cluster
// alike.
//
// With Config.System the host's actors live in the caller's actor system,
// and the session's actors are reachable as PIDs ([Host.SessionPID],
// [Host.AgentPID], [Host.PersisterPID]) speaking the protocols documented
// in packages session, agent and persister, so other actors can talk to a
// session directly (query it, subscribe to it, send it followups).
//
// # Durability
//
// Every committed event is written behind by the persister (JSONL+zstd
// under Config.Dir). [Host.WaitIdle] returns only once the session is idle
// and everything it logged is written and fsynced (a persister Flush up to
// the last seq); [Host.Flush] is the same barrier without waiting for
// idle. [Host.Close] disposes every agent (a running turn ends {aborted,
// disposed}), flushes and untracks every session, then stops the agents,
// the sessions, the subscriptions and the persister, in that order.
//
// A failed write (a full disk, an I/O error) loses nothing: the events
// stay queued in the persister and WaitIdle or Flush return the error.
// The persister retries on its own, with nobody calling Flush: after the
// n-th consecutive failure of a session's writes it retries
// Config.WriteRetryMin·2^(n-1) later, at most Config.WriteRetryMax (100ms,
// 200ms, 400ms, ... then every 5s with the defaults), for as long as the
// write fails, as a barrier of everything the session logged. While the
// session's last write has failed, Followup and Steer answer
// [ErrNotDurable] (fail closed: no new turn starts on a log whose end is
// not on disk); the first write that succeeds (a background retry, a
// Flush, or the write-behind of later events) opens the session again.
// [Stats] counts the failures (WriteFailures) and the background retries
// (WriteRetries); Config.OnWriteFailed hears every failure. A session
// whose last write failed is not passivated. One evicted with events the
// persister could not write leaves them with the persister, which goes
// on retrying until a write succeeds or the host closes; Close stops
// every retry (the persister stops its timers when it stops), so no
// timer or goroutine outlives the host.
//
// # Resuming
//
// A stored session that is not resident is resumed on demand by every
// method that names it (or explicitly by [Host.Resume]): the store's Load
// commits crash repair, the log is rebuilt from the loaded events with
// session.AdoptSeeded (taken over, not copied) and tracked from the
// loaded length. [Host.List] and [Host.Peek] never
// resume: they read a stored session through the store's listing and
// Inspect (nothing written, no lock taken).
//
// # One writer per session
//
// A host with Config.Dir takes each session's writer lock (session.lock
// beside its log; persister.JSONLConfig.Lock) before the session's first
// write or its resuming Load, and holds it while the session is resident:
// passivation and [Host.Evict] give it back, resuming takes it again. So
// two processes on one directory (two hosts, a dsh run, a cluster member)
// never both write a session: the second's Resume, Followup or any call
// that resumes fails at once, changing nothing, with a
// *persister.LockedError ("session S is in use by pid N on HOST"), and a
// Create under an id already stored fails with [ErrExists]. Each resident
// session holds one file descriptor for its lock.
//
// # Subscriptions
//
// [Host.Subscribe] replays the past from a seq, then delivers live events,
// through a bounded channel; a subscriber that falls behind is dropped
// with [ErrSlowSubscriber] and never stalls the session.
//
// # Observers
//
// Config.Observers (telemetry.Observer) watch every session's committed
// events: each is opened when a session becomes resident, with its id and
// the events it already holds, and what it returns is called inside the
// session actor with each event committed from then on (cheap, never
// blocking; failures contained). Metrics and traces are built there, from
// the log, not from calls spread through the agent loop.
//
// # Errors
//
// [ErrClosed], [ErrNoSession], [ErrExists], [ErrSlowSubscriber]; errors of
// the underlying actors (agent.ErrDisposed, inbox.ErrInboxFull, a
// *session.ForkError, a persister write error) are returned wrapped or as
// they are; match with errors.Is / errors.As.
//
// # Passivation, limits, failing closed
//
// With Config.IdleTimeout a session idle that long (no host call using
// it, no turn open, no open Subscription, its last write not failed) is
// passivated: untracked (flushed) and its actors stopped; the next call
// naming it resumes it from the store. The idle timer is a time.AfterFunc
// per resident session whose callback goroutine the host joins on Close.
// [Host.Resident], [Host.Passivated] and Stats.ResidentBytes (a documented
// estimate) account for it. The mailboxes of the persister and of every
// session and agent actor run on worker goroutines the host keeps
// (workers.go) rather than on a new goroutine per wake-up, those on a
// barrier's path (the persister, its shards, the host's notices) in a
// first lane that a worker runs as soon as its current run ends
// (docs/performance.md#fsync-completions); Close joins them once the
// actors are stopped. Config.MaxConcurrentModelCalls bounds
// the model calls open at once: the rest wait in a queue (the
// dsh.model.calls.queued gauge of Config.MeterProvider). [Host.Stats]
// covers the whole log (the loaded events are folded on resume) and stays
// readable after a passivation. A session whose last write failed is not
// passivated (it stays resident, retried; see Durability).
//
// # Cluster members
//
// A host inside a cluster member (package cluster) runs with
// Config.ManualResume: only Create, Resume and Fork bring a session in,
// so a session is resident only where its grain decided it lives, and
// [Host.Evict] lets one go at once (a running turn disposed, flushed,
// untracked — which releases the store's writer lock — and stopped) when
// it moves to another member.
//
// # Supervision
//
// Tested by fault injection (fault_test.go, crash_test.go): a panicking
// tool body (an error result), provider (a failed call), session observer
// (contained), agent hook (Request, PreStep: recovered by the agent, the
// turn ends in error), and a process killed mid-turn (the log is repaired
// on resume). An agent actor that does crash mid-turn is restarted by
// protoactor and closes the open turn itself (turn/end {interrupted},
// through the session actor) before it resumes; see actors/agent.
//
// A panic inside the session actor is tested through
// Config.OnObserverFailure (TestFaultSessionActorPanic: the failure hook
// of a failing Config.SessionObservers entry panics mid-turn, after the
// commit). protoactor restarts the session actor; its log and
// subscriptions live in a shell shared by its incarnations, and the
// restarted instance answers the Append the crash interrupted (its events
// if the batch committed, else session.ErrRestarted), then sends the
// subscribers what they missed. So the turn completes, the persister
// writes every committed event (a fresh host loads them all), the log is
// valid and balanced after WaitIdle, and the session answers the next
// followup. Observers that had not yet seen the crashed batch miss it.
//
// A panic inside the inbox actor is tested in actors/inbox
// (TestActorRestartRebuildsFromTheLog, TestActorRestartAnswersEveryRequestOnce):
// the restarted inbox rebuilds its lists from the log, which holds every
// committed splice, then answers the requests the crash interrupted (they
// live in a shell shared by its incarnations, as the session actor's
// do): the one whose append committed as committed (telling the owner
// the changes it had not been told), a refused one as refused, one being
// planned with inbox.ErrRestarted; then it resumes the queued ones in
// order. So a host call forwarded to it (Followup, Steer) and an agent
// waiting for a Claim get their answer. Not covered at this level: the
// real inbox panics only when its session answers an append with events
// that do not match the batch (or its log does not replay), and the real
// session actor never does, even across its own restart (it answers the
// interrupted Append with the committed batch); there is no injection
// seam short of a fake session, which the actors/inbox tests use.
package supervisor
