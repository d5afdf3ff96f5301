package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/telemetry"
)

// Host runs many sessions in one process. It is safe for concurrent use.
type Host struct {
	cfg       Config
	sys       *actor.ActorSystem
	ownSys    bool
	store     persister.Store
	persister *actor.PID
	notices   *actor.PID
	name      string
	epoch     time.Time

	refs atomic.Uint64
	// testObserve, set by tests before any session starts, is called by
	// every session's observer (fault injection).
	testObserve func(session.Event)
	limit       *limitedProvider   // nil when MaxConcurrentModelCalls is 0
	agents      *agent.Template    // every session's agent configuration, shared
	logger      *slog.Logger       // never nil
	metrics     *telemetry.Metrics // nil without Config.MeterProvider
	unobserve   func() error       // unregisters the host gauges
	workers     *workers           // runs the mailboxes of the actors spawned here
	passWG      sync.WaitGroup     // passivation goroutines (timer callbacks)

	mu         sync.Mutex
	closed     bool
	sessions   map[session.SessionID]*entry
	subs       map[*Subscription]struct{}
	parked     map[session.SessionID]parkedStats // counters of passivated and evicted sessions
	passivated int64                             // passivations so far
}

var hostSeq atomic.Uint64

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

// Open starts a host.
func Open(cfg Config) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Host{cfg: cfg, sessions: map[session.SessionID]*entry{}, subs: map[*Subscription]struct{}{},
		parked: map[session.SessionID]parkedStats{}, name: fmt.Sprintf("dsh-host-%d", hostSeq.Add(1)), epoch: time.Now(),
		workers: &workers{}}
	if h.cfg.RequestTimeout == 0 {
		h.cfg.RequestTimeout = DefaultRequestTimeout
	}
	if h.cfg.SubscriberBuffer == 0 {
		h.cfg.SubscriberBuffer = DefaultSubscriberBuffer
	}
	if h.cfg.Clock == nil {
		h.cfg.Clock = func() int64 { return time.Now().UnixMilli() }
	}
	if h.cfg.Provider == nil {
		p, err := synthetic.New(synthetic.Config{})
		if err != nil {
			return nil, err
		}
		h.cfg.Provider = p
	}
	if h.cfg.Model == "" {
		h.cfg.Model = "default"
		if m, ok := h.cfg.Provider.(interface{ Model() string }); ok && m.Model() != "" {
			h.cfg.Model = m.Model()
		}
	}
	h.logger = cfg.Logger
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MeterProvider != nil {
		m, err := telemetry.NewMetrics(cfg.MeterProvider)
		if err != nil {
			return nil, fmt.Errorf("supervisor: %w", err)
		}
		h.metrics = m
		h.cfg.Observers = append(slices.Clip(h.cfg.Observers), m)
	}
	if cfg.MaxConcurrentModelCalls > 0 {
		h.limit = newLimitedProvider(h.cfg.Provider, cfg.MaxConcurrentModelCalls)
		h.limit.metrics = h.metrics
		h.cfg.Provider = h.limit
	}
	agents, err := agent.NewTemplate(agent.Config{Inbox: h.cfg.Inbox, Provider: h.cfg.Provider, Model: h.cfg.Model,
		System: h.cfg.SystemPrompt, Tools: h.cfg.Tools, Retry: h.cfg.Retry, Hooks: h.cfg.Hooks})
	if err != nil {
		return nil, err
	}
	h.agents = agents
	switch {
	case cfg.Store != nil:
		h.store = cfg.Store
	case cfg.Dir != "":
		st, err := persister.NewJSONLStore(persister.JSONLConfig{Root: cfg.Dir, Plain: cfg.Plain, Lock: true})
		if err != nil {
			return nil, err
		}
		h.store = st
	default:
		h.store = persister.NewMemStore()
		h.cfg.Policy = persister.PolicyNone
	}
	pp, err := persister.Props(persister.Config{Store: h.store, Policy: h.cfg.Policy, Window: cfg.Window,
		FsyncWorkers: cfg.FsyncWorkers, Shards: cfg.Shards, RetryMin: cfg.WriteRetryMin, RetryMax: cfg.WriteRetryMax})
	if err != nil {
		_ = h.store.Close()
		return nil, err
	}
	h.sys = cfg.System
	if h.sys == nil {
		h.sys = NewSystem(cfg.Logger)
		h.ownSys = true
	}
	h.persister, err = h.sys.Root.SpawnNamed(pp.Configure(actorOptions(h.workers)...), h.name+"/persister")
	if err != nil {
		h.shutdown()
		return nil, err
	}
	h.notices, err = h.sys.Root.SpawnNamed(actor.PropsFromFunc(h.onNotice), h.name+"/notices")
	if err != nil {
		_ = h.sys.Root.PoisonFuture(h.persister).Wait()
		h.shutdown()
		return nil, err
	}
	if h.metrics != nil {
		h.unobserve, err = h.metrics.ObserveHost(h.readings)
		if err != nil {
			_ = h.sys.Root.PoisonFuture(h.notices).Wait()
			_ = h.sys.Root.PoisonFuture(h.persister).Wait()
			h.shutdown()
			return nil, fmt.Errorf("supervisor: %w", err)
		}
	}
	return h, nil
}

