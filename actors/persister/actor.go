package persister

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/dshgo/dsh/actors/session"
)

// The persister actor: a root that routes requests to cfg.Shards shard
// children by a stable hash of the session id, and a bounded pool of
// goroutines, owned by the root and shared by the shards, that runs every
// store call. A shard owns the write-behind cores (state.go) of its
// sessions and performs their effects:
//
//	effect            how
//	write a batch     a job on the pool: Store.Append with a deadline
//	                  (durable for a barrier's batch, which goes ahead of
//	                  background ones), then writeDone back to the shard
//	                  (never inside Receive); with a groupWriter store, the
//	                  writes due of many sessions in one appendGroup
//	                  (group.go)
//	release           a job on the pool once an Untrack drained the session:
//	                  Store.Release, then released back to the shard, which
//	                  answers the Untrack and forgets the session
//	arm/cancel timer  cfg.AfterFunc → tick{id, gen} back to the shard; stale
//	                  generations are ignored by the core
//	retry             after a failed write, cfg.AfterFunc(retryDelay) →
//	                  retryTick back to the shard, which starts a barrier
//	                  of everything received (a Flush nobody waits for)
//	reply             Flushed/FlushFailed to the sender remembered with the
//	                  waiter; Durable/WriteFailed to the session's owner
//
// Why a root and shards rather than one actor: a shard's Receive is the
// lock of its sessions, so sessions on different shards are enqueued,
// batched and answered in parallel; why not an actor per session: a
// per-session persister doubles the actors of a host for state that is a
// few words per idle session, and the cores are cheap to keep in a map.
//
// Lifecycle and goroutines. Nothing in Receive blocks, with one documented
// exception: when the root stops (after its shards have stopped) it closes
// the pool, which cancels the context of the store calls in flight and
// waits for the FsyncWorkers goroutines to return. Stopping drops what was
// not written yet (it is still in the session actors' logs): a host Flushes
// or Untracks every session before it stops the persister. Timer callbacks
// and pool jobs reach a shard only through its gate, which the shard closes
// in Stopping, so nothing is sent to a stopped shard (no dead letters).
//
// Failures. A store error is expected and is reported, never a crash
// (WriteFailed, FlushFailed, TrackFailed). The core, like the reference's
// write-behind, keeps a failed batch at the front of the queue and only
// writes it again with the next enqueue or flush; a session whose turn
// ended has neither, so on its own it would stay undurable (and its host
// closed to new turns) until someone flushed. So the shard retries in the
// background: every failed write arms a retry timer, retryDelay(attempt)
// later (exponential from RetryMin to RetryMax), which starts a barrier
// as a Flush would; the first write that succeeds (the retry or any
// other: the failed events are at the front of every later write) stops
// it and resets the backoff. Retries go on while the write fails: the
// events are never dropped while the process lives. Rejected
// alternative: the host retrying by calling Flush from a timer of its
// own. It would need a goroutine per failed session to join on Close,
// eviction and passivation, while the shard already owns the session's
// queue and timers and forgets them when it untracks or stops. A broken invariant of the core
// panics in -race/invariants builds; the shards are supervised with
// Resume, because their state (which events are durable, what is queued)
// exists nowhere else and a restarted shard would silently stop persisting
// its sessions.

// Props returns the props of a persister actor for cfg (with defaults for
// its zero fields). Each spawned persister has its own worker pool.
func Props(cfg Config) (*actor.Props, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	resume := actor.NewOneForOneStrategy(10, time.Second, func(any) actor.Directive { return actor.ResumeDirective })
	return actor.PropsFromProducer(func() actor.Actor { return &rootActor{cfg: cfg} },
		actor.WithSupervisor(resume)), nil
}

// rootActor routes requests to the shards and owns the pool.
type rootActor struct {
	cfg    Config
	pool   *pool
	shards []*actor.PID
}

