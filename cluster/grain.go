package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	pcluster "github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/protobuf/proto"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/cluster/clusterpb"
	"github.com/dshgo/dsh/supervisor"
)

// grain is the activation of one session on this member: the only way a
// session becomes resident on a member's host (the host runs with
// ManualResume). Requests are served in the order they arrive, and
// nothing that waits runs in Receive while the grain serves them:
//
//   - loading the session from the store runs in a goroutine that
//     reports back (loaded), and the requests that arrive meanwhile wait,
//     in order, until it has (see [grain.serveWaiting]);
//   - every other request whose work waits on the session's actors or
//     the disk (Create, Send, Cancel, SetSystem, GetMessages, GetStats,
//     Fork, Release) runs in a goroutine too, one at a time: the grain is
//     busy (job) until its completion comes back (worked), and the
//     requests behind it wait, in order, so one request's work completes
//     before the next one's starts;
//   - the requests that wait for the session to do something (WaitIdle,
//     GetEvents, Flush) start in order but run concurrently, in
//     goroutines the grain joins before it lets the session go.
//
// So a slow load or a hung request delays only its own session, and the
// grain keeps reading its mailbox (its idle tick, a stop) meanwhile.
// The one wait left in Receive is the hand-over when the grain stops (see
// [grain.stopping]). See docs/cluster.md#grains.
type grain struct {
	m      *Member
	id     session.SessionID
	ctx    context.Context // canceled when the grain stops
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// used says the session was made resident here (and must be handed
	// over when the grain stops).
	used bool
	// loading is the load in flight (nil when none), job the request
	// whose work runs (nil when none), and waiting the requests not served
	// yet, in arrival order: they wait for the load or the job.
	loading *load
	job     *job
	waiting []request
	// stopped says the grain asked itself to stop: the requests still
	// waiting are answered CLOSED when it does.
	stopped bool
	// accepted holds the ids of the messages this activation delivered or
	// found in the log, so that a Send retried across a timeout or a
	// failover is not delivered twice. Only a Send's work touches it (and
	// order and seeded), off the mailbox: jobs run one at a time.
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

// job is the work of one request running off the mailbox. The goroutine
// sets rep before it ends; the grain reads it when worked comes back, or
// after joining the goroutine when it stops first.
type job struct {
	r   request
	rep *clusterpb.Reply
}

// request is a request to the grain and whom to answer.
type request struct {
	msg    proto.Message
	sender *actor.PID
	// reloaded says the request found the session gone once (the host
	// passivated it between the grain's check and the request) and waited
	// for a load since: a second "no session" is the answer.
	reloaded bool
}

// load is one Host.Resume of the grain's session, run off the mailbox.
// The goroutine that runs it and the grain share it under mu.
type load struct {
	mu        sync.Mutex
	done      bool  // the resume returned
	err       error // what it returned
	abandoned bool  // the grain stopped before it heard the result
}

// finish records the result of the load and says whether the grain
// still wants it.
func (l *load) finish(err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done, l.err = true, err
	return !l.abandoned
}

// abandon tells the load its grain stopped, and returns the result if
// there is one already (the grain then owns what it loaded; otherwise the
// load lets the session go itself when it ends).
func (l *load) abandon() (done bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.abandoned = true
	return l.done, l.err
}

// result returns the load's result once it is done.
func (l *load) result() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// idleCheck is the grain's own tick (see grain.idle).
type idleCheck struct{}

// asyncDone tells the grain an async request finished.
type asyncDone struct{}

// loaded tells the grain its load ended.
type loaded struct{ l *load }

// worked tells the grain the work of its job ended.
type worked struct{ j *job }

// reload hands back an async request that found the session gone (see
// request.reloaded).
type reload struct{ r request }

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
	case loaded:
		g.onLoaded(ctx, msg.l)
	case worked:
		g.onWorked(ctx, msg.j)
	case reload:
		g.arrive(ctx, msg.r)
	case *actor.Stopping:
		g.stopping(ctx)
	case *clusterpb.Create, *clusterpb.Send, *clusterpb.Cancel, *clusterpb.SetSystem, *clusterpb.GetMessages,
		*clusterpb.GetStats, *clusterpb.Fork, *clusterpb.Release, *clusterpb.WaitIdle, *clusterpb.Flush, *clusterpb.GetEvents:
		g.arrive(ctx, request{msg: msg.(proto.Message), sender: ctx.Sender()})
	}
}

