package persister

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/testutil"
	"github.com/dshgo/dsh/messages"
)

// End-to-end tests of the persister actor with real session actors. The
// goroutine check is main_test.go's goleak.VerifyTestMain; the synctest
// tests additionally prove that every goroutine they start (actors, pool
// workers, timers) has exited when the bubble ends.

const futureTimeout = 10 * time.Second

// rig is an actor system with a persister, session actors and an owner
// probe. Cleanup stops everything in dependency order.
type rig struct {
	t         *testing.T
	sys       *actor.ActorSystem
	persister *actor.PID
	stopped   bool // the persister was stopped by the test
	owner     *probe
	ownerPID  *actor.PID
	sessions  map[session.SessionID]*actor.PID
	scripts   map[session.SessionID]*turnScript
	ref       uint64
}

func newRig(t *testing.T, cfg Config) *rig {
	t.Helper()
	r := &rig{t: t, sys: testutil.QuietSystem(), sessions: map[session.SessionID]*actor.PID{},
		scripts: map[session.SessionID]*turnScript{}}
	props, err := Props(cfg)
	require.NoError(t, err)
	r.persister = r.sys.Root.Spawn(props)
	r.owner = newProbe()
	r.ownerPID = r.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return r.owner }))
	t.Cleanup(r.stop)
	return r
}

// stop stops the persister first (its waiters are answered, its pool
// joined), then the sessions and the probe.
func (r *rig) stop() {
	r.stopPersister()
	for _, pid := range r.sessions {
		require.NoError(r.t, r.sys.Root.StopFuture(pid).Wait())
	}
	require.NoError(r.t, r.sys.Root.StopFuture(r.ownerPID).Wait())
	r.sys.Shutdown()
}

func (r *rig) stopPersister() {
	if !r.stopped {
		r.stopped = true
		require.NoError(r.t, r.sys.Root.PoisonFuture(r.persister).Wait())
	}
}

// track spawns a fresh session actor and tracks it from seq 0.
func (r *rig) track(id string) session.SessionID {
	r.t.Helper()
	l, err := session.New(wbHeader(id))
	require.NoError(r.t, err)
	return r.trackLog(l, 0)
}

// trackLog spawns a session actor owning l and tracks it from seq from.
func (r *rig) trackLog(l *session.Log, from int64) session.SessionID {
	r.t.Helper()
	props, err := session.Props(session.Config{Log: l})
	require.NoError(r.t, err)
	pid := r.sys.Root.Spawn(props)
	r.sessions[l.ID()], r.scripts[l.ID()] = pid, newTurnScript()
	tr := request[Tracked](r.t, r, r.persister, Track{Ref: r.nextRef(), Header: l.Header(), Session: pid, From: from, Owner: r.ownerPID})
	require.Equal(r.t, l.ID(), tr.ID)
	return l.ID()
}

func (r *rig) nextRef() uint64 { r.ref++; return r.ref }

// append commits drafts to session id and returns the committed events.
func (r *rig) append(id session.SessionID, ds ...session.Draft) []session.Event {
	r.t.Helper()
	rep := request[session.AppendReply](r.t, r, r.sessions[id], session.NewAppend(r.nextRef(), ds...))
	return rep.Events.Slice()
}

// turn appends one complete turn with chunks deltas to session id.
func (r *rig) turn(id session.SessionID, chunks int) []session.Event {
	r.t.Helper()
	return r.append(id, r.scripts[id].next(chunks)...)
}

func (r *rig) flush(id session.SessionID) any {
	r.t.Helper()
	res, err := r.sys.Root.RequestFuture(r.persister, Flush{Ref: r.nextRef(), ID: id, UpTo: -1}, futureTimeout).Result()
	require.NoError(r.t, err)
	return res
}

// logOf returns every event of session id, from the session actor.
func (r *rig) logOf(id session.SessionID) []session.Event {
	r.t.Helper()
	return request[session.EventsReply](r.t, r, r.sessions[id], session.QueryEvents{Ref: r.nextRef()}).Events.Slice()
}

func request[T any](t *testing.T, r *rig, pid *actor.PID, msg any) T {
	t.Helper()
	res, err := r.sys.Root.RequestFuture(pid, msg, futureTimeout).Result()
	require.NoError(t, err)
	reply, ok := res.(T)
	require.Truef(t, ok, "reply is %T %+v, want %T", res, res, *new(T))
	return reply
}

