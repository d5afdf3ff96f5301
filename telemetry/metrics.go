package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/dshgo/dsh/actors/session"
)

// ScopeName is the instrumentation scope of every dsh instrument.
const ScopeName = "github.com/dshgo/dsh"

// durationBuckets are the bucket bounds, in seconds, of every duration
// histogram: from a millisecond (a flush on a fast disk, a cached tool)
// to a minute (a slow model's first token, a long tool). OpenTelemetry's
// default bounds are meant for milliseconds and would put every flush in
// the first bucket.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Metrics holds dsh's instruments (see doc.go for the set). It is safe for
// concurrent use. The counts that move with every event (events by type,
// chunks, tokens, turns started, retries) are kept in atomic counters
// read by observable instruments when the reader collects: an event costs
// an atomic add, never a lookup of an attribute set nor a lock, which is
// what keeps the chunk path within its budget. The rest (one per turn,
// model call or tool call, or rarer) are synchronous instruments.
type Metrics struct {
	events  [len(eventTypes) + 1]atomic.Int64 // by eventIndex; the last is "other"; dsh.model.chunks reads chunkIndex's
	tokens  [len(tokenKinds)]atomic.Int64
	started atomic.Int64 // turns
	retries atomic.Int64
	open    atomic.Int64 // model calls begun and not yet ended

	turnsEnded   metric.Int64Counter
	turnDuration metric.Float64Histogram
	modelCalls   metric.Int64Counter
	ttft         metric.Float64Histogram
	toolCalls    metric.Int64Counter
	toolDuration metric.Float64Histogram

	flush         metric.Float64Histogram
	fsync         metric.Float64Histogram
	writeFailures metric.Int64Counter
	queueWait     metric.Float64Histogram

	meter metric.Meter
	regs  []metric.Registration

	eventSets [len(eventTypes) + 1]metric.ObserveOption
	tokenSets [len(tokenKinds)]metric.ObserveOption
}

// eventTypes are the event types counted under their own name; any other
// type (an extension's) is counted as "other", which keeps the attribute's
// cardinality bounded whatever a log holds.
var eventTypes = [...]session.EventType{
	session.TypeTurnStart, session.TypeTurnEnd, session.TypeStepStart, session.TypeStepEnd,
	session.TypeUserMessage, session.TypeAssistantChunk, session.TypeAssistantMessage,
	session.TypeToolCall, session.TypeToolResult, session.TypeRequestHeader, session.TypeRequestContext,
	session.TypeInboxSpliced, session.TypeEndSeed, session.TypeTodoWrite, session.TypeLlmRetry,
	session.TypeLlmRetryStarted, session.TypeCompactionStart, session.TypeCompactionSum,
	session.TypeCompactionPrune, session.TypeCompactionEnd,
}

// chunkIndex is assistant/chunk's index in eventTypes.
const chunkIndex = 5

// eventIndex returns t's index in eventTypes, len(eventTypes) for other.
// The chunk, by far the most frequent, is checked first (one compare).
func eventIndex(t session.EventType) int {
	if t == session.TypeAssistantChunk {
		return chunkIndex
	}
	for i, et := range eventTypes {
		if et == t {
			return i
		}
	}
	return len(eventTypes)
}

// Token kinds, the values of dsh.model.tokens' kind attribute.
const (
	tokInput = iota
	tokOutput
	tokCacheRead
	tokCacheWrite
	tokReasoning
)

var tokenKinds = [...]string{"input", "output", "cache_read", "cache_write", "reasoning"}

// Instrument names. Prometheus shows them with dots as underscores, the
// unit as a suffix (seconds) and counters ending in _total:
// dsh.turns.ended is dsh_turns_ended_total, dsh.turn_end.flush.duration
// is dsh_turn_end_flush_duration_seconds.
const (
	NameSessionsResident   = "dsh.sessions.resident"
	NameSessionsPassivated = "dsh.sessions.passivated"
	NameTurnsStarted       = "dsh.turns.started"
	NameTurnsEnded         = "dsh.turns.ended"
	NameTurnDuration       = "dsh.turn.duration"
	NameEventsAppended     = "dsh.events.appended"
	NameModelChunks        = "dsh.model.chunks"
	NameModelCalls         = "dsh.model.calls"
	NameModelCallsOpen     = "dsh.model.calls.open"
	NameModelCallsQueued   = "dsh.model.calls.queued"
	NameModelQueueWait     = "dsh.model.queue.wait"
	NameModelTTFT          = "dsh.model.time_to_first_token"
	NameModelRetries       = "dsh.model.retries"
	NameModelTokens        = "dsh.model.tokens"
	NameToolCalls          = "dsh.tool.calls"
	NameToolDuration       = "dsh.tool.duration"
	NameTurnEndFlush       = "dsh.turn_end.flush.duration"
	NameWriteFailures      = "dsh.persister.write.failures"
	NameDurableLag         = "dsh.persister.durable_lag"
	NameFsync              = "dsh.persister.fsync.duration"
	NameQueuedWrites       = "dsh.persister.queue.writes"
	NameQueuedEvents       = "dsh.persister.queue.events"
	NameInboxPending       = "dsh.inbox.pending"
	NameSpansDropped       = "dsh.spans.dropped"
)

