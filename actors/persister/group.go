package persister

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dshgo/dsh/actors/session"
)

// groupWriter is implemented by a store that can commit the writes of many
// sessions at once: one transaction and one sync for all of them (a
// database file holding every session). The persister then writes through
// appendGroup instead of Append: while one group commits, the writes due
// (barriers and write-behind batches of any session) queue up, and the
// next commit takes them all, so a single sync makes many sessions' turn
// ends durable. A store without it is written one Append per batch, as
// before.
//
// Rejected alternative: the store grouping concurrent Append calls
// itself (a leader-follower commit inside the store). It needs as many
// goroutines blocked in Append as sessions to group, while the pool bounds
// store calls to FsyncWorkers; the pool's queue already holds every write
// that is due, so it is the natural place to cut groups.
type groupWriter interface {
	// appendGroup writes batches, no two of the same session, and returns
	// one result per batch, in order. Each result means what
	// Writer.Append's error would for that batch alone: nil means written;
	// an error means nothing of the batch is stored and the session is cut
	// back to its last durable event (a failed commit fails every batch
	// in it, each with the error). A batch's failure (its fence, its
	// checks) fails that batch only: the others still commit. If any batch
	// is Durable, the call is a barrier for the whole group: every batch
	// whose result is nil is durable when it returns (one sync covers
	// them all). Errors name the operation and the session, as Append's.
	// The store must not keep the batches or their events after it
	// returns; the caller owns them.
	appendGroup(ctx context.Context, batches []groupBatch) []error
}

// groupBatch is one session's write in a group commit: what one Append call
// would have written.
type groupBatch struct {
	ID      session.SessionID
	Events  []session.Event
	Durable bool
}

// maxGroupBatches bounds the batches of one group commit, so that a
// commit (and the lock it holds on the store) stays short under a burst;
// what is left over goes in the next commit, barriers first.
const maxGroupBatches = 1024

// maxGroupBackground bounds the write-behind batches of one group, so that
// a turn end arriving while a commit runs waits for a short one: under a
// thousand streaming sessions, a commit of every session's write-behind
// batch held the next turn ends for seconds.
const maxGroupBackground = 64

// commit is the pool's group committer (pool.group set): it takes every
// write queued (barriers first, then write-behind batches, up to
// maxGroupBatches) and commits them with one appendGroup, and again, until
// the pool closes. Writes queued while a commit runs wait for the next
// one: that is the grouping. One committer, so one group in flight: a
// second concurrent transaction on one database file would only wait for
// the first's lock.
func (p *pool) commit() {
	var jobs []*writeJob
	for {
		jobs = p.takeGroup(jobs[:0])
		if len(jobs) == 0 {
			select {
			case <-p.gwake:
				continue
			case <-p.done:
				return
			}
		}
		p.commitGroup(jobs)
		clear(jobs)
	}
}

// takeGroup appends the queued writes of the next group to jobs: taken,
// so their batch and sync are final.
func (p *pool) takeGroup(jobs []*writeJob) []*writeJob {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return jobs
	}
	for len(jobs) < maxGroupBatches {
		j := p.gBarrier.pop()
		if j == nil {
			break
		}
		jobs = append(jobs, j)
	}
	for limit := min(maxGroupBatches, len(jobs)+maxGroupBackground); len(jobs) < limit; {
		j := p.gBehind.pop()
		if j == nil {
			break
		}
		jobs = append(jobs, j)
	}
	return jobs
}

// commitGroup writes jobs with one appendGroup and reports each outcome to
// its session. A write that was not a barrier is reported synced when the
// group held a barrier and it succeeded: the group's sync covered it.
func (p *pool) commitGroup(jobs []*writeJob) {
	batches := make([]groupBatch, len(jobs))
	durable := false
	for i, j := range jobs {
		batches[i] = groupBatch{ID: j.id, Events: j.batch, Durable: j.sync}
		durable = durable || j.sync
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	var start time.Time
	if p.synced != nil && durable {
		start = time.Now()
	}
	errs := appendGroupSafely(ctx, p.group, batches)
	cancel()
	// A batch's own failure (its fence) fails it alone: the group's sync
	// ran if any batch was written.
	if p.synced != nil && durable && slices.ContainsFunc(errs, func(err error) bool { return err == nil }) {
		p.synced(time.Since(start))
	}
	for i, j := range jobs {
		err := errs[i]
		j.done(j.sync || (durable && err == nil), err)
	}
}

// appendGroupSafely is groupWriter.appendGroup with a panic, or a result
// of the wrong length, turned into the same error for every batch, as
// appendSafely does for one.
func appendGroupSafely(ctx context.Context, g groupWriter, batches []groupBatch) (errs []error) {
	failAll := func(err error) []error {
		errs := make([]error, len(batches))
		for i := range errs {
			errs[i] = fmt.Errorf("persister: append %s: %w", batches[i].ID, err)
		}
		return errs
	}
	defer func() {
		if r := recover(); r != nil {
			errs = failAll(fmt.Errorf("group commit of %d sessions: store panicked: %v", len(batches), r))
		}
	}()
	errs = g.appendGroup(ctx, batches)
	if len(errs) != len(batches) {
		return failAll(fmt.Errorf("group commit of %d sessions: store returned %d results", len(batches), len(errs)))
	}
	return errs
}
