package persister

import (
	"context"
	"sync"
	"time"

	"github.com/dshgo/dsh/actors/session"
)

// pool runs jobs on a fixed set of goroutines: the bound on concurrent
// store calls (FsyncWorkers). Jobs queue in two unbounded queues (a shard
// never blocks on submit): barrier work (synced writes, Create, Release)
// and background work (write-behind batches, written but not synced). A
// worker always takes barrier work first, so a turn end never waits
// behind other sessions' background batches (it waits at most for the
// FsyncWorkers calls in flight); within a queue jobs run in submission
// order. A background write promoted to a synced one (promote) is queued
// as barrier work too, and runs from whichever queue reaches it first; one
// promoted while its store call runs is extended instead (a late fold):
// the worker appends the barrier's events right after it, synced, so the
// barrier does not queue again behind other sessions' barriers.
// Safe for concurrent use.
//
// Rejected alternative: a goroutine per write waiting on a semaphore. It
// bounds the store calls just as well, but parks one goroutine per session
// with a write due (thousands under load) and makes joining them on stop a
// matter of counting; a fixed pool has exactly FsyncWorkers goroutines to
// join. Rejected too: one queue in submission order (what this was). Under
// a thousand sessions a turn end queued behind every batch submitted
// before it.
//
// With a groupWriter store (group set) the writes go to a third pair of
// queues, gBarrier and gBehind, that one more goroutine, the committer,
// empties a group at a time (group.go); the workers run the other jobs
// (Create, Release).
type pool struct {
	ctx    context.Context // cancelled by close: aborts the store calls in flight
	cancel context.CancelFunc
	wake   chan struct{} // 1-buffered: "there may be jobs"
	done   chan struct{} // closed by close
	wg     sync.WaitGroup

	mu      sync.Mutex // guards barrier, behind, gBarrier, gBehind, closed
	barrier jobQueue
	behind  jobQueue
	closed  bool

	// group, when set, commits the writes (group.go): gBarrier and gBehind
	// are its queues, gwake (1-buffered) wakes the committer, and timeout
	// is the deadline of each commit.
	group    groupWriter
	gBarrier jobQueue
	gBehind  jobQueue
	gwake    chan struct{}
	timeout  time.Duration

	// synced, when set, is told how long each durable write that
	// succeeded took (Config.Telemetry).
	synced func(time.Duration)
}

// writeJob is one queued job. taken makes sure it runs once, though a
// promoted job sits in both queues. A write's batch and sync flag may be
// changed (promote) until a worker takes it; a background write run by a
// worker or taken by a group commit (start) may still be extended, synced,
// until its store call or its group's returns (finish).
type writeJob struct {
	run func(context.Context)
	// id and done are set for a write: a group commit writes its batch
	// for session id and reports the outcome through done (synced: the
	// store synced it) instead of calling run.
	id   session.SessionID
	done func(synced bool, err error)

	mu    sync.Mutex // guards the fields below
	taken bool
	// running says a worker's run is in the store call of the job's
	// background batch, or a group commit holds it (start to finish): a
	// promote then folds late.
	running bool
	batch   []session.Event
	sync    bool
	// queued is when a write-behind write was queued for the group
	// committer (its gather: group.go).
	queued time.Time
}

// take marks j taken, reporting whether it was not already.
func (j *writeJob) take() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.taken {
		return false
	}
	j.taken = true
	return true
}

// jobQueue is a FIFO of jobs.
type jobQueue struct {
	jobs []*writeJob
	head int // jobs[head:] are pending
}

func (q *jobQueue) push(j *writeJob) { q.jobs = append(q.jobs, j) }

// pop returns the oldest job not taken yet, nil if none.
func (q *jobQueue) pop() *writeJob {
	for q.head < len(q.jobs) {
		j := q.jobs[q.head]
		q.jobs[q.head] = nil
		q.head++
		if q.head == len(q.jobs) {
			q.jobs, q.head = q.jobs[:0], 0
		}
		if j.take() {
			return j
		}
	}
	return nil
}

func (q *jobQueue) len() int { return len(q.jobs) - q.head }

