//go:build !race

package cluster

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/cluster/clusterpb"
	"github.com/dshgo/dsh/internal/vfs"
	"github.com/dshgo/dsh/supervisor"
)

// gatedFS holds the writer-lock Lock of one session — the first thing a
// load of it does — until the test lets it go: a load as slow as the test
// wants, or failing as the test says. holdNext holds the next Lock of any
// session (the first write of a new one: a fork's child).
type gatedFS struct {
	vfs.FS
	mu      sync.Mutex
	id      string // the session whose next Lock is held ("": none)
	any     bool   // the next Lock is held, whichever its session
	entered chan<- struct{}
	release <-chan error // what the held Lock returns (nil: the lock itself)
}

// hold arms the gate for id's next Lock: entered is closed when the Lock
// is held, and release lets it go.
func (f *gatedFS) hold(id session.SessionID) (entered <-chan struct{}, release chan<- error) {
	e, r := make(chan struct{}), make(chan error, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.id, f.entered, f.release = string(id), e, r
	return e, r
}

// holdNext arms the gate for the next Lock, whichever its session.
func (f *gatedFS) holdNext() (entered <-chan struct{}, release chan<- error) {
	e, r := f.hold("")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.any = true
	return e, r
}

func (f *gatedFS) Lock(name string, holder []byte) (vfs.Lock, error) {
	f.mu.Lock()
	held := f.any || f.id != "" && strings.Contains(name, f.id)
	entered, release := f.entered, f.release
	if held {
		f.id, f.any = "", false
	}
	f.mu.Unlock()
	if held {
		close(entered)
		if err := <-release; err != nil {
			return nil, err
		}
	}
	return f.FS.Lock(name, holder)
}

// queued is a report of Config.waited: n requests wait in id's grain.
type queued struct {
	id session.SessionID
	n  int
}

// grainBed is one member writing through a gatedFS, with a replies actor
// that collects, in arrival order, the replies of the requests the test
// sends a grain directly.
type grainBed struct {
	t       *testing.T
	m       *Member
	fs      *gatedFS
	dir     string
	waited  chan queued // each time a request joins a grain's queue
	replies chan *clusterpb.Reply
	to      *actor.PID // the replies actor
}

func newGrainBed(t *testing.T) *grainBed {
	ctx := testCtx(t, time.Minute)
	p, err := synthetic.New(synthetic.Config{Seed: 7, TextChunks: 5})
	require.NoError(t, err)
	b := &grainBed{t: t, fs: &gatedFS{FS: vfs.OS()}, dir: t.TempDir(), waited: make(chan queued, 64),
		replies: make(chan *clusterpb.Reply, 16)}
	ms, err := StartLocal(ctx, 1, Config{Dir: b.dir, RequestTimeout: 10 * time.Second, HandoffTimeout: 5 * time.Second,
		Session: supervisor.Config{Provider: p}, fs: b.fs,
		waited: func(id session.SessionID, n int) {
			select {
			case b.waited <- queued{id, n}:
			default: // never block the grain
			}
		}})
	require.NoError(t, err)
	b.m = ms[0]
	t.Cleanup(func() { require.NoError(t, b.m.Close(context.Background())) })
	b.to = b.m.sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if r, ok := c.Message().(*clusterpb.Reply); ok {
			b.replies <- r
		}
	}))
	t.Cleanup(func() { b.m.sys.Root.Stop(b.to) })
	return b
}

// stored creates a session with one turn (a session with no event is not
// stored) and evicts it from the host: its grain stays, and its next
// request that needs the session loads it.
func (b *grainBed) stored(ctx context.Context) session.SessionID {
	id, err := b.m.Create(ctx, supervisor.CreateOptions{})
	require.NoError(b.t, err)
	require.NoError(b.t, b.m.Followup(ctx, id, userMsg(b.t, "hello")))
	require.NoError(b.t, b.m.WaitIdle(ctx, id))
	require.NoError(b.t, b.m.Host().Evict(ctx, id))
	return id
}

// send sends a request to the grain of id; its reply goes to b.replies.
// Requests sent one after another arrive in that order.
func (b *grainBed) send(id session.SessionID, req proto.Message) {
	b.m.sys.Root.RequestWithCustomSender(b.m.c.Get(string(id), Kind), req, b.to)
}

// next returns the next reply, failing the test after a while.
func (b *grainBed) next(what string) *clusterpb.Reply {
	b.t.Helper()
	select {
	case r := <-b.replies:
		return r
	case <-time.After(20 * time.Second):
		b.t.Fatalf("no reply: %s", what)
		return nil
	}
}

// noReply checks that no reply has come yet.
func (b *grainBed) noReply(what string) {
	b.t.Helper()
	select {
	case r := <-b.replies:
		b.t.Fatalf("%s: got a reply %v", what, r)
	default:
	}
}

// waitQueued waits until n requests wait in the grain of id (for its
// load or its job).
func (b *grainBed) waitQueued(id session.SessionID, n int) {
	b.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case got := <-b.waited:
			if got == (queued{id, n}) {
				return
			}
		case <-deadline:
			b.t.Fatalf("%d requests never queued in the grain", n)
		}
	}
}

