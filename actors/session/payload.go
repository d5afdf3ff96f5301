package session

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/dshgo/dsh/messages"
)

// payload is the typed view of a core event's data.
type payload interface{ eventType() EventType }

// TurnStart opens turn Turn (numbered from 1).
type TurnStart struct{ Turn int64 }

// TurnEndKind names why a turn ended
// (docs/session-log.md#turn-end-reasons-and-cancel-causes).
type TurnEndKind string

// The turn-end kinds.
const (
	EndCompleted   TurnEndKind = "completed"
	EndAborted     TurnEndKind = "aborted"
	EndBlocked     TurnEndKind = "blocked"
	EndError       TurnEndKind = "error"
	EndMaxTokens   TurnEndKind = "max-tokens"
	EndInterrupted TurnEndKind = "interrupted"
)

// CauseKind names who cancelled a turn.
type CauseKind string

// The cancel causes. CauseLegacy appears only in migrated logs.
const (
	CauseUser     CauseKind = "user"
	CauseParent   CauseKind = "parent"
	CauseHook     CauseKind = "hook"
	CauseDisposed CauseKind = "disposed"
	CauseLegacy   CauseKind = "legacy"
)

// CancelCause is a typed cancel cause; Reason is set for CauseHook.
type CancelCause struct {
	Kind   CauseKind
	Reason string
}

// JSON returns the cause in the harness's shape.
func (c CancelCause) JSON() messages.JSON {
	var o messages.ObjectBuilder
	o.String("kind", string(c.Kind))
	if c.Kind == CauseHook {
		o.String("reason", c.Reason)
	}
	return o.Build()
}

// TurnEndReason is a turn-end kind with its payload: a cancel cause for
// aborted, a failure for error.
type TurnEndReason struct {
	Kind  TurnEndKind
	Cause CancelCause
	Error messages.LlmFailure
}

// JSON returns the reason in the harness's shape.
func (r TurnEndReason) JSON() messages.JSON {
	var o messages.ObjectBuilder
	o.String("kind", string(r.Kind))
	switch r.Kind {
	case EndAborted:
		o.Raw("reason", r.Cause.JSON())
	case EndError:
		o.Raw("error", r.Error.JSON())
	}
	return o.Build()
}

// TurnEnd closes turn Turn.
type TurnEnd struct {
	Turn   int64
	Reason TurnEndReason
}

// StepStart opens step Step of turn Turn (steps restart at 1 in each turn).
type StepStart struct{ Turn, Step int64 }

// StepEnd closes step Step of turn Turn.
type StepEnd struct{ Turn, Step int64 }

// UserMessage records a user-role message entering history.
type UserMessage struct{ Message messages.Message }

// AssistantChunk records one raw stream chunk, for replay fidelity.
type AssistantChunk struct {
	Turn, Step int64
	Chunk      messages.StreamChunk
}

// AssistantMessage is the completion anchor of one provider call. HasUsage
// says whether Usage was recorded.
type AssistantMessage struct {
	Turn, Step  int64
	Message     messages.Message
	Usage       messages.TokenUsage
	HasUsage    bool
	Interrupted bool
}

// ToolCall records that a tool call started.
type ToolCall struct {
	Turn, Step int64
	CallID     string
	Name       string
	Arguments  string
}

// ToolError is the typed error of a failed tool result; the zero value
// means none.
type ToolError struct{ Name, Code string }

// ToolResult records a tool's result message. Meta is opaque JSON (zero
// when absent).
type ToolResult struct {
	Turn, Step int64
	Message    messages.Message
	Error      ToolError
	Meta       messages.JSON
}

// HeaderReason says why a request header was logged
// (docs/session-log.md#request-headers).
type HeaderReason string

// The header reasons.
const (
	ReasonInitial HeaderReason = "initial"
	ReasonResume  HeaderReason = "resume"
	ReasonChange  HeaderReason = "change"
	// ReasonSeries is written by later format-0 releases of the reference
	// (docs/log-format.md); dsh reads it and never writes it.
	ReasonSeries HeaderReason = "series"
)

