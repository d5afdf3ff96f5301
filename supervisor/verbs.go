package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// ask makes a blocking request bounded by ctx and RequestTimeout. A
// request cut by ctx's deadline fails as ctx would (DeadlineExceeded),
// even when the future's timer, set from that deadline, fires first.
func (h *Host) ask(ctx context.Context, pid *actor.PID, msg any) (any, error) {
	timeout, fromCtx := h.cfg.RequestTimeout, false
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout, fromCtx = time.Until(d), true
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	if timeout <= 0 {
		return nil, context.DeadlineExceeded
	}
	f := h.sys.Root.RequestFuture(pid, msg, timeout)
	result := func(v any, err error) (any, error) {
		if fromCtx && errors.Is(err, actor.ErrTimeout) {
			return nil, fmt.Errorf("%w (%w)", context.DeadlineExceeded, err)
		}
		return v, err
	}
	if ctx.Done() == nil {
		return result(f.Result())
	}
	type reply struct {
		v   any
		err error
	}
	ch := make(chan reply, 1)
	go func() {
		v, err := f.Result()
		ch <- reply{v, err}
	}()
	select {
	case r := <-ch:
		return result(r.v, r.err)
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// Followup queues msg as its own later turn (docs/agent-loop.md#delivery). When the session
// was idle, the turn has started by the time Followup returns. A message
// too large to record is refused (session.ErrTooLarge), as by Steer and
// Inject.
func (h *Host) Followup(ctx context.Context, id session.SessionID, msg messages.Message) error {
	return h.send(ctx, id, true, msg, func(ref uint64) any { return agent.Followup{Ref: ref, Message: msg} })
}

// Steer queues msg for the next step boundary of the running turn, or
// starts a turn when idle.
func (h *Host) Steer(ctx context.Context, id session.SessionID, msg messages.Message) error {
	return h.send(ctx, id, true, msg, func(ref uint64) any { return agent.Steer{Ref: ref, Message: msg} })
}

// Inject stages msg without waking the session: it rides with the next
// waking input.
func (h *Host) Inject(ctx context.Context, id session.SessionID, msg messages.Message) error {
	return h.send(ctx, id, false, msg, func(ref uint64) any { return agent.Inject{Ref: ref, Message: msg} })
}

// send forwards a send to the agent. A waking send is refused with
// ErrNotDurable while the session's last write failed (fail closed): until
// a write succeeds, the persister's background retry or a Flush. A message
// too large to record (session.CheckMessageSize) is refused first, with
// session.ErrTooLarge, before the session is even loaded.
func (h *Host) send(ctx context.Context, id session.SessionID, wakes bool, msg messages.Message, mk func(uint64) any) error {
	if err := session.CheckMessageSize(msg); err != nil {
		return fmt.Errorf("supervisor: send to %s: %w", id, err)
	}
	e, err := h.live(ctx, id)
	if err != nil {
		return err
	}
	defer h.unuse(e)
	if wakes {
		if werr := e.failure(); werr != nil {
			return fmt.Errorf("%w: %s: %w", ErrNotDurable, id, werr)
		}
	}
	res, err := h.ask(ctx, e.agent, mk(h.refs.Add(1)))
	if err != nil {
		return err
	}
	switch r := res.(type) {
	case agent.Sent:
		return nil
	case agent.SendFailed:
		return r.Err
	default:
		return fmt.Errorf("supervisor: unexpected reply %T", res)
	}
}

// Cancel aborts the running turn with cause (the first cause wins) and
// cancels what is pending in the inbox. Follow it with WaitIdle.
func (h *Host) Cancel(ctx context.Context, id session.SessionID, cause session.CancelCause) error {
	e, err := h.live(ctx, id)
	if err != nil {
		return err
	}
	defer h.unuse(e)
	h.sys.Root.Send(e.agent, agent.Cancel{Cause: cause})
	return nil
}

// SetSystem replaces the session's system prompt from its next step on.
func (h *Host) SetSystem(ctx context.Context, id session.SessionID, prompt string) error {
	e, err := h.live(ctx, id)
	if err != nil {
		return err
	}
	defer h.unuse(e)
	h.sys.Root.Send(e.agent, agent.SetSystem{Prompt: prompt})
	return nil
}

// WaitIdle returns once the session is idle (no turn running, nothing
// latched) and everything it logged is durable (written and fsynced under
// PolicyTurnEnd and PolicyStrict).
func (h *Host) WaitIdle(ctx context.Context, id session.SessionID) error {
	e, err := h.live(ctx, id)
	if err != nil {
		return err
	}
	defer h.unuse(e)
	if _, err := h.ask(ctx, e.agent, agent.WaitIdle{Ref: h.refs.Add(1)}); err != nil {
		return err
	}
	_, err = h.flush(ctx, e)
	return err
}

// Flush makes everything the session has logged durable and returns the
// durable watermark (the last durable seq).
func (h *Host) Flush(ctx context.Context, id session.SessionID) (int64, error) {
	e, err := h.live(ctx, id)
	if err != nil {
		return -1, err
	}
	defer h.unuse(e)
	return h.flush(ctx, e)
}

func (h *Host) flush(ctx context.Context, e *entry) (int64, error) {
	hr, err := h.ask(ctx, e.session, session.QueryHeader{Ref: h.refs.Add(1)})
	if err != nil {
		return -1, err
	}
	last := hr.(session.HeaderReply).Len - 1
	d, err := h.barrier(ctx, persister.Flush{Ref: h.refs.Add(1), ID: e.id, UpTo: last})
	var ff flushError
	switch {
	case err == nil:
		e.clearFailure(d)
	case errors.As(err, &ff):
		e.setFailure(ff.err, d)
	}
	return d, err
}

func (h *Host) barrier(ctx context.Context, msg any) (int64, error) {
	res, err := h.ask(ctx, h.persister, msg)
	if err != nil {
		return -1, err
	}
	switch r := res.(type) {
	case persister.Flushed:
		return r.Durable, nil
	case persister.FlushFailed:
		return r.Durable, flushError{r.Err}
	default:
		return -1, fmt.Errorf("supervisor: unexpected reply %T", res)
	}
}

// Messages returns the session's derived (model-visible) messages. The
// slice is the caller's.
func (h *Host) Messages(ctx context.Context, id session.SessionID) ([]messages.Message, error) {
	e, err := h.live(ctx, id)
	if err != nil {
		return nil, err
	}
	defer h.unuse(e)
	res, err := h.ask(ctx, e.session, session.QueryMessages{Ref: h.refs.Add(1)})
	if err != nil {
		return nil, err
	}
	return res.(session.MessagesReply).Messages.Slice(), nil
}

// Events returns the session's events from seq from on. The slice is the
// caller's.
func (h *Host) Events(ctx context.Context, id session.SessionID, from int64) ([]session.Event, error) {
	e, err := h.live(ctx, id)
	if err != nil {
		return nil, err
	}
	defer h.unuse(e)
	res, err := h.ask(ctx, e.session, session.QueryEvents{Ref: h.refs.Add(1), From: from})
	if err != nil {
		return nil, err
	}
	return res.(session.EventsReply).Events.Slice(), nil
}

// Fork creates a new session seeded with the events of id up to boundary
// (inclusive; session.LastEvent for the end). The boundary must not fall
// inside an open turn.
func (h *Host) Fork(ctx context.Context, id session.SessionID, boundary int64) (session.SessionID, error) {
	e, err := h.live(ctx, id)
	if err != nil {
		return "", err
	}
	defer h.unuse(e)
	child := session.SessionID(uuid.NewString())
	res, err := h.ask(ctx, e.session, session.Fork{Ref: h.refs.Add(1), Child: child, Boundary: boundary, CreatedAt: h.cfg.Clock()})
	if err != nil {
		return "", err
	}
	var fr session.ForkReply
	switch r := res.(type) {
	case session.ForkReply:
		fr = r
	case session.ForkFailed:
		return "", r.Err
	default:
		return "", fmt.Errorf("supervisor: unexpected reply %T", res)
	}
	ce, fresh, err := h.reserve(ctx, child)
	if err != nil {
		return "", err
	}
	if !fresh {
		h.unuse(ce)
		return "", fmt.Errorf("%w: %s", ErrExists, child)
	}
	l, err := session.NewSeeded(fr.Header, fr.Seed.Slice(), h.cfg.Clock())
	if err != nil {
		h.release(ce, err)
		return "", err
	}
	if err := h.start(ctx, ce, l, 0); err != nil {
		return "", err
	}
	h.unuse(ce)
	return child, nil
}