// ObserveSpansDropped registers read (spans.Exporter.Dropped) as the
// source of dsh.spans.dropped on mp: spans a live export dropped because
// it fell behind. The returned function unregisters it.
func ObserveSpansDropped(mp metric.MeterProvider, read func() int64) (unregister func() error, err error) {
	mt := mp.Meter(ScopeName)
	c, err := mt.Int64ObservableCounter(NameSpansDropped, metric.WithUnit("{span}"),
		metric.WithDescription("Spans the live trace export dropped because it fell behind (its queue full)."))
	if err != nil {
		return nil, fmt.Errorf("telemetry: %s: %w", NameSpansDropped, err)
	}
	reg, err := mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(c, read())
		return nil
	}, c)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %s: %w", NameSpansDropped, err)
	}
	return reg.Unregister, nil
}

// NewMetrics creates the instruments on mp's meter for ScopeName. A nil
// mp is the no-op provider: the instruments exist and record nothing.
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := &Metrics{meter: mp.Meter(ScopeName)}
	for i, t := range eventTypes {
		m.eventSets[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String("type", string(t))))
	}
	m.eventSets[len(eventTypes)] = metric.WithAttributeSet(attribute.NewSet(attribute.String("type", "other")))
	for i, k := range tokenKinds {
		m.tokenSets[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", k)))
	}
	mt := m.meter
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	seconds := []metric.Float64HistogramOption{metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...)}
	var err error
	m.turnsEnded, err = mt.Int64Counter(NameTurnsEnded, metric.WithUnit("{turn}"),
		metric.WithDescription("Turns ended, by reason (completed, max-tokens, blocked, aborted, error, interrupted)."))
	check(err)
	m.turnDuration, err = mt.Float64Histogram(NameTurnDuration, append(seconds,
		metric.WithDescription("Time from turn/start to turn/end, by reason."))...)
	check(err)
	m.modelCalls, err = mt.Int64Counter(NameModelCalls, metric.WithUnit("{call}"),
		metric.WithDescription("Model call attempts ended, by outcome (ok, interrupted, error, aborted)."))
	check(err)
	m.ttft, err = mt.Float64Histogram(NameModelTTFT, append(seconds,
		metric.WithDescription("Time from a model call's start to its first streamed chunk."))...)
	check(err)
	m.toolCalls, err = mt.Int64Counter(NameToolCalls, metric.WithUnit("{call}"),
		metric.WithDescription("Tool calls ended, by tool and outcome (ok, error)."))
	check(err)
	m.toolDuration, err = mt.Float64Histogram(NameToolDuration, append(seconds,
		metric.WithDescription("Time from tool/call to tool/result, by tool and outcome."))...)
	check(err)
	m.flush, err = mt.Float64Histogram(NameTurnEndFlush, append(seconds,
		metric.WithDescription("Time from a turn/end's commit to its being durable (written and fsynced)."))...)
	check(err)
	m.fsync, err = mt.Float64Histogram(NameFsync, append(seconds,
		metric.WithDescription("Time of a durable store write that succeeded: the write and its fsync (a group commit's, once)."))...)
	check(err)
	m.writeFailures, err = mt.Int64Counter(NameWriteFailures, metric.WithUnit("{failure}"),
		metric.WithDescription("Failed writes of the persister (each failed retry included); the events are kept and retried."))
	check(err)
	m.queueWait, err = mt.Float64Histogram(NameModelQueueWait, append(seconds,
		metric.WithDescription("Time a model call waited for a slot under the host's concurrency bound."))...)
	check(err)

	started, err := mt.Int64ObservableCounter(NameTurnsStarted, metric.WithUnit("{turn}"),
		metric.WithDescription("Turns started."))
	check(err)
	events, err := mt.Int64ObservableCounter(NameEventsAppended, metric.WithUnit("{event}"),
		metric.WithDescription("Events committed to session logs, by type (extension types as other)."))
	check(err)
	chunks, err := mt.Int64ObservableCounter(NameModelChunks, metric.WithUnit("{chunk}"),
		metric.WithDescription("Streamed chunks logged (assistant/chunk events)."))
	check(err)
	tokens, err := mt.Int64ObservableCounter(NameModelTokens, metric.WithUnit("{token}"),
		metric.WithDescription("Tokens of model calls as their usage reports them, by kind (input, output, cache_read, cache_write, reasoning)."))
	check(err)
	retries, err := mt.Int64ObservableCounter(NameModelRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Model call retries (llm/retry events)."))
	check(err)
	open, err := mt.Int64ObservableUpDownCounter(NameModelCallsOpen, metric.WithUnit("{call}"),
		metric.WithDescription("Model calls begun (step/start, llm/retry-started) and not yet ended."))
	check(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("telemetry: instruments: %w", err)
	}
	reg, err := mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(started, m.started.Load())
		o.ObserveInt64(chunks, m.events[chunkIndex].Load())
		o.ObserveInt64(retries, m.retries.Load())
		o.ObserveInt64(open, m.open.Load())
		for i := range m.events {
			if n := m.events[i].Load(); n != 0 {
				o.ObserveInt64(events, n, m.eventSets[i])
			}
		}
		for i := range m.tokens {
			o.ObserveInt64(tokens, m.tokens[i].Load(), m.tokenSets[i])
		}
		return nil
	}, started, events, chunks, tokens, retries, open)
	if err != nil {
		return nil, fmt.Errorf("telemetry: register: %w", err)
	}
	m.regs = append(m.regs, reg)
	return m, nil
}