// probe is an owner: it records Durable and WriteFailed, and lets a test
// wait for a condition on them.
type probe struct {
	mu       sync.Mutex // guards durable, fails, failed, retrying
	durable  map[session.SessionID]int64
	fails    map[session.SessionID][]error
	failed   map[session.SessionID][]WriteFailed
	retrying map[session.SessionID][]int // Retrying attempts
	changed  chan struct{}               // 1-buffered
}

func newProbe() *probe {
	return &probe{durable: map[session.SessionID]int64{}, fails: map[session.SessionID][]error{},
		failed: map[session.SessionID][]WriteFailed{}, retrying: map[session.SessionID][]int{},
		changed: make(chan struct{}, 1)}
}

func (p *probe) Receive(ctx actor.Context) {
	p.mu.Lock()
	switch m := ctx.Message().(type) {
	case Durable:
		if cur, ok := p.durable[m.ID]; ok && m.Seq <= cur {
			panic(fmt.Sprintf("durable watermark of %s went from %d to %d", m.ID, cur, m.Seq))
		}
		p.durable[m.ID] = m.Seq
	case WriteFailed:
		p.fails[m.ID] = append(p.fails[m.ID], m.Err)
		p.failed[m.ID] = append(p.failed[m.ID], m)
	case Retrying:
		p.retrying[m.ID] = append(p.retrying[m.ID], m.Attempt)
	}
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
}

func (p *probe) durableOf(id session.SessionID) (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq, ok := p.durable[id]
	return seq, ok
}

// attemptsOf and retryInOf return the Attempt and RetryIn of every
// WriteFailed of id; retriesOf the Attempt of every Retrying.
func (p *probe) attemptsOf(id session.SessionID) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for _, f := range p.failed[id] {
		out = append(out, f.Attempt)
	}
	return out
}

func (p *probe) retryInOf(id session.SessionID) []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []time.Duration
	for _, f := range p.failed[id] {
		out = append(out, f.RetryIn)
	}
	return out
}

func (p *probe) retriesOf(id session.SessionID) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.retrying[id])
}

func (p *probe) failuresOf(id session.SessionID) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.fails[id]...)
}

// waitFor waits until cond holds, re-checking whenever the probe records
// something, for at most the future timeout.
func (p *probe) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(futureTimeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-p.changed:
		case <-deadline.C:
			require.FailNow(t, "timed out waiting for "+what)
		}
	}
}

func (p *probe) waitDurable(t *testing.T, id session.SessionID, seq int64) {
	t.Helper()
	p.waitFor(t, fmt.Sprintf("%s durable up to %d", id, seq), func() bool {
		got, ok := p.durableOf(id)
		return ok && got >= seq
	})
}

// stored returns what the store holds for id.
func stored(t *testing.T, s Store, id session.SessionID) []session.Event {
	t.Helper()
	evs, err := s.ReadFrom(context.Background(), id, 0)
	require.NoError(t, err)
	return evs
}

func requireEvents(t *testing.T, want, got []session.Event) {
	t.Helper()
	require.Equal(t, batchSeqs(want), batchSeqs(got))
	for i := range want {
		require.Truef(t, want[i].Equal(got[i]), "event %d differs", i)
	}
}

// hourWindow keeps automatic writes out of a test: only flushes and
// checkpoints write.
const hourWindow = time.Hour

func TestActorFlushMakesCommittedEventsDurable(t *testing.T) {
	store := NewMemStore()
	r := newRig(t, Config{Store: store, Window: hourWindow})
	id := r.track("s-flush")
	r.append(id, wbUserDrafts(3)...)
	r.append(id, wbUserDrafts(2)...)

	f, ok := r.flush(id).(Flushed)
	require.True(t, ok)
	require.Equal(t, int64(4), f.Durable)
	require.Equal(t, id, f.ID)
	requireEvents(t, r.logOf(id), stored(t, store, id))
	r.owner.waitDurable(t, id, 4) // the owner hears it too, in its own time

	f = r.flush(id).(Flushed)
	require.Equal(t, int64(4), f.Durable, "a flush of nothing new answers at once")
}

