package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/metric"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/telemetry"
)

// Config configures a Host. The zero Config is a memory-only host with the
// synthetic model: every field has a default that works.
type Config struct {
	// Dir is the root of the JSONL+zstd store (created on the first write).
	// "" keeps everything in memory: a MemStore and PolicyNone. The store
	// takes each session's writer lock (persister.JSONLConfig.Lock) before
	// its first write or repairing load and holds it while the session is
	// resident, so a second process (another host, a dsh run, a cluster
	// member) that tries to write it fails at once with a
	// *persister.LockedError naming this one; the lock costs one open file
	// descriptor per resident session.
	Dir string
	// Plain writes plain session.jsonl files instead of session.jsonl.zstd.
	Plain bool
	// Store overrides the store (Dir and Plain are then ignored). The host
	// closes it on Close. A JSONLStore shared with other processes must be
	// opened with Lock, as Dir's is.
	Store persister.Store
	// System is the actor system the host's actors live in. nil: the host
	// owns a fresh one with protoactor's logging silenced, shut down on
	// Close. An attached system is left running.
	System *actor.ActorSystem
	// Provider makes the model calls. nil: the synthetic model with its
	// defaults (seed 0).
	Provider llm.Provider
	// Model is the model id of every request. Default: the provider's own
	// Model() when it has one, else "default".
	Model string
	// Tools are offered to the model (nil: none).
	Tools *agent.Registry
	// SystemPrompt is the system prompt of every session ("" for none).
	SystemPrompt string
	// Hooks are installed on every agent.
	Hooks agent.Hooks
	// Inbox configures each session's inbox.
	Inbox inbox.Config
	// Retry is the retry policy of failed model calls (zero: defaults).
	Retry llm.RetryPolicy
	// Policy is the durability policy (persister.Policy). With Dir == ""
	// and no Store it is forced to PolicyNone.
	Policy persister.Policy
	// Window, FsyncWorkers and Shards configure the persister (zero:
	// persister defaults).
	Window       time.Duration
	FsyncWorkers int
	Shards       int
	// WriteRetryMin and WriteRetryMax bound the backoff of the persister's
	// background retry of a failed write (persister.Config.RetryMin and
	// RetryMax): the n-th consecutive failure is retried WriteRetryMin·2^(n-1)
	// later, at most WriteRetryMax. Defaults 100ms and 5s.
	WriteRetryMin time.Duration
	WriteRetryMax time.Duration
	// RequestTimeout bounds every blocking request the host makes to an
	// actor when the caller's context has no deadline. Default 10 minutes.
	RequestTimeout time.Duration
	// SubscriberBuffer is the number of live events a subscriber may fall
	// behind before it is dropped with ErrSlowSubscriber (the replayed past
	// is on top of it). Default 4096.
	SubscriberBuffer int
	// OnTurnDurable, when set, is called (from an actor; it must not block)
	// each time a session's turn/end became durable, with the time from the
	// commit of the turn/end to the persister's Durable notice; seq is the
	// turn/end's. A notice covering several turn ends calls it once for each.
	OnTurnDurable func(id session.SessionID, seq int64, latency time.Duration)
	// OnWriteFailed, when set, is called (from an actor; it must not block)
	// with each write failure the persister reports, the failures of its
	// background retries included. The events are kept and retried (see
	// WriteRetryMin); Stats counts the failures and the retries.
	OnWriteFailed func(id session.SessionID, err error)
	// SessionObservers are installed on every resident session's log,
	// after the host's own observer (session.Config.Observers): each is
	// called inside the session actor with every committed event, after
	// the commit and before the append is acknowledged; it must not block.
	// Its error or panic is contained and handed to OnObserverFailure.
	SessionObservers []session.Observer
	// Observers watch the events of every session (metrics, traces): each
	// one's Open is called when a session becomes resident and what it
	// returns is installed on the session's log after SessionObservers,
	// with the same contract (in the session actor, cheap, never blocking,
	// failures contained); see telemetry.Observer. nil: none, at no cost.
	Observers []telemetry.Observer
	// Logger receives the host's log records, each with the session id
	// ("session") when it is about one: a write failure (warn, once per
	// run of failures; the failed retries at debug) and its recovery
	// (info), a passivation and a resume (debug), a dropped subscriber
	// (warn). When the host owns its actor system (System nil), protoactor's
	// own records go here too, all at debug level. nil: discarded.
	Logger *slog.Logger
	// MeterProvider receives the host's metrics (telemetry.Metrics: the
	// event-derived counts through an Observer, the host's gauges, the
	// turn-end flush latency, write failures, model-call queue wait).
	// nil: no instrument is created and nothing is installed on the
	// session path. Close unregisters the host's gauges but leaves the
	// counts registered (a last export after Close still has them), so a
	// provider shared by many hosts in turn holds a callback per host
	// until it shuts down.
	MeterProvider metric.MeterProvider
	// OnObserverFailure, when set, receives every contained observer
	// failure of a session (session.Config.OnObserverFailure), inside the
	// session actor; it must not block. nil: logged at warn level. Should
	// it panic, the session actor is restarted: the log, its subscribers
	// (the persister) and the interrupted append's reply survive it.
	OnObserverFailure func(id session.SessionID, f session.ObserverFailure)
	// IdleTimeout, when positive, passivates a session idle that long (no
	// host call using it, no turn open, no open Subscription, its log
	// durable): its actors stop and it is resumed from the store,
	// transparently, by the next call that names it. 0: never. Ignored
	// under PolicyNone (and so for a memory-only host): nothing is written
	// there, a passivated session could not come back.
	IdleTimeout time.Duration
	// MaxConcurrentModelCalls, when positive, bounds the model calls open
	// at once across the host; the others wait in a queue (until their
	// context is done), they do not fail. 0: unbounded.
	MaxConcurrentModelCalls int
	// Clock returns the time stamped on events, in epoch ms. Default: the
	// wall clock.
	Clock func() int64
	// ManualResume keeps the host from loading stored sessions on demand:
	// only Create, Resume and Fork make a session resident, and every
	// other method naming a session that is not resident fails with
	// ErrNoSession. A cluster member sets it, so that a session is brought
	// in only by its grain (the one place that decided it lives here).
	ManualResume bool
}

