package persister

import (
	"fmt"
	"path/filepath"
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

func benchmarkSQLiteAppendGroup(b *testing.B, stored, groupSessions int) {
	s, err := OpenSQLite(filepath.Join(b.TempDir(), "b.sqlite"), SQLiteOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	builders := make([]*logBuilder, stored)
	next := make([]int64, stored)
	for i := range builders {
		builders[i] = newLogBuilder(b, session.SessionID(fmt.Sprintf("bench-%d", i)))
		if err := s.Create(builders[i].header()); err != nil {
			b.Fatal(err)
		}
	}
	at := 0 // the next group's first session
	group := func() []groupBatch {
		bs := make([]groupBatch, groupSessions)
		for k := range bs {
			i := (at + k) % stored
			lb := builders[i]
			lb.textTurn("ask", "answer")
			bs[k] = groupBatch{ID: lb.id(), Events: lb.from(next[i]), Durable: true}
			next[i] = lb.len()
		}
		at = (at + groupSessions) % stored
		return bs
	}
	ctx := b.Context()
	for range stored / groupSessions {
		for _, err := range s.appendGroup(ctx, feed(group())) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		bs := group()
		b.StartTimer()
		start := processCPU()
		for _, err := range s.appendGroup(ctx, feed(bs)) {
			if err != nil {
				b.Fatal(err)
			}
		}
		cpu += processCPU() - start
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