func TestActorTurnEndIsDurableWithoutAFlush(t *testing.T) {
	store := NewMemStore()
	r := newRig(t, Config{Store: store, Window: hourWindow})
	id := r.track("s-turn")
	evs := r.turn(id, 20)
	last := evs[len(evs)-1]
	require.Equal(t, session.TypeTurnEnd, last.Type())

	r.owner.waitDurable(t, id, last.Seq())
	requireEvents(t, evs, stored(t, store, id))
}

func TestActorPolicyNoneWritesNothing(t *testing.T) {
	store := &fakeStore{}
	r := newRig(t, Config{Store: store, Policy: PolicyNone})
	id := r.track("s-none")
	evs := r.turn(id, 5)
	r.owner.waitDurable(t, id, evs[len(evs)-1].Seq()) // reported at turn/end, though nothing is written
	r.append(id, wbUserDrafts(2)...)

	f := r.flush(id).(Flushed)
	require.Equal(t, int64(len(evs)+1), f.Durable, "the last received seq")
	require.Zero(t, store.creates()+store.appendCalls(), "the store is never called")
	u := request[Flushed](t, r, r.persister, Untrack{Ref: 1, ID: id})
	require.Equal(t, f.Durable, u.Durable)
}

func TestActorPolicyNoneNeedsNoStore(t *testing.T) {
	r := newRig(t, Config{Policy: PolicyNone})
	id := r.track("s-none-nil")
	r.append(id, wbUserDrafts(1)...)
	require.Equal(t, int64(0), r.flush(id).(Flushed).Durable)
}

func TestActorStrictPolicyWritesAtRequestHeader(t *testing.T) {
	store := NewMemStore()
	r := newRig(t, Config{Store: store, Policy: PolicyStrict, Window: hourWindow})
	id := r.track("s-strict")
	ds := r.scripts[id].next(3) // turn/start, user/message, step/start, request/header, ...
	require.Equal(t, session.TypeRequestHeader, ds[3].Type())
	evs := r.append(id, ds[:4]...)
	r.owner.waitDurable(t, id, 3)
	requireEvents(t, evs, stored(t, store, id))

	// Chunks are not checkpoints: they wait for the window...
	r.append(id, ds[4:7]...)
	// ...but the tool/call is one (seq 8: after the assistant message).
	require.Equal(t, session.TypeToolCall, ds[8].Type())
	r.append(id, ds[7:9]...)
	r.owner.waitDurable(t, id, 8)
	require.Len(t, stored(t, store, id), 9)
}

func TestActorTurnEndPolicyDoesNotCheckpointRequestHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{}
		r := newRig(t, Config{Store: store})
		id := r.track("s-turn-end")
		ds := r.scripts[id].next(3)
		r.append(id, ds[:9]...) // up to tool/call
		synctest.Wait()
		require.Zero(t, store.appendCalls(), "nothing written before the window or a turn/end")
		<-time.After(DefaultWindow)
		synctest.Wait()
		require.Equal(t, 1, store.appendCalls())
	})
}

func TestActorManySessionsAcrossShards(t *testing.T) {
	store := NewMemStore()
	r := newRig(t, Config{Store: store, Window: hourWindow, Shards: 8, FsyncWorkers: 3})
	const n = 200
	ids := make([]session.SessionID, n)
	shards := map[int]int{}
	for i := range ids {
		ids[i] = r.track(fmt.Sprintf("s-many-%03d", i))
		shards[shardIndex(ids[i], 8)]++
	}
	require.Len(t, shards, 8, "the ids spread over every shard")
	// Appends and flushes in flight on all sessions at once.
	futures := make([]*actor.Future, n)
	for i, id := range ids {
		r.append(id, wbUserDrafts(1+i%5)...)
		futures[i] = r.sys.Root.RequestFuture(r.persister, Flush{Ref: uint64(i), ID: id, UpTo: -1}, futureTimeout)
	}
	for i, f := range futures {
		res, err := f.Result()
		require.NoError(t, err)
		fl, ok := res.(Flushed)
		require.Truef(t, ok, "session %d: %T %+v", i, res, res)
		require.Equal(t, uint64(i), fl.Ref)
		require.Equal(t, ids[i], fl.ID)
		require.Equal(t, int64(i%5), fl.Durable)
	}
	for _, id := range ids {
		requireEvents(t, r.logOf(id), stored(t, store, id))
	}
	listed, err := store.List(context.Background())
	require.NoError(t, err)
	require.Len(t, listed, n)
}