// RequestHeader logs a full snapshot of the request header. StartsSeries
// is the optional startsSeries: true a later writer puts on a "series"
// header (docs/log-format.md).
type RequestHeader struct {
	Header       EpochHeader
	Reason       HeaderReason
	StartsSeries bool
}

// RequestContext logs the route and context window of requests.
type RequestContext struct {
	Provider      string
	Model         string
	ContextWindow messages.OptInt
}

// InboxSpliced records one normalised change of the inbox
// (docs/agent-loop.md#the-inbox).
type InboxSpliced struct {
	Target       string // "next-turn" or "next-step"
	Start        int64
	RemovedCount messages.OptInt
	inserted     []messages.Message
	Outcome      string // "" or "canceled"
}

// NewInboxSpliced returns a splice payload; inserted is copied.
func NewInboxSpliced(target string, start int64, removed messages.OptInt, inserted []messages.Message, outcome string) InboxSpliced {
	return InboxSpliced{Target: target, Start: start, RemovedCount: removed, inserted: slices.Clone(inserted), Outcome: outcome}
}

// Inserted returns a copy of the inserted messages, owned by the caller.
func (p InboxSpliced) Inserted() []messages.Message { return slices.Clone(p.inserted) }

// EndSeed marks the end of a seed.
type EndSeed struct{}

// Todo is one item of a todo list.
type Todo struct{ Content, Status string }

// TodoWrite records the whole todo list (last write wins).
type TodoWrite struct{ todos []Todo }

// NewTodoWrite returns a todo/write payload; todos is copied.
func NewTodoWrite(todos []Todo) TodoWrite { return TodoWrite{todos: slices.Clone(todos)} }

// Todos returns a copy of the list, owned by the caller.
func (p TodoWrite) Todos() []Todo { return slices.Clone(p.todos) }

// opaque is the payload of a core event whose data the log core checks only
// for being an object (llm/retry*, compaction/*): its meaning belongs to
// the agent.
type opaque struct{ typ EventType }

func (TurnStart) eventType() EventType        { return TypeTurnStart }
func (TurnEnd) eventType() EventType          { return TypeTurnEnd }
func (StepStart) eventType() EventType        { return TypeStepStart }
func (StepEnd) eventType() EventType          { return TypeStepEnd }
func (UserMessage) eventType() EventType      { return TypeUserMessage }
func (AssistantChunk) eventType() EventType   { return TypeAssistantChunk }
func (AssistantMessage) eventType() EventType { return TypeAssistantMessage }
func (ToolCall) eventType() EventType         { return TypeToolCall }
func (ToolResult) eventType() EventType       { return TypeToolResult }
func (RequestHeader) eventType() EventType    { return TypeRequestHeader }
func (RequestContext) eventType() EventType   { return TypeRequestContext }
func (InboxSpliced) eventType() EventType     { return TypeInboxSpliced }
func (EndSeed) eventType() EventType          { return TypeEndSeed }
func (TodoWrite) eventType() EventType        { return TypeTodoWrite }
func (p opaque) eventType() EventType         { return p.typ }

func turnStep(o *messages.ObjectBuilder, turn, step int64) {
	o.Int("turn", turn).Int("step", step)
}

// Draft returns the event draft.
func (p TurnStart) Draft() Draft {
	var o messages.ObjectBuilder
	return Draft{typ: TypeTurnStart, data: o.Int("turn", p.Turn).Build(), payload: p}
}

// Draft returns the event draft.
func (p TurnEnd) Draft() Draft {
	var o messages.ObjectBuilder
	return Draft{typ: TypeTurnEnd, data: o.Int("turn", p.Turn).Raw("reason", p.Reason.JSON()).Build(), payload: p}
}

// Draft returns the event draft.
func (p StepStart) Draft() Draft {
	var o messages.ObjectBuilder
	turnStep(&o, p.Turn, p.Step)
	return Draft{typ: TypeStepStart, data: o.Build(), payload: p}
}

