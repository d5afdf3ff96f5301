package persister

import (
	"fmt"
	"slices"
	"time"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/invariants"
)

// writeBehind is the write-behind state machine of one session: the
// reference's SessionWriteBehind
// (docs/durability.md#write-behind-and-barriers) as a pure core. It has no
// goroutines, no clock and no I/O: time comes in as an argument, the outcome
// of a write comes back through WriteDone, a timer expiry through Tick, and
// every method returns the effects the shell must perform. Not safe for
// concurrent use; the shard actor is its lock.
//
// W is the shell's token for a flush waiter (who to answer, with which
// ref). The core only stores and returns it.
//
// The algorithm, in the reference's terms:
//
//   - Enqueue appends committed events to the queue. An enqueue onto an
//     empty queue arms one fixed timer (now + window); later events do not
//     move it, so a batch waits at most one window from its first event.
//   - Tick (timer expiry) starts a background write of the whole queue if
//     no write is in flight; otherwise it records deadlineExpired and the
//     queued tail is written as soon as the write in flight finishes. A
//     tail whose own timer has not expired keeps waiting for it.
//   - At most one write is in flight. Everything that arrives during a
//     write — events and flush requests — joins the next batch (group
//     commit).
//   - A background write (the window, the size bound) is written but not
//     synced: its events are written, not durable. A flush barrier (Flush,
//     a policy checkpoint) cancels the timer and writes until the queue is
//     empty, every write of it synced (a barrier with nothing queued but
//     written events unsynced syncs them alone), so what was written before
//     it is durable with it; admission closes when the empty queue is
//     observed, so later events start a fresh window. Only a synced write
//     advances the durable watermark.
//   - A barrier that starts while a background write is in flight asks the
//     shell to promote it (Promote). If the write has not started yet, the
//     shell calls Fold: the queue joins the write's batch, which is then
//     synced. So a session's pending background batch folds into its
//     barrier write: one write, one fsync. If the write has started but
//     its store call has not returned, the shell may still call Fold,
//     late: the queue is then written, synced, by the same job right
//     after the background batch (no second trip through the shard's
//     mailbox and the pool's queue). WriteDone says whether the write was
//     synced.
//   - A failed write leaves the store at its last durable event (see
//     Writer.Append): the events written since (unsynced), the batch and
//     what arrived meanwhile go back to the queue, in order. It pauses
//     automatic writing, fails the waiters of the barrier it belonged to
//     and reports the error. The next enqueue resumes the timer and the
//     retry covers the old events and the new ones; a Flush or checkpoint
//     retries at once. (The shard adds a retry of its own on a backoff
//     timer, through Flush: see actor.go. The core stays the reference's.)
//
// Rejected alternative: one timer per event, or a sliding window that
// every event extends. Both starve a streaming session of writes (200
// deltas/s would never be written) and the reference does neither.
type writeBehind[W any] struct {
	policy   Policy
	window   time.Duration
	maxBatch int

	// durable is the highest seq written and fsynced; written the highest
	// seq written (synced or not); received the highest seq enqueued.
	// Invariant (unless PolicyNone, where all three are equal): received
	// == durable + len(unsynced) + len(inflight) + len(queue), written ==
	// durable + len(unsynced), and the seqs of unsynced, inflight then
	// queue are durable+1 ... received.
	durable  int64
	written  int64
	received int64

	unsynced []session.Event // written, not synced: requeued if a write fails
	queue    []session.Event // received, not in flight, in seq order
	inflight []session.Event // the batch being written (may be empty: a sync)
	writing  bool            // a write is in flight
	spare    []session.Event // a cleared buffer to reuse for the queue
	writeGen uint64          // names the write in flight
	// inflightByBarrier says the write in flight was started by the
	// barrier, so its failure fails the barrier. A background write that
	// the barrier merely overlaps is retried by the barrier instead (the
	// reference's barrier "waits for any overlapping write (settled)").
	inflightByBarrier bool

	timerArmed      bool
	timerGen        uint64 // names the armed timer; stale ticks are ignored
	deadlineExpired bool   // the tail's timer fired during a write
	paused          bool   // automaticPaused: no timer until the next enqueue
	failing         bool   // the last write failed; the size bound waits for the window
	barrier         bool   // a flush barrier is active

	waiters  []flushWaiter[W] // admitted: target ≤ received
	arriving []flushWaiter[W] // target > received: waiting for events
}

