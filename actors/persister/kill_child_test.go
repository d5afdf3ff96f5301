package persister

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"

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

// killSessions is how many sessions the child streams.
const killSessions = 16

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

// openKillStore opens the kill test's store, "sqlite:PATH" or "jsonl:DIR".
func openKillStore(url string) (Store, error) {
	if path, ok := strings.CutPrefix(url, "sqlite:"); ok {
		return OpenSQLite(path, SQLiteOptions{})
	}
	return NewJSONLStore(JSONLConfig{Root: strings.TrimPrefix(url, "jsonl:")})
}
