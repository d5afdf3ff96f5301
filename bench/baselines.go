package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// Baselines is the same work done without the runtime, in the same process,
// right after the load (docs/performance.md#targets): results are ratios, not
// wall-clock claims.
type Baselines struct {
	// MutexLogEventsPerSec: the run's events appended again, with the same
	// validation, to in-memory logs behind a mutex, from GOMAXPROCS
	// goroutines (no actors, no model, no disk).
	MutexLogEventsPerSec float64 `json:"mutex_log_events_per_sec"`
	// EncodeEventsPerSec: the run's events encoded as JSONL (chunk rows
	// packed), no I/O.
	EncodeEventsPerSec float64 `json:"json_encode_events_per_sec"`
	// RawFsync: each session's encoded turns written to a plain file, one
	// write+fsync per turn, with the persister's number of fsync workers.
	RawFsync       Latency `json:"raw_fsync"`
	RawFsyncPerSec float64 `json:"raw_fsyncs_per_sec"`
	// ProviderCPUPerChunkNs: CPU per chunk of the synthetic model alone,
	// streaming the same kind of responses: on one goroutine unpaced; paced,
	// as many concurrent streams as the run's sessions at the run's pace,
	// one goroutine each.
	ProviderCPUPerChunkNs float64 `json:"provider_cpu_per_chunk_ns"`
}

// loggedSession is one session read back from disk.
type loggedSession struct {
	header session.Header
	events []session.Event
}

// runBaselines measures the baselines over the logs the run wrote (when
// there are any) and the provider alone.
func runBaselines(ctx context.Context, o Options, logs []loggedSession, scratch string) (Baselines, error) {
	var b Baselines
	var total int
	for _, l := range logs {
		total += len(l.events)
	}
	if total > 0 {
		var err error
		if b.MutexLogEventsPerSec, err = mutexLogBaseline(logs, total); err != nil {
			return b, err
		}
		start := time.Now()
		var buf []byte
		for _, l := range logs {
			buf = session.AppendRecords(buf[:0], l.events, session.PackChunks)
		}
		b.EncodeEventsPerSec = float64(total) / time.Since(start).Seconds()
		if b.RawFsync, b.RawFsyncPerSec, err = rawFsyncBaseline(logs, o, scratch); err != nil {
			return b, err
		}
	}
	cpu, err := providerBaseline(ctx, o)
	if err != nil {
		return b, err
	}
	b.ProviderCPUPerChunkNs = cpu
	return b, nil
}

// mutexLogBaseline appends every session's events again (as drafts with
// the same data and surface metadata) to fresh logs, each behind a mutex.
func mutexLogBaseline(logs []loggedSession, total int) (float64, error) {
	type guarded struct {
		mu     sync.Mutex
		log    *session.Log
		drafts []session.Draft
	}
	gs := make([]*guarded, len(logs))
	for i, l := range logs {
		sl, err := session.New(l.header)
		if err != nil {
			return 0, err
		}
		g := &guarded{log: sl, drafts: make([]session.Draft, len(l.events))}
		for k, e := range l.events {
			d := session.NewDraft(e.Type(), e.Data()).WithSurface(e.SurfaceOp())
			if seqs, ok := e.SourceEventSeqs(); ok {
				d = d.WithSources(seqs)
			}
			if e.Ignorable() {
				d = d.AsIgnorable()
			}
			g.drafts[k] = d
		}
		gs[i] = g
	}
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(gs)) {
					return
				}
				g := gs[i]
				for k := 0; k < len(g.drafts); k += 32 {
					g.mu.Lock()
					_, err := g.log.AppendBatch(g.drafts[k:min(k+32, len(g.drafts))], 1)
					g.mu.Unlock()
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, fmt.Errorf("bench: mutex-log baseline: %w", err)
	}
	return float64(total) / time.Since(start).Seconds(), nil
}

// rawFsyncBaseline writes each session's events, one turn per write, to a
// plain file with an fsync after each write, from as many goroutines as
// the persister has fsync workers: the cost of durability without dsh. The
// files go to a temporary directory under scratch ("" for the system's).
func rawFsyncBaseline(logs []loggedSession, o Options, scratch string) (Latency, float64, error) {
	dir, err := os.MkdirTemp(scratch, "raw-fsync-*")
	if err != nil {
		return Latency{}, 0, err
	}
	defer os.RemoveAll(dir)
	type job struct {
		path string
		data []byte
	}
	var jobs [][]job // per session, one job per turn
	for i, l := range logs {
		var js []job
		path := filepath.Join(dir, fmt.Sprintf("s%d.jsonl", i))
		from := 0
		for k, e := range l.events {
			if e.Type() == session.TypeTurnEnd || k == len(l.events)-1 {
				js = append(js, job{path: path, data: session.AppendRecords(nil, l.events[from:k+1], session.PackChunks)})
				from = k + 1
			}
		}
		jobs = append(jobs, js)
	}
	workers := o.FsyncWorkers
	if workers <= 0 {
		workers = persister.DefaultFsyncWorkers
	}
	var lat samples
	var next atomic.Int64
	var count atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(jobs)) {
					return
				}
				for _, j := range jobs[i] {
					t0 := time.Now()
					if err := appendSync(j.path, j.data); err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
					lat.add(time.Since(t0))
					count.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return Latency{}, 0, fmt.Errorf("bench: raw-fsync baseline: %w", err)
	}
	return lat.summary(), float64(count.Load()) / time.Since(start).Seconds(), nil
}

func appendSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// providerBaseline streams responses from a synthetic model configured as
// the run's and returns its CPU per chunk. Unpaced, 200 responses on one
// goroutine. Paced (Options.TokensPerSecond), as many concurrent streams
// as the run has sessions, one goroutine each, at the run's pace, one
// response each: a paced chunk costs the model a timer wake-up, and that
// cost depends on how many streams wake at once.
func providerBaseline(ctx context.Context, o Options) (float64, error) {
	syn, err := synthetic.New(synthetic.Config{Seed: o.Seed, TextChunks: o.Chunks, ReasoningChunks: o.ReasoningChunks,
		ToolCallRate: o.ToolRate, ReasoningRate: o.ReasoningRate, TokensPerSecond: o.TokensPerSecond})
	if err != nil {
		return 0, err
	}
	user, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("bench")}, messages.UserSource())
	if err != nil {
		return 0, err
	}
	cfg := messages.CallConfig{Provider: syn.Name(), Model: syn.Model()}
	stream := func(i int) (n int64) {
		req := llm.NewRequest(cfg, "", []messages.Message{user}, nil).WithSession(fmt.Sprintf("baseline-%d", i))
		for _, err := range syn.Stream(ctx, req) {
			if err != nil {
				break
			}
			n++
		}
		return n
	}
	var chunks atomic.Int64
	cpu0 := cpuTime()
	if o.TokensPerSecond > 0 {
		var wg sync.WaitGroup
		for i := range o.Sessions {
			wg.Go(func() { chunks.Add(stream(i)) })
		}
		wg.Wait()
	} else {
		for i := range 200 {
			chunks.Add(stream(i))
		}
	}
	cpu := cpuTime() - cpu0
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if chunks.Load() == 0 {
		return 0, nil
	}
	return float64(cpu) / float64(chunks.Load()), nil
}
