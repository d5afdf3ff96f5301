package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// command is one entry of dsh's command table: a command (run, bench), a
// group of subcommands (log), or a subcommand (log verify). The table is
// the one source of the top-level help, of dispatch and of the shell
// completion scripts.
type command struct {
	name string
	// rows are the command's lines in the top-level help: the synopsis
	// after "dsh NAME" and what it does.
	rows []usageRow
	// run runs the command with its arguments (a leaf); nil for a group.
	run func(args []string, stdout, stderr io.Writer) error
	// subs are a group's subcommands.
	subs []*command
	// note ends a group's help.
	note string
	// words are what the completion scripts offer as the command's
	// arguments (completion: the shells).
	words []string
}

type usageRow struct{ args, summary string }

// commands returns dsh's command table, in the order the help lists it.
func commands() []*command {
	chat := func(args []string, stdout, stderr io.Writer) error { return chatCmd(args, os.Stdin, stdout, stderr) }
	return []*command{
		{name: "run", run: runCmd, rows: []usageRow{{"[flags] PROMPT", "send PROMPT to a session (new, or --session ID) and stream the answer"}}},
		{name: "chat", run: chat, rows: []usageRow{{"[flags]", "an interactive session: streaming answers, /steer /inject /cancel /fork /messages /quit"}}},
		{name: "bench", run: benchCmd, rows: []usageRow{
			{"[--sessions N] [--json] ...", "load test: concurrent sessions, synthetic model, real persistence"},
			{"--cluster N ...", "the same load on N cluster members on 127.0.0.1"},
			{"--capacity ...", "the most concurrent sessions one process holds at a model's pace"}}},
		{name: "member", run: memberCmd, rows: []usageRow{{"--dir DIR [--peers ...]", "run one cluster member sharing DIR until SIGINT/SIGTERM"}}},
		{name: "serve", run: serveCmd, rows: []usageRow{{"[--addr A] [--dir DIR]", "serve the sessions over HTTP (JSON API, live event streams)"}}},
		{name: "log", subs: logCommands(), note: logNote},
		{name: "sessions", run: sessionsCmd, rows: []usageRow{{"[--store URL] [--json]", "list the sessions of a store (default: the data directory)"}}},
		{name: "help", run: helpCmd, rows: []usageRow{{"[COMMAND [SUBCOMMAND]]", "print the help of dsh, or of a command"}}},
		{name: "version", run: versionCmd, rows: []usageRow{{"", "print dsh's version and VCS revision (also dsh --version)"}}},
		{name: "completion", run: completionCmd, words: completionShells, rows: []usageRow{{strings.Join(completionShells, "|"), "print a shell completion script"}}},
	}
}

// logCommands are the subcommands of dsh log.
func logCommands() []*command {
	return []*command{
		{name: "verify", run: logVerify, rows: []usageRow{{"[--fixture] FILE...", "check session logs; one summary line per file"}}},
		{name: "show", run: logShow, rows: []usageRow{{"[--fixture] FILE", "print a readable transcript"}}},
		{name: "messages", run: logMessages, rows: []usageRow{{"[--fixture] FILE", "print the derived (model-visible) messages as JSON lines"}}},
		{name: "stats", run: logStatsCmd, rows: []usageRow{{"[--json] FILE", "sizes, compression, turns, tokens and event counts"}}},
		{name: "events", run: logEvents, rows: []usageRow{{"FILE", "the logical events as JSON lines (packed rows expanded)"}}},
		{name: "trace", run: logTrace, rows: []usageRow{{"[--otlp URL] FILE", "the session's spans as OTLP/JSON (or sent to an OTLP/HTTP endpoint)"}}},
		{name: "copy", run: logCopy, rows: []usageRow{{"--from URL --to URL", "copy sessions between stores (all, or --session ID...), each checked"}}},
		{name: "repair", run: logRepair, rows: []usageRow{{"FILE", "cut a torn tail and close an open turn, in place"}}},
		{name: "fork", run: logFork, rows: []usageRow{{"--at SEQ --out OUT FILE", "write a new session seeded with FILE's events 0..SEQ"}}},
		{name: "replay", run: logReplay, rows: []usageRow{{"[--fixture] FILE", `re-run FILE through dsh's loop: "conformant" or the first divergence`}}},
	}
}

const logNote = `The log commands that read (verify, show, messages, stats, events, trace)
take --store URL --session ID in place of FILE.
`

const storesNote = `Stores: --store jsonl:DIR (a directory of JSONL logs; --dir DIR is the same)
or --store sqlite:PATH (one SQLite database), for run, chat, bench, sessions.
`

