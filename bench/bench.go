// Package bench is dsh's load generator (docs/performance.md): many
// concurrent sessions on one supervisor.Host, each running a few turns
// against the synthetic model, with real persistence, measured end to end.
// `dsh bench` is a thin front end over Run.
//
// What Run measures:
//
//   - throughput: turns, events and assistant chunks committed, per second
//     of wall time;
//   - CPU: the process's user+system CPU time (getrusage) over the load,
//     less the bench's own sampler's, divided by the chunks streamed;
//   - turn latency beyond the model's own: for each turn, the wall time
//     from Followup to a durable WaitIdle, minus the time the session's
//     model calls spent inside the provider's stream (p50/p99);
//   - flush latency: from the commit of a turn/end to the persister's
//     Durable notice for it (p50/p99);
//   - disk: bytes of the session files and their compression ratio
//     (decoded JSONL bytes over bytes on disk); every log is read back and
//     validated;
//   - memory: the peak of live heap objects sampled during the load, and
//     the live heap after the load per session (logged events included);
//   - open file descriptors (Linux, from /proc/self/fd): the peak during
//     the load and the count when it ends, and the descriptors the run
//     added per resident session at the end. Each resident session of a
//     store on disk holds one for its writer lock (session.lock, see
//     actors/persister/doc.go), and the store caches up to
//     persister.DefaultMaxOpenFiles append handles on top.
//
// After the load, in the same process, the baselines of
// docs/performance.md#targets do the same work without the runtime
// (Baselines): the run's events appended to mutex-guarded in-memory logs,
// encoded as JSONL, written with a raw fsync per turn, and the synthetic
// model streaming alone (at the run's pace, with as many concurrent streams
// as sessions, when the run is paced); the table prints the runtime's figures
// as ratios against them, and the runtime's CPU per chunk net of the model's
// (runtime_cpu_per_chunk_ns).
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/metric"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
	"github.com/dshgo/dsh/telemetry"
)

// Options are the knobs of a run. Zero fields take the defaults.
type Options struct {
	Sessions        int     // concurrent sessions (default 1000)
	Turns           int     // turns per session (default 3)
	Chunks          int     // mean text deltas per response (default 200)
	ReasoningChunks int     // mean reasoning deltas (default 50)
	ToolRate        float64 // probability a response calls a tool (default 0.5; <0 for none)
	ReasoningRate   float64 // probability a response reasons first (default 0.5; <0 for none)
	TokensPerSecond float64 // model speed per stream (0: as fast as possible)
	Policy          persister.Policy
	FsyncWorkers    int
	Shards          int
	// Dir is where the sessions are written; "" makes a fresh temporary
	// directory, removed afterwards unless Keep.
	Dir  string
	Keep bool
	// Store, instead of Dir, names the store by URL (persister.Open):
	// jsonl:DIR is Dir DIR; sqlite:PATH writes the sessions into that
	// database, which is kept after the run.
	Store string
	Seed  int64
	// NoVerify skips reading every log back after the run (and with it the
	// baselines that replay the logs).
	NoVerify bool
	// NoBaselines skips the baselines.
	NoBaselines bool
	// PassivateAfter, when positive, passivates sessions idle that long
	// (supervisor.Config.IdleTimeout): between turns a session may be
	// stopped and resumed from disk.
	PassivateAfter time.Duration
	// HeapLimit, when positive, stops the load (as a cancellation does,
	// with ErrHeapLimit) as soon as the live heap is seen above it.
	HeapLimit uint64
	// Stagger, when positive, spreads the sessions' first turns evenly
	// over that long (session i starts i×Stagger/Sessions after the load
	// began) instead of starting them all at once, so that at a model's
	// pace their turn ends are spread as a steady load's are rather than
	// all arriving together.
	Stagger time.Duration
	// Cluster, when positive, runs the sessions on that many cluster
	// members on 127.0.0.1 sharing the directory (package cluster): each
	// session is created and driven through member i mod Cluster, wherever
	// its id places it. It needs a directory (not PolicyNone).
	Cluster int
	// CPUProfile, when set, receives a CPU profile (runtime/pprof) of the
	// load alone: from the first session's creation to the last turn's
	// end, neither the verification nor the baselines.
	CPUProfile io.Writer
	// Observers watch every session's committed events
	// (supervisor.Config.Observers): dsh bench's span export when the
	// OTEL_* variables ask for one. nil: none, at no cost.
	Observers []telemetry.Observer
	// Progress receives progress lines (nil: none). Live rewrites one line
	// (a terminal); otherwise a plain line every ProgressInterval.
	Progress         io.Writer
	Live             bool
	ProgressInterval time.Duration
	// MeterProvider and Logger are the host's (supervisor.Config): with a
	// provider the run's instruments count what the report counts (the
	// report's percentiles stay computed from exact samples). nil: none.
	MeterProvider metric.MeterProvider
	Logger        *slog.Logger
	// System, when set, is the actor system the host runs in
	// (supervisor.Config.System; dsh bench --actor-metrics gives one that
	// records protoactor's per-actor metrics). Not with Cluster, whose
	// members make their own. nil: the host makes its own.
	System *actor.ActorSystem
}

