package supervisor

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// entry is one resident session.
type entry struct {
	id     session.SessionID
	ready  chan struct{} // closed once spawned (or failed)
	err    error         // set before ready closes when the start failed
	header session.Header

	session, agent *actor.PID

	// Guarded by Host.mu.
	inflight    int           // host calls using the entry
	subs        int           // open Subscriptions (they pin it resident)
	passivating chan struct{} // non-nil while passivating; closed when done
	timer       *time.Timer   // the idle timer

	lastUse atomic.Int64 // ns since Host.epoch of the last use or turn/end
	open    atomic.Bool  // a turn is open in the log
	bytes   atomic.Int64 // estimated bytes of the resident log (see Stats.ResidentBytes)

	failMu      sync.Mutex
	writeErr    error // the last write failure, until a later write succeeds
	failDurable int64 // the durable watermark when it failed

	// Counted from the persister's notices (Stats.WriteFailures,
	// WriteRetries), carried over a passivation.
	writeFailures, writeRetries atomic.Int64

	// Folded by the session observer (in the session actor).
	events, chunks, turns             atomic.Int64
	inTokens, outTokens, reasonTokens atomic.Int64
	cacheRead, cacheWrite             atomic.Int64
	durable                           atomic.Int64
	// Messages pending in the inbox (its splices since the seed),
	// folded only when the host has metrics.
	inbox atomic.Int64

	// The turn ends committed but not yet reported durable, oldest
	// first: appended by the session observer, taken by the persister's
	// Durable notice. A notice can lag behind the next turn's end (the
	// host's notice actor is busy), so one slot would lose a turn's flush
	// latency; at most maxPendingTurnEnds are kept.
	turnEndsMu sync.Mutex
	turnEnds   []pendingTurnEnd // guarded by turnEndsMu
}

// pendingTurnEnd is a committed turn/end waiting to be durable.
type pendingTurnEnd struct {
	seq int64
	at  time.Duration // commit time, since the host's epoch
}

// maxPendingTurnEnds bounds entry.turnEnds (a store that stops answering
// must not grow it without end: a turn end whose flush failed fails the
// session closed, so more than a few never wait at once).
const maxPendingTurnEnds = 16

// turnEnded records a committed turn/end (called in the session actor).
func (e *entry) turnEnded(seq int64, at time.Duration) {
	e.turnEndsMu.Lock()
	if len(e.turnEnds) == maxPendingTurnEnds {
		e.turnEnds = append(e.turnEnds[:0], e.turnEnds[1:]...)
	}
	e.turnEnds = append(e.turnEnds, pendingTurnEnd{seq: seq, at: at})
	e.turnEndsMu.Unlock()
}

// turnEndsDurable removes the turn ends at or below seq and calls f with
// each one's commit time, oldest first (outside the lock).
func (e *entry) turnEndsDurable(seq int64, f func(seq int64, at time.Duration)) {
	e.turnEndsMu.Lock()
	n := 0
	for n < len(e.turnEnds) && e.turnEnds[n].seq <= seq {
		n++
	}
	if n == 0 {
		e.turnEndsMu.Unlock()
		return
	}
	done := slices.Clone(e.turnEnds[:n])
	e.turnEnds = append(e.turnEnds[:0], e.turnEnds[n:]...)
	if len(e.turnEnds) == 0 {
		e.turnEnds = nil // an idle session keeps no buffer
	}
	e.turnEndsMu.Unlock()
	for _, t := range done {
		f(t.seq, t.at)
	}
}

// observe folds the committed events of a session into its counters.
func (e *entry) observe(h *Host) session.Observer {
	return func(ev session.Event) error {
		e.events.Add(1)
		e.fold(h, ev, true)
		if h.testObserve != nil {
			h.testObserve(ev)
		}
		return nil
	}
}

// fold adds one event to the counters: live for an event committed while
// resident, !live for the events of a loaded log.
func (e *entry) fold(h *Host, ev session.Event, live bool) {
	e.bytes.Add(int64(ev.DataLen()) + eventOverheadBytes)
	switch ev.Type() {
	case session.TypeAssistantChunk:
		e.chunks.Add(1)
	case session.TypeAssistantMessage:
		if p, ok := ev.Payload().(session.AssistantMessage); ok && p.HasUsage {
			e.inTokens.Add(p.Usage.InputTokens)
			e.outTokens.Add(p.Usage.OutputTokens)
			e.reasonTokens.Add(p.Usage.ReasoningTokens.Or(0))
			e.cacheRead.Add(p.Usage.CacheReadTokens.Or(0))
			e.cacheWrite.Add(p.Usage.CacheWriteTokens.Or(0))
		}
	case session.TypeTurnStart:
		if live {
			e.open.Store(true)
		}
	case session.TypeLlmRetry:
		if live && h.cfg.Logger != nil {
			logRetry(h.logger, e.id, ev)
		}
	case session.TypeInboxSpliced:
		// A fork does not inherit its parent's inbox: splices of the seed
		// are not the session's (inbox.Rebuild skips them too).
		if h.metrics != nil && ev.Seq() >= e.header.SeedLength.Or(0) {
			if p, ok := ev.Payload().(session.InboxSpliced); ok {
				e.inbox.Add(int64(len(p.Inserted())) - p.RemovedCount.Or(0))
			}
		}
	case session.TypeTurnEnd:
		e.turns.Add(1)
		if live {
			e.open.Store(false)
			e.turnEnded(ev.Seq(), time.Since(h.epoch))
			e.lastUse.Store(int64(time.Since(h.epoch)))
		}
	}
}

// entryOf returns session id's entry as it stands, nil if the host has
// none: unlike resident, it neither waits for the session to be ready nor
// refuses after Close (a notice may arrive for a session going away).
func (h *Host) entryOf(id session.SessionID) *entry {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[id]
}

func (e *entry) stats() Stats {
	return Stats{Events: e.events.Load(), Chunks: e.chunks.Load(), Turns: e.turns.Load(), Durable: e.durable.Load(),
		Usage: messages.TokenUsage{InputTokens: e.inTokens.Load(), OutputTokens: e.outTokens.Load(),
			ReasoningTokens:  messages.Some(e.reasonTokens.Load()),
			CacheReadTokens:  messages.Some(e.cacheRead.Load()),
			CacheWriteTokens: messages.Some(e.cacheWrite.Load())},
		WriteFailures: e.writeFailures.Load(), WriteRetries: e.writeRetries.Load(),
		Resident: true, ResidentBytes: sessionOverheadBytes + e.bytes.Load()}
}