// Draft returns the event draft.
func (p StepEnd) Draft() Draft {
	var o messages.ObjectBuilder
	turnStep(&o, p.Turn, p.Step)
	return Draft{typ: TypeStepEnd, data: o.Build(), payload: p}
}

// Draft returns the event draft, with an append surface operation.
func (p UserMessage) Draft() Draft {
	return Draft{typ: TypeUserMessage, data: p.Message.JSON(), op: AppendOp(), payload: p}
}

// Draft returns the event draft.
func (p AssistantChunk) Draft() Draft {
	if p.Chunk.Type() == "" {
		d := Draft{typ: TypeAssistantChunk, data: chunkEventData(p.Turn, p.Step, p.Chunk.JSON())}
		d.payload = p // refused at append, by checkPayload
		return d
	}
	// The draft holds the chunk's own JSON, not the event's data around
	// it (see chunkMarker): building that data would cost every streamed
	// chunk two allocations, for the log to cut its text out of it again.
	// turn and step sit in the op's unused range, and the marker boxes
	// without allocating.
	return Draft{typ: TypeAssistantChunk, data: p.Chunk.JSON(), op: SurfaceOp{start: p.Turn, end: p.Step},
		payload: chunkMarker{}}
}

// chunkEventData returns the data of an assistant/chunk event:
// {"turn":T,"step":S,"chunk":C}.
func chunkEventData(turn, step int64, chunk messages.JSON) messages.JSON {
	var o messages.ObjectBuilder
	// 26 bytes of keys and punctuation, two integers (20 bytes each at
	// most) and the chunk, so one buffer.
	o.Grow(26 + 2*20 + chunk.Len())
	turnStep(&o, turn, step)
	return o.Raw("chunk", chunk).Build()
}

// chunkEventDataLen returns chunkEventData(turn, step, chunk).Len()
// without building it.
func chunkEventDataLen(turn, step int64, chunk messages.JSON) int {
	var buf [20]byte
	return 26 + len(strconv.AppendInt(buf[:0], turn, 10)) + len(strconv.AppendInt(buf[:0], step, 10)) + chunk.Len()
}

// Draft returns the event draft, with an append surface operation.
func (p AssistantMessage) Draft() Draft {
	var o messages.ObjectBuilder
	turnStep(&o, p.Turn, p.Step)
	o.Raw("message", p.Message.JSON())
	if p.HasUsage {
		o.Raw("usage", p.Usage.JSON())
	}
	if p.Interrupted {
		o.Bool("interrupted", true)
	}
	return Draft{typ: TypeAssistantMessage, data: o.Build(), op: AppendOp(), payload: p}
}

// Draft returns the event draft.
func (p ToolCall) Draft() Draft {
	var o messages.ObjectBuilder
	turnStep(&o, p.Turn, p.Step)
	o.String("callId", p.CallID).String("name", p.Name).String("arguments", p.Arguments)
	return Draft{typ: TypeToolCall, data: o.Build(), payload: p}
}

// Draft returns the event draft, with an append surface operation.
func (p ToolResult) Draft() Draft {
	var o messages.ObjectBuilder
	turnStep(&o, p.Turn, p.Step)
	o.Raw("message", p.Message.JSON())
	if p.Error != (ToolError{}) {
		var e messages.ObjectBuilder
		o.Raw("error", e.String("name", p.Error.Name).String("code", p.Error.Code).Build())
	}
	o.Raw("meta", p.Meta)
	return Draft{typ: TypeToolResult, data: o.Build(), op: AppendOp(), payload: p}
}

// Draft returns the event draft.
func (p RequestHeader) Draft() Draft {
	p.Header = p.Header.Canonical()
	var o messages.ObjectBuilder
	o.Raw("header", p.Header.JSON()).String("reason", string(p.Reason))
	if p.StartsSeries {
		o.Bool("startsSeries", true)
	}
	return Draft{typ: TypeRequestHeader, data: o.Build(), payload: p}
}

