package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
)

const copyUsage = `Usage: dsh log copy --from URL --to URL [--session ID]...

Copies sessions from one store to another: every session of --from, or
those named by --session. Stores are jsonl:DIR (or a bare DIR) and
sqlite:PATH; it is how a data directory moves to a database and back.
--from is opened read-only; --to is written with its writer locks.

Each copy is read back from --to and compared with the source: the same
header and the same logical events (a packed row counts as the events it
holds), or it is reported as failed. A session that already exists in
--to is never overwritten: holding the same events it is reported as
there already, otherwise as failed. A session JSONL cannot hold (an
event whose type is a packed row's tag: text-chunks, reasoning-chunks or
tool-call-chunks, which a SQLite store keeps for an ignorable event) is
refused for a jsonl: target, naming its seq; the others still copy.

One line per session: on stdout when it copied, on stderr when it did
not. Exit 0 when every session copied (or was there already), 1 when any
failed, 2 on bad usage.

Flags:
`

// logCopy is `dsh log copy`.
func logCopy(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("log copy")
	var from, to string
	var ids idList
	fs.StringVar(&from, "from", "", "the store to copy from (required): jsonl:DIR or sqlite:PATH")
	fs.StringVar(&to, "to", "", "the store to copy to (required): jsonl:DIR or sqlite:PATH")
	fs.Var(&ids, "session", "copy this session (repeatable; default: every session of --from)")
	if err := parseFlags(fs, args, copyUsage, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("log copy: unexpected argument %q", fs.Arg(0))
	}
	if from == "" || to == "" {
		return usagef("log copy: --from and --to are required")
	}
	if _, err := persister.ParseStoreURL(from); err != nil {
		return usagef("log copy: --from: %s", trimPkg(err))
	}
	toLoc, err := persister.ParseStoreURL(to)
	if err != nil {
		return usagef("log copy: --to: %s", trimPkg(err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	src, err := persister.OpenReader(from)
	if err != nil {
		return errors.New(trimPkg(err))
	}
	defer src.Close()
	if len(ids) == 0 {
		listed, err := src.List(ctx)
		if err != nil {
			return fmt.Errorf("%s: %s", from, trimPkg(err))
		}
		for _, l := range listed {
			ids = append(ids, string(l.Header.ID))
		}
		if len(ids) == 0 {
			// Said, rather than a silent success; and the target is not
			// created for nothing.
			fmt.Fprintf(stdout, "no sessions in %s: nothing copied\n", visibleLine(from))
			return nil
		}
	}
	if toLoc.Scheme == persister.SchemeJSONL {
		// A data directory is made if missing, as dsh run makes it.
		if err := os.MkdirAll(toLoc.Path, 0o700); err != nil {
			return err
		}
	}
	dst, err := persister.Open(to)
	if err != nil {
		return errors.New(trimPkg(err))
	}
	c := copier{from: from, to: to, toJSONL: toLoc.Scheme == persister.SchemeJSONL, src: src, dst: dst}
	failed := false
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			_ = dst.Close()
			return errors.New("log copy: interrupted")
		}
		line, err := c.copy(ctx, session.SessionID(id))
		if err != nil {
			fmt.Fprintf(stderr, "dsh: %s\n", visibleLine(err.Error()))
			failed = true
			continue
		}
		fmt.Fprintln(stdout, visibleLine(line))
	}
	if err := dst.Close(); err != nil {
		return fmt.Errorf("%s: %s", to, trimPkg(err))
	}
	if failed {
		return errReported
	}
	return nil
}

// copier copies sessions from src to dst.
type copier struct {
	from, to string
	toJSONL  bool
	src      persister.Reader
	dst      persister.Store
}

// copy copies one session and checks the copy, returning the report line
// of a success, or an error naming the session.
func (c copier) copy(ctx context.Context, id session.SessionID) (string, error) {
	h, events, err := inspectStored(ctx, c.src, c.from, id)
	if err != nil {
		return "", err
	}
	if c.toJSONL && session.CheckJSONL(events) != nil {
		// Refused before anything is written (the store would refuse the
		// append too, after creating the session's directory).
		for _, e := range events {
			if session.CheckJSONL([]session.Event{e}) != nil {
				return "", fmt.Errorf("session %s: seq %d is an event of type %q, which a JSONL log cannot hold (it is the tag of a packed chunk row): not copied to %s",
					id, e.Seq(), e.Type(), c.to)
			}
		}
	}
	err = c.dst.Create(h)
	if errors.Is(err, persister.ErrExists) {
		// Never overwritten; a copy made before (a rerun) is fine.
		if c.same(ctx, id, h, events) == nil {
			return fmt.Sprintf("session %s: already in %s with the same %s: left as it is", id, c.to, plural(int64(len(events)), "event")), nil
		}
		return "", fmt.Errorf("session %s: already in %s, holding other events: not overwritten", id, c.to)
	}
	if err != nil {
		return "", fmt.Errorf("session %s: %s", id, trimPkg(err))
	}
	err = c.dst.Append(ctx, id, events, persister.Sync)
	// Give the session's writer lock back at once: a store of many
	// sessions would otherwise hold one descriptor per session copied.
	if rerr := c.dst.Release(id); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return "", fmt.Errorf("session %s: writing to %s: %s", id, c.to, trimPkg(err))
	}
	if err := c.same(ctx, id, h, events); err != nil {
		return "", fmt.Errorf("session %s: the copy in %s %v", id, c.to, err)
	}
	return fmt.Sprintf("session %s: copied %s from %s to %s, checked", id, plural(int64(len(events)), "event"), c.from, c.to), nil
}

// same checks that dst holds id with header h and exactly events, read
// back from the store; the error says where it differs.
func (c copier) same(ctx context.Context, id session.SessionID, h session.Header, events []session.Event) error {
	gh, got, err := inspectStored(ctx, c.dst, c.to, id)
	if err != nil {
		return fmt.Errorf("does not load: %v", err)
	}
	if gh.JSON().String() != h.JSON().String() {
		return errors.New("has another header")
	}
	for i := range min(len(got), len(events)) {
		if !got[i].Equal(events[i]) {
			return fmt.Errorf("differs from the source at seq %d", events[i].Seq())
		}
	}
	if len(got) != len(events) {
		return fmt.Errorf("holds %d events, the source %d", len(got), len(events))
	}
	return nil
}
