package main

import (
	"os"

	"golang.org/x/term"
)

// isTerminal reports whether f (stdin, stdout or stderr as the command
// got them) is a terminal: an *os.File whose descriptor is a tty. A
// buffer, a pipe or /dev/null is not.
func isTerminal(f any) bool {
	fd, ok := f.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(fd.Fd()))
}

// dimmed reports whether dsh dims its notices on w: w is a terminal and
// NO_COLOR is unset or empty (no-color.org). Dimming is the only colour
// dsh prints.
func dimmed(w any) bool { return colorAllowed(isTerminal(w), os.Getenv("NO_COLOR")) }

// colorAllowed is dimmed's rule: colour only on a terminal, and never when
// NO_COLOR holds anything.
func colorAllowed(terminal bool, noColor string) bool { return terminal && noColor == "" }
