package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/telemetry"
)

// collected sums, per instrument name, the data points of a collection:
// a sum's values, a histogram's counts and their sums.
type collected struct {
	sums  map[string]int64
	count map[string]uint64
	total map[string]float64
}

func collect(t *testing.T, r *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	c := collected{sums: map[string]int64{}, count: map[string]uint64{}, total: map[string]float64{}}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					c.sums[m.Name] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					c.count[m.Name] += p.Count
					c.total[m.Name] += p.Sum
				}
			}
		}
	}
	return c
}

// The counts dsh bench reports agree with the instruments' (the report's
// percentiles come from exact samples; the instruments count the same
// turns, events, chunks, tokens and turn-end flushes, and the flushes'
// total time).
func TestBenchCountsAgreeWithTheInstruments(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { require.NoError(t, mp.Shutdown(context.Background())) }()
	o := tiny(persister.PolicyTurnEnd, t.TempDir())
	o.NoBaselines, o.MeterProvider = true, mp
	r, err := Run(ctx, o)
	require.NoError(t, err)
	c := collect(t, reader)
	require.EqualValues(t, r.Turns, c.sums[telemetry.NameTurnsEnded])
	require.EqualValues(t, r.Turns, c.sums[telemetry.NameTurnsStarted])
	require.EqualValues(t, r.Events, c.sums[telemetry.NameEventsAppended])
	require.EqualValues(t, r.Chunks, c.sums[telemetry.NameModelChunks])
	require.EqualValues(t, r.InputTokens, sumKind(t, reader, "input"))
	require.EqualValues(t, r.OutputTokens, sumKind(t, reader, "output"))
	require.EqualValues(t, r.WriteFailures, c.sums[telemetry.NameWriteFailures])
	require.EqualValues(t, r.FlushLatency.Count, c.count[telemetry.NameTurnEndFlush])
	require.Positive(t, c.total[telemetry.NameTurnEndFlush])
}

// sumKind returns dsh.model.tokens of one kind.
func sumKind(t *testing.T, r *sdkmetric.ManualReader, kind string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != telemetry.NameModelTokens {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, ok := p.Attributes.Value("kind"); ok && v.AsString() == kind {
					n += p.Value
				}
			}
		}
	}
	return n
}
