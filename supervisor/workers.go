package supervisor

import (
	"context"
	"fmt"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// actorOptions configure the actors a Host spawns (the persister, each
// session's session and agent actors, and the inbox and stream actors
// its agent spawns, agent.Config.ChildOptions): their mailboxes run on
// the host's workers, and they are protoactor's lock-free unbounded queue, a
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

// workers is the dispatcher of the actors a Host spawns (the persister,
// each session's session, agent, inbox and stream actors): it runs their mailboxes
// on goroutines it keeps, rather than on a new goroutine each time a
// mailbox wakes up. It is safe for concurrent use.
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
// The Host owns the workers: Close, once every actor it spawned is
// stopped, closes the pool and joins them. A wake-up after that runs on
// a goroutine of its own, as protoactor's default dispatcher would.
//
// Rejected alternative: one long-lived goroutine per actor (a dedicated
// mailbox loop). It saves the hand-off too, but holds a goroutine and its
// stack per resident actor, and the host keeps thousands of idle
// sessions resident.
type workers struct {
	mu     sync.Mutex
	idle   []chan func() // parked workers' channels, most recent last; guarded by mu
	closed bool          // guarded by mu
	wg     sync.WaitGroup
}

const (
	// workerThroughput is protoactor's default: the messages a mailbox
	// run handles before it yields the processor.
	workerThroughput = 300
	// maxIdleWorkers bounds the parked workers (and their stacks).
	maxIdleWorkers = 64
)

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
// mailbox run ends, and later wake-ups get goroutines of their own. It
// waits for the workers until ctx is done. Idempotent.
func (w *workers) close(ctx context.Context) error {
	w.mu.Lock()
	w.closed = true
	idle := w.idle
	w.idle = nil
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
