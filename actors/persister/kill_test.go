//go:build !race

// Built without the race detector only (it runs in the -tags invariants
// pass), as the cluster tests are: under it the child, a whole persister
// over SQLite, is slowed many times over for a test of what a kill
// leaves on disk, not of data races (the race-built tests of the
// persister and the store cover those).

package persister

import (
	"bufio"
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
)

// killRounds is how many times the SQLite store's child is killed.
const killRounds = 12

// TestKilledWriterKeepsEveryDurableEvent runs the child killRounds times
// on the SQLite store and half as many on the JSONL store (cmd/dsh's kill
// test covers it too), a fresh one each time, killing it after a random number
// of Durable lines (some rounds at the first one, while the first commits
// run). On the SQLite store the persister group-commits, so a kill lands
// inside transactions holding many sessions' rows.
func TestKilledWriterKeepsEveryDurableEvent(t *testing.T) {
	for kind, rounds := range map[string]int{"sqlite": killRounds, "jsonl": killRounds / 2} {
		t.Run(kind, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
			for round := range rounds {
				url := kind + ":" + filepath.Join(t.TempDir(), "sessions")
				acked := runKilledChild(t, url, 1+rng.IntN(120))
				checkKilledStore(t, url, acked)
				t.Logf("round %d: %d sessions with durable events", round, len(acked))
			}
		})
	}
}

// runKilledChild starts the child on url, kills it after acks Durable
// lines and returns the highest seq heard Durable per session.
func runKilledChild(t *testing.T, url string, acks int) map[session.SessionID]int64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+url)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := false
	defer func() {
		if !done {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	acked := map[session.SessionID]int64{}
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for n := 0; n < acks; n++ {
		var line string
		var ok bool
		select {
		case line, ok = <-lines:
		case <-deadline.C:
			require.FailNow(t, "the child acknowledged too little", "%d of %d Durable lines; stderr: %s", n, acks, stderr.String())
		}
		require.True(t, ok, "the child exited: %s", stderr.String())
		f := strings.Fields(line)
		require.Len(t, f, 3, "child line %q", line)
		seq, err := strconv.ParseInt(f[2], 10, 64)
		require.NoError(t, err)
		acked[session.SessionID(f[1])] = seq
	}
	require.NoError(t, cmd.Process.Kill())
	// A Durable line written before the kill counts too: it was heard.
	for line := range lines {
		if f := strings.Fields(line); len(f) == 3 {
			if seq, err := strconv.ParseInt(f[2], 10, 64); err == nil {
				acked[session.SessionID(f[1])] = seq
			}
		}
	}
	_ = cmd.Wait()
	done = true
	return acked
}

// checkKilledStore opens the store the child left and checks it: SQLite's
// integrity check passes, and for every session its stored events are contiguous from 0 and reach at least its
// acknowledged seq, and it loads (the repair of a turn the kill left open
// commits).
func checkKilledStore(t *testing.T, url string, acked map[session.SessionID]int64) {
	t.Helper()
	store, err := openKillStore(url)
	require.NoError(t, err)
	defer func() { require.NoError(t, store.Close()) }()
	ctx := context.Background()
	if db, ok := store.(*SQLiteStore); ok {
		var check string
		require.NoError(t, db.conn.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&check))
		require.Equal(t, "ok", check, "SQLite's own check of the database")
	}
	listed, err := store.List(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(listed), len(acked))
	for i := range killSessions {
		id := killSessionID(i)
		want, ok := acked[id]
		evs, err := store.ReadFrom(ctx, id, 0)
		if !ok {
			if err != nil {
				require.ErrorIs(t, err, ErrNotFound, "%s", id)
			}
			continue
		}
		require.NoError(t, err, "%s", id)
		require.Greater(t, int64(len(evs)), want, "%s: acknowledged durable up to %d, stored %d events", id, want, len(evs))
		for k, e := range evs {
			require.Equal(t, int64(k), e.Seq(), "%s: event %d", id, k)
		}
		got, err := store.Load(ctx, id)
		require.NoError(t, err, "%s", id)
		require.GreaterOrEqual(t, int64(len(got.Events)), want+1)
		_, _, open := mustLogOf(t, got).OpenTurn()
		require.False(t, open, "%s: the repaired log is balanced", id)
	}
}

func mustLogOf(t *testing.T, st Stored) *session.Log {
	t.Helper()
	l, err := session.Restore(st.Header, st.Events)
	require.NoError(t, err)
	return l
}

// lockedBuffer is a bytes.Buffer safe to fill from a process's pipe while
// the test reads it.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
