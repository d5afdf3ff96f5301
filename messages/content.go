package messages

import (
	"fmt"
	"iter"
	"slices"
)

// BlockType names the kind of a content block.
type BlockType string

// The block types of the harness vocabulary
// (docs/messages.md#messages-and-content-blocks).
const (
	BlockText       BlockType = "text"
	BlockReasoning  BlockType = "reasoning"
	BlockToolCall   BlockType = "tool-call"
	BlockToolResult BlockType = "tool-result"
	BlockImage      BlockType = "image"
)

// optBool is a boolean that remembers whether it was present, so that a
// tool-result block written without isError round-trips without one.
type optBool uint8

const (
	boolAbsent optBool = iota
	boolFalse
	boolTrue
)

// ContentBlock is one immutable block of message content. Build one with
// TextBlock, ReasoningBlock, ToolCallBlock, ToolResultBlock or ImageBlock,
// or read one with ParseContentBlock. It is safe for concurrent use.
//
// A block keeps its canonical JSON, so a block read from a log encodes back
// exactly as it was read.
//
// The zero ContentBlock is no block at all (it has no JSON). Constructors
// that take a list of blocks leave zero blocks out, rather than writing a
// null that no reader, ParseContentBlock included, would accept.
type ContentBlock struct {
	typ        BlockType
	text       string // text, reasoning
	id         string // tool-call
	name       string // tool-call
	arguments  string // tool-call: the model's raw string, never parsed
	toolCallID string // tool-result
	content    []ContentBlock
	isError    optBool
	attachment JSON // image: an opaque reference, kept verbatim
	raw        JSON
}

// TextBlock returns a text block.
func TextBlock(text string) ContentBlock {
	var o ObjectBuilder
	return ContentBlock{typ: BlockText, text: text,
		raw: o.String("type", string(BlockText)).String("text", text).Build()}
}

// ReasoningBlock returns a reasoning (thinking) block.
func ReasoningBlock(text string) ContentBlock {
	var o ObjectBuilder
	return ContentBlock{typ: BlockReasoning, text: text,
		raw: o.String("type", string(BlockReasoning)).String("text", text).Build()}
}

// ToolCallBlock returns a tool-call block. arguments is the model's raw
// argument string; it is never parsed.
func ToolCallBlock(id, name, arguments string) ContentBlock {
	var o ObjectBuilder
	o.String("type", string(BlockToolCall)).String("id", id).String("name", name).String("arguments", arguments)
	return ContentBlock{typ: BlockToolCall, id: id, name: name, arguments: arguments, raw: o.Build()}
}

// ToolOutcome says whether a tool result reports success or an error: the
// tool-result block's isError. A named type, so that a call says which:
// ToolResultBlock(id, content, ToolFailed).
type ToolOutcome bool

// The tool outcomes.
const (
	ToolSucceeded ToolOutcome = false
	ToolFailed    ToolOutcome = true
)

// ToolResultBlock returns a tool-result block answering callID, with
// isError true when outcome is ToolFailed. The content slice is copied; the
// caller keeps ownership of it.
func ToolResultBlock(callID string, content []ContentBlock, outcome ToolOutcome) ContentBlock {
	content = cloneBlocks(content)
	isError := outcome == ToolFailed
	e := boolFalse
	if isError {
		e = boolTrue
	}
	var o ObjectBuilder
	o.String("type", string(BlockToolResult)).String("toolCallId", callID).
		Raw("content", blocksJSON(content)).Bool("isError", isError)
	return ContentBlock{typ: BlockToolResult, toolCallID: callID, content: content, isError: e, raw: o.Build()}
}

// ImageBlock returns an image block holding an opaque attachment reference.
func ImageBlock(attachment JSON) (ContentBlock, error) {
	if attachment.Kind() != KindObject {
		return ContentBlock{}, fmt.Errorf("messages: image attachment must be an object")
	}
	var o ObjectBuilder
	o.String("type", string(BlockImage)).Raw("attachment", attachment)
	return ContentBlock{typ: BlockImage, attachment: attachment, raw: o.Build()}, nil
}

