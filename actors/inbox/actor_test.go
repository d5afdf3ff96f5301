package inbox

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/testutil"
	"github.com/dshgo/dsh/messages"
)

const waitFor = 5 * time.Second

// spawn spawns props and stops the actor at cleanup. Cleanups run in
// reverse order, so actors spawned later are stopped first: spawn the
// owner, then the session, then the inbox.
func spawn(t *testing.T, sys *actor.ActorSystem, props *actor.Props) *actor.PID {
	t.Helper()
	pid := sys.Root.Spawn(props)
	t.Cleanup(func() { require.NoError(t, sys.Root.StopFuture(pid).Wait()) })
	return pid
}

// owner collects the inbox's notifications on a channel.
type owner struct{ got chan any }

func (o *owner) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case Woken, Inserted, Discarded, ClaimedNotice:
		o.got <- m
	}
}

func spawnOwner(t *testing.T, sys *actor.ActorSystem) (*actor.PID, chan any) {
	t.Helper()
	o := &owner{got: make(chan any, 256)}
	return spawn(t, sys, actor.PropsFromProducer(func() actor.Actor { return o })), o.got
}

func spawnSession(t *testing.T, sys *actor.ActorSystem, l *session.Log) *actor.PID {
	t.Helper()
	n := int64(0)
	props, err := session.Props(session.Config{Log: l, Clock: func() int64 { n++; return testNow + n }})
	require.NoError(t, err)
	return spawn(t, sys, props)
}

func spawnInbox(t *testing.T, sys *actor.ActorSystem, cfg ActorConfig) *actor.PID {
	t.Helper()
	props, err := Props(cfg)
	require.NoError(t, err)
	return spawn(t, sys, props)
}

// result waits for a future's reply of type T.
func result[T any](t *testing.T, f *actor.Future) T {
	t.Helper()
	res, err := f.Result()
	require.NoError(t, err)
	r, ok := res.(T)
	require.Truef(t, ok, "reply is %T %+v", res, res)
	return r
}

func ask[T any](t *testing.T, sys *actor.ActorSystem, pid *actor.PID, msg any) T {
	t.Helper()
	return result[T](t, sys.Root.RequestFuture(pid, msg, waitFor))
}

// next receives the next notification, or fails after a deadline.
func next(t *testing.T, ch chan any) any {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(waitFor):
		t.Fatal("no notification")
		return nil
	}
}

func sessionEvents(t *testing.T, sys *actor.ActorSystem, pid *actor.PID) session.Events {
	t.Helper()
	return ask[session.EventsReply](t, sys, pid, session.QueryEvents{From: 0}).Events
}

func splicesOf(es session.Events) []messages.JSON {
	var out []messages.JSON
	for e := range es.All() {
		if e.Type() == session.TypeInboxSpliced {
			out = append(out, e.Data())
		}
	}
	return out
}

