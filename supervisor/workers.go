package supervisor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// actorOptions configure the actors a Host spawns (each session's session
// and agent actors, and the inbox and stream actors its agent spawns,
// agent.Config.ChildOptions): their mailboxes run on the host's workers,
// and they are protoactor's lock-free unbounded queue, a linked list that
// holds nothing once drained. The host makes them once (Host.actorOpts):
// each call makes a mailbox producer, which the props of every actor
// configured with it keep for as long as it is resident (64 bytes an idle
// session, made per spawn). The default mailbox is a ring buffer of 10
// slots (about 230 bytes before a message arrives) that doubles when a
// burst fills it and never shrinks: every resident session kept the
// buffer its agent's and session actor's largest burst of streamed chunks
// had grown, for as long as it stayed resident.
func actorOptions(w *workers) []actor.PropsOption {
	return []actor.PropsOption{actor.WithDispatcher(w), actor.WithMailbox(actor.UnboundedLockfree())}
}

// firstOptions configure the actors on a barrier's path (the persister,
// its shards, the host's notices): their mailboxes run in the workers'
// first lane.
func firstOptions(w *workers) []actor.PropsOption {
	return []actor.PropsOption{actor.WithDispatcher(firstLane{w}), actor.WithMailbox(actor.UnboundedLockfree())}
}

// workers is the dispatcher of the actors a Host spawns (the persister,
// each session's session, agent, inbox and stream actors): it runs their
// mailboxes on goroutines it keeps, rather than on a new goroutine each
// time a mailbox wakes up. It is safe for concurrent use.
//
// Why: protoactor's default dispatcher starts a goroutine per wake-up,
// and a turn wakes the agent, session, inbox and persister mailboxes
// some forty times. Each such goroutine starts with a small stack and
// grows it (copying it, adjusting every frame) on the way down Receive:
// that was about 15% of the runtime's CPU per streamed chunk. A worker
// keeps its grown stack from one mailbox run to the next.
//
// A worker runs one mailbox at a time, for as long as protoactor's
// mailbox loop runs (it yields every Throughput messages and returns
// when the mailbox is empty), then parks, waiting on its own channel, to
// be handed the next mailbox. A wake-up with no parked worker starts a
// new one, so a busy or blocked mailbox never delays another one (a
// bounded pool could deadlock actors that wait on each other). At most
// maxIdleWorkers stay parked; a worker with nothing to do beyond that
// returns.
//
// The first lane (firstOptions: the mailboxes on a barrier's path) is a
// queue that every worker empties when its run ends, before it parks: a
// barrier's hop runs on a goroutine that already has a processor, a few
// microseconds on, instead of waiting in Go's run queue behind every
// runnable session actor and model stream, milliseconds under load. A
// run joining the lane wakes a worker for it only if no worker is handed
// a run (none would end one), or firstLaneGrace on if the lane is still
// not empty (every worker's run may be blocked): waking one at once would
// put the woken worker in the processor's next slot, where Go keeps the
// goroutine the running one readied last (the next hop of a session's
// chain of actors), and push that one to the back of the run queue. See
// docs/performance.md#fsync-completions.
//
// The Host owns the workers: Close, once every actor it spawned is
// stopped, closes the pool and joins them. A wake-up after that runs on
// a goroutine of its own, as protoactor's default dispatcher would.
//
// Rejected alternatives: one long-lived goroutine per actor (a dedicated
// mailbox loop). It saves the hand-off too, but holds a goroutine and its
// stack per resident actor, and the host keeps thousands of idle
// sessions resident. A bounded pool (about a worker per processor) whose
// queue the first lane overtakes: it made the barrier's hops as quick,
// but a worker woken for the bulk waits in Go's run queue as any
// goroutine does, and while it waits every run queues behind it: the
// paced run's turn latency beyond the model went up two to ten times
// (docs/performance.md#fsync-completions).
type workers struct {
	mu     sync.Mutex
	idle   []chan func() // parked workers' channels, most recent last; guarded by mu
	active int           // workers handed a run and not parked again; guarded by mu
	firsts runQueue      // the first lane's queued runs; guarded by mu
	rescue *time.Timer   // wakes a worker for the lane if no run ended meanwhile; guarded by mu
	armed  bool          // rescue is set; guarded by mu
	closed bool          // guarded by mu
	wg     sync.WaitGroup
}

