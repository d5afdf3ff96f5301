package session

import (
	"fmt"
	"slices"

	"github.com/dshgo/dsh/messages"
)

// OpKind is the kind of a surface operation.
type OpKind uint8

// The surface operation kinds. OpNone marks a log-only event.
const (
	OpNone OpKind = iota
	OpAppend
	OpReplace
)

// SurfaceOp says how a surface event changes the surface
// (docs/session-log.md#the-surface):
// append its node at the tail, or replace the inclusive positional range
// [Start, End] of current nodes with it. The zero SurfaceOp is "none".
type SurfaceOp struct {
	kind       OpKind
	start, end int64
}

// AppendOp is the surface operation that appends a node.
func AppendOp() SurfaceOp { return SurfaceOp{kind: OpAppend} }

// ReplaceOp is the surface operation that replaces the current nodes from
// start to end (seqs, inclusive, by position on the surface).
func ReplaceOp(start, end int64) SurfaceOp { return SurfaceOp{kind: OpReplace, start: start, end: end} }

// Kind returns the operation kind.
func (o SurfaceOp) Kind() OpKind { return o.kind }

// Range returns the replaced range of a replace operation.
func (o SurfaceOp) Range() (start, end int64) { return o.start, o.end }

// JSON returns the operation in the envelope's shape ("append" or
// {op:"replace",start,end}); zero for OpNone.
func (o SurfaceOp) JSON() messages.JSON {
	switch o.kind {
	case OpAppend:
		return opAppendJSON
	case OpReplace:
		var b messages.ObjectBuilder
		return b.String("op", "replace").Int("start", o.start).Int("end", o.end).Build()
	}
	return messages.JSON{}
}

var opAppendJSON = messages.JSONString("append")

// parseSurfaceOp reads the envelope's surfaceOp value: the string "append"
// or an object with exactly the keys op ("replace"), start and end
// (non-negative integers).
func parseSurfaceOp(j messages.JSON) (SurfaceOp, error) {
	if s, ok := j.AsString(); ok {
		if s == "append" {
			return AppendOp(), nil
		}
		return SurfaceOp{}, fmt.Errorf("surfaceOp %q is not append or a replace object", s)
	}
	if j.Kind() != messages.KindObject {
		return SurfaceOp{}, fmt.Errorf("surfaceOp is not append or a replace object")
	}
	keys := j.Keys()
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"end", "op", "start"}) {
		return SurfaceOp{}, fmt.Errorf("surfaceOp replace must have exactly the keys op, start, end")
	}
	op, _ := j.Field("op")
	if s, _ := op.AsString(); s != "replace" {
		return SurfaceOp{}, fmt.Errorf("surfaceOp op %s is not \"replace\"", op)
	}
	sj, _ := j.Field("start")
	ej, _ := j.Field("end")
	start, ok1 := sj.AsInt()
	end, ok2 := ej.AsInt()
	if !ok1 || !ok2 || start < 0 || end < 0 {
		return SurfaceOp{}, fmt.Errorf("surfaceOp replace bounds must be non-negative integers")
	}
	return ReplaceOp(start, end), nil
}

// Event is one immutable, committed entry of a session log. It is read
// through getters; the typed view of a core event's data is decoded once,
// when the event is built. Safe for concurrent use.
//
// Events are most of a session's memory, so an Event is kept small (64
// bytes): the type is a code into the catalog, the flags share one byte,
// and what few events carry (a replace range, sourceEventSeqs, the name of
// a type outside the catalog) sits out of line in ext, shared by every
// copy and never modified once the event is built.
type Event struct {
	seq     int64
	time    int64
	data    messages.JSON
	payload payload   // typed view of data for core types; nil for foreign events
	ext     *eventExt // nil unless the event carries one of its fields
	typ     typeCode
	flags   eventFlags
}

// eventExt holds the fields of an Event that few events carry.
type eventExt struct {
	name       EventType // the type's name when it has no code (typeOther)
	start, end int64     // the range of a replace operation
	sources    []int64   // sourceEventSeqs; never modified after construction
	// A run of consecutive seqs (an assistant message citing its stream)
	// is kept as its first seq and length instead (compact.go).
	srcFirst, srcLen int64
}

