package spans

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// Span is one finished span built from a session's events. It is a plain
// record: the Builder hands each Span to its emit function once, and the
// receiver owns it (its slices are not shared with the Builder).
type Span struct {
	TraceID trace.TraceID
	SpanID  trace.SpanID
	// Parent is the parent span's id; zero for a turn, the root of its
	// trace.
	Parent        trace.SpanID
	Name          string
	Kind          trace.SpanKind
	Start, End    time.Time
	Attrs         []attribute.KeyValue
	Events        []SpanEvent
	Status        codes.Code
	StatusMessage string
	// Seq is the seq of the event that opened the span: the order spans
	// are printed in (a parent before its children, since a parent opens
	// first).
	Seq int64
}

// SpanEvent is a timed annotation of a span (the model call's first
// token, a step's retry).
type SpanEvent struct {
	Name  string
	Time  time.Time
	Attrs []attribute.KeyValue
}

// The span names. A model call is named "chat MODEL" and a tool call
// "execute_tool NAME", as OpenTelemetry's generative-AI conventions name
// them; the names stay few (one per model and per tool), as a backend
// groups by name.
const (
	NameTurn      = "turn"
	NameStep      = "step"
	NameModelCall = "chat"
	NameToolCall  = "execute_tool"
	// EventFirstToken marks the first token of a model call: its first
	// text, reasoning or tool-call delta.
	EventFirstToken = "first_token"
	// EventRetry marks, on a step, an llm/retry event: a failed model
	// call to be retried after a backoff.
	EventRetry = "retry"
)

// The attribute keys. gen_ai.* and error.type are OpenTelemetry's
// semantic conventions; dsh.* are ours.
const (
	AttrSession        = attribute.Key("dsh.session.id")
	AttrTurn           = attribute.Key("dsh.turn")
	AttrStep           = attribute.Key("dsh.step")
	AttrAttempt        = attribute.Key("dsh.model.attempt")
	AttrChunks         = attribute.Key("dsh.model.chunks")
	AttrInterrupted    = attribute.Key("dsh.model.interrupted")
	AttrUnfinished     = attribute.Key("dsh.unfinished")
	AttrEndReason      = attribute.Key("dsh.turn.end_reason")
	AttrCancelCause    = attribute.Key("dsh.turn.cancel_cause")
	AttrOperation      = attribute.Key("gen_ai.operation.name")
	AttrProvider       = attribute.Key("gen_ai.provider.name")
	AttrModel          = attribute.Key("gen_ai.request.model")
	AttrFinishReasons  = attribute.Key("gen_ai.response.finish_reasons")
	AttrInputTokens    = attribute.Key("gen_ai.usage.input_tokens")
	AttrOutputTokens   = attribute.Key("gen_ai.usage.output_tokens")
	AttrCacheRead      = attribute.Key("dsh.usage.cache_read_tokens")
	AttrCacheWrite     = attribute.Key("dsh.usage.cache_write_tokens")
	AttrReasoning      = attribute.Key("dsh.usage.reasoning_tokens")
	AttrToolName       = attribute.Key("gen_ai.tool.name")
	AttrToolCallID     = attribute.Key("gen_ai.tool.call.id")
	AttrErrorType      = attribute.Key("error.type")
	AttrRetry          = attribute.Key("dsh.retry")
	AttrRetryDelayMs   = attribute.Key("dsh.retry.delay_ms")
	AttrRetryFailure   = attribute.Key("dsh.retry.failure")
	operationChat      = "chat"
	operationExecTool  = "execute_tool"
	finishKindNoFinish = "none"
)

// Builder turns the events of one session, in seq order, into spans: a
// span per turn, per step, per model call attempt and per tool call, each
// handed to the emit function when the event that ends it arrives (so a
// child is emitted before its parent). It is the whole of the tracing
// logic: the live exporter and `dsh log trace` both feed a Builder, which
// is why they give the same spans with the same ids (ids.go).
//
// Times are the events' times, which are wall-clock milliseconds and not
// monotonic (a log may even carry zeros): a span starts no earlier than its
// parent, ends no earlier than it starts, and no earlier than its children
// end.
//
// A model call attempt opens with its first chunk (or, without chunks,
// with the event that ends it) and starts at the time of the event before
// that one: the request is sent right after the step's last bookkeeping
// event (request/context, llm/retry-started, compaction/end). It ends at
// its assistant/message, at a finish chunk saying error or aborted, at an
// llm/retry, or with its step. Retrying opens the next attempt of the same
// step.
//
// Not safe for concurrent use: one goroutine (the session actor) feeds it.
type Builder struct {
	id       session.SessionID
	firstSeq int64
	emit     func(Span)

	prevTime int64 // the time of the last event fed (ms)
	prevSeq  int64
	provider string // from the last request/context
	model    string
	turn     *openTurn
}

