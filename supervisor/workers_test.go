package supervisor

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// runLog records the runs a test's workers ran, in order.
type runLog struct {
	mu   sync.Mutex
	runs []string
}

func (l *runLog) run(name string) func() {
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.runs = append(l.runs, name)
	}
}

func (l *runLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.runs...)
}

// No more than size runs start at once while none is stuck: the rest
// wait in the pool's queue, and run as workers come free.
func TestWorkersRunAtMostSizeAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorkersOf(2, workerTick)
		gate := make(chan struct{})
		var mu sync.Mutex
		started := 0
		for range 5 {
			w.Schedule(func() {
				mu.Lock()
				started++
				mu.Unlock()
				<-gate
			})
		}
		synctest.Wait() // no time passes: the watchdog has not ticked
		mu.Lock()
		require.Equal(t, 2, started, "runs started before any came free")
		mu.Unlock()
		close(gate)
		synctest.Wait()
		mu.Lock()
		require.Equal(t, 5, started)
		mu.Unlock()
		require.NoError(t, w.close(context.Background()))
	})
}

// A run of the first lane queued behind bulk runs goes ahead of them.
func TestWorkersRunTheFirstLaneFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorkersOf(1, workerTick)
		var l runLog
		gate := make(chan struct{})
		w.Schedule(func() { <-gate })
		synctest.Wait() // the one worker is busy: the rest queue
		w.Schedule(l.run("bulk 1"))
		w.Schedule(l.run("bulk 2"))
		w.first().Schedule(l.run("first 1"))
		w.Schedule(l.run("bulk 3"))
		w.first().Schedule(l.run("first 2"))
		close(gate)
		synctest.Wait()
		require.Equal(t, []string{"first 1", "first 2", "bulk 1", "bulk 2", "bulk 3"}, l.get())
		require.NoError(t, w.close(context.Background()))
	})
}

// Runs that wait on each other beyond the bound still all run: the
// watchdog counts a worker whose run spans a tick as stuck and starts
// another. Without it this deadlocks.
func TestWorkersStartAnotherWhenEveryRunBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorkersOf(2, workerTick)
		const n = 5
		var wg sync.WaitGroup
		wg.Add(n)
		all := make(chan struct{})
		go func() {
			wg.Wait()
			close(all)
		}()
		finished := make(chan struct{}, n)
		for range n {
			w.Schedule(func() {
				wg.Done()
				<-all // every run waits until all have started
				finished <- struct{}{}
			})
		}
		deadline := time.After(time.Second) // of the bubble's clock
		for range n {
			select {
			case <-finished: // time passes here: the watchdog ticks
			case <-deadline:
				t.Fatal("runs that wait on each other beyond the bound never all ran")
			}
		}
		// Once the runs return, the workers beyond the bound park or
		// return: the bound holds again.
		gate := make(chan struct{})
		var mu sync.Mutex
		started := 0
		for range 4 {
			w.Schedule(func() {
				mu.Lock()
				started++
				mu.Unlock()
				<-gate
			})
		}
		synctest.Wait()
		mu.Lock()
		require.Equal(t, 2, started, "runs started at once after the stuck ones returned")
		mu.Unlock()
		close(gate)
		synctest.Wait()
		require.NoError(t, w.close(context.Background()))
	})
}

// After close, queued runs and later wake-ups still run, each on a
// goroutine of its own, and close returns once the workers have.
func TestWorkersCloseRunsWhatIsQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorkersOf(1, workerTick)
		var l runLog
		w.Schedule(l.run("a"))
		synctest.Wait()
		require.NoError(t, w.close(context.Background()))
		w.Schedule(l.run("b"))
		w.first().Schedule(l.run("c"))
		synctest.Wait()
		require.ElementsMatch(t, []string{"a", "b", "c"}, l.get())
	})
}