// Receive routes Track, Flush and Untrack to the session's shard, keeping
// the original sender so the shard answers it directly.
func (r *rootActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		// A store that commits many sessions at once gets their writes
		// in groups (group.go).
		group, _ := r.cfg.Store.(groupWriter)
		r.pool = newPool(r.cfg.FsyncWorkers, group, r.cfg.WriteTimeout, r.cfg.Telemetry.syncedWrite())
		if t := r.cfg.Telemetry; t != nil {
			t.pool.Store(r.pool)
		}
		r.shards = make([]*actor.PID, r.cfg.Shards)
		cfg, p := r.cfg, r.pool
		props := actor.PropsFromProducer(func() actor.Actor { return &shard{cfg: cfg, pool: p} }, r.cfg.ShardOptions...)
		for i := range r.shards {
			r.shards[i] = ctx.SpawnPrefix(props, fmt.Sprintf("shard-%d", i))
		}
	case Track:
		ctx.Forward(r.shardOf(m.Header.ID))
	case Flush:
		ctx.Forward(r.shardOf(m.ID))
	case Untrack:
		ctx.Forward(r.shardOf(m.ID))
	case *actor.Restarting:
		r.pool.close()
	case *actor.Stopped:
		// The shards have stopped: no job can be submitted any more. This
		// waits for the store calls in flight (cancelled) to return.
		r.pool.close()
		if t := r.cfg.Telemetry; t != nil {
			t.pool.CompareAndSwap(r.pool, nil)
		}
	}
}

// shardOf picks the shard of a session: FNV-1a of the id, so a session
// always lands on the same shard for a given shard count.
func (r *rootActor) shardOf(id session.SessionID) *actor.PID {
	return r.shards[shardIndex(id, len(r.shards))]
}

func shardIndex(id session.SessionID, shards int) int {
	const offset, prime = 2166136261, 16777619
	h := uint32(offset)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= prime
	}
	return int(h % uint32(shards))
}

// Messages a shard sends itself (through its gate).
type (
	// created is the outcome of Store.Create for incarnation inc of id.
	created struct {
		id  session.SessionID
		inc uint64
		err error
	}
	// writeDone is the outcome of write gen of id; synced says the store
	// synced it.
	writeDone struct {
		id     session.SessionID
		gen    uint64
		synced bool
		err    error
	}
	// tick is the expiry of timer gen of incarnation inc of id.
	tick struct {
		id  session.SessionID
		inc uint64
		gen uint64
	}
	// released is the outcome of Store.Release for incarnation inc of id.
	released struct {
		id  session.SessionID
		inc uint64
		err error
	}
	// retryTick is the expiry of retry timer gen of incarnation inc of id.
	retryTick struct {
		id  session.SessionID
		inc uint64
		gen uint64
	}
)

// waiter is the shard's token for a flush waiter in a core: whom to answer
// with which ref. to may be nil (a request sent without a sender), and then
// nobody is answered.
type waiter struct {
	to      *actor.PID
	ref     uint64
	untrack bool
}

// tracked is a shard's record of one session.
type tracked struct {
	id      session.SessionID
	inc     uint64 // incarnation: tells a stale created apart
	core    *writeBehind[waiter]
	session *actor.PID
	owner   *actor.PID
	// subscribed says a Subscribe was sent to the session actor; ready
	// that it was acknowledged (the past events it replays are then ahead
	// of any later request in the shard's mailbox), so Track is answered.
	subscribed bool
	ready      bool
	tracks     []waiter // Track requests waiting for ready
	// job is the write in flight, nil if none: a background write can be
	// promoted to a synced one until a worker starts it, and folded late
	// until its store call returns.
	job *writeJob
	// stopTimer stops the armed timer (gen timerGen); nil if none.
	stopTimer func() bool
	timerGen  uint64
	// failures counts the consecutive failed writes (0 once one
	// succeeds); stopRetry stops the armed retry timer (gen retryGen),
	// nil if none.
	failures  int
	stopRetry func() bool
	retryGen  uint64
	// An Untrack that drained the session is answered only once the
	// store has released it (Store.Release: the writer lock, so another
	// process may take the session over). releasing says a Release is in
	// flight, answering releaseWaiters; untracks drained since it started
	// wait for the next one, so that no Untrack is answered by a Release
	// that ran before its own drain. detached says an Untrack drained and
	// unsubscribed the session (and no Track subscribed it again): events
	// still arriving are dropped, as for an untracked session. A Track
	// during a release subscribes the session again, and its writes may
	// run before or after the Release: either is safe, since a write takes
	// the lock again when it is not held, reading the file first.
	releasing      bool
	detached       bool
	releaseWaiters []flushReply[waiter]
	untracks       []flushReply[waiter]
}

