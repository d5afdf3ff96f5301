package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/bench"
)

const benchUsage = `Usage: dsh bench [flags]

Runs many concurrent sessions against the synthetic model with real
JSONL+zstd persistence and prints a results table (or one JSON value with
--json). Progress goes to stderr. Ctrl-C stops the load, flushes, and
prints the partial results.

With --capacity it searches for the number of concurrent sessions one
process holds at a model's pace (default 30 tokens/s, 100 chunks a turn,
no reasoning, no tools): 100 sessions, one turn each, doubling while a
step holds, then bisecting to within 10 %. A step holds while its
turn-end flush p99 is at most 10ms, its turn latency beyond the model's
at most 50ms at p99, and its heap under --memory-budget (a step going
over it is stopped at once). It prints the
largest count that held (capacity_sessions with --json), with CPU, memory
and open files per session.

Flags:
`

// benchCmd is `dsh bench`.
func benchCmd(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runBench(ctx, args, stdout, stderr)
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := newFlagSet("bench")
	var o bench.Options
	var policy, cpuProfile string
	var asJSON, quiet, capacity bool
	var budget string
	var capTimeout time.Duration
	fs.IntVar(&o.Sessions, "sessions", 1000, "concurrent sessions")
	fs.IntVar(&o.Turns, "turns", 3, "turns per session")
	fs.IntVar(&o.Chunks, "chunks", 200, "mean text deltas per model response")
	fs.IntVar(&o.ReasoningChunks, "reasoning-chunks", 50, "mean reasoning deltas per reasoning block")
	fs.Float64Var(&o.ToolRate, "tool-rate", 0.5, "probability that a response calls a tool (0 for none)")
	fs.Float64Var(&o.ReasoningRate, "reasoning-rate", 0.5, "probability that a response reasons first (0 for none)")
	fs.Float64Var(&o.TokensPerSecond, "tokens-per-second", 0, "model speed per stream (0: as fast as possible)")
	fs.StringVar(&policy, "policy", "turn-end", "durability policy: turn-end, strict or none")
	fs.IntVar(&o.FsyncWorkers, "fsync-workers", 0, "fsync worker pool size (0: default)")
	fs.IntVar(&o.Shards, "shards", 0, "persister shards (0: default)")
	fs.DurationVar(&o.PassivateAfter, "passivate-after", 0, "passivate a session idle this long (0: never); resumed from disk on its next turn")
	fs.BoolVar(&o.NoBaselines, "no-baselines", false, "skip the baselines run after the load")
	var stores storeFlags
	stores.register(fs, "write the sessions here and keep them (default: a fresh temporary directory, removed)")
	fs.Int64Var(&o.Seed, "seed", 0, "synthetic model seed")
	fs.IntVar(&o.Cluster, "cluster", 0, "run the sessions on N cluster members on 127.0.0.1 sharing the directory (0: one host)")
	fs.BoolVar(&o.NoVerify, "no-verify", false, "do not read every log back after the run")
	fs.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the load (not the baselines) to `FILE`")
	fs.BoolVar(&capacity, "capacity", false, "search for the most concurrent sessions that hold at a pace (see above)")
	fs.StringVar(&budget, "memory-budget", "", "with --capacity, the most heap a step may reach, in bytes or with a KiB, MiB or GiB suffix (default: half the machine's memory)")
	fs.DurationVar(&capTimeout, "capacity-timeout", bench.DefaultCapacityTimeout, "with --capacity, stop the search after this long")
	fs.BoolVar(&asJSON, "json", false, "print the report as one JSON value")
	fs.BoolVar(&quiet, "quiet", false, "no progress on stderr")
	var of obsFlags
	of.register(fs, "warn")
	of.registerActorMetrics(fs)
	var metricsOut string
	fs.StringVar(&metricsOut, "metrics-out", "", "collect the run's metrics and write them, in the Prometheus text format, to `FILE` (- for stderr) at the end")
	if err := parseFlags(fs, args, benchUsage, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("bench: unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if capacity {
		// The capacity search's own defaults for what was not given.
		if !set["sessions"] {
			o.Sessions = bench.DefaultCapacityStart
		}
		if !set["tokens-per-second"] {
			o.TokensPerSecond = bench.DefaultCapacityTPS
		}
		if !set["chunks"] {
			o.Chunks = bench.DefaultCapacityChunks
		}
		if !set["tool-rate"] {
			o.ToolRate = 0
		}
		if !set["reasoning-rate"] {
			o.ReasoningRate = 0
		}
	} else if set["memory-budget"] || set["capacity-timeout"] {
		return usagef("bench: --memory-budget and --capacity-timeout go with --capacity")
	}
	// Flags given as 0 mean "none", not "default".
	if o.ToolRate == 0 {
		o.ToolRate = -1
	}
	if o.ReasoningRate == 0 {
		o.ReasoningRate = -1
	}
	if o.Sessions <= 0 || o.Turns <= 0 || o.Chunks <= 0 || o.ReasoningChunks <= 0 {
		return usagef("bench: --sessions, --turns, --chunks and --reasoning-chunks must be positive")
	}
	switch policy {
	case "turn-end":
		o.Policy = persister.PolicyTurnEnd
	case "strict":
		o.Policy = persister.PolicyStrict
	case "none":
		o.Policy = persister.PolicyNone
	default:
		return usagef("bench: unknown --policy %q (turn-end, strict or none)", policy)
	}
	if err := o.Validate(); err != nil {
		return usagef("%v", err)
	}
	if stores.given() {
		// A store named is kept after the run, a directory or a database.
		loc, err := stores.location("bench")
		if err != nil {
			return err
		}
		if loc.Scheme == persister.SchemeJSONL {
			o.Dir = loc.Path
		} else {
			o.Store = loc.String()
		}
		if err := o.Validate(); err != nil {
			return usagef("%v", err)
		}
	}
	o.Keep = o.Dir != ""
	if capacity {
		if cpuProfile != "" {
			return usagef("bench: --cpuprofile does not go with --capacity")
		}
		if metricsOut != "" || of.actorMetrics {
			// The search measures what one process holds: telemetry would
			// be part of the load it measures, and docs/observability.md
			// says why it exports none.
			return usagef("bench: --metrics-out and --actor-metrics do not go with --capacity")
		}
		return runCapacity(ctx, o, budget, capTimeout, asJSON, quiet, stdout, stderr)
	}
	if !quiet {
		o.Progress = stderr
		o.Live = isTerminal(stderr)
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: cpu profile: %w", err)
		}
		defer func() {
			if cerr := f.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("bench: cpu profile: %w", cerr)
			}
		}()
		o.CPUProfile = f
	}
	tr, err := openTraces(ctx, stderr)
	if err != nil {
		return err
	}
	o.Observers = tr.observers()
	var logMu sync.Mutex
	ob, err := of.open(ctx, stderr, &logMu, metricsOut != "", false /* hold */)
	if err != nil {
		tr.close()
		return err
	}
	defer func() {
		if cerr := ob.close(err); cerr != nil && err == nil {
			err = cerr
		}
	}()
	tr.countDropped(ob)
	o.Logger, o.MeterProvider, o.System = ob.logger, ob.meterProvider(), ob.system()
	if err := o.Validate(); err != nil {
		tr.close()
		return usagef("%v", err)
	}
	rep, err := bench.Run(ctx, o)
	tr.close()
	if metricsOut != "" {
		if werr := writeMetrics(ob, metricsOut, stderr); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil && !rep.Interrupted && rep.Turns == 0 {
		// Nothing ran (the load could not start): a report of zeros
		// would only hide the one line that says why.
		return err
	}
	if werr := writeReport(stdout, asJSON, rep, bench.WriteTable); werr != nil {
		return werr
	}
	if rep.Interrupted {
		return errors.New("bench: interrupted")
	}
	return err
}

