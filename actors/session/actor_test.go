package session

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/dshgo/dsh/internal/testutil"
	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func spawnSession(t *testing.T, sys *actor.ActorSystem, cfg Config) *actor.PID {
	t.Helper()
	props, err := Props(cfg)
	require.NoError(t, err)
	pid := sys.Root.Spawn(props)
	t.Cleanup(func() { require.NoError(t, sys.Root.StopFuture(pid).Wait()) })
	return pid
}

func request[T any](t *testing.T, sys *actor.ActorSystem, pid *actor.PID, msg any) T {
	t.Helper()
	res, err := sys.Root.RequestFuture(pid, msg, 5*time.Second).Result()
	require.NoError(t, err)
	reply, ok := res.(T)
	require.Truef(t, ok, "reply is %T: %+v", res, res)
	return reply
}

func testHeader() Header { return Header{ID: "s-test", CreatedAt: 1, Cwd: "/tmp/w"} }

func userDraft(t *testing.T, text string) Draft {
	t.Helper()
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
	require.NoError(t, err)
	return UserMessage{Message: m}.Draft()
}

func TestActorAppendsAreAckedWithCommittedSeqs(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	l, err := New(testHeader())
	require.NoError(t, err)
	now := int64(1000)
	pid := spawnSession(t, sys, Config{Log: l, Clock: func() int64 { now++; return now }})

	r := request[AppendReply](t, sys, pid, NewAppend(7, userDraft(t, "a"), userDraft(t, "b")))
	require.Equal(t, uint64(7), r.Ref)
	require.Equal(t, 2, r.Events.Len())
	require.Equal(t, int64(0), r.Events.At(0).Seq())
	require.Equal(t, int64(1), r.Events.At(1).Seq())
	require.Equal(t, r.Events.At(0).Time(), r.Events.At(1).Time(), "a batch shares one time")

	r = request[AppendReply](t, sys, pid, NewAppend(8, TurnStart{Turn: 1}.Draft()))
	require.Equal(t, int64(2), r.Events.At(0).Seq())

	msgs := request[MessagesReply](t, sys, pid, QueryMessages{Ref: 9})
	require.Equal(t, int64(3), msgs.Len)
	require.Equal(t, 2, msgs.Messages.Len())
	require.Equal(t, "b", msgs.Messages.At(1).Block(0).Text())
}

func TestActorRefusedAppendLeavesLogUnchanged(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	l, err := New(testHeader())
	require.NoError(t, err)
	pid := spawnSession(t, sys, Config{Log: l})

	// The second draft is a surface type without a surfaceOp: the whole
	// batch is refused, the first draft included.
	bad := NewDraft(TypeUserMessage, userDraft(t, "x").Data())
	f := request[AppendFailed](t, sys, pid, NewAppend(1, userDraft(t, "ok"), bad))
	require.ErrorIs(t, f.Err, ErrInvalid)
	require.ErrorContains(t, f.Err, "surfaceOp")

	ev := request[EventsReply](t, sys, pid, QueryEvents{From: 0})
	require.Equal(t, 0, ev.Events.Len())

	f = request[AppendFailed](t, sys, pid, NewAppend(2, NewDraft("no/such-type", messages.MustParseJSON(`{}`))))
	var unsupported *UnsupportedTypeError
	require.ErrorAs(t, f.Err, &unsupported)
	require.Equal(t, EventType("no/such-type"), unsupported.Type)
}

// subscriber collects EventsCommitted and reports each batch on a channel.
type subscriber struct{ got chan Events }

func (s *subscriber) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(EventsCommitted); ok {
		s.got <- m.Events
	}
}