// shard owns the sessions whose ids hash to it. Its state is touched only
// inside Receive.
type shard struct {
	cfg      Config
	pool     *pool
	gate     *gate
	sessions map[session.SessionID]*tracked
	nextInc  uint64
}

// Receive handles the protocol (forwarded by the root, so ctx.Sender() is
// the original requester), the session actors' EventsCommitted and the
// shard's own completions. Nothing here blocks.
func (s *shard) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.gate = &gate{root: ctx.ActorSystem().Root, pid: ctx.Self()}
		s.sessions = make(map[session.SessionID]*tracked)
	case session.EventsCommitted:
		s.onEvents(ctx, m)
	case writeDone:
		t := s.sessions[m.id]
		if t == nil {
			// Untrack waits for the session to drain, so a session is never
			// forgotten with a write in flight.
			ctx.Logger().Error("persister: write done for an untracked session", "session", string(m.id))
			return
		}
		t.job = nil
		e, err := t.core.WriteDone(m.gen, m.synced, m.err)
		if err != nil {
			ctx.Logger().Error("persister: stale write", "session", string(m.id), "err", err)
			return
		}
		s.perform(ctx, t, e)
	case tick:
		t := s.sessions[m.id]
		if t == nil || t.inc != m.inc {
			return // stopped in vain: the session was forgotten
		}
		if m.gen == t.timerGen {
			t.stopTimer = nil
		}
		s.perform(ctx, t, t.core.Tick(m.gen))
	case released:
		s.onReleased(ctx, m)
	case retryTick:
		s.onRetry(ctx, m)
	case Track:
		s.onTrack(ctx, m)
	case created:
		s.onCreated(ctx, m)
	case Flush:
		t := s.sessions[m.ID]
		if t == nil {
			s.reply(ctx, flushReply[waiter]{W: waiter{to: ctx.Sender(), ref: m.Ref}, Durable: -1, Err: ErrNotTracked}, m.ID)
			return
		}
		s.perform(ctx, t, t.core.Flush(waiter{to: ctx.Sender(), ref: m.Ref}, m.UpTo))
	case Untrack:
		t := s.sessions[m.ID]
		if t == nil {
			s.reply(ctx, flushReply[waiter]{W: waiter{to: ctx.Sender(), ref: m.Ref, untrack: true}, Durable: -1, Err: ErrNotTracked}, m.ID)
			return
		}
		s.perform(ctx, t, t.core.Drain(waiter{to: ctx.Sender(), ref: m.Ref, untrack: true}))
	case *actor.Stopping:
		s.stop(ctx)
	}
}

func (s *shard) onTrack(ctx actor.Context, m Track) {
	w := waiter{to: ctx.Sender(), ref: m.Ref}
	id := m.Header.ID
	if t := s.sessions[id]; t != nil {
		// Tracked already (a restarted session actor, a second owner):
		// adopt the new PIDs and continue from what was received.
		if m.Owner != nil {
			t.owner = m.Owner
		}
		if m.Session != nil && !m.Session.Equal(t.session) {
			t.session = m.Session
			if t.ready {
				t.subscribed = false
			}
		}
		if t.ready && !t.subscribed {
			// A new session actor, or an earlier subscription failed.
			t.ready = false
			t.tracks = append(t.tracks, w)
			s.subscribe(ctx, t)
			return
		}
		if !t.ready {
			t.tracks = append(t.tracks, w)
			return
		}
		s.respond(ctx, w, Tracked{Ref: m.Ref, ID: id})
		return
	}
	var err error
	switch {
	case m.Session == nil:
		err = errors.New("persister: track needs the session actor's PID")
	case m.From < 0:
		err = fmt.Errorf("persister: track from negative seq %d", m.From)
	default:
		err = m.Header.Validate()
	}
	if err != nil {
		s.respond(ctx, w, TrackFailed{Ref: m.Ref, ID: id, Err: fmt.Errorf("persister: track %s: %w", id, err)})
		return
	}
	s.nextInc++
	t := &tracked{id: id, inc: s.nextInc, session: m.Session, owner: m.Owner, tracks: []waiter{w},
		core: newWriteBehind[waiter](s.cfg.Policy, s.cfg.Window, s.cfg.MaxBatchEvents, m.From)}
	s.sessions[id] = t
	if s.cfg.Policy == PolicyNone {
		s.onCreated(ctx, created{id: id, inc: t.inc})
		return
	}
	// Create may touch the disk (a file system store checks for an
	// existing log), so it runs on the pool like every store call.
	store, g, h, inc, from := s.cfg.Store, s.gate, m.Header, t.inc, m.From
	s.pool.submit(func(context.Context) {
		err := store.Create(h)
		if errors.Is(err, ErrExists) && from > 0 {
			// Resuming a stored session: the store's fence keeps a wrong
			// From from writing. From 0 is a new session (Create, Fork),
			// and an id already stored is not one: the Track fails with
			// ErrExists rather than run turns nothing could write.
			err = nil
		}
		g.send(created{id: h.ID, inc: inc, err: err})
	})
}

