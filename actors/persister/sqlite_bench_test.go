package persister

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dshgo/dsh/actors/session"
)

// BenchmarkSQLiteAppendGroup is the store's side of a group commit: one
// op is one appendGroup of group sessions' short turns (a request, a
// one-chunk answer, the turn's closers: scalar rows only), a barrier, as
// under many sessions doing short turns. The store holds stored
// sessions, and each op takes the next group of them in turn: with 64 of
// 64, every page a group writes is in SQLite's page cache; with 128 of
// 1,024 (about what dsh bench's short turns have: a thousand sessions,
// groups of a hundred or more), a group's pages are spread over a
// database larger than SQLite's default cache; with 1 of 1,024, a
// transaction's fixed costs show (most groups of a paced run hold one
// session's write). cpu-ns/op is the
// process's CPU time per op (ns/op includes the sync's wait, and a busy
// machine's).
func BenchmarkSQLiteAppendGroup(b *testing.B) {
	for _, c := range []struct{ stored, group int }{{64, 64}, {1024, 128}, {1024, 1}} {
		b.Run(fmt.Sprintf("sessions=%d/group=%d", c.stored, c.group), func(b *testing.B) {
			benchmarkSQLiteAppendGroup(b, c.stored, c.group)
		})
	}
}

// sqliteBench is a SQLite store in a benchmark's temporary directory
// holding stored sessions, each given one more short turn per group it is
// in, the sessions taken in turn.
type sqliteBench struct {
	b        *testing.B
	s        *SQLiteStore
	builders []*logBuilder
	next     []int64 // per session, the seq its next batch starts at
	at       int     // the next group's first session
}