// flushWaiter is one Flush or Untrack waiting for target to be durable. A
// drain waiter (Untrack) also waits for the queue to empty and nothing to
// be in flight.
type flushWaiter[W any] struct {
	w      W
	target int64
	drain  bool
}

// effects is what the shell must do after a call into the core, in this
// order: cancel the timer, arm a timer, start the write, send the replies,
// notify the owner. Slices are owned by the shell afterwards, except Write,
// which the core keeps (to requeue it on failure) and nobody may modify.
type effects[W any] struct {
	// StartWrite asks for a store write of the batch Write (empty: a sync
	// of what was written before) in the background, synced if Sync; its
	// outcome comes back as WriteDone(WriteGen, synced, err).
	StartWrite bool
	Write      []session.Event
	WriteGen   uint64
	Sync       bool
	// Promote asks the shell to make the background write in flight
	// (WriteGen of an earlier effects) the barrier's if it has not started
	// (then the shell calls Fold and writes the batch Fold returns, synced).
	Promote bool
	// CancelTimer stops the armed timer (a later tick would be ignored
	// anyway; this spares the wake-up).
	CancelTimer bool
	// ArmTimer asks for Tick(TimerGen) at TimerAt. It replaces any earlier
	// timer.
	ArmTimer bool
	TimerAt  time.Time
	TimerGen uint64
	// Replies answer flush waiters.
	Replies []flushReply[W]
	// Durable, when HasDurable, is the new durable watermark for the owner.
	Durable    int64
	HasDurable bool
	// WriteFailed, when non-nil, is a write error for the owner.
	WriteFailed error
}

// flushReply answers a waiter: Flushed{Durable} if Err is nil, else
// FlushFailed{Durable, Err}.
type flushReply[W any] struct {
	W       W
	Durable int64
	Err     error
}

// seqGapError says a batch of committed events does not continue the
// received ones: events were lost on the way (or the subscription started
// past the stored next seq). The shell resubscribes from Want.
type seqGapError struct {
	Want, Got int64
}

func (e *seqGapError) Error() string {
	return fmt.Sprintf("persister: events skip from seq %d to %d", e.Want, e.Got)
}

// newWriteBehind returns the core of a session whose next event has seq
// next (its stored length): durable and received are next-1.
func newWriteBehind[W any](policy Policy, window time.Duration, maxBatch int, next int64) *writeBehind[W] {
	return &writeBehind[W]{policy: policy, window: window, maxBatch: maxBatch,
		durable: next - 1, written: next - 1, received: next - 1}
}

// Durable returns the highest durable seq (-1: none).
func (s *writeBehind[W]) Durable() int64 { return s.durable }

// Received returns the highest received seq (-1: none).
func (s *writeBehind[W]) Received() int64 { return s.received }

// Written returns the highest seq written to the store, synced or not
// (-1: none).
func (s *writeBehind[W]) Written() int64 { return s.written }

// Pending returns the number of received events not yet durable.
func (s *writeBehind[W]) Pending() int { return len(s.unsynced) + len(s.queue) + len(s.inflight) }

// Enqueue takes committed events (a view; events at or below Received are
// duplicates and skipped). If they do not continue Received it changes
// nothing and returns a *seqGapError.
func (s *writeBehind[W]) Enqueue(evs session.Events, now time.Time) (effects[W], error) {
	var e effects[W]
	n := evs.Len()
	i := 0
	for i < n && evs.At(i).Seq() <= s.received {
		i++
	}
	if i == n {
		return e, nil
	}
	for j := i; j < n; j++ {
		if want := s.received + 1 + int64(j-i); evs.At(j).Seq() != want {
			return e, &seqGapError{Want: want, Got: evs.At(j).Seq()}
		}
	}
	wasEmpty := len(s.queue) == 0
	checkpoint := false
	if s.policy == PolicyNone {
		for j := i; j < n; j++ {
			checkpoint = checkpoint || evs.At(j).Type() == session.TypeTurnEnd
		}
	} else {
		if s.queue == nil && s.spare != nil {
			s.queue, s.spare = s.spare, nil
		}
		for j := i; j < n; j++ {
			ev := evs.At(j)
			checkpoint = checkpoint || s.isCheckpoint(ev.Type())
			s.queue = append(s.queue, ev)
		}
	}
	s.received = evs.At(n - 1).Seq()

	if s.policy == PolicyNone {
		s.durable, s.written = s.received, s.received
		if checkpoint {
			e.Durable, e.HasDurable = s.durable, true
		}
		s.admitArriving(&e)
		s.replySatisfied(&e)
		s.check()
		return e, nil
	}

	s.admitArriving(&e)
	switch {
	case checkpoint:
		s.startBarrier(&e)
	case s.barrier:
		// Joins the barrier's next write.
	case len(s.queue) >= s.maxBatch && !s.failing:
		// The size bound: a background write now, not a barrier.
		s.paused = false
		s.cancel(&e)
		if s.writing {
			s.deadlineExpired = true
		} else {
			s.startWrite(&e)
		}
	case s.paused:
		// The next enqueue after a failure resumes the timer: a fresh
		// window, after which the failed batch is retried with these.
		s.paused = false
		s.arm(&e, now)
	case wasEmpty:
		s.arm(&e, now)
	}
	s.pump(&e)
	s.check()
	return e, nil
}