// Draft returns the event draft.
func (p RequestContext) Draft() Draft {
	var o messages.ObjectBuilder
	o.String("provider", p.Provider).String("model", p.Model)
	if v, ok := p.ContextWindow.Get(); ok {
		o.Int("contextWindow", v)
	}
	return Draft{typ: TypeRequestContext, data: o.Build(), payload: p}
}

// Draft returns the event draft.
func (p InboxSpliced) Draft() Draft {
	var o messages.ObjectBuilder
	o.String("target", p.Target).Int("start", p.Start)
	if v, ok := p.RemovedCount.Get(); ok {
		o.Int("removedCount", v)
	}
	raws := make([]messages.JSON, len(p.inserted))
	for i, m := range p.inserted {
		raws[i] = m.JSON()
	}
	o.Raw("inserted", messages.ArrayOf(raws...))
	if p.Outcome != "" {
		o.String("outcome", p.Outcome)
	}
	return Draft{typ: TypeInboxSpliced, data: o.Build(), payload: p}
}

// Draft returns the event draft.
func (p EndSeed) Draft() Draft {
	return Draft{typ: TypeEndSeed, data: emptyObject, payload: p}
}

// Draft returns the event draft.
func (p TodoWrite) Draft() Draft {
	raws := make([]messages.JSON, len(p.todos))
	for i, t := range p.todos {
		var o messages.ObjectBuilder
		raws[i] = o.String("content", t.Content).String("status", t.Status).Build()
	}
	var o messages.ObjectBuilder
	return Draft{typ: TypeTodoWrite, data: o.Raw("todos", messages.ArrayOf(raws...)).Build(), payload: p}
}

var emptyObject = messages.MustParseJSON("{}")

// checkPayload enforces on a typed value the rules decodePayload enforces
// on JSON, with the same rule functions (below): the role and source of
// each message, the tool-result shape, the closed vocabularies of reasons,
// targets and causes. Values the messages constructors built are well
// formed already; what is checked here is how they were put together.
func checkPayload(p payload) error {
	switch p := p.(type) {
	case TurnEnd:
		if err := checkTurnEndKind(p.Reason.Kind); err != nil {
			return err
		}
		switch p.Reason.Kind {
		case EndAborted:
			return checkCauseKind(p.Reason.Cause.Kind)
		case EndError:
			if err := p.Reason.Error.Validate(); err != nil {
				return fmt.Errorf("turn/end error: %w", err)
			}
		}
	case UserMessage:
		return checkRole(p.Message, messages.RoleUser)
	case AssistantChunk:
		if p.Chunk.Type() == "" {
			return fmt.Errorf("assistant/chunk carries no chunk")
		}
	case AssistantMessage:
		if err := checkRole(p.Message, messages.RoleAssistant); err != nil {
			return err
		}
		return checkModelSource(p.Message)
	case ToolResult:
		if err := checkRole(p.Message, messages.RoleUser); err != nil {
			return err
		}
		return checkToolResultMessage(p.Message)
	case RequestHeader:
		if err := checkHeaderReason(p.Reason); err != nil {
			return err
		}
		if err := p.Header.Config.Validate(); err != nil {
			return fmt.Errorf("request/header lacks provider/model: %w", err)
		}
		if p.Header.AdapterDefaults.ReasoningEffort && p.Header.Config.ReasoningEffort == "" ||
			p.Header.AdapterDefaults.MaxTokens && p.Header.Config.MaxTokens == (messages.OptInt{}) {
			return fmt.Errorf("request/header adapterDefaults marks no present config field")
		}
	case InboxSpliced:
		if err := checkSpliceTarget(p.Target); err != nil {
			return err
		}
		if p.Outcome != "" {
			if err := checkSpliceOutcome(p.Outcome); err != nil {
				return err
			}
		}
		for _, m := range p.inserted {
			if err := checkRole(m, messages.RoleUser); err != nil {
				return fmt.Errorf("agent/inbox/spliced inserted: %w", err)
			}
		}
	}
	return nil
}

// The rules below are the closed vocabularies and message shapes of the
// core events, one function each, shared by checkPayload (a draft's typed
// value) and decodePayload (data read from a log).

