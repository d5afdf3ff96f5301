package session

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// heldCommits keeps a session's streamed chunks from its Behind
// subscribers (the persister) for a while, so that they get one
// EventsCommitted per half window of a stream rather than one per chunk
// (docs/durability.md#write-behind-and-barriers).
//
// At a model's pace every chunk is its own commit, and each commit sent
// to the persister woke its shard's mailbox and queued the chunk alone;
// the persister then wrote a session's stream a window at a time anyway.
// A commit of chunks only may now wait in the session: the next commit
// holding anything else (a message, a tool call, a turn end: every
// durability barrier is one), any message other than an Append, or limit
// after the first held commit, sends the Behind subscriber everything it
// has not seen, in one EventsCommitted, in order as before, saying how
// long the first of them was held (Held). So a barrier's events reach the
// persister together with every chunk before them, as they did, and
// nothing held is ever a barrier. Other subscribers (the agent's mirror,
// a server's event stream) are sent every commit at once.
//
// limit is the smallest Behind of the subscribers: the persister passes
// its write-behind window, and starts that window from the first held
// commit rather than from its arrival (EventsCommitted.Held), so a chunk
// is still written within one window of its commit.
//
// A chunk commit sends what has been held for limit/2 or more, so a
// stream at a model's pace (a chunk every 30 to 50 ms, against the
// default window of 200 ms) sends its held chunks with one of its own
// commits, and the timer, which sends what is held at limit, fires only
// when the stream pauses: a timer firing in every window would wake the
// session once more per window.
//
// Rejected alternative: the persister subscribing to every session once
// and polling their logs. The log belongs to the session actor, and the
// persister would have to ask each one anyway.
type heldCommits struct {
	breakAt int64         // the seq after the last commit that was not chunks only
	limit   time.Duration // the smallest positive Subscribe.Behind; zero: nothing is held
	since   time.Time     // when the held commits started to be held; zero: none
	timer   *time.Timer
	// self and root send heldDue to the actor from the timer's goroutine.
	self *actor.PID
	root *actor.RootContext
}

// heldDue is the timer's message to the session actor: send what is held.
type heldDue struct{}

// holdMode says whether a fan-out may hold chunks back.
type holdMode bool

const (
	mayHold  holdMode = true
	sendHeld holdMode = false
)

// limitTo sets the limit from the subscriptions.
func (h *heldCommits) limitTo(subs []subscription) {
	h.limit = 0
	for _, s := range subs {
		if s.behind > 0 && (h.limit == 0 || s.behind < h.limit) {
			h.limit = s.behind
		}
	}
}

// mayHold reports whether a commit of chunks may still be held: nothing
// is held yet, or it has been held for less than limit/2.
func (h *heldCommits) mayHold() bool {
	return h.limit > 0 && (h.since.IsZero() || time.Since(h.since) < h.limit/2)
}

// heldFor returns how long the first held commit has been held, zero when
// none is.
func (h *heldCommits) heldFor() time.Duration {
	if h.since.IsZero() {
		return 0
	}
	return time.Since(h.since)
}

// holding records whether the fan-out that just ran left commits held,
// and starts or stops the timer accordingly.
func (h *heldCommits) holding(held bool) {
	switch {
	case held && h.since.IsZero():
		h.since = time.Now()
		if h.timer == nil {
			self, root := h.self, h.root
			h.timer = time.AfterFunc(h.limit, func() { root.Send(self, heldDue{}) })
		} else {
			h.timer.Reset(h.limit)
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