// oldestWait is how long the job at the head of q has been queued
// (writeJob.queued, set for the group committer's write-behind queue), 0
// if q is empty. The head may be a promoted job already taken from the
// barrier queue, which pop skips.
func (q *jobQueue) oldestWait() time.Duration {
	if q.len() == 0 {
		return 0
	}
	return time.Since(q.jobs[q.head].queued)
}

// newPool starts workers workers, and a group committer if group is not
// nil (each commit with the deadline timeout). synced, if not nil, is told
// the duration of each durable write that succeeded.
func newPool(workers int, group groupWriter, timeout time.Duration, synced func(time.Duration)) *pool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pool{ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), done: make(chan struct{}),
		group: group, gwake: make(chan struct{}, 1), timeout: timeout, synced: synced}
	for range workers {
		p.wg.Go(p.work)
	}
	if group != nil {
		p.wg.Go(p.commit)
	}
	return p
}

// submit queues job as barrier work; after close it is dropped.
func (p *pool) submit(job func(context.Context)) {
	p.submitJob(&writeJob{run: job}, true)
}

// submitJob queues j, as barrier work if first, else as background work;
// after close it is dropped.
func (p *pool) submitJob(j *writeJob, first bool) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	if p.group != nil && j.done != nil {
		if first {
			p.gBarrier.push(j)
		} else {
			j.queued = time.Now()
			p.gBehind.push(j)
		}
		p.mu.Unlock()
		select {
		case p.gwake <- struct{}{}:
		default:
		}
		return
	}
	if first {
		p.barrier.push(j)
	} else {
		p.behind.push(j)
	}
	p.mu.Unlock()
	p.signal()
}

// promote makes background write j the barrier's. Not taken yet, its
// batch becomes fold(false)'s, synced, and it moves ahead as barrier work.
// Taken and in its background store call or group commit (running), its
// batch becomes fold(true)'s, synced: the worker appends the rest once the
// call returns, the group committer queues it as the next group's
// (finish). Otherwise (its call returned) it ran as it started, and
// reports that it was not synced: the barrier writes after it.
func (p *pool) promote(j *writeJob, fold func(late bool) []session.Event) {
	j.mu.Lock()
	switch {
	case !j.taken:
		j.batch, j.sync = fold(false), true
		j.mu.Unlock()
		p.submitJob(j, true)
	case j.running && !j.sync:
		j.batch, j.sync = fold(true), true
		j.mu.Unlock()
	default:
		j.mu.Unlock()
	}
}

// start returns the batch and sync flag of j, taken by a worker: final,
// but for a late fold of a background write until finish.
func (j *writeJob) start() ([]session.Event, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.running = !j.sync
	return j.batch, j.sync
}

// finish ends the window of a late fold, after the store call of the
// first n events of j's batch (synced if sync) returned err. If a
// promote folded the barrier's events in meanwhile and the call
// succeeded, late is true and rest is what the worker appends next,
// synced (empty: a sync alone).
func (j *writeJob) finish(n int, sync bool, err error) (rest []session.Event, late bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.running = false
	if sync || !j.sync || err != nil {
		return nil, false
	}
	return j.batch[n:], true
}

func (p *pool) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *pool) work() {
	for {
		job, more, ok := p.take()
		if !ok {
			select {
			case <-p.wake:
				continue
			case <-p.done:
				return
			}
		}
		if more {
			p.signal() // hand the rest to an idle worker
		}
		job.run(p.ctx)
	}
}

// take pops the oldest barrier job, or else the oldest background job. ok
// is false if there is none (or the pool is closed); more says others
// remain.
func (p *pool) take() (job *writeJob, more, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, false, false
	}
	job = p.barrier.pop()
	if job == nil {
		job = p.behind.pop()
	}
	if job == nil {
		return nil, false, false
	}
	return job, p.barrier.len()+p.behind.len() > 0, true
}

// close drops the queued jobs, cancels the running ones' context and waits
// for the workers to return. Idempotent.
func (p *pool) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.barrier, p.behind = jobQueue{}, jobQueue{}
	p.gBarrier, p.gBehind = jobQueue{}, jobQueue{}
	p.mu.Unlock()
	if already {
		return
	}
	p.cancel()
	close(p.done)
	p.wg.Wait()
}
