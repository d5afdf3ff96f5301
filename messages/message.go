package messages

import (
	"fmt"
	"iter"
	"slices"

	"github.com/google/uuid"
)

// MessageID is the stable identity of a message across inbox, log and
// request. It is minted once, at creation, and never changes.
type MessageID string

// Role is the conversational role of a message. A tool result is a
// user-role message (docs/messages.md#messages-and-content-blocks).
type Role string

// The roles dsh produces and reads. The reference's type also names
// "system", but nothing in a log carries it: the system prompt travels in the
// request header.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// Message is an immutable message: id, role, content and source, all
// required. Build one with NewUserMessage, NewAssistantMessage or
// NewToolResultMessage (which mint the id) or ImportMessage (which keeps a
// given id). Getters never expose internal storage. Safe for concurrent use.
//
// A Message keeps its canonical JSON, so a message read from a log encodes
// back exactly as it was read.
type Message struct {
	id      MessageID
	role    Role
	content []ContentBlock
	source  Source
	raw     JSON
}

// newMessageID mints a fresh id (a random UUID).
func newMessageID() MessageID { return MessageID(uuid.NewString()) }

func build(id MessageID, role Role, content []ContentBlock, src Source) Message {
	content = cloneBlocks(content)
	var o ObjectBuilder
	o.String("id", string(id)).String("role", string(role)).
		Raw("content", blocksJSON(content)).Raw("source", src.raw)
	return Message{id: id, role: role, content: content, source: src, raw: o.Build()}
}

// NewUserMessage returns a user-role message with a fresh id. The content
// slice is copied; the caller keeps ownership of it. The source may be any
// kind but model or tool (those belong to assistant and tool-result
// messages).
func NewUserMessage(content []ContentBlock, source Source) (Message, error) {
	switch {
	case source.IsZero():
		return Message{}, fmt.Errorf("messages: user message needs a source")
	case source.kind == SourceModel || source.kind == SourceTool:
		return Message{}, fmt.Errorf("messages: user message may not have a %s source", source.kind)
	}
	return build(newMessageID(), RoleUser, content, source), nil
}

// NewAssistantMessage returns an assistant message with a fresh id and a
// model source. The content slice is copied.
func NewAssistantMessage(content []ContentBlock, src ModelSource) (Message, error) {
	s, err := newModelSource(src)
	if err != nil {
		return Message{}, err
	}
	return build(newMessageID(), RoleAssistant, content, s), nil
}

// NewToolResultMessage returns the user-role message that carries a tool's
// result: source tool{callID} and exactly one tool-result block answering
// callID with the given content and outcome. The content slice is copied.
func NewToolResultMessage(callID string, content []ContentBlock, outcome ToolOutcome) Message {
	return build(newMessageID(), RoleUser, []ContentBlock{ToolResultBlock(callID, content, outcome)}, ToolSource(callID))
}

// ImportMessage builds a message that already has an id: from a log, a
// fixture, or a synthetic repair result. It is the only constructor that
// accepts an id. j must be an object with a non-empty string id, a role of
// user or assistant, a content array and a source object; other members are
// kept verbatim.
func ImportMessage(j JSON) (Message, error) {
	if j.Kind() != KindObject {
		return Message{}, fmt.Errorf("messages: message is not an object")
	}
	id, ok := stringField(j, "id")
	if !ok || id == "" {
		return Message{}, fmt.Errorf("messages: message lacks a non-empty string id")
	}
	role, _ := stringField(j, "role")
	if Role(role) != RoleUser && Role(role) != RoleAssistant {
		return Message{}, fmt.Errorf("messages: message %s has role %q, want user or assistant", id, role)
	}
	c, ok := j.Field("content")
	if !ok || c.Kind() != KindArray {
		return Message{}, fmt.Errorf("messages: message %s lacks a content array", id)
	}
	content, err := parseBlocks(c)
	if err != nil {
		return Message{}, fmt.Errorf("messages: message %s: %w", id, err)
	}
	sj, ok := j.Field("source")
	if !ok {
		return Message{}, fmt.Errorf("messages: message %s lacks a source", id)
	}
	src, err := parseSource(sj)
	if err != nil {
		return Message{}, fmt.Errorf("messages: message %s: %w", id, err)
	}
	return Message{id: MessageID(id), role: Role(role), content: content, source: src, raw: j}, nil
}

// ID returns the message id.
func (m Message) ID() MessageID { return m.id }

// Role returns the message role.
func (m Message) Role() Role { return m.role }

// Source returns the message source.
func (m Message) Source() Source { return m.source }

// Content returns a copy of the content blocks, owned by the caller.
func (m Message) Content() []ContentBlock { return slices.Clone(m.content) }

// Blocks iterates the content blocks without copying the list.
func (m Message) Blocks() iter.Seq[ContentBlock] { return slices.Values(m.content) }

// NumBlocks returns the number of content blocks.
func (m Message) NumBlocks() int { return len(m.content) }

// Block returns content block i.
func (m Message) Block(i int) ContentBlock { return m.content[i] }

// IsZero reports whether m is the zero Message.
func (m Message) IsZero() bool { return m.id == "" }

// JSON returns the message's canonical JSON.
func (m Message) JSON() JSON { return m.raw }

// MarshalJSON implements json.Marshaler.
func (m Message) MarshalJSON() ([]byte, error) { return m.raw.MarshalJSON() }

// Equal reports whether two messages are the same JSON value (ids
// included).
func (m Message) Equal(o Message) bool { return m.raw.Equal(o.raw) }

// WithContent returns a message with the same id, role and source and new
// content: the rewrite a pre-step hook makes (rewriting keeps the id:
// docs/architecture.md#values). Only the content changes: members of an
// imported message that dsh does not interpret stay, in their place. The
// content slice is copied; zero blocks are left out.
func (m Message) WithContent(content []ContentBlock) Message {
	if _, ok := m.raw.Field("content"); !ok { // the zero Message
		return build(m.id, m.role, content, m.source)
	}
	content = cloneBlocks(content)
	n := m
	n.content = content
	n.raw = replaceMember(m.raw, "content", blocksJSON(content))
	return n
}