func TestActorSubscriberGetsPastThenLiveEventsInOrder(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	l, err := New(testHeader())
	require.NoError(t, err)
	pid := spawnSession(t, sys, Config{Log: l})
	request[AppendReply](t, sys, pid, NewAppend(1, userDraft(t, "0"), userDraft(t, "1"), userDraft(t, "2")))

	sub := &subscriber{got: make(chan Events, 16)}
	subPID := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return sub }))
	t.Cleanup(func() { require.NoError(t, sys.Root.StopFuture(subPID).Wait()) })

	s := request[Subscribed](t, sys, pid, Subscribe{Subscriber: subPID, From: 1})
	require.Equal(t, int64(3), s.Next)
	request[AppendReply](t, sys, pid, NewAppend(2, userDraft(t, "3")))
	request[AppendReply](t, sys, pid, NewAppend(3, userDraft(t, "4"), userDraft(t, "5")))

	var seqs []int64
	deadline := time.After(5 * time.Second)
	for len(seqs) < 5 {
		select {
		case evs := <-sub.got:
			for e := range evs.All() {
				seqs = append(seqs, e.Seq())
			}
		case <-deadline:
			t.Fatalf("subscriber got only %v", seqs)
		}
	}
	require.Equal(t, []int64{1, 2, 3, 4, 5}, seqs)
}

func TestActorObserversRunAfterCommitAndFailuresAreContained(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	l, err := New(testHeader())
	require.NoError(t, err)
	var seen []int64
	failures := make(chan ObserverFailure, 4)
	pid := spawnSession(t, sys, Config{
		Log: l,
		Observers: []Observer{
			func(Event) error { return errors.New("observer one fails") },
			func(Event) error { panic("observer two panics") },
			func(e Event) error { seen = append(seen, e.Seq()); return nil },
		},
		OnObserverFailure: func(f ObserverFailure) { failures <- f },
	})
	r := request[AppendReply](t, sys, pid, NewAppend(1, userDraft(t, "a")))
	require.Equal(t, int64(0), r.Events.At(0).Seq(), "the append committed despite failing observers")
	require.Equal(t, []int64{0}, seen, "a later observer still ran") // ack follows observers
	require.ErrorContains(t, (<-failures).Err, "observer one fails")
	require.ErrorContains(t, (<-failures).Err, "panicked")
}

func TestActorForkRepliesWithSeedAndRefusesOpenTurn(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	l, err := New(testHeader())
	require.NoError(t, err)
	pid := spawnSession(t, sys, Config{Log: l})
	request[AppendReply](t, sys, pid, NewAppend(1, userDraft(t, "a"), TurnStart{Turn: 1}.Draft()))

	f := request[ForkFailed](t, sys, pid, Fork{Ref: 2, Child: "child", Boundary: LastEvent, CreatedAt: 5})
	var fe *ForkError
	require.ErrorAs(t, f.Err, &fe)
	require.Equal(t, ForkOpenTurn, fe.Code)

	ok := request[ForkReply](t, sys, pid, Fork{Ref: 3, Child: "child", Boundary: 0, CreatedAt: 5})
	require.Equal(t, "s-test", ok.Header.ParentSession)
	require.Equal(t, messages.Some(1), ok.Header.SeedLength)
	child, err := NewSeeded(ok.Header, ok.Seed.Slice(), 6)
	require.NoError(t, err)
	require.Equal(t, int64(2), child.Len())
	last, _ := child.Last()
	require.Equal(t, TypeEndSeed, last.Type())

	hdr := request[HeaderReply](t, sys, pid, QueryHeader{})
	require.Equal(t, int64(2), hdr.Len, "the parent is untouched")
}

func TestObserverCannotAppendReentrantly(t *testing.T) {
	l, err := New(testHeader())
	require.NoError(t, err)
	var inner error
	l.Observe(func(e Event) error {
		if e.Seq() == 0 {
			_, inner = l.Append(userDraft(t, "nested"), 2)
		}
		return nil
	})
	_, err = l.Append(userDraft(t, "outer"), 1)
	require.NoError(t, err)
	require.ErrorIs(t, inner, ErrReentrantAppend)
	require.Equal(t, int64(1), l.Len())
}