// arrive queues a request behind those waiting and serves what can be.
func (g *grain) arrive(ctx actor.Context, r request) {
	g.lastUsed = time.Now()
	g.waiting = append(g.waiting, r)
	g.serveWaiting(ctx)
	if (g.loading != nil || g.job != nil) && g.m.cfg.waited != nil {
		g.m.cfg.waited(g.id, len(g.waiting))
	}
}

// serveWaiting serves the waiting requests in order until one needs the
// session while it is not resident, or one starts a job: the first starts
// a load (unless one is in flight) and it and those behind it wait for
// the load; those behind a job wait for its completion.
func (g *grain) serveWaiting(ctx actor.Context) {
	for len(g.waiting) > 0 && g.loading == nil && g.job == nil && !g.stopped {
		r := g.waiting[0]
		if needsSession(r.msg) && !g.resident() {
			g.load(ctx)
			return
		}
		g.waiting = g.waiting[1:]
		g.serve(ctx, r)
	}
}

// needsSession says whether a request works on the resident session
// (Create makes one, Release lets it go).
func needsSession(msg proto.Message) bool {
	switch msg.(type) {
	case *clusterpb.Create, *clusterpb.Release:
		return false
	}
	return true
}

// resident says whether the host holds the session now (a lookup that
// never waits).
func (g *grain) resident() bool {
	_, err := g.m.host.SessionPID(g.id)
	return err == nil
}

// load resumes the session in a goroutine that reports back with loaded.
// If the grain has stopped by the time the resume returns, the goroutine
// lets the session go itself (Evict), so that nothing it loaded stays
// resident with no grain to hand it over; Member.Close waits for it.
func (g *grain) load(ctx actor.Context) {
	l := &load{}
	g.loading = l
	c, cancel := context.WithTimeout(g.ctx, g.m.cfg.RequestTimeout)
	host, id, timeout, self, root := g.m.host, g.id, g.m.cfg.RequestTimeout, ctx.Self(), g.m.sys.Root
	g.m.loads.Add(1)
	go func() {
		defer g.m.loads.Done()
		err := host.Resume(c, id)
		cancel()
		if l.finish(err) {
			root.Send(self, loaded{l})
			return
		}
		if err == nil {
			ec, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			_ = host.Evict(ec, id)
		}
	}()
}

// onLoaded serves the requests that waited for a load that succeeded. A
// load that failed fails the requests that waited for it with its error
// (the next request tries again); a session that is not stored, or whose
// writer lock another member holds, stops the grain: the first is no
// session at all, the second is the loser of two activations and must
// not linger.
func (g *grain) onLoaded(ctx actor.Context, l *load) {
	if l != g.loading {
		return
	}
	g.loading = nil
	err := l.result()
	if err == nil {
		g.used = true
		g.serveWaiting(ctx)
		return
	}
	for len(g.waiting) > 0 && needsSession(g.waiting[0].msg) {
		g.respond(ctx, g.waiting[0], g.reply(err))
		g.waiting = g.waiting[1:]
	}
	if errors.Is(err, supervisor.ErrNoSession) || errors.Is(err, persister.ErrFenced) {
		g.stop(ctx)
		return
	}
	g.serveWaiting(ctx)
}

