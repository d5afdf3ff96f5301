package spans

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope every dsh span carries.
const ScopeName = "github.com/dshgo/dsh/telemetry/spans"

// ServiceName is the default service.name of dsh's spans
// (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override it).
const ServiceName = "dsh"

// Resource returns the resource dsh's spans are exported with:
// service.name "dsh", overridden by the standard OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES variables.
func Resource(ctx context.Context) (*resource.Resource, error) {
	env, err := resource.New(ctx, resource.WithFromEnv())
	if err != nil {
		return nil, err
	}
	return resource.Merge(resource.NewSchemaless(semconv.ServiceName(ServiceName)), env)
}

// ReadOnly returns spans as the OpenTelemetry SDK's read-only spans, for a
// sdktrace.SpanExporter or SpanProcessor: the SDK's own tracer would give
// them random ids and the clock's times, where these keep the ids and
// times derived from the log. The returned slice is owned by the caller.
func ReadOnly(spans []Span, res *resource.Resource) []sdktrace.ReadOnlySpan {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	for i := range spans {
		out[i] = readOnly(&spans[i], res)
	}
	return out
}

var scope = instrumentation.Scope{Name: ScopeName}

func readOnly(s *Span, res *resource.Resource) sdktrace.ReadOnlySpan {
	stub := tracetest.SpanStub{
		Name: s.Name,
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: s.TraceID, SpanID: s.SpanID, TraceFlags: trace.FlagsSampled,
		}),
		SpanKind:             s.Kind,
		StartTime:            s.Start,
		EndTime:              s.End,
		Attributes:           s.Attrs,
		Status:               sdktrace.Status{Code: s.Status, Description: s.StatusMessage},
		Resource:             res,
		InstrumentationScope: scope,
	}
	if s.Parent.IsValid() {
		stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: s.TraceID, SpanID: s.Parent, TraceFlags: trace.FlagsSampled,
		})
	}
	if len(s.Events) > 0 {
		stub.Events = make([]sdktrace.Event, len(s.Events))
		for i, e := range s.Events {
			stub.Events[i] = sdktrace.Event{Name: e.Name, Time: e.Time, Attributes: e.Attrs}
		}
	}
	return stub.Snapshot()
}

