package telemetry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/telemetry"
	"github.com/dshgo/dsh/telemetry/spans"
)

// clearOTEL empties every OTEL_* variable these tests read.
func clearOTEL(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_METRICS_EXPORTER", "OTEL_TRACES_EXPORTER",
		"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		t.Setenv(k, "")
	}
}

// A provider made for Prometheus serves the instruments in its text
// format, which Prometheus' own parser reads: a session's events counted
// by the metrics observer show up as dsh_* families with the exporter's
// suffixes. A config that exports nothing makes no provider.
func TestMeterProviderServesPrometheusText(t *testing.T) {
	ctx := context.Background()
	clearOTEL(t)
	none, err := telemetry.NewMeterProvider(ctx, telemetry.ExportConfig{})
	require.NoError(t, err)
	require.Nil(t, none)
	require.Nil(t, none.Handler())
	require.NoError(t, none.Shutdown(ctx))

	mp, err := telemetry.NewMeterProvider(ctx, telemetry.ExportConfig{Prometheus: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, mp.Shutdown(ctx)) }()
	m, err := telemetry.NewMetrics(mp)
	require.NoError(t, err)
	defer m.Close()
	l, err := session.New(session.Header{ID: "s", CreatedAt: 1, Cwd: "/w"})
	require.NoError(t, err)
	obs := m.Open("s", l.Events())
	for _, d := range []session.Draft{session.TurnStart{Turn: 1}.Draft(), session.StepStart{Turn: 1, Step: 1}.Draft()} {
		e, err := l.Append(d, 1000)
		require.NoError(t, err)
		require.NoError(t, obs(e))
	}
	srv := httptest.NewServer(mp.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	started := fams["dsh_turns_started_total"]
	require.NotNil(t, started, "counters end in _total")
	require.EqualValues(t, 1, started.GetMetric()[0].GetCounter().GetValue())
	open := fams["dsh_model_calls_open"]
	require.NotNil(t, open)
	require.EqualValues(t, 1, open.GetMetric()[0].GetGauge().GetValue(), "the step's call is open")
	var types []string
	for _, mt := range fams["dsh_events_appended_total"].GetMetric() {
		for _, lp := range mt.GetLabel() {
			if lp.GetName() == "type" {
				types = append(types, lp.GetValue())
			}
		}
	}
	require.ElementsMatch(t, []string{"turn/start", "step/start"}, types)
}

// The OTEL_* variables decide the OTLP exports: an endpoint turns them on
// (the general one, or the signal's own), OTEL_SDK_DISABLED=true and the
// signal's exporter "none" turn them off, and a gRPC protocol is not
// exported: the span export refuses it with ErrUnsupportedProtocol.
func TestOTLPFromTheEnvironment(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name           string
		env            map[string]string
		metrics, spans bool
		refused        bool
	}{
		{name: "nothing set"},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, metrics: true, spans: true},
		{name: "metrics endpoint only", env: map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://127.0.0.1:1/v1/metrics"}, metrics: true},
		{name: "traces endpoint only", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1/v1/traces"}, spans: true},
		{name: "sdk disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_SDK_DISABLED": "true"}},
		{name: "exporters none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
			"OTEL_METRICS_EXPORTER": "none", "OTEL_TRACES_EXPORTER": "none"}},
		{name: "metrics none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_METRICS_EXPORTER": "none"}, spans: true},
		{name: "json", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, metrics: true, spans: true},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, refused: true},
		{name: "grpc traces", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, metrics: true, refused: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clearOTEL(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			require.Equal(t, c.metrics, telemetry.OTLPFromEnv(), "metrics")
			x, err := spans.FromEnv(ctx)
			if c.refused {
				require.ErrorIs(t, err, spans.ErrUnsupportedProtocol)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.spans, x != nil, "spans")
			if x != nil {
				require.NoError(t, x.Shutdown(ctx))
			}
		})
	}
}

// An OTLP metric export pushes what the instruments hold when the
// provider shuts down, to the endpoint the environment names.
func TestMeterProviderPushesOTLPAtShutdown(t *testing.T) {
	ctx := context.Background()
	clearOTEL(t)
	var posts atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/metrics" && r.Header.Get("Content-Type") == "application/x-protobuf" {
			posts.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	require.True(t, telemetry.OTLPFromEnv())
	mp, err := telemetry.NewMeterProvider(ctx, telemetry.ExportConfig{OTLP: telemetry.OTLPFromEnv()})
	require.NoError(t, err)
	require.Nil(t, mp.Handler(), "no Prometheus registry asked for")
	m, err := telemetry.NewMetrics(mp)
	require.NoError(t, err)
	m.WriteFailed()
	require.NoError(t, mp.Shutdown(ctx))
	require.NoError(t, m.Close())
	require.EqualValues(t, 1, posts.Load())
}
