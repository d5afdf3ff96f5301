package llm

import (
	"context"
	"iter"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/dshgo/dsh/internal/testutil"
	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
)

// waitFor bounds every wait of these tests; nothing here should take more
// than a few milliseconds.
const waitFor = 10 * time.Second

// spawned is the fake parent's first report: the stream actor's PID.
type spawned struct{ child *actor.PID }

// fakeParent plays the agent: it spawns the stream actors of its props on
// Started and reports what it receives: the stream protocol on events, in
// order, and its children's Terminated on terminated. Terminated is a
// system message that overtakes queued user messages, so its position
// relative to the chunks means nothing (doc.go).
type fakeParent struct {
	props      []*actor.Props
	events     chan any
	terminated chan *actor.PID
}

func (p *fakeParent) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		for _, props := range p.props {
			p.events <- spawned{ctx.Spawn(props)}
		}
	case ChunkReceived, StreamEnded:
		p.events <- m
	case *actor.Terminated:
		p.terminated <- m.Who
	}
}

// harness is one fake parent with its stream actors.
type harness struct {
	t        *testing.T
	sys      *actor.ActorSystem
	parent   *actor.PID
	children []*actor.PID
	events   chan any
	termd    chan *actor.PID
	// stopped is set once the test has stopped the parent itself, so
	// that the cleanup does not stop it again (a dead letter, whose
	// throttle goroutine goleak would report).
	stopped bool
}

func startStream(t *testing.T, cfgs ...StreamConfig) *harness {
	t.Helper()
	sys := testutil.NewActorSystem(t)
	var props []*actor.Props
	for _, cfg := range cfgs {
		p, err := StreamProps(cfg)
		require.NoError(t, err)
		props = append(props, p)
	}
	return startWithProps(t, sys, props...)
}

func startWithProps(t *testing.T, sys *actor.ActorSystem, props ...*actor.Props) *harness {
	t.Helper()
	h := &harness{t: t, sys: sys, events: make(chan any, 1<<12), termd: make(chan *actor.PID, 16)}
	h.parent = sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &fakeParent{props: props, events: h.events, terminated: h.termd}
	}))
	t.Cleanup(func() {
		if !h.stopped {
			require.NoError(t, sys.Root.StopFuture(h.parent).Wait())
		}
	})
	for range props {
		h.children = append(h.children, h.next().(spawned).child)
	}
	return h
}

func (h *harness) next() any { return receive(h.t, h.events) }

func receive[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(waitFor)
	defer timer.Stop()
	select {
	case e := <-ch:
		return e
	case <-timer.C:
		t.Fatal("no event from the fake parent")
		var zero T
		return zero
	}
}

// chunks reads n ChunkReceived events of ref.
func (h *harness) chunks(ref uint64, n int) []messages.StreamChunk {
	h.t.Helper()
	var out []messages.StreamChunk
	for len(out) < n {
		e := h.next()
		c, ok := e.(ChunkReceived)
		require.Truef(h.t, ok, "want a chunk, got %T %+v", e, e)
		require.Equal(h.t, ref, c.Ref)
		out = append(out, c.Chunk)
	}
	return out
}

func (h *harness) ended() StreamEnded {
	h.t.Helper()
	e := h.next()
	se, ok := e.(StreamEnded)
	require.Truef(h.t, ok, "want StreamEnded, got %T %+v", e, e)
	return se
}

func (h *harness) terminated(child *actor.PID) {
	h.t.Helper()
	require.True(h.t, receive(h.t, h.termd).Equal(child))
}

// quiet checks that nothing more reaches the parent: it poisons the
// parent, whose queued user messages are processed before it stops, then
// looks for leftovers.
func (h *harness) quiet() {
	h.t.Helper()
	require.NoError(h.t, h.sys.Root.PoisonFuture(h.parent).Wait())
	h.stopped = true
	select {
	case e := <-h.events:
		h.t.Fatalf("unexpected %T %+v", e, e)
	case pid := <-h.termd:
		h.t.Fatalf("unexpected Terminated of %v", pid)
	default:
	}
}

// closed reports whether ch is closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// hangingProvider yields n text deltas of one open block, then blocks until
// its context is done. returned is closed when its iterator returns.
type hangingProvider struct {
	n        int
	returned chan struct{}
	calls    atomic.Int32
}

func newHanging(n int) *hangingProvider { return &hangingProvider{n: n, returned: make(chan struct{})} }

func (p *hangingProvider) Name() string { return "hanging" }

func (p *hangingProvider) Stream(ctx context.Context, _ Request) iter.Seq2[messages.StreamChunk, error] {
	p.calls.Add(1)
	return func(yield func(messages.StreamChunk, error) bool) {
		defer close(p.returned)
		if !yield(start(0, messages.BlockText), nil) {
			return
		}
		for range p.n {
			if !yield(text(0, "tok "), nil) {
				return
			}
		}
		<-ctx.Done()
		yield(messages.StreamChunk{}, ctx.Err())
	}
}

func TestStreamActorDeliversACompleteStream(t *testing.T) {
	stream := []messages.StreamChunk{start(0, messages.BlockText), text(0, "hi"), end(0, messages.TextBlock("hi")),
		usage(3, 1), finish(messages.FinishStop)}
	h := startStream(t, StreamConfig{Provider: chunks(nil, stream...), Ref: 7})
	got := h.chunks(7, len(stream))
	require.Equal(t, jsonOf(stream), jsonOf(got))
	require.Equal(t, StreamEnded{Ref: 7, Finish: messages.FinishReason{Kind: messages.FinishStop}}, h.ended())
	h.terminated(h.children[0]) // the stream actor stops itself
	h.quiet()
}

