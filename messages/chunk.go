package messages

import "fmt"

// LlmFailure describes why a model call failed
// (docs/messages.md#finish-reasons-and-failures). Message and
// Code are required; Status (0 = absent) is an HTTP status 100..599,
// ProviderRetryAfterMs (0 = absent) the provider's retry hint, RequestID
// ("" = absent) the provider's diagnostic request id.
type LlmFailure struct {
	Message              string
	Code                 string
	Status               int
	ProviderRetryAfterMs int64
	RequestID            string
}

// Validate checks the field rules of the reference.
func (f LlmFailure) Validate() error {
	switch {
	case f.Message == "":
		return fmt.Errorf("messages: llm failure needs a message")
	case f.Code == "":
		return fmt.Errorf("messages: llm failure needs a code")
	case f.Status != 0 && (f.Status < 100 || f.Status > 599):
		return fmt.Errorf("messages: llm failure status %d outside 100..599", f.Status)
	case f.ProviderRetryAfterMs < 0:
		return fmt.Errorf("messages: llm failure retry-after %d is negative", f.ProviderRetryAfterMs)
	}
	return nil
}

// JSON returns the failure in the harness's shape.
func (f LlmFailure) JSON() JSON {
	var o ObjectBuilder
	o.String("message", f.Message).String("code", f.Code)
	if f.Status != 0 {
		o.Int("status", int64(f.Status))
	}
	if f.ProviderRetryAfterMs != 0 {
		o.Int("providerRetryAfterMs", f.ProviderRetryAfterMs)
	}
	if f.RequestID != "" {
		o.String("requestId", f.RequestID)
	}
	return o.Build()
}

// Error makes a failure usable as an error value.
func (f LlmFailure) Error() string { return f.Code + ": " + f.Message }

// ParseLlmFailure reads and validates a failure object.
func ParseLlmFailure(j JSON) (LlmFailure, error) {
	if j.Kind() != KindObject {
		return LlmFailure{}, fmt.Errorf("messages: failure is not an object")
	}
	var f LlmFailure
	f.Message, _ = stringField(j, "message")
	f.Code, _ = stringField(j, "code")
	if v, ok := j.Field("status"); ok {
		// Checked here, not only by Validate: there 0 means absent, so a
		// present status 0 would pass and then vanish from the JSON.
		n, isInt := v.AsInt()
		if !isInt || n < 100 || n > 599 {
			return LlmFailure{}, fmt.Errorf("messages: failure status %s is not an integer in 100..599", v)
		}
		f.Status = int(n)
	}
	if v, ok := j.Field("providerRetryAfterMs"); ok {
		n, isInt := v.AsInt()
		if !isInt || n <= 0 {
			return LlmFailure{}, fmt.Errorf("messages: failure providerRetryAfterMs is not a positive integer")
		}
		f.ProviderRetryAfterMs = n
	}
	if v, ok := j.Field("requestId"); ok {
		var isStr bool
		if f.RequestID, isStr = v.AsString(); !isStr {
			return LlmFailure{}, fmt.Errorf("messages: failure requestId is not a string")
		}
	}
	if err := f.Validate(); err != nil {
		return LlmFailure{}, err
	}
	return f, nil
}

// FinishKind names how a model stream finished.
type FinishKind string

// The finish kinds (docs/messages.md#finish-reasons-and-failures).
const (
	FinishStop      FinishKind = "stop"
	FinishToolCalls FinishKind = "tool-calls"
	FinishMaxTokens FinishKind = "max-tokens"
	FinishAborted   FinishKind = "aborted"
	FinishError     FinishKind = "error"
)

// FinishReason is how a model stream ended: a kind, plus a failure for
// aborted and error.
type FinishReason struct {
	Kind    FinishKind
	Failure LlmFailure
}

// JSON returns the reason in the harness's shape.
func (r FinishReason) JSON() JSON {
	var o ObjectBuilder
	o.String("kind", string(r.Kind))
	if r.Kind == FinishAborted || r.Kind == FinishError {
		o.Raw("failure", r.Failure.JSON())
	}
	return o.Build()
}

// parseFinishReason reads a finish reason.
func parseFinishReason(j JSON) (FinishReason, error) {
	k, ok := stringField(j, "kind")
	if !ok {
		return FinishReason{}, fmt.Errorf("messages: finish reason lacks a kind")
	}
	r := FinishReason{Kind: FinishKind(k)}
	switch r.Kind {
	case FinishStop, FinishToolCalls, FinishMaxTokens:
	case FinishAborted, FinishError:
		fj, ok := j.Field("failure")
		if !ok {
			return FinishReason{}, fmt.Errorf("messages: %s finish lacks a failure", k)
		}
		f, err := ParseLlmFailure(fj)
		if err != nil {
			return FinishReason{}, err
		}
		r.Failure = f
	default:
		return FinishReason{}, fmt.Errorf("messages: unknown finish kind %q", k)
	}
	return r, nil
}

// ChunkType names a stream chunk (docs/messages.md#stream-chunks).
type ChunkType string