// WriteJSON writes spans as one OTLP/JSON TracesData value (the shape an
// OTLP/HTTP receiver accepts with Content-Type application/json): ids in
// hex, times in nanoseconds as decimal strings, enums as numbers, 64-bit
// integers as strings. It is written by hand rather than with protojson,
// which would print the ids in base64 as protobuf's JSON mapping does,
// where OTLP/JSON wants hex.
func WriteJSON(w io.Writer, spans []Span, res *resource.Resource) error {
	doc := otlpTraces{ResourceSpans: []otlpResourceSpans{{
		Resource:   otlpResource{Attributes: attrsJSON(res.Attributes())},
		SchemaURL:  res.SchemaURL(),
		ScopeSpans: []otlpScopeSpans{{Scope: otlpScope{Name: ScopeName}, Spans: make([]otlpSpan, 0, len(spans))}},
	}}}
	ss := &doc.ResourceSpans[0].ScopeSpans[0]
	for i := range spans {
		ss.Spans = append(ss.Spans, spanJSON(&spans[i]))
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// The OTLP/JSON shapes (opentelemetry-proto's trace.proto, in its JSON
// mapping).
type (
	otlpTraces struct {
		ResourceSpans []otlpResourceSpans `json:"resourceSpans"`
	}
	otlpResourceSpans struct {
		Resource   otlpResource     `json:"resource"`
		ScopeSpans []otlpScopeSpans `json:"scopeSpans"`
		SchemaURL  string           `json:"schemaUrl,omitempty"`
	}
	otlpResource struct {
		Attributes []otlpKeyValue `json:"attributes"`
	}
	otlpScopeSpans struct {
		Scope otlpScope  `json:"scope"`
		Spans []otlpSpan `json:"spans"`
	}
	otlpScope struct {
		Name string `json:"name"`
	}
	otlpSpan struct {
		TraceID           string         `json:"traceId"`
		SpanID            string         `json:"spanId"`
		ParentSpanID      string         `json:"parentSpanId,omitempty"`
		Flags             uint32         `json:"flags"`
		Name              string         `json:"name"`
		Kind              int            `json:"kind"`
		StartTimeUnixNano string         `json:"startTimeUnixNano"`
		EndTimeUnixNano   string         `json:"endTimeUnixNano"`
		Attributes        []otlpKeyValue `json:"attributes,omitempty"`
		Events            []otlpEvent    `json:"events,omitempty"`
		Status            otlpStatus     `json:"status"`
	}
	otlpEvent struct {
		TimeUnixNano string         `json:"timeUnixNano"`
		Name         string         `json:"name"`
		Attributes   []otlpKeyValue `json:"attributes,omitempty"`
	}
	otlpStatus struct {
		Message string `json:"message,omitempty"`
		Code    int    `json:"code,omitempty"`
	}
	otlpKeyValue struct {
		Key   string    `json:"key"`
		Value otlpValue `json:"value"`
	}
	otlpValue struct {
		StringValue *string     `json:"stringValue,omitempty"`
		BoolValue   *bool       `json:"boolValue,omitempty"`
		IntValue    *string     `json:"intValue,omitempty"`
		DoubleValue *float64    `json:"doubleValue,omitempty"`
		ArrayValue  *otlpValues `json:"arrayValue,omitempty"`
	}
	otlpValues struct {
		Values []otlpValue `json:"values"`
	}
)

func spanJSON(s *Span) otlpSpan {
	o := otlpSpan{
		TraceID:           hex.EncodeToString(s.TraceID[:]),
		SpanID:            hex.EncodeToString(s.SpanID[:]),
		Flags:             uint32(trace.FlagsSampled),
		Name:              s.Name,
		Kind:              otlpKind(s.Kind),
		StartTimeUnixNano: nanos(s.Start.UnixNano()),
		EndTimeUnixNano:   nanos(s.End.UnixNano()),
		Attributes:        attrsJSON(s.Attrs),
		Status:            otlpStatus{Code: otlpStatusCode(s.Status), Message: s.StatusMessage},
	}
	if s.Parent.IsValid() {
		o.ParentSpanID = hex.EncodeToString(s.Parent[:])
	}
	for _, e := range s.Events {
		o.Events = append(o.Events, otlpEvent{TimeUnixNano: nanos(e.Time.UnixNano()), Name: e.Name, Attributes: attrsJSON(e.Attrs)})
	}
	return o
}

func nanos(n int64) string { return strconv.FormatInt(n, 10) }

// otlpKind maps a span kind to OTLP's enum (SPAN_KIND_INTERNAL is 1, as in
// the API; OTLP's 0 is "unspecified").
func otlpKind(k trace.SpanKind) int {
	if k == trace.SpanKindUnspecified {
		return int(trace.SpanKindInternal)
	}
	return int(k)
}

// otlpStatusCode maps a status to OTLP's enum, whose order differs from
// the API's: unset 0, ok 1, error 2.
func otlpStatusCode(c codes.Code) int {
	switch c {
	case codes.Ok:
		return 1
	case codes.Error:
		return 2
	}
	return 0
}

func attrsJSON(kvs []attribute.KeyValue) []otlpKeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]otlpKeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, otlpKeyValue{Key: string(kv.Key), Value: valueJSON(kv.Value)})
	}
	return out
}

func valueJSON(v attribute.Value) otlpValue {
	switch v.Type() {
	case attribute.BOOL:
		b := v.AsBool()
		return otlpValue{BoolValue: &b}
	case attribute.INT64:
		s := strconv.FormatInt(v.AsInt64(), 10)
		return otlpValue{IntValue: &s}
	case attribute.FLOAT64:
		f := v.AsFloat64()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			s := strconv.FormatFloat(f, 'g', -1, 64)
			return otlpValue{StringValue: &s}
		}
		return otlpValue{DoubleValue: &f}
	case attribute.STRINGSLICE:
		ss := v.AsStringSlice()
		vals := make([]otlpValue, len(ss))
		for i := range ss {
			vals[i] = otlpValue{StringValue: &ss[i]}
		}
		return otlpValue{ArrayValue: &otlpValues{Values: vals}}
	case attribute.INT64SLICE:
		is := v.AsInt64Slice()
		vals := make([]otlpValue, len(is))
		for i, n := range is {
			s := strconv.FormatInt(n, 10)
			vals[i] = otlpValue{IntValue: &s}
		}
		return otlpValue{ArrayValue: &otlpValues{Values: vals}}
	}
	s := v.String()
	return otlpValue{StringValue: &s}
}