// served checks that the grain of id answers a request now.
func (b *grainBed) served(id session.SessionID) {
	b.t.Helper()
	b.send(id, &clusterpb.GetStats{})
	r := b.next("the stats of " + string(id))
	require.Equal(b.t, clusterpb.Code_CODE_OK, r.Code, r.Error)
	require.Positive(b.t, r.Stats.Events)
}

// lockFree checks that nobody holds the writer lock of id.
func (b *grainBed) lockFree(id session.SessionID) {
	b.t.Helper()
	locks, err := filepath.Glob(filepath.Join(b.dir, "*", string(id), "session.lock"))
	require.NoError(b.t, err)
	require.Len(b.t, locks, 1)
	l, err := vfs.OS().Lock(locks[0], []byte("the test"))
	require.NoError(b.t, err, "the writer lock is free")
	require.NoError(b.t, l.Release())
}

// A load runs off the grain's mailbox: while one session's load hangs,
// another session on the same member is served, and the requests that
// arrived for the hung session meanwhile wait; once the load completes
// they are answered, in the order they arrived.
func TestGrainServesWhileALoadHangs(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	b := newGrainBed(t)
	slow, other := b.stored(ctx), b.stored(ctx)
	entered, release := b.fs.hold(slow)

	b.send(slow, &clusterpb.GetMessages{})
	<-entered
	b.send(slow, &clusterpb.GetStats{})
	b.send(slow, &clusterpb.SetSystem{Prompt: "be brief"})
	b.waitQueued(slow, 3)

	ms, err := b.m.Messages(ctx, other)
	require.NoError(t, err, "another session is served while the load hangs")
	require.Len(t, ms, 2)
	b.served(other)
	b.noReply("the slow session's requests wait for its load")

	release <- nil
	r := b.next("the first request")
	require.Equal(t, clusterpb.Code_CODE_OK, r.Code, r.Error)
	require.NotEmpty(t, r.Messages, "first: GetMessages")
	require.Nil(t, r.Stats)
	r = b.next("the second request")
	require.Equal(t, clusterpb.Code_CODE_OK, r.Code, r.Error)
	require.NotNil(t, r.Stats, "second: GetStats")
	require.Positive(t, r.Stats.Events)
	r = b.next("the third request")
	require.Equal(t, clusterpb.Code_CODE_OK, r.Code, r.Error)
	require.Nil(t, r.Stats, "third: SetSystem")
	require.Empty(t, r.Messages)
	_, err = b.m.Host().SessionPID(slow)
	require.NoError(t, err, "the slow session is resident now")
}

// A load that fails fails exactly the requests that waited for it, with
// its error; the next request loads again.
func TestGrainFailedLoadFailsTheWaitingRequests(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	b := newGrainBed(t)
	id := b.stored(ctx)
	entered, release := b.fs.hold(id)

	b.send(id, &clusterpb.GetStats{})
	<-entered
	b.send(id, &clusterpb.GetMessages{})
	b.waitQueued(id, 2)
	release <- errors.New("the disk is on fire")
	for i := range 2 {
		r := b.next("a waiting request")
		require.Equal(t, clusterpb.Code_CODE_INTERNAL, r.Code, "request %d", i)
		require.Contains(t, r.Error, "the disk is on fire", "request %d", i)
	}
	_, err := b.m.Host().SessionPID(id)
	require.ErrorIs(t, err, supervisor.ErrNoSession)

	b.send(id, &clusterpb.GetMessages{})
	r := b.next("a later request")
	require.Equal(t, clusterpb.Code_CODE_OK, r.Code, r.Error)
	require.NotEmpty(t, r.Messages)
}

// A grain stopped while its load hangs answers the request that waited
// CLOSED at once (the caller retries where the session goes next); when
// the load completes, the session it loaded is let go — not resident,
// its writer lock free — and the next request loads it again.
func TestGrainStoppedDuringALoadLetsTheSessionGo(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	b := newGrainBed(t)
	id := b.stored(ctx)
	entered, release := b.fs.hold(id)

	pid := b.m.c.Get(string(id), Kind)
	b.send(id, &clusterpb.GetStats{})
	<-entered
	b.waitQueued(id, 1)
	b.m.sys.Root.Stop(pid)
	r := b.next("the waiting request, as the grain stops")
	require.Equal(t, clusterpb.Code_CODE_CLOSED, r.Code, r.Error)

	release <- nil
	done := make(chan struct{})
	go func() { b.m.loads.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the abandoned load did not end")
	}
	_, err := b.m.Host().SessionPID(id)
	require.ErrorIs(t, err, supervisor.ErrNoSession, "the abandoned load let the session go")
	b.lockFree(id)

	ms, err := b.m.Messages(ctx, id)
	require.NoError(t, err, "a new grain loads the session")
	require.Len(t, ms, 2)
}

