package bench

// The benchmarks of docs/performance.md#targets that are not covered by the
// session and persister packages' own, each beside the baseline that does the
// same work the simplest way, in the same run:
//
//	BenchmarkChunksEndToEnd   runtime CPU per streamed chunk through host, agent,
//	                          session and persister, vs the synthetic model alone
//	BenchmarkLoadFromDisk     load + validate + derive a written log, vs raw JSON
//	                          decoding of the same lines
//	BenchmarkIdleSessionMemory heap per resident idle session, vs a mutex-guarded
//	                          in-memory log per session
//	BenchmarkPassivatedSessionMemory heap a passivated session leaves in its host
//
// Run: go test -run '^$' -bench . -benchtime=1x ./bench/ (a few seconds);
// raise -benchtime for stable figures.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

const (
	benchChunks      = 200 // text deltas per response: the reference's mix
	turnsPerSession  = 8   // a fresh session every few turns keeps history short
	benchTurnTimeout = time.Minute
)

func benchUser(b *testing.B, text string) messages.Message {
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
	require.NoError(b, err)
	return m
}

func benchModel(b *testing.B) *synthetic.Provider {
	p, err := synthetic.New(synthetic.Config{Seed: 1, TextChunks: benchChunks})
	require.NoError(b, err)
	return p
}

// reportPerChunk reports CPU and wall time per chunk.
func reportPerChunk(b *testing.B, chunks int64, cpu, wall time.Duration) {
	if chunks == 0 {
		return
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(chunks), "cpu-ns/chunk")
	b.ReportMetric(float64(wall.Nanoseconds())/float64(chunks), "ns/chunk")
	b.ReportMetric(float64(chunks)/float64(b.N), "chunks/op")
}

// BenchmarkChunksEndToEnd: one op is one turn (a user message, about 200
// text deltas, the assistant message) run through a Host and made durable
// (WaitIdle); the baseline streams the same responses from the synthetic
// model alone. The runtime's overhead per chunk is the difference.
//
// With policy turn-end it runs twice, lock=on (the store takes each
// session's writer lock, as every host with a Dir does) and lock=off (the
// same store without it): the lock is taken once per session, when it is
// created, so the two should not differ measurably.
func BenchmarkChunksEndToEnd(b *testing.B) {
	for _, pol := range []struct {
		name   string
		policy persister.Policy
		lock   bool
	}{{"none", persister.PolicyNone, true}, {"turn-end/lock=on", persister.PolicyTurnEnd, true},
		{"turn-end/lock=off", persister.PolicyTurnEnd, false}} {
		b.Run("impl=host/policy="+pol.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), benchTurnTimeout*time.Duration(max(b.N, 1)))
			defer cancel()
			st, err := persister.NewJSONLStore(persister.JSONLConfig{Root: b.TempDir(), Lock: pol.lock})
			require.NoError(b, err)
			h, err := supervisor.Open(supervisor.Config{Store: st, Provider: benchModel(b), Policy: pol.policy})
			require.NoError(b, err)
			defer func() { require.NoError(b, h.Close(context.Background())) }()
			msg := benchUser(b, "hello")
			var ids []session.SessionID
			b.ResetTimer()
			cpu0, t0 := cpuTime(), time.Now()
			var id session.SessionID
			for i := range b.N {
				if i%turnsPerSession == 0 {
					id, err = h.Create(ctx, supervisor.CreateOptions{})
					require.NoError(b, err)
					ids = append(ids, id)
				}
				require.NoError(b, h.Followup(ctx, id, msg))
				require.NoError(b, h.WaitIdle(ctx, id))
			}
			cpu, wall := cpuTime()-cpu0, time.Since(t0)
			b.StopTimer()
			var chunks int64
			for _, id := range ids {
				st, err := h.Stats(ctx, id)
				require.NoError(b, err)
				chunks += st.Chunks
			}
			reportPerChunk(b, chunks, cpu, wall)
		})
	}
	b.Run("impl=provider-alone", func(b *testing.B) {
		ctx := context.Background()
		p := benchModel(b)
		user := benchUser(b, "hello")
		var history []messages.Message
		var chunks int64
		b.ResetTimer()
		cpu0, t0 := cpuTime(), time.Now()
		for i := range b.N {
			if i%turnsPerSession == 0 {
				history = history[:0]
			}
			history = append(history, user)
			req := llm.NewRequest(messages.CallConfig{Model: p.Model()}, "", history, nil)
			var text strings.Builder
			for c, err := range p.Stream(ctx, req) {
				require.NoError(b, err)
				chunks++
				if c.Type() == messages.ChunkTextDelta {
					text.WriteString(c.Text())
				}
			}
			history = append(history, assistantText(b, text.String()))
		}
		cpu, wall := cpuTime()-cpu0, time.Since(t0)
		b.StopTimer()
		reportPerChunk(b, chunks, cpu, wall)
	})
}