// newSQLiteBench opens the store and creates its stored sessions, empty;
// the store is closed when b ends.
func newSQLiteBench(b *testing.B, stored int) *sqliteBench {
	s, err := OpenSQLite(filepath.Join(b.TempDir(), "b.sqlite"), SQLiteOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	builders := make([]*logBuilder, stored)
	for i := range builders {
		builders[i] = newLogBuilder(b, session.SessionID(fmt.Sprintf("bench-%d", i)))
		if err := s.Create(builders[i].header()); err != nil {
			b.Fatal(err)
		}
	}
	return &sqliteBench{b: b, s: s, builders: builders, next: make([]int64, len(builders))}
}

// group returns the next n sessions' next turns, durable if durable or
// if it is the session's first batch.
func (sb *sqliteBench) group(n int, durable bool) []groupBatch {
	bs := make([]groupBatch, n)
	for k := range bs {
		i := sb.at
		sb.at = (sb.at + 1) % len(sb.builders)
		lb := sb.builders[i]
		lb.textTurn("ask", "answer")
		bs[k] = groupBatch{ID: lb.id(), Events: lb.from(sb.next[i]), Durable: durable || sb.next[i] == 0}
		sb.next[i] = lb.len()
	}
	return bs
}

// commit appends bs as one group, failing the benchmark on any error.
func (sb *sqliteBench) commit(bs []groupBatch) {
	for _, err := range sb.s.appendGroup(sb.b.Context(), feed(bs)) {
		if err != nil {
			sb.b.Fatal(err)
		}
	}
}

func benchmarkSQLiteAppendGroup(b *testing.B, stored, groupSessions int) {
	sb := newSQLiteBench(b, stored)
	for range stored / groupSessions {
		sb.commit(sb.group(groupSessions, true))
	}
	b.ReportAllocs()
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		bs := sb.group(groupSessions, true)
		b.StartTimer()
		start := processCPU()
		sb.commit(bs)
		cpu += processCPU() - start
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkSQLiteTurnEndBesideWriteBehind is a turn end's commit while the
// store is kept busy with write-behind work, its background checkpoints
// running as they do under load: one op is three write-behind groups (16
// sessions' short turns each, not durable) and then a group of one
// session's turn end, a barrier, whose appendGroup is timed. It reports
// the barrier's p50 and p99 (ns) and the process's CPU per op; run it long
// enough (-benchtime 3000x) for checkpoints to happen: a barrier whose
// commit overlaps a checkpoint's sync of the database file is what the
// p99 shows (docs/durability.md#sqlite-checkpoints).
func BenchmarkSQLiteTurnEndBesideWriteBehind(b *testing.B) {
	const stored, behind, perGroup = 1024, 3, 16
	sb := newSQLiteBench(b, stored)
	for range stored / perGroup {
		sb.commit(sb.group(perGroup, true))
	}
	var took []time.Duration
	var cpu time.Duration
	for b.Loop() {
		start := processCPU()
		for range behind {
			sb.commit(sb.group(perGroup, false))
		}
		bs := sb.group(1, true)
		t0 := time.Now()
		sb.commit(bs)
		took = append(took, time.Since(t0))
		cpu += processCPU() - start
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	passive, _ := sb.s.checkpoints.checkpointRuns()
	b.ReportMetric(float64(passive), "checkpoints")
}

// processCPU is the CPU time the process has used.
func processCPU() time.Duration {
	total, _ := rusageCPU()
	return total
}

// rusageCPU is the CPU time the process has used, and the kernel's part
// of it (time on the process's behalf), from one getrusage.
func rusageCPU() (total, kernel time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), time.Duration(ru.Stime.Nano())
}

// BenchmarkSQLitePacedGroupCommit is the committer (group.go) over a
// SQLite store under a paced mix, without the actors in front of it: a
// thousand sessions' write-behind batches, five a millisecond (each
// session one every 200 ms, as streaming sessions send them), and a turn
// end, a barrier, every 5 ms. One op is 5 ms of that load, in real time.
// It reports the barriers' latency from submit to outcome (p50, p99, in
// ns), the group commits per op and the process's CPU per op.
func BenchmarkSQLitePacedGroupCommit(b *testing.B) {
	const stored, behindPerOp = 1000, 25
	sb := newSQLiteBench(b, stored)
	for range stored / 100 {
		sb.commit(sb.group(100, true))
	}
	// Every batch is built before the clock starts: a turn per batch,
	// sessions in turn, a barrier after every behindPerOp write-behind
	// batches.
	type write struct {
		batch groupBatch
		at    time.Duration // when it is submitted, from the start
	}
	var writes []write
	tick := 5 * time.Millisecond
	for op := range b.N {
		for i, g := range sb.group(behindPerOp+1, false) {
			at := time.Duration(op)*tick + time.Duration(i)*tick/behindPerOp
			g.Durable = i == behindPerOp
			writes = append(writes, write{batch: g, at: at})
		}
	}
	store := &countedGroups{SQLiteStore: sb.s}
	p := newPool(0, store, time.Minute, nil)
	defer p.close()
	var mu sync.Mutex
	var took []time.Duration
	var failed error
	var wg sync.WaitGroup
	// One write per session in flight, as its shard keeps it: a session's
	// next write waits for its last (only when the store falls 200 ms
	// behind).
	inFlight := map[session.SessionID]chan struct{}{}
	b.ResetTimer()
	cpu0 := processCPU()
	start := time.Now()
	for _, w := range writes {
		if d := w.at - time.Since(start); d > 0 {
			<-time.After(d)
		}
		if last := inFlight[w.batch.ID]; last != nil {
			<-last
		}
		finished := make(chan struct{})
		inFlight[w.batch.ID] = finished
		submitted := time.Now()
		durable := w.batch.Durable
		wg.Add(1)
		p.submitJob(&writeJob{id: w.batch.ID, batch: w.batch.Events, sync: durable, done: func(_ bool, err error) {
			mu.Lock()
			if err != nil && failed == nil {
				failed = err
			}
			if durable {
				took = append(took, time.Since(submitted))
			}
			mu.Unlock()
			close(finished)
			wg.Done()
		}}, durable)
	}
	wg.Wait()
	b.StopTimer()
	cpu := processCPU() - cpu0
	if failed != nil {
		b.Fatal(failed)
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(store.groups.Load())/float64(b.N), "commits/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// countedGroups is a SQLite store that counts its group commits.
type countedGroups struct {
	*SQLiteStore
	groups atomic.Int64
}

func (c *countedGroups) appendGroup(ctx context.Context, next func() (groupBatch, bool)) []error {
	c.groups.Add(1)
	return c.SQLiteStore.appendGroup(ctx, next)
}
