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
// appendGroup instead of Append: the writes due (barriers and write-behind
// batches of any session) queue up while a group is written and committed,
// and join it or the next one, so a single sync makes many sessions' turn
// ends durable. A store without it is written one Append per batch, as
// before.
//
// Rejected alternative: the store grouping concurrent Append calls
// itself (a leader-follower commit inside the store). It needs as many
// goroutines blocked in Append as sessions to group, while the pool bounds
// store calls to FsyncWorkers; the pool's queue already holds every write
// that is due, so it is the natural place to cut groups.
type groupWriter interface {
	// appendGroup writes the batches next hands it, in one transaction,
	// and returns one result per batch taken, in order. It takes batches
	// until next says there are no more (or it fails before writing any:
	// then it may take only the first), so that a barrier queued while
	// the group is being written still joins it. No two batches are of
	// the same session. Each result means what Writer.Append's error
	// would for that batch alone: nil means written; an error means
	// nothing of the batch is stored and the session is cut back to its
	// last durable event (a failed commit fails every batch in it, each
	// with the error). A batch's failure (its fence, its checks) fails
	// that batch only: the others still commit. If any batch is Durable,
	// the call is a barrier for the whole group: every batch whose result
	// is nil is durable when it returns (one sync covers them all).
	// Errors name the operation and the session, as Append's. The store
	// must not keep the batches or their events after it returns; the
	// caller owns them.
	appendGroup(ctx context.Context, next func() (groupBatch, bool)) []error
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

// maxGroupBackground and maxGroupBackgroundEvents bound the write-behind
// batches of one group (their count, and their events once one is taken),
// so that a commit stays short: a turn end that arrives once the group has
// stopped taking work waits for that commit, and under a thousand streaming
// sessions a commit of every session's write-behind batch held the next
// turn ends for seconds. Barriers are not counted: a group takes every
// barrier queued, up to maxGroupBatches.
const (
	maxGroupBackground       = 64
	maxGroupBackgroundEvents = 4096
)

// groupGather is how long the committer waits for more write-behind
// batches when only write-behind batches are queued, fewer than a group
// takes (maxGroupBackground), before it commits them (from the oldest
// one's queueing: a batch waits groupGather at most): under a thousand
// streaming sessions a commit of one session's batch was the usual group
// (tens of thousands of commits in a paced run, each paying a
// transaction's fixed costs and rewriting the same table and index pages
// into the WAL). A barrier queued ends the wait at once: a gather never
// holds a turn end. Write-behind batches have no latency to keep; 5 ms is
// a fortieth of their window. Figures:
// docs/durability.md#write-behind-and-barriers.
const groupGather = 5 * time.Millisecond

// groupBehindLate is how long a write-behind batch waits before a group
// that holds a barrier takes it (others do not: see commit): under
// barriers that never let up (a flat-out run) a write-behind group may
// never start, and the batches go with the barriers instead, as late as
// this. Four gathers: in a paced run they are committed by their own
// groups long before.
const groupBehindLate = 4 * groupGather

// commit is the pool's group committer (pool.group set): it commits the
// queued writes a group at a time, with one appendGroup each, until the
// pool closes. With only write-behind batches queued it first gathers
// them for up to groupGather (gatherWait). A group takes its writes one
// at a time while it is being written, barriers first at every step: a
// turn end queued while a group is written joins that group ahead of the
// write-behind batches still queued, and one queued once the group has
// stopped taking work (while it commits) is the first write of the next
// group. So a barrier never waits behind more write-behind work than the
// one session's write in progress and the bounded group it is committing
// with (see maxGroupBackground). A group that holds a barrier takes no
// more write-behind batches but late ones (groupBehindLate): a barrier's
// commit carried a gather's worth of them (up to maxGroupBackground) and
// took twice as long at the median as one with none; they are committed
// right after it, no sync needed
// (docs/durability.md#write-behind-and-barriers).
// One committer, so one group in flight: a second concurrent transaction
// on one database file would only wait for the first's lock.
//
// Rejected alternative: cutting the group when a barrier arrives and
// committing the barrier in a group of its own. It costs the same
// statements and one more transaction, and the barrier waits for the
// write-behind group's commit first.
func (p *pool) commit() {
	g := &groupCycle{p: p}
	var timer *time.Timer
	for {
		if d := p.gatherWait(); d > 0 {
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			select {
			case <-p.gwake: // a barrier, or more write-behind: look again
			case <-timer.C:
			case <-p.done:
				timer.Stop()
				return
			}
			timer.Stop()
			continue
		}
		first := p.takeForGroup(g)
		if first == nil {
			select {
			case <-p.gwake:
				continue
			case <-p.done:
				return
			}
		}
		g.first = first
		g.commitGroup()
		clear(g.jobs)
		*g = groupCycle{p: p, jobs: g.jobs[:0], taken: g.taken[:0]}
	}
}

// groupCycle is the group being committed: the writes taken so far, in
// the order the store took them.
type groupCycle struct {
	p     *pool
	first *writeJob // taken, not yet handed to the store
	jobs  []*writeJob
	// taken is, per job, the length and sync flag of the batch handed to
	// the store: a write-behind job's may grow (a late fold) while the
	// group is written.
	taken []takenBatch
	// behind and behindEvents count the write-behind batches taken and
	// their events, barriers the barriers.
	behind, behindEvents, barriers int
}

// next hands the store the group's next write: the first one taken, then
// the oldest barrier queued, else the oldest write-behind batch while the
// group's bounds allow. ok is false when the group takes no more.
func (g *groupCycle) next() (groupBatch, bool) {
	j := g.first
	g.first = nil
	if j == nil {
		if j = g.p.takeForGroup(g); j == nil {
			return groupBatch{}, false
		}
	}
	g.jobs = append(g.jobs, j)
	batch, sync := j.start()
	g.taken = append(g.taken, takenBatch{n: len(batch), sync: sync})
	return groupBatch{ID: j.id, Events: batch, Durable: sync}, true
}

// takenBatch is what a group handed the store of one job.
type takenBatch struct {
	n    int
	sync bool
}

// gatherWait returns how long the committer waits before it takes a
// group: what is left of the oldest write-behind batch's gather
// (groupGather from its queueing) while only write-behind batches are
// queued, fewer than maxGroupBackground; 0 when a group is to be taken
// now (a barrier queued, a group's worth of write-behind, the gather
// over) or nothing is queued (the committer then waits for work).
func (p *pool) gatherWait() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.gBehind.len()
	if n == 0 || p.closed || p.gBarrier.len() > 0 || n >= maxGroupBackground {
		return 0
	}
	return max(0, groupGather-p.gBehind.oldestWait())
}