// countingDispatcher runs each mailbox run on a goroutine of its own and
// counts them.
type countingDispatcher struct{ runs atomic.Int64 }

func (d *countingDispatcher) Schedule(fn func()) { d.runs.Add(1); go fn() }
func (d *countingDispatcher) Throughput() int    { return 300 }

// The shards run on the dispatcher of Config.ShardOptions (a host's first
// lane), not protoactor's default.
func TestActorShardsRunOnTheShardOptions(t *testing.T) {
	d := &countingDispatcher{}
	r := newRig(t, Config{Store: NewMemStore(), Window: hourWindow, Shards: 2,
		ShardOptions: []actor.PropsOption{actor.WithDispatcher(d)}})
	id := r.track("s-shard-options")
	before := d.runs.Load()
	require.Positive(t, before, "the shards' Started and the Track ran on it")
	r.append(id, wbUserDrafts(2)...)
	_, ok := r.flush(id).(Flushed)
	require.True(t, ok)
	require.Greater(t, d.runs.Load(), before, "the events and the Flush ran on it")
}

func TestActorResumedSessionWritesOnlyTheSuffix(t *testing.T) {
	store := NewMemStore()
	// A first life: one turn, stored.
	r := newRig(t, Config{Store: store, Window: hourWindow})
	id := r.track("s-resume")
	first := r.turn(id, 3)
	r.owner.waitDurable(t, id, first[len(first)-1].Seq())
	request[Flushed](t, r, r.persister, Untrack{ID: id})
	require.NoError(t, r.sys.Root.StopFuture(r.sessions[id]).Wait())
	delete(r.sessions, id)

	// Resume: the session is seeded with the loaded log (it appends
	// session/end-seed) and tracked from the stored length.
	loaded, err := store.Load(context.Background(), id)
	require.NoError(t, err)
	l, err := session.NewSeeded(loaded.Header, loaded.Events, 1)
	require.NoError(t, err)
	r.trackLog(l, int64(len(loaded.Events)))
	f := r.flush(id).(Flushed)
	require.Equal(t, int64(len(loaded.Events)), f.Durable, "the end-seed is durable")
	requireEvents(t, r.logOf(id), stored(t, store, id))
}

func TestActorTrackRefusals(t *testing.T) {
	store := NewMemStore()
	r := newRig(t, Config{Store: store})
	tf := request[TrackFailed](t, r, r.persister, Track{Ref: 1, Header: wbHeader("s-x")})
	require.Equal(t, uint64(1), tf.Ref)
	require.ErrorContains(t, tf.Err, "PID")

	// The store refuses the header.
	l, err := session.New(wbHeader("s-bad"))
	require.NoError(t, err)
	props, err := session.Props(session.Config{Log: l})
	require.NoError(t, err)
	pid := r.sys.Root.Spawn(props)
	r.sessions[l.ID()] = pid
	bad := wbHeader("s-bad")
	bad.CreatedAt = -1
	tf = request[TrackFailed](t, r, r.persister, Track{Ref: 2, Header: bad, Session: pid})
	require.Error(t, tf.Err)
	ff := request[FlushFailed](t, r, r.persister, Flush{ID: "s-bad", UpTo: -1})
	require.ErrorIs(t, ff.Err, ErrNotTracked)
}

func TestActorFlushUpToWaitsForTheEvents(t *testing.T) {
	store := NewMemStore()
	r := newRig(t, Config{Store: store, Window: hourWindow})
	id := r.track("s-upto")
	fut := r.sys.Root.RequestFuture(r.persister, Flush{Ref: 5, ID: id, UpTo: 2}, futureTimeout)
	r.append(id, wbUserDrafts(2)...)
	r.append(id, wbUserDrafts(2)...)
	res, err := fut.Result()
	require.NoError(t, err)
	f := res.(Flushed)
	require.GreaterOrEqual(t, f.Durable, int64(2))
	require.GreaterOrEqual(t, len(stored(t, store, id)), 3)
}