// eventFlags are an Event's small fields, as bits.
type eventFlags uint8

const (
	flagOpAppend   eventFlags = 1 << iota // surfaceOp "append"
	flagOpReplace                         // surfaceOp replace; its range in ext
	flagHasSources                        // the event carries sourceEventSeqs (in ext; empty when ext has none)
	flagIgnorable
	flagChunkText       // data holds a chunk's text literal only (compact.go)
	flagDataFromPayload // data is not kept but encoded from the payload (compact.go)
)

// flagsEnvelope are the flags that stand for envelope fields.
const flagsEnvelope = flagOpAppend | flagOpReplace | flagHasSources | flagIgnorable

// chunkStep is the payload the log keeps for an assistant/chunk event.
// Chunks are most of a log, so their typed view is not kept (it would
// double their memory): only the turn and step, which the core needs on
// every chunk, and which every chunk of a step shares (the log hands the
// same pointer to all of them); Payload decodes the rest from data on
// demand. A chunk that keeps only its text (compact.go) has its type and
// index here too, with the three integers' literals for the row packer.
type chunkStep struct {
	turn, step int64
	kind       messages.ChunkType // set when the chunks sharing it keep their text only
	index      int64
	lits       *chunkLits // the literals of turn, step and index; nil unless kind is set
}

// chunkLits are the integers of a chunkStep as JSON text.
type chunkLits struct{ turn, step, index string }

func (*chunkStep) eventType() EventType { return TypeAssistantChunk }

// chunkMarker stands in for the payload of a chunk draft built by
// AssistantChunk.Draft, whose op holds the chunk's turn and step and
// whose data is the chunk's JSON, not the event's (chunkEventData builds
// that, Draft.Data among others); the log turns it into a *chunkStep,
// keeping only a delta's text where it can (Log.build). A zero-size
// marker boxes without allocating.
type chunkMarker struct{}

func (chunkMarker) eventType() EventType { return TypeAssistantChunk }

// newEvent returns an event of type t with no surface metadata.
func newEvent(t EventType, seq, time int64, data messages.JSON) Event {
	e := Event{seq: seq, time: time, data: data, typ: codeOf(t)}
	if e.typ == typeOther {
		e.ext = &eventExt{name: t}
	}
	return e
}

// ext returns a copy of e's ext (a new one when it has none), for a
// constructor to change: an ext may already be shared with another copy
// of the event.
func (e *Event) extCopy() *eventExt {
	if e.ext == nil {
		return &eventExt{}
	}
	x := *e.ext
	return &x
}

// setOp sets e's surface operation. A construction step: e must not be
// shared yet.
func (e *Event) setOp(op SurfaceOp) {
	e.flags &^= flagOpAppend | flagOpReplace
	switch op.kind {
	case OpAppend:
		e.flags |= flagOpAppend
	case OpReplace:
		x := e.extCopy()
		x.start, x.end = op.start, op.end
		e.ext = x
		e.flags |= flagOpReplace
	}
}

// setSources sets e's sourceEventSeqs to seqs (retained; the caller must
// not modify it) when has is set. A construction step.
func (e *Event) setSources(seqs []int64, has bool) {
	if !has {
		return
	}
	e.flags |= flagHasSources
	if len(seqs) > 0 {
		x := e.extCopy()
		x.sources = seqs
		e.ext = x
	}
}

// setIgnorable marks e ignorable when ign is set. A construction step.
func (e *Event) setIgnorable(ign bool) {
	if ign {
		e.flags |= flagIgnorable
	}
}

// opKind returns the kind of e's surface operation.
func (e *Event) opKind() OpKind {
	switch {
	case e.flags&flagOpAppend != 0:
		return OpAppend
	case e.flags&flagOpReplace != 0:
		return OpReplace
	}
	return OpNone
}

// hasSources reports whether e carries sourceEventSeqs.
func (e *Event) hasSources() bool { return e.flags&flagHasSources != 0 }

