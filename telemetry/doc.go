// Package telemetry is what dsh says about itself while it runs: its
// OpenTelemetry instruments ([Metrics]), the hook through which the events
// sessions commit become metrics and traces ([Observer], installed with
// supervisor.Config.Observers), the exporters a command sets up
// ([NewMeterProvider]: Prometheus text for a /metrics route, OTLP/HTTP from
// the standard OTEL_* variables), and the slog handler that demotes a
// library's records to debug ([DebugHandler]). docs/observability.md is
// the user's list of every metric and log record.
//
// # The committed events are the source
//
// Everything a turn did (its steps, model calls with their chunks and
// usage, tool calls with their results) is in the session's log, so the
// counts are read there, by one Observer per session, rather than fed by
// calls spread through the agent loop. What a past session's log says
// and what the live metrics said agree by construction.
//
// # The instruments
//
// Names start with "dsh."; units are UCUM ("s", or an annotation such as
// "{turn}" that Prometheus drops). The Prometheus exporter turns dots
// into underscores, appends the unit (_seconds) and, to counters, _total.
//
//	instrument                      kind       unit      attributes          from
//	dsh.turns.started               counter    {turn}                        turn/start
//	dsh.turns.ended                 counter    {turn}    reason              turn/end (its reason's kind)
//	dsh.turn.duration               histogram  s         reason              turn/start → turn/end
//	dsh.events.appended             counter    {event}   type                every event (an extension type is "other")
//	dsh.model.chunks                counter    {chunk}                       assistant/chunk
//	dsh.model.calls                 counter    {call}    outcome             a model call attempt ended: ok, interrupted
//	                                                                         (assistant/message), error (llm/retry or
//	                                                                         turn/end error), aborted (turn/end otherwise)
//	dsh.model.calls.open            updown     {call}                        attempts begun (step/start,
//	                                                                         llm/retry-started) and not ended
//	dsh.model.time_to_first_token   histogram  s                             attempt start → its first chunk
//	dsh.model.retries               counter    {retry}                       llm/retry
//	dsh.model.tokens                counter    {token}   kind                assistant/message usage: input, output,
//	                                                                         cache_read, cache_write, reasoning
//	dsh.tool.calls                  counter    {call}    tool, outcome       tool/result (outcome ok or error)
//	dsh.tool.duration               histogram  s         tool, outcome       tool/call → tool/result
//	dsh.sessions.resident           gauge      {session}                     the host's registry
//	dsh.sessions.passivated         gauge      {session}                     the host's registry
//	dsh.persister.durable_lag       gauge      {event}                       committed minus durable, resident sessions
//	dsh.persister.write.failures    counter    {failure}                     the persister's WriteFailed notices
//	dsh.persister.fsync.duration    histogram  s                             a durable store write (write and fsync)
//	dsh.persister.queue.writes      gauge      {write}                       writes waiting for a store call
//	dsh.persister.queue.events      gauge      {event}                       the events of those writes
//	dsh.inbox.pending               gauge      {message}                     inbox splices of resident sessions
//	dsh.spans.dropped               counter    {span}                        spans.Exporter.Dropped (ObserveSpansDropped)
//	dsh.turn_end.flush.duration     histogram  s                             turn/end commit → durable notice
//	dsh.model.calls.queued          gauge      {call}                        calls waiting under the host's bound
//	dsh.model.queue.wait            histogram  s                             a call's wait for a slot
//
// Durations taken from events are differences of their timestamps
// (epoch milliseconds, so millisecond resolution); the others are
// measured with the monotonic clock where the fact lives (the host's
// notices, the concurrency bound).
//
// # Cost
//
// The counts that move with every event (events by type, chunks, tokens,
// turns started, retries, open calls) are atomic counters that observable
// instruments read when a reader collects: a chunk costs one atomic add
// and no lookup of an attribute set, no lock and no allocation. The other
// instruments record once per turn, model call or tool call. A host given
// no MeterProvider creates no instrument and installs no observer.
//
// # Concurrency
//
// [Metrics] and [MeterProvider] are safe for concurrent use. The observer
// [Metrics.Open] returns belongs to one session and is called from its
// actor only; its state (the open turn, model call and tool calls) needs
// no lock.
package telemetry