// runCapacity is `dsh bench --capacity`.
func runCapacity(ctx context.Context, o bench.Options, budget string, timeout time.Duration, asJSON, quiet bool, stdout, stderr io.Writer) error {
	if timeout <= 0 {
		return usagef("bench: --capacity-timeout must be positive")
	}
	co := bench.CapacityOptions{Load: o, Timeout: timeout}
	if budget != "" {
		b, err := parseBytes(budget)
		if err != nil {
			return usagef("bench: --memory-budget: %v", err)
		}
		co.MemoryBudget = b
	}
	if !quiet {
		co.Progress = stderr
	}
	rep, err := bench.Capacity(ctx, co)
	if ctx.Err() != nil {
		err = errors.New("bench: interrupted")
	}
	if err != nil && len(rep.Steps) == 0 {
		return err
	}
	if werr := writeReport(stdout, asJSON, rep, bench.WriteCapacity); werr != nil {
		return werr
	}
	return err
}

// writeReport prints rep to w as indented JSON, or with table.
func writeReport[R any](w io.Writer, asJSON bool, rep R, table func(io.Writer, R)) error {
	if !asJSON {
		table(w, rep)
		return nil
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// parseBytes reads a size: a whole number of bytes, or one with a KiB, MiB
// or GiB suffix (K, M and G also mean those).
func parseBytes(s string) (uint64, error) {
	num, mult := strings.TrimSpace(s), uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}} {
		if n, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not a positive size (for example 8GiB)", s)
	}
	if n > (1<<64-1)/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}

// writeMetrics writes the Prometheus text of o's instruments to path ("-":
// stderr).
func writeMetrics(o *obs, path string, stderr io.Writer) error {
	rec := httptest.NewRecorder()
	o.mp.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		return fmt.Errorf("bench: --metrics-out: the metrics handler answered %d", rec.Code)
	}
	if path == "-" {
		_, err := stderr.Write(rec.Body.Bytes())
		return err
	}
	if err := os.WriteFile(path, rec.Body.Bytes(), 0o644); err != nil {
		return fmt.Errorf("bench: --metrics-out: %w", err)
	}
	return nil
}
