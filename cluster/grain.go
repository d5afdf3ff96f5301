package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/persister"
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

// grain is the activation of one session on this member: the only way a
// session becomes resident on a member's host (the host runs with
// ManualResume). Quick requests are handled in Receive, in order; the
// ones that wait (WaitIdle, GetEvents, Flush) run in goroutines the grain
// joins before it lets the session go.
type grain struct {
	m      *Member
	id     session.SessionID
	ctx    context.Context // canceled when the grain stops
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// used says the session was made resident here (and must be handed
	// over when the grain stops).
	used bool
	// accepted holds the ids of the messages this activation delivered or
	// found in the log, so that a Send retried across a timeout or a
	// failover is not delivered twice.
	accepted map[string]struct{}
	order    []string
	seeded   bool
	// idle stops the grain once its session was passivated by the host
	// (Session.IdleTimeout) and no request came for as long; nil when the
	// host never passivates.
	idle     *time.Timer
	lastUsed time.Time
	inflight int // async requests running (guarded by the actor)
}

// idleCheck is the grain's own tick (see grain.idle).
type idleCheck struct{}

// asyncDone tells the grain an async request finished.
type asyncDone struct{}

func (g *grain) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *pcluster.ClusterInit:
		g.id = session.SessionID(msg.Identity.Identity)
		g.ctx, g.cancel = context.WithCancel(context.Background())
		g.lastUsed = time.Now()
		if d := g.m.cfg.Session.IdleTimeout; d > 0 {
			self, root := ctx.Self(), g.m.sys.Root
			g.idle = time.AfterFunc(d, func() { root.Send(self, idleCheck{}) })
		}
	case idleCheck:
		g.onIdleCheck(ctx)
	case asyncDone:
		g.inflight--
		g.lastUsed = time.Now()
	case *actor.Stopping:
		g.stopping()
	case *clusterpb.Create:
		ctx.Respond(g.create(msg))
	case *clusterpb.Send:
		g.sync(ctx, func(c context.Context) *clusterpb.Reply { return g.send(c, msg) })
	case *clusterpb.Cancel:
		g.sync(ctx, func(c context.Context) *clusterpb.Reply {
			return g.reply(g.m.host.Cancel(c, g.id, session.CancelCause{Kind: session.CauseKind(msg.Cause)}))
		})
	case *clusterpb.SetSystem:
		g.sync(ctx, func(c context.Context) *clusterpb.Reply { return g.reply(g.m.host.SetSystem(c, g.id, msg.Prompt)) })
	case *clusterpb.GetMessages:
		g.sync(ctx, g.messages)
	case *clusterpb.GetStats:
		g.sync(ctx, g.stats)
	case *clusterpb.Fork:
		g.sync(ctx, func(c context.Context) *clusterpb.Reply { return g.fork(c, msg) })
	case *clusterpb.Release:
		r := g.reply(nil)
		if g.used {
			r = g.reply(g.m.host.Evict(g.ctx, g.id))
			g.used = false
		}
		ctx.Respond(r)
		ctx.Stop(ctx.Self())
	case *clusterpb.WaitIdle:
		g.async(ctx, func(c context.Context) *clusterpb.Reply { return g.waitIdle(c, msg) })
	case *clusterpb.Flush:
		g.async(ctx, func(c context.Context) *clusterpb.Reply {
			d, err := g.m.host.Flush(c, g.id)
			r := g.reply(err)
			r.Seq = d
			return r
		})
	case *clusterpb.GetEvents:
		g.async(ctx, func(c context.Context) *clusterpb.Reply { return g.events(c, msg) })
	}
}

// onIdleCheck stops the grain when its session is no longer resident
// (the host passivated it) and the grain saw no request for IdleTimeout;
// otherwise it looks again later. The next request activates a new grain,
// which resumes the session.
func (g *grain) onIdleCheck(ctx actor.Context) {
	d := g.m.cfg.Session.IdleTimeout
	if wait := d - time.Since(g.lastUsed); wait > 0 || g.inflight > 0 {
		g.idle.Reset(max(wait, d/4))
		return
	}
	if _, err := g.m.host.SessionPID(g.id); err == nil {
		g.idle.Reset(d) // still resident: the host has not passivated it yet
		return
	}
	ctx.Stop(ctx.Self())
}

// reply is the Reply of err.
func (g *grain) reply(err error) *clusterpb.Reply {
	r := &clusterpb.Reply{Member: g.m.Address()}
	if err != nil {
		r.Code, r.Error = codeOf(err), err.Error()
		if g.ctx != nil && g.ctx.Err() != nil {
			r.Code = clusterpb.Code_CODE_CLOSED
		}
	}
	return r
}

// ensure makes the session resident here. A session that is not stored,
// or whose writer lock another member holds, stops the grain: the first
// is no session at all, the second is the loser of two activations and
// must not linger.
func (g *grain) ensure(ctx actor.Context, c context.Context) error {
	err := g.m.host.Resume(c, g.id)
	if err == nil {
		g.used = true
		return nil
	}
	if errors.Is(err, supervisor.ErrNoSession) || errors.Is(err, persister.ErrFenced) {
		ctx.Stop(ctx.Self())
	}
	return err
}

