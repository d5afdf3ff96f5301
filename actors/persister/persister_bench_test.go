package persister

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/testutil"
)

// Benchmarks of the persister actor against baselines measured in the same
// run (docs/performance.md#targets): results are ratios, not wall-clock
// claims.
//
//	BenchmarkPersist/sessions=1000/impl=persister    1,000 session actors append
//	    one realistic turn each (209 events: 200 text deltas) through the
//	    persister into a JSONLStore (zstd frames, fsync) in b.TempDir(), then
//	    flush; events/s end to end.
//	.../impl=none           the same through the persister with PolicyNone:
//	    the append path alone, nothing written.
//	.../impl=encode-only    the same committed events encoded with
//	    session.AppendRecords on GOMAXPROCS goroutines, no I/O.
//	BenchmarkTurnEndFlush/sessions=1000/impl=persister  every session appends
//	    a small turn ending in turn/end; latency from sending the Append to
//	    the owner's Durable for the turn/end, and flushes/s.
//	.../impl=persister-rawfile  the persister over rawFileStore, which writes
//	    what raw-fsync writes: the persister's own overhead.
//	.../impl=raw-fsync      the same bytes appended to 1,000 files with
//	    write+fsync, FsyncWorkers at a time.
//	.../impl=sqlite         the persister over a SQLiteStore: the turn ends
//	    of many sessions in one transaction per commit (group commit).
//	.../impl=sqlite-nogroup the same store written one Append (one
//	    transaction, one sync) per session's batch.
//	.../impl=sqlite-autocheckpoint  group commit with SQLite's default
//	    checkpoints (in the commit that passes 1000 WAL pages) instead of
//	    the store's background ones.
//	.../impl=none           the persister with PolicyNone: no store write.

const (
	benchSessions = 1000
	benchBatch    = 32 // drafts per Append
	benchWindow   = 4  // Appends in flight per session
	benchChunks   = 200
	smallChunks   = 4
)

func BenchmarkPersist(b *testing.B) {
	n := benchSessions
	b.Run(fmt.Sprintf("sessions=%d/impl=persister", n), func(b *testing.B) { benchPersist(b, n, PolicyTurnEnd, jsonlFiles) })
	b.Run(fmt.Sprintf("sessions=%d/impl=none", n), func(b *testing.B) { benchPersist(b, n, PolicyNone, jsonlFiles) })
	b.Run(fmt.Sprintf("sessions=%d/impl=encode-only", n), func(b *testing.B) { benchEncodeOnly(b, n) })
}

func BenchmarkTurnEndFlush(b *testing.B) {
	n := benchSessions
	b.Run(fmt.Sprintf("sessions=%d/impl=persister", n), func(b *testing.B) { benchTurnEndFlush(b, n, PolicyTurnEnd, jsonlFiles) })
	b.Run(fmt.Sprintf("sessions=%d/impl=persister-rawfile", n), func(b *testing.B) { benchTurnEndFlush(b, n, PolicyTurnEnd, rawFiles) })
	b.Run(fmt.Sprintf("sessions=%d/impl=raw-fsync", n), func(b *testing.B) { benchRawFsync(b, n) })
	b.Run(fmt.Sprintf("sessions=%d/impl=sqlite", n), func(b *testing.B) { benchTurnEndFlush(b, n, PolicyTurnEnd, sqliteFile) })
	b.Run(fmt.Sprintf("sessions=%d/impl=sqlite-nogroup", n), func(b *testing.B) { benchTurnEndFlush(b, n, PolicyTurnEnd, sqliteNoGroup) })
	b.Run(fmt.Sprintf("sessions=%d/impl=sqlite-autocheckpoint", n), func(b *testing.B) {
		benchTurnEndFlush(b, n, PolicyTurnEnd, sqliteAutoCheckpoint)
	})
	b.Run(fmt.Sprintf("sessions=%d/impl=none", n), func(b *testing.B) { benchTurnEndFlush(b, n, PolicyNone, jsonlFiles) })
}

// countingWriter counts the Appends that reach the store and the time
// spent in them.
type countingWriter struct {
	Writer
	appends atomic.Int64
	busy    atomic.Int64 // ns inside Append, summed over the workers
}

// countingGroupWriter is a countingWriter that also commits groups,
// counting each commit as one append.
type countingGroupWriter struct {
	*countingWriter
	group groupWriter
}

func (w *countingGroupWriter) appendGroup(ctx context.Context, next func() (groupBatch, bool)) []error {
	start := time.Now()
	errs := w.group.appendGroup(ctx, next)
	w.busy.Add(int64(time.Since(start)))
	w.appends.Add(1)
	return errs
}