func (s *shard) onCreated(ctx actor.Context, m created) {
	t := s.sessions[m.id]
	if t == nil || t.inc != m.inc || t.subscribed {
		return // untracked (or tracked again) while Create ran
	}
	if m.err != nil {
		s.failTrack(ctx, t, m.err)
		return
	}
	s.subscribe(ctx, t)
}

// subscribe asks the session actor for its committed events from the
// first one not received yet and answers the pending Tracks once it
// acknowledges. Waiting for the acknowledgement is what makes "Flush after
// Tracked" cover every event committed before Track: the session sends the
// past events before Subscribed, so they are in the shard's mailbox ahead
// of any request that follows the Tracked reply. ReenterAfter (not a
// blocking Result) keeps Receive free meanwhile.
func (s *shard) subscribe(ctx actor.Context, t *tracked) {
	t.subscribed, t.detached = true, false
	id, inc, pid := t.id, t.inc, t.session
	f := ctx.RequestFuture(pid, session.Subscribe{Subscriber: ctx.Self(), From: t.core.Received() + 1, Behind: s.behind()}, s.cfg.WriteTimeout)
	ctx.ReenterAfter(f, func(res any, err error) {
		t := s.sessions[id]
		if t == nil || t.inc != inc || t.ready {
			return
		}
		if !pid.Equal(t.session) {
			// Tracked again with another session actor meanwhile.
			s.subscribe(ctx, t)
			return
		}
		if _, ok := res.(session.Subscribed); err == nil && !ok {
			err = fmt.Errorf("persister: session answered Subscribe with %T", res)
		}
		if err != nil {
			s.failTrack(ctx, t, fmt.Errorf("subscribe: %w", err))
			return
		}
		t.ready = true
		tracks := t.tracks
		t.tracks = nil
		for _, w := range tracks {
			s.respond(ctx, w, Tracked{Ref: w.ref, ID: t.id})
		}
	})
}

// failTrack answers the pending Tracks of t with TrackFailed. A session
// with nothing pending is forgotten. One with events still to write (a
// Track that re-subscribed a tracked session to a new session actor, and
// failed) stays tracked so that they are written; a later Track retries
// the subscription.
func (s *shard) failTrack(ctx actor.Context, t *tracked, err error) {
	for _, w := range t.tracks {
		s.respond(ctx, w, TrackFailed{Ref: w.ref, ID: t.id, Err: fmt.Errorf("persister: track %s: %w", t.id, err)})
	}
	t.tracks = nil
	if t.core.Pending() > 0 || t.releasing {
		// A release in flight forgets the session when it is done,
		// unless it has events to write.
		t.ready, t.subscribed = true, false
		t.detached = t.releasing && t.core.Pending() == 0
		return
	}
	s.unsubscribe(ctx, t)
	s.forget(ctx, t, ErrNotTracked)
}

// behind is how long a session may hold streamed chunks back from this
// persister (session.Subscribe.Behind): its write-behind window, which
// onEvents starts from the first held chunk's commit, so a chunk is
// written within one window of its commit either way
// (docs/durability.md#write-behind-and-barriers).
func (s *shard) behind() time.Duration { return s.cfg.Window }

