package telemetry

import "github.com/dshgo/dsh/actors/session"

// Observer watches the events sessions commit: the one source of every
// event-derived metric and span (turns, steps, model calls, chunks, tokens,
// tool calls), so that none of them needs instrumentation in the agent
// loop. A host (supervisor.Config.Observers) calls Open each time a session
// becomes resident in it (created, forked, loaded, reactivated after a
// passivation), then calls what Open returned inside that session's actor
// with each event the session commits from then on.
//
// Open is called by the host's caller goroutines, concurrently for
// different sessions: an implementation must be safe for concurrent use.
// It is given the session's id and the events the session already holds
// (an immutable O(1) view of the log, for instance to find a turn left
// open before a reactivation; the observer may keep it). It returns the
// session's observer, or nil not to observe this session at all.
//
// The returned session.Observer belongs to one session: it is called from
// that session's actor only, one event at a time, in commit order, after
// the event committed and before the append is acknowledged. So it needs
// no lock for state of its own (state per session lives in its closure and
// is dropped with the session's log when the session leaves the host), but
// it runs on the append path of every event, streamed chunks included:
// it must be cheap (no allocation per event where it can be avoided), must
// never block (no I/O, no channel send that can wait, no lock held by
// anything slow), and must not keep the actor waiting on an exporter.
// Its error or panic is contained: it never undoes the append nor stops
// the other observers, and is handed to supervisor.Config.OnObserverFailure
// (logged at warn level by default).
//
// A host with no Observers pays nothing for the hook.
type Observer interface {
	Open(id session.SessionID, past session.Events) session.Observer
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(id session.SessionID, past session.Events) session.Observer

// Open calls f.
func (f ObserverFunc) Open(id session.SessionID, past session.Events) session.Observer {
	return f(id, past)
}