func (o Options) withDefaults() Options {
	if o.Sessions == 0 {
		o.Sessions = 1000
	}
	if o.Turns == 0 {
		o.Turns = 3
	}
	if o.Chunks == 0 {
		o.Chunks = 200
	}
	if o.ReasoningChunks == 0 {
		o.ReasoningChunks = 50
	}
	if o.ToolRate == 0 {
		o.ToolRate = 0.5
	}
	if o.ReasoningRate == 0 {
		o.ReasoningRate = 0.5
	}
	o.ToolRate = max(o.ToolRate, 0)
	o.ReasoningRate = max(o.ReasoningRate, 0)
	if o.ProgressInterval == 0 {
		o.ProgressInterval = time.Second
		if o.Live {
			o.ProgressInterval = 200 * time.Millisecond
		}
	}
	return o
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	var errs []error
	if o.Sessions < 0 || o.Turns < 0 || o.Chunks < 0 || o.ReasoningChunks < 0 {
		errs = append(errs, errors.New("bench: sessions, turns and chunks must not be negative"))
	}
	if o.ToolRate > 1 || o.ReasoningRate > 1 {
		errs = append(errs, errors.New("bench: rates must be at most 1"))
	}
	if o.TokensPerSecond < 0 {
		errs = append(errs, errors.New("bench: tokens per second must not be negative"))
	}
	if o.Policy < persister.PolicyTurnEnd || o.Policy > persister.PolicyNone {
		errs = append(errs, fmt.Errorf("bench: unknown policy %d", int(o.Policy)))
	}
	if o.Cluster < 0 {
		errs = append(errs, errors.New("bench: cluster size must not be negative"))
	}
	if o.Store != "" {
		if o.Dir != "" {
			errs = append(errs, errors.New("bench: a directory and a store URL both given"))
		}
		if loc, err := persister.ParseStoreURL(o.Store); err != nil {
			errs = append(errs, fmt.Errorf("bench: %w", err))
		} else if loc.Scheme != persister.SchemeJSONL && o.Cluster > 0 {
			errs = append(errs, fmt.Errorf("bench: a cluster shares a JSONL directory, not %s", loc))
		}
	}
	if o.Cluster > 0 && o.Policy == persister.PolicyNone {
		errs = append(errs, errors.New("bench: a cluster shares its sessions through the directory: policy none cannot run one"))
	}
	if o.Cluster > 0 && o.System != nil {
		errs = append(errs, errors.New("bench: a cluster's members run in actor systems of their own: no System with Cluster"))
	}
	return errors.Join(errs...)
}

// ErrHeapLimit is why Run stopped a load whose heap went over
// Options.HeapLimit.
var ErrHeapLimit = errors.New("bench: the heap went over its limit")

// timedProvider measures the wall time each session's model calls spend
// inside the provider's stream.
type timedProvider struct {
	inner llm.Provider
	model sync.Map // session id → *atomic.Int64 (ns)
}