func TestActorSendsClaimsAndRebuildsEndToEnd(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	ownerPID, notes := spawnOwner(t, sys)
	l := newLog(t)
	sess := spawnSession(t, sys, l)
	ib := spawnInbox(t, sys, ActorConfig{Session: sess, Owner: ownerPID})

	p1, p2, c, st := user(t, "p1"), user(t, "p2"), pluginContext(t, "ctx"), user(t, "steer")
	// Pipelined: none waits for the previous reply, so every plan after
	// the first is made while an append is in flight.
	futures := []*actor.Future{
		sys.Root.RequestFuture(ib, Followup(1, p1), waitFor),
		sys.Root.RequestFuture(ib, Followup(2, p2), waitFor),
		sys.Root.RequestFuture(ib, Inject(3, c), waitFor),
		sys.Root.RequestFuture(ib, Steer(4, st), waitFor),
		sys.Root.RequestFuture(ib, Followup(5, p1), waitFor), // duplicate of the first
	}
	for i, f := range futures[:4] {
		r := result[SendReply](t, f)
		require.Equal(t, uint64(i+1), r.Ref)
	}
	dup := result[SendFailed](t, futures[4])
	require.ErrorIs(t, dup.Err, ErrDuplicateID, "planned against the state the first send left")

	// The splices reached the log in request order, each planned against
	// the previous one's result.
	got := splicesOf(sessionEvents(t, sys, sess))
	require.Len(t, got, 4)
	for i, want := range []struct {
		target string
		start  int
		m      messages.Message
	}{{"next-turn", 0, p1}, {"next-turn", 1, p2}, {"next-step", 0, c}, {"next-step", 1, st}} {
		requireJSON(t, fmt.Sprintf(`{"target":%q,"start":%d,"inserted":[%s]}`, want.target, want.start, want.m.JSON()), got[i])
	}

	// The owner heard each insert, and a wake for each waking send, before
	// the reply.
	var woken []messages.MessageID
	var inserted []string
	for range 7 {
		switch m := next(t, notes).(type) {
		case Inserted:
			inserted = append(inserted, m.Message.Block(0).Text())
		case Woken:
			woken = append(woken, m.ID)
		default:
			t.Fatalf("unexpected %T", m)
		}
	}
	require.Equal(t, []string{"p1", "p2", "ctx", "steer"}, inserted)
	require.Equal(t, []messages.MessageID{p1.ID(), p2.ID(), st.ID()}, woken, "inject does not wake")

	// The claim takes next-step, then the prompt, in one atomic append.
	cl := ask[Claimed](t, sys, ib, Claim{Ref: 9, Target: NextTurn, Turn: 1})
	require.Equal(t, uint64(9), cl.Ref)
	require.Equal(t, []string{"ctx", "steer", "p1"}, texts(cl.Messages()))
	require.Equal(t, 2, cl.Events.Len())
	requireJSON(t, `{"target":"next-step","start":0,"removedCount":2,"inserted":[]}`, cl.Events.At(0).Data())
	requireJSON(t, `{"target":"next-turn","start":0,"removedCount":1,"inserted":[]}`, cl.Events.At(1).Data())
	for _, want := range []string{"ctx", "steer", "p1"} {
		n, ok := next(t, notes).(ClaimedNotice)
		require.True(t, ok)
		require.Equal(t, want, n.Message.Block(0).Text())
		require.Equal(t, int64(1), n.Turn)
	}

	pend := ask[Pending](t, sys, ib, QueryPending{Ref: 10})
	require.Equal(t, []string{"p2"}, texts(pend.NextTurn()))
	require.Empty(t, pend.NextStep())

	// The live lists are the lists the log rebuilds.
	r, err := Rebuild(sessionEvents(t, sys, sess).All(), 0, Config{})
	require.NoError(t, err)
	live := newState(t, Config{})
	live.lists = [2][]messages.Message{pend.NextTurn(), pend.NextStep()}
	require.True(t, r.Equal(live))

	// An empty claim appends nothing.
	empty := ask[Claimed](t, sys, ib, Claim{Ref: 11, Target: NextStep, Turn: 1})
	require.Empty(t, empty.Messages())
	require.Zero(t, empty.Events.Len())
}

