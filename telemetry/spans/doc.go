// Package spans derives OpenTelemetry spans from a session's committed
// events: the log is the telemetry source, so the agent loop carries no
// tracing code, and a past session's trace is computed from its log
// exactly as the live one was.
//
// # The spans
//
// Each turn is a trace, rooted at its turn span; under it a span per step;
// under each step a span per model call attempt ("chat MODEL", kind
// client, with a first_token event, the usage, the finish reason and the
// attempt number as attributes) and a span per tool call ("execute_tool
// NAME"). A failed attempt, a failed tool call and a turn that ended in
// error have the error status and error.type; an llm/retry is an event
// on its step. Builder's comment says where each span starts and ends.
//
// # Ids
//
// Trace and span ids are hashes of the session id and the span's position
// (turn, step, attempt, tool call id): TraceID, TurnSpanID, StepSpanID,
// ModelCallSpanID, ToolCallSpanID. Reading the same log always gives the
// same ids, so `dsh log trace` of a session gives the ids its live export
// gave, and a backend holding both sees each span once.
//
// # Use
//
// Spans (a whole log) and Builder (event by event, for a live observer)
// are pure: no clock, no I/O, no goroutines. ReadOnly turns spans into the
// SDK's read-only spans for any sdktrace.SpanExporter or SpanProcessor
// (the SDK's tracer is not used: it would pick random ids and read the
// clock); WriteJSON prints them as OTLP/JSON; NewHTTPExporter is the
// OTLP/HTTP exporter of `dsh log trace --otlp`.
//
// # Concurrency and ownership
//
// A Builder is used by one goroutine. A Span handed to an emit function,
// or returned by Spans, belongs to the receiver. The functions are safe
// for concurrent use.
//
// See docs/observability.md for the attributes and how to export.
package spans