func (s *shard) onEvents(ctx actor.Context, m session.EventsCommitted) {
	t := s.sessions[m.Session]
	if t == nil || t.detached {
		// Sent by the session before it saw our Unsubscribe. Untrack
		// answered only once everything received was durable; events
		// committed after the Untrack are the caller's to flush.
		ctx.Logger().Warn("persister: events for an untracked session dropped", "session", string(m.Session), "events", m.Events.Len())
		return
	}
	// The window starts at the first event's commit: the session may have
	// held it back for a while (m.Held, at most the window: behind).
	e, err := t.core.Enqueue(m.Events, s.cfg.Now().Add(-m.Held))
	var gap *seqGapError
	if errors.As(err, &gap) {
		// Events went missing on the way: ask the session to send again
		// from the first missing seq (it replays its log, then goes live).
		ctx.Logger().Warn("persister: resubscribing after a gap", "session", string(t.id), "want", gap.Want, "got", gap.Got)
		ctx.Send(t.session, session.Subscribe{Subscriber: ctx.Self(), From: gap.Want, Behind: s.behind()})
		return
	}
	s.perform(ctx, t, e)
}

// perform carries out a core's effects for session t.
func (s *shard) perform(ctx actor.Context, t *tracked, e effects[waiter]) {
	if e.CancelTimer && t.stopTimer != nil {
		t.stopTimer()
		t.stopTimer = nil
	}
	if e.ArmTimer {
		if t.stopTimer != nil {
			t.stopTimer()
		}
		g, id, inc, gen := s.gate, t.id, t.inc, e.TimerGen
		t.timerGen = gen
		t.stopTimer = s.cfg.AfterFunc(e.TimerAt.Sub(s.cfg.Now()), func() { g.send(tick{id: id, inc: inc, gen: gen}) })
	}
	if e.Promote && t.job != nil {
		gen := e.WriteGen
		s.pool.promote(t.job, func(late bool) []session.Event { return t.core.Fold(gen, late) })
	}
	if e.StartWrite {
		t.job = s.write(t.id, e.WriteGen, e.Write, e.Sync)
	}
	untracked := false
	var drained []flushReply[waiter]
	for _, r := range e.Replies {
		if r.W.untrack && r.Err == nil {
			if s.cfg.Policy != PolicyNone {
				drained = append(drained, r) // answered once released
				continue
			}
			untracked = true
		}
		s.reply(ctx, r, t.id)
	}
	if e.HasDurable && t.failures > 0 {
		// A write succeeded: it held the failed events (they stay at the
		// front of the queue), so the failure is over.
		t.failures = 0
		s.stopRetryTimer(t)
	}
	var retryIn time.Duration
	if e.WriteFailed != nil {
		t.failures++
		if retryable(e.WriteFailed) {
			retryIn = s.cfg.retryDelay(t.failures)
			s.armRetry(t, retryIn)
		} else {
			s.stopRetryTimer(t)
		}
	}
	if t.owner != nil {
		if e.HasDurable {
			ctx.Send(t.owner, Durable{ID: t.id, Seq: e.Durable})
		}
		if e.WriteFailed != nil {
			ctx.Send(t.owner, WriteFailed{ID: t.id, Err: e.WriteFailed, Attempt: t.failures, RetryIn: retryIn})
		}
	} else if e.WriteFailed != nil {
		ctx.Logger().Warn("persister: write failed; events kept for retry", "session", string(t.id), "err", e.WriteFailed,
			"attempt", t.failures, "retryIn", retryIn)
	}
	if len(drained) > 0 {
		s.unsubscribe(ctx, t)
		t.detached = true
		t.untracks = append(t.untracks, drained...)
		s.release(t)
	}
	if untracked {
		s.unsubscribe(ctx, t)
		s.forget(ctx, t, ErrNotTracked)
	}
}

// retryable reports whether a failed write is worth retrying in the
// background: not when another writer owns the session (ErrFenced, and
// ErrLocked with it: the loser of two activations must stop writing, not
// poke the winner's log every few seconds), nor when the stored log is
// corrupt or the store closed, which no retry changes. Those still fail
// every flush, and a flush or the next events still try again.
func retryable(err error) bool {
	return !errors.Is(err, ErrFenced) && !errors.Is(err, ErrClosed) && !IsCorruption(err)
}

