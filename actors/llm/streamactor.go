package llm

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/dshgo/dsh/internal/invariants"
	"github.com/dshgo/dsh/messages"
)

// The stream actor's protocol (see doc.go for the whole picture). Every
// message is an immutable value, sent by value.

// CancelStream asks the stream actor whose call has reference Ref to
// cancel it. No chunk of the call is sent after that (but one already
// being sent may still arrive), not even a finish: the call ends with
// StreamEnded{Cancelled: true} whose Finish is aborted (code ABORTED). A
// CancelStream with another Ref, or after the end, is ignored. No reply.
type CancelStream struct {
	Ref uint64
}

// ChunkReceived carries one chunk of the call Ref to the stream actor's
// parent, in stream order. Unless the call was cancelled, the last
// ChunkReceived of a call carries its finish chunk, synthesised when the
// provider failed (see Run), and it is exactly what the reference records
// as assistant/chunk events.
type ChunkReceived struct {
	Ref   uint64
	Chunk messages.StreamChunk
}

// StreamEnded tells the parent that the call Ref is over; nothing about Ref
// follows it. Finish is the reason of the finish chunk sent just before,
// or, when Cancelled is set (the call was cancelled by CancelStream before
// its finish was sent), an aborted reason that no chunk carried.
type StreamEnded struct {
	Ref       uint64
	Finish    messages.FinishReason
	Cancelled bool
}

// streamFinished is the run goroutine's last word to its own actor: the
// call is over, stop.
type streamFinished struct{}

// The causes the stream actor cancels its call with.
var (
	errStreamCancelled = errors.New("llm: stream cancelled")
	errStreamStopped   = errors.New("llm: stream actor stopped")
)

// The defaults of StreamConfig.
const (
	DefaultStreamTimeout = 30 * time.Minute
	DefaultJoinTimeout   = 5 * time.Second
)

// StreamConfig configures one stream actor, that is one model call.
type StreamConfig struct {
	// Provider performs the call. Required.
	Provider Provider
	// Request is the call.
	Request Request
	// Ref is the caller's reference for the call, echoed in every message
	// the actor sends and expected in CancelStream.
	Ref uint64
	// Timeout bounds the whole call: past it the call ends with an error
	// TIMEOUT finish (retryable by default). Default 30 minutes, long
	// enough for a reasoning model's longest answer; a provider's idle
	// watchdog is what catches a stalled stream. Negative means none.
	Timeout time.Duration
	// JoinTimeout bounds how long the actor's Stopped handler waits for
	// the call's goroutine to return after cancelling it: a provider that
	// ignores its context cannot hold the actor's mailbox goroutine
	// forever. Past it the goroutine is abandoned and a warning logged.
	// Default 5s.
	JoinTimeout time.Duration
}

// Validate reports a missing provider or a negative join timeout.
func (c StreamConfig) Validate() error {
	if c.Provider == nil {
		return errors.New("llm: stream config needs a provider")
	}
	if c.JoinTimeout < 0 {
		return errors.New("llm: stream config join timeout is negative")
	}
	return nil
}

func (c StreamConfig) withDefaults() StreamConfig {
	if c.Timeout == 0 {
		c.Timeout = DefaultStreamTimeout
	}
	if c.JoinTimeout == 0 {
		c.JoinTimeout = DefaultJoinTimeout
	}
	return c
}

// StreamProps returns the props of a stream actor performing the call of
// cfg. Spawn it as a child of the actor that wants the chunks (the agent):
// everything it sends goes to its parent. The props are for one spawn
// only: they hold the call. An actor spawned from props already used
// stops at once without calling the provider (and logs an error).
func StreamProps(cfg StreamConfig) (*actor.Props, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	run := &streamRun{cfg: cfg.withDefaults()}
	return actor.PropsFromProducer(func() actor.Actor { return &streamActor{run: run} }), nil
}

// streamRun is the call, shared by the incarnations of one stream actor:
// a restart (after a panic in Receive, which nothing here should raise)
// makes a new streamActor around the same run, so the call goes on and is
// neither repeated nor lost. Its fields other than owner are touched only
// inside Receive, by one incarnation at a time.
type streamRun struct {
	cfg StreamConfig
	// owner is the PID of the actor that claimed the run: set once, by
	// the first Started. Atomic because nothing stops a caller from
	// spawning the same props twice, from two goroutines.
	owner  atomic.Pointer[actor.PID]
	cancel context.CancelCauseFunc // nil until started
	done   chan struct{}           // closed when the goroutine returns
}

type streamActor struct {
	run *streamRun
}