// readings are the host's gauges (telemetry.HostReadings), read at each
// metrics collection.
func (h *Host) readings() telemetry.HostReadings {
	var r telemetry.HostReadings
	h.mu.Lock()
	r.Passivated = int64(len(h.parked))
	for _, e := range h.sessions {
		select {
		case <-e.ready:
		default:
			continue
		}
		if e.err != nil {
			continue
		}
		r.Resident++
		r.DurableLag += max(e.events.Load()-1-e.durable.Load(), 0)
	}
	h.mu.Unlock()
	if h.limit != nil {
		r.Queued = h.limit.waiting.Load()
	}
	return r
}

func (h *Host) shutdown() {
	_ = h.store.Close()
	if h.ownSys {
		h.sys.Shutdown()
	}
	_ = h.workers.close(context.Background()) // nothing runs: the persister is stopped or was never spawned
}

// System returns the actor system the host's actors live in.
func (h *Host) System() *actor.ActorSystem { return h.sys }

// PersisterPID returns the persister actor (protocol: persister.Track,
// Flush, Untrack; see package persister).
func (h *Host) PersisterPID() *actor.PID { return h.persister }

// SessionPID returns the session actor of a resident session. Other actors
// may talk to it directly with the protocol of package session (Append,
// Subscribe/Unsubscribe, QueryMessages, QueryEvents, QueryHeader, Fork).
// Appending behind the agent's back is allowed by the session but breaks
// the agent's view of the log (it panics and is restarted): only query and
// subscribe unless you know why.
func (h *Host) SessionPID(id session.SessionID) (*actor.PID, error) {
	e, err := h.resident(id)
	if err != nil {
		return nil, err
	}
	return e.session, nil
}

// AgentPID returns the agent actor of a resident session. Its protocol is
// that of package agent: Followup, Steer, Inject (reply Sent | SendFailed),
// Cancel, SetSystem (no reply), WaitIdle (reply Idle), Dispose (reply
// Disposed; the host does this on Close).
func (h *Host) AgentPID(id session.SessionID) (*actor.PID, error) {
	e, err := h.resident(id)
	if err != nil {
		return nil, err
	}
	return e.agent, nil
}

func (h *Host) resident(id session.SessionID) (*entry, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	e, ok := h.sessions[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s (not resident)", ErrNoSession, id)
	}
	select {
	case <-e.ready:
		if e.err != nil {
			return nil, e.err
		}
		return e, nil
	default:
		return nil, fmt.Errorf("%w: %s (starting)", ErrNoSession, id)
	}
}

// CreateOptions are the options of Create.
type CreateOptions struct {
	// ID is the session id; "" mints a UUID.
	ID session.SessionID
	// Cwd is the session's working directory (absolute, or "").
	Cwd string
}

// Create starts a new, empty session.
func (h *Host) Create(ctx context.Context, opts CreateOptions) (session.SessionID, error) {
	id := opts.ID
	if id == "" {
		id = session.SessionID(uuid.NewString())
	}
	hdr := session.Header{ID: id, CreatedAt: h.cfg.Clock(), Cwd: opts.Cwd}
	if err := hdr.Validate(); err != nil {
		return "", err
	}
	e, fresh, err := h.reserve(ctx, id)
	if err != nil {
		return "", err
	}
	if !fresh {
		h.unuse(e)
		return "", fmt.Errorf("%w: %s", ErrExists, id)
	}
	l, err := session.New(hdr)
	if err != nil {
		h.release(e, err)
		return "", err
	}
	if err := h.start(ctx, e, l, 0); err != nil {
		return "", err
	}
	h.unuse(e)
	return id, nil
}

