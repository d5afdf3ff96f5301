// Package testutil holds the few helpers the project's tests share.
package testutil

import (
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// QuietLogger is a protoactor logger factory that discards everything, so
// test output shows only the tests' own lines.
func QuietLogger(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }

// QuietSystem returns an actor system with a quiet logger and a short
// dead-letter throttle interval (protoactor's throttle goroutine lives for
// one interval after a dead letter, which goleak would report). The caller
// shuts it down.
func QuietSystem(opts ...actor.ConfigOption) *actor.ActorSystem {
	return actor.NewActorSystem(append([]actor.ConfigOption{actor.WithLoggerFactory(QuietLogger),
		actor.WithDeadLetterThrottleInterval(time.Millisecond)}, opts...)...)
}

// NewActorSystem is QuietSystem shut down when the test ends. Shutdown
// stops no actors (protoactor's Shutdown only closes a channel): a test
// stops the actors it spawned itself, in its own cleanups, which run before
// this one.
func NewActorSystem(t testing.TB, opts ...actor.ConfigOption) *actor.ActorSystem {
	t.Helper()
	sys := QuietSystem(opts...)
	t.Cleanup(sys.Shutdown)
	return sys
}

// Allocated returns the bytes fn allocates (the growth of
// runtime.MemStats.TotalAlloc, after a GC): what fn costs in memory,
// whatever the garbage collector did meanwhile. The tests that bound a
// reader's memory on hostile files use it.
func Allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
