package spans

import (
	"crypto/sha256"
	"encoding/binary"

	"go.opentelemetry.io/otel/trace"

	"github.com/dshgo/dsh/actors/session"
)

// A span's position in its session: the turn, the step in the turn (0 for
// the turn's own span), the model call attempt in the step (0 for a step or
// a tool call) and the tool call id ("" for the others).
// kind tells the four kinds apart, so that, say, a tool call whose id is
// empty never shares its step's id.
type position struct {
	kind                byte
	turn, step, attempt int64
	call                string
}

// The position kinds.
const (
	kindTurn byte = 1 + iota
	kindStep
	kindModel
	kindTool
)

// TraceID returns the trace of a session's turn: one trace per turn,
// rooted at the turn's span. It is a hash of the session id and the turn
// number only, so every reader of the same log, live or later, derives the
// same id. A trace per session was rejected: a session lives for days and
// its trace would never end, and a backend shows a trace once its root has
// ended.
func TraceID(id session.SessionID, turn int64) trace.TraceID {
	var t trace.TraceID
	sum := hashPosition("dsh.trace", id, position{kind: kindTurn, turn: turn})
	copy(t[:], sum[:len(t)])
	if !t.IsValid() {
		t[len(t)-1] = 1 // an all-zero id is invalid in OpenTelemetry
	}
	return t
}

// spanID returns the span id of the span at pos in session id.
func spanID(id session.SessionID, pos position) trace.SpanID {
	var s trace.SpanID
	sum := hashPosition("dsh.span", id, pos)
	copy(s[:], sum[:len(s)])
	if !s.IsValid() {
		s[len(s)-1] = 1
	}
	return s
}

// hashPosition hashes a domain tag, the session id and a position, each
// string length-prefixed so that no two positions encode alike.
func hashPosition(domain string, id session.SessionID, pos position) [sha256.Size]byte {
	var buf [128]byte
	b := buf[:0]
	b = appendString(b, domain)
	b = appendString(b, string(id))
	b = append(b, pos.kind)
	b = binary.BigEndian.AppendUint64(b, uint64(pos.turn))
	b = binary.BigEndian.AppendUint64(b, uint64(pos.step))
	b = binary.BigEndian.AppendUint64(b, uint64(pos.attempt))
	b = appendString(b, pos.call)
	return sha256.Sum256(b)
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// TurnSpanID returns the span id of a turn's span.
func TurnSpanID(id session.SessionID, turn int64) trace.SpanID {
	return spanID(id, position{kind: kindTurn, turn: turn})
}

// StepSpanID returns the span id of a step's span.
func StepSpanID(id session.SessionID, turn, step int64) trace.SpanID {
	return spanID(id, position{kind: kindStep, turn: turn, step: step})
}

// ModelCallSpanID returns the span id of a step's model call attempt
// (numbered from 1).
func ModelCallSpanID(id session.SessionID, turn, step, attempt int64) trace.SpanID {
	return spanID(id, position{kind: kindModel, turn: turn, step: step, attempt: attempt})
}

// ToolCallSpanID returns the span id of a step's tool call.
func ToolCallSpanID(id session.SessionID, turn, step int64, callID string) trace.SpanID {
	return spanID(id, position{kind: kindTool, turn: turn, step: step, call: callID})
}