// Receive never blocks, except in Stopped, which waits at most JoinTimeout
// for the call's goroutine after cancelling it (a goroutine that outlived
// its owner would break the ownership rule; an unbounded wait would let a
// provider that ignores its context pin a mailbox goroutine forever).
func (a *streamActor) Receive(ctx actor.Context) {
	run := a.run
	if _, ok := ctx.Message().(*actor.Started); ok {
		a.start(ctx)
		return
	}
	// An actor spawned from props already used is not the run's owner and
	// must not touch it: its fields belong to the owner's Receive.
	if !run.owner.Load().Equal(ctx.Self()) {
		return
	}
	switch m := ctx.Message().(type) {
	case CancelStream:
		if m.Ref == run.cfg.Ref && run.cancel != nil {
			run.cancel(errStreamCancelled)
		}
	case streamFinished:
		ctx.Stop(ctx.Self())
	case *actor.Stopping:
		if run.cancel != nil {
			run.cancel(errStreamStopped)
		}
	case *actor.Stopped:
		if run.done == nil {
			return
		}
		t := time.NewTimer(run.cfg.JoinTimeout)
		defer t.Stop()
		select {
		case <-run.done:
		case <-t.C:
			ctx.Logger().Warn("llm: stream goroutine did not return after cancel; abandoned",
				"provider", providerName(run.cfg.Provider), "ref", run.cfg.Ref, "waited", run.cfg.JoinTimeout)
		}
	}
}

// start claims the run and launches its goroutine; on a restart it does
// nothing, the goroutine of the first incarnation is still the call.
func (a *streamActor) start(ctx actor.Context) {
	run := a.run
	self := ctx.Self()
	if !run.owner.CompareAndSwap(nil, self) {
		if !run.owner.Load().Equal(self) {
			ctx.Logger().Error("llm: stream props spawned twice; the second actor makes no call", "ref", run.cfg.Ref)
			ctx.Stop(self)
		}
		return
	}
	parent := ctx.Parent()
	if parent == nil {
		ctx.Logger().Error("llm: stream actor spawned without a parent; no call made", "ref", run.cfg.Ref)
		ctx.Stop(self)
		return
	}
	cfg := run.cfg
	callCtx, cancel := context.WithCancelCause(context.Background())
	stopTimer := context.CancelFunc(func() {})
	if cfg.Timeout > 0 {
		callCtx, stopTimer = context.WithTimeout(callCtx, cfg.Timeout)
	}
	run.cancel = cancel
	run.done = make(chan struct{})
	go stream(callCtx, ctx.ActorSystem().Root, parent, self, cfg, run.done, stopTimer)
}

// stream is the call's goroutine. It alone sends to the parent, so the
// parent gets the chunks in order and StreamEnded after the last of them,
// and nothing after it.
//
// Once the actor has cancelled the call (CancelStream, or Stopping) the
// goroutine delivers no more chunks, the finish included: the consumer is
// the one who stopped, as in the reference, whose loop stops reading at the
// abort and so records no finish for a cancelled attempt (the fixture
// acp/cancel ends its chunks with a text delta). A chunk whose send had
// already begun may still arrive. A cancel by CancelStream then ends with
// StreamEnded{Cancelled: true} and an aborted Finish; a stop sends nothing
// more at all: the parent either asked for it or is stopping itself, and
// learns of it from the child's Terminated. The call's own deadline is not
// a cancel of the actor: its error TIMEOUT finish is delivered.
func stream(callCtx context.Context, root *actor.RootContext, parent, self *actor.PID, cfg StreamConfig,
	done chan struct{}, stopTimer context.CancelFunc) {
	defer close(done)
	defer stopTimer()
	callDone := callCtx.Done()
	// cancelledBy returns errStreamCancelled or errStreamStopped once the
	// actor has cancelled the call, nil before (and on a deadline).
	cancelledBy := func() error {
		select {
		case <-callDone:
			if cause := context.Cause(callCtx); cause == errStreamCancelled || cause == errStreamStopped {
				return cause
			}
		default:
		}
		return nil
	}
	delivered := false // the finish chunk was sent to the parent
	finish := Run(callCtx, cfg.Provider, cfg.Request, func(c messages.StreamChunk) bool {
		if cancelledBy() != nil {
			return false
		}
		root.Send(parent, ChunkReceived{Ref: cfg.Ref, Chunk: c})
		delivered = c.Type() == messages.ChunkFinish
		return true
	})
	cause := cancelledBy()
	if cause == errStreamStopped {
		return
	}
	ended := StreamEnded{Ref: cfg.Ref, Finish: finish}
	if !delivered {
		// Run emits a finish unless emit refused it, and emit refuses only
		// after a cancel by the actor; a stop returned above.
		_ = invariants.Assertf(cause == errStreamCancelled, "llm: stream %d ended without a finish and without a cancel", cfg.Ref)
		ended.Finish = messages.FinishReason{Kind: messages.FinishAborted, Failure: normalizeError(callCtx, nil)}
		ended.Cancelled = true
	}
	root.Send(parent, ended)
	root.Send(self, streamFinished{})
}