type openTurn struct {
	traceID  trace.TraceID // hashed once per turn, as is spanID
	spanID   trace.SpanID
	turn     int64
	start    int64
	seq      int64
	step     *openStep
	childEnd int64 // the latest end of its steps
}

type openStep struct {
	spanID     trace.SpanID
	step       int64
	start      int64
	seq        int64
	attempts   int64
	call       *openCall
	lastFailed bool // the last attempt ended failed: an llm/retry adds no attempt
	tools      []openTool
	events     []SpanEvent
	childEnd   int64 // the latest end of its calls
}

type openCall struct {
	attempt    int64
	start      int64
	seq        int64
	chunks     int64
	firstToken int64 // -1 until the first token delta
	usage      messages.TokenUsage
	hasUsage   bool
	finish     messages.FinishKind
	provider   string
	model      string
}

type openTool struct {
	callID, name string
	start, seq   int64
}

// NewBuilder returns a Builder of session id's spans, calling emit with
// each span as it ends. Events before seq firstSeq are skipped: a forked
// session's seed (its header's seedLength) holds its parent's turns,
// whose spans are the parent's.
func NewBuilder(id session.SessionID, firstSeq int64, emit func(Span)) *Builder {
	return &Builder{id: id, firstSeq: firstSeq, emit: emit, prevSeq: -1}
}

