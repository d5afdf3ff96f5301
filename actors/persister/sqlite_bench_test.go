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
// op is one appendGroup of groupSessions sessions' short turns (a
// request, a one-chunk answer, the turn's closers: scalar rows only), a
// barrier, as under many sessions doing short turns. cpu-ns/op is the
// process's CPU time per op (ns/op includes the sync's wait, and a busy
// machine's).
func BenchmarkSQLiteAppendGroup(b *testing.B) {
	const groupSessions = 64
	s, err := OpenSQLite(filepath.Join(b.TempDir(), "b.sqlite"), SQLiteOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	builders := make([]*logBuilder, groupSessions)
	next := make([]int64, groupSessions)
	for i := range builders {
		builders[i] = newLogBuilder(b, session.SessionID(fmt.Sprintf("bench-%d", i)))
		if err := s.Create(builders[i].header()); err != nil {
			b.Fatal(err)
		}
	}
	group := func() []groupBatch {
		bs := make([]groupBatch, groupSessions)
		for i, lb := range builders {
			lb.textTurn("ask", "answer")
			bs[i] = groupBatch{ID: lb.id(), Events: lb.from(next[i]), Durable: true}
			next[i] = lb.len()
		}
		return bs
	}
	ctx := b.Context()
	for _, err := range s.appendGroup(ctx, feed(group())) {
		if err != nil {
			b.Fatal(err)
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