func (p *timedProvider) Name() string { return p.inner.Name() }

func (p *timedProvider) Model() string {
	if m, ok := p.inner.(interface{ Model() string }); ok {
		return m.Model()
	}
	return ""
}

func (p *timedProvider) counter(id string) *atomic.Int64 {
	if c, ok := p.model.Load(id); ok {
		return c.(*atomic.Int64)
	}
	c, _ := p.model.LoadOrStore(id, new(atomic.Int64))
	return c.(*atomic.Int64)
}

func (p *timedProvider) Stream(ctx context.Context, req llm.Request) iter.Seq2[messages.StreamChunk, error] {
	return func(yield func(messages.StreamChunk, error) bool) {
		start := time.Now()
		defer func() { p.counter(req.SessionID()).Add(int64(time.Since(start))) }()
		for c, err := range p.inner.Stream(ctx, req) {
			if !yield(c, err) {
				return
			}
		}
	}
}

// echoTool answers every call with its arguments.
type echoTool struct{}

func (echoTool) Name() string { return "echo" }
func (echoTool) Schema() messages.ToolSchema {
	return messages.ToolSchema{Name: "echo", Description: "Echo the arguments back.",
		Parameters: messages.MustParseJSON(`{"type":"object"}`)}
}
func (echoTool) Mode(messages.JSON) agent.Mode { return agent.Parallel }
func (echoTool) Execute(_ context.Context, call agent.Call) (agent.Result, error) {
	return agent.Result{Content: []messages.ContentBlock{messages.TextBlock(call.Arguments)}}, nil
}