// TestActorGroupCommitAndBoundedWorkers holds the store's writes to show
// that events and flushes arriving during a write join the next batch, and
// that no more than FsyncWorkers store calls run at once.
func TestActorGroupCommitAndBoundedWorkers(t *testing.T) {
	store := newHeldStore()
	r := newRig(t, Config{Store: store, Window: hourWindow, FsyncWorkers: 2})
	a := r.track("s-group-a")
	b := r.track("s-group-b")
	c := r.track("s-group-c")
	for _, id := range []session.SessionID{a, b, c} {
		r.append(id, wbUserDrafts(1)...)
	}
	flush := func(id session.SessionID) *actor.Future {
		return r.sys.Root.RequestFuture(r.persister, Flush{ID: id, UpTo: -1}, futureTimeout)
	}
	requireDurable := func(f *actor.Future, want int64) {
		t.Helper()
		res, err := f.Result()
		require.NoError(t, err)
		require.Equal(t, want, res.(Flushed).Durable)
	}

	fa := flush(a)
	require.Equal(t, []session.SessionID{a}, store.waitEntered(t, 1))
	// Session a gets more events and two more flushes during its write.
	r.append(a, wbUserDrafts(2)...)
	fa2 := flush(a)
	r.append(a, wbUserDrafts(1)...)
	fa3 := flush(a)
	// b and c want a worker too: one gets the second, the other queues.
	fb, fc := flush(b), flush(c)
	store.waitEntered(t, 1)
	require.Equal(t, 2, store.active())

	store.release(a)
	requireDurable(fa, 0)
	store.release(b)
	store.release(c)
	requireDurable(fb, 0)
	requireDurable(fc, 0)
	// a's second write: everything that arrived during the first, at once.
	store.release(a)
	requireDurable(fa2, 3)
	requireDurable(fa3, 3)
	require.Equal(t, [][]int64{{0}, {1, 2, 3}}, store.batchesOf(a))
	require.Equal(t, 2, store.maxActive(), "at most FsyncWorkers store calls at once")
}

// TestActorTurnEndGoesAheadOfBackgroundBatches: with the one worker busy
// and the background batches of many sessions queued behind it, the turn
// end of another session is the next store call, and it is durable before
// any of them is written. A session whose own background batch is still
// queued when its turn ends writes the batch and the turn as one synced
// write, right after. The background batches follow, written but not
// synced: nobody hears Durable for them.
func TestActorTurnEndGoesAheadOfBackgroundBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newHeldStore()
		r := newRig(t, Config{Store: store, Window: hourWindow, MaxBatchEvents: 2, FsyncWorkers: 1})
		busy := r.track("s-busy")
		var behind []session.SessionID
		for i := range 8 {
			behind = append(behind, r.track(fmt.Sprintf("s-behind-%d", i)))
		}
		turn := r.track("s-turn")
		r.append(busy, wbUserDrafts(2)...) // the size bound: a background write
		require.Equal(t, []session.SessionID{busy}, store.waitEntered(t, 1))
		for _, id := range behind {
			r.append(id, wbUserDrafts(2)...)
			synctest.Wait() // its background write is queued behind busy's
		}
		evs := r.turn(turn, 3)
		synctest.Wait() // its barrier is queued
		folded := behind[3]
		fevs := r.turn(folded, 2)
		synctest.Wait()

		store.release(busy)
		require.Equal(t, []session.SessionID{turn}, store.waitEntered(t, 1), "the turn end goes first")
		store.release(turn)
		r.owner.waitDurable(t, turn, evs[len(evs)-1].Seq())
		for _, id := range behind {
			require.Empty(t, store.batchesOf(id), "%s: written before the turn end was durable", id)
		}
		require.Equal(t, []session.SessionID{folded}, store.waitEntered(t, 1), "the folded batch and turn end next")
		store.release(folded)
		r.owner.waitDurable(t, folded, fevs[len(fevs)-1].Seq())
		var want []int64
		for seq := range fevs[len(fevs)-1].Seq() + 1 {
			want = append(want, seq)
		}
		require.Equal(t, [][]int64{want}, store.batchesOf(folded), "one write for the batch and the turn end")

		var rest []session.SessionID
		for _, id := range behind {
			if id != folded {
				rest = append(rest, id)
				store.release(id)
			}
		}
		require.Equal(t, rest, store.waitEntered(t, len(rest)), "background batches in the order they were queued")
		synctest.Wait()
		for _, id := range rest {
			require.Equal(t, [][]int64{{0, 1}}, store.batchesOf(id))
			_, ok := r.owner.durableOf(id)
			require.False(t, ok, "%s: a background batch is not durable", id)
		}
		store.mu.Lock()
		syncs := store.syncs
		store.mu.Unlock()
		require.Equal(t, 2, syncs, "two syncs: the turn end, and the folded batch with its turn end")
	})
}

