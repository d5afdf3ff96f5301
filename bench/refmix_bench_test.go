package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/testutil"
	"github.com/dshgo/dsh/messages"
)

// The reference's own workload, so that its published figures and ours
// can be read side by side: one session, mixTurns turns, each of
//
//	turn/start, step/start, a ~250-char user/message,
//	200 assistant/chunk text deltas of 1–3 words,
//	assistant/message (the text and one tool call, with usage; its
//	  sourceEventSeqs cite the 200 chunks),
//	tool/call, tool/result (2 KB of text, citing the tool/call),
//	step/end, turn/end
//
// = 208 events a turn, 208,000 in all.
const (
	mixTurns        = 1000
	mixChunks       = 200
	mixEventsInTurn = mixChunks + 8
	mixUserChars    = 250
	mixResultBytes  = 2048
	mixTimeout      = 5 * time.Minute
	// mixWindow is how many one-event Appends the driver keeps in flight.
	// An agent sends each chunk as it arrives, without waiting for the
	// previous one's acknowledgement; the window only bounds the mailbox.
	// (With one in flight, every event pays a full round trip between two
	// goroutines and the run measures the scheduler: about 4× slower.)
	mixWindow = 256
)

var mixModel = messages.ModelSource{Provider: "deepseek-official", Model: "deepseek-v4-flash"}

var mixWords = strings.Fields(`the a session log event turn step model tool call result
	file line write read append load seq chunk text user assistant message reply ok now then
	list files in directory go build test run check error value field struct func return`)

// mixHeader is the header of the benchmark's session.
func mixHeader() session.Header {
	return session.Header{ID: "00000000-0000-4000-8000-000000000208", CreatedAt: 1_700_000_000_000, Cwd: "/work/project"}
}

// referenceMix returns the drafts of turns turns of the reference mix, in
// append order, for a session whose first event has seq 0.
func referenceMix(turns int) ([]session.Draft, error) {
	rng := rand.New(rand.NewPCG(208, 1000))
	words := func(n int) string {
		var sb strings.Builder
		for range n {
			sb.WriteByte(' ')
			sb.WriteString(mixWords[rng.IntN(len(mixWords))])
		}
		return sb.String()
	}
	out := make([]session.Draft, 0, turns*mixEventsInTurn)
	var sb strings.Builder
	for i := range turns {
		t := int64(i + 1)
		base := int64(i * mixEventsInTurn)
		sb.Reset()
		sb.WriteString("Please")
		for sb.Len() < mixUserChars {
			sb.WriteString(words(1))
		}
		user, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(sb.String()[:mixUserChars])}, messages.UserSource())
		if err != nil {
			return nil, err
		}
		out = append(out, session.TurnStart{Turn: t}.Draft(), session.StepStart{Turn: t, Step: 1}.Draft(),
			session.UserMessage{Message: user}.Draft())
		sb.Reset()
		sources := make([]int64, mixChunks)
		for c := range mixChunks {
			delta := words(1 + rng.IntN(3))
			sb.WriteString(delta)
			sources[c] = base + 3 + int64(c)
			out = append(out, session.AssistantChunk{Turn: t, Step: 1, Chunk: messages.TextDeltaChunk(0, delta)}.Draft())
		}
		callID := fmt.Sprintf("call_00_%024d", t)
		args := fmt.Sprintf(`{"command": "ls -la src/pkg%d", "description": "List the files"}`, t)
		answer, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.TextBlock(sb.String()),
			messages.ToolCallBlock(callID, "bash", args)}, mixModel)
		if err != nil {
			return nil, err
		}
		usage := messages.TokenUsage{InputTokens: 1000 + t, OutputTokens: 400, CacheReadTokens: messages.Some(1664)}
		sb.Reset()
		for sb.Len() < mixResultBytes {
			fmt.Fprintf(&sb, "-rw-r--r-- 1 dsh dsh %6d Dec  1 16:%02d file%04d.go\n", rng.IntN(100000), rng.IntN(60), sb.Len())
		}
		result := messages.NewToolResultMessage(callID, []messages.ContentBlock{messages.TextBlock(sb.String()[:mixResultBytes])}, messages.ToolSucceeded)
		callSeq := base + 3 + mixChunks + 1
		out = append(out,
			session.AssistantMessage{Turn: t, Step: 1, Message: answer, Usage: usage, HasUsage: true}.Draft().WithSources(sources),
			session.ToolCall{Turn: t, Step: 1, CallID: callID, Name: "bash", Arguments: args}.Draft(),
			session.ToolResult{Turn: t, Step: 1, Message: result}.Draft().WithSources([]int64{callSeq}),
			session.StepEnd{Turn: t, Step: 1}.Draft(),
			session.TurnEnd{Turn: t, Reason: session.TurnEndReason{Kind: session.EndCompleted}}.Draft())
	}
	return out, nil
}

