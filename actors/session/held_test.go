package session

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/dshgo/dsh/internal/testutil"
	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
)

// commits is a subscriber that keeps every EventsCommitted.
type commits struct{ got chan EventsCommitted }

func (c *commits) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(EventsCommitted); ok {
		c.got <- m
	}
}

// heldRun is what one EventsCommitted held: its seqs, and Held.
type heldRun struct {
	seqs []int64
	held time.Duration
}

// runs drains what c got so far.
func (c *commits) runs() []heldRun {
	var runs []heldRun
	for {
		select {
		case m := <-c.got:
			r := heldRun{held: m.Held}
			for e := range m.Events.All() {
				r.seqs = append(r.seqs, e.Seq())
			}
			runs = append(runs, r)
		default:
			return runs
		}
	}
}

// seqRuns drains what c got so far: the seqs of each EventsCommitted.
func (c *commits) seqRuns() [][]int64 {
	var out [][]int64
	for _, r := range c.runs() {
		out = append(out, r.seqs)
	}
	return out
}

// holdRig is a session actor, in the synctest bubble of its test, and
// subscribers that keep what they are sent.
type holdRig struct {
	t   *testing.T
	sys *actor.ActorSystem
	pid *actor.PID
}

// newHoldRig starts a session actor on an empty log; call it inside
// synctest.Test.
func newHoldRig(t *testing.T) *holdRig {
	sys := testutil.NewActorSystem(t)
	// Runs once the actors are stopped: protoactor's dead-letter
	// throttle (a stop's Terminated may be one) ends after its interval.
	t.Cleanup(func() { <-time.After(time.Second) })
	l, err := New(testHeader())
	require.NoError(t, err)
	return &holdRig{t: t, sys: sys, pid: spawnSession(t, sys, Config{Log: l})}
}

// subscribe spawns a subscriber and subscribes it with Behind behind.
func (r *holdRig) subscribe(behind time.Duration) (*commits, *actor.PID) {
	s := &commits{got: make(chan EventsCommitted, 64)}
	p := r.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return s }))
	r.t.Cleanup(func() { require.NoError(r.t, r.sys.Root.StopFuture(p).Wait()) })
	request[Subscribed](r.t, r.sys, r.pid, Subscribe{Subscriber: p, Behind: behind})
	return s, p
}

// append appends d and waits until the bubble is idle.
func (r *holdRig) append(d Draft) {
	request[AppendReply](r.t, r.sys, r.pid, NewAppend(1, d))
	synctest.Wait()
}

// chunkDraft is a streamed chunk of turn 1, step 1.
func chunkDraft() Draft {
	return AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, " word")}.Draft()
}

// TestActorHoldsStreamedChunksFromABehindSubscriber: a Behind subscriber
// (the persister) gets a stream's chunk commits together: with the first
// commit Behind/2 after the first held, at Behind if the stream pauses,
// with the next commit that is not chunks only, or before the session
// answers anything else, each time saying how long the first was held; a
// live subscriber gets each commit at once. Without the hold, the Behind
// subscriber got one EventsCommitted per chunk.
func TestActorHoldsStreamedChunksFromABehindSubscriber(t *testing.T) {
	const window = 200 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		r := newHoldRig(t)
		sys, pid, appendOne, chunk := r.sys, r.pid, r.append, chunkDraft
		behind, _ := r.subscribe(window)
		live, _ := r.subscribe(0)

		appendOne(TurnStart{Turn: 1}.Draft())
		appendOne(StepStart{Turn: 1, Step: 1}.Draft())
		require.Equal(t, []heldRun{{seqs: []int64{0}}, {seqs: []int64{1}}}, behind.runs(), "other events are sent at once")
		for range 4 {
			appendOne(chunk()) // seqs 2 to 5, window/8 apart
			<-time.After(window / 8)
		}
		require.Empty(t, behind.seqRuns(), "chunks are held")
		require.Len(t, live.seqRuns(), 6, "a live subscriber gets every commit at once")

		appendOne(chunk()) // seq 6, window/2 after seq 2: sent with it
		require.Equal(t, []heldRun{{seqs: []int64{2, 3, 4, 5, 6}, held: window / 2}}, behind.runs())

		appendOne(chunk()) // seq 7: held again; the stream pauses
		<-time.After(window - time.Millisecond)
		synctest.Wait()
		require.Empty(t, behind.seqRuns())
		<-time.After(time.Millisecond)
		synctest.Wait()
		require.Equal(t, []heldRun{{seqs: []int64{7}, held: window}}, behind.runs(), "the timer sends what a paused stream left held")

		appendOne(chunk()) // seq 8
		answer, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.TextBlock("word")},
			messages.ModelSource{Provider: "p", Model: "m"})
		require.NoError(t, err)
		appendOne(AssistantMessage{Turn: 1, Step: 1, Message: answer}.Draft())
		require.Equal(t, [][]int64{{8, 9}}, behind.seqRuns(), "the message goes with the chunks before it")

		appendOne(chunk()) // seq 10
		request[HeaderReply](t, sys, pid, QueryHeader{})
		synctest.Wait()
		require.Equal(t, [][]int64{{10}}, behind.seqRuns(), "a query finds nothing held")
		require.Len(t, live.seqRuns(), 5)
	})
}

// TestActorHoldsChunksForTheShortestBehind: with two Behind subscribers,
// chunks are held for the shorter Behind; a subscriber without Behind
// holds nothing back, and once the last Behind subscriber is gone,
// nothing is held.
func TestActorHoldsChunksForTheShortestBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newHoldRig(t)
		sys, pid, appendOne := r.sys, r.pid, r.append
		chunk := func() { appendOne(chunkDraft()) }
		slow, slowPID := r.subscribe(time.Second)
		fast, fastPID := r.subscribe(20 * time.Millisecond)
		appendOne(TurnStart{Turn: 1}.Draft())
		appendOne(StepStart{Turn: 1, Step: 1}.Draft())
		opening := []heldRun{{seqs: []int64{0}}, {seqs: []int64{1}}}
		require.Equal(t, opening, fast.runs())
		require.Equal(t, opening, slow.runs())
		chunk()
		require.Empty(t, fast.runs())
		<-time.After(20 * time.Millisecond)
		synctest.Wait()
		want := []heldRun{{seqs: []int64{2}, held: 20 * time.Millisecond}}
		require.Equal(t, want, fast.runs(), "held for the shorter Behind")
		require.Equal(t, want, slow.runs())

		sys.Root.Send(pid, Unsubscribe{Subscriber: fastPID})
		request[Subscribed](t, sys, pid, Subscribe{Subscriber: slowPID, From: 3}) // replaces its Behind one
		chunk()
		require.Equal(t, []heldRun{{seqs: []int64{3}}}, slow.runs(), "no Behind subscriber: nothing is held")
	})
}
