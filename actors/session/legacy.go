package session

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/dshgo/dsh/messages"
)

// Legacy migration on read (docs/log-format.md, "Older shapes"): when a
// stored record does not decode as a current event, the reader asks
// migrateLegacy whether it is one of the older shapes the reference
// upgrades when it loads a log. If it is, the record is rewritten to the
// current shape and decoded as usual (and validated by the log like any
// other event); if it is not, the record's own decode error stands: a
// current-looking but malformed event is corruption, never legacy.
//
// Migration happens only when a stored log is read (ReadFile, Read,
// ParseFile, and so every load of a session); DecodeEvent and the log's
// Append keep refusing the old shapes, so dsh never writes one.

// errNotLegacy says a record is not an older shape.
var errNotLegacy = errors.New("not a legacy shape")

// legacyMessageID is the id the reference mints for a migrated message
// that had none: "legacy-message:<sessionId>:<seq>".
func legacyMessageID(id SessionID, seq int64) messages.MessageID {
	return messages.MessageID("legacy-message:" + string(id) + ":" + strconv.FormatInt(seq, 10))
}

// migrateLegacy rewrites the record j (an event envelope of session sid)
// from an older shape to the current one. at looks up an event read
// earlier in the same log, by seq (for a replacing tool result, which
// inherits its start node's message id). It returns errNotLegacy when j is
// not an older shape, another error when it is one that does not migrate.
func migrateLegacy(j messages.JSON, sid SessionID, at func(int64) (Event, bool)) (messages.JSON, error) {
	if j.Kind() != messages.KindObject {
		return messages.JSON{}, errNotLegacy
	}
	tj, _ := j.Field("type")
	typ, _ := tj.AsString()
	data, hasData := j.Field("data")
	if !hasData || data.Kind() != messages.KindObject {
		return messages.JSON{}, errNotLegacy
	}
	seqJ, _ := j.Field("seq")
	seq, ok := seqJ.AsInt()
	if !ok || seq < 0 {
		return messages.JSON{}, errNotLegacy
	}
	op, hasOp := j.Field("surfaceOp")
	var (
		newType = EventType(typ)
		newData messages.JSON
		err     error
	)
	switch EventType(typ) {
	case TypeTurnStart:
		newData, err = legacyTurnStart(data)
	case TypeTurnEnd:
		newData, err = legacyTurnEnd(data)
	case "steering/message":
		newType = TypeUserMessage
		newData, err = legacySteering(data, sid, seq)
	case TypeUserMessage:
		if !has(data, "id") || !has(data, "role") {
			newData, err = legacyUser(data, sid, seq)
		} else {
			err = errNotLegacy
		}
	case TypeAssistantMessage:
		if !has(data, "message") && has(data, "content") {
			newData, err = legacyAssistant(data, sid, seq)
		} else {
			err = errNotLegacy
		}
	case TypeToolResult:
		if !has(data, "message") && has(data, "callId") {
			id := legacyMessageID(sid, seq)
			if hasOp {
				if sop, perr := parseSurfaceOp(op); perr == nil && sop.Kind() == OpReplace {
					start, _ := sop.Range()
					old, found := at(start)
					m, isMsg := old.Message()
					if !found || !isMsg {
						return messages.JSON{}, fmt.Errorf("legacy tool/result replaces seq %d, which holds no message to take the id of", start)
					}
					id = m.ID()
				}
			}
			newData, err = legacyToolResult(data, id)
		} else {
			err = errNotLegacy
		}
	default:
		err = errNotLegacy
	}
	if err != nil {
		return messages.JSON{}, err
	}
	var o messages.ObjectBuilder
	for k, v := range j.Members() {
		switch k {
		case "type":
			o.String("type", string(newType))
		case "data":
			o.Raw("data", newData)
		default:
			o.Raw(k, v)
		}
	}
	if newType.IsSurface() && !hasOp {
		// An older writer's surface event without a surfaceOp appended.
		o.String("surfaceOp", "append")
	}
	return o.Build(), nil
}

func has(j messages.JSON, k string) bool {
	_, ok := j.Field(k)
	return ok
}