// resident makes the stored sessions resident (through their grains):
// their requests take no writer lock after this. It forgets the queue
// reports of those loads.
func (b *grainBed) resident(ctx context.Context, ids ...session.SessionID) {
	for _, id := range ids {
		_, err := b.m.Messages(ctx, id)
		require.NoError(b.t, err)
	}
	for len(b.waited) > 0 {
		<-b.waited
	}
}

// A request's work runs off the grain's mailbox: while a Fork hangs (the
// first write of its child waits for its writer lock), the grain still
// reads its mailbox — the requests that arrive queue behind the Fork —
// and another session is served; once the Fork completes the queued
// requests are answered, in the order they arrived, each after the one
// before it.
func TestGrainServesWhileAJobHangs(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	b := newGrainBed(t)
	id, other := b.stored(ctx), b.stored(ctx)
	b.resident(ctx, id, other)
	entered, release := b.fs.holdNext()

	b.send(id, &clusterpb.Fork{Boundary: session.LastEvent})
	<-entered
	b.send(id, &clusterpb.GetStats{})
	b.send(id, &clusterpb.SetSystem{Prompt: "be brief"})
	b.send(id, &clusterpb.GetMessages{})
	b.waitQueued(id, 3)

	b.served(other)
	b.noReply("the forked session's requests wait for its Fork")

	release <- nil
	r := b.next("the Fork")
	require.Equal(t, clusterpb.Code_CODE_OK, r.Code, r.Error)
	require.NotEmpty(t, r.Id, "first: Fork")
	require.NotEqual(t, string(id), r.Id)
	child := session.SessionID(r.Id)
	r = b.next("the second request")
	require.Equal(t, clusterpb.Code_CODE_OK, r.Code, r.Error)
	require.NotNil(t, r.Stats, "second: GetStats")
	r = b.next("the third request")
	require.Equal(t, clusterpb.Code_CODE_OK, r.Code, r.Error)
	require.Nil(t, r.Stats, "third: SetSystem")
	require.Empty(t, r.Messages)
	r = b.next("the fourth request")
	require.Equal(t, clusterpb.Code_CODE_OK, r.Code, r.Error)
	require.NotEmpty(t, r.Messages, "fourth: GetMessages")
	ms, err := b.m.Messages(ctx, child)
	require.NoError(t, err, "the child is stored")
	require.Len(t, ms, 2)
}

// A grain stopped while a request's work hangs reads the stop at once —
// the request queued behind the work is answered CLOSED — and loses
// nothing: once the work completes its requester gets its answer, and
// the stop hands the session over (not resident, its writer lock free).
func TestGrainStoppedDuringAJobHandsTheSessionOver(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	b := newGrainBed(t)
	id := b.stored(ctx)
	b.resident(ctx, id)
	entered, release := b.fs.holdNext()

	pid := b.m.c.Get(string(id), Kind)
	b.send(id, &clusterpb.Fork{Boundary: session.LastEvent})
	<-entered
	b.send(id, &clusterpb.GetStats{})
	b.waitQueued(id, 1)
	b.m.sys.Root.Stop(pid)
	r := b.next("the queued request, as the grain stops")
	require.Equal(t, clusterpb.Code_CODE_CLOSED, r.Code, r.Error)
	b.noReply("the Fork still hangs")

	release <- nil
	r = b.next("the Fork")
	require.Equal(t, clusterpb.Code_CODE_OK, r.Code, r.Error)
	require.NotEmpty(t, r.Id)
	require.Eventually(t, func() bool {
		_, err := b.m.Host().SessionPID(id)
		return errors.Is(err, supervisor.ErrNoSession)
	}, 20*time.Second, 10*time.Millisecond, "the stop hands the session over")
	b.lockFree(id)
}

// A Send retried while the first attempt waits behind a hung job is
// delivered once: the two run one after the other once the job
// completes, and the second finds the message accepted.
func TestGrainRetriedSendQueuedBehindAJobIsDeliveredOnce(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	b := newGrainBed(t)
	id := b.stored(ctx)
	b.resident(ctx, id)
	entered, release := b.fs.holdNext()

	b.send(id, &clusterpb.Fork{Boundary: session.LastEvent})
	<-entered
	m := userMsg(t, "again")
	j, err := m.MarshalJSON()
	require.NoError(t, err)
	b.send(id, &clusterpb.Send{Message: j})
	b.send(id, &clusterpb.Send{Message: j})
	b.waitQueued(id, 2)
	b.noReply("the Sends wait for the Fork")

	release <- nil
	for _, what := range []string{"the Fork", "the Send", "the retried Send"} {
		r := b.next(what)
		require.Equal(t, clusterpb.Code_CODE_OK, r.Code, "%s: %s", what, r.Error)
	}
	require.NoError(t, b.m.WaitIdle(ctx, id))
	ms, err := b.m.Messages(ctx, id)
	require.NoError(t, err)
	n := 0
	for _, got := range ms {
		if got.ID() == m.ID() {
			n++
		}
	}
	require.Equal(t, 1, n, "the message is delivered once")
	require.Len(t, ms, 4, "two turns")
}
