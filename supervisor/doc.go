// Package supervisor is the host: many sessions in one process (DESIGN §4,
// §8). A [Host] owns a persister, a store and, for each resident session,
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
// # Resuming
//
// A stored session that is not resident is resumed on demand by every
// method that names it (or explicitly by [Host.Resume]): the store's Load
// commits crash repair, the log is rebuilt with session.NewSeeded and
// tracked from the loaded length.
//
// # Subscriptions
//
// [Host.Subscribe] replays the past from a seq, then delivers live events,
// through a bounded channel; a subscriber that falls behind is dropped
// with [ErrSlowSubscriber] and never stalls the session.
//
// # Errors
//
// [ErrClosed], [ErrNoSession], [ErrExists], [ErrSlowSubscriber]; errors of
// the underlying actors (agent.ErrDisposed, inbox.ErrInboxFull, a
// *session.ForkError, a persister write error) are returned wrapped or as
// they are; match with errors.Is / errors.As.
//
// # Not done yet
//
// Passivation, supervision by fault injection, and a host-wide bound on
// concurrent model calls (issue 6) are not implemented.
package supervisor
