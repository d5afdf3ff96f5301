package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/dshgo/dsh/actors/agent/logreplay"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/internal/fixtures"
)

// logFlags parses the flags shared by the log subcommands. A flag after a
// positional argument is bad usage (flags come first).
func logFlags(name, synopsis string, args []string, stdout io.Writer) (fixture bool, files []string, err error) {
	fs := newFlagSet("log " + name)
	fs.BoolVar(&fixture, "fixture", false, "substitute the reference snapshot placeholders ({{sessionId}}, {{cwd}}, {{system}}, {{tools}}) before reading")
	if err := parseFlags(fs, args, fmt.Sprintf("Usage: dsh log %s %s\n\nFlags:\n", name, synopsis), stdout); err != nil {
		return false, nil, err
	}
	for _, a := range fs.Args() {
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			return false, nil, usagef("log %s: flag %s after a file name (flags come first)", name, a)
		}
	}
	return fixture, fs.Args(), nil
}

// loadFile reads a log file into a validated log. A torn tail is an error
// here: the file needs `dsh log repair` before it is a valid log.
func loadFile(path string, fixture bool) (*session.File, *session.Log, error) {
	var f *session.File
	var err error
	if fixture {
		var data []byte
		if data, err = logreplay.ReadFixture(path); err != nil {
			return nil, nil, describe(path, err)
		}
		f, err = session.ParseFile(fixtures.Substitute(data), path)
	} else {
		// Streamed: memory bounded by the log's events, whatever the file
		// holds (session's doc.go, "Reading a file: bounded memory").
		f, err = session.ReadFile(path)
	}
	if err == nil && f.Torn == nil {
		_, err = f.Log()
	}
	if err != nil && !fixture && fixtures.HasPlaceholders(filePrefix(path)) {
		return nil, nil, fmt.Errorf("%v (the file has reference snapshot placeholders: try --fixture)", describe(path, err))
	}
	if err != nil {
		return nil, nil, describe(path, err)
	}
	if f.Torn != nil {
		return f, nil, fmt.Errorf("%s: torn tail at byte %d (seq %d): %v; run 'dsh log repair %s'",
			path, f.Torn.Offset, f.Torn.NextSeq, f.Torn.Cause(), path)
	}
	l, err := f.Log()
	if err != nil {
		return f, nil, describe(path, err)
	}
	if err := session.CheckTrace(f.Events); err != nil {
		return f, nil, fmt.Errorf("%s: %v", path, err)
	}
	return f, l, nil
}

// placeholderPrefix is how much of a file filePrefix reads: the
// placeholders of a reference snapshot sit in its header and first
// events.
const placeholderPrefix = 1 << 20

// filePrefix returns up to the first placeholderPrefix bytes of the file
// at path (nothing when it cannot be read), for the hint that a file has
// reference snapshot placeholders.
func filePrefix(path string) []byte {
	fh, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer fh.Close()
	data, _ := io.ReadAll(io.LimitReader(fh, placeholderPrefix))
	return data
}

// describe turns a read or validation error into one line naming the file
// once (the path first), the seq and the rule, without the package
// prefixes of the layers below.
func describe(path string, err error) error {
	var (
		pe *os.PathError
		ce *session.CorruptError
		fe *session.FileError
		ee *session.EventError
		ue *session.UnsupportedTypeError
	)
	switch {
	case errors.As(err, &ce):
		return errors.New(strings.TrimPrefix(ce.Error(), "session: "))
	case errors.As(err, &fe):
		return errors.New(strings.TrimPrefix(fe.Error(), "session: "))
	case errors.As(err, &pe):
		return fmt.Errorf("%s: %v", pe.Path, pe.Err)
	case errors.As(err, &ee):
		return fmt.Errorf("%s: seq %d (%s): %v", path, ee.Seq, ee.Type, ee.Err)
	case errors.As(err, &ue):
		return fmt.Errorf("%s: seq %d: unknown event type %q (not marked ignorable)", path, ue.Seq, ue.Type)
	}
	msg := strings.TrimPrefix(err.Error(), "session: ")
	if strings.HasPrefix(msg, path+": ") {
		return errors.New(msg)
	}
	return fmt.Errorf("%s: %s", path, msg)
}

