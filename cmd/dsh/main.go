// Command dsh is the command-line face of the dsh runtime: inspect and
// verify session logs (and, as the runtime grows, run sessions and load
// tests).
//
// Conventions (DESIGN §8): flags come before positional arguments; results
// go to stdout, diagnostics to stderr; --help exits 0; exit 0 on success,
// 1 on failure (an invalid log), 2 on bad usage; an error is one clear
// line, never a stack trace.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dshgo/dsh/actors/persister"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError is bad usage: exit 2 with the message and a hint.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errReported means the command already printed its failure (for example
// one line per invalid file); exit 1 without another line.
var errReported = errors.New("reported")

// errHelp means --help was asked for and printed.
var errHelp = errors.New("help")

const topUsage = `dsh — a Go runtime for LLM agent sessions

Usage:
  dsh run [flags] PROMPT               send PROMPT to a session (new, or --session ID) and stream the answer
  dsh chat [flags]                     an interactive session: streaming answers, /steer /inject /cancel /fork /messages /quit
  dsh bench [--sessions N] [--json] ...  load test: concurrent sessions, synthetic model, real persistence
  dsh bench --cluster N ...            the same load on N cluster members on 127.0.0.1
  dsh bench --capacity ...             the most concurrent sessions one process holds at a model's pace
  dsh member --dir DIR [--peers ...]   run one cluster member sharing DIR until SIGINT/SIGTERM
  dsh serve [--addr A] [--dir DIR]     serve the sessions over HTTP (JSON API, live event streams)
  dsh log verify [--fixture] FILE...   check session logs; one summary line per file
  dsh log show [--fixture] FILE        print a readable transcript
  dsh log messages [--fixture] FILE    print the derived (model-visible) messages as JSON lines
  dsh log stats [--json] FILE          sizes, compression, turns, tokens and event counts
  dsh log events FILE                  the logical events as JSON lines (packed rows expanded)
  dsh log trace [--otlp URL] FILE      the session's spans as OTLP/JSON (or sent to an OTLP/HTTP endpoint)
  dsh log copy --from URL --to URL     copy sessions between stores (all, or --session ID...), each checked
  dsh log repair FILE                  cut a torn tail and close an open turn, in place
  dsh log fork --at SEQ --out OUT FILE write a new session seeded with FILE's events 0..SEQ
  dsh log replay [--fixture] FILE      re-run FILE through dsh's loop: "conformant" or the first divergence
  dsh sessions [--store URL] [--json]  list the sessions of a store (default: the data directory)

Stores: --store jsonl:DIR (a directory of JSONL logs; --dir DIR is the same)
or --store sqlite:PATH (one SQLite database), for run, chat, bench, sessions.
The log commands that read (verify, show, messages, stats, events, trace) take
--store URL --session ID in place of FILE.

Run 'dsh COMMAND --help' for a command's flags.
`

// run executes the command line and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	err := dispatch(args, stdout, stderr)
	var ue *usageError
	var le *persister.LockedError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "dsh: %v\nRun 'dsh --help' for usage.\n", ue)
		return exitUsage
	case errors.Is(err, errReported):
		return exitFailure
	case errors.As(err, &le):
		// Another process writes the session: what the user needs is who,
		// not the layers the refusal came through.
		// The holder's text comes from a file: shown visibly, like any error.
		fmt.Fprintf(stderr, "dsh: %s\n", visibleLine(strings.TrimPrefix(le.Error(), "persister: ")))
		return exitFailure
	default:
		// An error can quote a log or a provider: shown visibly, on one line.
		fmt.Fprintf(stderr, "dsh: %s\n", visibleLine(err.Error()))
		return exitFailure
	}
}

func dispatch(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return usagef("no command given")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, topUsage)
		return errHelp
	case "log":
		return runLog(args[1:], stdout, stderr)
	case "sessions":
		return sessionsCmd(args[1:], stdout, stderr)
	case "bench":
		return benchCmd(args[1:], stdout, stderr)
	case "run":
		return runCmd(args[1:], stdout, stderr)
	case "chat":
		return chatCmd(args[1:], os.Stdin, stdout, stderr)
	case "member":
		return memberCmd(args[1:], stdout, stderr)
	case "serve":
		return serveCmd(args[1:], stdout, stderr)
	default:
		return usagef("unknown command %q", args[0])
	}
}

// newFlagSet returns a flag set named "dsh <command>" that prints nothing
// itself: parseFlags reports.
func newFlagSet(command string) *flag.FlagSet {
	fs := flag.NewFlagSet("dsh "+command, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseFlags parses args with fs. --help prints usage and the flags on
// stdout and returns errHelp (exit 0); a bad flag is bad usage (exit 2),
// named after the command.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return errHelp
	}
	if err != nil {
		return usagef("%s: %v", strings.TrimPrefix(fs.Name(), "dsh "), err)
	}
	return nil
}