// takeForGroup takes the next write of group g (see groupCycle.next), nil
// if none or the pool is closed. Taken, its batch and sync are final.
func (p *pool) takeForGroup(g *groupCycle) *writeJob {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(g.jobs) >= maxGroupBatches {
		return nil
	}
	if j := p.gBarrier.pop(); j != nil {
		g.barriers++
		return j
	}
	if g.behind >= maxGroupBackground || g.behindEvents >= maxGroupBackgroundEvents {
		return nil
	}
	if g.barriers > 0 && p.gBehind.oldestWait() < groupBehindLate { // none queued: 0
		return nil
	}
	j := p.gBehind.pop()
	switch {
	case j == nil:
	case j.sync: // promoted, still in this queue too
		g.barriers++
	default:
		g.behind++
		g.behindEvents += len(j.batch)
	}
	return j
}

// commitGroup writes the group with one appendGroup and reports each
// outcome to its session. A write that was not a barrier is reported
// synced when the group held a barrier and it succeeded: the group's sync
// covered it.
//
// A write-behind job that a turn end folded into late, while the group
// was written (pool.promote: its batch grew by the barrier's events), is
// followed at once by the rest of its batch, synced, queued as barrier
// work by the committer itself: the first write of the next group (if no
// other barrier queued before it). Its outcome, and the first part's, is
// reported once that one commits, as the worker's late fold reports both
// calls as one (docs/durability.md#write-behind-and-barriers). Without
// it, the turn end waited for this group's outcome to reach its session's
// shard, and then queued again.
func (g *groupCycle) commitGroup() {
	p := g.p
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	var start time.Time
	if p.synced != nil {
		start = time.Now()
	}
	errs := appendGroupSafely(ctx, p.group, g.next)
	cancel()
	durable := false
	for _, t := range g.taken {
		durable = durable || t.sync
	}
	// A batch's own failure (its fence) fails it alone: the group's sync
	// ran if any batch was written.
	if p.synced != nil && durable && slices.ContainsFunc(errs, func(err error) bool { return err == nil }) {
		p.synced(time.Since(start))
	}
	for i, j := range g.jobs {
		err, t := errs[i], g.taken[i]
		if !t.sync {
			if rest, late := j.finish(t.n, false, err); late {
				p.submitJob(&writeJob{id: j.id, batch: rest, sync: true, done: func(_ bool, err error) { j.done(true, err) }}, true)
				continue
			}
		}
		j.done(t.sync || (durable && err == nil), err)
	}
}

// appendGroupSafely is groupWriter.appendGroup with a panic, or a result
// of the wrong length, turned into the same error for every batch taken,
// as appendSafely does for one.
func appendGroupSafely(ctx context.Context, g groupWriter, next func() (groupBatch, bool)) (errs []error) {
	var taken []session.SessionID
	failAll := func(err error) []error {
		errs := make([]error, len(taken))
		for i, id := range taken {
			errs[i] = fmt.Errorf("persister: append %s: %w", id, err)
		}
		return errs
	}
	defer func() {
		if r := recover(); r != nil {
			errs = failAll(fmt.Errorf("group commit of %d sessions: store panicked: %v", len(taken), r))
		}
	}()
	errs = g.appendGroup(ctx, func() (groupBatch, bool) {
		b, ok := next()
		if ok {
			taken = append(taken, b.ID)
		}
		return b, ok
	})
	if len(errs) != len(taken) {
		return failAll(fmt.Errorf("group commit of %d sessions: store returned %d results", len(taken), len(errs)))
	}
	return errs
}