func logVerify(args []string, stdout, stderr io.Writer) error {
	a, err := logSourceFlags("verify", "[--fixture] FILE...\n       dsh log verify --store URL --session ID...", args, stdout, true, nil)
	if err != nil {
		return err
	}
	failed := false
	err = forEachLog(a, func(name string, f *session.File, l *session.Log, err error) error {
		if err != nil {
			fmt.Fprintf(stderr, "dsh: %s\n", visibleLine(err.Error()))
			failed = true
			return nil
		}
		note := ""
		if turn, _, open := l.OpenTurn(); open {
			note = fmt.Sprintf("; turn %d is open (its end was never recorded)", turn)
		}
		var sup *persister.SupersededError
		if err := persister.Superseded(name); errors.As(err, &sup) {
			note += fmt.Sprintf("; superseded by %s (a newer reference migrated this session to format version %d and writes only there: this file is stale, and dsh will not open the session)",
				sup.Newer, sup.Version)
		}
		if f.Upgraded > 0 {
			// docs/log-format.md, "Older shapes": upgraded on read only.
			note += fmt.Sprintf("; %s upgraded from an older shape on read (the file is unchanged)",
				plural(int64(f.Upgraded), "event"))
		}
		fmt.Fprintf(stdout, "%s: ok: %d events, %s, %s%s\n", visibleLine(name), l.Len(),
			plural(l.Turns(), "turn"), plural(int64(l.DeriveMessages().Len()), "derived message"), note)
		return nil
	})
	if err != nil {
		return err
	}
	if failed {
		return errReported
	}
	return nil
}

// oneLog loads the one log a names.
func oneLog(a logArgs) (*session.File, *session.Log, error) {
	var f *session.File
	var l *session.Log
	err := forEachLog(a, func(_ string, lf *session.File, ll *session.Log, err error) error {
		f, l = lf, ll
		return err
	})
	return f, l, err
}

func plural(n int64, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func statsFlags(args []string, stdout io.Writer) (a logArgs, asJSON bool, err error) {
	a, err = logSourceFlags("stats", "[--fixture] [--json] FILE\n       dsh log stats [--json] --store URL --session ID", args, stdout, false,
		func(fs *flag.FlagSet) { fs.BoolVar(&asJSON, "json", false, "print one JSON object instead of text") })
	return a, asJSON, err
}

func oneFile(name string, args []string, stdout io.Writer) (bool, string, error) {
	fixture, files, err := logFlags(name, "[--fixture] FILE", args, stdout)
	if err != nil {
		return false, "", err
	}
	if len(files) != 1 {
		return false, "", usagef("log %s: want exactly one file, got %d", name, len(files))
	}
	return fixture, files[0], nil
}

func logMessages(args []string, stdout, _ io.Writer) error {
	a, err := logSourceFlags("messages", "[--fixture] FILE\n       dsh log messages --store URL --session ID", args, stdout, false, nil)
	if err != nil {
		return err
	}
	_, l, err := oneLog(a)
	if err != nil {
		return err
	}
	for _, m := range l.DeriveMessages().All() {
		if _, err := fmt.Fprintln(stdout, visibleJSON(m.JSON().String())); err != nil {
			return err
		}
	}
	return nil
}

// showSynopsis is log show's usage line and the note on how it prints the
// log's text.
const showSynopsis = `[--fixture] FILE
       dsh log show --store URL --session ID

Prints FILE as a transcript for people. Control characters in the log's
text are shown, not sent to the terminal: C0 controls and DEL as \xHH (ESC
as \x1b, a carriage return as \x0d, a newline inside a one-line field as
\x0a), bytes that are not UTF-8 as \xHH, and C1 controls, bidi controls
and line separators as \uHHHH (CSI as \u009b). Tabs are kept.`

func logShow(args []string, stdout, _ io.Writer) error {
	a, err := logSourceFlags("show", showSynopsis, args, stdout, false, nil)
	if err != nil {
		return err
	}
	_, l, err := oneLog(a)
	if err != nil {
		return err
	}
	return writeTranscript(stdout, l)
}
