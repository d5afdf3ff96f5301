package agent

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/dshgo/dsh/actors/session"
)

// chunkAppends coalesces the driver's chunk appends (see perform). A
// model streams faster than one append can make the round trip to the
// session, so while a chunk Append is unanswered the chunks after it are
// held, and the next answer sends them all as one Append: one commit, one
// EventsCommitted per subscriber and one reply for the lot instead of one
// each. The driver still sees one append and one acknowledgement per
// chunk: its refs are kept, and the batch's answer is split back into
// one-event views, in order.
//
// Order is kept: chunks are held only behind another chunk Append in
// flight, and whatever else the driver asks for (an append, a claim, a
// cancel, a status) and every send forwarded to the inbox first sends
// what is held. Nothing held is left behind: something is held only while
// a chunk Append is in flight, and its answer sends it.
//
// Rejected alternative: a driver that batches its own chunk drafts. The
// core's effects per input are its tested contract (one append per
// chunk, acknowledged with the chunk's seq); coalescing is transport.
//
// The held drafts go to the session as they are (session.NewAppendOwned:
// not copied again), so each batch starts a new slice, made as large as
// the batch before it, and a batch of maxHeld chunks is sent at once,
// behind the Append in flight: a slice grown one chunk at a time up to a
// few hundred chunks was copied some eight times (a draft is about a
// hundred bytes), the agent's largest cost per chunk in an unpaced run.
// The refs of a batch come back with its answer and are reused for the
// next one.
type chunkAppends struct {
	heldRefs   []uint64        // the driver's refs of the held chunks
	heldDrafts []session.Draft // their drafts, one each
	flight     []chunkFlight   // chunk Appends sent and unanswered, oldest first
	lastBatch  int             // the number of chunks the last batch sent held
}

// minHeld is the least room a batch's buffers are made with, maxHeld the
// most chunks a batch holds.
const (
	minHeld = 8
	maxHeld = 64
)

// chunkFlight is a chunk Append sent to the session: ref is its ref; refs
// are the driver's refs it stands for, nil when it is the driver's own
// append of one chunk (sent under the driver's ref).
type chunkFlight struct {
	ref  uint64
	refs []uint64
}

// appendChunk sends the chunk append e, or holds it behind the chunk
// Append in flight (see chunkAppends).
func (a *agentActor) appendChunk(ctx actor.Context, e appendEffect) {
	c := &a.chunks
	if len(c.flight) > 0 {
		if len(c.heldRefs) == maxHeld {
			a.sendHeld(ctx)
		}
		if c.heldDrafts == nil {
			c.heldDrafts = make([]session.Draft, 0, min(max(c.lastBatch, minHeld), maxHeld))
		}
		if c.heldRefs == nil {
			c.heldRefs = make([]uint64, 0, maxHeld)
		}
		c.heldRefs = append(c.heldRefs, e.Ref)
		c.heldDrafts = append(c.heldDrafts, e.Drafts[0])
		return
	}
	// The effect's slice is the driver's, made for this chunk alone.
	ctx.Request(a.session, session.NewAppendOwned(e.Ref, e.Drafts).Delivering())
	c.flight = append(c.flight, chunkFlight{ref: e.Ref})
}

// sendHeld sends the held chunks as one Append, under the first one's
// ref (the driver's refs are unique and carry the epoch, as the shell's
// own do).
func (a *agentActor) sendHeld(ctx actor.Context) {
	c := &a.chunks
	if len(c.heldRefs) == 0 {
		return
	}
	refs := c.heldRefs
	ctx.Request(a.session, session.NewAppendOwned(refs[0], c.heldDrafts).Delivering())
	c.flight = append(c.flight, chunkFlight{ref: refs[0], refs: refs})
	c.lastBatch = len(refs)
	c.heldRefs, c.heldDrafts = nil, nil
}

// chunkReply takes the answer m to the oldest chunk Append in flight,
// if it is one: the driver gets one acknowledgement per chunk, in order,
// and then what was held meanwhile is sent. The session answers Appends
// in the order it got them, so any other answer is not a chunk
// Append's.
func (a *agentActor) chunkReply(ctx actor.Context, m session.AppendReply) bool {
	c := &a.chunks
	if len(c.flight) == 0 || c.flight[0].ref != m.Ref {
		return false
	}
	f := c.flight[0]
	n := copy(c.flight, c.flight[1:]) // a few at most: one Append, one batch behind it
	c.flight[n] = chunkFlight{}
	c.flight = c.flight[:n]
	if f.refs == nil {
		if !a.booted { // cannot be: only a booted driver appends
			a.input(ctx, m)
		} else {
			a.step(ctx, appended{Ref: m.Ref, Events: m.Events})
		}
	} else {
		if m.Events.Len() != len(f.refs) {
			panic(fmt.Errorf("agent: chunk append %d committed %d events, want %d", m.Ref, m.Events.Len(), len(f.refs)))
		}
		for i, r := range f.refs {
			if !a.booted { // cannot be: only a booted driver appends
				a.input(ctx, session.AppendReply{Ref: r, Events: m.Events.View(i, i+1)})
				continue
			}
			a.step(ctx, appended{Ref: r, Events: m.Events.View(i, i+1)})
		}
	}
	a.sendHeld(ctx)
	if f.refs != nil && c.heldRefs == nil {
		c.heldRefs = f.refs[:0] // the next batch's refs
	}
	a.releaseChunkBuffers()
	return true
}

// releaseChunkBuffers drops the chunk buffers once the stream is over and
// nothing is in flight, so an idle session keeps none. While the stream
// runs they are kept: at a model's pace each chunk's Append is answered
// before the next chunk, and reallocating them would cost allocations
// per chunk.
func (a *agentActor) releaseChunkBuffers() {
	c := &a.chunks
	if len(c.flight) > 0 || (a.d != nil && a.d.Streaming()) {
		return
	}
	c.flight, c.heldDrafts, c.heldRefs, c.lastBatch = nil, nil, nil, 0
}