// copyExcept copies the members of j into o, except the keys in skip.
func copyExcept(o *messages.ObjectBuilder, j messages.JSON, skip ...string) {
	for k, v := range j.Members() {
		keep := true
		for _, s := range skip {
			if k == s {
				keep = false
				break
			}
		}
		if keep {
			o.Raw(k, v)
		}
	}
}

// legacyTurnStart: {turn, trigger:{kind,…}} becomes {turn}; any other key
// beside them makes the event malformed.
func legacyTurnStart(data messages.JSON) (messages.JSON, error) {
	tr, ok := data.Field("trigger")
	if !ok {
		return messages.JSON{}, errNotLegacy
	}
	keys := data.Keys()
	if len(keys) != 2 || !has(data, "turn") {
		return messages.JSON{}, fmt.Errorf("legacy turn/start must hold exactly turn and trigger, not %v", keys)
	}
	if k, _ := tr.Field("kind"); tr.Kind() != messages.KindObject || k.Kind() != messages.KindString {
		return messages.JSON{}, fmt.Errorf("legacy turn/start trigger %s is not an object with a kind", tr)
	}
	turn, _ := data.Field("turn")
	var o messages.ObjectBuilder
	o.Raw("turn", turn)
	return o.Build(), nil
}

// legacyTurnEnd rewrites the older reasons: aborted without a cause
// (cause legacy), disposed (aborted by disposal), and the two older error
// shapes {step, failure} and {step, message, code?}.
func legacyTurnEnd(data messages.JSON) (messages.JSON, error) {
	r, ok := data.Field("reason")
	if !ok || r.Kind() != messages.KindObject {
		return messages.JSON{}, errNotLegacy
	}
	kj, _ := r.Field("kind")
	kind, _ := kj.AsString()
	var reason messages.JSON
	switch {
	case kind == string(EndAborted) && !has(r, "reason"):
		if len(r.Keys()) != 1 {
			return messages.JSON{}, fmt.Errorf("legacy turn/end aborted reason %s holds more than its kind", r)
		}
		reason = messages.MustParseJSON(`{"kind":"aborted","reason":{"kind":"legacy"}}`)
	case kind == string(CauseDisposed):
		if len(r.Keys()) != 1 {
			return messages.JSON{}, fmt.Errorf("legacy turn/end disposed reason %s holds more than its kind", r)
		}
		reason = messages.MustParseJSON(`{"kind":"aborted","reason":{"kind":"disposed"}}`)
	case kind == string(EndError) && !has(r, "error") && has(r, "failure"):
		if !onlyKeys(r, "kind", "step", "failure") {
			return messages.JSON{}, fmt.Errorf("legacy turn/end error reason %s is not {kind, step, failure}", r)
		}
		f, _ := r.Field("failure")
		var o messages.ObjectBuilder
		o.String("kind", string(EndError)).Raw("error", f)
		reason = o.Build()
	case kind == string(EndError) && !has(r, "error") && has(r, "message"):
		if !onlyKeys(r, "kind", "step", "message", "code") {
			return messages.JSON{}, fmt.Errorf("legacy turn/end error reason %s is not {kind, step, message, code?}", r)
		}
		msg, _ := r.Field("message")
		code, hasCode := r.Field("code")
		if !hasCode {
			code = messages.JSONString("UNKNOWN")
		}
		var e, o messages.ObjectBuilder
		e.Raw("message", msg).Raw("code", code)
		o.String("kind", string(EndError)).Object("error", &e)
		reason = o.Build()
	default:
		return messages.JSON{}, errNotLegacy
	}
	var o messages.ObjectBuilder
	for k, v := range data.Members() {
		if k == "reason" {
			v = reason
		}
		o.Raw(k, v)
	}
	return o.Build(), nil
}