// Tick handles the expiry of timer gen. Stale ticks (a cancelled or
// replaced timer) are ignored.
func (s *writeBehind[W]) Tick(gen uint64) effects[W] {
	var e effects[W]
	if !s.timerArmed || gen != s.timerGen {
		return e
	}
	s.timerArmed = false
	if s.writing {
		s.deadlineExpired = true
		return e
	}
	s.startWrite(&e)
	s.check()
	return e
}

// WriteDone takes the outcome of write gen; synced says whether the store
// synced it (a barrier's write, or a background write promoted before it
// started). A gen that is not the write in flight is a broken invariant of
// the shell and returns an error.
func (s *writeBehind[W]) WriteDone(gen uint64, synced bool, err error) (effects[W], error) {
	var e effects[W]
	if !s.writing || gen != s.writeGen {
		return e, invariants.Assertf(false, "persister: write %d done, but the write in flight is %d (in flight: %t)", gen, s.writeGen, s.writing)
	}
	batch, byBarrier := s.inflight, s.inflightByBarrier || synced
	s.inflight, s.inflightByBarrier, s.writing = nil, false, false
	if err == nil {
		if len(batch) > 0 {
			s.written = batch[len(batch)-1].Seq()
		}
		s.failing = false
		if synced {
			s.durable = s.written
			e.Durable, e.HasDurable = s.durable, true
			clear(s.unsynced)
			s.unsynced = s.unsynced[:0]
			clear(batch) // drop the references; the store is done with it
			if s.spare == nil {
				s.spare = batch[:0]
			}
		} else {
			// Kept until a barrier syncs them: a failed write puts them
			// back in the queue.
			s.unsynced = append(s.unsynced, batch...)
			clear(batch)
			if s.spare == nil {
				s.spare = batch[:0]
			}
		}
		s.pump(&e)
		s.replySatisfied(&e)
		s.releaseIfIdle()
		s.check()
		return e, nil
	}

	// The store is back at the durable watermark: what was written since,
	// the batch and what arrived meanwhile go back to the queue, in order.
	s.queue = slices.Concat(s.unsynced, batch, s.queue)
	clear(s.unsynced)
	s.unsynced = s.unsynced[:0]
	s.written = s.durable
	s.failing = true
	e.WriteFailed = err
	if s.barrier && !byBarrier {
		// A background write failed under a barrier that overlapped it:
		// the barrier now writes the whole queue itself, and only its own
		// failure fails its waiters.
		s.pump(&e)
		s.check()
		return e, nil
	}
	s.paused = true
	s.barrier = false
	s.deadlineExpired = false
	s.cancel(&e)
	for _, w := range s.waiters {
		e.Replies = append(e.Replies, flushReply[W]{W: w.w, Durable: s.durable, Err: err})
	}
	s.waiters = nil
	s.check()
	return e, nil
}