// The chunk types.
const (
	ChunkBlockStart     ChunkType = "block-start"
	ChunkTextDelta      ChunkType = "text-delta"
	ChunkReasoningDelta ChunkType = "reasoning-delta"
	ChunkToolCallDelta  ChunkType = "tool-call-delta"
	ChunkBlockEnd       ChunkType = "block-end"
	ChunkUsage          ChunkType = "usage"
	ChunkFinish         ChunkType = "finish"
)

// StreamChunk is one immutable unit of a model's streaming output. Build
// one with the constructors below or ParseStreamChunk; it keeps its
// canonical JSON. Safe for concurrent use.
type StreamChunk struct {
	typ   ChunkType
	index int
	text  string      // text-delta, reasoning-delta; argumentsDelta for tool-call-delta
	id    string      // tool-call-delta
	extra *chunkExtra // the fields of the rarer chunk types; nil for plain deltas
	raw   JSON
}

// chunkExtra holds what only some chunk types carry, so the common delta
// chunks stay small (they are most of a log). It is immutable once built.
type chunkExtra struct {
	blockType   BlockType    // block-start
	name        string       // tool-call-delta, when hasName
	hasName     bool         // tool-call-delta
	block       ContentBlock // block-end
	usage       TokenUsage   // usage
	reason      FinishReason // finish
	replayState JSON         // finish, optional
}

// x returns the extra fields, or a zero value when there are none.
func (c StreamChunk) x() *chunkExtra {
	if c.extra == nil {
		return &noExtra
	}
	return c.extra
}

var noExtra chunkExtra

func chunkHead(o *ObjectBuilder, t ChunkType, index int) {
	o.String("type", string(t)).Int("index", int64(index))
}

// BlockStartChunk opens block index of type bt.
func BlockStartChunk(index int, bt BlockType) StreamChunk {
	var o ObjectBuilder
	chunkHead(&o, ChunkBlockStart, index)
	o.String("blockType", string(bt))
	return StreamChunk{typ: ChunkBlockStart, index: index, extra: &chunkExtra{blockType: bt}, raw: o.Build()}
}

// TextDeltaChunk appends text to text block index.
func TextDeltaChunk(index int, text string) StreamChunk {
	var o ObjectBuilder
	chunkHead(&o, ChunkTextDelta, index)
	o.String("text", text)
	return StreamChunk{typ: ChunkTextDelta, index: index, text: text, raw: o.Build()}
}

// ReasoningDeltaChunk appends text to reasoning block index.
func ReasoningDeltaChunk(index int, text string) StreamChunk {
	var o ObjectBuilder
	chunkHead(&o, ChunkReasoningDelta, index)
	o.String("text", text)
	return StreamChunk{typ: ChunkReasoningDelta, index: index, text: text, raw: o.Build()}
}

// ToolCallDeltaChunk appends argument text to tool-call block index, without
// a name.
func ToolCallDeltaChunk(index int, id, argumentsDelta string) StreamChunk {
	var o ObjectBuilder
	chunkHead(&o, ChunkToolCallDelta, index)
	o.String("id", id).String("argumentsDelta", argumentsDelta)
	return StreamChunk{typ: ChunkToolCallDelta, index: index, id: id, text: argumentsDelta, raw: o.Build()}
}

// NamedToolCallDeltaChunk is ToolCallDeltaChunk carrying the tool name.
func NamedToolCallDeltaChunk(index int, id, name, argumentsDelta string) StreamChunk {
	var o ObjectBuilder
	chunkHead(&o, ChunkToolCallDelta, index)
	o.String("id", id).String("name", name).String("argumentsDelta", argumentsDelta)
	return StreamChunk{typ: ChunkToolCallDelta, index: index, id: id, extra: &chunkExtra{name: name, hasName: true},
		text: argumentsDelta, raw: o.Build()}
}

// BlockEndChunk closes block index with the authoritative assembled block.
func BlockEndChunk(index int, block ContentBlock) StreamChunk {
	var o ObjectBuilder
	chunkHead(&o, ChunkBlockEnd, index)
	o.Raw("block", block.raw)
	return StreamChunk{typ: ChunkBlockEnd, index: index, extra: &chunkExtra{block: block}, raw: o.Build()}
}

// UsageChunk reports the call's token usage.
func UsageChunk(u TokenUsage) StreamChunk {
	var o ObjectBuilder
	o.String("type", string(ChunkUsage)).Raw("usage", u.JSON())
	return StreamChunk{typ: ChunkUsage, extra: &chunkExtra{usage: u}, raw: o.Build()}
}

// FinishChunk ends the stream. replayState, when not zero, is the adapter's
// replay envelope {response, blocks?}.
func FinishChunk(reason FinishReason, replayState JSON) StreamChunk {
	var o ObjectBuilder
	o.String("type", string(ChunkFinish)).Raw("reason", reason.JSON()).Raw("replayState", replayState)
	return StreamChunk{typ: ChunkFinish, extra: &chunkExtra{reason: reason, replayState: replayState}, raw: o.Build()}
}

