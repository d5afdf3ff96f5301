package persister

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/testutil"
)

// The kill test: a real process, this test binary run again as a child
// (TestMain hands it to runKillChild), streams turns of many sessions
// through the persister into a store and prints every Durable it hears;
// the test kills it with SIGKILL at a random point, many times. Each time
// the store, opened again, must be valid and hold every event the child
// heard Durable for. The kill lands wherever the child is: mid-commit,
// mid-batch, between turns.

// killChildEnv, when set, makes the test binary the kill test's child:
// its value is the store, "sqlite:PATH" or "jsonl:DIR".
const killChildEnv = "DSH_PERSISTER_KILL_CHILD"

const (
	killSessions = 16
	killRounds   = 12
)

func killSessionID(i int) session.SessionID { return session.SessionID(fmt.Sprintf("kill-%02d", i)) }

// killPrinter is the child's owner: it prints each Durable as one line,
// "durable ID SEQ", on stdout (one write each, so lines never interleave),
// and then passes it to the session's streamer. durable is not modified
// once the actor is spawned.
type killPrinter struct {
	durable map[session.SessionID]chan int64
}

func (p killPrinter) Receive(ctx actor.Context) {
	if m, ok := ctx.Message().(Durable); ok {
		fmt.Fprintf(os.Stdout, "durable %s %d\n", m.ID, m.Seq)
		select {
		case p.durable[m.ID] <- m.Seq:
		default: // the streamer is not waiting: it reads the newest later
		}
	}
}

// runKillChild is the child: it never returns on its own (the parent
// kills it); it returns 2 if it cannot start.
func runKillChild(url string) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "kill child:", err)
		return 2
	}
	store, err := openKillStore(url)
	if err != nil {
		return fail(err)
	}
	sys := testutil.QuietSystem()
	props, err := Props(Config{Store: store, Window: 5 * time.Millisecond, MaxBatchEvents: 16})
	if err != nil {
		return fail(err)
	}
	persister := sys.Root.Spawn(props)
	printer := killPrinter{durable: map[session.SessionID]chan int64{}}
	for i := range killSessions {
		printer.durable[killSessionID(i)] = make(chan int64, 1)
	}
	owner := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return printer }))
	// Every session is tracked before any streams, so that a Track does
	// not queue behind the others' writes.
	pids := make([]*actor.PID, killSessions)
	for i := range killSessions {
		l, err := session.New(wbHeader(string(killSessionID(i))))
		if err != nil {
			return fail(err)
		}
		sp, err := session.Props(session.Config{Log: l})
		if err != nil {
			return fail(err)
		}
		pids[i] = sys.Root.Spawn(sp)
		res, err := sys.Root.RequestFuture(persister, Track{Ref: 1, Header: l.Header(), Session: pids[i], Owner: owner}, futureTimeout).Result()
		if _, ok := res.(Tracked); err != nil || !ok {
			return fail(fmt.Errorf("track %s: %v %v", l.ID(), res, err))
		}
	}
	// Each session streams a turn in Appends of a few events (write-behind
	// batches between the turn ends) and waits for its turn end to be
	// durable before the next turn, as a host does.
	errs := make(chan error, killSessions)
	for i, pid := range pids {
		go func() {
			id, script, ref := killSessionID(i), newTurnScript(), uint64(0)
			for turn := 0; ; turn++ {
				var last int64
				for ds := range slices.Chunk(script.next(turn%7*3), 4) {
					ref++
					res, err := sys.Root.RequestFuture(pid, session.NewAppend(ref, ds...), futureTimeout).Result()
					rep, ok := res.(session.AppendReply)
					if err != nil || !ok {
						errs <- fmt.Errorf("append to %s: %v %v", id, res, err)
						return
					}
					last = rep.Events.At(rep.Events.Len() - 1).Seq()
				}
				for seq := int64(-1); seq < last; {
					seq = <-printer.durable[id]
				}
			}
		}()
	}
	return fail(<-errs)
}

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

// openKillStore opens the kill test's store, "sqlite:PATH" or "jsonl:DIR".
func openKillStore(url string) (Store, error) {
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		return OpenSQLite(path, SQLiteOptions{})
	}
	return NewJSONLStore(JSONLConfig{Root: strings.TrimPrefix(url, "jsonl:")})
}
