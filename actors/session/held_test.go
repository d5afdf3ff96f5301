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

// seqRuns drains what sub got so far: the seqs of each EventsCommitted.
func seqRuns(sub *subscriber) [][]int64 {
	var runs [][]int64
	for {
		select {
		case evs := <-sub.got:
			var seqs []int64
			for e := range evs.All() {
				seqs = append(seqs, e.Seq())
			}
			runs = append(runs, seqs)
		default:
			return runs
		}
	}
}

// TestActorHoldsStreamedChunksFromABehindSubscriber: a Behind subscriber
// (the persister) gets a stream's chunk commits together: with the first
// commit heldDelay/2 after the first held, at heldDelay if the stream
// pauses, with the next commit that is not chunks only, or before the
// session answers anything else; a live subscriber gets each commit at
// once. Without the hold, the Behind subscriber got one
// EventsCommitted per chunk.
func TestActorHoldsStreamedChunksFromABehindSubscriber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := testutil.NewActorSystem(t)
		// Runs once the actors are stopped: protoactor's dead-letter
		// throttle (a stop's Terminated may be one) ends after its interval.
		t.Cleanup(func() { <-time.After(time.Second) })
		l, err := New(testHeader())
		require.NoError(t, err)
		pid := spawnSession(t, sys, Config{Log: l})
		spawnSub := func() (*subscriber, *actor.PID) {
			s := &subscriber{got: make(chan Events, 64)}
			p := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return s }))
			t.Cleanup(func() { require.NoError(t, sys.Root.StopFuture(p).Wait()) })
			return s, p
		}
		behind, behindPID := spawnSub()
		live, livePID := spawnSub()
		request[Subscribed](t, sys, pid, Subscribe{Subscriber: behindPID, Behind: true})
		request[Subscribed](t, sys, pid, Subscribe{Subscriber: livePID})
		appendOne := func(d Draft) {
			request[AppendReply](t, sys, pid, NewAppend(1, d))
			synctest.Wait()
		}
		chunk := func() Draft {
			return AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, " word")}.Draft()
		}

		appendOne(TurnStart{Turn: 1}.Draft())
		appendOne(StepStart{Turn: 1, Step: 1}.Draft())
		require.Equal(t, [][]int64{{0}, {1}}, seqRuns(behind), "other events are sent at once")
		for range 4 {
			appendOne(chunk()) // seqs 2 to 5, heldDelay/8 apart
			<-time.After(heldDelay / 8)
		}
		require.Empty(t, seqRuns(behind), "chunks are held")
		require.Len(t, seqRuns(live), 6, "a live subscriber gets every commit at once")

		appendOne(chunk()) // seq 6, heldDelay/2 after seq 2: sent with it
		require.Equal(t, [][]int64{{2, 3, 4, 5, 6}}, seqRuns(behind))

		appendOne(chunk()) // seq 7: held again; the stream pauses
		<-time.After(heldDelay - time.Millisecond)
		synctest.Wait()
		require.Empty(t, seqRuns(behind))
		<-time.After(time.Millisecond)
		synctest.Wait()
		require.Equal(t, [][]int64{{7}}, seqRuns(behind), "the timer sends what a paused stream left held")

		appendOne(chunk()) // seq 8
		answer, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.TextBlock("word")},
			messages.ModelSource{Provider: "p", Model: "m"})
		require.NoError(t, err)
		appendOne(AssistantMessage{Turn: 1, Step: 1, Message: answer}.Draft())
		require.Equal(t, [][]int64{{8, 9}}, seqRuns(behind), "the message goes with the chunks before it")

		appendOne(chunk()) // seq 10
		request[HeaderReply](t, sys, pid, QueryHeader{})
		synctest.Wait()
		require.Equal(t, [][]int64{{10}}, seqRuns(behind), "a query finds nothing held")
		require.Len(t, seqRuns(live), 5)
	})
}