// mixAppends returns the Appends of referenceMix(turns), one draft each.
func mixAppends(turns int) ([]session.Append, error) {
	drafts, err := referenceMix(turns)
	if err != nil {
		return nil, err
	}
	out := make([]session.Append, len(drafts))
	for i, d := range drafts {
		out[i] = session.NewAppend(uint64(i), d)
	}
	return out, nil
}

// mixDriver sends one Append per draft to the session, keeping mixWindow
// in flight, and reports on done when every append is acknowledged and,
// with durable set, the persister has told it (the owner) that the last
// event is durable.
type mixDriver struct {
	session  *actor.PID
	appends  []session.Append
	next     int
	inflight int
	acked    int
	durable  bool  // wait for the last event to be durable
	seen     int64 // highest Durable seq seen
	finished bool
	done     chan error
}

type mixStart struct{}

func (d *mixDriver) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case mixStart:
		d.fill(ctx)
	case session.AppendReply:
		d.inflight--
		d.acked++
		d.fill(ctx)
	case session.AppendFailed:
		d.finish(fmt.Errorf("append %d: %w", m.Ref, m.Err))
	case persister.Durable:
		d.seen = max(d.seen, m.Seq)
	case persister.WriteFailed:
		d.finish(fmt.Errorf("write: %w", m.Err))
	default:
		return
	}
	if d.acked == len(d.appends) && (!d.durable || d.seen == int64(len(d.appends))-1) {
		d.finish(nil)
	}
}

func (d *mixDriver) fill(ctx actor.Context) {
	for d.inflight < mixWindow && d.next < len(d.appends) {
		ctx.Request(d.session, d.appends[d.next])
		d.appends[d.next] = session.Append{} // the log holds what it needs
		d.next++
		d.inflight++
	}
}

func (d *mixDriver) finish(err error) {
	if !d.finished {
		d.finished = true
		d.done <- err
	}
}

// mixLive keeps the log of the last run referenced after it returns, so
// that a heap profile written at the end of the benchmark (-memprofile,
// inuse_space) shows what a loaded log retains and who allocated it.
var mixLive *session.Log

// benchTimer is the part of *testing.B a run starts and stops; tests pass
// noTimer.
type benchTimer interface {
	StartTimer()
	StopTimer()
}

type noTimer struct{}

func (noTimer) StartTimer() {}
func (noTimer) StopTimer()  {}

// mixResult is one run of the workload.
type mixResult struct {
	events   int
	elapsed  time.Duration
	cpu      time.Duration // the process's CPU time over the timed part
	retained float64       // heap retained after GC, over the baseline before the run
}

// runMixAppend appends turns turns of the mix, one event per Append,
// through a session actor; with root set, a persister (policy turn-end)
// writes it behind into a JSONL+zstd store there, and the run ends when the
// last event is durable. The timer runs only around the appends; the
// retained heap is measured with the log (and the persister) still live,
// after the drafts were dropped.
func runMixAppend(tb testing.TB, tm benchTimer, turns int, root string) mixResult {
	tb.Helper()
	tm.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), mixTimeout)
	defer cancel()
	sys := testutil.QuietSystem()
	defer sys.Shutdown()
	h := mixHeader()
	l, err := session.New(h)
	require.NoError(tb, err)
	sp, err := session.Props(session.Config{Log: l})
	require.NoError(tb, err)
	sessionPID := sys.Root.Spawn(sp)
	defer func() { require.NoError(tb, sys.Root.StopFuture(sessionPID).Wait()) }()
	d := &mixDriver{session: sessionPID, durable: root != "", seen: -1, done: make(chan error, 1)}
	drvPID := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor { return d }))
	defer func() { require.NoError(tb, sys.Root.StopFuture(drvPID).Wait()) }()
	if root != "" {
		store, err := persister.NewJSONLStore(persister.JSONLConfig{Root: root, Lock: true})
		require.NoError(tb, err)
		defer func() { require.NoError(tb, store.Close()) }()
		props, err := persister.Props(persister.Config{Store: store, Policy: persister.PolicyTurnEnd})
		require.NoError(tb, err)
		pid := sys.Root.Spawn(props)
		defer func() { require.NoError(tb, sys.Root.PoisonFuture(pid).Wait()) }()
		res, err := sys.Root.RequestFuture(pid, persister.Track{Header: h, Session: sessionPID, Owner: drvPID}, time.Minute).Result()
		require.NoError(tb, err)
		require.IsType(tb, persister.Tracked{}, res)
	}
	before := heapInUse()
	d.appends, err = mixAppends(turns)
	require.NoError(tb, err)
	runtime.GC()
	tm.StartTimer()
	cpu0, t0 := cpuTime(), time.Now()
	sys.Root.Send(drvPID, mixStart{})
	select {
	case err = <-d.done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	cpu, elapsed := cpuTime()-cpu0, time.Since(t0)
	tm.StopTimer()
	require.NoError(tb, err)
	n := len(d.appends)
	d.appends = nil
	retained := float64(heapInUse()) - float64(before)
	require.EqualValues(tb, n, l.Len())
	mixLive = l
	return mixResult{events: n, elapsed: elapsed, cpu: cpu, retained: retained}
}