func assistantText(b *testing.B, text string) messages.Message {
	m, err := messages.NewAssistantMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.ModelSource{Provider: "synthetic", Model: "synthetic-1"})
	require.NoError(b, err)
	return m
}

// writtenLog runs turns sessions' worth of the reference mix into a JSONL+
// zstd store and returns the path of the log file.
func writtenLog(b *testing.B, turns int) string {
	ctx, cancel := context.WithTimeout(context.Background(), benchTurnTimeout)
	defer cancel()
	dir := b.TempDir()
	p, err := synthetic.New(synthetic.Config{Seed: 2, TextChunks: benchChunks, ToolCallRate: 0.5, ReasoningRate: 0.5,
		ReasoningChunks: 50})
	require.NoError(b, err)
	tools, err := agent.NewRegistry(echoTool{})
	require.NoError(b, err)
	h, err := supervisor.Open(supervisor.Config{Dir: dir, Provider: p, Tools: tools})
	require.NoError(b, err)
	id, err := h.Create(ctx, supervisor.CreateOptions{})
	require.NoError(b, err)
	for range turns {
		require.NoError(b, h.Followup(ctx, id, benchUser(b, "go on")))
		require.NoError(b, h.WaitIdle(ctx, id))
	}
	require.NoError(b, h.Close(ctx))
	var path string
	require.NoError(b, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasPrefix(d.Name(), "session.jsonl") {
			path = p
		}
		return err
	}))
	require.NotEmpty(b, path)
	return path
}

// BenchmarkLoadFromDisk: one op loads a written log (zstd, about 25 k
// events): session.ReadFile (decompress, parse, check seqs), File.Log
// (validate and rebuild) and DeriveMessages. The baselines decode the same
// decompressed lines with encoding/json into generic values, without and
// with the decompression.
func BenchmarkLoadFromDisk(b *testing.B) {
	path := writtenLog(b, 100)
	f, err := session.ReadFile(path)
	require.NoError(b, err)
	events := float64(len(f.Events))
	raw, err := os.ReadFile(path)
	require.NoError(b, err)
	dec, err := zstd.NewReader(nil)
	require.NoError(b, err)
	defer dec.Close()
	plain, err := dec.DecodeAll(raw, nil)
	require.NoError(b, err)
	lines := bytes.Split(bytes.TrimSuffix(plain, []byte("\n")), []byte("\n"))
	report := func(b *testing.B, d time.Duration) {
		b.ReportMetric(events*float64(b.N)/d.Seconds(), "events/s")
		b.ReportMetric(events, "events/op")
		b.ReportMetric(float64(len(lines)), "lines/op")
	}
	b.Run("impl=dsh-read+validate+derive", func(b *testing.B) {
		b.ReportAllocs()
		t0 := time.Now()
		for range b.N {
			f, err := session.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			l, err := f.Log()
			if err != nil {
				b.Fatal(err)
			}
			if l.DeriveMessages().Len() == 0 {
				b.Fatal("no messages")
			}
		}
		report(b, time.Since(t0))
	})
	b.Run("impl=json-decode", func(b *testing.B) {
		b.ReportAllocs()
		t0 := time.Now()
		for range b.N {
			decodeLines(b, lines)
		}
		report(b, time.Since(t0))
	})
	b.Run("impl=zstd+json-decode", func(b *testing.B) {
		b.ReportAllocs()
		t0 := time.Now()
		for range b.N {
			data, err := os.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			plain, err := dec.DecodeAll(data, nil)
			if err != nil {
				b.Fatal(err)
			}
			decodeLines(b, bytes.Split(bytes.TrimSuffix(plain, []byte("\n")), []byte("\n")))
		}
		report(b, time.Since(t0))
	})
}

