package session

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// heldCommits keeps a session's streamed chunks from its Behind
// subscribers (the persister) for a while, so that they get one
// EventsCommitted per heldDelay of a stream rather than one per chunk
// (docs/durability.md#write-behind-and-barriers).
//
// At a model's pace every chunk is its own commit, and each commit sent
// to the persister woke its shard's mailbox and queued the chunk alone;
// the persister then wrote a session's stream a window at a time anyway.
// A commit of chunks only may now wait in the session: the next commit
// holding anything else (a message, a tool call, a turn end: every
// durability barrier is one), any message other than an Append, or
// heldDelay after the first held commit, sends the Behind subscriber
// everything it has not seen, in one EventsCommitted, in order as
// before. So a barrier's events reach the persister together with every
// chunk before them, as they did, and nothing held is ever a barrier.
// Other subscribers (the agent's mirror, a server's event stream) are
// sent every commit at once.
//
// A chunk commit sends what has been held for heldDelay/2 or more, so a
// stream at a model's pace (a chunk every 30 to 50 ms) sends its held
// chunks with one of its own commits, and the timer, which sends what is
// held at heldDelay, fires only when the stream pauses: a timer firing
// in every window would wake the session once more per window.
//
// Rejected alternative: the persister subscribing to every session once
// and polling their logs. The log belongs to the session actor, and the
// persister would have to ask each one anyway.
type heldCommits struct {
	breakAt int64     // the seq after the last commit that was not chunks only
	since   time.Time // when the held commits started to be held; zero: none
	timer   *time.Timer
	// self and root send heldDue to the actor from the timer's goroutine.
	self *actor.PID
	root *actor.RootContext
}

// heldDelay bounds how long a commit of chunks may be held, the
// persister's own write-behind window: a chunk is written at most two
// windows after its commit, instead of one.
const heldDelay = 200 * time.Millisecond

// heldDue is the timer's message to the session actor: send what is held.
type heldDue struct{}

// holdMode says whether a fan-out may hold chunks back.
type holdMode bool

const (
	mayHold  holdMode = true
	sendHeld holdMode = false
)

// mayHold reports whether a commit of chunks may still be held: nothing
// is held yet, or it has been held for less than heldDelay/2.
func (h *heldCommits) mayHold() bool {
	return h.since.IsZero() || time.Since(h.since) < heldDelay/2
}

// holding records whether the fan-out that just ran left commits held,
// and starts or stops the timer accordingly.
func (h *heldCommits) holding(held bool) {
	switch {
	case held && h.since.IsZero():
		h.since = time.Now()
		if h.timer == nil {
			self, root := h.self, h.root
			h.timer = time.AfterFunc(heldDelay, func() { root.Send(self, heldDue{}) })
		} else {
			h.timer.Reset(heldDelay)
		}
	case !held && !h.since.IsZero():
		h.since = time.Time{}
		h.timer.Stop()
	}
}

// stop stops the timer for good.
func (h *heldCommits) stop() {
	if h.timer != nil {
		h.timer.Stop()
	}
}

// chunksOnly reports whether drafts are streamed chunks only.
func chunksOnly(drafts []Draft) bool {
	for _, d := range drafts {
		if d.Type() != TypeAssistantChunk {
			return false
		}
	}
	return true
}