// Defaults.
const (
	DefaultRequestTimeout   = 10 * time.Minute
	defaultSubscriberBuffer = 4096
)

// validate reports a config that cannot work. Zero fields are fine.
func (c Config) validate() error {
	var errs []error
	if c.Policy < persister.PolicyTurnEnd || c.Policy > persister.PolicyNone {
		errs = append(errs, fmt.Errorf("supervisor: unknown policy %d", int(c.Policy)))
	}
	if c.FsyncWorkers < 0 {
		errs = append(errs, fmt.Errorf("supervisor: negative FsyncWorkers %d", c.FsyncWorkers))
	}
	if c.Shards < 0 {
		errs = append(errs, fmt.Errorf("supervisor: negative Shards %d", c.Shards))
	}
	if c.Window < 0 {
		errs = append(errs, fmt.Errorf("supervisor: negative Window %v", c.Window))
	}
	if c.WriteRetryMin < 0 || c.WriteRetryMax < 0 {
		errs = append(errs, fmt.Errorf("supervisor: negative write retry backoff (WriteRetryMin %v, WriteRetryMax %v)", c.WriteRetryMin, c.WriteRetryMax))
	}
	if c.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("supervisor: negative RequestTimeout %v", c.RequestTimeout))
	}
	if c.IdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("supervisor: negative IdleTimeout %v", c.IdleTimeout))
	}
	if c.MaxConcurrentModelCalls < 0 {
		errs = append(errs, fmt.Errorf("supervisor: negative MaxConcurrentModelCalls %d", c.MaxConcurrentModelCalls))
	}
	if c.SubscriberBuffer < 0 {
		errs = append(errs, fmt.Errorf("supervisor: negative SubscriberBuffer %d", c.SubscriberBuffer))
	}
	if err := c.Inbox.Validate(); err != nil {
		errs = append(errs, err)
	}
	return joinErrors(errs)
}

// Errors of the host. Match them with errors.Is.
var (
	// ErrClosed: the host was closed.
	ErrClosed = errors.New("supervisor: host closed")
	// ErrNoSession: no session with that id is resident or stored.
	ErrNoSession = errors.New("supervisor: no such session")
	// ErrExists: Create of an id that is resident or stored.
	ErrExists = errors.New("supervisor: session already exists")
	// ErrSlowSubscriber: a subscriber fell more than SubscriberBuffer
	// events behind and was dropped; the session went on.
	ErrSlowSubscriber = errors.New("supervisor: subscriber too slow, dropped")
	// ErrNotDurable: a Followup or Steer refused because the session's
	// last write failed (fail closed); it wraps the write error. The
	// persister retries the write in the background (Host.Flush retries
	// it at once); as soon as a write succeeds, turns start again.
	ErrNotDurable = errors.New("supervisor: session not durable, no new turn")
)

// quietLogger discards protoactor's logging.
func quietLogger(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }

// newSystem returns an actor system whose own log records go to logger at
// debug level (telemetry.DebugHandler): protoactor logs routine events
// (an actor restarting, a dead letter) at info and above, which would
// drown a host's records. nil logger: silenced, as NewQuietSystem.
func newSystem(logger *slog.Logger, opts ...actor.ConfigOption) *actor.ActorSystem {
	factory := quietLogger
	if logger != nil {
		l := slog.New(telemetry.DebugHandler(logger.Handler())).With("lib", "protoactor")
		factory = func(*actor.ActorSystem) *slog.Logger { return l }
	}
	return actor.NewActorSystem(append([]actor.ConfigOption{actor.WithLoggerFactory(factory),
		actor.WithDeadLetterThrottleInterval(time.Millisecond)}, opts...)...)
}

// NewSystem returns an actor system whose own records (protoactor's) go
// to logger at debug level, as a host's own system's do; a quiet one
// (NewQuietSystem) when logger is nil. For an embedder that makes the
// system its host runs in (a cluster member);
// opts are more of protoactor's options (its metrics: WithMetricProviders).
func NewSystem(logger *slog.Logger, opts ...actor.ConfigOption) *actor.ActorSystem {
	return newSystem(logger, opts...)
}

// NewQuietSystem returns an actor system whose own logging is silenced,
// as the host makes when Config.System and Config.Logger are nil.
func NewQuietSystem() *actor.ActorSystem {
	return actor.NewActorSystem(actor.WithLoggerFactory(quietLogger),
		actor.WithDeadLetterThrottleInterval(time.Millisecond))
}
