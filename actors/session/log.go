package session

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/dshgo/dsh/internal/invariants"
	"github.com/dshgo/dsh/messages"
)

// ErrInvalid marks every refusal of an event by the log: a bad envelope,
// bad data, a surface rule, a legacy or unknown type. Use errors.Is.
var ErrInvalid = errors.New("session: invalid event")

// ErrTooLarge marks an event refused because its record would be longer
// than a reader accepts (DefaultMaxRecordBytes): written, it would make
// the log unreadable. An error matching it also matches ErrInvalid. Use
// errors.Is.
var ErrTooLarge = errors.New("session: event too large")

// TooLargeError is the rule an event too large to record broke; it comes
// wrapped in an *EventError (or, from CheckMessageSize, in an error naming
// the message). errors.Is(err, ErrTooLarge) holds for it.
type TooLargeError struct {
	// Size is the length in bytes of the event's record (its storage
	// line, without the newline); Limit the most a record may have.
	Size, Limit int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("its record of %d bytes is longer than the limit of %d bytes on one record", e.Size, e.Limit)
}

// Is makes every TooLargeError match ErrTooLarge, and ErrInvalid, which
// marks every refusal of an event.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge || target == ErrInvalid }

// checkRecordSize refuses e when its verbatim record (AppendEvent) would
// be longer than DefaultMaxRecordBytes, the longest line the reader
// accepts. The bound below is cheap (lengths only) and only an event near
// the limit is encoded to measure it exactly.
func checkRecordSize(e *Event) error {
	bound := e.dataLen() + 6*len(e.Type()) + 21*e.numSources() + 256
	if bound <= DefaultMaxRecordBytes {
		return nil
	}
	if n := len(AppendEvent(nil, *e)); n > DefaultMaxRecordBytes {
		return &TooLargeError{Size: n, Limit: DefaultMaxRecordBytes}
	}
	return nil
}

// CheckMessageSize refuses m, a message sent to a session (a followup,
// steering, an injection), when a record holding it would be longer than
// DefaultMaxRecordBytes: Append would refuse it, so a surface says so at
// once instead of queueing what cannot be recorded. The measure is the
// largest record a sent message takes, its inbox splice (the user message
// a turn later records holds less around it). The error wraps a
// *TooLargeError (errors.Is ErrTooLarge and ErrInvalid) and names the
// message.
func CheckMessageSize(m messages.Message) error {
	if m.JSON().Len()+512 <= DefaultMaxRecordBytes {
		return nil
	}
	d := NewInboxSpliced("next-turn", maxSafe, messages.OptInt{}, []messages.Message{m}, "").Draft()
	if err := CheckDraftSize(d); err != nil {
		return fmt.Errorf("session: message %s is too large: %w", m.ID(), err)
	}
	return nil
}

// CheckDraftSize returns a *TooLargeError (errors.Is ErrTooLarge) when the
// record of d, appended at any seq and time, would be longer than
// DefaultMaxRecordBytes, so that Append would refuse it: a caller that
// builds an event from outside input (a tool's output, a model's message)
// checks it before it asks for the append. Cheap unless d is near the
// limit.
func CheckDraftSize(d Draft) error {
	if d.isChunkMarker() && chunkEventDataLen(d.op.start, d.op.end, d.data)+6*len(d.typ)+21*len(d.sources)+256 <= DefaultMaxRecordBytes {
		return nil // checkRecordSize's bound, without building the data (a streamed chunk)
	}
	// The longest seq and time a record can carry, so the measure holds
	// wherever d lands.
	e := d.event(maxSafe, -maxSafe)
	return checkRecordSize(&e)
}

// EventError is a refused event: its seq (where it would have been
// committed, or where it sits in a seed), its type and the rule it broke.
// errors.Is(err, ErrInvalid) holds for it.
type EventError struct {
	Seq  int64
	Type EventType
	Err  error
}

func (e *EventError) Error() string {
	return fmt.Sprintf("session: event %q at seq %d: %v", e.Type, e.Seq, e.Err)
}

func (e *EventError) Unwrap() error { return e.Err }

// Is makes every EventError match ErrInvalid.
func (e *EventError) Is(target error) bool { return target == ErrInvalid }

// UnsupportedTypeError reports an event type this reader does not know and
// that is not marked ignorable: the whole log is unreadable.
type UnsupportedTypeError struct {
	Seq  int64
	Type EventType
}

func (e *UnsupportedTypeError) Error() string {
	return fmt.Sprintf("session: unknown event type %q at seq %d (not marked ignorable)", e.Type, e.Seq)
}

