package supervisor

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// actorOptions configure the actors a Host spawns (each session's session
// and agent actors, and the inbox and stream actors its agent spawns,
// agent.Config.ChildOptions): their mailboxes run on the host's workers,
// in the bulk lane, and they are protoactor's lock-free unbounded queue, a
// linked list that holds nothing once drained. The host makes them once
// (Host.actorOpts): each call makes a mailbox producer, which the props
// of every actor configured with it keep for as long as it is resident
// (64 bytes an idle session, made per spawn). The default mailbox is a
// ring buffer of 10 slots (about 230 bytes before a message arrives) that
// doubles when a burst fills it and never shrinks: every resident session
// kept the buffer its agent's and session actor's largest burst of
// streamed chunks had grown, for as long as it stayed resident.
func actorOptions(w *workers) []actor.PropsOption {
	return []actor.PropsOption{actor.WithDispatcher(w), actor.WithMailbox(actor.UnboundedLockfree())}
}

// firstOptions configure the actors on a barrier's path (the persister,
// its shards, the host's notices): their mailboxes run on the host's
// workers in the first lane, ahead of every session's.
func firstOptions(w *workers) []actor.PropsOption {
	return []actor.PropsOption{actor.WithDispatcher(w.first()), actor.WithMailbox(actor.UnboundedLockfree())}
}

// workers is the dispatcher of the actors a Host spawns: it runs their
// mailboxes on a bounded set of goroutines it keeps, taking them from two
// queues of its own, the first lane (the persister and its shards, the
// host's notices: the hops of a turn end's barriers) ahead of the bulk
// (session, agent, inbox and stream actors), each in the order its
// mailboxes woke up. It is safe for concurrent use. See
// docs/performance.md#actor-workers.
//
// Why bounded: Go's scheduler has no priorities. With a goroutine per
// runnable mailbox (what this was), a thousand busy sessions put a hundred
// or more goroutines in Go's run queues, and every hop of a barrier (the
// turn end to its shard, the shard's job to an fsync worker, the outcome
// back, the notice to the host) waited milliseconds behind them. With
// about as many workers as processors the run queues stay short, the bulk
// waits in this pool's queue instead, and the first lane overtakes it.
//
// Why not a fixed set: progress never depends on the bound. A mailbox run
// that blocks (an actor waiting on another's reply, a slow Receive) or
// runs long holds its worker; a watchdog, awake only while a run waits for
// a worker, counts a worker whose run spanned a whole tick as stuck (no
// longer counted against the bound, as Go's own monitor hands a blocked
// system call's processor to another thread) and starts or wakes another:
// at once if a processor is free, after stuckTicks ticks whatever the
// load (look). A worker beyond the bound parks when its run ends; at most
// maxIdleWorkers stay parked, the others return.
//
// A worker yields its processor after each run (work), as a goroutine
// per wake-up did by returning.
//
// Why workers at all: protoactor's default dispatcher starts a goroutine
// per wake-up, whose small stack grows again (copied, frame by frame) on
// the way down Receive: that was about 15% of the runtime's CPU per
// streamed chunk. A worker keeps its grown stack from one run to the next.
// protoactor's mailbox contract holds: a mailbox is scheduled once until
// its run returns, the run yields the processor every Throughput messages
// and recovers the actor's panics.
//
// The Host owns the workers: Close, once every actor it spawned is
// stopped, closes the pool and joins them. A wake-up after that runs on
// a goroutine of its own, as protoactor's default dispatcher would.
//
// Rejected alternative: one long-lived goroutine per actor (a dedicated
// mailbox loop). It saves the hand-off too, but holds a goroutine and its
// stack per resident actor, and the host keeps thousands of idle
// sessions resident.
type workers struct {
	size int           // the workers that run at once, stuck ones aside
	tick time.Duration // the watchdog's period: a run that spans one is stuck

	mu       sync.Mutex // guards everything below
	firsts   runQueue   // the first lane's runs
	bulk     runQueue   // every other run
	idle     []*worker  // parked workers, most recent last
	active   int        // workers not parked
	stuck    int        // active workers whose run the watchdog saw span a tick
	all      map[*worker]struct{}
	watching bool          // the watchdog runs
	dog      chan struct{} // 1-buffered: wakes the watchdog
	closed   bool
	done     chan struct{} // closed by close: stops the watchdog
	wg       sync.WaitGroup
}

// worker is one worker goroutine's state; guarded by workers.mu.
type worker struct {
	wake  chan struct{} // 1-buffered: unparks it; closed by close
	busy  bool          // in a run
	runs  uint64        // runs started
	seen  uint64        // runs when the watchdog last looked
	ticks int           // the watchdog's ticks its current run spanned
	stuck bool          // counted in workers.stuck
}

const (
	// workerThroughput is protoactor's default: the messages a mailbox
	// run handles before it yields the processor.
	workerThroughput = 300
	// maxIdleWorkers bounds the parked workers (and their stacks).
	maxIdleWorkers = 64
	// workerTick is the watchdog's period.
	workerTick = 2 * time.Millisecond
	// stuckTicks is how many ticks a run spans before its worker counts
	// as stuck even while the processors are busy.
	stuckTicks = 50
)

// newWorkers returns a pool of GOMAXPROCS workers (the most that run at
// once, stuck ones aside).
func newWorkers() *workers {
	return newWorkersOf(runtime.GOMAXPROCS(0), workerTick)
}

// newWorkersOf returns a pool of size workers whose watchdog ticks every
// tick.
func newWorkersOf(size int, tick time.Duration) *workers {
	return &workers{size: size, tick: tick, all: map[*worker]struct{}{},
		dog: make(chan struct{}, 1), done: make(chan struct{})}
}