// checkTurnEndKind checks a turn/end reason's kind.
func checkTurnEndKind(k TurnEndKind) error {
	switch k {
	case EndCompleted, EndBlocked, EndMaxTokens, EndInterrupted, EndAborted, EndError:
		return nil
	}
	return fmt.Errorf("turn/end reason %q is unknown", k)
}

// checkCauseKind checks the kind of an aborted turn's cancel cause.
func checkCauseKind(k CauseKind) error {
	switch k {
	case CauseUser, CauseParent, CauseDisposed, CauseLegacy, CauseHook:
		return nil
	}
	return fmt.Errorf("turn/end cause %q is unknown", k)
}

// checkHeaderReason checks a request/header reason; "fallback", which the
// format once had, is refused with its own message.
func checkHeaderReason(r HeaderReason) error {
	switch r {
	case ReasonInitial, ReasonResume, ReasonChange, ReasonSeries:
		return nil
	case "fallback":
		return fmt.Errorf("request/header reason \"fallback\" was removed from the format")
	}
	return fmt.Errorf("request/header reason %q is not initial, resume, change or series", r)
}

// checkSpliceTarget checks an agent/inbox/spliced target.
func checkSpliceTarget(t string) error {
	if t != "next-turn" && t != "next-step" {
		return fmt.Errorf("agent/inbox/spliced target %q is not next-turn or next-step", t)
	}
	return nil
}

// checkSpliceOutcome checks the outcome of an agent/inbox/spliced that has
// one: only "canceled" exists.
func checkSpliceOutcome(o string) error {
	if o != "canceled" {
		return fmt.Errorf("agent/inbox/spliced outcome %q is not \"canceled\"", o)
	}
	return nil
}

// checkRole checks that m is a message (not the zero Message) of role.
func checkRole(m messages.Message, role messages.Role) error {
	if m.IsZero() {
		return fmt.Errorf("lacks an identified message")
	}
	if m.Role() != role {
		return fmt.Errorf("message %s has role %s, want %s", m.ID(), m.Role(), role)
	}
	return nil
}

// checkModelSource checks that an assistant message came from a model.
func checkModelSource(m messages.Message) error {
	if m.Source().Kind() != messages.SourceModel {
		return fmt.Errorf("assistant message %s lacks a model source", m.ID())
	}
	return nil
}

