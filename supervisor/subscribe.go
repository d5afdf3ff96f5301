package supervisor

import (
	"context"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/dshgo/dsh/actors/session"
)

// Subscription delivers a session's committed events, in seq order and
// without gaps: first the past from the requested seq, then live. It is
// backed by a small actor subscribed to the session actor that never
// blocks it: when the consumer falls more than Config.SubscriberBuffer
// events behind, the subscription is dropped (C is closed and Err returns
// ErrSlowSubscriber) while the session goes on. An open subscription keeps
// its session resident (no passivation) until Close.
type Subscription struct {
	// C carries the events. It is closed when the subscription ends
	// (Close, a drop, the host closing).
	C <-chan session.Event

	h    *Host
	e    *entry
	pid  *actor.PID
	once sync.Once
	mu   sync.Mutex
	err  error
}

// Err returns why the subscription ended: nil after Close or while it is
// running, ErrSlowSubscriber after a drop, ErrClosed when the host closed.
// Read it after C is closed.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Subscription) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// Close ends the subscription and waits for its actor to stop.
func (s *Subscription) Close() { s.stop(nil) }

func (s *Subscription) stop(err error) {
	s.once.Do(func() {
		if err != nil {
			s.fail(err)
		}
		_ = s.h.sys.Root.StopFuture(s.pid).Wait()
		s.h.mu.Lock()
		delete(s.h.subs, s)
		s.e.subs--
		s.h.mu.Unlock()
	})
}

// Subscribe returns a subscription to the session's events from seq from
// on (0 for the whole log).
func (h *Host) Subscribe(ctx context.Context, id session.SessionID, from int64) (*Subscription, error) {
	e, err := h.live(ctx, id)
	if err != nil {
		return nil, err
	}
	defer h.unuse(e)
	hr, err := h.ask(ctx, e.session, session.QueryHeader{Ref: h.refs.Add(1)})
	if err != nil {
		return nil, err
	}
	backlog := max(hr.(session.HeaderReply).Len-max(from, 0), 0)
	ch := make(chan session.Event, int64(h.cfg.SubscriberBuffer)+backlog)
	s := &Subscription{C: ch, h: h, e: e}
	sa := &subActor{sess: e.session, from: from, ch: ch, s: s}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	s.pid = h.sys.Root.SpawnPrefix(actor.PropsFromProducer(func() actor.Actor { return sa }), h.name+"/sub")
	h.subs[s] = struct{}{}
	e.subs++
	h.mu.Unlock()
	return s, nil
}

// subActor forwards EventsCommitted to the subscription's channel without
// ever blocking.
type subActor struct {
	sess    *actor.PID
	from    int64
	ch      chan session.Event
	s       *Subscription
	dropped bool
	closed  bool
}

func (a *subActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		ctx.Request(a.sess, session.Subscribe{Subscriber: ctx.Self(), From: a.from})
	case session.EventsCommitted:
		if a.dropped {
			return
		}
		for ev := range m.Events.All() {
			select {
			case a.ch <- ev:
			default:
				a.dropped = true
				a.s.h.logger.Warn("subscriber dropped: too slow", "session", string(a.s.e.id), "buffer", a.s.h.cfg.SubscriberBuffer)
				a.s.fail(ErrSlowSubscriber)
				ctx.Send(a.sess, session.Unsubscribe{Subscriber: ctx.Self()})
				a.close()
				return
			}
		}
	case *actor.Stopping:
		if !a.dropped {
			ctx.Send(a.sess, session.Unsubscribe{Subscriber: ctx.Self()})
		}
	case *actor.Stopped:
		a.close()
	}
}

func (a *subActor) close() {
	if !a.closed {
		a.closed = true
		close(a.ch)
	}
}