func TestContainsObserverFailuresAfterAppendCommitPoint(t *testing.T) {
	l, err := New(testHeader())
	require.NoError(t, err)
	var later []int64
	var failures []ObserverFailure
	l.OnObserverFailure(func(f ObserverFailure) { failures = append(failures, f) })
	l.Observe(func(Event) error { panic("boom") })
	l.Observe(func(Event) error { return errors.New("bad") })
	l.Observe(func(e Event) error { later = append(later, e.Seq()); return nil })
	e, err := l.Append(userDraft(t, "x"), 1)
	require.NoError(t, err)
	require.Equal(t, int64(0), e.Seq())
	require.Equal(t, int64(1), l.Len(), "the event is committed")
	require.Equal(t, []int64{0}, later, "later observers still run")
	require.Len(t, failures, 2)
}

// crashes reports each supervisor event (an actor failure) of sys.
func crashes(t *testing.T, sys *actor.ActorSystem) <-chan struct{} {
	t.Helper()
	ch := make(chan struct{}, 16)
	sub := sys.EventStream.Subscribe(func(evt any) {
		if _, ok := evt.(*actor.SupervisorEvent); ok {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	})
	t.Cleanup(func() { sys.EventStream.Unsubscribe(sub) })
	return ch
}

// A panic inside Receive after the commit (here: the observer failure
// hook, which AppendBatch calls) restarts the actor. The restarted
// instance keeps the log and the subscriptions, answers the Append the
// crash interrupted with its committed events, sends the subscriber what
// it missed, and goes on.
func TestActorRestartAfterCommitAnswersTheAppendAndKeepsSubscribers(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	crashed := crashes(t, sys)
	l, err := New(testHeader())
	require.NoError(t, err)
	var failed, hooked int
	pid := spawnSession(t, sys, Config{
		Log: l,
		Observers: []Observer{func(e Event) error {
			if e.Seq() == 1 && failed == 0 {
				failed++
				return errors.New("observer fails once")
			}
			return nil
		}},
		OnObserverFailure: func(ObserverFailure) {
			if hooked++; hooked == 1 {
				panic("failure hook exploded")
			}
		},
	})
	sub := &subscriber{got: make(chan Events, 16)}
	subPID := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return sub }))
	t.Cleanup(func() { require.NoError(t, sys.Root.StopFuture(subPID).Wait()) })
	request[Subscribed](t, sys, pid, Subscribe{Subscriber: subPID})
	request[AppendReply](t, sys, pid, NewAppend(1, userDraft(t, "0")))

	r := request[AppendReply](t, sys, pid, NewAppend(2, userDraft(t, "1"), userDraft(t, "2")))
	require.Equal(t, uint64(2), r.Ref)
	require.Equal(t, 2, r.Events.Len())
	require.Equal(t, int64(1), r.Events.At(0).Seq())
	select {
	case <-crashed:
	case <-time.After(5 * time.Second):
		t.Fatal("the session actor did not crash")
	}
	r = request[AppendReply](t, sys, pid, NewAppend(3, userDraft(t, "3")))
	require.Equal(t, int64(3), r.Events.At(0).Seq())
	require.EqualValues(t, 4, request[MessagesReply](t, sys, pid, QueryMessages{}).Len)

	var seqs []int64
	deadline := time.After(5 * time.Second)
	for len(seqs) < 4 {
		select {
		case evs := <-sub.got:
			for e := range evs.All() {
				seqs = append(seqs, e.Seq())
			}
		case <-deadline:
			t.Fatalf("subscriber got only %v", seqs)
		}
	}
	require.Equal(t, []int64{0, 1, 2, 3}, seqs, "every committed event, in order, once")
}