func TestActorRemoveReplaceClear(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	ownerPID, notes := spawnOwner(t, sys)
	sess := spawnSession(t, sys, newLog(t))
	ib := spawnInbox(t, sys, ActorConfig{Session: sess, Owner: ownerPID})

	a, b, c := user(t, "a"), user(t, "b"), user(t, "c")
	for i, m := range []messages.Message{a, b} {
		ask[SendReply](t, sys, ib, Followup(uint64(i), m))
	}
	ask[SendReply](t, sys, ib, Inject(3, c))
	for range 5 {
		next(t, notes) // 3 inserted, 2 woken
	}

	require.True(t, ask[RemoveReply](t, sys, ib, Remove{Ref: 4, ID: a.ID()}).Removed)
	require.False(t, ask[RemoveReply](t, sys, ib, Remove{Ref: 5, ID: a.ID()}).Removed, "no longer pending")
	d, ok := next(t, notes).(Discarded)
	require.True(t, ok)
	require.Equal(t, a.ID(), d.Message.ID())

	b2 := user(t, "b2")
	ask[ReplaceReply](t, sys, ib, Replace{Ref: 6, ID: b.ID(), Message: b2})
	f := ask[ReplaceFailed](t, sys, ib, Replace{Ref: 7, ID: b.ID(), Message: b2})
	require.ErrorIs(t, f.Err, ErrNotPending)

	cr := ask[ClearReply](t, sys, ib, Clear{Ref: 8})
	require.Equal(t, []string{"c", "b2"}, texts(cr.Discarded()), "next-step first")
	require.Empty(t, ask[ClearReply](t, sys, ib, Clear{Ref: 9}).Discarded())

	got := splicesOf(sessionEvents(t, sys, sess))
	require.Len(t, got, 7)
	requireJSON(t, `{"target":"next-turn","start":0,"removedCount":1,"inserted":[],"outcome":"canceled"}`, got[3])
	requireJSON(t, `{"target":"next-turn","start":0,"removedCount":1,"inserted":[`+b2.JSON().String()+`],"outcome":"canceled"}`, got[4])
	requireJSON(t, `{"target":"next-step","start":0,"removedCount":1,"inserted":[],"outcome":"canceled"}`, got[5])
	requireJSON(t, `{"target":"next-turn","start":0,"removedCount":1,"inserted":[],"outcome":"canceled"}`, got[6])
}

func TestActorBoundRefusesExternalSendsNotLoopPushes(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	sess := spawnSession(t, sys, newLog(t))
	ib := spawnInbox(t, sys, ActorConfig{Session: sess, Inbox: Config{MaxPending: 1}})

	ask[SendReply](t, sys, ib, Followup(1, user(t, "a")))
	f := ask[SendFailed](t, sys, ib, Steer(2, user(t, "b")))
	require.ErrorIs(t, f.Err, ErrInboxFull)
	ask[SendReply](t, sys, ib, Send{Ref: 3, Message: pluginContext(t, "tool context"), Target: NextStep, Origin: Loop})

	pend := ask[Pending](t, sys, ib, QueryPending{})
	require.Equal(t, []string{"a"}, texts(pend.NextTurn()))
	require.Equal(t, []string{"tool context"}, texts(pend.NextStep()))
}

// refusingSession is a session actor stand-in that refuses the appends
// whose index (from 0) is in refuse with errRefused, and commits the others
// to its log.
type refusingSession struct {
	l       *session.Log
	refuse  map[int]bool
	appends int
}

var errRefused = errors.New("test: append refused")

func (s *refusingSession) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case session.QueryHeader:
		ctx.Respond(session.HeaderReply{Ref: m.Ref, Len: s.l.Len(), Session: s.l.Header()})
	case session.QueryEvents:
		ctx.Respond(session.EventsReply{Ref: m.Ref, Events: s.l.EventsFrom(m.From)})
	case session.Append:
		n := s.appends
		s.appends++
		if s.refuse[n] {
			ctx.Respond(session.AppendFailed{Ref: m.Ref, Err: errRefused})
			return
		}
		es, err := s.l.AppendBatch(m.Drafts(), testNow+s.l.Len())
		if err != nil {
			ctx.Respond(session.AppendFailed{Ref: m.Ref, Err: err})
			return
		}
		ctx.Respond(session.AppendReply{Ref: m.Ref, Events: session.EventsOf(es)})
	}
}