// Spans returns the spans of a whole log: every finished span, then the
// spans still open at its end (Builder.Unfinished), sorted by the seq that
// opened them. The returned slice is owned by the caller.
func Spans(id session.SessionID, firstSeq int64, events []session.Event) []Span {
	var out []Span
	b := NewBuilder(id, firstSeq, func(s Span) { out = append(out, s) })
	for _, e := range events {
		b.Add(e)
	}
	b.Unfinished()
	slices.SortStableFunc(out, func(a, b Span) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// Add feeds the next event of the session. Events must come in seq order;
// one that does not fit the open spans (a step of no open turn, a result
// of no open call) changes nothing: the log's own rules have refused such
// events before they were committed.
func (b *Builder) Add(e session.Event) {
	if e.Seq() < b.firstSeq || e.Seq() <= b.prevSeq {
		return
	}
	t := e.Time()
	switch e.Type() {
	case session.TypeTurnStart:
		if p, ok := e.Payload().(session.TurnStart); ok {
			b.openTurn(p.Turn, t, e.Seq())
		}
	case session.TypeTurnEnd:
		if p, ok := e.Payload().(session.TurnEnd); ok && b.turn != nil && b.turn.turn == p.Turn {
			b.endTurn(t, &p.Reason, false)
		}
	case session.TypeStepStart:
		if p, ok := e.Payload().(session.StepStart); ok && b.turn != nil && b.turn.turn == p.Turn {
			if b.turn.step != nil {
				b.endStep(t, false)
			}
			b.turn.step = &openStep{spanID: StepSpanID(b.id, p.Turn, p.Step), step: p.Step, start: max(t, b.turn.start), seq: e.Seq()}
		}
	case session.TypeStepEnd:
		if s := b.stepOf(e); s != nil {
			b.endStep(t, false)
		}
	case session.TypeAssistantChunk:
		if s := b.stepOf(e); s != nil {
			b.chunk(s, e)
		}
	case session.TypeAssistantMessage:
		if s := b.stepOf(e); s != nil {
			b.message(s, e)
		}
	case session.TypeLlmRetry:
		if s := b.stepOf(e); s != nil {
			b.retry(s, e)
		}
	case session.TypeToolCall:
		if s := b.stepOf(e); s != nil {
			if p, ok := e.Payload().(session.ToolCall); ok {
				s.tools = append(s.tools, openTool{callID: p.CallID, name: p.Name, start: max(t, s.start), seq: e.Seq()})
			}
		}
	case session.TypeToolResult:
		// A replace is the compaction pruner rewriting an old result, not
		// a call ending.
		if s := b.stepOf(e); s != nil && e.SurfaceOp().Kind() != session.OpReplace {
			if p, ok := e.Payload().(session.ToolResult); ok {
				b.toolResult(s, p, t)
			}
		}
	case session.TypeRequestContext:
		if p, ok := e.Payload().(session.RequestContext); ok {
			b.provider, b.model = p.Provider, p.Model
		}
	}
	b.prevTime, b.prevSeq = t, e.Seq()
}

// Unfinished ends the spans still open, at the time of the last event fed,
// marked dsh.unfinished: a log that ends inside a turn (a session still
// running, or a crash before its repair) still shows what the turn did.
// The spans keep the ids the finished turn will give them, so a backend
// that later receives the finished spans (from the live exporter, or from
// `dsh log trace` on the repaired log) sees the same spans, ended, rather
// than duplicates. Skipping them was rejected: the last turn of a crashed
// session is the one a reader of its trace most wants to see.
func (b *Builder) Unfinished() {
	if b.turn != nil {
		b.endTurn(b.prevTime, nil, true)
	}
}

// stepOf returns the open step an event of a turn and step belongs to.
func (b *Builder) stepOf(e session.Event) *openStep {
	turn, step, ok := e.TurnStep()
	if !ok {
		// llm/retry's data is opaque to the log core: read its turn and
		// step here.
		if e.Type() != session.TypeLlmRetry {
			return nil
		}
		d := e.Data()
		tj, _ := d.Field("turn")
		sj, _ := d.Field("step")
		var ok1, ok2 bool
		turn, ok1 = tj.AsInt()
		step, ok2 = sj.AsInt()
		if !ok1 || !ok2 {
			return nil
		}
	}
	if b.turn == nil || b.turn.turn != turn || b.turn.step == nil || b.turn.step.step != step {
		return nil
	}
	return b.turn.step
}

func (b *Builder) openTurn(turn, t, seq int64) {
	if b.turn != nil {
		b.endTurn(b.prevTime, nil, true)
	}
	b.turn = &openTurn{traceID: TraceID(b.id, turn), spanID: TurnSpanID(b.id, turn), turn: turn, start: t, seq: seq}
}

// chunk folds an assistant/chunk into the step's open model call, opening
// one when none is.
func (b *Builder) chunk(s *openStep, e session.Event) {
	c := b.callOf(s, e.Seq())
	c.chunks++
	// Most chunks are text or reasoning deltas, read without decoding
	// them: only their emptiness matters (a non-empty one is a token).
	if _, nonEmpty, ok := e.ChunkText(); ok {
		if c.firstToken < 0 && nonEmpty {
			c.firstToken = max(e.Time(), c.start)
		}
		return
	}
	// Once the call has its first token, only a usage or finish chunk
	// changes it: the others are counted, not decoded.
	if c.firstToken >= 0 {
		if k, ok := rawChunkType(e); ok && k != messages.ChunkUsage && k != messages.ChunkFinish {
			return
		}
	}
	p, ok := e.Payload().(session.AssistantChunk)
	if !ok {
		return
	}
	ch := p.Chunk
	switch ch.Type() {
	case messages.ChunkUsage:
		c.usage, c.hasUsage = ch.Usage(), true
	case messages.ChunkFinish:
		r := ch.Reason()
		c.finish = r.Kind
		if r.Kind == messages.FinishError || r.Kind == messages.FinishAborted {
			b.endCall(s, e.Time(), r.Failure, callFailed)
		}
		return
	}
	if c.firstToken < 0 && ch.IsTokenDelta() {
		c.firstToken = max(e.Time(), c.start)
	}
}

// rawChunkType reads the type of an assistant/chunk's chunk from its data
// as dsh writes it ({"turn":T,"step":S,"chunk":{"type":"K",...}}) without
// decoding it; ok is false for data written otherwise (then decode it).
// The pattern cannot match inside a JSON string, whose quotes are
// escaped, and the first key of the chunk object is its type.
func rawChunkType(e session.Event) (messages.ChunkType, bool) {
	const key = `,"chunk":{"type":"`
	s := e.Data().String()
	if !strings.HasPrefix(s, `{"turn":`) {
		return "", false
	}
	i := strings.Index(s, key)
	if i < 0 {
		return "", false
	}
	s = s[i+len(key):]
	j := strings.IndexByte(s, '"')
	if j < 0 {
		return "", false
	}
	return messages.ChunkType(s[:j]), true
}

// callOf returns the step's open model call, opening the next attempt
// when none is open.
func (b *Builder) callOf(s *openStep, seq int64) *openCall {
	if s.call == nil {
		s.attempts++
		s.lastFailed = false
		s.call = &openCall{attempt: s.attempts, start: max(b.prevTime, s.start), seq: seq, firstToken: -1,
			provider: b.provider, model: b.model}
	}
	return s.call
}

func (b *Builder) message(s *openStep, e session.Event) {
	p, ok := e.Payload().(session.AssistantMessage)
	if !ok {
		return
	}
	c := b.callOf(s, e.Seq())
	if p.HasUsage {
		c.usage, c.hasUsage = p.Usage, true
	}
	if src := p.Message.Source(); src.Provider() != "" {
		c.provider, c.model = src.Provider(), src.Model()
	}
	how := callDone
	if p.Interrupted {
		how = callInterrupted
	}
	b.endCall(s, e.Time(), messages.LlmFailure{}, how)
}

// retry handles llm/retry: the failed attempt ends (one that failed without
// a chunk is an attempt of its own), and the step notes the retry.
func (b *Builder) retry(s *openStep, e session.Event) {
	d := e.Data()
	var f messages.LlmFailure
	if fj, ok := d.Field("failure"); ok {
		f, _ = messages.ParseLlmFailure(fj)
	}
	if s.call != nil || !s.lastFailed {
		b.callOf(s, e.Seq())
		b.endCall(s, e.Time(), f, callFailed)
	}
	attrs := make([]attribute.KeyValue, 0, 3)
	if n, ok := fieldInt(d, "retry"); ok {
		attrs = append(attrs, AttrRetry.Int64(n))
	}
	if n, ok := fieldInt(d, "delayMs"); ok {
		attrs = append(attrs, AttrRetryDelayMs.Int64(n))
	}
	if f.Code != "" {
		attrs = append(attrs, AttrRetryFailure.String(f.Code))
	}
	s.events = append(s.events, SpanEvent{Name: EventRetry, Time: ms(max(e.Time(), s.start)), Attrs: attrs})
}

func fieldInt(j messages.JSON, key string) (int64, bool) {
	v, ok := j.Field(key)
	if !ok {
		return 0, false
	}
	return v.AsInt()
}

func (b *Builder) toolResult(s *openStep, p session.ToolResult, t int64) {
	callID := ""
	if p.Message.NumBlocks() > 0 {
		callID = p.Message.Block(0).ToolCallID()
	}
	if callID == "" {
		callID = p.Message.Source().CallID()
	}
	i := slices.IndexFunc(s.tools, func(o openTool) bool { return o.callID == callID })
	if i < 0 {
		return
	}
	tc := s.tools[i]
	s.tools = slices.Delete(s.tools, i, i+1)
	b.emitTool(s, tc, t, p.Error, false)
}

// How a model call attempt ended.
type callEnd uint8

const (
	callDone        callEnd = iota // its assistant/message
	callInterrupted                // an interrupted assistant/message
	callFailed                     // an error finish or llm/retry
	callCut                        // its step (or turn) ended first
	callUnfinished                 // the log ended first
)

func (b *Builder) endCall(s *openStep, t int64, f messages.LlmFailure, how callEnd) {
	c := s.call
	if c == nil {
		return
	}
	s.call = nil
	s.lastFailed = how == callFailed
	tn := b.turn.turn
	sp := Span{
		TraceID: b.turn.traceID,
		SpanID:  ModelCallSpanID(b.id, tn, s.step, c.attempt),
		Parent:  s.spanID,
		Name:    NameModelCall,
		Kind:    trace.SpanKindClient,
		Start:   ms(c.start),
		End:     ms(max(t, c.start)),
		Seq:     c.seq,
	}
	s.childEnd = max(s.childEnd, t, c.start)
	if c.model != "" {
		sp.Name += " " + c.model
	}
	attrs := make([]attribute.KeyValue, 0, 16)
	attrs = append(attrs, AttrSession.String(string(b.id)), AttrTurn.Int64(tn), AttrStep.Int64(s.step),
		AttrAttempt.Int64(c.attempt), AttrOperation.String(operationChat), AttrChunks.Int64(c.chunks))
	if c.provider != "" {
		attrs = append(attrs, AttrProvider.String(c.provider))
	}
	if c.model != "" {
		attrs = append(attrs, AttrModel.String(c.model))
	}
	finish := string(c.finish)
	if finish == "" {
		finish = finishKindNoFinish
	}
	attrs = append(attrs, AttrFinishReasons.StringSlice([]string{finish}))
	if c.hasUsage {
		u := c.usage
		attrs = append(attrs, AttrInputTokens.Int64(u.InputTokens), AttrOutputTokens.Int64(u.OutputTokens))
		if v, ok := u.CacheReadTokens.Get(); ok {
			attrs = append(attrs, AttrCacheRead.Int64(v))
		}
		if v, ok := u.CacheWriteTokens.Get(); ok {
			attrs = append(attrs, AttrCacheWrite.Int64(v))
		}
		if v, ok := u.ReasoningTokens.Get(); ok {
			attrs = append(attrs, AttrReasoning.Int64(v))
		}
	}
	switch how {
	case callInterrupted:
		attrs = append(attrs, AttrInterrupted.Bool(true))
	case callFailed:
		sp.Status, sp.StatusMessage = codes.Error, f.Message
		if f.Code != "" {
			attrs = append(attrs, AttrErrorType.String(f.Code))
		}
	case callUnfinished:
		attrs = append(attrs, AttrUnfinished.Bool(true))
	}
	sp.Attrs = attrs
	if c.firstToken >= 0 {
		sp.Events = []SpanEvent{{Name: EventFirstToken, Time: ms(c.firstToken)}}
	}
	b.emit(sp)
}

func (b *Builder) emitTool(s *openStep, tc openTool, t int64, e session.ToolError, unfinished bool) {
	tn := b.turn.turn
	sp := Span{
		TraceID: b.turn.traceID,
		SpanID:  ToolCallSpanID(b.id, tn, s.step, tc.callID),
		Parent:  s.spanID,
		Name:    NameToolCall + " " + tc.name,
		Kind:    trace.SpanKindInternal,
		Start:   ms(tc.start),
		End:     ms(max(t, tc.start)),
		Seq:     tc.seq,
	}
	s.childEnd = max(s.childEnd, t, tc.start)
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, AttrSession.String(string(b.id)), AttrTurn.Int64(tn), AttrStep.Int64(s.step),
		AttrOperation.String(operationExecTool), AttrToolName.String(tc.name), AttrToolCallID.String(tc.callID))
	if e.Code != "" {
		sp.Status, sp.StatusMessage = codes.Error, e.Code
		attrs = append(attrs, AttrErrorType.String(e.Code))
	}
	if unfinished {
		attrs = append(attrs, AttrUnfinished.Bool(true))
	}
	sp.Attrs = attrs
	b.emit(sp)
}

// endStep ends the open step at t, with its open tool calls and model
// call (unfinished when the log ended, cut when the step ended first).
func (b *Builder) endStep(t int64, unfinished bool) {
	s := b.turn.step
	b.turn.step = nil
	for _, tc := range s.tools {
		b.emitTool(s, tc, t, session.ToolError{}, unfinished)
	}
	how := callCut
	if unfinished {
		how = callUnfinished
	}
	b.endCall(s, t, messages.LlmFailure{}, how)
	tn := b.turn.turn
	end := max(t, s.start, s.childEnd)
	b.turn.childEnd = max(b.turn.childEnd, end)
	sp := Span{
		TraceID: b.turn.traceID,
		SpanID:  s.spanID,
		Parent:  b.turn.spanID,
		Name:    NameStep,
		Kind:    trace.SpanKindInternal,
		Start:   ms(s.start),
		End:     ms(end),
		Events:  s.events,
		Seq:     s.seq,
	}
	sp.Attrs = []attribute.KeyValue{AttrSession.String(string(b.id)), AttrTurn.Int64(tn), AttrStep.Int64(s.step)}
	if unfinished {
		sp.Attrs = append(sp.Attrs, AttrUnfinished.Bool(true))
	}
	b.emit(sp)
}

// endTurn ends the open turn at t, with its open step: with reason r, or
// unfinished (r nil).
func (b *Builder) endTurn(t int64, r *session.TurnEndReason, unfinished bool) {
	tr := b.turn
	if tr.step != nil {
		b.endStep(t, unfinished)
	}
	b.turn = nil
	sp := Span{
		TraceID: tr.traceID,
		SpanID:  tr.spanID,
		Name:    NameTurn,
		Kind:    trace.SpanKindInternal,
		Start:   ms(tr.start),
		End:     ms(max(t, tr.start, tr.childEnd)),
		Seq:     tr.seq,
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, AttrSession.String(string(b.id)), AttrTurn.Int64(tr.turn))
	if r != nil {
		attrs = append(attrs, AttrEndReason.String(string(r.Kind)))
		switch r.Kind {
		case session.EndAborted:
			attrs = append(attrs, AttrCancelCause.String(string(r.Cause.Kind)))
		case session.EndError:
			sp.Status, sp.StatusMessage = codes.Error, r.Error.Message
			if r.Error.Code != "" {
				attrs = append(attrs, AttrErrorType.String(r.Error.Code))
			}
		}
	}
	if unfinished {
		attrs = append(attrs, AttrUnfinished.Bool(true))
	}
	sp.Attrs = attrs
	b.emit(sp)
}

// ms converts an event time (epoch milliseconds) to a time.Time.
func ms(t int64) time.Time { return time.UnixMilli(t).UTC() }