// sources returns e's sourceEventSeqs, not copied (but built when the
// event keeps them as a run): the caller must not modify them.
func (e *Event) sources() []int64 {
	if e.ext == nil {
		return nil
	}
	if e.ext.srcLen > 0 {
		out := make([]int64, e.ext.srcLen)
		for i := range out {
			out[i] = e.ext.srcFirst + int64(i)
		}
		return out
	}
	return e.ext.sources
}

// sourcesOrNil returns x's listed sources; nil for a nil x.
func (x *eventExt) sourcesOrNil() []int64 {
	if x == nil {
		return nil
	}
	return x.sources
}

// numSources returns len(e.sources()), without building them.
func (e *Event) numSources() int {
	if e.ext == nil {
		return 0
	}
	return len(e.ext.sources) + int(e.ext.srcLen)
}

// setPayload installs p as e's typed view (see chunkStep).
func (e *Event) setPayload(p payload) {
	// A chunk carrying surface metadata (invalid: the log refuses it) keeps
	// its boxed payload, so the refusal can say why.
	if c, ok := p.(AssistantChunk); ok && e.opKind() == OpNone {
		e.payload = &chunkStep{turn: c.Turn, step: c.Step}
		return
	}
	e.payload = p
}

// Compile-time shape guard: adding a field to Event breaks this line until
// the codec (codec.go), the draft path (Log.Append) and Equal are updated.
var _ = Event(struct {
	seq     int64
	time    int64
	data    messages.JSON
	payload payload
	ext     *eventExt
	typ     typeCode
	flags   eventFlags
}{})

// Type returns the event type.
func (e Event) Type() EventType {
	if e.typ == typeOther {
		return e.ext.name
	}
	return typeNames[e.typ]
}

// Seq returns the event's position in its log (contiguous from 0).
func (e Event) Seq() int64 { return e.seq }

// Time returns the wall-clock time of the append in epoch milliseconds. It
// is not monotonic.
func (e Event) Time() int64 { return e.time }

// Data returns the event's data.
func (e Event) Data() messages.JSON { return e.fullData() }

// DataLen returns the length of the event's data in bytes, without
// building it when the log keeps it compact.
func (e Event) DataLen() int { return e.dataLen() }

// SurfaceOp returns the surface operation (OpNone for log-only events).
func (e Event) SurfaceOp() SurfaceOp {
	switch e.opKind() {
	case OpAppend:
		return AppendOp()
	case OpReplace:
		return ReplaceOp(e.ext.start, e.ext.end)
	}
	return SurfaceOp{}
}

// SourceEventSeqs returns a copy of the cited seqs, and whether the event
// carries the field at all (absent means "provenance unknown"; an empty
// list on an assistant message means a known-empty stream).
func (e Event) SourceEventSeqs() ([]int64, bool) {
	if e.ext != nil && e.ext.srcLen > 0 {
		return e.sources(), e.hasSources() // built, so the caller's already
	}
	return slices.Clone(e.sources()), e.hasSources()
}

// Ignorable reports whether the event carries ignorable: true.
func (e Event) Ignorable() bool { return e.flags&flagIgnorable != 0 }

// IsZero reports whether e is the zero Event.
func (e Event) IsZero() bool { return e.typ == typeNone }

// Message returns the message of a surface event (user/message data,
// assistant/message and tool/result data.message), or of nothing else.
func (e Event) Message() (messages.Message, bool) {
	switch p := e.payload.(type) {
	case UserMessage:
		return p.Message, true
	case AssistantMessage:
		return p.Message, true
	case ToolResult:
		return p.Message, true
	}
	return messages.Message{}, false
}

// Payload returns the typed view of a core event's data: one of TurnStart,
// TurnEnd, StepStart, StepEnd, UserMessage, AssistantChunk,
// AssistantMessage, ToolCall, ToolResult, RequestHeader, RequestContext,
// InboxSpliced, EndSeed, TodoWrite, or an unexported marker value for the
// core types whose data the log core does not interpret (llm/retry*,
// compaction/*: read Data). It returns nil for foreign events.
//
// The payload of an assistant/chunk is decoded from data on each call (the
// log does not keep it; see chunkStep).
func (e Event) Payload() any {
	if _, ok := e.payload.(*chunkStep); ok {
		p, err := decodePayload(TypeAssistantChunk, e.fullData())
		if err != nil {
			return nil // unreachable: the data was decoded at commit
		}
		return p
	}
	return e.payload
}