// noBackgroundCheckpoints puts s back on SQLite's default checkpoints: in
// the commit that takes the WAL past 1000 pages, none in the background.
func noBackgroundCheckpoints(b *testing.B, s *SQLiteStore) {
	b.Helper()
	if err := s.checkpoints.stop(); err != nil {
		b.Fatal(err)
	}
	s.checkpoints = nil
	if _, err := s.conn.ExecContext(context.Background(), "PRAGMA wal_autocheckpoint = 1000"); err != nil {
		b.Fatal(err)
	}
}

func (w *countingWriter) Append(ctx context.Context, id session.SessionID, events []session.Event, durable Durability) error {
	start := time.Now()
	err := w.Writer.Append(ctx, id, events, durable)
	w.busy.Add(int64(time.Since(start)))
	w.appends.Add(1)
	return err
}

// benchRig is an actor system with a persister over a JSONLStore and n
// tracked session actors, driven by a driver actor that is also every
// session's owner.
type benchRig struct {
	sys       *actor.ActorSystem
	persister *actor.PID
	store     Store // closed by close; nil for rawFiles
	counter   *countingWriter
	sessions  []*actor.PID
	ids       []session.SessionID
	scripts   []*turnScript
	drv       *driver
	drvPID    *actor.PID
}

// storeKind picks the store under the persister.
type storeKind int

const (
	jsonlFiles           storeKind = iota // the JSONLStore (zstd frames)
	rawFiles                              // rawFileStore: what raw-fsync does, per batch
	sqliteFile                            // a SQLiteStore, group commit
	sqliteNoGroup                         // a SQLiteStore, one Append per batch
	sqliteAutoCheckpoint                  // a SQLiteStore, group commit, checkpoints on commit
)

func newBenchRig(b *testing.B, n int, policy Policy, kind storeKind) *benchRig {
	b.Helper()
	r := &benchRig{sys: testutil.QuietSystem()}
	var w Writer
	switch kind {
	case jsonlFiles:
		store, err := NewJSONLStore(JSONLConfig{Root: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		r.store, w = store, store
	case rawFiles:
		w = &rawFileStore{dir: b.TempDir()}
	case sqliteFile, sqliteNoGroup, sqliteAutoCheckpoint:
		store, err := OpenSQLite(filepath.Join(b.TempDir(), "bench.sqlite"), SQLiteOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if kind == sqliteAutoCheckpoint {
			noBackgroundCheckpoints(b, store)
		}
		r.store, w = store, store
	}
	r.counter = &countingWriter{Writer: w}
	var cw Writer = r.counter // hides appendGroup: one Append per batch
	if kind == sqliteFile || kind == sqliteAutoCheckpoint {
		cw = &countingGroupWriter{countingWriter: r.counter, group: w.(groupWriter)}
	}
	props, err := Props(Config{Store: cw, Policy: policy})
	if err != nil {
		b.Fatal(err)
	}
	r.persister = r.sys.Root.Spawn(props)
	r.drv = &driver{persister: r.persister, index: map[session.SessionID]int{}, done: make(chan error, 1)}
	r.drvPID = r.sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return r.drv }))
	for i := range n {
		id := session.SessionID(fmt.Sprintf("bench-%04d", i))
		l, err := session.New(wbHeader(string(id)))
		if err != nil {
			b.Fatal(err)
		}
		sp, err := session.Props(session.Config{Log: l})
		if err != nil {
			b.Fatal(err)
		}
		pid := r.sys.Root.Spawn(sp)
		res, err := r.sys.Root.RequestFuture(r.persister, Track{Header: l.Header(), Session: pid, Owner: r.drvPID}, futureTimeout).Result()
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := res.(Tracked); !ok {
			b.Fatalf("track: %+v", res)
		}
		r.sessions, r.ids = append(r.sessions, pid), append(r.ids, id)
		r.scripts = append(r.scripts, newTurnScript())
		r.drv.index[id] = i
	}
	r.drv.sessions, r.drv.ids = r.sessions, r.ids
	return r
}

func (r *benchRig) close(b *testing.B) {
	_ = r.sys.Root.PoisonFuture(r.persister).Wait()
	for _, pid := range r.sessions {
		_ = r.sys.Root.StopFuture(pid).Wait()
	}
	_ = r.sys.Root.StopFuture(r.drvPID).Wait()
	r.sys.Shutdown()
	if r.store != nil {
		if err := r.store.Close(); err != nil {
			b.Error(err)
		}
	}
}

// nextTurns returns, per session, the next turn split into Appends.
func (r *benchRig) nextTurns(chunks, batch int) [][][]session.Draft {
	out := make([][][]session.Draft, len(r.scripts))
	for i, s := range r.scripts {
		for ds := range slices.Chunk(s.next(chunks), batch) {
			out[i] = append(out[i], ds)
		}
	}
	return out
}