// runMixLoad loads the session from the store at root cold (a new store:
// nothing cached) and rebuilds its log; the retained heap is the log's.
func runMixLoad(tb testing.TB, tm benchTimer, root string) mixResult {
	tb.Helper()
	tm.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), mixTimeout)
	defer cancel()
	store, err := persister.NewJSONLStore(persister.JSONLConfig{Root: root})
	require.NoError(tb, err)
	defer func() { require.NoError(tb, store.Close()) }()
	before := heapInUse()
	tm.StartTimer()
	cpu0, t0 := cpuTime(), time.Now()
	st, err := store.Load(ctx, mixHeader().ID)
	var l *session.Log
	if err == nil {
		l, err = session.Adopt(st.Header, st.Events) // as a host resuming it does
	}
	cpu, elapsed := cpuTime()-cpu0, time.Since(t0)
	tm.StopTimer()
	require.NoError(tb, err)
	require.Empty(tb, st.Closers, "the written log ends balanced")
	st = persister.Stored{}
	retained := float64(heapInUse()) - float64(before)
	n := int(l.Len())
	mixLive = l
	return mixResult{events: n, elapsed: elapsed, cpu: cpu, retained: retained}
}

// report reports the mean rate and retained heap per event of runs.
func (r mixResult) report(b *testing.B, runs []mixResult) {
	var events int
	var elapsed, cpu time.Duration
	var retained float64
	for _, x := range runs {
		events += x.events
		elapsed += x.elapsed
		cpu += x.cpu
		retained += x.retained
	}
	b.ReportMetric(float64(events)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(events), "cpu-ns/event")
	b.ReportMetric(retained/float64(events), "B/event")
	b.ReportMetric(float64(events)/float64(len(runs)), "events/op")
}

// BenchmarkReferenceMix runs the reference implementation's own benchmark
// workload (see referenceMix: one session, 1,000 turns, 208,000 events) so
// that its figures can be compared with ours. One op is the whole
// workload; run it with -benchtime=1x:
//
//	go test -run '^$' -bench BenchmarkReferenceMix -benchtime=1x -count=3 ./bench/
//
//	append   every event appended on its own (one event per Append) through
//	         the session actor, mixWindow appends in flight
//	persist  the same, with the persister writing it behind into a
//	         JSONL+zstd store under the turn-end policy (each turn/end is a
//	         durability barrier), until the last event is durable
//	load     that file loaded cold (a new store: read, decompress, parse,
//	         repair check) and the log made of it (session.Adopt, as a
//	         host's resume does: the loaded events become the log's pages)
//
// events/s is the workload's events over the wall time of the timed part;
// B/event is the heap retained after a GC with the log (and for persist
// the persister) still live, over the heap before, per event; cpu-ns/event
// is the process's CPU time over the timed part, per event, which other
// load on the machine disturbs less than the wall time. The last
// run's log stays live, so a heap profile shows where its bytes are:
//
//	go test -run '^$' -bench 'BenchmarkReferenceMix/append$' -benchtime=1x -memprofile mem.out ./bench/
//	go tool pprof -sample_index=inuse_space -top mem.out
//
// The first persist run of a process also counts the process-wide zstd
// encoder it creates (its history buffers, about 16 MB per core), once.
//
// The reference (TypeScript on Node 22) measured on this kind of machine
// (2 cores): append 187 k events/s, append + JSONL+zstd 97.6 k events/s,
// cold load 806 k events/s, 240 B/event retained.
func BenchmarkReferenceMix(b *testing.B) {
	b.Run("append", func(b *testing.B) {
		runs := make([]mixResult, 0, b.N)
		for range b.N {
			runs = append(runs, runMixAppend(b, b, mixTurns, ""))
		}
		mixResult{}.report(b, runs)
	})
	b.Run("persist", func(b *testing.B) {
		runs := make([]mixResult, 0, b.N)
		for range b.N {
			runs = append(runs, runMixAppend(b, b, mixTurns, b.TempDir()))
		}
		mixResult{}.report(b, runs)
	})
	b.Run("load", func(b *testing.B) {
		b.StopTimer()
		root := b.TempDir()
		runMixAppend(b, noTimer{}, mixTurns, root)
		runs := make([]mixResult, 0, b.N)
		for range b.N {
			runs = append(runs, runMixLoad(b, b, root))
		}
		mixResult{}.report(b, runs)
	})
}