// armRetry (re)starts t's retry timer to fire after d.
func (s *shard) armRetry(t *tracked, d time.Duration) {
	s.stopRetryTimer(t)
	t.retryGen++
	g, id, inc, gen := s.gate, t.id, t.inc, t.retryGen
	t.stopRetry = s.cfg.AfterFunc(d, func() { g.send(retryTick{id: id, inc: inc, gen: gen}) })
}

func (s *shard) stopRetryTimer(t *tracked) {
	if t.stopRetry != nil {
		t.stopRetry()
		t.stopRetry = nil
	}
}

// onRetry retries a failed write: a barrier of everything received, as a
// Flush would start, whose waiter nobody hears (the outcome reaches the
// owner as Durable or WriteFailed, and a failure arms the next retry).
// A barrier rather than one background write, so that the retry does not
// stop at the batch that failed but makes everything received durable.
func (s *shard) onRetry(ctx actor.Context, m retryTick) {
	t := s.sessions[m.id]
	if t == nil || t.inc != m.inc || m.gen != t.retryGen || t.stopRetry == nil {
		return // stopped in vain: recovered, or the session was forgotten
	}
	t.stopRetry = nil
	if t.failures == 0 || t.core.Pending() == 0 {
		return
	}
	if t.owner != nil {
		ctx.Send(t.owner, Retrying{ID: t.id, Attempt: t.failures})
	}
	s.perform(ctx, t, t.core.Flush(waiter{}, -1))
}

// release runs Store.Release of t on the pool for the Untracks waiting in
// t.untracks, unless a Release is in flight already (its completion starts
// the next one). Release may do I/O (closing files, giving up a lock on a
// network file system), so it never runs inside Receive.
func (s *shard) release(t *tracked) {
	if t.releasing || len(t.untracks) == 0 {
		return
	}
	t.releasing = true
	t.releaseWaiters, t.untracks = t.untracks, nil
	store, g, id, inc := s.cfg.Store, s.gate, t.id, t.inc
	s.pool.submit(func(context.Context) {
		g.send(released{id: id, inc: inc, err: releaseSafely(store, id)})
	})
}

// onReleased answers the Untracks a Release was for: Flushed, or
// FlushFailed with the Release's error, with the watermark of their
// drain. The session is then forgotten, unless a Track subscribed it
// again meanwhile, the Release failed (it stays tracked, as after a failed
// drain: a later Untrack releases again), or more Untracks wait for a
// Release of their own.
func (s *shard) onReleased(ctx actor.Context, m released) {
	t := s.sessions[m.id]
	if t == nil || t.inc != m.inc {
		// Only stopping forgets a releasing session, and it closes the
		// gate first.
		ctx.Logger().Error("persister: release done for an untracked session", "session", string(m.id))
		return
	}
	t.releasing = false
	waiters := t.releaseWaiters
	t.releaseWaiters = nil
	for _, r := range waiters {
		if m.err != nil {
			r.Err = fmt.Errorf("persister: untrack %s: %w", t.id, m.err)
		}
		s.reply(ctx, r, t.id)
	}
	switch {
	case len(t.untracks) > 0:
		s.release(t)
	case m.err == nil && t.detached:
		s.forget(ctx, t, ErrNotTracked)
	}
}

// write runs Store.Append of batch on the pool and reports writeDone.
// batch is owned by the core, which does not modify what the store call
// reads until then. A synced write (a barrier's) goes ahead of every
// background write; a background write can be promoted (pool.promote)
// until it starts, and folded late while its store call runs: the events
// the barrier folded are then appended, synced, right after it, by the
// same job.
func (s *shard) write(id session.SessionID, gen uint64, batch []session.Event, sync bool) *writeJob {
	store, g, timeout, timed := s.cfg.Store, s.gate, s.cfg.WriteTimeout, s.pool.synced
	j := &writeJob{id: id, batch: batch, sync: sync}
	j.done = func(synced bool, err error) { g.send(writeDone{id: id, gen: gen, synced: synced, err: err}) }
	j.run = func(base context.Context) {
		ctx, cancel := context.WithTimeout(base, timeout)
		defer cancel()
		// timedAppend is appendSafely, its duration told to the
		// telemetry when it is durable and succeeds.
		timedAppend := func(batch []session.Event, sync bool) error {
			var start time.Time
			if timed != nil && sync {
				start = time.Now()
			}
			err := appendSafely(ctx, store, id, batch, sync)
			if timed != nil && sync && err == nil {
				timed(time.Since(start))
			}
			return err
		}
		batch, sync := j.start()
		err := timedAppend(batch, sync)
		if rest, late := j.finish(len(batch), sync, err); late {
			sync = true
			err = timedAppend(rest, true)
		}
		j.done(sync, err)
	}
	s.pool.submitJob(j, sync)
	return j
}