// serve handles a request once the session is resident (or when the
// request does not need it).
func (g *grain) serve(ctx actor.Context, r request) {
	switch msg := r.msg.(type) {
	case *clusterpb.Create:
		g.work(ctx, r, func(c context.Context) *clusterpb.Reply { return g.create(c, msg) })
	case *clusterpb.Send:
		g.work(ctx, r, func(c context.Context) *clusterpb.Reply { return g.send(c, msg) })
	case *clusterpb.Cancel:
		g.work(ctx, r, func(c context.Context) *clusterpb.Reply {
			return g.reply(g.m.host.Cancel(c, g.id, session.CancelCause{Kind: session.CauseKind(msg.Cause)}))
		})
	case *clusterpb.SetSystem:
		g.work(ctx, r, func(c context.Context) *clusterpb.Reply { return g.reply(g.m.host.SetSystem(c, g.id, msg.Prompt)) })
	case *clusterpb.GetMessages:
		g.work(ctx, r, g.messages)
	case *clusterpb.GetStats:
		g.work(ctx, r, g.stats)
	case *clusterpb.Fork:
		g.work(ctx, r, func(c context.Context) *clusterpb.Reply { return g.fork(c, msg) })
	case *clusterpb.Release:
		// The session is not the grain's to hand over any more once the
		// release starts: a stop meanwhile does not evict it again.
		used := g.used
		g.used = false
		g.work(ctx, r, func(c context.Context) *clusterpb.Reply {
			if !used {
				return g.reply(nil)
			}
			return g.reply(g.m.host.Evict(c, g.id))
		})
	case *clusterpb.WaitIdle:
		g.async(ctx, r, func(c context.Context) *clusterpb.Reply { return g.waitIdle(c, msg) })
	case *clusterpb.Flush:
		g.async(ctx, r, func(c context.Context) *clusterpb.Reply {
			d, err := g.m.host.Flush(c, g.id)
			rep := g.reply(err)
			rep.Seq = d
			return rep
		})
	case *clusterpb.GetEvents:
		g.async(ctx, r, func(c context.Context) *clusterpb.Reply { return g.events(c, msg) })
	}
}

// respond sends a request its reply.
func (g *grain) respond(ctx actor.Context, r request, rep *clusterpb.Reply) {
	if r.sender != nil {
		ctx.Send(r.sender, rep)
	}
}

// stop stops the grain; the requests still waiting are answered CLOSED as
// it stops.
func (g *grain) stop(ctx actor.Context) {
	g.stopped = true
	ctx.Stop(ctx.Self())
}

// onIdleCheck stops the grain when its session is no longer resident
// (the host passivated it) and the grain saw no request for IdleTimeout;
// otherwise it looks again later. The next request activates a new grain,
// which resumes the session.
func (g *grain) onIdleCheck(ctx actor.Context) {
	d := g.m.cfg.Session.IdleTimeout
	if wait := d - time.Since(g.lastUsed); wait > 0 || g.inflight > 0 || g.loading != nil || g.job != nil || len(g.waiting) > 0 {
		g.idle.Reset(max(wait, d/4))
		return
	}
	if g.resident() {
		g.idle.Reset(d) // still resident: the host has not passivated it yet
		return
	}
	g.stop(ctx)
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

// begin begins serving a request: the grain was used now, and the
// request's context ends with the grain or after RequestTimeout.
func (g *grain) begin() (context.Context, context.CancelFunc) {
	g.lastUsed = time.Now()
	return context.WithTimeout(g.ctx, g.m.cfg.RequestTimeout)
}

// gone says a request found the session gone (the host passivated it
// after the grain saw it resident) and may wait for a load, once.
func gone(r request, rep *clusterpb.Reply) bool {
	return rep.Code == clusterpb.Code_CODE_NO_SESSION && !r.reloaded
}

// work makes r the grain's job: fn runs in a goroutine that reports back
// with worked, and the requests behind it wait until it has. The work's
// context ends after RequestTimeout but not when the grain stops: a stop
// waits for the job to complete, as the request had begun (a Create, a
// Fork or a Release cut short could leave a session resident with no
// grain to hand it over).
func (g *grain) work(ctx actor.Context, r request, fn func(context.Context) *clusterpb.Reply) {
	g.lastUsed = time.Now()
	c, cancel := context.WithTimeout(context.Background(), g.m.cfg.RequestTimeout)
	j := &job{r: r}
	g.job = j
	self, root := ctx.Self(), g.m.sys.Root
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer cancel()
		j.rep = fn(c)
		root.Send(self, worked{j})
	}()
}