func TestStreamActorCancelMidway(t *testing.T) {
	p := newHanging(3)
	h := startStream(t, StreamConfig{Provider: p, Ref: 1})
	got := h.chunks(1, 4)
	require.Equal(t, messages.ChunkBlockStart, got[0].Type())

	h.sys.Root.Send(h.children[0], CancelStream{Ref: 99}) // not this call: ignored
	h.sys.Root.Send(h.children[0], CancelStream{Ref: 1})
	// No finish chunk: the consumer cancelled, as in the reference's
	// recordings (acp/cancel). StreamEnded says how it ended.
	aborted := messages.FinishReason{Kind: messages.FinishAborted,
		Failure: messages.LlmFailure{Code: CodeAborted, Message: "llm: request aborted: llm: stream cancelled"}}
	require.Equal(t, StreamEnded{Ref: 1, Finish: aborted, Cancelled: true}, h.ended())
	h.terminated(h.children[0])
	require.True(t, closed(p.returned), "the provider returned before the actor stopped")
	h.quiet()
}

func TestStreamActorStopMidwayJoinsTheGoroutine(t *testing.T) {
	p := newHanging(5)
	h := startStream(t, StreamConfig{Provider: p, Ref: 2})
	h.chunks(2, 6)
	require.False(t, closed(p.returned))

	require.NoError(t, h.sys.Root.StopFuture(h.children[0]).Wait())
	// Stopped has run, and it joined the goroutine: the provider has
	// returned by now, not merely been asked to.
	require.True(t, closed(p.returned))
	h.terminated(h.children[0])
	h.quiet() // no finish chunk, no StreamEnded after a stop
}

// A provider that ignores its context cannot hold the actor's mailbox
// goroutine: Stopped waits JoinTimeout, then abandons the goroutine, which
// sends nothing when it finally returns.
func TestStreamActorJoinIsBounded(t *testing.T) {
	release := make(chan struct{})
	returned := make(chan struct{})
	deaf := providerFunc(func(context.Context, Request) iter.Seq2[messages.StreamChunk, error] {
		return func(yield func(messages.StreamChunk, error) bool) {
			defer close(returned)
			yield(start(0, messages.BlockText), nil)
			<-release // ignores ctx
		}
	})
	h := startStream(t, StreamConfig{Provider: deaf, Ref: 8, JoinTimeout: 20 * time.Millisecond})
	h.chunks(8, 1)
	began := time.Now()
	require.NoError(t, h.sys.Root.StopFuture(h.children[0]).Wait())
	require.GreaterOrEqual(t, time.Since(began), 20*time.Millisecond)
	require.False(t, closed(returned), "abandoned, not joined")
	h.terminated(h.children[0])
	close(release)
	receive(t, returned)
	h.quiet()
}

func TestStreamActorStopsWithItsParent(t *testing.T) {
	p := newHanging(1)
	h := startStream(t, StreamConfig{Provider: p, Ref: 3})
	h.chunks(3, 2)
	require.NoError(t, h.sys.Root.StopFuture(h.parent).Wait())
	h.stopped = true
	require.True(t, closed(p.returned))
}

func TestStreamActorReportsAPanickingProviderAsAnErrorFinish(t *testing.T) {
	boom := providerFunc(func(context.Context, Request) iter.Seq2[messages.StreamChunk, error] {
		return func(yield func(messages.StreamChunk, error) bool) {
			yield(start(0, messages.BlockReasoning), nil)
			yield(thinking(0, "hmm"), nil)
			panic("provider bug")
		}
	})
	h := startStream(t, StreamConfig{Provider: boom, Ref: 4})
	got := h.chunks(4, 3)
	want := messages.FinishReason{Kind: messages.FinishError,
		Failure: messages.LlmFailure{Code: CodeUnknown, Message: "llm: provider panicked: provider bug"}}
	require.Equal(t, want, got[2].Reason())
	require.Equal(t, StreamEnded{Ref: 4, Finish: want}, h.ended())
	h.terminated(h.children[0])
	h.quiet()
}

func TestStreamActorTimesOut(t *testing.T) {
	p := newHanging(0)
	h := startStream(t, StreamConfig{Provider: p, Ref: 5, Timeout: 20 * time.Millisecond})
	h.chunks(5, 2)
	se := h.ended()
	require.Equal(t, messages.FinishError, se.Finish.Kind)
	require.Equal(t, CodeTimeout, se.Finish.Failure.Code)
	require.False(t, se.Cancelled)
	h.terminated(h.children[0])
	h.quiet()
}

func TestStreamPropsServeOneSpawn(t *testing.T) {
	p := newHanging(0)
	props, err := StreamProps(StreamConfig{Provider: p, Ref: 6})
	require.NoError(t, err)
	h := startWithProps(t, testutil.NewActorSystem(t), props, props)
	// Whichever child processes its Started first claims the call; the
	// other stops at once.
	idle := receive(t, h.termd)
	caller := h.children[0]
	if idle.Equal(caller) {
		caller = h.children[1]
	} else {
		require.True(t, idle.Equal(h.children[1]))
	}
	h.chunks(6, 1)
	require.Equal(t, int32(1), p.calls.Load(), "the provider is called once")
	h.sys.Root.Send(caller, CancelStream{Ref: 6})
	require.True(t, h.ended().Cancelled)
	h.terminated(caller)
	h.quiet()
}

func TestStreamConfigValidate(t *testing.T) {
	_, err := StreamProps(StreamConfig{})
	require.ErrorContains(t, err, "needs a provider")
	_, err = StreamProps(StreamConfig{Provider: chunks(nil), JoinTimeout: -1})
	require.Error(t, err)
}

func jsonOf(cs []messages.StreamChunk) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.JSON().String()
	}
	return out
}
