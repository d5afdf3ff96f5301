package cluster

import (
	"context"
	"sync"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/cluster/clusterpb"
	"github.com/dshgo/dsh/supervisor"
)

// subscription is the supervisor.Subscription a Client's Subscribe
// returns (see Subscribe).
type subscription struct {
	// c carries the events (Events). It is closed when the subscription
	// ends (Close, its context done, a request that failed for good).
	c <-chan session.Event

	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// Err says why the subscription ended: nil after Close, else the error
// (supervisor.ErrNoSession, the context's error, ...). Read it after
// Events is closed.
func (s *subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Events carries the events; it is closed when the subscription ends.
func (s *subscription) Events() <-chan session.Event { return s.c }

// Close ends the subscription and waits for its poller to stop.
func (s *subscription) Close() {
	s.cancel()
	<-s.done
}

// Subscribe subscribes to the session's events from seq from on (0 for
// the whole log): the past, then live events as they commit, wherever
// the session lives. It fails at once if the session does not exist.
//
// The subscription long-polls the session's grain, so it follows the
// session when it moves to another member without a gap or a repeat.
// Live events are delivered as they commit, before they are durable:
// should their member die before they were written, the repaired log no
// longer holds them, and the subscription ends with ErrDiverged rather
// than go on from a log that is not the one it showed. A slow consumer is
// never dropped: the subscription only polls again once its consumer has
// taken what it has (unlike a host's subscription, it holds no buffer on
// the session's member).
func (m *Client) Subscribe(ctx context.Context, id session.SessionID, from int64) (supervisor.Subscription, error) {
	r, err := m.call(ctx, id, &clusterpb.GetEvents{From: from})
	if err != nil {
		return nil, err
	}
	first, err := decodeEvents(r)
	if err != nil {
		return nil, err
	}
	ch := make(chan session.Event)
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	s := &subscription{c: ch, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(ch)
		defer stop()
		defer cancel()
		batch := first
		var last session.Event // the last event delivered
		delivered := false
		for {
			for _, ev := range batch {
				select {
				case ch <- ev:
					from = ev.Seq() + 1
					last, delivered = ev, true
				case <-pctx.Done():
					s.end(ctx)
					return
				}
			}
			if pctx.Err() != nil {
				s.end(ctx)
				return
			}
			req := &clusterpb.GetEvents{From: from, WaitMs: defaultPollWait.Milliseconds()}
			if delivered {
				req.AfterType, req.AfterTime = string(last.Type()), last.Time()
			}
			r, err := m.call(pctx, id, req)
			if err == nil {
				batch, err = decodeEvents(r)
			}
			if err != nil {
				if pctx.Err() != nil {
					s.end(ctx)
				} else {
					s.setErr(err)
				}
				return
			}
		}
	}()
	return s, nil
}

// end records why a canceled poller stopped: its parent context's error,
// or nil after Close.
func (s *subscription) end(parent context.Context) {
	if err := context.Cause(parent); err != nil {
		s.setErr(err)
	}
}

func (s *subscription) setErr(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}
