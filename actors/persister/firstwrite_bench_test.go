//go:build linux

package persister

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/vfs"
)

// BenchmarkJSONLFirstWrite measures what a session's first durable write
// costs the JSONL store with writer locks on (as a host runs it), against
// a later write of the same batch: the first one creates the session's
// directory, its lock file and its artifact, then writes and syncs. One
// op is one session's write (a turn of 40 text deltas); sys-ns/op is the
// kernel's CPU time per op (getrusage), cpu-ns/op the process's. On the
// file system of b.TempDir and, where /dev/shm is a tmpfs, on that one:
// docs/performance.md#a-sessions-first-write reads the two side by side.
//
//	go test -run '^$' -bench BenchmarkJSONLFirstWrite -benchtime 1000x ./actors/persister/
func BenchmarkJSONLFirstWrite(b *testing.B) {
	roots := []struct{ name, dir string }{{"disk", ""}}
	var fs syscall.Statfs_t
	if syscall.Statfs("/dev/shm", &fs) == nil && fs.Type == tmpfsMagic {
		roots = append(roots, struct{ name, dir string }{"tmpfs", "/dev/shm"})
	}
	for _, root := range roots {
		for _, first := range []bool{true, false} {
			name := fmt.Sprintf("fs=%s/write=later", root.name)
			if first {
				name = fmt.Sprintf("fs=%s/write=first", root.name)
			}
			b.Run(name, func(b *testing.B) { benchFirstWrite(b, root.dir, first) })
		}
	}
}

// tmpfsMagic is the f_type statfs reports for a tmpfs.
const tmpfsMagic = 0x01021994

func benchFirstWrite(b *testing.B, parent string, first bool) {
	ctx := b.Context()
	dir := b.TempDir()
	if parent != "" {
		var err error
		dir, err = os.MkdirTemp(parent, "dsh-bench-")
		require.NoError(b, err)
		b.Cleanup(func() { _ = os.RemoveAll(dir) })
	}
	s := newJSONLOn(b, vfs.OS(), dir, JSONLConfig{Lock: true, Holder: "bench"})
	defer func() { require.NoError(b, s.Close()) }()
	// turn returns the next turn of l: a prompt and 40 text deltas.
	turn := func(l *jlBuilder) []session.Event {
		k := l.len()
		l.textTurn("a prompt", 40)
		return l.from(k)
	}
	var l *jlBuilder
	if !first {
		l = newJL(b, "bench-later")
		require.NoError(b, s.Create(l.header()))
		require.NoError(b, s.Append(ctx, l.id(), turn(l), Sync))
	}
	var sys, cpu time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		if first {
			i++
			l = newJL(b, session.SessionID(fmt.Sprintf("bench-%06d", i)))
			require.NoError(b, s.Create(l.header()))
		}
		events := turn(l)
		c0, s0 := rusageCPU()
		b.StartTimer()
		if err := s.Append(ctx, l.id(), events, Sync); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		c1, s1 := rusageCPU()
		sys += s1 - s0
		cpu += c1 - c0
		b.StartTimer()
	}
	b.ReportMetric(float64(sys.Nanoseconds())/float64(b.N), "sys-ns/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}