func TestActorFailedAppendLeavesTheListsUnchanged(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	ownerPID, notes := spawnOwner(t, sys)
	fake := &refusingSession{l: newLog(t), refuse: map[int]bool{0: true, 2: true}}
	sess := spawn(t, sys, actor.PropsFromProducer(func() actor.Actor { return fake }))
	ib := spawnInbox(t, sys, ActorConfig{Session: sess, Owner: ownerPID})

	a := user(t, "a")
	f := ask[SendFailed](t, sys, ib, Followup(1, a))
	require.ErrorIs(t, f.Err, errRefused)
	require.Empty(t, ask[Pending](t, sys, ib, QueryPending{}).NextTurn())

	// The same message can be sent again: the refused one never became
	// pending.
	ask[SendReply](t, sys, ib, Followup(2, a))
	// The owner's first notification is from the committed send: the
	// refused one told nobody.
	ins, ok := next(t, notes).(Inserted)
	require.True(t, ok)
	require.Equal(t, a.ID(), ins.Message.ID())
	_, ok = next(t, notes).(Woken)
	require.True(t, ok)

	// A refused claim takes nothing.
	cf := ask[ClaimFailed](t, sys, ib, Claim{Ref: 3, Target: NextTurn, Turn: 1})
	require.ErrorIs(t, cf.Err, errRefused)
	pend := ask[Pending](t, sys, ib, QueryPending{})
	require.Equal(t, []string{"a"}, texts(pend.NextTurn()))
	cl := ask[Claimed](t, sys, ib, Claim{Ref: 4, Target: NextTurn, Turn: 1})
	require.Equal(t, []string{"a"}, texts(cl.Messages()))
	require.Equal(t, 2, sessionEvents(t, sys, sess).Len())
}

func TestActorRebuildsItsListsFromTheLogAtStart(t *testing.T) {
	// A parent with pending input, and a fork of it with input of its own.
	s, parent := newState(t, Config{}), newLog(t)
	commit(t, s, parent, must(t)(s.planAppend(NextTurn, user(t, "parent prompt"), External)))
	commit(t, s, parent, must(t)(s.planAppend(NextStep, user(t, "parent ctx"), External)))
	child, err := parent.Fork("child", session.LastEvent, 2, testNow)
	require.NoError(t, err)
	cs := newState(t, Config{})
	commit(t, cs, child, must(t)(cs.planAppend(NextStep, user(t, "child ctx"), External)))

	sys := testutil.NewActorSystem(t)
	pSess := spawnSession(t, sys, parent)
	cSess := spawnSession(t, sys, child)
	pInbox := spawnInbox(t, sys, ActorConfig{Session: pSess})
	cInbox := spawnInbox(t, sys, ActorConfig{Session: cSess})

	pp := ask[Pending](t, sys, pInbox, QueryPending{})
	require.Equal(t, []string{"parent prompt"}, texts(pp.NextTurn()))
	require.Equal(t, []string{"parent ctx"}, texts(pp.NextStep()))

	cp := ask[Pending](t, sys, cInbox, QueryPending{})
	require.Empty(t, cp.NextTurn(), "a fork does not inherit its parent's inbox")
	require.Equal(t, []string{"child ctx"}, texts(cp.NextStep()))

	// The rebuilt inbox continues the log: the next splice's start counts
	// the rebuilt messages.
	more := user(t, "more")
	ask[SendReply](t, sys, cInbox, Inject(1, more))
	got := splicesOf(sessionEvents(t, sys, cSess))
	requireJSON(t, fmt.Sprintf(`{"target":"next-step","start":1,"inserted":[%s]}`, more.JSON()), got[len(got)-1])
}

func TestActorConfigValidates(t *testing.T) {
	_, err := Props(ActorConfig{})
	require.Error(t, err)
	_, err = Props(ActorConfig{Session: actor.NewPID("nonhost", "x"), Inbox: Config{MaxPending: -1}})
	require.Error(t, err)
}

// lyingSession commits every append to its log but answers the append
// whose index is in short with no events, which the inbox cannot match to
// its plans.
type lyingSession struct {
	refusingSession
	short map[int]bool
	// repeat: the append whose index is in repeat is answered with its
	// first event in place of every event, so that the first plan applies
	// and the second is stale.
	repeat map[int]bool
}

func (s *lyingSession) Receive(ctx actor.Context) {
	m, ok := ctx.Message().(session.Append)
	if !ok {
		s.refusingSession.Receive(ctx)
		return
	}
	n := s.appends
	s.appends++
	es, err := s.l.AppendBatch(m.Drafts(), testNow+s.l.Len())
	if err != nil {
		ctx.Respond(session.AppendFailed{Ref: m.Ref, Err: err})
		return
	}
	if s.short[n] {
		es = nil
	}
	if s.repeat[n] {
		es = []session.Event{es[0], es[0]}
	}
	ctx.Respond(session.AppendReply{Ref: m.Ref, Events: session.EventsOf(es)})
}