// decodePayload checks the data of a core event and returns its typed view.
// Foreign types yield nil. Extra members in data are allowed and kept
// verbatim (the reference does not police them); required members must be
// present with the right JSON types.
func decodePayload(t EventType, data messages.JSON) (payload, error) {
	if !t.IsCore() {
		return nil, nil
	}
	d := dataReader{data: data}
	if data.Kind() != messages.KindObject {
		return nil, fmt.Errorf("data is not an object")
	}
	var p payload
	switch t {
	case TypeTurnStart:
		if _, has := data.Field("trigger"); has {
			return nil, fmt.Errorf("legacy turn/start trigger is not supported (no migration in this version)")
		}
		p = TurnStart{Turn: d.int("turn")}
	case TypeTurnEnd:
		r, err := parseTurnEndReason(d.field("reason"))
		if err != nil {
			return nil, err
		}
		p = TurnEnd{Turn: d.int("turn"), Reason: r}
	case TypeStepStart:
		p = StepStart{Turn: d.int("turn"), Step: d.int("step")}
	case TypeStepEnd:
		p = StepEnd{Turn: d.int("turn"), Step: d.int("step")}
	case TypeUserMessage:
		m, err := importRole(data, messages.RoleUser)
		if err != nil {
			return nil, err
		}
		p = UserMessage{Message: m}
	case TypeAssistantChunk:
		c, err := messages.ParseStreamChunk(d.field("chunk"))
		if err != nil {
			return nil, err
		}
		p = AssistantChunk{Turn: d.int("turn"), Step: d.int("step"), Chunk: c}
	case TypeAssistantMessage:
		m, err := importRole(d.field("message"), messages.RoleAssistant)
		if err != nil {
			return nil, err
		}
		if err := checkModelSource(m); err != nil {
			return nil, err
		}
		a := AssistantMessage{Turn: d.int("turn"), Step: d.int("step"), Message: m}
		if u, has := data.Field("usage"); has {
			if a.Usage, err = messages.ParseTokenUsage(u); err != nil {
				return nil, err
			}
			a.HasUsage = true
		}
		if v, has := data.Field("interrupted"); has {
			if b, _ := v.AsBool(); !b {
				return nil, fmt.Errorf("assistant/message interrupted must be true when present")
			}
			a.Interrupted = true
		}
		p = a
	case TypeToolCall:
		p = ToolCall{Turn: d.int("turn"), Step: d.int("step"), CallID: d.str("callId"), Name: d.str("name"), Arguments: d.str("arguments")}
	case TypeToolResult:
		m, err := importRole(d.field("message"), messages.RoleUser)
		if err != nil {
			return nil, err
		}
		if err := checkToolResultMessage(m); err != nil {
			return nil, err
		}
		r := ToolResult{Turn: d.int("turn"), Step: d.int("step"), Message: m}
		if e, has := data.Field("error"); has {
			ed := dataReader{data: e}
			r.Error = ToolError{Name: ed.str("name"), Code: ed.str("code")}
			if ed.err != nil {
				return nil, fmt.Errorf("tool/result error: %w", ed.err)
			}
		}
		r.Meta, _ = data.Field("meta")
		p = r
	case TypeRequestHeader:
		reason := HeaderReason(d.str("reason"))
		if d.err == nil {
			if err := checkHeaderReason(reason); err != nil {
				return nil, err
			}
		}
		h, err := parseEpochHeader(d.field("header"))
		if err != nil {
			return nil, err
		}
		rh := RequestHeader{Header: h, Reason: reason}
		if v, has := data.Field("startsSeries"); has {
			if b, _ := v.AsBool(); !b {
				return nil, fmt.Errorf("request/header startsSeries must be true when present")
			}
			rh.StartsSeries = true
		}
		p = rh
	case TypeRequestContext:
		c := RequestContext{Provider: d.str("provider"), Model: d.str("model")}
		if v, has := data.Field("contextWindow"); has {
			n, ok := v.AsInt()
			if !ok {
				return nil, fmt.Errorf("request/context contextWindow is not an integer")
			}
			c.ContextWindow = messages.Some(n)
		}
		p = c
	case TypeInboxSpliced:
		s := InboxSpliced{Target: d.str("target"), Start: d.int("start")}
		if d.err == nil {
			if err := checkSpliceTarget(s.Target); err != nil {
				return nil, err
			}
		}
		if v, has := data.Field("removedCount"); has {
			n, ok := v.AsInt()
			if !ok || n < 0 {
				return nil, fmt.Errorf("agent/inbox/spliced removedCount is not a non-negative integer")
			}
			s.RemovedCount = messages.Some(n)
		}
		ins := d.field("inserted")
		if ins.Kind() != messages.KindArray && d.err == nil {
			return nil, fmt.Errorf("agent/inbox/spliced inserted is not an array")
		}
		for e := range ins.Elements() {
			m, err := importRole(e, messages.RoleUser)
			if err != nil {
				return nil, fmt.Errorf("agent/inbox/spliced inserted: %w", err)
			}
			s.inserted = append(s.inserted, m)
		}
		if v, has := data.Field("outcome"); has {
			// Present, it must be a string the rule accepts ("" is the
			// typed value's absent outcome, not a present one).
			s.Outcome, _ = v.AsString()
			if s.Outcome == "" || checkSpliceOutcome(s.Outcome) != nil {
				return nil, fmt.Errorf("agent/inbox/spliced outcome %s is not \"canceled\"", v)
			}
		}
		p = s
	case TypeEndSeed:
		p = EndSeed{}
	case TypeTodoWrite:
		var w TodoWrite
		todos := d.field("todos")
		if todos.Kind() != messages.KindArray && d.err == nil {
			return nil, fmt.Errorf("todo/write todos is not an array")
		}
		for e := range todos.Elements() {
			td := dataReader{data: e}
			td.prefix = "todo/write item"
			w.todos = append(w.todos, Todo{Content: td.str("content"), Status: td.str("status")})
			if td.err != nil {
				return nil, td.err
			}
		}
		p = w
	default:
		p = opaque{typ: t}
	}
	if d.err != nil {
		return nil, d.err
	}
	return p, nil
}