// ParseContentBlock reads a block from its JSON form. Blocks of the five
// known types are checked field by field; a block of another type (the map
// is extensible in the reference) is kept verbatim.
func ParseContentBlock(j JSON) (ContentBlock, error) {
	if j.Kind() != KindObject {
		return ContentBlock{}, fmt.Errorf("messages: content block is not an object")
	}
	t, ok := stringField(j, "type")
	if !ok || t == "" {
		return ContentBlock{}, fmt.Errorf("messages: content block lacks a string type")
	}
	b := ContentBlock{typ: BlockType(t), raw: j}
	switch b.typ {
	case BlockText, BlockReasoning:
		if b.text, ok = stringField(j, "text"); !ok {
			return ContentBlock{}, fmt.Errorf("messages: %s block lacks a string text", t)
		}
	case BlockToolCall:
		for _, f := range []struct {
			key string
			dst *string
		}{{"id", &b.id}, {"name", &b.name}, {"arguments", &b.arguments}} {
			if *f.dst, ok = stringField(j, f.key); !ok {
				return ContentBlock{}, fmt.Errorf("messages: tool-call block lacks a string %s", f.key)
			}
		}
	case BlockToolResult:
		if b.toolCallID, ok = stringField(j, "toolCallId"); !ok {
			return ContentBlock{}, fmt.Errorf("messages: tool-result block lacks a string toolCallId")
		}
		c, ok := j.Field("content")
		if !ok || c.Kind() != KindArray {
			return ContentBlock{}, fmt.Errorf("messages: tool-result block lacks a content array")
		}
		var err error
		if b.content, err = parseBlocks(c); err != nil {
			return ContentBlock{}, err
		}
		if e, ok := j.Field("isError"); ok {
			v, isBool := e.AsBool()
			if !isBool {
				return ContentBlock{}, fmt.Errorf("messages: tool-result isError is not a boolean")
			}
			b.isError = boolFalse
			if v {
				b.isError = boolTrue
			}
		}
	case BlockImage:
		a, ok := j.Field("attachment")
		if !ok || a.Kind() != KindObject {
			return ContentBlock{}, fmt.Errorf("messages: image block lacks an attachment object")
		}
		b.attachment = a
	}
	return b, nil
}

func parseBlocks(arr JSON) ([]ContentBlock, error) {
	var out []ContentBlock
	for e := range arr.Elements() {
		b, err := ParseContentBlock(e)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// IsZero reports whether b is the zero ContentBlock (no block).
func (b ContentBlock) IsZero() bool { return b.raw.IsZero() }

// Type returns the block's type.
func (b ContentBlock) Type() BlockType { return b.typ }

// Text returns the text of a text or reasoning block ("" otherwise).
func (b ContentBlock) Text() string { return b.text }

// ID returns the call id of a tool-call block.
func (b ContentBlock) ID() string { return b.id }

// Name returns the tool name of a tool-call block.
func (b ContentBlock) Name() string { return b.name }

// Arguments returns the raw argument string of a tool-call block.
func (b ContentBlock) Arguments() string { return b.arguments }

// ToolCallID returns the call a tool-result block answers.
func (b ContentBlock) ToolCallID() string { return b.toolCallID }

// IsError reports whether a tool-result block is marked as an error.
func (b ContentBlock) IsError() bool { return b.isError == boolTrue }

// Content returns a copy of the nested content of a tool-result block,
// owned by the caller.
func (b ContentBlock) Content() []ContentBlock { return slices.Clone(b.content) }

// NestedBlocks iterates the nested content of a tool-result block.
func (b ContentBlock) NestedBlocks() iter.Seq[ContentBlock] { return slices.Values(b.content) }

// Attachment returns the opaque attachment reference of an image block.
func (b ContentBlock) Attachment() JSON { return b.attachment }

// JSON returns the block's canonical JSON.
func (b ContentBlock) JSON() JSON { return b.raw }

// MarshalJSON implements json.Marshaler.
func (b ContentBlock) MarshalJSON() ([]byte, error) { return b.raw.MarshalJSON() }

// Equal reports whether two blocks are the same JSON value.
func (b ContentBlock) Equal(o ContentBlock) bool { return b.raw.Equal(o.raw) }

// WithNestedContent returns a copy of a tool-result block whose nested
// content is replaced and everything else kept (the pruner's rewrite,
// docs/session-log.md#the-surface). It fails for other block types.
func (b ContentBlock) WithNestedContent(content []ContentBlock) (ContentBlock, error) {
	if b.typ != BlockToolResult {
		return ContentBlock{}, fmt.Errorf("messages: %s block has no nested content", b.typ)
	}
	content = cloneBlocks(content)
	n := b
	n.content = content
	n.raw = replaceMember(b.raw, "content", blocksJSON(content))
	return n, nil
}

// replaceMember returns obj with the value of member key replaced by v,
// every other member (key, order, spelling) kept as it was. obj must have
// the member.
func replaceMember(obj JSON, key string, v JSON) JSON {
	b := make([]byte, 0, len(obj.text)+len(v.text))
	b = append(b, '{')
	for lit, val := range rawMembers(obj.text) {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, lit...)
		b = append(b, ':')
		if unquote(lit) == key {
			val = v.text
		}
		b = append(b, val...)
	}
	return JSON{text: string(append(b, '}'))}
}

// cloneBlocks copies a caller's block list, leaving out zero blocks; the
// result is owned by the package.
func cloneBlocks(bs []ContentBlock) []ContentBlock {
	out := make([]ContentBlock, 0, len(bs))
	for _, b := range bs {
		if !b.IsZero() {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func blocksJSON(bs []ContentBlock) JSON {
	raws := make([]JSON, len(bs))
	for i, c := range bs {
		raws[i] = c.raw
	}
	return ArrayOf(raws...)
}

func stringField(j JSON, key string) (string, bool) {
	v, ok := j.Field(key)
	if !ok {
		return "", false
	}
	return v.AsString()
}
