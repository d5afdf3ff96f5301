package persister

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Policy says when the persister makes a session's events durable beyond
// the write-behind window (docs/durability.md#durability-policies and
// docs/durability.md#the-durability-contract).
type Policy int

const (
	// PolicyTurnEnd is the default. Committed events are written behind, in
	// batches (one window from the first buffered event, or the size
	// bound), and every turn/end is a durable checkpoint: it starts a flush
	// barrier at once, so the turn is written and fsynced without waiting
	// for the window and the owner hears Durable for its seq.
	PolicyTurnEnd Policy = iota
	// PolicyStrict is PolicyTurnEnd plus the harness's semantic checkpoints
	// (docs/durability.md#durability-policies): a flush barrier also starts as
	// soon as a request/header or a tool/call event is committed. The mapping:
	// the agent appends request/header right before it dispatches a model
	// request (checkpoint 1, "llm/stream"), and tool/call right before a tool
	// body runs (checkpoint 2, "tools/execute"); the previous step's responses
	// and results (checkpoint 3, "agent/pre-step") are covered because they
	// precede the next step's request/header in the same queue. The persister
	// only makes these writes eager; an agent that must fail closed (not
	// dispatch until durable) waits for Durable or sends Flush{UpTo: seq} and
	// waits for Flushed.
	PolicyStrict
	// PolicyNone keeps everything in memory: nothing is written (the store
	// is still asked to Create the session, nothing else), no timer runs,
	// and the durable watermark is simply the last received seq. Flush and
	// Untrack answer Flushed{Durable: last received seq} at once (after
	// waiting for UpTo to arrive), and the owner hears Durable at every
	// turn/end, the checkpoint a host waits on. For tests and pure
	// benchmarks: a crash loses everything.
	PolicyNone
)