// Is makes every UnsupportedTypeError match ErrInvalid, which marks every
// refusal of an event, an unknown type included.
func (e *UnsupportedTypeError) Is(target error) bool { return target == ErrInvalid }

// Log is one session's append-only event log and everything folded from
// it: the surface, the derived messages, the request header and context.
// It is the pure core of the session actor: no goroutines, no clock, no
// I/O. Time comes in as an argument.
//
// A Log is not safe for concurrent use: it has one owner (the session
// actor). What it hands out (Events, Messages, Event values) is immutable
// and may be shared freely.
type Log struct {
	header       Header
	events       eventPages    // appended in place; views are clipped
	chunkStep    [2]*chunkStep // the last chunk payloads handed out, without and with a shape (chunkStepOf)
	surface      surface
	derived      deriveCache
	lastHeader   int // index of the last request/header, -1 if none
	lastContext  int // index of the last request/context, -1 if none
	firstLiveSeq int64
	trace        *traceChecker // nil unless invariants are enabled
	obs          observerSet
}

// New returns an empty log for a fresh session (no seed, so no
// session/end-seed).
func New(h Header) (*Log, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	l := &Log{header: h, lastHeader: -1, lastContext: -1}
	if invariants.Enabled {
		l.trace = newTraceChecker()
	}
	return l, nil
}