// A committed batch that does not match its plans is a broken invariant:
// the actor panics, and its restart rebuilds the lists from the log, which
// holds the splice.
func TestActorRestartRebuildsFromTheLog(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	crashed := make(chan struct{}, 1)
	sub := sys.EventStream.Subscribe(func(evt any) {
		if _, ok := evt.(*actor.SupervisorEvent); ok {
			select {
			case crashed <- struct{}{}:
			default:
			}
		}
	})
	t.Cleanup(func() { sys.EventStream.Unsubscribe(sub) })
	fake := &lyingSession{refusingSession: refusingSession{l: newLog(t)}, short: map[int]bool{1: true}}
	sess := spawn(t, sys, actor.PropsFromProducer(func() actor.Actor { return fake }))
	ib := spawnInbox(t, sys, ActorConfig{Session: sess})

	a, b := user(t, "a"), user(t, "b")
	ask[SendReply](t, sys, ib, Followup(1, a))
	sys.Root.Send(ib, Followup(2, b)) // no sender: its reply is lost with the crash anyway
	select {
	case <-crashed:
	case <-time.After(waitFor):
		t.Fatal("the inbox did not crash")
	}

	pend := ask[Pending](t, sys, ib, QueryPending{})
	require.Equal(t, []string{"a", "b"}, texts(pend.NextTurn()))
	// And it goes on from there.
	ask[SendReply](t, sys, ib, Followup(3, user(t, "c")))
	require.Equal(t, 3, len(splicesOf(sessionEvents(t, sys, sess))))
}

func TestActorFailsRequestsOnceTheSessionStopped(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	l := newLog(t)
	props, err := session.Props(session.Config{Log: l})
	require.NoError(t, err)
	sess := sys.Root.Spawn(props)
	ib := spawnInbox(t, sys, ActorConfig{Session: sess})
	ask[SendReply](t, sys, ib, Followup(1, user(t, "a")))

	require.NoError(t, sys.Root.StopFuture(sess).Wait())
	// The session told its watchers before it stopped, and the Terminated
	// system message overtakes user messages: the send is refused, not
	// left waiting.
	sf := ask[SendFailed](t, sys, ib, Followup(2, user(t, "b")))
	require.ErrorIs(t, sf.Err, ErrSessionStopped)
	pend := ask[Pending](t, sys, ib, QueryPending{})
	require.Len(t, pend.NextTurn(), 1)
}

// forward asks a requester to send Msg to To with ctx.Request.
type forward struct {
	to  *actor.PID
	msg any
}

// requester sends requests and collects every reply on a channel.
type requester struct{ got chan any }

func (r *requester) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case forward:
		ctx.Request(m.to, m.msg)
	case SendReply, SendFailed, Claimed, ClaimFailed, RemoveReply, RemoveFailed,
		ReplaceReply, ReplaceFailed, ClearReply, ClearFailed, Pending:
		r.got <- m
	}
}

