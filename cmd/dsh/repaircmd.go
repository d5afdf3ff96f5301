package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
)

// logRepair repairs one log file in place and says what it did.
func logRepair(args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("log repair")
	if err := parseFlags(fs, args, "Usage: dsh log repair FILE\n\nTruncates a torn tail (keeping the complete records of a torn zstd frame) and\ncloses an open turn with crash-repair events. A corrupt file is never changed.\n", stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 || strings.HasPrefix(fs.Arg(0), "-") {
		return usagef("log repair: want exactly one file (flags first)")
	}
	path := fs.Arg(0)
	r, err := persister.RepairFile(path)
	var le *persister.LockedError
	if errors.As(err, &le) {
		return le // a live writer: main prints who
	}
	if err != nil {
		return describe(path, err)
	}
	if !r.Changed() {
		fmt.Fprintf(stdout, "%s: nothing to repair (%d events, balanced)\n", path, r.Events)
		return nil
	}
	var did []string
	if r.Torn != nil {
		s := fmt.Sprintf("cut a torn tail of %s at byte %d (%v)", sizeText(r.SizeBefore-r.Torn.Offset), r.Torn.Offset, r.Torn.Cause())
		if r.Recovered > 0 {
			s += fmt.Sprintf(", writing back the %d complete events of its frame", r.Recovered)
		}
		did = append(did, s)
	}
	if len(r.Closers) > 0 {
		last := r.Closers[len(r.Closers)-1].Payload().(session.TurnEnd)
		results := 0
		for _, c := range r.Closers {
			if c.Type() == session.TypeToolResult {
				results++
			}
		}
		s := fmt.Sprintf("closed turn %d as interrupted", last.Turn)
		if results > 0 {
			s += fmt.Sprintf(" (%s for unfinished tool calls)", plural(int64(results), "synthetic error result"))
		}
		did = append(did, s)
	}
	fmt.Fprintf(stdout, "%s: repaired: %s; now %d events, %s\n", path, strings.Join(did, "; "), r.Events, sizeText(r.SizeAfter))
	return nil
}

// defaultDataDir is $XDG_DATA_HOME/dsh, else ~/.local/share/dsh (docs/architecture.md#interfaces-for-people).
func defaultDataDir() (string, error) {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "dsh"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no data directory: %w (use --dir)", err)
	}
	return filepath.Join(home, ".local", "share", "dsh"), nil
}

type sessionRow struct {
	ID            string `json:"id"`
	CreatedAt     int64  `json:"createdAt"`
	Cwd           string `json:"cwd,omitempty"`
	ParentSession string `json:"parentSession,omitempty"`
	Revision      string `json:"revision"`
	// Superseded names the newer format's log a newer reference wrote
	// beside this one (docs/log-format.md, "Superseded sessions").
	Superseded string `json:"newerFormat,omitempty"`
}

// sessionsCmd lists the sessions of a store. It opens the store for
// reading only (persister.OpenReader): no writer lock, so it lists a store
// a running dsh writes.
func sessionsCmd(args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("sessions")
	var sf storeFlags
	sf.register(fs, "data directory (default $XDG_DATA_HOME/dsh, else ~/.local/share/dsh); --store jsonl:DIR")
	asJSON := fs.Bool("json", false, "print one JSON array instead of a table")
	if err := parseFlags(fs, args, "Usage: dsh sessions [--dir DIR | --store URL] [--json]\n\nFlags:\n", stdout); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("sessions: unexpected argument %q", fs.Arg(0))
	}
	loc, err := sf.location("sessions")
	if err != nil {
		return err
	}
	root := loc.Path
	if loc.Scheme == persister.SchemeJSONL {
		if st, err := os.Stat(root); err != nil || !st.IsDir() {
			return fmt.Errorf("%s: not a directory", root)
		}
	} else {
		root = loc.String()
	}
	store, err := persister.OpenReader(loc.String())
	if err != nil {
		return err // names the store and says what is wrong with it
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	listed, err := store.List(ctx)
	if err != nil {
		return err
	}
	rows := make([]sessionRow, 0, len(listed))
	for _, l := range listed {
		rows = append(rows, sessionRow{ID: string(l.Header.ID), CreatedAt: l.Header.CreatedAt, Cwd: l.Header.Cwd,
			ParentSession: l.Header.ParentSession, Revision: string(l.Revision), Superseded: l.Superseded})
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(stdout, "no sessions under %s\n", root)
		return nil
	}
	p := &printer{w: stdout}
	p.line(0, "%-38s  %-20s  %s", "SESSION", "CREATED", "CWD")
	for _, r := range rows {
		cwd := r.Cwd
		if r.ParentSession != "" {
			cwd += "  (fork of " + r.ParentSession + ")"
		}
		if r.Superseded != "" {
			cwd += "  (newer format: " + r.Superseded + ")"
		}
		p.line(0, "%-38s  %-20s  %s", r.ID, time.UnixMilli(r.CreatedAt).UTC().Format("2006-01-02 15:04:05"), cwd)
	}
	return p.err
}
