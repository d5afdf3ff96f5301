package spans

import (
	"fmt"
	"io"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// WriteTree writes spans for people: a line per trace (its id, the session
// and the turn), then a line per span, indented under its parent, with its
// start and end in milliseconds from the start of its trace, its error
// status, the attributes that tell it apart (not the session, turn, step
// and operation every span of its kind carries) and its events, at their
// offsets. Spans are written in the order given (Spans' order: a parent
// before its children). The text is raw: names and attribute values come
// from the log, and a caller printing to a terminal escapes them.
func WriteTree(w io.Writer, spans []Span) error {
	byID := make(map[trace.SpanID]*Span, len(spans))
	roots := map[trace.TraceID]*Span{}
	for i := range spans {
		byID[spans[i].SpanID] = &spans[i]
		if !spans[i].Parent.IsValid() {
			roots[spans[i].TraceID] = &spans[i]
		}
	}
	var b strings.Builder
	var current trace.TraceID
	for i := range spans {
		s := &spans[i]
		root := roots[s.TraceID]
		if root == nil {
			root = s // an orphan: its own origin
		}
		if s.TraceID != current {
			current = s.TraceID
			fmt.Fprintf(&b, "trace %s (session %s, turn %s)\n", s.TraceID, attrValue(root, AttrSession), attrValue(root, AttrTurn))
		}
		t0 := root.Start
		depth := 1
		for p := s; p.Parent.IsValid(); depth++ {
			if p = byID[p.Parent]; p == nil {
				break
			}
		}
		fmt.Fprintf(&b, "%s%s [%d..%d]", strings.Repeat("  ", depth), s.Name, s.Start.Sub(t0).Milliseconds(), s.End.Sub(t0).Milliseconds())
		if s.Status == codes.Error {
			fmt.Fprintf(&b, " ERROR(%s)", s.StatusMessage)
		}
		for _, kv := range s.Attrs {
			switch kv.Key {
			case AttrSession, AttrTurn, AttrStep, AttrOperation:
				continue
			}
			fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value.String())
		}
		for _, e := range s.Events {
			fmt.Fprintf(&b, " {%s@%d", e.Name, e.Time.Sub(t0).Milliseconds())
			for _, kv := range e.Attrs {
				fmt.Fprintf(&b, " %s=%s", kv.Key, kv.Value.String())
			}
			b.WriteString("}")
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func attrValue(s *Span, k attribute.Key) string {
	for _, kv := range s.Attrs {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return "?"
}
