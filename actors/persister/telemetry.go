package persister

import (
	"sync/atomic"
	"time"
)

// Telemetry is how an embedder watches a persister's store calls
// (docs/observability.md#metrics): it reads the writes waiting for a store
// call (Queued) and is told how long each durable write took
// (OnSyncedWrite). Put one in Config.Telemetry; one Telemetry watches one
// persister at a time. It costs nothing per event: the queue is counted
// when Queued is called (a metrics collection), and the clock is read
// twice per durable write, only when OnSyncedWrite is set. A Config
// without one pays nothing.
type Telemetry struct {
	// OnSyncedWrite, when set, is called after each store write that had
	// to be durable and succeeded, with how long the store call took: the
	// write and its fsync (a group commit holding a barrier is one call,
	// reported once). It is called on the persister's worker goroutines:
	// it must be quick, never block, and be safe for concurrent use.
	OnSyncedWrite func(d time.Duration)

	pool atomic.Pointer[pool] // the running persister's pool; nil when stopped
}

// Queued returns the writes waiting for a store call (a free worker, or
// the next group commit) and the events they hold; zero when no persister
// runs with t. A barrier that took over a queued write-behind batch counts
// once. Safe for concurrent use; it takes the queue's lock for a walk of
// the queue, so call it at a collection's pace, not per event.
func (t *Telemetry) Queued() (writes, events int) {
	if t == nil {
		return 0, 0
	}
	p := t.pool.Load()
	if p == nil {
		return 0, 0
	}
	return p.queued()
}

// syncedWrite returns the clock to time a durable write with (nil when t
// wants no such report).
func (t *Telemetry) syncedWrite() func(time.Duration) {
	if t == nil {
		return nil
	}
	return t.OnSyncedWrite
}

// queued counts the writes waiting in the pool's queues and their events.
// A background write promoted to a synced one sits in both a barrier and a
// background queue: it is counted in the barrier queue only.
func (p *pool) queued() (writes, events int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	count := func(q *jobQueue, background bool) {
		for _, j := range q.jobs[q.head:] {
			if j == nil || j.done == nil {
				continue // not a write (Create, Release)
			}
			j.mu.Lock()
			if !j.taken && !(background && j.sync) {
				writes++
				events += len(j.batch)
			}
			j.mu.Unlock()
		}
	}
	count(&p.barrier, false)
	count(&p.behind, true)
	count(&p.gBarrier, false)
	count(&p.gBehind, true)
	return writes, events
}