// releaseSafely is Store.Release with a panic turned into an error, as in
// appendSafely.
func releaseSafely(store Writer, id session.SessionID) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("persister: release %s: store panicked: %v", id, r)
		}
	}()
	return store.Release(id)
}

// appendSafely is Store.Append with a panic turned into an error: a panic
// on a pool goroutine would take the process down, and a store bug is a
// write failure like any other to the session (its events stay queued).
func appendSafely(ctx context.Context, store Writer, id session.SessionID, batch []session.Event, durable bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("persister: append %s: store panicked: %v", id, r)
		}
	}()
	// The store's error names the append and the session already (see
	// Writer.Append): wrapping it again would say so twice.
	return store.Append(ctx, id, batch, Durability(durable))
}

// forget drops session t (drained by Untrack and released, its Track
// failed, or the shard is stopping): its timer stops and its remaining
// waiters, Untracks waiting for a release, and Tracks fail with err.
func (s *shard) forget(ctx actor.Context, t *tracked, err error) {
	if t.stopTimer != nil {
		t.stopTimer()
		t.stopTimer = nil
	}
	s.stopRetryTimer(t)
	for _, r := range t.core.Abandon(err) {
		s.reply(ctx, r, t.id)
	}
	for _, r := range slices.Concat(t.releaseWaiters, t.untracks) {
		r.Err = err
		s.reply(ctx, r, t.id)
	}
	t.releaseWaiters, t.untracks = nil, nil
	for _, w := range t.tracks {
		s.respond(ctx, w, TrackFailed{Ref: w.ref, ID: t.id, Err: err})
	}
	t.tracks = nil
	delete(s.sessions, t.id)
}

// unsubscribe tells the session actor to stop sending t's events.
func (s *shard) unsubscribe(ctx actor.Context, t *tracked) {
	if t.subscribed {
		ctx.Send(t.session, session.Unsubscribe{Subscriber: ctx.Self()})
		t.subscribed = false
	}
}

// stop closes the gate (no timer or pool job reaches the shard any more),
// fails every waiter with ErrStopped and reports what was left unwritten.
func (s *shard) stop(ctx actor.Context) {
	s.gate.close()
	unwritten, sessions := 0, 0
	for _, t := range s.sessions {
		if n := t.core.Pending(); n > 0 {
			unwritten += n
			sessions++
		}
		// No Unsubscribe: the session may be gone already (a dead
		// letter), and it drops a terminated subscriber itself.
		s.forget(ctx, t, ErrStopped)
	}
	if unwritten > 0 {
		ctx.Logger().Warn("persister: stopped with unwritten events (flush before stopping)", "events", unwritten, "sessions", sessions)
	}
}

// reply answers a flush waiter, if it has a sender.
func (s *shard) reply(ctx actor.Context, r flushReply[waiter], id session.SessionID) {
	if r.Err != nil {
		s.respond(ctx, r.W, FlushFailed{Ref: r.W.ref, ID: id, Durable: r.Durable, Err: r.Err})
		return
	}
	s.respond(ctx, r.W, Flushed{Ref: r.W.ref, ID: id, Durable: r.Durable})
}

func (s *shard) respond(ctx actor.Context, w waiter, msg any) {
	if w.to != nil {
		ctx.Send(w.to, msg)
	}
}

// gate is how goroutines outside a shard (timer callbacks, pool jobs) send
// to it: until the shard closes the gate in Stopping. Safe for concurrent
// use.
//
// Rejected alternative: sending straight to the PID and letting late
// messages become dead letters. Dead letters are logged, and each burst
// starts a throttle goroutine that outlives the actor by a second, which
// goleak rightly reports.
type gate struct {
	root *actor.RootContext
	pid  *actor.PID

	mu     sync.Mutex // guards closed; held across Send so close waits for a send in progress
	closed bool
}

func (g *gate) send(msg any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.root.Send(g.pid, msg)
	}
}

func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