// Resume makes a stored session resident: it is loaded from the store
// (which commits crash repair: a torn tail is cut, an open turn closed),
// seeded (a session/end-seed is appended) and tracked from the loaded
// length. Resuming a resident session is a no-op. Every other method
// resumes a stored session on demand, so calling Resume is optional.
func (h *Host) Resume(ctx context.Context, id session.SessionID) error {
	e, err := h.get(ctx, id, true)
	if err != nil {
		return err
	}
	h.unuse(e)
	return nil
}

// live returns the resident entry of id, resuming it from the store when
// needed (unless Config.ManualResume). On success the entry is in use (it
// cannot passivate) until the caller calls h.unuse(e).
func (h *Host) live(ctx context.Context, id session.SessionID) (*entry, error) {
	return h.get(ctx, id, !h.cfg.ManualResume)
}

// get is live, loading a stored session only when load is set.
func (h *Host) get(ctx context.Context, id session.SessionID, load bool) (*entry, error) {
	e, fresh, err := h.reserve(ctx, id)
	if err != nil {
		return nil, err
	}
	if !fresh {
		select {
		case <-e.ready:
		case <-ctx.Done():
			h.unuse(e)
			return nil, context.Cause(ctx)
		}
		if e.err != nil {
			return nil, e.err
		}
		return e, nil
	}
	if !load {
		err := fmt.Errorf("%w: %s (not resident)", ErrNoSession, id)
		h.release(e, err)
		return nil, err
	}
	st, err := h.store.Load(ctx, id)
	if err != nil {
		if errors.Is(err, persister.ErrNotFound) {
			err = fmt.Errorf("%w: %s", ErrNoSession, id)
		}
		if le := (*persister.LockedError)(nil); errors.As(err, &le) {
			h.logger.Warn("session in use by another writer", "session", string(id), "holder", le.Holder, "err", err)
		}
		h.release(e, err)
		return nil, err
	}
	l, err := session.NewSeeded(st.Header, st.Events, h.cfg.Clock())
	if err != nil {
		h.release(e, err)
		return nil, err
	}
	if err := h.start(ctx, e, l, int64(len(st.Events))); err != nil {
		return nil, err
	}
	h.logger.Debug("session resumed", "session", string(id), "events", len(st.Events))
	return e, nil
}

// reserve returns the entry of id, in use, creating a starting one (fresh)
// when there is none. It waits for a passivation of id in progress to
// finish.
func (h *Host) reserve(ctx context.Context, id session.SessionID) (e *entry, fresh bool, err error) {
	e, err = h.lockSettled(ctx, id)
	if err != nil {
		return nil, false, err
	}
	defer h.mu.Unlock()
	if e != nil {
		e.inflight++
		return e, false, nil
	}
	e = &entry{id: id, ready: make(chan struct{}), inflight: 1}
	e.durable.Store(-1)
	e.lastUse.Store(int64(time.Since(h.epoch)))
	h.sessions[id] = e
	return e, true, nil
}

// lockSettled locks h.mu and returns id's entry (nil when there is none)
// once no passivation of it is in progress. On error h.mu is not held.
func (h *Host) lockSettled(ctx context.Context, id session.SessionID) (*entry, error) {
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return nil, ErrClosed
		}
		e := h.sessions[id]
		if e == nil || e.passivating == nil {
			return e, nil
		}
		wait := e.passivating
		h.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// unuse ends a use of e begun by live or reserve.
func (h *Host) unuse(e *entry) {
	e.lastUse.Store(int64(time.Since(h.epoch)))
	h.mu.Lock()
	e.inflight--
	h.mu.Unlock()
}

// release forgets a starting entry that failed, and gives up the store's
// hold on the session (the writer lock a Load took, if any).
func (h *Host) release(e *entry, err error) {
	_ = h.store.Release(e.id)
	h.mu.Lock()
	if h.sessions[e.id] == e {
		delete(h.sessions, e.id)
	}
	h.mu.Unlock()
	e.err = err
	close(e.ready)
}

