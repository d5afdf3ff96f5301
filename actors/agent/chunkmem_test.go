package agent

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// inspected wraps the agent actor so a test can read its state inside
// Receive (the actor's own goroutine, so no race), through inspect.
type inspected struct{ *agentActor }

type inspect struct {
	fn   func(*agentActor)
	done chan struct{}
}

func (w inspected) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(inspect); ok {
		m.fn(w.agentActor)
		close(m.done)
		return
	}
	w.agentActor.Receive(ctx)
}

// withInspection makes the harness's agent an inspected one.
func withInspection(t *testing.T) option {
	return func(h *harness, _ *Config) {
		h.props = func(cfg Config) *actor.Props {
			tpl, err := NewTemplate(cfg)
			require.NoError(t, err)
			lin := &lineage{}
			return actor.PropsFromProducer(func() actor.Actor {
				return inspected{newAgentActor(tpl, cfg.Session, lin)}
			})
		}
	}
}

// inspect runs fn on the agent actor's state, in its Receive.
func (h *harness) inspect(fn func(*agentActor)) {
	h.t.Helper()
	done := make(chan struct{})
	h.sys.Root.Send(h.agent, inspect{fn: fn, done: done})
	select {
	case <-done:
	case <-h.t.Context().Done():
	}
}

// An idle agent holds no chunk buffers: the coalescing buffer grows to
// the longest run of chunks held behind one Append, and a thousand idle
// sessions each kept theirs (38 MB of a default dsh bench's heap).
func TestIdleAgentHoldsNoChunkBuffers(t *testing.T) {
	text := strings.Repeat("a", 2000) // one chunk per character
	h := newHarness(t, newMock(textResponse(text)), nil, withInspection(t))
	h.followup("go")
	h.waitIdle()
	var held, flight, refs, effs int
	h.inspect(func(a *agentActor) {
		held = cap(a.chunks.heldDrafts) + cap(a.chunks.heldRefs)
		flight = cap(a.chunks.flight)
		refs = cap(a.d.chunkRefs)
		effs = cap(a.d.out) + cap(a.d.chunkDrafts)
	})
	require.Zero(t, held, "held chunk buffers")
	require.Zero(t, flight, "chunk appends in flight")
	require.Zero(t, refs, "the driver's chunk refs")
	require.Zero(t, effs, "the driver's recycled effects list and chunk draft block")
	require.Equal(t, text, texts(derive(h.events())[1]))
}

// counted wraps the agent actor and counts, in its Receive, the events
// that reached it as EventsCommitted and as the reply to its own append.
type counted struct {
	*agentActor
	viaSubscription, viaReply *atomic.Int64
}

func (w counted) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case session.EventsCommitted:
		w.viaSubscription.Add(int64(m.Events.Len()))
	case session.AppendReply:
		if m.Delivered {
			w.viaReply.Add(int64(m.Events.Len()))
		}
	}
	w.agentActor.Receive(ctx)
}

// The agent's own appends come back once: the session's reply brings
// their events to the mirror, and no EventsCommitted repeats them (a
// message, and a wake-up of the agent's mailbox, per streamed chunk).
// The events the inbox appends (its splices) still come through the
// subscription, and the mirror is whole: the next request is built from
// it.
func TestAgentAppendsComeBackOnceByTheirReply(t *testing.T) {
	var viaSub, viaReply atomic.Int64
	text := strings.Repeat("b", 300) // one chunk per character
	mock := newMock(textResponse(text), textResponse("again"))
	h := newHarness(t, mock, nil, func(h *harness, _ *Config) {
		h.props = func(cfg Config) *actor.Props {
			tpl, err := NewTemplate(cfg)
			require.NoError(t, err)
			lin := &lineage{}
			return actor.PropsFromProducer(func() actor.Actor {
				return counted{newAgentActor(tpl, cfg.Session, lin), &viaSub, &viaReply}
			})
		}
	})
	h.followup("go")
	h.waitIdle()
	evs := h.events()
	require.Equal(t, text, texts(derive(evs)[1]))
	inboxes := 0
	for _, e := range evs {
		if strings.HasPrefix(string(e.Type()), "agent/inbox/") {
			inboxes++
		}
	}
	require.Positive(t, inboxes)
	require.EqualValues(t, inboxes, viaSub.Load(), "events delivered by the subscription: the inbox's")
	require.EqualValues(t, len(evs)-inboxes, viaReply.Load(), "events delivered by the agent's own append replies")

	h.followup("more")
	h.waitIdle()
	reqs := mock.Requests()
	require.Len(t, reqs, 2)
	require.Equal(t, 3, reqs[1].NumMessages(), "the second request carries the whole history")
}