// importRole imports a message and checks its role.
func importRole(j messages.JSON, role messages.Role) (messages.Message, error) {
	m, err := messages.ImportMessage(j)
	if err != nil {
		return messages.Message{}, fmt.Errorf("lacks an identified message: %w", err)
	}
	if err := checkRole(m, role); err != nil {
		return messages.Message{}, err
	}
	return m, nil
}

// checkToolResultMessage enforces the tool-result message shape: a tool
// source and exactly one tool-result block answering the source's call.
func checkToolResultMessage(m messages.Message) error {
	if m.Source().Kind() != messages.SourceTool {
		return fmt.Errorf("tool/result message %s lacks a tool source", m.ID())
	}
	if m.NumBlocks() != 1 || m.Block(0).Type() != messages.BlockToolResult {
		return fmt.Errorf("tool/result message %s must hold exactly one tool-result block", m.ID())
	}
	if m.Block(0).ToolCallID() != m.Source().CallID() {
		return fmt.Errorf("tool/result message %s answers %q but its source names %q", m.ID(),
			m.Block(0).ToolCallID(), m.Source().CallID())
	}
	return nil
}

func parseTurnEndReason(j messages.JSON) (TurnEndReason, error) {
	d := dataReader{data: j, prefix: "turn/end reason"}
	r := TurnEndReason{Kind: TurnEndKind(d.str("kind"))}
	if d.err != nil {
		return TurnEndReason{}, d.err
	}
	if err := checkTurnEndKind(r.Kind); err != nil {
		return TurnEndReason{}, err
	}
	switch r.Kind {
	case EndAborted:
		cj, has := j.Field("reason")
		if !has {
			return TurnEndReason{}, fmt.Errorf("legacy turn/end aborted without a cause is not supported")
		}
		cd := dataReader{data: cj, prefix: "turn/end cause"}
		r.Cause = CancelCause{Kind: CauseKind(cd.str("kind"))}
		if cd.err == nil {
			if err := checkCauseKind(r.Cause.Kind); err != nil {
				return TurnEndReason{}, err
			}
		}
		if r.Cause.Kind == CauseHook {
			r.Cause.Reason = cd.str("reason")
		}
		if cd.err != nil {
			return TurnEndReason{}, cd.err
		}
	case EndError:
		f, err := messages.ParseLlmFailure(d.field("error"))
		if err != nil {
			return TurnEndReason{}, fmt.Errorf("turn/end error: %w", err)
		}
		r.Error = f
	}
	return r, d.err
}

// dataReader reads required members of an object, remembering the first
// problem so a decoder can read all fields and check once.
type dataReader struct {
	data   messages.JSON
	prefix string
	err    error
}

func (d *dataReader) fail(format string, args ...any) {
	if d.err == nil {
		if d.prefix != "" {
			format = d.prefix + ": " + format
		}
		d.err = fmt.Errorf(format, args...)
	}
}

func (d *dataReader) field(k string) messages.JSON {
	v, ok := d.data.Field(k)
	if !ok {
		d.fail("missing %q", k)
	}
	return v
}

func (d *dataReader) int(k string) int64 {
	v, ok := d.data.Field(k)
	n, isInt := v.AsInt()
	if !ok || !isInt {
		d.fail("%q is not an integer", k)
	}
	return n
}

func (d *dataReader) str(k string) string {
	v, ok := d.data.Field(k)
	s, isStr := v.AsString()
	if !ok || !isStr {
		d.fail("%q is not a string", k)
	}
	return s
}
