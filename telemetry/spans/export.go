package spans

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ErrBadEndpoint reports an OTLP endpoint that is not an http or https
// URL with a host.
var ErrBadEndpoint = errors.New("spans: the OTLP endpoint must be an http:// or https:// URL with a host")

// defaultTracesPath is where an OTLP/HTTP receiver takes traces.
const defaultTracesPath = "/v1/traces"

// NewHTTPExporter returns an OTLP/HTTP span exporter sending to endpoint,
// a URL: a URL with no path gets the receiver's /v1/traces, one with a path
// is used as it is (as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is). The other
// standard OTEL_EXPORTER_OTLP_* variables (headers, timeout, compression,
// certificates, protocol http/protobuf or http/json) apply as the
// exporter reads them. The caller shuts the exporter down.
func NewHTTPExporter(ctx context.Context, endpoint string) (sdktrace.SpanExporter, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: %q", ErrBadEndpoint, endpoint)
	}
	if strings.Trim(u.Path, "/") == "" {
		u.Path = defaultTracesPath
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("spans: OTLP exporter for %s: %w", u.Redacted(), err)
	}
	return exp, nil
}