// driver runs one round at a time: it keeps benchWindow Appends in flight
// per session until the session's batches are spent, then (mode flush)
// sends the persister a Flush for it; the round ends when every session is
// flushed (mode flush) or every session's last event is Durable (mode
// durable, latencies recorded from sending the session's first Append).
type driver struct {
	persister *actor.PID
	sessions  []*actor.PID
	ids       []session.SessionID
	index     map[session.SessionID]int

	mode     driveMode
	batches  [][][]session.Draft
	inflight []int
	last     []int64 // mode durable: the seq to wait for, -1 before the reply, -2 once counted
	durable  []int64 // mode durable: the highest Durable seen this round
	sent     []time.Time
	lat      []time.Duration
	pending  int
	err      error
	done     chan error // one value per round
}

type driveMode int

const (
	modeFlush driveMode = iota
	modeDurable
)

type drive struct {
	mode    driveMode
	batches [][][]session.Draft
}

func (d *driver) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case drive:
		d.mode, d.batches, d.err = m.mode, m.batches, nil
		d.pending = len(d.sessions)
		d.inflight = make([]int, len(d.sessions))
		d.last = make([]int64, len(d.sessions))
		d.durable = make([]int64, len(d.sessions))
		d.sent = make([]time.Time, len(d.sessions))
		d.lat = d.lat[:0]
		for i := range d.sessions {
			d.last[i], d.durable[i] = -1, -1
			d.sent[i] = time.Now()
			for range benchWindow {
				d.send(ctx, i)
			}
		}
	case session.AppendReply:
		i := int(m.Ref)
		d.inflight[i]--
		if d.mode == modeDurable && len(d.batches[i]) == 0 && d.inflight[i] == 0 {
			d.last[i] = m.Events.At(m.Events.Len() - 1).Seq()
			d.checkDurable(i) // the Durable may have overtaken the reply
		}
		d.send(ctx, i)
		if d.inflight[i] == 0 && len(d.batches[i]) == 0 && d.mode == modeFlush {
			ctx.Request(d.persister, Flush{Ref: uint64(i), ID: d.ids[i], UpTo: -1})
		}
	case session.AppendFailed:
		d.fail(m.Err)
	case Flushed:
		d.finish()
	case FlushFailed:
		d.fail(m.Err)
	case Durable:
		if i, ok := d.index[m.ID]; ok && d.mode == modeDurable {
			d.durable[i] = max(d.durable[i], m.Seq)
			d.checkDurable(i)
		}
	case WriteFailed:
		d.fail(m.Err)
	}
}

// checkDurable counts session i once its last event is durable.
func (d *driver) checkDurable(i int) {
	if d.last[i] >= 0 && d.durable[i] >= d.last[i] {
		d.lat = append(d.lat, time.Since(d.sent[i]))
		d.last[i] = -2
		d.finish()
	}
}

func (d *driver) send(ctx actor.Context, i int) {
	if len(d.batches[i]) == 0 {
		return
	}
	ds := d.batches[i][0]
	d.batches[i] = d.batches[i][1:]
	d.inflight[i]++
	ctx.Request(d.sessions[i], session.NewAppend(uint64(i), ds...))
}

func (d *driver) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.finish()
}

func (d *driver) finish() {
	d.pending--
	if d.pending == 0 {
		d.done <- d.err
	}
}

// round runs one drive and waits for it.
func (r *benchRig) round(b *testing.B, m drive) {
	r.sys.Root.Send(r.drvPID, m)
	if err := <-r.drv.done; err != nil {
		b.Fatal(err)
	}
}

func benchPersist(b *testing.B, n int, policy Policy, kind storeKind) {
	r := newBenchRig(b, n, policy, kind)
	defer r.close(b)
	var events int64
	var elapsed time.Duration
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		batches := r.nextTurns(benchChunks, benchBatch)
		b.StartTimer()
		start := time.Now()
		r.round(b, drive{mode: modeFlush, batches: batches})
		elapsed += time.Since(start)
		events += int64(n * turnLen(benchChunks))
	}
	b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
	if appends := r.counter.appends.Load(); appends > 0 {
		b.ReportMetric(float64(events)/float64(appends), "events/append")
		reportStore(b, appends, time.Duration(r.counter.busy.Load()), elapsed)
	}
}

