package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/bench"
)

const benchUsage = `Usage: dsh bench [flags]

Runs many concurrent sessions against the synthetic model with real
JSONL+zstd persistence and prints a results table (or one JSON value with
--json). Progress goes to stderr. Ctrl-C stops the load, flushes, and
prints the partial results.

Flags:
`

// benchCmd is `dsh bench`.
func benchCmd(args []string, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runBench(ctx, args, stdout, stderr)
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench")
	var o bench.Options
	var policy string
	var asJSON, quiet bool
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
	fs.StringVar(&o.Dir, "dir", "", "write the sessions here and keep them (default: a fresh temporary directory, removed)")
	fs.Int64Var(&o.Seed, "seed", 0, "synthetic model seed")
	fs.IntVar(&o.Cluster, "cluster", 0, "run the sessions on N cluster members on 127.0.0.1 sharing the directory (0: one host)")
	fs.BoolVar(&o.NoVerify, "no-verify", false, "do not read every log back after the run")
	fs.BoolVar(&asJSON, "json", false, "print the report as one JSON value")
	fs.BoolVar(&quiet, "quiet", false, "no progress on stderr")
	if err := parseFlags(fs, args, benchUsage, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("bench: unexpected argument %q", fs.Arg(0))
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
	o.Keep = o.Dir != ""
	if !quiet {
		o.Progress = stderr
		o.Live = isTerminal(stderr)
	}
	rep, err := bench.Run(ctx, o)
	if err != nil && !rep.Interrupted && rep.Turns == 0 {
		// Nothing ran (the load could not start): a report of zeros
		// would only hide the one line that says why.
		return err
	}
	if asJSON {
		b, jerr := json.MarshalIndent(rep, "", "  ")
		if jerr != nil {
			return jerr
		}
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		bench.WriteTable(stdout, rep)
	}
	if rep.Interrupted {
		return errors.New("bench: interrupted")
	}
	return err
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