// onWorked answers the job's request and serves the requests that waited
// behind it. A job that found the session gone waits for a load (see
// request.reloaded); one that found its writer lock held by another
// member stops the grain (this activation lost), except a Create, which
// answers and stays.
func (g *grain) onWorked(ctx actor.Context, j *job) {
	if j != g.job {
		return
	}
	g.job = nil
	g.lastUsed = time.Now()
	r, rep := j.r, j.rep
	switch r.msg.(type) {
	case *clusterpb.Create:
		g.used = g.used || rep.Code == clusterpb.Code_CODE_OK
	case *clusterpb.Release:
		g.respond(ctx, r, rep)
		g.stop(ctx)
		return
	default:
		if gone(r, rep) {
			r.reloaded = true
			g.waiting = append([]request{r}, g.waiting...)
			g.serveWaiting(ctx)
			return
		}
		if rep.Code == clusterpb.Code_CODE_LOCKED {
			g.stop(ctx) // another writer has the session: this activation lost
		}
	}
	g.respond(ctx, r, rep)
	g.serveWaiting(ctx)
}

// async runs fn in a goroutine, and sends its reply to the requester.
func (g *grain) async(ctx actor.Context, r request, fn func(context.Context) *clusterpb.Reply) {
	c, cancel := g.begin()
	self, root := ctx.Self(), g.m.sys.Root
	g.wg.Add(1)
	g.inflight++
	go func() {
		defer g.wg.Done()
		defer cancel()
		rep := fn(c)
		switch {
		case gone(r, rep):
			r.reloaded = true
			root.Send(self, reload{r})
		case rep.Code == clusterpb.Code_CODE_LOCKED:
			root.Stop(self) // another writer has the session: this activation lost
			fallthrough
		default:
			if r.sender != nil {
				root.Send(r.sender, rep)
			}
		}
		root.Send(self, asyncDone{})
	}()
}

// stopping hands the session over when the grain stops (it moved to
// another member, or this member is closing): the waiting requests are
// answered CLOSED (the caller retries where the session goes next), the
// async requests in flight are canceled, and they and the job are joined
// (the job's requester gets what its work returned), the running turn
// may finish within HandoffTimeout, then the session is evicted:
// disposed, flushed, its writer lock released. A load still in flight is
// abandoned: it lets the session go itself when it ends. See
// docs/cluster.md#handoff.
//
// This is the one wait left in Receive, on purpose: protoactor keeps the
// grain in its placement table until Stopping returns, so no second
// activation of the session can start on this member while its hand-over
// runs (one that started then would find the session resident and serve
// it while it is being evicted). The grain serves nothing more by then,
// and the waits are bounded: the canceled async requests return, the job
// within RequestTimeout, the turn gets HandoffTimeout, the eviction
// RequestTimeout.
func (g *grain) stopping(ctx actor.Context) {
	if g.cancel == nil {
		return
	}
	if g.idle != nil {
		g.idle.Stop()
	}
	g.cancel()
	if g.loading != nil {
		// The session is resident here only if the load has succeeded;
		// a load still running lets go of what it loads itself.
		done, err := g.loading.abandon()
		g.used = done && err == nil
		g.loading = nil
	}
	for _, r := range g.waiting {
		g.respond(ctx, r, g.reply(errStopped))
	}
	g.waiting = nil
	g.wg.Wait()
	if j := g.job; j != nil {
		// Its worked will never be read: do here what onWorked would.
		g.job = nil
		rep := j.rep
		if needsSession(j.r.msg) && gone(j.r, rep) {
			rep = g.reply(errStopped) // it would have waited for a load
		}
		if _, ok := j.r.msg.(*clusterpb.Create); ok && rep.Code == clusterpb.Code_CODE_OK {
			g.used = true // created here: handed over below
		}
		g.respond(ctx, j.r, rep)
	}
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

// errStopped answers the requests a grain had not served when it stopped
// (with CLOSED: see grain.reply).
var errStopped = errors.New("cluster: the session's grain stopped before serving the request")