func benchEncodeOnly(b *testing.B, n int) {
	// The same turns, committed outside the timer by plain logs.
	logs := make([]*session.Log, n)
	scripts := make([]*turnScript, n)
	for i := range logs {
		l, err := session.New(wbHeader(fmt.Sprintf("bench-%04d", i)))
		if err != nil {
			b.Fatal(err)
		}
		logs[i], scripts[i] = l, newTurnScript()
	}
	workers := runtime.GOMAXPROCS(0)
	bufs := make([][]byte, workers)
	var events int64
	var elapsed time.Duration
	var encoded atomic.Int64
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		turns := make([][]session.Event, n)
		for i, l := range logs {
			evs, err := l.AppendBatch(scripts[i].next(benchChunks), 1)
			if err != nil {
				b.Fatal(err)
			}
			turns[i] = evs
		}
		b.StartTimer()
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
					bufs[w] = session.AppendRecords(bufs[w][:0], turns[i], session.PackChunks)
					encoded.Add(int64(len(bufs[w])))
				}
			})
		}
		wg.Wait()
		elapsed += time.Since(start)
		events += int64(n * turnLen(benchChunks))
	}
	b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
}

func benchTurnEndFlush(b *testing.B, n int, policy Policy, kind storeKind) {
	r := newBenchRig(b, n, policy, kind)
	defer r.close(b)
	var lat []time.Duration
	var elapsed time.Duration
	var flushes int
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		batches := r.nextTurns(smallChunks, turnLen(smallChunks)) // one Append per turn
		b.StartTimer()
		start := time.Now()
		r.round(b, drive{mode: modeDurable, batches: batches})
		elapsed += time.Since(start)
		flushes += n
		lat = append(lat, r.drv.lat...)
	}
	reportLatency(b, flushes, elapsed, lat)
	reportStore(b, r.counter.appends.Load(), time.Duration(r.counter.busy.Load()), elapsed)
}

// benchRawFsync appends the bytes of the same small turn (encoded once per
// session) to one file per session: open, write, fsync, close, with
// DefaultFsyncWorkers files at a time. Latency is from the round's start,
// when every session's turn is ready at once, as in the persister round.
func benchRawFsync(b *testing.B, n int) {
	dir := b.TempDir()
	paths := make([]string, n)
	payload := make([][]byte, n)
	for i := range n {
		l, err := session.New(wbHeader(fmt.Sprintf("bench-%04d", i)))
		if err != nil {
			b.Fatal(err)
		}
		evs, err := l.AppendBatch(newTurnScript().next(smallChunks), 1)
		if err != nil {
			b.Fatal(err)
		}
		payload[i] = session.AppendRecords(nil, evs, session.PackChunks)
		paths[i] = filepath.Join(dir, fmt.Sprintf("s%04d.jsonl", i))
	}
	var lat []time.Duration
	var elapsed time.Duration
	var flushes int
	var busy atomic.Int64 // ns inside appendSync, summed over the workers
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		round := make([]time.Duration, n)
		var next atomic.Int64
		var wg sync.WaitGroup
		var failed atomic.Value
		for range DefaultFsyncWorkers {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
					t0 := time.Now()
					err := appendSync(paths[i], payload[i])
					busy.Add(int64(time.Since(t0)))
					if err != nil {
						failed.Store(err)
						return
					}
					round[i] = time.Since(start)
				}
			})
		}
		wg.Wait()
		elapsed += time.Since(start)
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		flushes += n
		lat = append(lat, round...)
	}
	reportLatency(b, flushes, elapsed, lat)
	reportStore(b, int64(flushes), time.Duration(busy.Load()), elapsed)
}

// rawFileStore is the least a Writer can do on disk: encode the batch
// with AppendRecords and append it to one file per session with
// write+fsync (no header, no framing, no fence). Under the persister it
// shows the actor's own overhead against raw-fsync.
type rawFileStore struct{ dir string }

func (s *rawFileStore) Create(session.Header) error { return nil }

// Release has nothing to release: every Append opens and closes its file.
func (s *rawFileStore) Release(session.SessionID) error { return nil }

func (s *rawFileStore) Append(_ context.Context, id session.SessionID, events []session.Event, _ Durability) error {
	return appendSync(filepath.Join(s.dir, string(id)+".jsonl"), session.AppendRecords(nil, events, session.PackChunks))
}

func appendSync(path string, p []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(p); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// reportStore reports the mean time of one store append (one fsync) and
// how many ran at once on average (at most FsyncWorkers): the first says
// what the disk costs, the second how well the writes keep the workers
// busy.
func reportStore(b *testing.B, appends int64, busy, elapsed time.Duration) {
	if appends == 0 || elapsed == 0 {
		return
	}
	b.ReportMetric(float64(busy.Microseconds())/1000/float64(appends), "ms/append")
	b.ReportMetric(float64(busy)/float64(elapsed), "busy-workers")
}

func reportLatency(b *testing.B, flushes int, elapsed time.Duration, lat []time.Duration) {
	b.ReportMetric(float64(flushes)/elapsed.Seconds(), "flushes/s")
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
