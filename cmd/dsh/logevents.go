package main

import (
	"bufio"
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

const eventsSynopsis = `[--fixture] FILE
       dsh log events --store URL --session ID

Prints the session's logical events in seq order, one JSON object per line:
{"type","seq","time","data"}, plus "surfaceOp", "sourceEventSeqs" and
"ignorable" only when the event has them. A packed row of stream chunks
comes out as the events it holds, so two stores holding the same session
print the same lines, whatever their rows (for jq, and for comparing
stores). Control characters that JSON leaves raw (DEL, C1, bidi) are
printed as \uHHHH escapes, which decode to the same text.`

// logEvents is `dsh log events`.
func logEvents(args []string, stdout, _ io.Writer) error {
	a, err := logSourceFlags("events", eventsSynopsis, args, stdout, false, nil)
	if err != nil {
		return err
	}
	var events []session.Event
	if a.store != "" {
		events, err = storedEvents(a.store, session.SessionID(a.sessions[0]))
	} else {
		var f *session.File
		f, _, err = loadFile(a.files[0], a.fixture)
		if f != nil {
			events = f.Events
		}
	}
	if err != nil {
		return err
	}
	w := bufio.NewWriter(stdout)
	var line []byte
	for _, e := range events {
		line = session.AppendEvent(line[:0], e)
		if _, err := fmt.Fprintln(w, visibleJSON(string(line))); err != nil {
			return err
		}
	}
	return w.Flush()
}

// storedEvents returns a session's stored events, read from the store at
// url opened read-only, not validated as a log beyond what the store checks
// reading them: a store may hold ignorable events that a log refuses to
// append, and looking at those is what this command is for.
func storedEvents(url string, id session.SessionID) ([]session.Event, error) {
	r, err := persister.OpenReader(url)
	if err != nil {
		return nil, errors.New(trimPkg(err))
	}
	defer r.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, events, err := inspectStored(ctx, r, url, id)
	return events, err
}