// Fold makes the write gen in flight, a background write, the barrier's:
// what is queued joins its batch, synced. It returns the new batch (owned
// by the core, like effects.Write). The shell calls it only after a
// Promote, before it returns to the core. Not late, the write has not
// started: the shell writes the new batch instead, synced, and the write
// is the barrier's (its failure fails the barrier's waiters). Late, the
// write's store call is running: the shell writes the rest of the new
// batch after it, synced, in the same job, and reports the outcome of
// both as one WriteDone (synced if the second call ran). A late fold stays
// a background write that the barrier overlaps: if it fails, the barrier
// writes everything again itself, and only that write's failure fails
// its waiters, as without the fold.
func (s *writeBehind[W]) Fold(gen uint64, late bool) []session.Event {
	if !s.writing || gen != s.writeGen || !s.barrier {
		_ = invariants.Assertf(false, "persister: fold of write %d, but the write in flight is %d (in flight: %t, barrier: %t)", gen, s.writeGen, s.writing, s.barrier)
		return s.inflight
	}
	s.inflight = append(s.inflight, s.queue...)
	clear(s.queue)
	s.queue = s.queue[:0]
	if !late {
		s.inflightByBarrier = true
	}
	s.check()
	return s.inflight
}

// Flush adds a waiter: answered once every event up to upTo (-1: up to
// what has been received) is durable, or failed with the barrier's write
// error. A waiter for events not yet received waits for them to arrive and
// then starts a barrier.
func (s *writeBehind[W]) Flush(w W, upTo int64) effects[W] {
	fw := flushWaiter[W]{w: w, target: s.received}
	if upTo >= 0 {
		fw.target = upTo
	}
	return s.addWaiter(fw)
}

// Drain is Flush for Untrack: the waiter is answered once everything
// received is durable and nothing is queued or in flight any more (events
// that arrive during the barrier's writes are waited for too).
func (s *writeBehind[W]) Drain(w W) effects[W] {
	return s.addWaiter(flushWaiter[W]{w: w, target: s.received, drain: true})
}

func (s *writeBehind[W]) addWaiter(fw flushWaiter[W]) effects[W] {
	var e effects[W]
	if fw.target > s.received {
		s.arriving = append(s.arriving, fw)
		return e
	}
	if s.satisfied(fw) {
		e.Replies = append(e.Replies, flushReply[W]{W: fw.w, Durable: s.durable})
		return e
	}
	s.waiters = append(s.waiters, fw)
	s.startBarrier(&e)
	s.pump(&e)
	s.check()
	return e
}

// Abandon fails every waiter, admitted or still waiting for events, with
// err, and forgets them: the shell is dropping the session (untracked, or
// the persister is stopping). The queue is left as it is.
func (s *writeBehind[W]) Abandon(err error) []flushReply[W] {
	var out []flushReply[W]
	for _, ws := range [][]flushWaiter[W]{s.waiters, s.arriving} {
		for _, w := range ws {
			out = append(out, flushReply[W]{W: w.w, Durable: s.durable, Err: err})
		}
	}
	s.waiters, s.arriving = nil, nil
	return out
}

// isCheckpoint reports whether an event of type t starts a barrier under
// the policy.
func (s *writeBehind[W]) isCheckpoint(t session.EventType) bool {
	switch t {
	case session.TypeTurnEnd:
		return true
	case session.TypeRequestHeader, session.TypeToolCall:
		return s.policy == PolicyStrict
	}
	return false
}

// admitArriving moves the waiters whose events have all arrived into the
// barrier (answering those already satisfied).
func (s *writeBehind[W]) admitArriving(e *effects[W]) {
	if len(s.arriving) == 0 {
		return
	}
	kept := s.arriving[:0]
	admitted := false
	for _, w := range s.arriving {
		switch {
		case w.target > s.received:
			kept = append(kept, w)
		case s.satisfied(w):
			e.Replies = append(e.Replies, flushReply[W]{W: w.w, Durable: s.durable})
		default:
			s.waiters = append(s.waiters, w)
			admitted = true
		}
	}
	clear(s.arriving[len(kept):])
	s.arriving = kept
	if admitted {
		s.startBarrier(e)
	}
}

// startBarrier makes the core write until the queue is empty and sync.
// A background write in flight is asked to be promoted (synced).
func (s *writeBehind[W]) startBarrier(e *effects[W]) {
	if s.writing && !s.inflightByBarrier && !s.barrier {
		e.Promote, e.WriteGen = true, s.writeGen
	}
	s.barrier = true
	s.paused = false
	s.deadlineExpired = false
	s.cancel(e)
}

// pump starts the next write if one is due and none is in flight. When it
// finds the queue empty and nothing unsynced, barrier admission closes.
func (s *writeBehind[W]) pump(e *effects[W]) {
	if s.writing {
		return
	}
	if len(s.queue) == 0 {
		if s.barrier && s.written > s.durable {
			s.startWrite(e) // a sync of what was written before
			return
		}
		s.barrier = false
		s.deadlineExpired = false
		return
	}
	if s.barrier || s.deadlineExpired {
		s.deadlineExpired = false
		s.startWrite(e)
	}
}

