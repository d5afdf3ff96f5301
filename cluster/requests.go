package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/cluster/clusterpb"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// Bounds of one GetEvents reply (gRPC refuses messages over 4 MiB).
const (
	maxEventsPerReply = 1024
	maxReplyBytes     = 1 << 20
)

func (g *grain) create(c context.Context, msg *clusterpb.Create) *clusterpb.Reply {
	_, err := g.m.host.Create(c, supervisor.CreateOptions{ID: g.id, Cwd: msg.Cwd})
	r := g.reply(err)
	r.Id = string(g.id)
	return r
}

func (g *grain) send(c context.Context, msg *clusterpb.Send) *clusterpb.Reply {
	j, err := messages.ParseJSON(msg.Message)
	if err != nil {
		return g.reply(fmt.Errorf("%w: message: %w", errInvalid, err))
	}
	m, err := messages.ImportMessage(j)
	if err != nil {
		return g.reply(fmt.Errorf("%w: message: %w", errInvalid, err))
	}
	id := string(m.ID())
	if err := g.seed(c); err != nil {
		return g.reply(err)
	}
	if _, ok := g.accepted[id]; ok {
		return g.reply(nil)
	}
	switch msg.Kind {
	case clusterpb.SendKind_SEND_KIND_STEER:
		err = g.m.host.Steer(c, g.id, m)
	case clusterpb.SendKind_SEND_KIND_INJECT:
		err = g.m.host.Inject(c, g.id, m)
	default:
		err = g.m.host.Followup(c, g.id, m)
	}
	if errors.Is(err, inbox.ErrDuplicateID) {
		err = nil // pending already: delivered by an earlier attempt
	}
	if err == nil {
		g.accept(id)
	}
	return g.reply(err)
}

// seed fills accepted, once per activation, with the ids of the
// session's derived messages: those a turn already took in.
func (g *grain) seed(c context.Context) error {
	if g.seeded {
		return nil
	}
	ms, err := g.m.host.Messages(c, g.id)
	if err != nil {
		return err
	}
	g.accepted = make(map[string]struct{}, min(len(ms), acceptedMessagesToKeep))
	for i := max(len(ms)-acceptedMessagesToKeep, 0); i < len(ms); i++ {
		if m := ms[i]; m.ID() != "" {
			g.accept(string(m.ID()))
		}
	}
	g.seeded = true
	return nil
}

func (g *grain) accept(id string) {
	if _, ok := g.accepted[id]; ok {
		return
	}
	g.accepted[id] = struct{}{}
	g.order = append(g.order, id)
	if len(g.order) > acceptedMessagesToKeep {
		delete(g.accepted, g.order[0])
		g.order = g.order[1:]
	}
}

func (g *grain) messages(c context.Context) *clusterpb.Reply {
	ms, err := g.m.host.Messages(c, g.id)
	if err != nil {
		return g.reply(err)
	}
	b := []byte{'['}
	for i, m := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		j, err := m.MarshalJSON()
		if err != nil {
			return g.reply(err)
		}
		b = append(b, j...)
	}
	r := g.reply(nil)
	r.Messages = append(b, ']')
	return r
}

func (g *grain) stats(c context.Context) *clusterpb.Reply {
	st, err := g.m.host.Stats(c, g.id)
	if err != nil {
		return g.reply(err)
	}
	u := st.Usage
	r := g.reply(nil)
	r.Stats = &clusterpb.Stats{Events: st.Events, Chunks: st.Chunks, Turns: st.Turns, Durable: st.Durable,
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, ReasoningTokens: u.ReasoningTokens.Or(0),
		CacheReadTokens: u.CacheReadTokens.Or(0), CacheWriteTokens: u.CacheWriteTokens.Or(0)}
	return r
}

// fork forks the session here, then lets the child go: the child's id
// places it on whichever member owns that id, which loads it from the
// store on its first request.
func (g *grain) fork(c context.Context, msg *clusterpb.Fork) *clusterpb.Reply {
	child, err := g.m.host.Fork(c, g.id, msg.Boundary)
	if err != nil {
		return g.reply(err)
	}
	if err := g.m.host.Evict(c, child); err != nil {
		return g.reply(err)
	}
	r := g.reply(nil)
	r.Id = string(child)
	return r
}

func (g *grain) waitIdle(c context.Context, msg *clusterpb.WaitIdle) *clusterpb.Reply {
	wait := min(time.Duration(msg.WaitMs)*time.Millisecond, g.m.cfg.RequestTimeout/2)
	wc, cancel := context.WithTimeout(c, wait)
	defer cancel()
	err := g.m.host.WaitIdle(wc, g.id)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && c.Err() == nil {
		return g.reply(nil) // not idle within the wait; Idle stays false
	}
	r := g.reply(err)
	r.Idle = err == nil
	return r
}

// events answers GetEvents: the events from msg.From on, bounded, waiting
// up to msg.WaitMs for the first when there is none yet.
func (g *grain) events(c context.Context, msg *clusterpb.GetEvents) *clusterpb.Reply {
	limit := maxEventsPerReply
	if msg.Max > 0 {
		limit = min(limit, int(msg.Max))
	}
	start := msg.From
	check := msg.AfterType != "" && msg.From > 0
	if check {
		start--
	}
	es, err := g.m.host.Events(c, g.id, start)
	if err != nil {
		return g.reply(err)
	}
	var out []session.Event
	diverged := check // until the event at from-1 is found the same
	for _, ev := range es {
		if check {
			check = false
			if !sameEvent(ev, msg) {
				break
			}
			diverged = false
			continue
		}
		out = append(out, ev)
		if len(out) == limit {
			break
		}
	}
	if diverged {
		return g.reply(fmt.Errorf("%w: the log no longer holds the %s event at seq %d that was received (its member died before it was durable; the log was repaired)",
			ErrDiverged, msg.AfterType, msg.From-1))
	}
	if len(out) == 0 && msg.WaitMs > 0 {
		out, err = g.waitEvents(c, msg.From, limit, min(time.Duration(msg.WaitMs)*time.Millisecond, g.m.cfg.RequestTimeout/2))
		if err != nil {
			return g.reply(err)
		}
	}
	r := g.reply(nil)
	size := 0
	for _, ev := range out {
		line := session.AppendEvent(nil, ev)
		if size+len(line) > maxReplyBytes && len(r.Events) > 0 {
			break
		}
		size += len(line)
		r.Events = append(r.Events, line)
	}
	return r
}

// sameEvent says ev is the event a GetEvents names as received before.
func sameEvent(ev session.Event, msg *clusterpb.GetEvents) bool {
	return string(ev.Type()) == msg.AfterType && ev.Time() == msg.AfterTime
}

// waitEvents subscribes from seq from and returns what arrives first
// (with whatever follows it at once), or nothing after wait.
func (g *grain) waitEvents(c context.Context, from int64, limit int, wait time.Duration) ([]session.Event, error) {
	sub, err := g.m.host.Subscribe(c, g.id, from)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	t := time.NewTimer(wait)
	defer t.Stop()
	var out []session.Event
	select {
	case ev, ok := <-sub.Events():
		if !ok {
			return nil, sub.Err()
		}
		out = append(out, ev)
	case <-t.C:
		return nil, nil
	case <-c.Done():
		return nil, context.Cause(c)
	}
	for len(out) < limit {
		select {
		case ev, ok := <-sub.Events():
			if !ok {
				return out, nil
			}
			out = append(out, ev)
		default:
			return out, nil
		}
	}
	return out, nil
}
