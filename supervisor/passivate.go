package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
)

// The constants of the memory estimate (Stats.ResidentBytes). They are
// rough: sessionOverheadBytes stands for the two actors with their
// mailboxes and processes, the inbox actor, the agent's driver and mirror
// structures, the persister's tracking state and the host's entry;
// eventOverheadBytes for an Event value, its slots in the log, the
// mirror and the surface index, and the derived message it may carry.
const (
	sessionOverheadBytes = 32 << 10
	eventOverheadBytes   = 192
)

// flushError marks an error a persister write reported (FlushFailed), as
// opposed to a failed request.
type flushError struct{ err error }

func (f flushError) Error() string { return f.err.Error() }
func (f flushError) Unwrap() error { return f.err }

// setFailure records a write failure; durable is the watermark that was
// durable before it. A failure the persister has recovered from already
// (the host heard Durable past that watermark: a retry succeeded before a
// FlushFailed reply was read) is not recorded: no later notice would
// clear it, and the session would stay closed for good.
func (e *entry) setFailure(err error, durable int64) {
	var ff flushError
	if errors.As(err, &ff) {
		err = ff.err
	}
	e.failMu.Lock()
	defer e.failMu.Unlock()
	if e.durable.Load() > durable {
		return
	}
	e.writeErr, e.failDurable = err, durable
}

// clearFailure forgets a write failure once the watermark moved past it,
// and reports whether it did (the session recovered).
func (e *entry) clearFailure(durable int64) bool {
	e.failMu.Lock()
	defer e.failMu.Unlock()
	if e.writeErr != nil && durable > e.failDurable {
		e.writeErr = nil
		return true
	}
	return false
}

// failure returns the write failure that keeps the session closed, or nil.
func (e *entry) failure() error {
	e.failMu.Lock()
	defer e.failMu.Unlock()
	return e.writeErr
}

// Resident returns the number of sessions whose actors are running.
func (h *Host) Resident() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, e := range h.sessions {
		select {
		case <-e.ready:
			if e.err == nil {
				n++
			}
		default:
		}
	}
	return n
}

// Passivated returns the number of passivations so far.
func (h *Host) Passivated() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.passivated
}

// residentBytes sums Stats.ResidentBytes over the resident sessions.
func (h *Host) residentBytes() int64 {
	h.mu.Lock()
	entries := make([]*entry, 0, len(h.sessions))
	for _, e := range h.sessions {
		entries = append(entries, e)
	}
	h.mu.Unlock()
	var n int64
	for _, e := range entries {
		select {
		case <-e.ready:
			if e.err == nil {
				n += sessionOverheadBytes + e.bytes.Load()
			}
		default:
		}
	}
	return n
}

// armIdle starts e's idle timer (when passivation is on).
func (h *Host) armIdle(e *entry) {
	if h.cfg.IdleTimeout <= 0 || h.cfg.Policy == persister.PolicyNone {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armIdleLocked(e, h.cfg.IdleTimeout)
}

// armIdleLocked (re)starts e's idle timer to fire after d. The callback
// runs as a goroutine the host joins on Close (passWG).
func (h *Host) armIdleLocked(e *entry, d time.Duration) {
	if h.closed {
		return
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	e.timer = time.AfterFunc(d, func() {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return
		}
		h.passWG.Add(1)
		h.mu.Unlock()
		defer h.passWG.Done()
		h.tryPassivate(e)
	})
}

// tryPassivate passivates e if it has been idle for IdleTimeout: no host
// call using it, no open subscription, no open turn, no write failure;
// otherwise it re-arms the timer. An empty session (never appended to,
// so never stored) is not passivated.
func (h *Host) tryPassivate(e *entry) {
	timeout := h.cfg.IdleTimeout
	h.mu.Lock()
	if h.closed || h.sessions[e.id] != e || e.passivating != nil {
		h.mu.Unlock()
		return
	}
	idle := time.Since(h.epoch) - time.Duration(e.lastUse.Load())
	switch {
	case e.events.Load() == 0 || e.inflight > 0 || e.subs > 0 || e.open.Load() || e.failure() != nil:
		// An empty session is not stored (a store materializes a session
		// on its first append): it would not come back, so it waits too.
		h.armIdleLocked(e, timeout)
		h.mu.Unlock()
		return
	case idle < timeout:
		h.armIdleLocked(e, timeout-idle)
		h.mu.Unlock()
		return
	}
	done := make(chan struct{})
	e.passivating = done
	h.mu.Unlock()

	err := h.passivate(e)

	h.mu.Lock()
	if err == nil {
		delete(h.sessions, e.id)
		h.parked[e.id] = packStats(e.stats())
		h.passivated++
		h.logger.Debug("session passivated", "session", string(e.id))
	} else {
		h.armIdleLocked(e, timeout)
	}
	e.passivating = nil
	close(done)
	h.mu.Unlock()
}

// passivate stops an idle session: it confirms the agent is idle, untracks
// the session (a flush; on failure the session stays resident and
// tracked), then stops the agent and the session actor. The inbox's
// staged content, if any, is in the log (every inbox change is appended
// first) and comes back on resume.
func (h *Host) passivate(e *entry) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(h.cfg.RequestTimeout, 5*time.Second))
	defer cancel()
	if _, err := h.ask(ctx, e.agent, agent.WaitIdle{Ref: h.refs.Add(1)}); err != nil {
		return fmt.Errorf("not idle: %w", err)
	}
	if e.open.Load() {
		return errors.New("a turn started")
	}
	cancel()
	if err := h.untrackIdle(e); err != nil {
		return err
	}
	// Untracked, the session must leave the host whatever happens next: a
	// stop that outlasts the future's wait is still under way (the poison
	// is in the mailbox), so wait again; a stopped actor answers at once.
	for _, pid := range []*actor.PID{e.agent, e.session} {
		for h.sys.Root.PoisonFuture(pid).Wait() != nil && !h.isClosed() {
		}
	}
	return nil
}

