package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/bench"
	"github.com/dshgo/dsh/telemetry"
	"github.com/dshgo/dsh/telemetry/spans"
)

// BenchmarkTelemetryOverhead is the overhead check
// (docs/performance.md#telemetry-overhead): the same dsh bench load (200
// sessions, the defaults otherwise, no baselines) run with telemetry off
// and then on, alternately, once each per iteration. On is what
// `dsh bench --metrics-out F` with OTEL_EXPORTER_OTLP_ENDPOINT set does:
// a Prometheus registry written out at the end, metrics and spans pushed
// over OTLP/HTTP to a receiver on 127.0.0.1 that answers 200 and
// discards. It reports the median of each side's CPU per chunk
// (off-cpu-ns/chunk, on-cpu-ns/chunk) and the median of the pairs'
// on/off ratios (on/off). Run it with -benchtime Nx for N pairs:
//
//	go test -run '^$' -bench TelemetryOverhead -benchtime 3x ./telemetry/
func BenchmarkTelemetryOverhead(b *testing.B) {
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	defer recv.Close()
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"} {
		b.Setenv(k, "")
	}
	ctx := context.Background()
	opts := bench.Options{Sessions: 200, NoBaselines: true, NoVerify: true}
	run := func(on bool) float64 {
		o := opts
		var x *spans.Exporter
		var mp *telemetry.MeterProvider
		if on {
			var err error
			x, err = spans.FromEnv(ctx)
			require.NoError(b, err)
			require.NotNil(b, x)
			mp, err = telemetry.NewMeterProvider(ctx, telemetry.ExportConfig{Prometheus: true, OTLP: true})
			require.NoError(b, err)
			o.Observers, o.MeterProvider = []telemetry.Observer{x}, mp
		}
		rep, err := bench.Run(ctx, o)
		require.NoError(b, err)
		if on {
			require.NoError(b, x.Shutdown(ctx))
			w := httptest.NewRecorder()
			mp.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			require.Equal(b, http.StatusOK, w.Code)
			require.NoError(b, mp.Shutdown(ctx))
		}
		return rep.CPUPerChunkNs
	}
	var off, on, ratios []float64
	for b.Loop() {
		f, n := run(false), run(true)
		off, on, ratios = append(off, f), append(on, n), append(ratios, n/f)
	}
	b.ReportMetric(median(off), "off-cpu-ns/chunk")
	b.ReportMetric(median(on), "on-cpu-ns/chunk")
	b.ReportMetric(median(ratios), "on/off")
	b.ReportMetric(0, "ns/op")
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