// HostReadings are the gauges a host reads from the counters it keeps.
type HostReadings struct {
	Resident   int64 // sessions whose actors run
	Passivated int64 // sessions passivated and not resident again
	DurableLag int64 // events committed by resident sessions and not yet durable
	Queued     int64 // model calls waiting for a slot

	QueuedWrites int64 // persister writes waiting for a store call
	QueuedEvents int64 // the events of those writes
	Inbox        int64 // messages pending in resident sessions' inboxes
}

// ObserveHost registers read as the source of the host gauges
// (dsh.sessions.*, dsh.persister.durable_lag, dsh.persister.queue.*,
// dsh.model.calls.queued, dsh.inbox.pending),
// called at each collection. The returned function unregisters it (a
// host calls it when it closes). read must be safe for concurrent use
// and quick: it runs on the reader's goroutine.
func (m *Metrics) ObserveHost(read func() HostReadings) (unregister func() error, err error) {
	mt := m.meter
	var errs []error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := mt.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			errs = append(errs, err)
		}
		return g
	}
	resident := gauge(NameSessionsResident, "{session}", "Sessions resident (their actors running).")
	passivated := gauge(NameSessionsPassivated, "{session}", "Sessions passivated (stopped, resumable from the store) and not resident.")
	lag := gauge(NameDurableLag, "{event}", "Events committed by resident sessions and not yet durable.")
	queued := gauge(NameModelCallsQueued, "{call}", "Model calls waiting for a slot under the host's concurrency bound.")
	qWrites := gauge(NameQueuedWrites, "{write}", "Persister writes (batches of one session's events) waiting for a store call.")
	qEvents := gauge(NameQueuedEvents, "{event}", "Events of the persister writes waiting for a store call.")
	inbox := gauge(NameInboxPending, "{message}", "Messages pending in resident sessions' inboxes (next-turn and next-step).")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("telemetry: host gauges: %w", err)
	}
	reg, err := mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		r := read()
		o.ObserveInt64(resident, r.Resident)
		o.ObserveInt64(passivated, r.Passivated)
		o.ObserveInt64(lag, r.DurableLag)
		o.ObserveInt64(queued, r.Queued)
		o.ObserveInt64(qWrites, r.QueuedWrites)
		o.ObserveInt64(qEvents, r.QueuedEvents)
		o.ObserveInt64(inbox, r.Inbox)
		return nil
	}, resident, passivated, lag, queued, qWrites, qEvents, inbox)
	if err != nil {
		return nil, fmt.Errorf("telemetry: register host gauges: %w", err)
	}
	return reg.Unregister, nil
}

// TurnDurable records the time from a turn/end's commit to its being
// durable.
func (m *Metrics) TurnDurable(d time.Duration) {
	m.flush.Record(context.Background(), d.Seconds())
}

// SyncedWrite records the duration of a durable store write that
// succeeded (persister.Telemetry.OnSyncedWrite).
func (m *Metrics) SyncedWrite(d time.Duration) {
	m.fsync.Record(context.Background(), d.Seconds())
}

// WriteFailed counts one failed write of the persister.
func (m *Metrics) WriteFailed() {
	m.writeFailures.Add(context.Background(), 1)
}

// QueueWait records the time a model call waited for a slot.
func (m *Metrics) QueueWait(d time.Duration) {
	m.queueWait.Record(context.Background(), d.Seconds())
}

// Close unregisters the callbacks of the event-derived instruments.
func (m *Metrics) Close() error {
	var errs []error
	for _, r := range m.regs {
		errs = append(errs, r.Unregister())
	}
	m.regs = nil
	return errors.Join(errs...)
}