func decodeLines(b *testing.B, lines [][]byte) {
	for _, ln := range lines {
		var v map[string]any
		if err := json.Unmarshal(ln, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkIdleSessionMemory: one op opens a host, takes its actor
// system's process registry to its steady state (warmRegistry), creates N
// sessions that stay resident and idle (no turn ran: no logged events,
// which are counted per event), and measures the live heap they add, per
// session (B/session). What the host holds before its first session (the
// actor system and its registry, the persister and its shards, the store)
// is paid once per host, not per session, and is reported apart
// (host-B). The baseline holds N mutex-guarded in-memory logs with the
// same header.
func BenchmarkIdleSessionMemory(b *testing.B) {
	for _, n := range []int{1000} {
		for _, store := range []string{"memory", "jsonl"} {
			b.Run(fmt.Sprintf("impl=host/store=%s/sessions=%d", store, n), func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), benchTurnTimeout)
				defer cancel()
				var perSession, host float64
				for range b.N {
					cfg := supervisor.Config{Provider: benchModel(b)}
					if store == "jsonl" {
						cfg.Dir = b.TempDir()
					}
					opened := heapInUse()
					h, err := supervisor.Open(cfg)
					require.NoError(b, err)
					warmRegistry(h.System())
					before := heapInUse()
					host += float64(before) - float64(opened)
					for range n {
						_, err := h.Create(ctx, supervisor.CreateOptions{})
						require.NoError(b, err)
					}
					after := heapInUse()
					perSession += (float64(after) - float64(before)) / float64(n)
					require.NoError(b, h.Close(ctx))
				}
				b.ReportMetric(perSession/float64(b.N), "B/session")
				b.ReportMetric(host/float64(b.N), "host-B")
			})
		}
		b.Run(fmt.Sprintf("impl=mutex-log/sessions=%d", n), func(b *testing.B) {
			var perSession float64
			for range b.N {
				before := heapInUse()
				logs := make(map[session.SessionID]*mutexLog, n)
				for i := range n {
					id := session.SessionID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
					logs[id] = &mutexLog{header: session.Header{ID: id, CreatedAt: time.Now().UnixMilli()}}
				}
				after := heapInUse()
				perSession += (float64(after) - float64(before)) / float64(n)
				total := 0
				for _, l := range logs {
					total += l.len()
				}
				require.Zero(b, total)
			}
			b.ReportMetric(perSession/float64(b.N), "B/session")
		})
	}
}

// mutexLog is the baseline's session: a header and events behind a mutex.
type mutexLog struct {
	mu     sync.Mutex
	header session.Header
	events []session.Event
}

func (l *mutexLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events)
}

// BenchmarkPassivatedSessionMemory: what a passivated session still costs
// the host, in its steady state. One op opens a host that passivates
// sessions idle for a millisecond and runs rounds of N fresh sessions,
// each through one short turn (passivatedInFlight at a time: a host
// passivating at a steady rate), waiting after each round until every
// session of it is passivated and torn down (no session resident, and no
// goroutine left from the round's teardown). The first round is a
// warm-up: what the host keeps at its peak (its maps, the actors'
// watcher sets and queues, parked workers) is paid once per host, not per
// session. The figure (B/session) is the live heap the next
// passivatedRounds rounds add, over their sessions, so that the growth
// steps of the host's map of passivated sessions are averaged as they are
// over a host's life. Two costs of the process, paid once, are taken to
// their steady state first and reported apart: the actor system's
// process registry (warmRegistry, registry-B), and the descriptors of
// the goroutines a peak leaves behind (warmGoroutines, goroutines-B).
//
// Measured before (two rounds of N sessions all at once, from a cold
// goroutine pool), the same build gave 70, 72 and 565 B/session: a
// round whose peak of goroutines passed the last one's left about 450
// bytes per extra goroutine, and a round that reached a new peak of
// resident sessions grew the host's and the actors' peak structures; both
// were charged to that round's sessions.
func BenchmarkPassivatedSessionMemory(b *testing.B) {
	const n = 1000
	b.Run(fmt.Sprintf("store=jsonl/sessions=%d", n), func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*benchTurnTimeout)
		defer cancel()
		p, err := synthetic.New(synthetic.Config{Seed: 1, TextChunks: 4})
		require.NoError(b, err)
		var perSession, registry, goroutines float64
		for range b.N {
			goroutines += warmGoroutines(passivatedPeakGoroutines * n)
			h, err := supervisor.Open(supervisor.Config{Provider: p, Dir: b.TempDir(), IdleTimeout: time.Millisecond})
			require.NoError(b, err)
			registry += warmRegistry(h.System())
			settled := -1 // goroutines once the warm-up round settled
			round := func(r int) uint64 {
				var wg sync.WaitGroup
				slots := make(chan struct{}, passivatedInFlight)
				for i := range n {
					slots <- struct{}{}
					wg.Go(func() {
						defer func() { <-slots }()
						id, err := h.Create(ctx, supervisor.CreateOptions{ID: session.SessionID(fmt.Sprintf("passive-%d-%05d", r, i))})
						require.NoError(b, err)
						require.NoError(b, h.Followup(ctx, id, benchUser(b, "hello")))
						require.NoError(b, h.WaitIdle(ctx, id))
					})
				}
				wg.Wait()
				deadline := time.Now().Add(benchTurnTimeout)
				for h.Resident() > 0 || h.Passivated() < int64((r+1)*n) || (settled >= 0 && runtime.NumGoroutine() > settled) {
					require.True(b, time.Now().Before(deadline), "round %d: %d sessions still resident, %d passivated, %d goroutines (%d after the warm-up)",
						r, h.Resident(), h.Passivated(), runtime.NumGoroutine(), settled)
					runtime.Gosched()
				}
				if settled < 0 {
					settled = runtime.NumGoroutine()
				}
				return heapInUse()
			}
			first := round(0)
			last := first
			for r := 1; r <= passivatedRounds; r++ {
				last = round(r)
			}
			perSession += (float64(last) - float64(first)) / (passivatedRounds * n)
			require.NoError(b, h.Close(ctx))
		}
		b.ReportMetric(perSession/float64(b.N), "B/session")
		b.ReportMetric(registry/float64(b.N), "registry-B")
		b.ReportMetric(goroutines/float64(b.N), "goroutines-B")
	})
}