// TurnStep returns the turn and step an event names, when its data has
// them.
func (e Event) TurnStep() (turn, step int64, ok bool) {
	switch p := e.payload.(type) {
	case StepStart:
		return p.Turn, p.Step, true
	case StepEnd:
		return p.Turn, p.Step, true
	case *chunkStep:
		return p.turn, p.step, true
	case AssistantChunk:
		return p.Turn, p.Step, true
	case AssistantMessage:
		return p.Turn, p.Step, true
	case ToolCall:
		return p.Turn, p.Step, true
	case ToolResult:
		return p.Turn, p.Step, true
	}
	return 0, 0, false
}

// Equal reports whether two events have the same envelope and JSON-equal
// data.
func (e Event) Equal(o Event) bool {
	return e.Type() == o.Type() && e.seq == o.seq && e.time == o.time && e.SurfaceOp() == o.SurfaceOp() &&
		e.hasSources() == o.hasSources() && slices.Equal(e.sources(), o.sources()) &&
		e.Ignorable() == o.Ignorable() && e.fullData().Equal(o.fullData())
}

// Draft is an event not yet appended: its type, data and surface metadata.
// The log assigns seq and time at append, and decodes and checks the data
// of a core type then, however the draft was built. Build drafts with the
// typed constructors (TurnStart{Turn: 1}.Draft(), ...) or NewDraft for any
// type. Drafts are values; a Draft's slices are copied at construction.
type Draft struct {
	typ        EventType
	data       messages.JSON
	op         SurfaceOp
	sources    []int64
	hasSources bool
	ignorable  bool
	// payload is the typed value a typed constructor encoded data from, so
	// the log need not decode its own encoding again; it is checked with
	// checkPayload instead. Nil for NewDraft: the data is decoded.
	payload payload
}

// NewDraft returns a draft of type t carrying data. The data of a core type
// is decoded and checked at append.
func NewDraft(t EventType, data messages.JSON) Draft { return Draft{typ: t, data: data} }

// WithSurface returns d with a surface operation.
func (d Draft) WithSurface(op SurfaceOp) Draft {
	if d.isChunkMarker() {
		// The op held the chunk's turn and step (AssistantChunk.Draft):
		// the log decodes the event's data instead.
		d.data, d.payload = d.Data(), nil
	}
	d.op = op
	return d
}

// isChunkMarker reports whether d was built by AssistantChunk.Draft: its
// data is the chunk's, its op holds turn and step (see chunkMarker).
func (d Draft) isChunkMarker() bool {
	_, ok := d.payload.(chunkMarker)
	return ok
}

// WithSources returns d citing the given earlier seqs (copied). A nil slice
// still sets the field (as an empty list).
func (d Draft) WithSources(seqs []int64) Draft {
	d.sources = slices.Clone(seqs)
	d.hasSources = true
	return d
}

// AsIgnorable returns d marked ignorable: true.
func (d Draft) AsIgnorable() Draft {
	d.ignorable = true
	return d
}

// Type returns the draft's event type.
func (d Draft) Type() EventType { return d.typ }

// Data returns the draft's data.
func (d Draft) Data() messages.JSON {
	if d.isChunkMarker() {
		return chunkEventData(d.op.start, d.op.end, d.data)
	}
	return d.data
}

// event returns d as an event at seq and time, without its payload (the
// log sets it). The event shares d's sources, which nothing modifies (the
// draft copied them).
func (d Draft) event(seq, time int64) Event {
	e := newEvent(d.typ, seq, time, d.Data())
	e.setOp(d.op)
	e.setSources(d.sources, d.hasSources)
	e.setIgnorable(d.ignorable)
	return e
}
