package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
)

// The log subcommands that read a log (verify, show, messages, stats,
// events) take it from a FILE, or from a store: --store URL --session ID.
// A store is opened for reading only (persister.OpenReader): no writer
// lock is taken and nothing is repaired, so a session a running dsh writes
// can be looked at.

// idList is a repeatable --session flag.
type idList []string

func (l *idList) String() string { return strings.Join(*l, ",") }

func (l *idList) Set(s string) error {
	if s == "" {
		return errors.New("empty session id")
	}
	*l = append(*l, s)
	return nil
}

// logArgs name the logs a log subcommand reads: files, or sessions of a
// store.
type logArgs struct {
	fixture  bool
	files    []string
	store    string
	sessions idList
}

// count is how many logs the arguments name.
func (a logArgs) count() int { return len(a.files) + len(a.sessions) }

// logSourceFlags parses a reading log subcommand's arguments: --fixture
// and FILE..., or --store URL and --session ID (repeatable, when many is
// set). more registers the subcommand's own flags. Flags come first, and
// files and a store do not mix.
func logSourceFlags(name, synopsis string, args []string, stdout io.Writer, many bool, more func(*flag.FlagSet)) (logArgs, error) {
	var a logArgs
	fs := newFlagSet("log " + name)
	fs.BoolVar(&a.fixture, "fixture", false, "substitute the reference snapshot placeholders ({{sessionId}}, {{cwd}}, {{system}}, {{tools}}) before reading")
	fs.StringVar(&a.store, "store", "", "read from this store instead of a file: jsonl:DIR or sqlite:PATH (read-only, no writer lock); with --session")
	fs.Var(&a.sessions, "session", "with --store: the session to read")
	if more != nil {
		more(fs)
	}
	if err := parseCommandLine(fs, args, fmt.Sprintf("Usage: dsh log %s %s\n\nFlags:\n", name, synopsis), stdout); err != nil {
		return a, err
	}
	// Files on the command line: the store and session in the
	// environment (for dsh run and the like) are not for them.
	var skip map[string]bool
	if fs.NArg() > 0 {
		skip = map[string]bool{"store": true, "session": true}
	}
	if err := flagsFromEnv(fs, os.LookupEnv, skip); err != nil {
		return a, err
	}
	for _, f := range fs.Args() {
		if strings.HasPrefix(f, "-") && len(f) > 1 {
			return a, usagef("log %s: flag %s after a file name (flags come first)", name, f)
		}
	}
	a.files = fs.Args()
	switch {
	case a.store != "" && len(a.files) > 0:
		return a, usagef("log %s: a FILE or --store URL --session ID, not both", name)
	case a.store != "" && len(a.sessions) == 0:
		return a, usagef("log %s: --store needs --session ID", name)
	case a.store == "" && len(a.sessions) > 0:
		return a, usagef("log %s: --session goes with --store URL", name)
	case a.store != "" && a.fixture:
		return a, usagef("log %s: --fixture is for files", name)
	case a.count() == 0:
		return a, usagef("log %s: no file given (or --store URL --session ID)", name)
	case !many && a.count() != 1:
		return a, usagef("log %s: want exactly one file (or one --session), got %d", name, a.count())
	}
	if a.store != "" {
		if _, err := persister.ParseStoreURL(a.store); err != nil {
			return a, usagef("log %s: --store: %s", name, trimPkg(err))
		}
	}
	return a, nil
}

// forEachLog loads each log a names, in order, and calls fn with its name
// (the file, or "URL session ID"), the file (for a store: its header and
// stored events), the validated log, or the error that stopped it. An
// error opening the store, or one fn returns, ends the walk.
func forEachLog(a logArgs, fn func(name string, f *session.File, l *session.Log, err error) error) error {
	if a.store == "" {
		for _, path := range a.files {
			f, l, err := loadFile(path, a.fixture)
			if err := fn(path, f, l, err); err != nil {
				return err
			}
		}
		return nil
	}
	r, err := persister.OpenReader(a.store)
	if err != nil {
		return errors.New(trimPkg(err))
	}
	defer r.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, id := range a.sessions {
		name := a.store + " session " + id
		f, l, err := loadStored(ctx, r, a.store, session.SessionID(id))
		if err := fn(name, f, l, err); err != nil {
			return err
		}
	}
	return nil
}

// loadStored reads a session of a store into a validated log, as loadFile
// reads a file. The File it returns has the header and the stored events;
// its Path names the session.
func loadStored(ctx context.Context, r persister.Reader, url string, id session.SessionID) (*session.File, *session.Log, error) {
	name := url + " session " + string(id)
	h, events, err := inspectStored(ctx, r, url, id)
	if err != nil {
		return nil, nil, err
	}
	f := &session.File{Path: name, Header: h, Events: events}
	l, err := f.Log()
	if err != nil {
		return f, nil, describe(name, err)
	}
	if err := session.CheckTrace(f.Events); err != nil {
		return f, nil, fmt.Errorf("%s: %v", name, err)
	}
	return f, l, nil
}

// inspectStored returns a session's header and stored events: as stored
// (Inspect, without the closers it adds in memory to an open turn), not
// validated as a log beyond what the store checks reading them. A torn
// tail is an error, as in a file.
func inspectStored(ctx context.Context, r persister.Reader, url string, id session.SessionID) (session.Header, []session.Event, error) {
	name := url + " session " + string(id)
	st, err := r.Inspect(ctx, id)
	if errors.Is(err, persister.ErrNotFound) {
		return session.Header{}, nil, fmt.Errorf("%s: no such session", name)
	}
	if err != nil {
		return session.Header{}, nil, describe(name, err)
	}
	if st.Torn != nil {
		return session.Header{}, nil, fmt.Errorf("%s: torn tail (seq %d): %v; the next writer to load the session repairs it",
			name, st.Torn.NextSeq, st.Torn.Cause())
	}
	return st.Header, st.Events[:len(st.Events)-len(st.Closers)], nil
}