// TestReferenceMixWorkload pins the shape of the benchmark's workload: 208
// events a turn in the order the reference uses, every turn a valid trace
// (the log accepts all of it), the assistant message citing its chunks.
func TestReferenceMixWorkload(t *testing.T) {
	drafts, err := referenceMix(mixTurns)
	require.NoError(t, err)
	require.Equal(t, 208_000, len(drafts))
	want := []session.EventType{session.TypeTurnStart, session.TypeStepStart, session.TypeUserMessage}
	for range mixChunks {
		want = append(want, session.TypeAssistantChunk)
	}
	want = append(want, session.TypeAssistantMessage, session.TypeToolCall, session.TypeToolResult,
		session.TypeStepEnd, session.TypeTurnEnd)
	l, err := session.New(mixHeader())
	require.NoError(t, err)
	for i, d := range drafts {
		require.Equal(t, want[i%mixEventsInTurn], d.Type(), "draft %d", i)
		_, err := l.Append(d, 1_700_000_000_000+int64(i))
		require.NoError(t, err, "draft %d", i)
	}
	require.EqualValues(t, 208_000, l.Len())
	require.EqualValues(t, mixTurns, l.Turns())
	// The last turn's assistant message: text of 200 deltas, one tool
	// call, usage, and sources citing exactly the turn's chunks.
	base := int64((mixTurns - 1) * mixEventsInTurn)
	events := l.Events()
	a := events.At(int(base) + 3 + mixChunks)
	require.Equal(t, session.TypeAssistantMessage, a.Type())
	srcs, ok := a.SourceEventSeqs()
	require.True(t, ok)
	require.Equal(t, mixChunks, len(srcs))
	require.Equal(t, base+3, srcs[0])
	require.Equal(t, base+2+mixChunks, srcs[mixChunks-1])
	var text strings.Builder
	for s := int(base) + 3; s < int(base)+3+mixChunks; s++ {
		c, ok := events.At(s).Payload().(session.AssistantChunk)
		require.True(t, ok, "event %d", s)
		n := len(strings.Fields(c.Chunk.Text()))
		require.True(t, n >= 1 && n <= 3, "chunk %d has %d words", s, n)
		text.WriteString(c.Chunk.Text())
	}
	m, ok := a.Payload().(session.AssistantMessage)
	require.True(t, ok)
	require.True(t, m.HasUsage)
	require.Len(t, m.Message.Content(), 2)
	require.Equal(t, text.String(), m.Message.Content()[0].Text())
}

// TestReferenceMixRuns runs the benchmark's three parts on a few turns:
// the appends are acknowledged, the persister makes the last one durable,
// and the cold load returns every event.
func TestReferenceMixRuns(t *testing.T) {
	const turns = 3
	r := runMixAppend(t, noTimer{}, turns, "")
	require.Equal(t, turns*mixEventsInTurn, r.events)
	root := t.TempDir()
	r = runMixAppend(t, noTimer{}, turns, root)
	require.Equal(t, turns*mixEventsInTurn, r.events)
	r = runMixLoad(t, noTimer{}, root)
	require.Equal(t, turns*mixEventsInTurn, r.events)
	require.Positive(t, r.elapsed)
}
