package bench

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dshgo/dsh/actors/persister"
)

// TestMain checks for leaks, ignoring what protoactor's cluster leaves
// behind a stopped member for a while (the cluster runs of
// cluster_test.go; see cluster/main_test.go for exactly what and why).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.(*Gossiper).StartGossiping.NewThrottle.func3.1"),
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/cluster.NewGossipActor.NewThrottleWithLogger.func2.1"),
	)
}

func tiny(policy persister.Policy, dir string) Options {
	return Options{Sessions: 20, Turns: 2, Chunks: 20, ReasoningChunks: 5, Policy: policy, Dir: dir, Seed: 7}
}

func TestTinyBenchMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Run(ctx, tiny(persister.PolicyNone, ""))
	require.NoError(t, err)
	require.EqualValues(t, 40, r.Turns)
	require.Positive(t, r.Chunks)
	require.Greater(t, r.Events, r.Chunks)
	require.Zero(t, r.Files)
	require.Equal(t, 40, r.TurnLatency.Count)
	require.NotNil(t, r.Baselines, "the model-alone baseline runs without files too")
	require.Zero(t, r.Baselines.MutexLogEventsPerSec)
}

func TestTinyBenchJSONL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	r, err := Run(ctx, tiny(persister.PolicyTurnEnd, dir))
	require.NoError(t, err)
	require.EqualValues(t, 40, r.Turns)
	require.Equal(t, 20, r.Files)
	require.Equal(t, 20, r.FilesVerified)
	require.Positive(t, r.BytesOnDisk)
	require.Greater(t, r.CompressionRatio, 1.0)
	// Each resident session holds its writer lock's descriptor and a
	// cached append handle (20 sessions, a cache of 256).
	require.Equal(t, 20, r.Resident)
	if runtime.GOOS == "linux" {
		require.Positive(t, r.OpenFDs)
		require.GreaterOrEqual(t, r.PeakOpenFDs, r.OpenFDs)
		require.GreaterOrEqual(t, r.FDsPerResident, 1.95, "a lock and a handle per resident session")
	}
	// A Durable notice may still be in flight when the host closes.
	require.Positive(t, r.FlushLatency.Count)
	require.LessOrEqual(t, r.FlushLatency.Count, 40)

	// The baselines replayed exactly the run's logs.
	require.NotNil(t, r.Baselines)
	require.Positive(t, r.Baselines.MutexLogEventsPerSec)
	require.Positive(t, r.Baselines.EncodeEventsPerSec)
	require.Equal(t, 40, r.Baselines.RawFsync.Count, "one raw write+fsync per turn")
	require.Positive(t, r.Baselines.ProviderCPUPerChunkNs)
}

// TestPacedProviderBaselineIsConcurrent: paced, the model-alone baseline
// streams as many responses at once as the run has sessions, each at the
// run's pace (in fake time: fifty 10-delta responses at 100 tokens/s take
// about a tenth of a second together, five seconds one after another,
// and no time at all unpaced).
func TestPacedProviderBaselineIsConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := Options{Sessions: 50, Chunks: 10, ToolRate: -1, ReasoningRate: -1, TokensPerSecond: 100, Seed: 3}.withDefaults()
		start := time.Now()
		cpu, err := providerBaseline(t.Context(), o)
		require.NoError(t, err)
		el := time.Since(start)
		require.GreaterOrEqual(t, el, 50*time.Millisecond, "paced at the run's speed")
		require.Less(t, el, time.Second, "the streams run concurrently")
		require.Positive(t, cpu)
	})
}

// TestStaggerSpreadsTheStarts: with Stagger, session i's first turn starts
// i×Stagger/Sessions into the load, so the last of four starts no sooner
// than three quarters of it (timers never fire early).
func TestStaggerSpreadsTheStarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := Options{Sessions: 4, Turns: 1, Chunks: 3, ReasoningChunks: 1, ToolRate: -1, ReasoningRate: -1,
		Policy: persister.PolicyNone, NoBaselines: true, Stagger: 2 * time.Second}
	r, err := Run(ctx, o)
	require.NoError(t, err)
	require.EqualValues(t, 4, r.Turns)
	require.GreaterOrEqual(t, r.WallSeconds, 1.5)
}