// TestActorTurnEndFoldsIntoItsRunningBackgroundWrite: a session's turn
// ends while its background write is in the store (the one worker busy
// with it) and another session's turn end waits for the worker. The
// turn end joins the running write: the same job appends it, synced, as
// soon as the background batch is written, ahead of the other session's
// barrier and without a second trip through the shard and the pool's
// queue. Before, the turn end waited for the write's outcome to reach
// the shard and then queued behind the other session's barrier.
func TestActorTurnEndFoldsIntoItsRunningBackgroundWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newHeldStore()
		r := newRig(t, Config{Store: store, Window: hourWindow, MaxBatchEvents: 2, FsyncWorkers: 1})
		running := r.track("s-running")
		other := r.track("s-other")
		r.append(running, wbUserDrafts(2)...) // the size bound: a background write
		require.Equal(t, []session.SessionID{running}, store.waitEntered(t, 1))
		oevs := r.turn(other, 1)
		synctest.Wait() // other's barrier waits for the worker
		evs := r.turn(running, 2)
		synctest.Wait() // the turn end folds into the running write

		store.release(running)
		require.Equal(t, []session.SessionID{running}, store.waitEntered(t, 1), "the turn end is appended by the same job, first")
		store.release(running)
		r.owner.waitDurable(t, running, evs[len(evs)-1].Seq())
		require.Empty(t, store.batchesOf(other), "the other session's barrier still waits for the worker")
		require.Equal(t, [][]int64{{0, 1}, seqsOf(evs)}, store.batchesOf(running))

		require.Equal(t, []session.SessionID{other}, store.waitEntered(t, 1))
		store.release(other)
		r.owner.waitDurable(t, other, oevs[len(oevs)-1].Seq())
		store.mu.Lock()
		syncs := store.syncs
		store.mu.Unlock()
		require.Equal(t, 2, syncs, "one sync per turn end")
	})
}

// TestActorStopAnswersWaitersAndJoinsWorkers stops the persister while a
// write hangs in the store: the waiter hears ErrStopped, the store call is
// cancelled, and the pool's goroutines are joined (goleak checks).
func TestActorStopAnswersWaitersAndJoinsWorkers(t *testing.T) {
	store := newHeldStore()
	r := newRig(t, Config{Store: store, Window: hourWindow, FsyncWorkers: 1})
	id := r.track("s-stop")
	r.append(id, wbUserDrafts(1)...)
	fut := r.sys.Root.RequestFuture(r.persister, Flush{ID: id, UpTo: -1}, futureTimeout)
	store.waitEntered(t, 1)
	r.stopPersister()
	res, err := fut.Result()
	require.NoError(t, err)
	require.ErrorIs(t, res.(FlushFailed).Err, ErrStopped)
	require.Equal(t, 0, store.active(), "the hung Append was cancelled and returned")
}

// TestActorWindowInSynctest checks the real timer path with a fake clock:
// an event at 0 and one at 150ms are written together at 200ms, and a
// turn/end needs no window at all. The actor system lives in the bubble,
// so the bubble's end proves every goroutine exited.
func TestActorWindowInSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{}
		r := newRig(t, Config{Store: store})
		id := r.track("s-window")
		start := time.Now()
		r.append(id, wbUserDrafts(1)...)
		<-time.After(150 * time.Millisecond)
		r.append(id, wbUserDrafts(1)...)
		<-time.After(49 * time.Millisecond)
		synctest.Wait()
		require.Zero(t, store.appendCalls(), "199ms: the window is still open")
		<-time.After(time.Millisecond)
		synctest.Wait()
		require.Equal(t, [][]int64{{0, 1}}, store.batchesOf(id), "one batch at 200ms")
		require.Equal(t, 200*time.Millisecond, time.Since(start))

		evs := r.turn(id, 10)
		synctest.Wait()
		require.Equal(t, 2, store.appendCalls(), "turn/end: written at once")
		require.Equal(t, evs[len(evs)-1].Seq(), store.lastSeq(id))
		d, _ := r.owner.durableOf(id)
		require.Equal(t, evs[len(evs)-1].Seq(), d)
	})
}