func onlyKeys(j messages.JSON, allowed ...string) bool {
	for _, k := range j.Keys() {
		found := false
		for _, a := range allowed {
			if k == a {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// legacySteering: {turn, message} becomes a user/message whose data is the
// message; {turn, content, source} one with a minted id.
func legacySteering(data messages.JSON, sid SessionID, seq int64) (messages.JSON, error) {
	switch {
	case has(data, "message"):
		if !onlyKeys(data, "turn", "message") || !has(data, "turn") {
			return messages.JSON{}, fmt.Errorf("legacy steering/message must hold exactly turn and message")
		}
		m, _ := data.Field("message")
		if m.Kind() != messages.KindObject {
			return messages.JSON{}, fmt.Errorf("legacy steering/message message is not an object")
		}
		return m, nil
	case has(data, "content"):
		if !onlyKeys(data, "turn", "content", "source") || !has(data, "turn") || !has(data, "source") {
			return messages.JSON{}, fmt.Errorf("legacy steering/message must hold exactly turn, content and source")
		}
		c, _ := data.Field("content")
		s, _ := data.Field("source")
		var o messages.ObjectBuilder
		o.String("id", string(legacyMessageID(sid, seq))).String("role", string(messages.RoleUser)).Raw("content", c).Raw("source", s)
		return o.Build(), nil
	}
	return messages.JSON{}, fmt.Errorf("legacy steering/message holds neither a message nor content")
}

// legacyUser: a user/message without id or role gets the minted id (when
// it has none) and role user.
func legacyUser(data messages.JSON, sid SessionID, seq int64) (messages.JSON, error) {
	if r, ok := data.Field("role"); ok && r.String() != `"user"` {
		return messages.JSON{}, fmt.Errorf("legacy user/message has role %s", r)
	}
	var o messages.ObjectBuilder
	if id, ok := data.Field("id"); ok {
		o.Raw("id", id)
	} else {
		o.String("id", string(legacyMessageID(sid, seq)))
	}
	o.String("role", string(messages.RoleUser))
	copyExcept(&o, data, "id", "role")
	return o.Build(), nil
}

// legacyAssistant: {content, provenance, …} becomes {…, message:{id, role
// assistant, content, source: provenance with kind model}}.
func legacyAssistant(data messages.JSON, sid SessionID, seq int64) (messages.JSON, error) {
	prov, ok := data.Field("provenance")
	if !ok || prov.Kind() != messages.KindObject {
		return messages.JSON{}, fmt.Errorf("legacy assistant/message lacks a provenance object")
	}
	c, _ := data.Field("content")
	var src messages.ObjectBuilder
	copyExcept(&src, prov, "kind")
	src.String("kind", string(messages.SourceModel))
	var m messages.ObjectBuilder
	m.String("id", string(legacyMessageID(sid, seq))).String("role", string(messages.RoleAssistant)).
		Raw("content", c).Object("source", &src)
	var o messages.ObjectBuilder
	copyExcept(&o, data, "content", "provenance")
	o.Object("message", &m)
	return o.Build(), nil
}

// legacyToolResult: {callId, content, isError, …} becomes {…, message:
// the tool-result message with id}.
func legacyToolResult(data messages.JSON, id messages.MessageID) (messages.JSON, error) {
	cj, _ := data.Field("callId")
	if cj.Kind() != messages.KindString {
		return messages.JSON{}, fmt.Errorf("legacy tool/result callId is not a string")
	}
	c, ok := data.Field("content")
	if !ok {
		return messages.JSON{}, fmt.Errorf("legacy tool/result lacks content")
	}
	isErr := messages.MustParseJSON("false")
	if v, ok := data.Field("isError"); ok {
		if _, isBool := v.AsBool(); !isBool {
			return messages.JSON{}, fmt.Errorf("legacy tool/result isError is not a boolean")
		}
		isErr = v
	}
	var block, src, m messages.ObjectBuilder
	block.String("type", string(messages.BlockToolResult)).Raw("toolCallId", cj).Raw("content", c).Raw("isError", isErr)
	src.String("kind", string(messages.SourceTool)).Raw("callId", cj)
	m.String("id", string(id)).String("role", string(messages.RoleUser)).
		Raw("content", messages.MustParseJSON("["+block.Build().String()+"]")).Object("source", &src)
	var o messages.ObjectBuilder
	copyExcept(&o, data, "callId", "content", "isError")
	o.Object("message", &m)
	return o.Build(), nil
}