// ParseStreamChunk reads a chunk from its JSON form and checks its fields.
func ParseStreamChunk(j JSON) (StreamChunk, error) {
	if j.Kind() != KindObject {
		return StreamChunk{}, fmt.Errorf("messages: chunk is not an object")
	}
	t, _ := stringField(j, "type")
	c := StreamChunk{typ: ChunkType(t), raw: j}
	needIndex := func() error {
		v, ok := j.Field("index")
		n, isInt := v.AsInt()
		if !ok || !isInt || n < 0 {
			return fmt.Errorf("messages: %s chunk lacks a non-negative integer index", t)
		}
		c.index = int(n)
		return nil
	}
	var ok bool
	switch c.typ {
	case ChunkBlockStart:
		if err := needIndex(); err != nil {
			return StreamChunk{}, err
		}
		bt, _ := stringField(j, "blockType")
		if bt == "" {
			return StreamChunk{}, fmt.Errorf("messages: block-start chunk lacks a blockType")
		}
		c.extra = &chunkExtra{blockType: BlockType(bt)}
	case ChunkTextDelta, ChunkReasoningDelta:
		if err := needIndex(); err != nil {
			return StreamChunk{}, err
		}
		if c.text, ok = stringField(j, "text"); !ok {
			return StreamChunk{}, fmt.Errorf("messages: %s chunk lacks a string text", t)
		}
	case ChunkToolCallDelta:
		if err := needIndex(); err != nil {
			return StreamChunk{}, err
		}
		if c.id, ok = stringField(j, "id"); !ok {
			return StreamChunk{}, fmt.Errorf("messages: tool-call-delta chunk lacks a string id")
		}
		if c.text, ok = stringField(j, "argumentsDelta"); !ok {
			return StreamChunk{}, fmt.Errorf("messages: tool-call-delta chunk lacks a string argumentsDelta")
		}
		if v, has := j.Field("name"); has {
			name, ok := v.AsString()
			if !ok {
				return StreamChunk{}, fmt.Errorf("messages: tool-call-delta name is not a string")
			}
			c.extra = &chunkExtra{name: name, hasName: true}
		}
	case ChunkBlockEnd:
		if err := needIndex(); err != nil {
			return StreamChunk{}, err
		}
		bj, has := j.Field("block")
		if !has {
			return StreamChunk{}, fmt.Errorf("messages: block-end chunk lacks a block")
		}
		b, err := ParseContentBlock(bj)
		if err != nil {
			return StreamChunk{}, err
		}
		c.extra = &chunkExtra{block: b}
	case ChunkUsage:
		uj, _ := j.Field("usage")
		u, err := ParseTokenUsage(uj)
		if err != nil {
			return StreamChunk{}, err
		}
		c.extra = &chunkExtra{usage: u}
	case ChunkFinish:
		rj, _ := j.Field("reason")
		r, err := parseFinishReason(rj)
		if err != nil {
			return StreamChunk{}, err
		}
		rs, _ := j.Field("replayState")
		c.extra = &chunkExtra{reason: r, replayState: rs}
	default:
		return StreamChunk{}, fmt.Errorf("messages: unknown chunk type %q", t)
	}
	return c, nil
}

// Type returns the chunk type.
func (c StreamChunk) Type() ChunkType { return c.typ }

// Index returns the block index of a block chunk.
func (c StreamChunk) Index() int { return c.index }

// BlockType returns the block type of a block-start chunk.
func (c StreamChunk) BlockType() BlockType { return c.x().blockType }

// Text returns the text of a text or reasoning delta.
func (c StreamChunk) Text() string { return c.text }

// ArgumentsDelta returns the argument text of a tool-call delta.
func (c StreamChunk) ArgumentsDelta() string { return c.text }

// CallID returns the call id of a tool-call delta.
func (c StreamChunk) CallID() string { return c.id }

// Name returns the tool name of a tool-call delta, and whether it has one.
func (c StreamChunk) Name() (string, bool) { return c.x().name, c.x().hasName }

// Block returns the assembled block of a block-end chunk.
func (c StreamChunk) Block() ContentBlock { return c.x().block }

// Usage returns the usage of a usage chunk.
func (c StreamChunk) Usage() TokenUsage { return c.x().usage }

// Reason returns the finish reason of a finish chunk.
func (c StreamChunk) Reason() FinishReason { return c.x().reason }

// ReplayState returns the replay envelope of a finish chunk (zero if none).
func (c StreamChunk) ReplayState() JSON { return c.x().replayState }

// IsTokenDelta reports whether the chunk marks the first-token boundary: a
// non-empty text or reasoning delta, or a tool-call delta with arguments or
// a name (docs/messages.md#messages-and-content-blocks).
func (c StreamChunk) IsTokenDelta() bool {
	switch c.typ {
	case ChunkTextDelta, ChunkReasoningDelta:
		return c.text != ""
	case ChunkToolCallDelta:
		return c.text != "" || c.x().hasName
	}
	return false
}

// JSON returns the chunk's canonical JSON.
func (c StreamChunk) JSON() JSON { return c.raw }

// MarshalJSON implements json.Marshaler.
func (c StreamChunk) MarshalJSON() ([]byte, error) { return c.raw.MarshalJSON() }