// TestActorWindowStartsAtAHeldChunksCommit: the session holds a stream's
// chunks back from the persister for up to the persister's window
// (session.Subscribe.Behind), and the window of a held chunk starts at its
// commit, not at its arrival: chunks committed at 0 and 50ms of a stream
// that then pauses are written together at 200ms, as the write-behind
// window promises, not at 400ms.
func TestActorWindowStartsAtAHeldChunksCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{}
		r := newRig(t, Config{Store: store})
		id := r.track("s-held")
		r.append(id, session.TurnStart{Turn: 1}.Draft(), session.StepStart{Turn: 1, Step: 1}.Draft())
		<-time.After(time.Second) // the window of those two has passed
		synctest.Wait()
		require.Equal(t, [][]int64{{0, 1}}, store.batchesOf(id))
		chunk := session.AssistantChunk{Turn: 1, Step: 1, Chunk: messages.TextDeltaChunk(0, " word")}.Draft()
		start := time.Now()
		r.append(id, chunk)
		<-time.After(50 * time.Millisecond)
		r.append(id, chunk)
		<-time.After(150*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		require.Equal(t, 1, store.appendCalls(), "the window of the first chunk is still open")
		<-time.After(time.Nanosecond)
		synctest.Wait()
		require.Equal(t, [][]int64{{0, 1}, {2, 3}}, store.batchesOf(id), "written one window after the first chunk's commit")
		require.Equal(t, 200*time.Millisecond, time.Since(start))
	})
}

func TestConfigValidateAndDefaults(t *testing.T) {
	require.NoError(t, Config{Policy: PolicyNone}.validate(), "the zero config (without a store) works for PolicyNone")
	require.ErrorContains(t, Config{}.validate(), "needs a store")
	require.NoError(t, Config{Store: &fakeStore{}}.validate())
	for _, bad := range []Config{
		{Store: &fakeStore{}, Policy: Policy(7)},
		{Store: &fakeStore{}, Window: -time.Second},
		{Store: &fakeStore{}, Window: time.Microsecond},
		{Store: &fakeStore{}, Window: maxWindow + time.Millisecond},
		{Store: &fakeStore{}, MaxBatchEvents: -1},
		{Store: &fakeStore{}, FsyncWorkers: -1},
		{Store: &fakeStore{}, Shards: -1},
		{Store: &fakeStore{}, WriteTimeout: -1},
	} {
		require.Error(t, bad.validate(), "%+v", bad)
		_, err := Props(bad)
		require.Error(t, err)
	}
	c := Config{}.withDefaults()
	require.Equal(t, DefaultWindow, c.Window)
	require.Equal(t, DefaultMaxBatchEvents, c.MaxBatchEvents)
	require.Equal(t, DefaultFsyncWorkers, c.FsyncWorkers)
	require.Equal(t, DefaultShards, c.Shards)
	require.Equal(t, DefaultWriteTimeout, c.WriteTimeout)
	require.Equal(t, PolicyTurnEnd, c.Policy)
	require.Equal(t, "turn-end", PolicyTurnEnd.String())
	require.Equal(t, "strict", PolicyStrict.String())
	require.Equal(t, "none", PolicyNone.String())
}

func TestShardIndexIsFNV1a(t *testing.T) {
	for _, id := range []session.SessionID{"", "a", "s-many-001", "0193a8c2-7d1e-7c3a-9f00-5c2b1e4d6a7f"} {
		h := fnv.New32a()
		_, _ = h.Write([]byte(id))
		require.Equal(t, int(h.Sum32()%13), shardIndex(id, 13), "id %q", id)
	}
}
