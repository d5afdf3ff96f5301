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

// A worker whose run ends runs the first lane's queued runs, in order,
// before it parks: a barrier's hop does not wait for a goroutine to be
// scheduled. While a worker runs, a run joining the lane wakes nobody
// (no time passes here: the rescue does not fire).
func TestWorkersEndingARunEmptyTheFirstLane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &workers{}
		var l runLog
		gate := make(chan struct{})
		w.Schedule(func() { <-gate })
		synctest.Wait()
		first := firstLane{w}
		first.Schedule(l.run("first 1"))
		first.Schedule(l.run("first 2"))
		synctest.Wait()
		require.Empty(t, l.get(), "no run has ended yet")
		close(gate)
		synctest.Wait()
		require.Equal(t, []string{"first 1", "first 2"}, l.get())
		require.NoError(t, w.close(context.Background()))
	})
}

// With no worker running, a run joining the first lane wakes one at once.
func TestWorkersWakeOneForTheFirstLaneWhenNoneRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &workers{}
		var l runLog
		w.Schedule(l.run("bulk"))
		synctest.Wait() // its worker parked
		firstLane{w}.Schedule(l.run("first"))
		synctest.Wait() // no time passes
		require.Equal(t, []string{"bulk", "first"}, l.get())
		require.NoError(t, w.close(context.Background()))
	})
}

// waitRun waits on the bubble's clock for ran, and returns how long it
// took.
func waitRun(t *testing.T, ran <-chan struct{}) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-ran: // time passes here: the rescue fires
	case <-time.After(time.Second):
		t.Fatal("the first lane never ran")
	}
	return time.Since(start)
}

// The first lane runs even while every worker's run blocks: firstLaneGrace
// after it was queued, a worker is woken for it.
func TestWorkersRunTheFirstLaneWhileEveryRunBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &workers{}
		gate := make(chan struct{})
		for range 3 {
			w.Schedule(func() { <-gate })
		}
		synctest.Wait()
		ran := make(chan struct{})
		firstLane{w}.Schedule(func() { close(ran) })
		require.Equal(t, firstLaneGrace, waitRun(t, ran))
		close(gate)
		synctest.Wait()
		require.NoError(t, w.close(context.Background()))
	})
}

// A run of the first lane that blocks does not hold up the lane: each
// time, firstLaneGrace on, another worker is woken for it.
func TestWorkersFirstLaneGoesOnPastBlockedRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &workers{}
		gate := make(chan struct{})
		first := firstLane{w}
		first.Schedule(func() { <-gate }) // no worker ran: one is woken at once
		synctest.Wait()
		blocked := make(chan struct{})
		first.Schedule(func() {
			close(blocked)
			<-gate
		})
		require.Equal(t, firstLaneGrace, waitRun(t, blocked))
		ran := make(chan struct{})
		first.Schedule(func() { close(ran) })
		require.Equal(t, firstLaneGrace, waitRun(t, ran))
		close(gate)
		synctest.Wait()
		require.NoError(t, w.close(context.Background()))
	})
}

// close runs the first lane's queued runs and later wake-ups of either
// lane on goroutines of their own, and returns once the workers have.
func TestWorkersCloseRunsTheQueuedFirstLane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &workers{}
		var l runLog
		gate := make(chan struct{})
		w.Schedule(func() { <-gate })
		synctest.Wait()
		firstLane{w}.Schedule(l.run("queued"))
		closed := make(chan error, 1)
		go func() { closed <- w.close(context.Background()) }()
		synctest.Wait() // no time passes: the rescue does not fire
		require.Equal(t, []string{"queued"}, l.get())
		w.Schedule(l.run("bulk after"))
		firstLane{w}.Schedule(l.run("first after"))
		synctest.Wait()
		require.ElementsMatch(t, []string{"queued", "bulk after", "first after"}, l.get())
		close(gate)
		require.NoError(t, <-closed)
	})
}