// startWrite hands the whole queue to a write: synced under a barrier.
func (s *writeBehind[W]) startWrite(e *effects[W]) {
	s.inflight, s.queue = s.queue, s.spare
	s.spare = nil
	s.writing = true
	s.inflightByBarrier = s.barrier
	s.writeGen++
	e.StartWrite, e.Write, e.WriteGen, e.Sync = true, s.inflight, s.writeGen, s.barrier
	e.Promote = false
}

// releaseIfIdle drops the event buffers once nothing is pending: the
// queue, the spare and the written-unsynced list are kept across the
// windows of a turn (a streaming session refills them every window), but a
// session whose turn has ended durable may stay idle for hours, and a
// thousand of them would each keep arrays sized for their largest batch.
// The next turn grows them again from nothing.
//
// Rejected alternative: keep a small spare. Even a few dozen events' worth
// of capacity is more than the rest of an idle session's write-behind
// state.
func (s *writeBehind[W]) releaseIfIdle() {
	if s.writing || len(s.queue) > 0 || len(s.unsynced) > 0 {
		return
	}
	s.queue, s.spare, s.unsynced = nil, nil, nil
	if len(s.waiters) == 0 {
		s.waiters = nil
	}
}

// arm starts the window of the queue's first event.
func (s *writeBehind[W]) arm(e *effects[W], now time.Time) {
	s.timerArmed = true
	s.timerGen++
	e.ArmTimer, e.TimerAt, e.TimerGen = true, now.Add(s.window), s.timerGen
	e.CancelTimer = false
}

// cancel disarms the timer, if armed.
func (s *writeBehind[W]) cancel(e *effects[W]) {
	if s.timerArmed {
		s.timerArmed = false
		e.CancelTimer = true
		e.ArmTimer = false
	}
}

// satisfied reports whether w can be answered now.
func (s *writeBehind[W]) satisfied(w flushWaiter[W]) bool {
	if s.durable < w.target {
		return false
	}
	return !w.drain || (len(s.queue) == 0 && !s.writing)
}

// replySatisfied answers every admitted waiter that is satisfied.
func (s *writeBehind[W]) replySatisfied(e *effects[W]) {
	if len(s.waiters) == 0 {
		return
	}
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if s.satisfied(w) {
			e.Replies = append(e.Replies, flushReply[W]{W: w.w, Durable: s.durable})
		} else {
			kept = append(kept, w)
		}
	}
	clear(s.waiters[len(kept):])
	s.waiters = kept
}

// check asserts the core's invariants in builds with -race or -tags
// invariants (it panics there); otherwise it does nothing.
func (s *writeBehind[W]) check() {
	if !invariants.Enabled {
		return
	}
	_ = invariants.Assertf(!s.timerArmed || len(s.queue) > 0, "persister: timer armed on an empty queue")
	_ = invariants.Assertf(!s.deadlineExpired || s.writing, "persister: deadline expired with no write in flight")
	_ = invariants.Assertf(!s.barrier || s.writing, "persister: barrier active with no write in flight")
	_ = invariants.Assertf(!(s.barrier && s.timerArmed), "persister: timer armed during a barrier")
	_ = invariants.Assertf(len(s.waiters) == 0 || s.barrier, "persister: %d waiters without a barrier", len(s.waiters))
	if s.policy == PolicyNone {
		_ = invariants.Assertf(s.durable == s.received && len(s.queue) == 0, "persister: PolicyNone queued events")
		return
	}
	_ = invariants.Assertf(s.written == s.durable+int64(len(s.unsynced)),
		"persister: written %d != durable %d + %d unsynced", s.written, s.durable, len(s.unsynced))
	_ = invariants.Assertf(s.received == s.written+int64(len(s.inflight)+len(s.queue)),
		"persister: received %d != written %d + %d in flight + %d queued", s.received, s.written, len(s.inflight), len(s.queue))
	next := s.durable + 1
	for _, part := range [][]session.Event{s.unsynced, s.inflight, s.queue} {
		if len(part) > 0 {
			_ = invariants.Assertf(part[0].Seq() == next, "persister: queue starts at seq %d, want %d", part[0].Seq(), next)
			next += int64(len(part))
		}
	}
}