// NewSeeded returns a log seeded with events (a resume, or a fork's
// prefix). Every seed event is validated in order; when the last seeded
// event is not session/end-seed, one is appended at time now (an empty
// seed gets one too, at seq 0). FirstLiveSeq is the seed's length. The seed
// slice is not retained.
func NewSeeded(h Header, seed []Event, now int64) (*Log, error) {
	l, err := Restore(h, seed)
	if err != nil {
		return nil, err
	}
	if len(seed) == 0 || seed[len(seed)-1].Type() != TypeEndSeed {
		if _, err := l.Append(EndSeed{}.Draft(), now); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// AdoptSeeded is NewSeeded taking the seed over, as Adopt does: the log
// keeps the seed's array as its pages, and the caller must not use the
// slice afterwards. A host resuming a session hands over what its store
// loaded this way.
func AdoptSeeded(h Header, seed []Event, now int64) (*Log, error) {
	l, err := Adopt(h, seed)
	if err != nil {
		return nil, err
	}
	if n := l.events.len(); n == 0 || l.events.at(n-1).Type() != TypeEndSeed {
		if _, err := l.Append(EndSeed{}.Draft(), now); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Adopt is Restore taking events over instead of copying them: each event
// is admitted where it lies, as Validate does, and the slice's array
// becomes the log's pages (pagesOver). The caller must not use events, nor
// any slice sharing its array, afterwards; on error the log is not made
// and the events may have been completed in place (their typed payloads
// decoded), which changes nothing they hold. Restore copies every event
// once more, into pages of its own: a loaded log of 200,000 events paid
// 1,600 page allocations and the copy on top of the load (about 7% of a
// cold load, docs/performance.md#targets).
func Adopt(h Header, events []Event) (*Log, error) {
	l, err := New(h)
	if err != nil {
		return nil, err
	}
	for i := range events {
		e := &events[i]
		if err := seedSeqError(i, e); err != nil {
			return nil, err
		}
		t, err := l.admit(e, eventsOver(events[:i]))
		if err != nil {
			return nil, err
		}
		l.compact(e, false)
		l.record(t, e, i)
	}
	l.events = pagesOver(events)
	l.firstLiveSeq = int64(len(events))
	return l, nil
}

// Restore rebuilds a log from stored events exactly as they are, appending
// nothing (a loaded file, an inspection). The checks are those of a seed:
// contiguous seqs from 0, known or ignorable types, the surface rules, the
// typed shapes of core events. The slice is not retained.
func Restore(h Header, events []Event) (*Log, error) {
	l, err := New(h)
	if err != nil {
		return nil, err
	}
	// Each event is copied once, into the log's pages, and then admitted
	// where it lies: at step i the log so far is its first i events and
	// the event the one just stored, which is what commit would have
	// appended. On error the log is dropped, so an event admitted in place
	// (its payload decoded) has nowhere to leak to.
	for i := range events {
		if err := seedSeqError(i, &events[i]); err != nil {
			return nil, err
		}
		e := l.events.push(events[i])
		t, err := l.admit(e, l.events.view(0, i))
		if err != nil {
			return nil, err
		}
		l.compact(e, false)
		l.record(t, e, i)
	}
	l.firstLiveSeq = int64(len(events))
	return l, nil
}

// seedSeqError refuses seed event e at index i unless its seq is i: a
// seed (Restore, Adopt, Validate) is contiguous from 0.
func seedSeqError(i int, e *Event) error {
	if e.seq == int64(i) {
		return nil
	}
	return &EventError{Seq: int64(i), Type: e.Type(), Err: fmt.Errorf("seed must be contiguous from 0 (found seq %d)", e.seq)}
}

// Validate checks events as Restore does, with the same error for the
// same events, without building a log: a store that only checks what it
// read before handing it on (the caller restores it) pays neither the
// copy of every event into a log's pages nor the log. The slice is only
// read.
func Validate(h Header, events []Event) error {
	l, err := New(h)
	if err != nil {
		return err
	}
	// The events before the one admitted are the log so far: the rules
	// read only their type and data, which admitting does not change.
	for i := range events {
		if err := seedSeqError(i, &events[i]); err != nil {
			return err
		}
		e := events[i] // admit may complete its copy
		t, err := l.admit(&e, eventsOver(events[:i]))
		if err != nil {
			return err
		}
		l.record(t, &e, i)
	}
	return nil
}

// Append validates d and commits it as the next event, stamped with seq =
// Len() and time now (epoch ms). On any error the log is unchanged. The
// returned Event is the committed value.
//
// Unlike the reference
// (docs/session-log.md#where-dsh-differs-from-the-reference), dsh refuses
// an unknown, non-ignorable type on append too: everything in a log must
// be readable back.
func (l *Log) Append(d Draft, now int64) (Event, error) {
	if l.obs.publishing {
		return Event{}, ErrReentrantAppend
	}
	e, err := l.build(d, now)
	if err != nil {
		return Event{}, err
	}
	if err := l.commit(e, d.payload != nil); err != nil {
		return Event{}, err
	}
	l.publish(l.EventsFrom(e.seq))
	return *l.events.at(int(e.seq)), nil
}

// Mirror commits e, an event another log already committed (its copy in a
// reader that follows the session, such as the agent's view of its log),
// as this log's next event: the seq must be Len() and every rule is
// checked as for Append, but the event keeps its data, time and typed
// payload (nothing is decoded again). Observers see it after commit. On
// error the log is unchanged.
func (l *Log) Mirror(e Event) error {
	if l.obs.publishing {
		return ErrReentrantAppend
	}
	if n := l.events.len(); e.seq != int64(n) {
		return &EventError{Seq: e.seq, Type: e.Type(), Err: fmt.Errorf("mirrored event has seq %d, want %d", e.seq, n)}
	}
	if err := l.commit(e, false); err != nil {
		return err
	}
	l.publish(l.EventsFrom(e.seq))
	return nil
}

// MirrorAt is Mirror(v.At(i)) without the copy: when v is a view of the
// log this one follows (a session's EventsCommitted or AppendReply), whose
// pages already hold this log's events so far, the log adopts those pages
// up to the event instead of storing a copy of it (see eventPages.adopt).
// The agent's mirror of its session then keeps no events of its own: it
// shares the session's, which are immutable once committed. The event is
// checked as Mirror checks it; a view that cannot be shared (another
// log's, or a copy) is mirrored as Mirror does.
func (l *Log) MirrorAt(v Events, i int) error {
	e := v.at(i)
	if l.obs.publishing {
		return ErrReentrantAppend
	}
	n := l.events.len()
	if e.seq != int64(n) {
		return &EventError{Seq: e.seq, Type: e.Type(), Err: fmt.Errorf("mirrored event has seq %d, want %d", e.seq, n)}
	}
	c := *e // admit may complete its copy, never the shared event
	t, err := l.admit(&c, l.events.view(0, n))
	if err != nil {
		return err
	}
	if !l.events.adopt(v, i, n) {
		l.compact(&c, false)
		l.record(t, l.events.push(c), n)
	} else {
		l.record(t, l.events.at(n), n)
	}
	l.publish(l.EventsFrom(e.seq))
	return nil
}

// build stamps a draft as the next event and gives it its typed payload.
//
// A draft from a typed constructor (TurnStart{}.Draft(), ...) keeps the
// value its data was encoded from, checked by checkPayload with the rules
// decodePayload applies to data (a message's role, a tool result answering
// its own call, a model source, the closed vocabularies); the constructor
// already made it canonical (a header whose empty tool list reads as none).
// A draft of a core type built from data alone (NewDraft) is decoded,
// which checks it and yields the canonical payload. Either way the
// typed value is never trusted unchecked.
func (l *Log) build(d Draft, now int64) (Event, error) {
	if d.isChunkMarker() {
		return l.buildChunk(d, now), nil
	}
	e := d.event(int64(l.events.len()), now)
	if e.data.IsZero() {
		return Event{}, &EventError{Seq: e.seq, Type: d.typ, Err: fmt.Errorf("event carries no data")}
	}
	switch {
	case d.payload != nil:
		// A typed draft: its data was encoded from the payload, so the two
		// agree by construction; check the typed value instead of decoding
		// the encoding again (the append hot path: a chunk decode costs
		// about 25 times the check).
		if err := checkPayload(d.payload); err != nil {
			return Event{}, &EventError{Seq: e.seq, Type: d.typ, Err: err}
		}
		e.setPayload(d.payload)
	case d.typ.IsCore():
		p, err := decodePayload(d.typ, e.data)
		if err != nil {
			return Event{}, &EventError{Seq: e.seq, Type: d.typ, Err: err}
		}
		e.setPayload(p)
	}
	return e, nil
}

// buildChunk is build for a draft of AssistantChunk.Draft, whose data is
// the chunk's and whose op holds its turn and step (chunkMarker): a text
// or reasoning delta in the form that draft writes becomes the event
// compact already (its text's literal, see compact), without the event's
// data being built to be cut up again; any other chunk gets that data.
func (l *Log) buildChunk(d Draft, now int64) Event {
	turn, step := d.op.start, d.op.end
	kind, index, lit, ok := chunkBodyTextForm(d.data.String())
	if !ok {
		e := newEvent(d.typ, int64(l.events.len()), now, chunkEventData(turn, step, d.data))
		e.setSources(d.sources, d.hasSources)
		e.setIgnorable(d.ignorable)
		e.payload = l.chunkStepOf(chunkStep{turn: turn, step: step})
		return e
	}
	e := newEvent(d.typ, int64(l.events.len()), now, chunkTextLiteral(lit, d.data))
	e.setSources(d.sources, d.hasSources)
	e.setIgnorable(d.ignorable)
	e.payload = l.chunkStepOf(chunkStep{turn: turn, step: step, kind: kind, index: index})
	e.flags |= flagChunkText
	return e
}

// commit validates e as the next event and, if valid, applies it. Nothing
// changes on error. typed says that e's payload is the typed value of a
// draft, which its data was encoded from.
func (l *Log) commit(e Event, typed bool) error {
	n := l.events.len()
	t, err := l.admit(&e, l.events.view(0, n))
	if err != nil {
		return err
	}
	l.compact(&e, typed)
	l.record(t, l.events.push(e), n)
	return nil
}

// chunkStepOf returns the shared payload for chunks of c's turn, step and
// shape: the last chunk's when it is the same, so that the chunks of a
// step share one.
func (l *Log) chunkStepOf(c chunkStep) *chunkStep {
	last := &l.chunkStep[0] // a chunk on its way to compact (or not compact)
	if c.kind != "" {
		last = &l.chunkStep[1]
	}
	if p := *last; p != nil && p.turn == c.turn && p.step == c.step && p.kind == c.kind && p.index == c.index {
		return p
	}
	p := new(chunkStep) // not &c: c would escape, and cost every call an allocation
	*p = c
	if c.kind != "" {
		p.lits = &chunkLits{turn: strconv.FormatInt(c.turn, 10), step: strconv.FormatInt(c.step, 10),
			index: strconv.FormatInt(c.index, 10)}
	}
	*last = p
	return p
}

// admit validates e as the next event of the log, whose events so far are
// prior (the log's own, or the prefix of what Restore is building): every
// rule commit enforces, without changing the log. It may complete e
// itself (the typed payload of a seed event built without one).
func (l *Log) admit(e *Event, prior Events) (transition, error) {
	typ := e.Type()
	fail := func(err error) (transition, error) {
		return transition{}, &EventError{Seq: e.seq, Type: typ, Err: err}
	}
	class := typ.class()
	switch {
	case typ == "":
		return fail(fmt.Errorf("event has no type"))
	case class&classRowTag != 0 && !e.Ignorable():
		// An ignorable event may carry a row tag as its type: the SQLite
		// format stores it as a scalar row, and only JSONL cannot hold it
		// (CheckJSONL).
		return fail(fmt.Errorf("event type %q is reserved for packed chunk rows", typ))
	case class&classLegacy != 0:
		return fail(fmt.Errorf("event type %q was removed from the format", typ))
	case class&classKnown == 0 && !e.Ignorable():
		return transition{}, &UnsupportedTypeError{Seq: e.seq, Type: typ}
	case e.dataForm() == dataVerbatim && e.data.IsZero():
		return fail(fmt.Errorf("event carries no data"))
	case e.time < -maxSafe || e.time > maxSafe:
		return fail(fmt.Errorf("time %d is not a safe integer", e.time))
	}
	if err := checkRecordSize(e); err != nil {
		return fail(err)
	}
	if e.payload == nil && class&classCore != 0 {
		// A seed event built outside a log (hand-made, or by a decoder
		// that leaves the payload to the log) gets the seed's shape checks
		// here; an event taken from another log keeps its payload.
		p, err := decodePayload(typ, e.data)
		if err != nil {
			return fail(err)
		}
		e.setPayload(p)
	}
	if c, ok := e.payload.(*chunkStep); ok {
		e.payload = l.chunkStepOf(*c) // one per step, not per chunk
	}
	t, err := l.surface.validateNext(prior, e)
	if err != nil {
		return fail(err)
	}
	if l.trace != nil {
		if err := l.trace.Check(e); err != nil {
			return fail(err)
		}
	}
	return t, nil
}

// record applies an admitted event e, stored at index i of the log's
// events, to everything folded from them. The caller stores it.
func (l *Log) record(t transition, e *Event, i int) {
	l.surface.apply(t, e.seq)
	switch e.Type() {
	case TypeRequestHeader:
		l.lastHeader = i
	case TypeRequestContext:
		l.lastContext = i
	}
	if l.trace != nil {
		l.trace.Commit(e)
	}
}

// Header returns the session header.
func (l *Log) Header() Header { return l.header }

// ID returns the session id.
func (l *Log) ID() SessionID { return l.header.ID }

// Len returns the number of events, which is also the next seq.
func (l *Log) Len() int64 { return int64(l.events.len()) }

// FirstLiveSeq returns the length of the seed the log was built from (0
// for a fresh log).
func (l *Log) FirstLiveSeq() int64 { return l.firstLiveSeq }

// Event returns the event at seq.
func (l *Log) Event(seq int64) (Event, bool) {
	if seq < 0 || seq >= int64(l.events.len()) {
		return Event{}, false
	}
	return *l.events.at(int(seq)), true
}

// Last returns the last event, if any.
func (l *Log) Last() (Event, bool) { return l.Event(l.Len() - 1) }

// Events returns an immutable view of every event so far. It is O(1) and
// never grows: later appends are invisible through it.
func (l *Log) Events() Events {
	return l.events.view(0, l.events.len())
}

// EventsFrom returns the view of the events from seq on (empty past the
// end).
func (l *Log) EventsFrom(seq int64) Events {
	n := l.events.len()
	seq = min(max(seq, 0), int64(n))
	return l.events.view(int(seq), n)
}

// DeriveMessages returns the model-visible history: the surface projected
// to messages (docs/session-log.md#deriving-messages). Amortised O(new
// surface nodes) per call; the returned view is O(1) to hand out.
func (l *Log) DeriveMessages() Messages { return l.derived.derive(l.Events(), &l.surface) }

// SurfaceNodes returns a copy of the current surface (seqs in surface
// order), owned by the caller.
func (l *Log) SurfaceNodes() []int64 { return slices.Clone(l.surface.nodes) }

// RequestHeader returns the folded request header: the canonical form of
// the last request/header (headers are full snapshots, not deltas).
func (l *Log) RequestHeader() (EpochHeader, bool) {
	if l.lastHeader < 0 {
		return EpochHeader{}, false
	}
	return l.events.at(l.lastHeader).payload.(RequestHeader).Header, true
}

// RequestContext returns the last logged request context.
func (l *Log) RequestContext() (RequestContext, bool) {
	if l.lastContext < 0 {
		return RequestContext{}, false
	}
	return l.events.at(l.lastContext).payload.(RequestContext), true
}

// OpenTurn reports the turn (and step, 0 if none) left open at the end of
// the log.
func (l *Log) OpenTurn() (turn, step int64, open bool) { return openTurn(l.Events()) }

// Turns returns the number of turns started in the log.
func (l *Log) Turns() int64 {
	var n int64
	for i := range l.events.len() {
		if l.events.at(i).Type() == TypeTurnStart {
			n++
		}
	}
	return n
}

func openTurn(events Events) (turn, step int64, open bool) {
	for i := events.Len() - 1; i >= 0; i-- {
		switch p := events.at(i).payload.(type) {
		case TurnEnd:
			return 0, 0, false
		case TurnStart:
			turn, open = p.Turn, true
			for j := i + 1; j < events.Len(); j++ {
				switch q := events.at(j).payload.(type) {
				case StepStart:
					step = q.Step
				case StepEnd:
					step = 0
				}
			}
			return turn, step, open
		}
	}
	return 0, 0, false
}
