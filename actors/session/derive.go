package session

import (
	"iter"
	"slices"

	"github.com/dshgo/dsh/messages"
)

// Messages is an immutable view of derived messages: the model-visible
// history at one point of a log. Its length is fixed; later appends to the
// log are not visible through it. The messages are the log's shared
// immutable values. Safe for concurrent use.
type Messages struct {
	s []messages.Message // clipped: len == cap, never written through
}

// Len returns the number of messages.
func (m Messages) Len() int { return len(m.s) }

// At returns message i.
func (m Messages) At(i int) messages.Message { return m.s[i] }

// All iterates the messages in order.
func (m Messages) All() iter.Seq2[int, messages.Message] { return slices.All(m.s) }

// Slice returns a copy of the list, owned by the caller.
func (m Messages) Slice() []messages.Message { return slices.Clone(m.s) }

// deriveCache projects surface nodes to messages incrementally: each node
// is projected once, so a call costs O(new nodes); a replace (a new surface
// generation) rebuilds from scratch into a fresh array, so views handed out
// before stay intact.
type deriveCache struct {
	generation int
	done       int // surface nodes projected
	msgs       []messages.Message
}

// deriveEventMessage is the projection of one surface event: the stored
// message verbatim, or nothing for an assistant/message with empty content
// (a completion anchor that only carries usage).
func deriveEventMessage(e *Event) (messages.Message, bool) {
	m, ok := e.Message()
	if !ok {
		return messages.Message{}, false
	}
	if e.Type() == TypeAssistantMessage && m.NumBlocks() == 0 {
		return messages.Message{}, false
	}
	return m, true
}

func (c *deriveCache) derive(events Events, s *surface) Messages {
	if c.generation != s.generation {
		c.generation, c.done, c.msgs = s.generation, 0, nil
	}
	for ; c.done < len(s.nodes); c.done++ {
		if m, ok := deriveEventMessage(events.at(int(s.nodes[c.done]))); ok {
			c.msgs = append(c.msgs, m)
		}
	}
	n := len(c.msgs)
	return Messages{s: c.msgs[:n:n]}
}

// DeriveFromScratch folds the surface of events from scratch and projects
// it: the reference implementation the incremental cache is tested against.
// The returned slice is owned by the caller.
func DeriveFromScratch(events []Event) []messages.Message {
	var out []messages.Message
	for _, seq := range FoldSurface(events) {
		if m, ok := deriveEventMessage(&events[seq]); ok {
			out = append(out, m)
		}
	}
	return out
}