// untrackIdle untracks e for passivation and says how the untrack ended.
// An untrack cannot be abandoned half way: the persister may complete it
// after a wait has given up, and a session left resident but untracked
// would log turns that nothing persists. So a wait that runs out asks
// again: an Untrack of a session being drained waits for the same drain,
// and one of a session already forgotten is answered ErrNotTracked, which
// after a lost answer means the earlier Untrack went through. A flush
// failure leaves the session tracked (and resident).
func (h *Host) untrackIdle(e *entry) error {
	for asked := false; ; asked = true {
		ctx, cancel := context.WithTimeout(context.Background(), min(h.cfg.RequestTimeout, 5*time.Second))
		d, err := h.barrier(ctx, persister.Untrack{Ref: h.refs.Add(1), ID: e.id})
		cancel()
		switch {
		case err == nil, asked && errors.Is(err, persister.ErrNotTracked):
			return nil
		case (errors.Is(err, actor.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)) && !h.isClosed():
			continue
		default:
			e.setFailure(err, d)
			return err
		}
	}
}

// ErrEvicted ends the Subscriptions of a session evicted by Host.Evict.
var ErrEvicted = errors.New("supervisor: session evicted from this host")

// Evict makes a resident session non-resident now, whatever it is doing:
// a running turn is disposed (it ends {aborted, disposed}), everything
// logged is flushed, the session is untracked (which releases its writer
// lock when the store takes one, see persister.JSONLConfig.Lock), its
// open Subscriptions end with ErrEvicted and its actors stop. Evicting a
// session that is not resident does nothing. A cluster member evicts a
// session that moves to another member. On error (a flush that failed)
// the session is gone from the host all the same; what the persister
// could not write stays with it, retried, and the writer lock with it.
func (h *Host) Evict(ctx context.Context, id session.SessionID) error {
	e, err := h.lockSettled(ctx, id)
	if err != nil {
		return err
	}
	if e == nil {
		h.mu.Unlock()
		return nil
	}
	done := make(chan struct{})
	e.passivating = done
	if e.timer != nil {
		e.timer.Stop()
	}
	var subs []*subscription
	for s := range h.subs {
		if s.e == e {
			subs = append(subs, s)
		}
	}
	h.mu.Unlock()

	for _, s := range subs {
		s.stop(ErrEvicted)
	}
	err = h.stopSession(ctx, e)

	h.mu.Lock()
	if h.sessions[id] == e {
		delete(h.sessions, id)
	}
	if e.err == nil {
		h.parked[id] = packStats(e.stats())
	}
	e.passivating = nil
	close(done)
	h.mu.Unlock()
	if err != nil {
		return fmt.Errorf("supervisor: evict %s: %w", id, err)
	}
	return nil
}

// isClosed says whether Close has begun.
func (h *Host) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}
