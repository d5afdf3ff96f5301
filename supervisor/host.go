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

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
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
	limit       *limitedProvider     // nil when MaxConcurrentModelCalls is 0
	agents      *agent.Template      // every session's agent configuration, shared
	logger      *slog.Logger         // never nil
	metrics     *telemetry.Metrics   // nil without Config.MeterProvider
	persisted   *persister.Telemetry // the persister's queue and write times; nil without metrics
	unobserve   func() error         // unregisters the host gauges
	unwatch     func()               // stops logging actor failures; nil without Config.Logger
	workers     *workers             // runs the mailboxes of the actors spawned here
	actorOpts   []actor.PropsOption  // actorOptions(workers), made once: every actor spawned here shares them
	passWG      sync.WaitGroup       // passivation goroutines (timer callbacks)

	mu         sync.Mutex
	closed     bool
	sessions   map[session.SessionID]*entry
	subs       map[*subscription]struct{}
	parked     map[session.SessionID]parkedStats // counters of passivated and evicted sessions
	passivated int64                             // passivations so far
}

var hostSeq atomic.Uint64

// Open starts a host.
func Open(cfg Config) (*Host, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &Host{cfg: cfg, sessions: map[session.SessionID]*entry{}, subs: map[*subscription]struct{}{},
		parked: map[session.SessionID]parkedStats{}, name: fmt.Sprintf("dsh-host-%d", hostSeq.Add(1)), epoch: time.Now(),
		workers: &workers{}}
	h.actorOpts = actorOptions(h.workers)
	if h.cfg.RequestTimeout == 0 {
		h.cfg.RequestTimeout = DefaultRequestTimeout
	}
	if h.cfg.SubscriberBuffer == 0 {
		h.cfg.SubscriberBuffer = defaultSubscriberBuffer
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
		System: h.cfg.SystemPrompt, Tools: h.cfg.Tools, Retry: h.cfg.Retry, Hooks: h.cfg.Hooks, ChildOptions: h.actorOpts})
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
	if h.metrics != nil {
		h.persisted = &persister.Telemetry{OnSyncedWrite: h.metrics.SyncedWrite}
	}
	pp, err := persister.Props(persister.Config{Store: h.store, Policy: h.cfg.Policy, Window: cfg.Window,
		FsyncWorkers: cfg.FsyncWorkers, Shards: cfg.Shards, ShardOptions: firstOptions(h.workers), RetryMin: cfg.WriteRetryMin, RetryMax: cfg.WriteRetryMax,
		Telemetry: h.persisted})
	if err != nil {
		_ = h.store.Close()
		return nil, err
	}
	h.sys = cfg.System
	if h.sys == nil {
		h.sys = newSystem(cfg.Logger)
		h.ownSys = true
	}
	h.persister, err = h.sys.Root.SpawnNamed(pp.Configure(firstOptions(h.workers)...), h.name+"/persister")
	if err != nil {
		h.shutdown()
		return nil, err
	}
	h.notices, err = h.sys.Root.SpawnNamed(actor.PropsFromFunc(h.onNotice, firstOptions(h.workers)...), h.name+"/notices")
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
	h.unwatch = h.watchFailures()
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
		r.Inbox += e.inbox.Load()
	}
	h.mu.Unlock()
	if h.limit != nil {
		r.Queued = h.limit.waiting.Load()
	}
	w, n := h.persisted.Queued()
	r.QueuedWrites, r.QueuedEvents = int64(w), int64(n)
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
	subs := make([]*subscription, 0, len(h.subs))
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
	if h.unwatch != nil {
		h.unwatch()
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
