package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/persister"
)

// fakeStep holds up to limit sessions and records the counts it was asked.
type fakeStep struct {
	limit  int
	asked  []int
	failAt int // the call (1-based) that returns errStop; 0: none
}

var errStop = errors.New("stop")

func (f *fakeStep) step(n int) (bool, error) {
	f.asked = append(f.asked, n)
	if f.failAt > 0 && len(f.asked) == f.failAt {
		return false, errStop
	}
	return n <= f.limit, nil
}

func TestRampDoublesThenBisectsWithinTenPercent(t *testing.T) {
	f := &fakeStep{limit: 1000}
	best, err := ramp(100, f.step)
	require.NoError(t, err)
	require.Equal(t, []int{100, 200, 400, 800, 1600, 1200, 1000, 1100}, f.asked)
	require.Equal(t, 1000, best, "the largest count that held")
}

func TestRampEveryResultHeldAndIsWithinTenPercent(t *testing.T) {
	for _, limit := range []int{1, 2, 7, 99, 100, 101, 150, 199, 250, 1023, 5000, 77777} {
		f := &fakeStep{limit: limit}
		best, err := ramp(100, f.step)
		require.NoError(t, err)
		require.LessOrEqual(t, best, limit, "limit %d: only a count that held", limit)
		require.GreaterOrEqual(t, float64(best), float64(limit)/1.1-1, "limit %d: within 10 %%", limit)
		require.Contains(t, f.asked, best, "limit %d", limit)
		require.Less(t, len(f.asked), 40, "limit %d: doubling and bisecting, not walking", limit)
	}
}

func TestRampNothingHolds(t *testing.T) {
	f := &fakeStep{limit: 0}
	best, err := ramp(100, f.step)
	require.NoError(t, err)
	require.Zero(t, best)
	require.Equal(t, []int{100, 50, 25, 12, 6, 3, 1}, f.asked)
}

func TestRampStopsAtTheFirstError(t *testing.T) {
	f := &fakeStep{limit: 1000, failAt: 4}
	best, err := ramp(100, f.step)
	require.ErrorIs(t, err, errStop)
	require.Equal(t, 400, best, "the best count before the error")
	require.Equal(t, []int{100, 200, 400, 800}, f.asked)

	f = &fakeStep{limit: 1000, failAt: 7}
	best, err = ramp(100, f.step)
	require.ErrorIs(t, err, errStop)
	require.Equal(t, 800, best, "stopped while bisecting")
}

func TestCapacityJudge(t *testing.T) {
	lim := capacityLimits{flushP99: 10 * time.Millisecond, overheadP99: 50 * time.Millisecond, heap: 1 << 30}
	good := Report{FlushLatency: Latency{Count: 10, P99us: 9000}, TurnOverhead: Latency{Count: 10, P99us: 49000}, PeakHeapBytes: 1 << 29}
	ok, why := lim.judge(good)
	require.True(t, ok, why)
	require.Empty(t, why)

	for name, tc := range map[string]struct {
		mod  func(*Report)
		want string
	}{
		"flush":    {func(r *Report) { r.FlushLatency.P99us = 10001 }, "flush p99"},
		"noflush":  {func(r *Report) { r.FlushLatency = Latency{} }, "no turn end was flushed"},
		"overhead": {func(r *Report) { r.TurnOverhead.P99us = 50001 }, "turn beyond model p99"},
		"heap":     {func(r *Report) { r.PeakHeapBytes = 1<<30 + 1 }, "peak heap"},
		"writes":   {func(r *Report) { r.WriteFailures = 1 }, "write failures"},
	} {
		r := good
		tc.mod(&r)
		ok, why := lim.judge(r)
		require.False(t, ok, name)
		require.Contains(t, why, tc.want, name)
	}
	// Without durability no flush is checked.
	lim.flushP99 = 0
	r := good
	r.FlushLatency = Latency{}
	ok, why = lim.judge(r)
	require.True(t, ok, why)
}

// TestRunStopsAtItsHeapLimit: a load whose heap goes over Options.HeapLimit
// is stopped as a cancellation stops it, with ErrHeapLimit.
func TestRunStopsAtItsHeapLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := tiny(persister.PolicyNone, "")
	o.Turns, o.HeapLimit = 1000, 1
	r, err := Run(ctx, o)
	require.ErrorIs(t, err, ErrHeapLimit)
	require.True(t, r.Interrupted)
	require.Less(t, r.Turns, int64(o.Sessions*o.Turns), "stopped early")
}

// TestCapacityStepOverBudgetDidNotHold: a capacity step stopped at the
// memory budget counts as one that did not hold, and the search goes on
// (down to nothing here) rather than failing.
func TestCapacityStepOverBudgetDidNotHold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	load := tiny(persister.PolicyNone, "")
	load.Sessions, load.Chunks, load.TokensPerSecond = 2, 2, 1000
	r, err := Capacity(ctx, CapacityOptions{Load: load, MemoryBudget: 1, Timeout: time.Minute})
	require.NoError(t, err)
	require.Zero(t, r.CapacitySessions)
	require.Len(t, r.Steps, 2, "2 sessions, then 1")
	for _, s := range r.Steps {
		require.False(t, s.Held)
		require.Contains(t, s.Broke, "heap over budget")
	}
}
