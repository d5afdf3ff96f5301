// Command dsh is the command-line face of the dsh runtime: run and chat
// with sessions, serve them over HTTP, run cluster members and load tests,
// and inspect, verify, repair and copy session logs. 'dsh help' lists the
// commands (commands.go holds the table it is printed from).
//
// Conventions (docs/architecture.md#interfaces-for-people): flags come
// before positional arguments and are spelled --name; every flag can also
// be set as DSH_NAME in the environment, the command line winning; results
// go to stdout, diagnostics to stderr; 'dsh help CMD' and 'dsh CMD --help'
// print a command's help and exit 0; exit 0 on success, 1 on failure (an
// invalid log), 2 on bad usage; an error is one clear line, never a stack
// trace.
package main

import (
	"errors"
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