// The requests a crashed instance held (the one whose append committed,
// and the queued ones) are answered by its restart, each exactly once,
// and the owner hears each change of the log exactly once.
func TestActorRestartAnswersEveryRequestOnce(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	crashed := make(chan struct{}, 8)
	sub := sys.EventStream.Subscribe(func(evt any) {
		if _, ok := evt.(*actor.SupervisorEvent); ok {
			crashed <- struct{}{}
		}
	})
	t.Cleanup(func() { sys.EventStream.Unsubscribe(sub) })
	ownerPID, notes := spawnOwner(t, sys)
	// Append 2 is answered with no events (the batch/reply count check
	// panics before anything is applied); append 3, a claim of both lists,
	// with its first event twice (the first splice applies, the second is
	// stale: the panic comes after the owner heard the first).
	fake := &lyingSession{refusingSession: refusingSession{l: newLog(t)},
		short: map[int]bool{2: true}, repeat: map[int]bool{3: true}}
	sess := spawn(t, sys, actor.PropsFromProducer(func() actor.Actor { return fake }))
	ib := spawnInbox(t, sys, ActorConfig{Session: sess, Owner: ownerPID})
	rq := &requester{got: make(chan any, 64)}
	rqPID := spawn(t, sys, actor.PropsFromProducer(func() actor.Actor { return rq }))

	a, b, c, d := user(t, "a"), user(t, "b"), user(t, "c"), user(t, "d")
	ask[SendReply](t, sys, ib, Followup(1, a)) // append 0
	ask[SendReply](t, sys, ib, Inject(2, c))   // append 1
	// Pipelined: while b's append is in flight the others queue, and the
	// claim's append is in flight when d and the remove are queued.
	for _, m := range []any{
		Followup(3, b),                           // append 2: crash, committed
		Claim{Ref: 4, Target: NextTurn, Turn: 1}, // append 3: crash mid-apply, committed
		Followup(5, d),                           // append 4
		Remove{Ref: 6, ID: b.ID()},               // append 5
		Replace{Ref: 7, ID: b.ID(), Message: d},  // no longer pending: refused
		QueryPending{Ref: 8},
	} {
		sys.Root.Send(rqPID, forward{to: ib, msg: m})
	}

	replies := map[uint64][]any{}
	for done := false; !done; {
		var m any
		select {
		case m = <-rq.got:
		case <-time.After(waitFor):
			t.Fatalf("replies so far: %v", replies)
		}
		var ref uint64
		switch r := m.(type) {
		case SendReply:
			ref = r.Ref
		case Claimed:
			ref = r.Ref
		case RemoveReply:
			ref = r.Ref
		case ReplaceFailed:
			ref = r.Ref
		case Pending:
			ref, done = r.Ref, true
		default:
			t.Fatalf("unexpected reply %T %+v", m, m)
		}
		replies[ref] = append(replies[ref], m)
	}
	for ref := uint64(3); ref <= 8; ref++ {
		require.Lenf(t, replies[ref], 1, "ref %d", ref)
	}
	require.Len(t, replies, 6, "every reply precedes the query's")
	for range 2 {
		select {
		case <-crashed:
		case <-time.After(waitFor):
			t.Fatal("the inbox did not crash twice")
		}
	}

	require.Equal(t, b.ID(), replies[3][0].(SendReply).ID)
	require.Equal(t, []string{"c", "a"}, texts(replies[4][0].(Claimed).Messages()))
	require.Equal(t, d.ID(), replies[5][0].(SendReply).ID)
	require.True(t, replies[6][0].(RemoveReply).Removed)
	require.ErrorIs(t, replies[7][0].(ReplaceFailed).Err, ErrNotPending)
	pend := replies[8][0].(Pending)
	require.Equal(t, []string{"d"}, texts(pend.NextTurn()))
	require.Empty(t, pend.NextStep())

	// The lists are the lists the log rebuilds.
	es := sessionEvents(t, sys, sess)
	require.Len(t, splicesOf(es), 7, "a, c, b, the claim's two, d, the removal")
	r, err := Rebuild(es.All(), 0, Config{})
	require.NoError(t, err)
	live := newState(t, Config{})
	live.lists = [2][]messages.Message{pend.NextTurn(), pend.NextStep()}
	require.True(t, r.Equal(live))

	// The owner heard every change once: a marker send's notifications
	// come after every earlier one.
	marker := user(t, "marker")
	ask[SendReply](t, sys, ib, Inject(9, marker))
	var got []string
	for {
		var s string
		switch m := next(t, notes).(type) {
		case Inserted:
			s = "inserted " + m.Message.Block(0).Text()
		case Woken:
			s = "woken " + string(m.ID)
		case ClaimedNotice:
			s = fmt.Sprintf("claimed %s turn %d", m.Message.Block(0).Text(), m.Turn)
		case Discarded:
			s = "discarded " + m.Message.Block(0).Text()
		}
		if s == "inserted marker" {
			break
		}
		got = append(got, s)
	}
	require.ElementsMatch(t, []string{
		"inserted a", "woken " + string(a.ID()), "inserted c",
		"inserted b", "woken " + string(b.ID()),
		"claimed c turn 1", "claimed a turn 1",
		"inserted d", "woken " + string(d.ID()),
		"discarded b",
	}, got)
}
