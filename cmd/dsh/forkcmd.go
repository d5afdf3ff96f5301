package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/google/uuid"
)

// logFork writes a new log seeded with a prefix of FILE: a fork
// (docs/session-log.md#forking), as a file.
func logFork(args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("log fork")
	at := fs.Int64("at", session.LastEvent, "the last seq the fork inherits (inclusive; default: the last event)")
	out := fs.String("out", "", "the file to create (required; it must not exist, not even as a symlink; .zstd suffix for JSONL+zstd)")
	id := fs.String("id", "", "the new session's id (default: a fresh UUID)")
	fixture := fs.Bool("fixture", false, "substitute the reference snapshot placeholders before reading")
	if err := parseFlags(fs, args, "Usage: dsh log fork --at SEQ --out OUT [--id ID] FILE\n\nFlags:\n", stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 || strings.HasPrefix(fs.Arg(0), "-") {
		return usagef("log fork: want exactly one file (flags first)")
	}
	if *out == "" {
		return usagef("log fork: --out is required")
	}
	path := fs.Arg(0)
	// A first look, so a taken --out fails before the input is read; Lstat,
	// since a dangling symbolic link is taken too. CreateFile checks again
	// in the same step as it creates.
	if _, err := os.Lstat(*out); err == nil {
		return fmt.Errorf("%s: already exists (refusing to overwrite)", *out)
	}
	if err := persister.Superseded(path); err != nil {
		return err // names the newer file (docs/log-format.md, "Superseded sessions")
	}
	_, l, err := loadFile(path, *fixture)
	if err != nil {
		return err
	}
	child := *id
	if child == "" {
		child = uuid.NewString()
	}
	now := time.Now().UnixMilli()
	forked, err := l.Fork(session.SessionID(child), *at, now, now)
	if err != nil {
		var fe *session.ForkError
		if errors.As(err, &fe) {
			return fmt.Errorf("%s: cannot fork at %d: %s", path, *at, strings.TrimPrefix(fe.Error(), "session: fork "))
		}
		return describe(path, err)
	}
	opts := session.WriteOptions{Pack: session.PackChunks, Zstd: strings.HasSuffix(*out, ".zstd")}
	if err := session.CreateFile(*out, forked.Header(), forked.Events().Slice(), opts); err != nil {
		if errors.Is(err, session.ErrFileExists) {
			return fmt.Errorf("%s: already exists (refusing to overwrite)", *out)
		}
		return describe(*out, err)
	}
	fmt.Fprintf(stdout, "%s: session %s forked from %s at seq %d (%d inherited events + session/end-seed)\n",
		*out, child, l.ID(), forked.FirstLiveSeq()-1, forked.FirstLiveSeq())
	return nil
}