// A panic before the commit (here: the clock) leaves the log unchanged;
// the restarted instance refuses the interrupted Append with ErrRestarted.
func TestActorRestartBeforeCommitRefusesTheAppend(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	crashed := crashes(t, sys)
	l, err := New(testHeader())
	require.NoError(t, err)
	var ticks int
	pid := spawnSession(t, sys, Config{Log: l, Clock: func() int64 {
		if ticks++; ticks == 2 {
			panic("clock exploded")
		}
		return int64(ticks)
	}})
	request[AppendReply](t, sys, pid, NewAppend(1, userDraft(t, "0")))
	f := request[AppendFailed](t, sys, pid, NewAppend(2, userDraft(t, "1")))
	require.Equal(t, uint64(2), f.Ref)
	require.ErrorIs(t, f.Err, ErrRestarted)
	<-crashed
	r := request[AppendReply](t, sys, pid, NewAppend(3, userDraft(t, "2")))
	require.Equal(t, int64(1), r.Events.At(0).Seq())
}

// appender is a subscriber that also appends: it forwards what it is told
// to the session with itself as the sender, and reports every
// EventsCommitted and AppendReply it gets, in order, as "ec 1 2" or
// "reply 7 delivered 1 2".
type appender struct {
	session *actor.PID
	got     chan string
}

type appendVia struct{ msg any }

func (a *appender) Receive(ctx actor.Context) {
	seqs := func(evs Events) string {
		var s string
		for e := range evs.All() {
			s += fmt.Sprintf(" %d", e.Seq())
		}
		return s
	}
	switch m := ctx.Message().(type) {
	case appendVia:
		ctx.Request(a.session, m.msg)
	case EventsCommitted:
		a.got <- "ec" + seqs(m.Events)
	case AppendReply:
		kind := "sent"
		if m.Delivered {
			kind = "delivered"
		}
		a.got <- fmt.Sprintf("reply %d %s%s", m.Ref, kind, seqs(m.Events))
	case Subscribed:
		a.got <- fmt.Sprintf("subscribed %d", m.Next)
	}
}

// A Delivering append by a subscriber is one message back, its reply
// carrying the events in their place in the subscription's order; any
// other append (not Delivering, or by someone who is not subscribed) is
// delivered to the subscription as before and replied to separately.
func TestActorDeliveringAppendRepliesInsteadOfEventsCommitted(t *testing.T) {
	sys := testutil.NewActorSystem(t)
	l, err := New(testHeader())
	require.NoError(t, err)
	pid := spawnSession(t, sys, Config{Log: l})
	a := &appender{session: pid, got: make(chan string, 16)}
	apid := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return a }))
	t.Cleanup(func() { require.NoError(t, sys.Root.StopFuture(apid).Wait()) })
	next := func() string {
		t.Helper()
		select {
		case s := <-a.got:
			return s
		case <-time.After(5 * time.Second):
			t.Fatal("the appender got nothing more")
			return ""
		}
	}

	// Not yet subscribed: nothing to deliver to.
	sys.Root.Send(apid, appendVia{NewAppend(1, userDraft(t, "0")).Delivering()})
	require.Equal(t, "reply 1 sent 0", next())
	sys.Root.Send(apid, appendVia{Subscribe{Subscriber: apid, From: 0}})
	require.Equal(t, "ec 0", next())
	require.Equal(t, "subscribed 1", next())

	sys.Root.Send(apid, appendVia{NewAppend(2, userDraft(t, "1"), userDraft(t, "2")).Delivering()})
	require.Equal(t, "reply 2 delivered 1 2", next())
	request[AppendReply](t, sys, pid, NewAppend(3, userDraft(t, "3")).Delivering()) // not a subscriber
	require.Equal(t, "ec 3", next())
	sys.Root.Send(apid, appendVia{NewAppend(4, userDraft(t, "4"))})
	require.Equal(t, "ec 4", next())
	require.Equal(t, "reply 4 sent 4", next())
	sys.Root.Send(apid, appendVia{NewAppend(5, userDraft(t, "5")).Delivering()})
	require.Equal(t, "reply 5 delivered 5", next())
	select {
	case s := <-a.got:
		t.Fatalf("unexpected %q", s)
	default:
	}
}
