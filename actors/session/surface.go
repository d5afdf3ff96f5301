package session

import (
	"fmt"
	"slices"

	"github.com/dshgo/dsh/messages"
)

// surface is the ordered list of surface nodes (event seqs) that derive the
// model-visible history (docs/session-log.md#the-surface). Appends push a node;
// a replace splices an inclusive positional range out and puts the new node at
// its start. After a replace, surface order need not match seq order, so bounds
// are found by position, never by numeric range.
type surface struct {
	nodes      []int64
	generation int // replaceGeneration: bumps on every replace
}

// transition is a validated, not yet applied, surface change.
type transition struct {
	op       OpKind
	from, to int // positional range [from, to] replaced (OpReplace)
}

// validateNext checks the surface metadata of the event about to be
// committed at seq and plans its transition without applying it. events is
// the committed log so far (for the tool-result replace rule).
func (s *surface) validateNext(events Events, e *Event) (transition, error) {
	typ := e.Type()
	if !typ.IsSurface() {
		if e.opKind() != OpNone || e.hasSources() {
			return transition{}, fmt.Errorf("surface metadata (surfaceOp/sourceEventSeqs) on non-surface event")
		}
		return transition{}, nil
	}
	if e.opKind() == OpNone {
		return transition{}, fmt.Errorf("surface event lacks its surfaceOp")
	}
	if e.hasSources() {
		if len(e.sources()) == 0 && typ != TypeAssistantMessage {
			return transition{}, fmt.Errorf("empty sourceEventSeqs is allowed only on assistant/message")
		}
		if err := checkSources(e.sources(), e.seq); err != nil {
			return transition{}, err
		}
	}
	if e.opKind() == OpAppend {
		return transition{op: OpAppend}, nil
	}
	start, end := e.ext.start, e.ext.end
	from := slices.Index(s.nodes, start)
	if from < 0 {
		return transition{}, fmt.Errorf("replace start %d is not a current surface node", start)
	}
	to := slices.Index(s.nodes, end)
	if to < 0 {
		return transition{}, fmt.Errorf("replace end %d is not a current surface node", end)
	}
	if from > to {
		return transition{}, fmt.Errorf("replace start %d comes after end %d on the surface", start, end)
	}
	if e.hasSources() {
		for _, n := range s.nodes[from : to+1] {
			if !slices.Contains(e.sources(), n) {
				return transition{}, fmt.Errorf("replace sourceEventSeqs omits shadowed node %d", n)
			}
		}
	}
	if typ == TypeToolResult {
		if from != to {
			return transition{}, fmt.Errorf("tool/result replace must shadow exactly one node, not %d", to-from+1)
		}
		old := events.at(int(s.nodes[from]))
		if old.Type() != TypeToolResult {
			return transition{}, fmt.Errorf("tool/result replace targets a %s node, not a tool/result", old.Type())
		}
		if !withoutResultContent(old.fullData()).Equal(withoutResultContent(e.fullData())) {
			return transition{}, fmt.Errorf("tool/result replace changes more than the result content")
		}
	}
	return transition{op: OpReplace, from: from, to: to}, nil
}

// checkSources checks cited seqs: each an earlier seq, none repeated. The
// first bad entry is reported, in list order.
//
// Citations are written in increasing order (an assistant message cites
// its stream, hundreds of chunks), and a strictly increasing list repeats
// nothing, so that case is checked without the set that finds a repeat in
// any order: a set per message would be most of what a load allocates
// for surface checks. Any other order takes the set, from the start.
func checkSources(sources []int64, seq int64) error {
	valid := true
	for i, src := range sources {
		if src < 0 || src >= seq || i > 0 && src <= sources[i-1] {
			valid = false
			break
		}
	}
	if valid {
		return nil
	}
	seen := make(map[int64]struct{}, len(sources))
	for _, src := range sources {
		if src < 0 || src >= seq {
			return fmt.Errorf("sourceEventSeqs entry %d is not an earlier seq", src)
		}
		if _, dup := seen[src]; dup {
			return fmt.Errorf("sourceEventSeqs repeats %d", src)
		}
		seen[src] = struct{}{}
	}
	return nil
}

// apply commits a planned transition for the event at seq.
func (s *surface) apply(t transition, seq int64) {
	switch t.op {
	case OpAppend:
		s.nodes = append(s.nodes, seq)
	case OpReplace:
		// Build a new slice: views handed out earlier (none today, but the
		// derive cache relies on generation) must not see the splice.
		nodes := make([]int64, 0, len(s.nodes)-(t.to-t.from))
		nodes = append(nodes, s.nodes[:t.from]...)
		nodes = append(nodes, seq)
		nodes = append(nodes, s.nodes[t.to+1:]...)
		s.nodes = nodes
		s.generation++
	}
}

// withoutResultContent returns a tool/result's data with the nested content
// of its tool-result block blanked, for the replace rule "the two may differ
// only in the nested content".
func withoutResultContent(data messages.JSON) messages.JSON {
	var o messages.ObjectBuilder
	for k, v := range data.Members() {
		if k == "message" {
			v = rebuild(v, func(k string, v messages.JSON) messages.JSON {
				if k != "content" {
					return v
				}
				var first = true
				var blocks []messages.JSON
				for b := range v.Elements() {
					if first {
						b = rebuild(b, func(k string, v messages.JSON) messages.JSON {
							if k == "content" {
								return messages.JSONNull
							}
							return v
						})
						first = false
					}
					blocks = append(blocks, b)
				}
				return messages.ArrayOf(blocks...)
			})
		}
		o.Raw(k, v)
	}
	return o.Build()
}

// rebuild maps the members of an object.
func rebuild(obj messages.JSON, f func(string, messages.JSON) messages.JSON) messages.JSON {
	if obj.Kind() != messages.KindObject {
		return obj
	}
	var o messages.ObjectBuilder
	for k, v := range obj.Members() {
		o.Raw(k, f(k, v))
	}
	return o.Build()
}

// FoldSurface replays the surface of a whole event list from scratch: the
// reference's foldSurface. It returns the current nodes in surface order.
// The events must already be a valid log (it does not re-validate).
func FoldSurface(events []Event) []int64 {
	var s surface
	for i := range events {
		e := &events[i]
		switch e.opKind() {
		case OpAppend:
			s.apply(transition{op: OpAppend}, e.seq)
		case OpReplace:
			start, end := e.ext.start, e.ext.end
			s.apply(transition{op: OpReplace, from: slices.Index(s.nodes, start), to: slices.Index(s.nodes, end)}, e.seq)
		}
	}
	return s.nodes
}