// Run runs the load and reports. A cancelled ctx stops the load early: the
// running turns are disposed, everything is flushed, and the partial
// report comes back with Interrupted set, together with the cause.
func Run(ctx context.Context, opts Options) (Report, error) {
	if err := opts.Validate(); err != nil {
		return Report{}, err
	}
	o := opts.withDefaults()
	rep := Report{Sessions: o.Sessions, TurnsPerSession: o.Turns, Policy: o.Policy.String()}
	ctx, stopLoad := context.WithCancelCause(ctx)
	defer stopLoad(nil)

	dir := o.Dir
	// db is a store other than a directory, opened by URL (a SQLite
	// database): always kept.
	var db persister.Location
	if loc, err := persister.ParseStoreURL(o.Store); o.Store != "" && err == nil {
		if loc.Scheme == persister.SchemeJSONL {
			dir = loc.Path
		} else if o.Policy != persister.PolicyNone {
			db = loc
			rep.Store = loc.String()
		}
	}
	if o.Policy != persister.PolicyNone && dir == "" && db.Path == "" {
		d, err := os.MkdirTemp("", "dsh-bench-*")
		if err != nil {
			return rep, err
		}
		dir = d
		if !o.Keep {
			defer os.RemoveAll(d)
		}
	}
	if o.Policy == persister.PolicyNone {
		dir = ""
	}
	rep.Dir = dir

	syn, err := synthetic.New(synthetic.Config{Seed: o.Seed, TextChunks: o.Chunks, ReasoningChunks: o.ReasoningChunks,
		ToolCallRate: o.ToolRate, ReasoningRate: o.ReasoningRate, TokensPerSecond: o.TokensPerSecond})
	if err != nil {
		return rep, err
	}
	tp := &timedProvider{inner: syn}
	tools, err := agent.NewRegistry(echoTool{})
	if err != nil {
		return rep, err
	}
	var flushes, turnLat, overhead samples
	var writeFailures atomic.Int64

	runtime.GC()
	heapBase := heapObjects()
	fdBase := openFDs()
	hcfg := supervisor.Config{Dir: dir, Provider: tp, Tools: tools, Policy: o.Policy,
		FsyncWorkers: o.FsyncWorkers, Shards: o.Shards, IdleTimeout: o.PassivateAfter,
		MeterProvider: o.MeterProvider, Logger: o.Logger, System: o.System,
		OnTurnDurable: func(_ session.SessionID, _ int64, d time.Duration) { flushes.add(d) },
		OnWriteFailed: func(session.SessionID, error) { writeFailures.Add(1) },
		Observers:     o.Observers}
	if db.Path != "" {
		st, err := persister.Open(db.String())
		if err != nil {
			return rep, err
		}
		hcfg.Store = st // the host closes it
	}
	r, err := openRunner(ctx, o, hcfg)
	if err != nil {
		if hcfg.Store != nil {
			_ = hcfg.Store.Close()
		}
		return rep, err
	}
	rep.Members = o.Cluster

	// Peak heap and descriptor sampler, and progress. The sampler is the
	// bench's, not the runtime's: it runs on a thread of its own and counts
	// the CPU it spends (listing /proc/self/fd costs about a millisecond
	// with a few thousand descriptors open), which the load's CPU figure
	// leaves out.
	var peak atomic.Uint64
	var peakFDs atomic.Int64
	var samplerCPU atomic.Int64
	var turnsDone atomic.Int64
	stopBg := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			c0 := threadCPU()
			if v := heapObjects(); v > peak.Load() {
				peak.Store(v)
				if o.HeapLimit > 0 && v > o.HeapLimit {
					stopLoad(ErrHeapLimit)
				}
			}
			if n%fdSampleEvery == 0 {
				if v := int64(openFDs()); v > peakFDs.Load() {
					peakFDs.Store(v)
				}
			}
			samplerCPU.Add(int64(threadCPU() - c0))
			select {
			case <-stopBg:
				return
			case <-tick.C:
			}
		}
	}()
	if o.CPUProfile != nil {
		if err := pprof.StartCPUProfile(o.CPUProfile); err != nil {
			close(stopBg)
			bg.Wait()
			return rep, errors.Join(fmt.Errorf("bench: cpu profile: %w", err), r.close(context.WithoutCancel(ctx)))
		}
	}
	start := time.Now()
	cpu0, sampler0 := cpuTime(), samplerCPU.Load()
	total := int64(o.Sessions * o.Turns)
	if o.Progress != nil {
		bg.Add(1)
		go func() {
			defer bg.Done()
			tick := time.NewTicker(o.ProgressInterval)
			defer tick.Stop()
			for {
				select {
				case <-stopBg:
					if o.Live {
						fmt.Fprint(o.Progress, "\r\033[K")
					}
					return
				case <-tick.C:
					progress(o, start, turnsDone.Load(), total)
				}
			}
		}()
	}

	ids := make([]session.SessionID, o.Sessions)
	var (
		wg      sync.WaitGroup
		errMu   sync.Mutex
		firstEr error
	)
	setErr := func(err error) {
		errMu.Lock()
		if firstEr == nil {
			firstEr = err
		}
		errMu.Unlock()
	}
	for i := range o.Sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := r.drivers[i%len(r.drivers)]
			id, err := h.Create(ctx, supervisor.CreateOptions{ID: session.SessionID(fmt.Sprintf("bench-%05d", i)), Cwd: "/bench"})
			if err != nil {
				setErr(fmt.Errorf("bench: create session %d: %w", i, err))
				return
			}
			ids[i] = id
			if o.Stagger > 0 && i > 0 {
				wait := time.NewTimer(time.Duration(int64(o.Stagger) * int64(i) / int64(o.Sessions)))
				select {
				case <-ctx.Done():
					wait.Stop()
					return
				case <-wait.C:
				}
			}
			model := tp.counter(string(id))
			for t := range o.Turns {
				m, err := messages.NewUserMessage([]messages.ContentBlock{
					messages.TextBlock(fmt.Sprintf("session %d turn %d: tell me something", i, t+1))}, messages.UserSource())
				if err != nil {
					setErr(err)
					return
				}
				m0 := model.Load()
				t0 := time.Now()
				if err := h.Followup(ctx, id, m); err != nil {
					setErr(fmt.Errorf("bench: %s turn %d: followup: %w", id, t+1, err))
					return
				}
				if err := h.WaitIdle(ctx, id); err != nil {
					setErr(fmt.Errorf("bench: %s turn %d: wait idle: %w", id, t+1, err))
					return
				}
				d := time.Since(t0)
				turnLat.add(d)
				overhead.add(max(d-time.Duration(model.Load()-m0), 0))
				turnsDone.Add(1)
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	cpu := cpuTime() - cpu0 - time.Duration(samplerCPU.Load()-sampler0)
	if o.CPUProfile != nil {
		pprof.StopCPUProfile()
	}
	fdEnd := openFDs()

	for _, id := range ids {
		if id == "" {
			continue
		}
		st, err := r.stats(ctx, id)
		if err != nil {
			continue
		}
		rep.Turns += st.Turns
		rep.Events += st.Events
		rep.Chunks += st.Chunks
		rep.InputTokens += st.Usage.InputTokens
		rep.OutputTokens += st.Usage.OutputTokens
	}
	runtime.GC()
	heapAfter := heapObjects()
	close(stopBg)
	bg.Wait()

	for _, h := range r.hosts {
		rep.Resident += h.Resident()
		rep.Passivated += h.Passivated()
	}
	rep.OpenFDs, rep.PeakOpenFDs, rep.FDsPerResident = fdEnd, max(int(peakFDs.Load()), fdEnd), -1
	if fdBase >= 0 && fdEnd >= 0 && rep.Resident > 0 {
		rep.FDsPerResident = float64(fdEnd-fdBase) / float64(rep.Resident)
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	closeErr := r.close(closeCtx)

	rep.WallSeconds = wall.Seconds()
	rep.CPUSeconds = cpu.Seconds()
	if rep.Chunks > 0 {
		rep.CPUPerChunkNs = float64(cpu) / float64(rep.Chunks)
	}
	if s := wall.Seconds(); s > 0 {
		rep.EventsPerSec = float64(rep.Events) / s
		rep.ChunksPerSec = float64(rep.Chunks) / s
		rep.TurnsPerSec = float64(rep.Turns) / s
	}
	rep.TurnLatency = turnLat.summary()
	rep.TurnOverhead = overhead.summary()
	rep.FlushLatency = flushes.summary()
	rep.PeakHeapBytes = max(peak.Load(), heapAfter)
	if o.Sessions > 0 && heapAfter > heapBase {
		rep.HeapPerSession = float64(heapAfter-heapBase) / float64(o.Sessions)
	}
	if rep.Events > 0 && heapAfter > heapBase {
		rep.HeapPerEvent = float64(heapAfter-heapBase) / float64(rep.Events)
	}
	rep.WriteFailures = writeFailures.Load()

	var logs []loggedSession
	if dir != "" || db.Path != "" {
		var err error
		if db.Path != "" {
			logs, err = storeStats(ctx, db, !o.NoVerify, &rep)
		} else {
			logs, err = diskStats(dir, !o.NoVerify, &rep)
		}
		if err != nil && closeErr == nil {
			closeErr = err
		}
	}
	if !o.NoBaselines && ctx.Err() == nil && closeErr == nil && firstEr == nil {
		b, err := runBaselines(ctx, o, logs, "")
		if err != nil {
			return rep, err
		}
		rep.Baselines = &b
		if rep.Chunks > 0 {
			rep.RuntimeCPUPerChunkNs = rep.CPUPerChunkNs - b.ProviderCPUPerChunkNs
		}
	}
	if err := context.Cause(ctx); err != nil {
		rep.Interrupted = true
		return rep, err
	}
	if firstEr != nil {
		return rep, firstEr
	}
	return rep, closeErr
}

func progress(o Options, start time.Time, done, total int64) {
	el := time.Since(start).Seconds()
	rate := float64(done) / max(el, 1e-9)
	if o.Live {
		const width = 30
		n := int(float64(width) * float64(done) / float64(max(total, 1)))
		fmt.Fprintf(o.Progress, "\r\033[K[%s%s] %d/%d turns  %.0f turns/s  %.1fs",
			strings.Repeat("=", n), strings.Repeat(" ", width-n), done, total, rate, el)
		return
	}
	fmt.Fprintf(o.Progress, "bench: %d/%d turns, %.0f turns/s, %.1fs\n", done, total, rate, el)
}