const (
	// passivatedRounds is the rounds BenchmarkPassivatedSessionMemory
	// measures after its warm-up round.
	passivatedRounds = 3
	// passivatedInFlight bounds the sessions of a round running their
	// turn at once: a host passivating at a steady rate, whose peaks (the
	// resident sessions, the goroutines, the actors' watcher sets and
	// queues, which keep their largest size) the warm-up round reaches.
	passivatedInFlight = 100
	// passivatedPeakGoroutines bounds the goroutines of a round at its
	// peak, per session of the round: the benchmark's own, the host's
	// request futures and idle timers, the actors' workers (about 3.2 per
	// session were seen).
	passivatedPeakGoroutines = 6
)

// warmGoroutines takes the process's pool of goroutine descriptors to at
// least k and returns the live heap that added: it starts k goroutines
// that wait until all of them run, then lets them return. Go keeps the
// descriptor of a goroutine that returned (about 450 bytes, in the heap)
// and reuses it for the next goroutine started: the pool only grows, to
// the most goroutines the process ever ran at once.
func warmGoroutines(k int) float64 {
	before := heapInUse()
	var started, done sync.WaitGroup
	release := make(chan struct{})
	started.Add(k)
	for range k {
		done.Go(func() {
			started.Done()
			<-release
		})
	}
	started.Wait()
	close(release)
	done.Wait()
	return float64(heapInUse()) - float64(before)
}

// warmRegistry takes the process registry of sys to its steady state and
// returns the live heap that added. protoactor files every process (actor
// or request future) in one of 32,768 Go maps (1,024 buckets of 32
// shards) by a hash of its name, and a map allocates its first bucket
// group (about 300 bytes) the first time a name lands in it and keeps it
// once emptied, as Go maps do. Every request future and every unnamed
// actor draws a fresh name, so a host that has served a few tens of
// thousands of requests has touched every map: about 10 MB per actor
// system, paid once. Measured from a fresh system, the maps a round
// touches first would be charged to its sessions (2.2 KB of the 2.5 KB a
// passivated session seemed to keep, at 1,000 sessions). 400,000 short
// lived futures leave each map untouched with probability e^-12.
func warmRegistry(sys *actor.ActorSystem) float64 {
	before := heapInUse()
	for range 400_000 {
		f := actor.NewFuture(sys, -1)
		sys.Root.Send(f.PID(), struct{}{}) // answered: it leaves the registry
	}
	after := heapInUse()
	runtime.KeepAlive(sys)
	return float64(after) - float64(before)
}
