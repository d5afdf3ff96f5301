package supervisor

import (
	"context"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/dshgo/dsh/actors/session"
)

// subscription is a Host's Subscription: a small actor subscribed to the
// session actor forwards its events to a buffered channel, never blocking
// it.
type subscription struct {
	c <-chan session.Event // closed when the subscription ends (Close, a drop, the host closing)

	h    *Host
	e    *entry
	pid  *actor.PID
	once sync.Once
	mu   sync.Mutex
	err  error
}

// Events implements Subscription.
func (s *subscription) Events() <-chan session.Event { return s.c }

// Err implements Subscription: nil after Close or while it is running,
// ErrSlowSubscriber after a drop, ErrClosed when the host closed,
// ErrEvicted after Evict.
func (s *subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *subscription) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// Close implements Subscription: it waits for the subscription's actor to
// stop.
func (s *subscription) Close() { s.stop(nil) }

func (s *subscription) stop(err error) {
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
// on (0 for the whole log): in seq order and without gaps, first the past,
// then live. It never blocks the session: when the consumer falls more
// than Config.SubscriberBuffer events behind, the subscription is dropped
// (its channel closed, Err ErrSlowSubscriber) while the session goes on.
// An open subscription keeps its session resident (no passivation) until
// Close.
func (h *Host) Subscribe(ctx context.Context, id session.SessionID, from int64) (Subscription, error) {
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
	s := &subscription{c: ch, h: h, e: e}
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
	s       *subscription
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
