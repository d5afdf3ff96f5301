package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// ExportConfig says where metrics go. The zero value exports nothing.
type ExportConfig struct {
	// Prometheus makes a registry that MeterProvider.Handler serves in
	// the Prometheus text format (for a /metrics route).
	Prometheus bool
	// OTLP pushes metrics over OTLP/HTTP, configured by the standard
	// OTEL_EXPORTER_OTLP_* variables (endpoint, headers, timeout,
	// protocol...). Use OTLPFromEnv to decide it from the environment.
	OTLP bool
	// ServiceName is the service.name resource attribute. Default "dsh"
	// (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override it).
	ServiceName string
}

// OTLPFromEnv reports whether the environment asks for an OTLP metric
// export: OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT
// is set, and neither OTEL_SDK_DISABLED=true nor OTEL_METRICS_EXPORTER=none
// turns it off. Only OTLP over HTTP is exported: a protocol other than
// http/protobuf or http/json (grpc) is not, and the commands refuse it
// with the trace export's error (cmd/dsh), which reads the same variables.
func OTLPFromEnv() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || os.Getenv("OTEL_METRICS_EXPORTER") == "none" {
		return false
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", "http/protobuf", "http/json":
	default:
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != ""
}

// MeterProvider is an OpenTelemetry SDK meter provider with the exporters
// an ExportConfig asked for. It is safe for concurrent use.
type MeterProvider struct {
	*sdkmetric.MeterProvider
	handler http.Handler
}

// NewMeterProvider returns the meter provider cfg describes, or nil (and
// no error) when cfg exports nothing: a host given no provider installs no
// instrument at all.
func NewMeterProvider(ctx context.Context, cfg ExportConfig) (*MeterProvider, error) {
	if !cfg.Prometheus && !cfg.OTLP {
		return nil, nil
	}
	name := cfg.ServiceName
	if name == "" {
		name = "dsh"
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(name)))
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	// The environment's own attributes (OTEL_SERVICE_NAME,
	// OTEL_RESOURCE_ATTRIBUTES) win over the default name.
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	opts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	p := &MeterProvider{}
	if cfg.Prometheus {
		reg := prometheus.NewRegistry()
		exp, err := otelprom.New(otelprom.WithRegisterer(reg))
		if err != nil {
			return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
		}
		opts = append(opts, sdkmetric.WithReader(exp))
		p.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	}
	if cfg.OTLP {
		exp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: otlp metric exporter: %w", err)
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	p.MeterProvider = sdkmetric.NewMeterProvider(opts...)
	return p, nil
}

// Handler serves the metrics in the Prometheus text format; nil unless
// the provider was made with Prometheus (or p is nil).
func (p *MeterProvider) Handler() http.Handler {
	if p == nil {
		return nil
	}
	return p.handler
}

// Shutdown flushes the exporters (an OTLP export pushes what it has) and
// stops them. A nil provider has nothing to shut down.
func (p *MeterProvider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.MeterProvider.Shutdown(ctx); err != nil && !errors.Is(err, sdkmetric.ErrReaderShutdown) {
		return fmt.Errorf("telemetry: metrics shutdown: %w", err)
	}
	return nil
}
