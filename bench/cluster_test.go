//go:build !race

// The cluster runs are built without the race detector, as the cluster
// package's own tests are (see cluster/main_test.go: protoactor's cluster
// races with itself).

package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/persister"
)

func TestTinyBenchCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := tiny(persister.PolicyTurnEnd, t.TempDir())
	o.Cluster = 2
	r, err := Run(ctx, o)
	require.NoError(t, err)
	require.Equal(t, 2, r.Members)
	require.EqualValues(t, 40, r.Turns)
	require.Equal(t, 20, r.Files)
	require.Equal(t, 20, r.FilesVerified)
	require.Equal(t, 40, r.TurnLatency.Count)

	o.Policy = persister.PolicyNone
	_, err = Run(ctx, o)
	require.ErrorContains(t, err, "policy none cannot run one")
}

// BenchmarkClusterMembers runs one load on one host (the baseline), then
// on 1 and on 3 cluster members in this process, and reports turns and
// events per second of wall time. Compare the sub-benchmarks' turns/s.
//
//	go test -run '^$' -bench BenchmarkClusterMembers -benchtime=3x ./bench/
func BenchmarkClusterMembers(b *testing.B) {
	for _, n := range []int{0, 1, 3} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			var turns, events, secs float64
			for b.Loop() {
				r, err := Run(context.Background(), Options{Sessions: 500, Turns: 2, Cluster: n, Seed: 1,
					NoBaselines: true, NoVerify: true})
				if err != nil {
					b.Fatal(err)
				}
				turns += float64(r.Turns)
				events += float64(r.Events)
				secs += r.WallSeconds
			}
			b.ReportMetric(turns/secs, "turns/s")
			b.ReportMetric(events/secs, "events/s")
		})
	}
}