const colorNote = `On a terminal, the notices on stderr are dimmed; NO_COLOR (set and not
empty) turns that off.
`

// topUsage is dsh's help.
func topUsage() string {
	var b strings.Builder
	b.WriteString("dsh — a Go runtime for LLM agent sessions\n\nUsage:\n")
	writeRows(&b, "dsh", commands())
	b.WriteString("\n" + storesNote + logNote + envHelp + "\n" + colorNote)
	b.WriteString("\nRun 'dsh help COMMAND' (or 'dsh COMMAND --help') for a command's flags.\n")
	return b.String()
}

// groupUsage is the help of a group of subcommands (dsh log).
func groupUsage(path string, c *command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s SUBCOMMAND [flags] ARGS\n\nSubcommands:\n", path)
	writeRows(&b, path, c.subs)
	if c.note != "" {
		b.WriteString("\n" + c.note)
	}
	fmt.Fprintf(&b, "\nRun 'dsh help %s SUBCOMMAND' for a subcommand's flags.\n", strings.TrimPrefix(path, "dsh "))
	return b.String()
}

// writeRows writes the usage rows of cs (and of their subcommands) in two
// aligned columns.
func writeRows(b *strings.Builder, path string, cs []*command) {
	type line struct{ synopsis, summary string }
	var lines []line
	var walk func(path string, cs []*command)
	walk = func(path string, cs []*command) {
		for _, c := range cs {
			for _, r := range c.rows {
				lines = append(lines, line{strings.TrimSpace(path + " " + c.name + " " + r.args), r.summary})
			}
			walk(path+" "+c.name, c.subs)
		}
	}
	walk(path, cs)
	width := 0
	for _, l := range lines {
		width = max(width, len(l.synopsis))
	}
	for _, l := range lines {
		fmt.Fprintf(b, "  %-*s  %s\n", width, l.synopsis, l.summary)
	}
}

// lookup finds the command args name in cs, descending into groups. It
// returns the command, its path ("dsh log verify") and the arguments
// after its name.
func lookup(cs []*command, args []string) (*command, string, []string, error) {
	path := "dsh"
	var c *command
	for len(args) > 0 {
		var next *command
		for _, x := range cs {
			if x.name == args[0] {
				next = x
			}
		}
		if next == nil {
			if c == nil {
				return nil, path, args, usagef("unknown command %q", args[0])
			}
			return nil, path, args, usagef("%s: unknown subcommand %q", strings.TrimPrefix(path, "dsh "), args[0])
		}
		c, path, args = next, path+" "+next.name, args[1:]
		if c.run != nil {
			return c, path, args, nil
		}
		cs = c.subs
		if len(args) == 0 || isHelpFlag(args[0]) {
			return c, path, args, nil
		}
	}
	return c, path, args, nil
}

func isHelpFlag(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

// subNames lists a group's subcommands.
func subNames(c *command) string {
	var names []string
	for _, s := range c.subs {
		names = append(names, s.name)
	}
	return strings.Join(names, ", ")
}

func dispatch(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage())
		return usagef("no command given")
	}
	switch {
	case isHelpFlag(args[0]):
		fmt.Fprint(stdout, topUsage())
		return errHelp
	case args[0] == "--version" || args[0] == "-version":
		return versionCmd(args[1:], stdout, stderr)
	}
	c, path, rest, err := lookup(commands(), args)
	if err != nil {
		return err
	}
	if c.run != nil {
		return c.run(rest, stdout, stderr)
	}
	if len(rest) == 0 {
		return usagef("%s: missing subcommand (%s)", strings.TrimPrefix(path, "dsh "), subNames(c))
	}
	fmt.Fprint(stdout, groupUsage(path, c))
	return errHelp
}

const helpUsage = `Usage: dsh help [COMMAND [SUBCOMMAND]]

Prints the help of dsh, or of a command (the same as 'dsh COMMAND --help').
`

// helpCmd is `dsh help [COMMAND [SUBCOMMAND]]`.
func helpCmd(args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("help")
	if err := parseFlags(fs, args, helpUsage, stdout); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stdout, topUsage())
		return nil
	}
	c, path, rest, err := lookup(commands(), fs.Args())
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return usagef("help: %s has no subcommand %q", strings.TrimPrefix(path, "dsh "), rest[0])
	}
	if c.run == nil {
		fmt.Fprint(stdout, groupUsage(path, c))
		return nil
	}
	return c.run([]string{"--help"}, stdout, io.Discard)
}