// At a model's pace each chunk's append is acknowledged before the next
// chunk arrives: the driver's chunk queue keeps its array meanwhile (were
// it dropped whenever it emptied, the next chunk would reallocate it: an
// allocation per chunk), and drops it once the stream has ended.
func TestDriverChunkAtAModelsPaceAllocatesNoQueue(t *testing.T) {
	r := newRig(t, driverConfig{})
	r.followup("hello")
	require.NotZero(t, r.stream)
	body := textResponse("hi").chunks
	r.chunks(body[:len(body)-1]...) // the block is open
	ack := r.l.EventsFrom(r.l.Len() - 1)
	delta := messages.TextDeltaChunk(0, "tok")
	chunk := func() {
		eff := r.input(streamChunk{Ref: r.stream, Chunk: delta})
		if len(eff) != 1 {
			t.Fatal("a chunk is one append")
		}
		if _, err := r.d.Step(appended{Ref: eff[0].(chunkAppendEffect).Ref, Events: ack}); err != nil {
			t.Fatal(err)
		}
	}
	chunk()
	// The effects slice (the chunk's draft builds no data:
	// session.AssistantChunk.Draft; its draft and its effect are made in
	// blocks).
	require.LessOrEqual(t, testing.AllocsPerRun(200, chunk), 1.0, "allocations per chunk")
	// The shell gives the effects back once performed (recycle): the
	// next chunk's list reuses their array.
	shell := func() {
		eff := r.input(streamChunk{Ref: r.stream, Chunk: delta})
		if len(eff) != 1 {
			t.Fatal("a chunk is one append")
		}
		ref := eff[0].(chunkAppendEffect).Ref
		r.d.recycle(eff)
		ack, err := r.d.Step(appended{Ref: ref, Events: ack})
		if err != nil {
			t.Fatal(err)
		}
		r.d.recycle(ack)
	}
	shell()
	perChunk := func(f func()) float64 { // AllocsPerRun rounds down: count ten at a time
		return testing.AllocsPerRun(50, func() {
			for range 10 {
				f()
			}
		}) / 10
	}
	// The chunk's draft and its effect are made in blocks of
	// chunkDraftBlock.
	require.LessOrEqual(t, perChunk(shell), 2.0/chunkDraftBlock, "allocations per chunk, effects recycled")
	require.NotZero(t, cap(r.d.chunkRefs), "the queue is kept while streaming")
	r.input(streamEnded{Ref: r.stream, Finish: messages.FinishReason{Kind: messages.FinishStop}})
	require.Zero(t, cap(r.d.chunkRefs), "the queue is dropped after the stream")
	require.Zero(t, cap(r.d.chunkDrafts), "the draft block is dropped after the stream")
	require.Zero(t, cap(r.d.chunkEffs), "the effect block is dropped after the stream")
}

// sizes wraps the agent actor and records, in its Receive, the size of
// the largest answer to one of its own appends.
type sizes struct {
	*agentActor
	largest *atomic.Int64
}

func (w sizes) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(session.AppendReply); ok && int64(m.Events.Len()) > w.largest.Load() {
		w.largest.Store(int64(m.Events.Len()))
	}
	w.agentActor.Receive(ctx)
}

// A stream faster than the session holds at most maxHeld chunks behind
// the Append in flight: a full batch is sent at once, behind it, so the
// coalescing buffer never grows past maxHeld drafts (grown one chunk at a
// time to the whole stream, it was copied over and over).
func TestHeldChunksAreSentInBatchesOfAtMostMaxHeld(t *testing.T) {
	var largest atomic.Int64
	text := strings.Repeat("c", 3000) // one chunk per character, streamed at once
	h := newHarness(t, newMock(textResponse(text)), nil, func(h *harness, _ *Config) {
		h.props = func(cfg Config) *actor.Props {
			tpl, err := NewTemplate(cfg)
			require.NoError(t, err)
			lin := &lineage{}
			return actor.PropsFromProducer(func() actor.Actor {
				return sizes{newAgentActor(tpl, cfg.Session, lin), &largest}
			})
		}
	})
	h.followup("go")
	h.waitIdle()
	require.Equal(t, text, texts(derive(h.events())[1]))
	require.LessOrEqual(t, largest.Load(), int64(maxHeld), "events in one append")
	t.Logf("largest append: %d events", largest.Load())
}