// String returns the policy's name: "turn-end", "strict" or "none".
func (p Policy) String() string {
	switch p {
	case PolicyTurnEnd:
		return "turn-end"
	case PolicyStrict:
		return "strict"
	case PolicyNone:
		return "none"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Defaults of the zero Config fields.
const (
	DefaultWindow         = 200 * time.Millisecond
	DefaultMaxBatchEvents = 4096
	DefaultFsyncWorkers   = 32
	DefaultShards         = 8
	DefaultWriteTimeout   = time.Minute
	DefaultRetryMin       = 100 * time.Millisecond
	DefaultRetryMax       = 5 * time.Second
)

// maxWindow is the reference's upper bound on the batching delay (2^31−1
// ms, docs/durability.md#write-behind-and-barriers).
const maxWindow = (1<<31 - 1) * time.Millisecond

// Config configures a persister (Props). Every field may be left at zero;
// Store is required unless Policy is PolicyNone.
type Config struct {
	// Store receives the writes. Only its Writer side is used: Create on
	// Track, Append for every batch. Required unless Policy is PolicyNone
	// (then it may be nil, and Track creates nothing).
	Store Writer
	// Policy says which events are durable checkpoints. Default
	// PolicyTurnEnd.
	Policy Policy
	// Window is the write-behind delay: one fixed window from the first
	// buffered event; later events do not extend it. Default 200ms; at
	// most 2^31−1 ms.
	Window time.Duration
	// MaxBatchEvents is the size bound: once this many events are buffered
	// for a session, its write starts without waiting for the window.
	// Default 4096.
	MaxBatchEvents int
	// FsyncWorkers bounds the goroutines running Store.Append, across all
	// shards. Default 32: a barrier's store call spends most of its time
	// waiting for the disk, and a disk completes concurrent fsyncs of
	// different files faster than the same fsyncs one at a time (the file
	// system commits its journal for many at once), so when a thousand
	// turn ends come together the queue drains several times faster than
	// with a handful of workers (docs/performance.md#fsync-workers). A
	// SQLiteStore is written by one more goroutine, a group at a time;
	// the workers run its other calls.
	FsyncWorkers int
	// Shards is the number of shard actors; a session lives on the shard
	// chosen by a hash of its id. Default 8.
	Shards int
	// ShardOptions configure the shard actors (a host runs their
	// mailboxes in its workers' first lane, as it does the persister's:
	// docs/performance.md#fsync-completions). Default none: protoactor's
	// defaults.
	ShardOptions []actor.PropsOption
	// WriteTimeout is the deadline of each Store call. A write that times
	// out fails like any other (the batch is kept and retried). Default
	// one minute.
	WriteTimeout time.Duration
	// RetryMin and RetryMax bound the backoff of the background retry of a
	// failed write: the first retry comes RetryMin after
	// the failure, each further one twice as late as the one before, up to
	// RetryMax, for as long as the write fails. Defaults 100ms and 5s;
	// RetryMax below RetryMin is raised to it.
	RetryMin time.Duration
	RetryMax time.Duration
	// Now and AfterFunc are the clock and timer hooks (tests). Defaults:
	// time.Now and time.AfterFunc (which testing/synctest fakes already).
	// AfterFunc must call f once after d unless stop (its result) is called
	// first; stop reports whether it prevented the call.
	Now       func() time.Time
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
	// Telemetry, when set, watches the persister's store calls (queued
	// writes, durable write latency) for metrics. nil: nothing is
	// measured.
	Telemetry *Telemetry
}

// validate reports a config that cannot work. Zero fields are fine.
func (c Config) validate() error {
	var errs []error
	if c.Store == nil && c.Policy != PolicyNone {
		errs = append(errs, errors.New("persister: config needs a store (or PolicyNone)"))
	}
	if c.Policy < PolicyTurnEnd || c.Policy > PolicyNone {
		errs = append(errs, fmt.Errorf("persister: unknown policy %d", int(c.Policy)))
	}
	if c.Window < 0 || c.Window > maxWindow {
		errs = append(errs, fmt.Errorf("persister: window %v out of range (0 for the default, up to %v)", c.Window, maxWindow))
	}
	if c.Window > 0 && c.Window < time.Millisecond {
		errs = append(errs, fmt.Errorf("persister: window %v is below 1ms", c.Window))
	}
	if c.MaxBatchEvents < 0 {
		errs = append(errs, fmt.Errorf("persister: negative MaxBatchEvents %d", c.MaxBatchEvents))
	}
	if c.FsyncWorkers < 0 {
		errs = append(errs, fmt.Errorf("persister: negative FsyncWorkers %d", c.FsyncWorkers))
	}
	if c.Shards < 0 {
		errs = append(errs, fmt.Errorf("persister: negative Shards %d", c.Shards))
	}
	if c.WriteTimeout < 0 {
		errs = append(errs, fmt.Errorf("persister: negative WriteTimeout %v", c.WriteTimeout))
	}
	if c.RetryMin < 0 || c.RetryMax < 0 {
		errs = append(errs, fmt.Errorf("persister: negative retry backoff (RetryMin %v, RetryMax %v)", c.RetryMin, c.RetryMax))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.MaxBatchEvents == 0 {
		c.MaxBatchEvents = DefaultMaxBatchEvents
	}
	if c.FsyncWorkers == 0 {
		c.FsyncWorkers = DefaultFsyncWorkers
	}
	if c.Shards == 0 {
		c.Shards = DefaultShards
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.RetryMin == 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax == 0 {
		c.RetryMax = DefaultRetryMax
	}
	c.RetryMax = max(c.RetryMax, c.RetryMin)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.AfterFunc == nil {
		c.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	return c
}

// retryDelay returns how long after the attempt-th consecutive failed
// write of a session the persister retries it on its own: RetryMin
// doubled attempt-1 times, capped at RetryMax. With the defaults: 100ms,
// 200ms, 400ms, 800ms, 1.6s, 3.2s, then 5s for every further attempt.
// Zero fields take their defaults.
func (c Config) retryDelay(attempt int) time.Duration {
	c = c.withDefaults()
	d := c.RetryMin
	for i := 1; i < attempt && d < c.RetryMax; i++ {
		d *= 2
	}
	return min(d, c.RetryMax)
}