// Open implements Observer: the returned observer folds one session's
// committed events into the instruments. Its state (the open turn, model
// call and tool calls, for their durations) is the session's own, touched
// only from the session actor.
func (m *Metrics) Open(session.SessionID, session.Events) session.Observer {
	s := &sessionMetrics{m: m, turnAt: -1, callAt: -1}
	return s.observe
}

// sessionMetrics is one session's observer state.
type sessionMetrics struct {
	m      *Metrics
	turnAt int64 // epoch ms of the open turn's turn/start; -1: none
	callAt int64 // epoch ms the open model call began; -1: none
	first  bool  // the open model call has streamed a chunk
	tools  map[string]toolStart
}

type toolStart struct {
	name string
	at   int64
}

func (s *sessionMetrics) observe(ev session.Event) error {
	m := s.m
	t := ev.Type()
	if t == session.TypeAssistantChunk {
		// The hot path: one atomic add (dsh.model.chunks and the chunks'
		// dsh.events.appended read the same count), and once per call the
		// first token.
		m.events[chunkIndex].Add(1)
		if s.callAt >= 0 && !s.first {
			s.first = true
			m.ttft.Record(context.Background(), msToSeconds(ev.Time()-s.callAt))
		}
		return nil
	}
	m.events[eventIndex(t)].Add(1)
	ctx := context.Background()
	switch t {
	case session.TypeTurnStart:
		m.started.Add(1)
		s.turnAt = ev.Time()
	case session.TypeStepStart, session.TypeLlmRetryStarted:
		s.beginCall(ev.Time())
	case session.TypeLlmRetry:
		m.retries.Add(1)
		s.endCall("error")
	case session.TypeAssistantMessage:
		p, ok := ev.Payload().(session.AssistantMessage)
		outcome := "ok"
		if ok && p.Interrupted {
			outcome = "interrupted"
		}
		s.endCall(outcome)
		if ok && p.HasUsage {
			u := p.Usage
			m.tokens[tokInput].Add(u.InputTokens)
			m.tokens[tokOutput].Add(u.OutputTokens)
			m.tokens[tokCacheRead].Add(u.CacheReadTokens.Or(0))
			m.tokens[tokCacheWrite].Add(u.CacheWriteTokens.Or(0))
			m.tokens[tokReasoning].Add(u.ReasoningTokens.Or(0))
		}
	case session.TypeToolCall:
		if p, ok := ev.Payload().(session.ToolCall); ok {
			if s.tools == nil {
				s.tools = map[string]toolStart{}
			}
			s.tools[p.CallID] = toolStart{name: p.Name, at: ev.Time()}
		}
	case session.TypeToolResult:
		p, ok := ev.Payload().(session.ToolResult)
		if !ok {
			break
		}
		id := p.Message.Source().CallID()
		start, found := s.tools[id]
		if !found {
			// A result without a recorded call: crash repair's
			// TOOL_NOT_STARTED, which names no tool we saw start.
			break
		}
		delete(s.tools, id)
		outcome := "ok"
		if p.Error.Code != "" {
			outcome = "error"
		}
		set := metric.WithAttributeSet(attribute.NewSet(attribute.String("tool", start.name), attribute.String("outcome", outcome)))
		m.toolCalls.Add(ctx, 1, set)
		m.toolDuration.Record(ctx, msToSeconds(ev.Time()-start.at), set)
	case session.TypeTurnEnd:
		reason := "unknown"
		if p, ok := ev.Payload().(session.TurnEnd); ok {
			reason = string(p.Reason.Kind)
		}
		if s.callAt >= 0 {
			// The turn ended inside a model call (an error, a cancel).
			outcome := "aborted"
			if reason == string(session.EndError) {
				outcome = "error"
			}
			s.endCall(outcome)
		}
		set := metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", reason)))
		m.turnsEnded.Add(ctx, 1, set)
		if s.turnAt >= 0 {
			m.turnDuration.Record(ctx, msToSeconds(ev.Time()-s.turnAt), set)
		}
		s.turnAt = -1
		clear(s.tools)
	}
	return nil
}

func (s *sessionMetrics) beginCall(at int64) {
	if s.callAt < 0 {
		s.m.open.Add(1)
	}
	s.callAt, s.first = at, false
}

func (s *sessionMetrics) endCall(outcome string) {
	if s.callAt < 0 {
		return
	}
	s.callAt = -1
	s.m.open.Add(-1)
	s.m.modelCalls.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", outcome))))
}

// msToSeconds converts a difference of event times (epoch ms, not
// monotonic) to seconds, never negative.
func msToSeconds(ms int64) float64 {
	return float64(max(ms, 0)) / 1000
}