// runQueue is a FIFO of mailbox runs.
type runQueue struct {
	runs []func()
	head int // runs[head:] are queued
}

func (q *runQueue) push(fn func()) { q.runs = append(q.runs, fn) }

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

func (q *runQueue) len() int { return len(q.runs) - q.head }

// Throughput implements actor.Dispatcher.
func (w *workers) Throughput() int { return workerThroughput }

// Schedule implements actor.Dispatcher: fn (a mailbox run) joins the bulk
// lane.
func (w *workers) Schedule(fn func()) { w.schedule(fn, false) }

// firstLane is the dispatcher of the first lane.
type firstLane struct{ w *workers }

func (f firstLane) Throughput() int    { return workerThroughput }
func (f firstLane) Schedule(fn func()) { f.w.schedule(fn, true) }

// first returns the dispatcher of the first lane.
func (w *workers) first() actor.Dispatcher { return firstLane{w} }

func (w *workers) schedule(fn func(), first bool) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		go fn()
		return
	}
	if first {
		w.firsts.push(fn)
	} else {
		w.bulk.push(fn)
	}
	if w.active-w.stuck < w.size {
		w.startLocked() // unlocks
		return
	}
	// Every worker is busy: fn waits in the queue, and the watchdog
	// watches it.
	if !w.watching {
		w.watching = true
		w.wg.Add(1)
		go w.watch()
	}
	w.mu.Unlock()
	select {
	case w.dog <- struct{}{}:
	default:
	}
}

// startLocked wakes a parked worker, or starts one, and unlocks w.mu.
func (w *workers) startLocked() {
	w.active++
	if n := len(w.idle); n > 0 {
		k := w.idle[n-1]
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		k.wake <- struct{}{} // buffered, and only the one who popped k sends
		return
	}
	k := &worker{wake: make(chan struct{}, 1)}
	w.all[k] = struct{}{}
	w.wg.Add(1)
	w.mu.Unlock()
	go w.work(k)
}

func (w *workers) work(k *worker) {
	defer w.wg.Done()
	w.mu.Lock()
	for {
		var fn func()
		if !w.closed && w.active-w.stuck <= w.size {
			if fn = w.firsts.pop(); fn == nil {
				fn = w.bulk.pop()
			}
		}
		if fn == nil {
			// Nothing queued, or a worker too many: park.
			w.active--
			if w.closed || len(w.idle) >= maxIdleWorkers {
				delete(w.all, k)
				w.mu.Unlock()
				return
			}
			w.idle = append(w.idle, k)
			w.mu.Unlock()
			if _, ok := <-k.wake; !ok {
				return // closed
			}
			w.mu.Lock()
			continue
		}
		k.busy = true
		k.runs++
		w.mu.Unlock()
		fn() // protoactor's mailbox run recovers the actors' panics
		// A parked worker must not keep the mailbox it ran: through it,
		// the actor, and a stopped session's log with it.
		fn = nil
		// Yield the processor between runs, as a goroutine per wake-up
		// did by returning: what a run readied (an fsync worker given a
		// barrier's job) runs now, and the scheduler gets to its timers
		// and the network poller (an AIO sync's completion), instead of
		// waiting until Go preempts this worker, 10 ms on.
		runtime.Gosched()
		w.mu.Lock()
		k.busy = false
		if k.stuck {
			k.stuck = false
			w.stuck--
		}
	}
}

// watch is the watchdog: while a run waits in the queue, every tick it
// counts the workers whose run spanned the whole tick as stuck and starts
// (or wakes) workers until size of them are not stuck.
func (w *workers) watch() {
	defer w.wg.Done()
	t := time.NewTicker(w.tick)
	defer t.Stop()
	for {
		select {
		case <-w.dog:
		case <-w.done:
			return
		}
		t.Reset(w.tick)
		for w.look() {
			select {
			case <-t.C:
			case <-w.done:
				return
			}
		}
	}
}

// look does one tick of the watchdog, reporting whether a run is still
// queued. A worker whose run spanned the tick is stuck if a processor is
// free (fewer goroutines wait for one than there are workers: the run
// blocks, it does not wait for the CPU, and another worker would run), or
// once the run spanned stuckTicks ticks whatever the load: a worker that
// only waits for the CPU adds nothing but a longer run queue.
func (w *workers) look() bool {
	cpuFree := runnable() < w.size
	w.mu.Lock()
	for k := range w.all {
		if !k.busy || k.runs != k.seen {
			k.seen, k.ticks = k.runs, 0
			continue
		}
		k.ticks++
		if !k.stuck && (cpuFree || k.ticks >= stuckTicks) {
			k.stuck = true
			w.stuck++
		}
	}
	queued := w.firsts.len() + w.bulk.len()
	for ; queued > 0 && w.active-w.stuck < w.size; queued-- {
		w.startLocked()
		w.mu.Lock()
	}
	w.mu.Unlock()
	return queued > 0
}

// runnable returns the goroutines waiting for a processor.
func runnable() int {
	s := [1]metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}
	metrics.Read(s[:])
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int(s[0].Value.Uint64())
}

// close stops the pool: parked workers return, busy ones once their
// mailbox run ends, queued runs and later wake-ups get goroutines of their
// own. It waits for the workers until ctx is done. Idempotent.
func (w *workers) close(ctx context.Context) error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.done)
		for _, k := range w.idle {
			close(k.wake)
		}
		w.idle = nil
		for fn := w.firsts.pop(); fn != nil; fn = w.firsts.pop() {
			go fn()
		}
		for fn := w.bulk.pop(); fn != nil; fn = w.bulk.pop() {
			go fn()
		}
	}
	w.mu.Unlock()
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
