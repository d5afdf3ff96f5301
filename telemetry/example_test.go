package telemetry_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
	"github.com/dshgo/dsh/telemetry"
)

// Metrics read from the events a session commits: an observer opened for
// the session sees each event, and the instruments count what the log says.
// A host does the same with supervisor.Config.Observers; here the events of
// a recorded session are fed to it by hand.
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, err := telemetry.NewMetrics(mp)
	if err != nil {
		panic(err)
	}
	defer m.Close()

	dir, err := fixtures.CorpusDir()
	if err != nil {
		panic(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "acp", "error-finish", "session.jsonl"))
	if err != nil {
		panic(err)
	}
	f, err := session.Read(bytes.NewReader(fixtures.Substitute(data)), "session.jsonl", session.ReadOptions{})
	if err != nil {
		panic(err)
	}
	var empty session.Events
	observe := m.Open(f.Header.ID, empty)
	for _, e := range f.Events {
		if err := observe(e); err != nil {
			panic(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, metric := range sm.Metrics {
			if metric.Name != telemetry.NameTurnsEnded {
				continue
			}
			for _, p := range metric.Data.(metricdata.Sum[int64]).DataPoints {
				reason, _ := p.Attributes.Value("reason")
				fmt.Println(metric.Name, reason.AsString(), p.Value)
			}
		}
	}
	// Output:
	// dsh.turns.ended error 1
}