// request begins a request: the grain was used now, and the request's
// context ends with the grain or after RequestTimeout.
func (g *grain) request() (context.Context, context.CancelFunc) {
	g.lastUsed = time.Now()
	return context.WithTimeout(g.ctx, g.m.cfg.RequestTimeout)
}

// sync runs fn in Receive once the session is resident.
func (g *grain) sync(ctx actor.Context, fn func(context.Context) *clusterpb.Reply) {
	c, cancel := g.request()
	defer cancel()
	if err := g.ensure(ctx, c); err != nil {
		ctx.Respond(g.reply(err))
		return
	}
	r := fn(c)
	if r.Code == clusterpb.Code_CODE_LOCKED {
		ctx.Stop(ctx.Self()) // another writer has the session: this activation lost
	}
	ctx.Respond(r)
}

// async runs fn in a goroutine once the session is resident, and sends
// its reply to the requester.
func (g *grain) async(ctx actor.Context, fn func(context.Context) *clusterpb.Reply) {
	c, cancel := g.request()
	if err := g.ensure(ctx, c); err != nil {
		cancel()
		ctx.Respond(g.reply(err))
		return
	}
	sender, self, root := ctx.Sender(), ctx.Self(), g.m.sys.Root
	g.wg.Add(1)
	g.inflight++
	go func() {
		defer g.wg.Done()
		defer cancel()
		r := fn(c)
		if r.Code == clusterpb.Code_CODE_LOCKED {
			root.Stop(self) // another writer has the session: this activation lost
		}
		root.Send(sender, r)
		root.Send(self, asyncDone{})
	}()
}

func (g *grain) create(msg *clusterpb.Create) *clusterpb.Reply {
	c, cancel := g.request()
	defer cancel()
	_, err := g.m.host.Create(c, supervisor.CreateOptions{ID: g.id, Cwd: msg.Cwd})
	if err == nil {
		g.used = true
	}
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
	g.accepted = make(map[string]struct{}, min(ms.Len(), acceptedMessagesToKeep))
	for i := max(ms.Len()-acceptedMessagesToKeep, 0); i < ms.Len(); i++ {
		if m := ms.At(i); m.ID() != "" {
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
	for i, m := range ms.All() {
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

func (g *grain) stats(context.Context) *clusterpb.Reply {
	st, err := g.m.host.Stats(g.id)
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
	for ev := range es.All() {
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
	case ev, ok := <-sub.C:
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
		case ev, ok := <-sub.C:
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

// stopping hands the session over when the grain stops (it moved to
// another member, or this member is closing): the waiting requests are
// answered CLOSED (the caller retries where the session goes next), the
// running turn may finish within HandoffTimeout, then the session is
// evicted: disposed, flushed, its writer lock released.
func (g *grain) stopping() {
	if g.cancel == nil {
		return
	}
	if g.idle != nil {
		g.idle.Stop()
	}
	g.cancel()
	g.wg.Wait()
	if !g.used {
		return
	}
	c, cancel := context.WithTimeout(context.Background(), g.m.cfg.HandoffTimeout)
	_ = g.m.host.WaitIdle(c, g.id)
	cancel()
	c, cancel = context.WithTimeout(context.Background(), g.m.cfg.RequestTimeout)
	defer cancel()
	_ = g.m.host.Evict(c, g.id)
}

// errInvalid marks a request that could not be understood.
var errInvalid = errors.New("cluster: invalid request")

// codes pairs each wire code with the error a RemoteError of that code
// unwraps to, and with the errors a grain classifies as it. The first
// match wins: LOCKED comes first because a write fenced off by another
// member also fails the session closed (ErrNotDurable wraps it).
var codes = []struct {
	code clusterpb.Code
	err  error   // what RemoteError.Unwrap returns
	also []error // more errors classified as code
}{
	{clusterpb.Code_CODE_LOCKED, persister.ErrLocked, []error{persister.ErrFenced}},
	{clusterpb.Code_CODE_NO_SESSION, supervisor.ErrNoSession, nil},
	{clusterpb.Code_CODE_EXISTS, supervisor.ErrExists, []error{persister.ErrExists}},
	{clusterpb.Code_CODE_NOT_DURABLE, supervisor.ErrNotDurable, nil},
	{clusterpb.Code_CODE_INBOX_FULL, inbox.ErrInboxFull, nil},
	{clusterpb.Code_CODE_DISPOSED, agent.ErrDisposed, nil},
	{clusterpb.Code_CODE_CLOSED, supervisor.ErrClosed, []error{supervisor.ErrEvicted}},
	{clusterpb.Code_CODE_FORK, session.ErrFork, nil},
	{clusterpb.Code_CODE_INVALID, errInvalid, nil},
	{clusterpb.Code_CODE_DIVERGED, ErrDiverged, nil},
	{clusterpb.Code_CODE_DEADLINE, context.DeadlineExceeded, nil},
}

// codeOf classifies an error for the wire.
func codeOf(err error) clusterpb.Code {
	if err == nil {
		return clusterpb.Code_CODE_OK
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
		for _, e := range c.also {
			if errors.Is(err, e) {
				return c.code
			}
		}
	}
	return clusterpb.Code_CODE_INTERNAL
}
