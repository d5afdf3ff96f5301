package session

// EventType names an event. The log's vocabulary is the reference's
// KNOWN_SESSION_EVENT_TYPES (48 names) plus the three log-only types its
// later format-0 releases added (51 names, docs/log-format.md); dsh
// produces the core subset and keeps the rest verbatim as foreign events.
type EventType string

// The core event types dsh produces (docs/architecture.md#the-session-log).
const (
	TypeTurnStart        EventType = "turn/start"
	TypeTurnEnd          EventType = "turn/end"
	TypeStepStart        EventType = "step/start"
	TypeStepEnd          EventType = "step/end"
	TypeUserMessage      EventType = "user/message"
	TypeAssistantChunk   EventType = "assistant/chunk"
	TypeAssistantMessage EventType = "assistant/message"
	TypeToolCall         EventType = "tool/call"
	TypeToolResult       EventType = "tool/result"
	TypeRequestHeader    EventType = "request/header"
	TypeRequestContext   EventType = "request/context"
	TypeInboxSpliced     EventType = "agent/inbox/spliced"
	TypeEndSeed          EventType = "session/end-seed"
	TypeTodoWrite        EventType = "todo/write"
	TypeLlmRetry         EventType = "llm/retry"
	TypeLlmRetryStarted  EventType = "llm/retry-started"
	TypeCompactionStart  EventType = "compaction/start"
	TypeCompactionSum    EventType = "compaction/summary"
	TypeCompactionPrune  EventType = "compaction/prune"
	TypeCompactionEnd    EventType = "compaction/end"
)

// knownTypes is the reference's whole known vocabulary, sorted: the 48
// names of the release the corpus comes from, and model/selection,
// subagent/model-selection-policy and
// session-log-deepseek/delivery-accepted, which later releases write
// without a version bump (docs/log-format.md).
var knownTypes = []EventType{
	"agent-preset/selected", "agent/inbox/spliced", "approval/asked", "approval/decided",
	"approval/policy", "assistant/chunk", "assistant/message", "command/done", "command/run",
	"compaction/end", "compaction/prune", "compaction/start", "compaction/summary",
	"feedback/record", "goal/change", "hook/invoked", "hook/result", "llm/retry",
	"llm/retry-started", "model/selection", "permission/preset", "plan/mode", "request/context", "request/header",
	"sandbox/mode", "schedule/change", "session-log-deepseek/delivery-accepted",
	"session/end-seed", "session/title", "session/title-llm-request", "step/end", "step/start",
	"subagent/descriptor", "subagent/model-selection-policy", "team/member",
	"team/message/delivered", "team/message/queued", "team/task", "todo/write",
	"tool-workflow/agent-end", "tool-workflow/agent-start", "tool-workflow/run-end",
	"tool-workflow/run-start", "tool/call", "tool/code-dispatch", "tool/code-dispatch-start",
	"tool/result", "turn/end", "turn/start", "user/message", "web/deepseek-search-llm-request",
}

// coreTypes are the types dsh itself produces.
var coreTypes = []EventType{
	TypeTurnStart, TypeTurnEnd, TypeStepStart, TypeStepEnd, TypeUserMessage, TypeAssistantChunk,
	TypeAssistantMessage, TypeToolCall, TypeToolResult, TypeRequestHeader, TypeRequestContext,
	TypeInboxSpliced, TypeEndSeed, TypeTodoWrite, TypeLlmRetry, TypeLlmRetryStarted,
	TypeCompactionStart, TypeCompactionSum, TypeCompactionPrune, TypeCompactionEnd,
}

// legacyTypes were removed from the vocabulary: an append or a decoded
// line refuses them; reading a stored log migrates steering/message to a
// user/message and refuses the other two (docs/log-format.md, "Older
// shapes").
var legacyTypes = []EventType{"request/header-delta", "mode/set", "steering/message"}

// typeClass is what the lists above say about one type name, as bits.
type typeClass uint8

const (
	classKnown typeClass = 1 << iota
	classCore
	classLegacy
	classRowTag
)

// typeClasses indexes the lists by name: every event of a log is checked
// against them when it is committed (a load commits them all), where a
// search of each list cost more than the rest of the commit. Names in none
// of the lists are absent (class 0).
var typeClasses = func() map[EventType]typeClass {
	m := make(map[EventType]typeClass, len(knownTypes)+len(legacyTypes)+len(rowTags))
	for _, list := range []struct {
		types []EventType
		class typeClass
	}{{knownTypes, classKnown}, {coreTypes, classCore}, {legacyTypes, classLegacy}, {rowTags, classRowTag}} {
		for _, t := range list.types {
			m[t] |= list.class
		}
	}
	return m
}()

func (t EventType) class() typeClass {
	if t == TypeAssistantChunk { // most events: no hashing for them
		return classKnown | classCore
	}
	return typeClasses[t]
}

// IsKnown reports whether t is in the reference's known vocabulary.
func (t EventType) IsKnown() bool { return t.class()&classKnown != 0 }

// IsCore reports whether dsh produces t (and decodes its data into a typed
// payload).
func (t EventType) IsCore() bool { return t.class()&classCore != 0 }

// IsForeign reports whether t is known to the reference but not produced by
// dsh: such events are accepted and kept verbatim, never produced.
func (t EventType) IsForeign() bool { return t.IsKnown() && !t.IsCore() }

// IsSurface reports whether events of type t take part in the surface
// (produce a model-visible message).
func (t EventType) IsSurface() bool {
	return t == TypeUserMessage || t == TypeAssistantMessage || t == TypeToolResult
}

func (t EventType) isLegacy() bool { return t.class()&classLegacy != 0 }

// rowTags are the storage tags of packed chunk rows (chunkrows.go). The log
// refuses them as the types of events not marked ignorable; an ignorable
// one is a foreign event the SQLite format holds, which a JSONL log cannot
// (a reader would take it for a malformed row: CheckJSONL).
var rowTags = []EventType{"text-chunks", "reasoning-chunks", "tool-call-chunks"}

func (t EventType) isRowTag() bool { return t.class()&classRowTag != 0 }

// typeCode is an event type as an Event keeps it: one byte, an index into
// typeNames for the known vocabulary, typeOther for any other name (kept
// in the event's ext), typeNone for the zero Event.
type typeCode uint8

const (
	typeNone  typeCode = 0
	typeOther typeCode = 255
)

// typeNames maps a code to its name; typeCodeOf the other way.
var typeNames, typeCodeOf, codeChunk = func() ([256]EventType, map[EventType]typeCode, typeCode) {
	var names [256]EventType
	codes := make(map[EventType]typeCode, len(knownTypes))
	for i, t := range knownTypes {
		names[i+1] = t
		codes[t] = typeCode(i + 1)
	}
	return names, codes, codes[TypeAssistantChunk]
}()

// codeOf returns t's code.
func codeOf(t EventType) typeCode {
	if t == TypeAssistantChunk { // most events: no hashing for them
		return codeChunk
	}
	if t == "" {
		return typeNone
	}
	if c, ok := typeCodeOf[t]; ok {
		return c
	}
	return typeOther
}