// start spawns the session actor over l and the agent, and tracks the
// session from seq from.
func (h *Host) start(ctx context.Context, e *entry, l *session.Log, from int64) error {
	e.header = l.Header()
	e.events.Store(l.Len())
	for ev := range l.Events().All() {
		e.fold(h, ev, false)
	}
	_, _, open := l.OpenTurn()
	e.open.Store(open)
	obs := append([]session.Observer{e.observe(h)}, h.cfg.SessionObservers...)
	for _, o := range h.cfg.Observers {
		if f := o.Open(e.id, l.Events()); f != nil {
			obs = append(obs, f)
		}
	}
	scfg := session.Config{Log: l, Clock: h.cfg.Clock, Observers: obs}
	if f := h.cfg.OnObserverFailure; f != nil {
		id := e.id
		scfg.OnObserverFailure = func(o session.ObserverFailure) { f(id, o) }
	}
	sp, err := session.Props(scfg)
	if err != nil {
		h.release(e, err)
		return err
	}
	prefix := h.name + "/" + persister.EncodeSegment(string(e.id))
	spid, err := h.sys.Root.SpawnNamed(sp.Configure(actorOptions(h.workers)...), prefix+"/session")
	if err != nil {
		h.release(e, err)
		return err
	}
	ap, err := h.agents.Props(spid)
	if err != nil {
		_ = h.sys.Root.PoisonFuture(spid).Wait()
		h.release(e, err)
		return err
	}
	apid, err := h.sys.Root.SpawnNamed(ap.Configure(actorOptions(h.workers)...), prefix+"/agent")
	if err != nil {
		_ = h.sys.Root.PoisonFuture(spid).Wait()
		h.release(e, err)
		return err
	}
	e.session, e.agent = spid, apid
	res, err := h.ask(ctx, h.persister, persister.Track{Ref: h.refs.Add(1), Header: e.header, Session: spid, From: from, Owner: h.notices})
	if err == nil {
		if tf, ok := res.(persister.TrackFailed); ok {
			err = tf.Err
			if errors.Is(err, persister.ErrExists) {
				err = fmt.Errorf("%w: %s (stored)", ErrExists, e.id)
			}
		}
	}
	if err != nil {
		_ = h.sys.Root.PoisonFuture(apid).Wait()
		_ = h.sys.Root.PoisonFuture(spid).Wait()
		h.release(e, err)
		return err
	}
	h.mu.Lock()
	if p, ok := h.parked[e.id]; ok {
		st := p.stats()
		e.writeFailures.Store(st.WriteFailures)
		e.writeRetries.Store(st.WriteRetries)
	}
	delete(h.parked, e.id)
	h.mu.Unlock()
	close(e.ready)
	h.armIdle(e)
	return nil
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
	e.bytes.Add(int64(ev.DataLen()) + EventOverheadBytes)
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

// onNotice receives the persister's notices for every session.
func (h *Host) onNotice(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case persister.Durable:
		e := h.entryOf(m.ID)
		if e == nil {
			return
		}
		e.durable.Store(m.Seq)
		if e.clearFailure(m.Seq) {
			h.logger.Info("session write recovered", "session", string(m.ID), "durable", m.Seq)
		}
		now := time.Since(h.epoch)
		e.turnEndsDurable(m.Seq, func(seq int64, at time.Duration) {
			d := now - at
			if h.metrics != nil {
				h.metrics.TurnDurable(d)
			}
			if h.cfg.OnTurnDurable != nil {
				h.cfg.OnTurnDurable(m.ID, seq, d)
			}
		})
	case persister.WriteFailed:
		// The one place a host hears of write failures and retries. A
		// run of failures is one warning (its first); the failed
		// retries after it are at debug, and the write that succeeds
		// is the info record of the recovery (Durable, above).
		e := h.entryOf(m.ID)
		if e != nil {
			e.writeFailures.Add(1)
			e.setFailure(m.Err, e.durable.Load())
		}
		level := slog.LevelWarn
		if m.Attempt > 1 {
			level = slog.LevelDebug
		}
		msg := "session write failed"
		if errors.Is(m.Err, persister.ErrFenced) {
			// Another writer took the session (its lock, or a newer
			// writer's revision): retrying will not help until it goes.
			msg = "session write fenced"
		}
		h.logger.Log(context.Background(), level, msg, "session", string(m.ID),
			"attempt", m.Attempt, "retry_in", m.RetryIn, "err", m.Err)
		if h.metrics != nil {
			h.metrics.WriteFailed()
		}
		if h.cfg.OnWriteFailed != nil {
			h.cfg.OnWriteFailed(m.ID, m.Err)
		}
	case persister.Retrying:
		e := h.entryOf(m.ID)
		if e != nil {
			e.writeRetries.Add(1)
		}
	}
}