const (
	// workerThroughput is protoactor's default: the messages a mailbox
	// run handles before it yields the processor.
	workerThroughput = 300
	// maxIdleWorkers bounds the parked workers (and their stacks).
	maxIdleWorkers = 64
	// firstLaneGrace is how long the first lane waits for a run to end
	// before a worker is woken for it.
	firstLaneGrace = time.Millisecond
)

// runQueue is a FIFO of mailbox runs.
type runQueue struct {
	runs []func()
	head int // runs[head:] are queued
}

func (q *runQueue) push(fn func()) { q.runs = append(q.runs, fn) }

func (q *runQueue) len() int { return len(q.runs) - q.head }

func (q *runQueue) pop() func() {
	if q.head == len(q.runs) {
		return nil
	}
	fn := q.runs[q.head]
	q.runs[q.head] = nil
	q.head++
	if q.head == len(q.runs) {
		q.runs, q.head = q.runs[:0], 0
	}
	return fn
}

// Throughput implements actor.Dispatcher.
func (w *workers) Throughput() int { return workerThroughput }

// Schedule implements actor.Dispatcher: fn (a mailbox run) goes to a
// parked worker, or to a new one.
func (w *workers) Schedule(fn func()) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		go fn()
		return
	}
	w.handLocked(fn)
}

// firstLane is the dispatcher of the first lane.
type firstLane struct{ w *workers }

// Throughput implements actor.Dispatcher.
func (f firstLane) Throughput() int { return workerThroughput }

// Schedule implements actor.Dispatcher: fn joins the first lane, which
// the next worker to end a run empties. With no worker handed a run, a
// worker is woken for it at once; otherwise one is after firstLaneGrace
// unless a run ended meanwhile (every one running may be blocked).
func (f firstLane) Schedule(fn func()) {
	w := f.w
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		go fn()
		return
	}
	w.firsts.push(fn)
	if w.active == 0 {
		w.handLocked(emptyRun)
		return
	}
	if !w.armed {
		w.armed = true
		if w.rescue == nil {
			w.rescue = time.AfterFunc(firstLaneGrace, w.rescueFirsts)
		} else {
			w.rescue.Reset(firstLaneGrace)
		}
	}
	w.mu.Unlock()
}

// rescueFirsts, firstLaneGrace after a run joined the first lane while
// workers ran, wakes a worker for the lane if it is still not empty.
func (w *workers) rescueFirsts() {
	w.mu.Lock()
	w.armed = false
	if w.closed || w.firsts.len() == 0 {
		w.mu.Unlock()
		return
	}
	w.handLocked(emptyRun)
}

// emptyRun is what a worker woken for the first lane runs before it
// empties the lane.
func emptyRun() {}

// handLocked hands fn to a parked worker, or to a new one, and unlocks
// w.mu.
func (w *workers) handLocked(fn func()) {
	w.active++
	if n := len(w.idle); n > 0 {
		c := w.idle[n-1]
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		c <- fn // buffered, and only the one who popped c sends on it
		return
	}
	w.wg.Add(1)
	w.mu.Unlock()
	go w.work(fn)
}

func (w *workers) work(fn func()) {
	defer w.wg.Done()
	c := make(chan func(), 1)
	for fn != nil { // a closed channel (close) gives nil
		fn() // protoactor's mailbox run recovers the actors' panics
		// A parked worker must not keep the mailbox it ran: through it,
		// the actor, and a stopped session's log with it.
		fn = nil
		w.mu.Lock()
		for f := w.firsts.pop(); f != nil; f = w.firsts.pop() {
			w.mu.Unlock()
			f()
			w.mu.Lock()
		}
		w.active--
		if w.closed || len(w.idle) >= maxIdleWorkers {
			w.mu.Unlock()
			return
		}
		w.idle = append(w.idle, c)
		w.mu.Unlock()
		fn = <-c
	}
}

// close stops the pool: parked workers return, busy ones once their
// mailbox run ends, and queued first-lane runs and later wake-ups get
// goroutines of their own. It waits for the workers until ctx is done.
// Idempotent.
func (w *workers) close(ctx context.Context) error {
	w.mu.Lock()
	w.closed = true
	if w.rescue != nil {
		w.rescue.Stop()
	}
	idle := w.idle
	w.idle = nil
	for f := w.firsts.pop(); f != nil; f = w.firsts.pop() {
		go f()
	}
	w.mu.Unlock()
	for _, c := range idle {
		close(c)
	}
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("supervisor: actor workers still running: %w", context.Cause(ctx))
	}
}
