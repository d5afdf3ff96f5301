package logreplay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/dshgo/dsh/actors/session"
)

// Divergence is the first place where the replayed log differs from the
// recording. Position counts events from 0 in the compared order (the
// recorded seq, except inside a reordered tool phase); Expected and Got
// describe the two events ("<end of log>" when one log ended).
type Divergence struct {
	Position int
	Expected string
	Got      string
}

// String returns the divergence as a block of three lines.
func (d Divergence) String() string {
	return fmt.Sprintf("diverged at position %d\n  expected: %s\n  got:      %s", d.Position, d.Expected, d.Got)
}

const endOfLog = "<end of log>"

// compare compares a replayed log with the recording (see the package
// doc) and returns the first divergence, or nil when they conform.
func compare(expected, got []session.Event) *Divergence {
	oe, pe := normalOrder(expected)
	og, pg := normalOrder(got)
	for i := 0; i < max(len(oe), len(og)); i++ {
		switch {
		case i >= len(oe):
			return &Divergence{Position: i, Expected: endOfLog, Got: describeEvent(got[og[i]])}
		case i >= len(og):
			return &Divergence{Position: i, Expected: describeEvent(expected[oe[i]]), Got: endOfLog}
		}
		e, g := expected[oe[i]], got[og[i]]
		if why := differ(e, g, pe, pg); why != "" {
			return &Divergence{Position: i, Expected: describeEvent(e) + why, Got: describeEvent(g)}
		}
	}
	return nil
}

// normalOrder returns the compared order of events (indexes) and the
// position of every event in it. Inside a step's tool phase (from its
// first tool/call to its step/end) a tool/call is held back until the
// event that follows it in exclusive order: the first event of the phase
// seen while no call is open.
func normalOrder(events []session.Event) (order []int, pos []int) {
	order = make([]int, 0, len(events))
	var held []int
	open := false
	flush := func() {
		order = append(order, held...)
		held, open = held[:0], false
	}
	for i, e := range events {
		switch e.Type() {
		case session.TypeToolCall:
			held = append(held, i)
			continue
		case session.TypeStepEnd, session.TypeTurnEnd, session.TypeStepStart, session.TypeTurnStart:
			flush()
		default:
			if !open && len(held) > 0 {
				order = append(order, held[0])
				held = held[1:]
				open = true
			}
			if e.Type() == session.TypeToolResult {
				open = false
			}
		}
		order = append(order, i)
	}
	flush()
	pos = make([]int, len(events))
	for p, i := range order {
		pos[i] = p
	}
	return order, pos
}

// differ returns "" when e and g compare equal, else a short reason.
func differ(e, g session.Event, pe, pg []int) string {
	if e.Type() != g.Type() {
		return " (type differs)"
	}
	t := e.Type()
	if !t.IsCore() || t == session.TypeLlmRetry || t == session.TypeLlmRetryStarted {
		return ""
	}
	if e.SurfaceOp().Kind() != g.SurfaceOp().Kind() {
		return " (surfaceOp differs)"
	}
	if e.SurfaceOp().Kind() == session.OpReplace {
		s1, e1 := e.SurfaceOp().Range()
		s2, e2 := g.SurfaceOp().Range()
		if mapSeq(s1, pe) != mapSeq(s2, pg) || mapSeq(e1, pe) != mapSeq(e2, pg) {
			return " (surfaceOp range differs)"
		}
	}
	se, he := e.SourceEventSeqs()
	sg, hg := g.SourceEventSeqs()
	if he != hg || len(se) != len(sg) {
		return " (sourceEventSeqs differ)"
	}
	for i := range se {
		if mapSeq(se[i], pe) != mapSeq(sg[i], pg) {
			return " (sourceEventSeqs differ)"
		}
	}
	if t == session.TypeRequestHeader {
		he, ok1 := e.Payload().(session.RequestHeader)
		hg, ok2 := g.Payload().(session.RequestHeader)
		if !ok1 || !ok2 || he.Reason != hg.Reason || !he.Header.Canonical().Equal(hg.Header.Canonical()) {
			return " (request header differs)"
		}
		return ""
	}
	if !reflect.DeepEqual(comparable(e.Data().Bytes()), comparable(g.Data().Bytes())) {
		return " (data differs)"
	}
	return ""
}

func mapSeq(s int64, pos []int) int64 {
	if s >= 0 && s < int64(len(pos)) {
		return int64(pos[s])
	}
	return -1 - s
}

// comparable decodes data and drops the ids of messages (objects with a
// "role").
func comparable(data []byte) any {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return string(data)
	}
	return stripIDs(v)
}

func stripIDs(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["role"]; ok {
			delete(x, "id")
		}
		for k, c := range x {
			x[k] = stripIDs(c)
		}
	case []any:
		for i, c := range x {
			x[i] = stripIDs(c)
		}
	}
	return v
}

const describeLimit = 400

// describeEvent renders an event on one line: type, data (cut), surface.
func describeEvent(e session.Event) string {
	var b strings.Builder
	b.WriteString(string(e.Type()))
	b.WriteByte(' ')
	data := e.Data().String()
	if len(data) > describeLimit {
		data = data[:describeLimit] + "…"
	}
	b.WriteString(data)
	switch op := e.SurfaceOp(); op.Kind() {
	case session.OpAppend:
		b.WriteString(" surfaceOp=append")
	case session.OpReplace:
		s, en := op.Range()
		fmt.Fprintf(&b, " surfaceOp=replace[%d,%d]", s, en)
	}
	if s, ok := e.SourceEventSeqs(); ok {
		fmt.Fprintf(&b, " sourceEventSeqs=%v", s)
	}
	return b.String()
}