// ask makes a blocking request bounded by ctx and RequestTimeout. A
// request cut by ctx's deadline fails as ctx would (DeadlineExceeded),
// even when the future's timer, set from that deadline, fires first.
func (h *Host) ask(ctx context.Context, pid *actor.PID, msg any) (any, error) {
	timeout, fromCtx := h.cfg.RequestTimeout, false
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout, fromCtx = time.Until(d), true
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	if timeout <= 0 {
		return nil, context.DeadlineExceeded
	}
	f := h.sys.Root.RequestFuture(pid, msg, timeout)
	result := func(v any, err error) (any, error) {
		if fromCtx && errors.Is(err, actor.ErrTimeout) {
			return nil, fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
		}
		return v, err
	}
	if ctx.Done() == nil {
		return result(f.Result())
	}
	type reply struct {
		v   any
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		v, err := f.Result()
		ch <- reply{v, err}
	}()
	select {
	case r := <-ch:
		return result(r.v, r.err)
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// Followup queues msg as its own later turn (spec §4.3). When the session
// was idle, the turn has started by the time Followup returns. A message
// too large to record is refused (session.ErrTooLarge), as by Steer and
// Inject.
func (h *Host) Followup(ctx context.Context, id session.SessionID, msg messages.Message) error {
	return h.send(ctx, id, true, msg, func(ref uint64) any { return agent.Followup{Ref: ref, Message: msg} })
}

// Steer queues msg for the next step boundary of the running turn, or
// starts a turn when idle.
func (h *Host) Steer(ctx context.Context, id session.SessionID, msg messages.Message) error {
	return h.send(ctx, id, true, msg, func(ref uint64) any { return agent.Steer{Ref: ref, Message: msg} })
}

// Inject stages msg without waking the session: it rides with the next
// waking input.
func (h *Host) Inject(ctx context.Context, id session.SessionID, msg messages.Message) error {
	return h.send(ctx, id, false, msg, func(ref uint64) any { return agent.Inject{Ref: ref, Message: msg} })
}

// send forwards a send to the agent. A waking send is refused with
// ErrNotDurable while the session's last write failed (fail closed): until
// a write succeeds, the persister's background retry or a Flush. A message
// too large to record (session.CheckMessageSize) is refused first, with
// session.ErrTooLarge, before the session is even loaded.
func (h *Host) send(ctx context.Context, id session.SessionID, wakes bool, msg messages.Message, mk func(uint64) any) error {
	if err := session.CheckMessageSize(msg); err != nil {
		return fmt.Errorf("supervisor: send to %s: %w", id, err)
	}
	e, err := h.live(ctx, id)
	if err != nil {
		return err
	}
	defer h.unuse(e)
	if wakes {
		if werr := e.failure(); werr != nil {
			return fmt.Errorf("%w: %s: %w", ErrNotDurable, id, werr)
		}
	}
	res, err := h.ask(ctx, e.agent, mk(h.refs.Add(1)))
	if err != nil {
		return err
	}
	switch r := res.(type) {
	case agent.Sent:
		return nil
	case agent.SendFailed:
		return r.Err
	default:
		return fmt.Errorf("supervisor: unexpected reply %T", res)
	}
}

// Cancel aborts the running turn with cause (the first cause wins) and
// cancels what is pending in the inbox. Follow it with WaitIdle.
func (h *Host) Cancel(ctx context.Context, id session.SessionID, cause session.CancelCause) error {
	e, err := h.live(ctx, id)
	if err != nil {
		return err
	}
	defer h.unuse(e)
	h.sys.Root.Send(e.agent, agent.Cancel{Cause: cause})
	return nil
}

// SetSystem replaces the session's system prompt from its next step on.
func (h *Host) SetSystem(ctx context.Context, id session.SessionID, prompt string) error {
	e, err := h.live(ctx, id)
	if err != nil {
		return err
	}
	defer h.unuse(e)
	h.sys.Root.Send(e.agent, agent.SetSystem{Prompt: prompt})
	return nil
}

// WaitIdle returns once the session is idle (no turn running, nothing
// latched) and everything it logged is durable (written and fsynced under
// PolicyTurnEnd and PolicyStrict).
func (h *Host) WaitIdle(ctx context.Context, id session.SessionID) error {
	e, err := h.live(ctx, id)
	if err != nil {
		return err
	}
	defer h.unuse(e)
	if _, err := h.ask(ctx, e.agent, agent.WaitIdle{Ref: h.refs.Add(1)}); err != nil {
		return err
	}
	_, err = h.flush(ctx, e)
	return err
}

// Flush makes everything the session has logged durable and returns the
// durable watermark (the last durable seq).
func (h *Host) Flush(ctx context.Context, id session.SessionID) (int64, error) {
	e, err := h.live(ctx, id)
	if err != nil {
		return -1, err
	}
	defer h.unuse(e)
	return h.flush(ctx, e)
}

func (h *Host) flush(ctx context.Context, e *entry) (int64, error) {
	hr, err := h.ask(ctx, e.session, session.QueryHeader{Ref: h.refs.Add(1)})
	if err != nil {
		return -1, err
	}
	last := hr.(session.HeaderReply).Len - 1
	d, err := h.barrier(ctx, persister.Flush{Ref: h.refs.Add(1), ID: e.id, UpTo: last})
	var ff flushError
	switch {
	case err == nil:
		e.clearFailure(d)
	case errors.As(err, &ff):
		e.setFailure(ff.err, d)
	}
	return d, err
}

func (h *Host) barrier(ctx context.Context, msg any) (int64, error) {
	res, err := h.ask(ctx, h.persister, msg)
	if err != nil {
		return -1, err
	}
	switch r := res.(type) {
	case persister.Flushed:
		return r.Durable, nil
	case persister.FlushFailed:
		return r.Durable, flushError{r.Err}
	default:
		return -1, fmt.Errorf("supervisor: unexpected reply %T", res)
	}
}

// Messages returns the session's derived (model-visible) messages.
func (h *Host) Messages(ctx context.Context, id session.SessionID) (session.Messages, error) {
	e, err := h.live(ctx, id)
	if err != nil {
		return session.Messages{}, err
	}
	defer h.unuse(e)
	res, err := h.ask(ctx, e.session, session.QueryMessages{Ref: h.refs.Add(1)})
	if err != nil {
		return session.Messages{}, err
	}
	return res.(session.MessagesReply).Messages, nil
}

// Events returns the session's events from seq from on.
func (h *Host) Events(ctx context.Context, id session.SessionID, from int64) (session.Events, error) {
	e, err := h.live(ctx, id)
	if err != nil {
		return session.Events{}, err
	}
	defer h.unuse(e)
	res, err := h.ask(ctx, e.session, session.QueryEvents{Ref: h.refs.Add(1), From: from})
	if err != nil {
		return session.Events{}, err
	}
	return res.(session.EventsReply).Events, nil
}

// Fork creates a new session seeded with the events of id up to boundary
// (inclusive; session.LastEvent for the end). The boundary must not fall
// inside an open turn.
func (h *Host) Fork(ctx context.Context, id session.SessionID, boundary int64) (session.SessionID, error) {
	e, err := h.live(ctx, id)
	if err != nil {
		return "", err
	}
	defer h.unuse(e)
	child := session.SessionID(uuid.NewString())
	res, err := h.ask(ctx, e.session, session.Fork{Ref: h.refs.Add(1), Child: child, Boundary: boundary, CreatedAt: h.cfg.Clock()})
	if err != nil {
		return "", err
	}
	var fr session.ForkReply
	switch r := res.(type) {
	case session.ForkReply:
		fr = r
	case session.ForkFailed:
		return "", r.Err
	default:
		return "", fmt.Errorf("supervisor: unexpected reply %T", res)
	}
	ce, fresh, err := h.reserve(ctx, child)
	if err != nil {
		return "", err
	}
	if !fresh {
		h.unuse(ce)
		return "", fmt.Errorf("%w: %s", ErrExists, child)
	}
	l, err := session.NewSeeded(fr.Header, fr.Seed.Slice(), h.cfg.Clock())
	if err != nil {
		h.release(ce, err)
		return "", err
	}
	if err := h.start(ctx, ce, l, 0); err != nil {
		return "", err
	}
	h.unuse(ce)
	return child, nil
}

// Info describes a session.
type Info struct {
	Header   session.Header
	Resident bool
	// Running says the session is resident with a turn open.
	Running bool
	// Passivated says the session is not resident and was passivated by
	// this host (it is stored; the next call naming it resumes it).
	Passivated bool
}

// List names the sessions stored or resident, sorted by id. It resumes
// nothing: a stored session is read from the store's listing only.
func (h *Host) List(ctx context.Context) ([]Info, error) {
	stored, err := h.store.List(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[session.SessionID]Info{}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	for _, s := range stored {
		_, parked := h.parked[s.Header.ID]
		byID[s.Header.ID] = Info{Header: s.Header, Passivated: parked}
	}
	for id, e := range h.sessions {
		select {
		case <-e.ready:
			if e.err == nil {
				byID[id] = Info{Header: e.header, Resident: true, Running: e.open.Load()}
			}
		default:
		}
	}
	h.mu.Unlock()
	out := make([]Info, 0, len(byID))
	for _, i := range byID {
		out = append(out, i)
	}
	slices.SortFunc(out, func(a, b Info) int {
		switch {
		case a.Header.ID < b.Header.ID:
			return -1
		case a.Header.ID > b.Header.ID:
			return 1
		}
		return 0
	})
	return out, nil
}

// Peek describes the session and returns its events from seq from on,
// without resuming it: a resident session's from its actor, a stored
// one's as the store inspects it (an open turn closed in memory only;
// nothing is written and no lock is taken). A session neither resident
// nor stored is ErrNoSession.
func (h *Host) Peek(ctx context.Context, id session.SessionID, from int64) (Info, session.Events, error) {
	e, err := h.lockSettled(ctx, id)
	if err != nil {
		return Info{}, session.Events{}, err
	}
	if e != nil {
		e.inflight++
	}
	_, parked := h.parked[id]
	h.mu.Unlock()
	if e != nil {
		select {
		case <-e.ready:
		case <-ctx.Done():
			h.unuse(e)
			return Info{}, session.Events{}, context.Cause(ctx)
		}
		if e.err == nil {
			defer h.unuse(e)
			res, err := h.ask(ctx, e.session, session.QueryEvents{Ref: h.refs.Add(1), From: from})
			if err != nil {
				return Info{}, session.Events{}, err
			}
			return Info{Header: e.header, Resident: true, Running: e.open.Load()}, res.(session.EventsReply).Events, nil
		}
	}
	st, err := h.store.Inspect(ctx, id)
	if err != nil {
		if errors.Is(err, persister.ErrNotFound) {
			err = fmt.Errorf("%w: %s", ErrNoSession, id)
		}
		return Info{}, session.Events{}, err
	}
	from = min(max(from, 0), int64(len(st.Events)))
	return Info{Header: st.Header, Passivated: parked}, session.EventsOf(st.Events[from:]), nil
}

// Stats are a session's counters. Chunks, Turns and Usage cover the whole
// log: a resumed session folds the loaded events in, so turns from before
// a resume or a passivation count.
type Stats struct {
	Events  int64 // events in the log
	Chunks  int64 // assistant/chunk events in the log
	Turns   int64 // turn/end events in the log
	Durable int64 // last durable seq the persister reported (-1: none yet, or not resident)
	// Usage sums the usage of every assistant/message of the log.
	Usage messages.TokenUsage
	// Resident says the session's actors are running; a passivated
	// session's Stats are those it had when it passivated.
	Resident bool
	// WriteFailures counts the writes of the session's events that failed
	// (the persister's background retries included); WriteRetries the
	// background retries the persister made after a failure. Both cover
	// the session's life in this host, across passivations.
	WriteFailures int64
	WriteRetries  int64
	// ResidentBytes is a rough estimate of the memory the resident session
	// holds (0 when passivated): SessionOverheadBytes plus, per event of
	// the log, its JSON data length plus EventOverheadBytes. The session
	// actor's log and the agent's mirror share the immutable events, so
	// each event counts once. Compare Host.ResidentBytes with the heap
	// (runtime.MemStats) for the real figure.
	ResidentBytes int64
}

// Stats returns a session's counters: a resident one's, or a passivated
// one's as it passivated. A session that is only stored (never resident
// in this host) is ErrNoSession: Resume it first.
func (h *Host) Stats(id session.SessionID) (Stats, error) {
	e, err := h.resident(id)
	if err != nil {
		h.mu.Lock()
		p, ok := h.parked[id]
		h.mu.Unlock()
		if ok {
			return p.stats(), nil
		}
		return Stats{}, err
	}
	return e.stats(), nil
}

func (e *entry) stats() Stats {
	return Stats{Events: e.events.Load(), Chunks: e.chunks.Load(), Turns: e.turns.Load(), Durable: e.durable.Load(),
		Usage: messages.TokenUsage{InputTokens: e.inTokens.Load(), OutputTokens: e.outTokens.Load(),
			ReasoningTokens:  messages.Some(e.reasonTokens.Load()),
			CacheReadTokens:  messages.Some(e.cacheRead.Load()),
			CacheWriteTokens: messages.Some(e.cacheWrite.Load())},
		WriteFailures: e.writeFailures.Load(), WriteRetries: e.writeRetries.Load(),
		Resident: true, ResidentBytes: SessionOverheadBytes + e.bytes.Load()}
}

// Usage returns a session's token usage totals over its whole log (see
// Stats).
func (h *Host) Usage(id session.SessionID) (messages.TokenUsage, error) {
	s, err := h.Stats(id)
	return s.Usage, err
}

// Close stops every session: each running turn ends with reason disposed
// (agent.Dispose), everything is flushed (the persister untracks each
// session after a flush), and the agents, sessions, subscriptions and the
// persister are stopped in that order; then the store is closed and, when
// the host owns it, the actor system shut down. Close returns the errors
// met, on one line, but always stops everything. A second Close returns
// ErrClosed.
func (h *Host) Close(ctx context.Context) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	h.closed = true
	for _, e := range h.sessions {
		if e.timer != nil {
			e.timer.Stop()
		}
	}
	h.mu.Unlock()
	// Passivations in progress finish first (they take no new work once
	// closed is set).
	h.passWG.Wait()
	h.mu.Lock()
	entries := make([]*entry, 0, len(h.sessions))
	for _, e := range h.sessions {
		entries = append(entries, e)
	}
	subs := make([]*Subscription, 0, len(h.subs))
	for s := range h.subs {
		subs = append(subs, s)
	}
	h.mu.Unlock()

	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, 64)
	for _, e := range entries {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := h.stopSession(ctx, e); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("session %s: %w", e.id, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, s := range subs {
		s.stop(ErrClosed)
	}
	_ = h.sys.Root.PoisonFuture(h.notices).Wait()
	if err := h.sys.Root.PoisonFuture(h.persister).Wait(); err != nil {
		errs = append(errs, err)
	}
	if err := h.store.Close(); err != nil && !errors.Is(err, persister.ErrClosed) {
		errs = append(errs, err)
	}
	if h.ownSys {
		h.sys.Shutdown()
	}
	if h.metrics != nil {
		// The host's gauges go; the counts stay registered with the
		// provider, so an export after Close (an OTLP exporter's last
		// push at shutdown, a reader collecting after a run) still has
		// them.
		_ = h.unobserve()
	}
	if err := h.workers.close(ctx); err != nil {
		errs = append(errs, err)
	}
	return joinErrors(errs)
}

// joinedError is errors.Join on one line: a caller printing it (dsh prints
// one line per failure) gets "a; b", not a line per error.
type joinedError struct{ errs []error }

func (e *joinedError) Error() string {
	msgs := make([]string, len(e.errs))
	for i, err := range e.errs {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e *joinedError) Unwrap() []error { return e.errs }

// joinErrors is errors.Join with the text of joinedError: nil for no
// error, the error itself for one.
func joinErrors(errs []error) error {
	errs = slices.DeleteFunc(errs, func(err error) bool { return err == nil })
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return &joinedError{errs: errs}
}

// stopSession disposes the agent, flushes and untracks the session, and
// stops its actors.
func (h *Host) stopSession(ctx context.Context, e *entry) error {
	<-e.ready
	if e.err != nil {
		return nil
	}
	var errs []error
	if _, err := h.ask(ctx, e.agent, agent.Dispose{Ref: h.refs.Add(1)}); err != nil {
		errs = append(errs, fmt.Errorf("dispose: %w", err))
	}
	_, ferr := h.flush(ctx, e)
	if ferr != nil {
		errs = append(errs, fmt.Errorf("flush: %w", ferr))
	}
	// Untrack drains what the failed flush left queued: the same write,
	// failing for the same cause, which the flush error already reports.
	if _, err := h.barrier(ctx, persister.Untrack{Ref: h.refs.Add(1), ID: e.id}); err != nil && ferr == nil {
		errs = append(errs, fmt.Errorf("untrack: %w", err))
	}
	if err := h.sys.Root.PoisonFuture(e.agent).Wait(); err != nil {
		errs = append(errs, err)
	}
	if err := h.sys.Root.PoisonFuture(e.session).Wait(); err != nil {
		errs = append(errs, err)
	}
	return joinErrors(errs)
}
