package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// Info describes a session.
type Info struct {
	Header   session.Header
	Resident bool
	// Running says the session is resident with a turn open.
	Running bool
	// Passivated says the session is not resident and was passivated by
	// this host (it is stored; the next call naming it resumes it).
	Passivated bool
}

// List names the sessions stored or resident, sorted by id. It resumes
// nothing: a stored session is read from the store's listing only.
func (h *Host) List(ctx context.Context) ([]Info, error) {
	stored, err := h.store.List(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[session.SessionID]Info{}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	for _, s := range stored {
		_, parked := h.parked[s.Header.ID]
		byID[s.Header.ID] = Info{Header: s.Header, Passivated: parked}
	}
	for id, e := range h.sessions {
		select {
		case <-e.ready:
			if e.err == nil {
				byID[id] = Info{Header: e.header, Resident: true, Running: e.open.Load()}
			}
		default:
		}
	}
	h.mu.Unlock()
	out := make([]Info, 0, len(byID))
	for _, i := range byID {
		out = append(out, i)
	}
	slices.SortFunc(out, func(a, b Info) int {
		switch {
		case a.Header.ID < b.Header.ID:
			return -1
		case a.Header.ID > b.Header.ID:
			return 1
		}
		return 0
	})
	return out, nil
}

// Peek describes the session and returns its events from seq from on,
// without resuming it: a resident session's from its actor, a stored
// one's as the store inspects it (an open turn closed in memory only;
// nothing is written and no lock is taken). A session neither resident
// nor stored is ErrNoSession. The slice is the caller's.
func (h *Host) Peek(ctx context.Context, id session.SessionID, from int64) (Info, []session.Event, error) {
	e, err := h.lockSettled(ctx, id)
	if err != nil {
		return Info{}, nil, err
	}
	if e != nil {
		e.inflight++
	}
	_, parked := h.parked[id]
	h.mu.Unlock()
	if e != nil {
		select {
		case <-e.ready:
		case <-ctx.Done():
			h.unuse(e)
			return Info{}, nil, context.Cause(ctx)
		}
		if e.err == nil {
			defer h.unuse(e)
			res, err := h.ask(ctx, e.session, session.QueryEvents{Ref: h.refs.Add(1), From: from})
			if err != nil {
				return Info{}, nil, err
			}
			return Info{Header: e.header, Resident: true, Running: e.open.Load()}, res.(session.EventsReply).Events.Slice(), nil
		}
	}
	st, err := h.store.Inspect(ctx, id)
	if err != nil {
		if errors.Is(err, persister.ErrNotFound) {
			err = fmt.Errorf("%w: %s", ErrNoSession, id)
		}
		return Info{}, nil, err
	}
	from = min(max(from, 0), int64(len(st.Events)))
	return Info{Header: st.Header, Passivated: parked}, slices.Clone(st.Events[from:]), nil
}

// Stats are a session's counters. Chunks, Turns and Usage cover the whole
// log: a resumed session folds the loaded events in, so turns from before
// a resume or a passivation count.
type Stats struct {
	Events  int64 // events in the log
	Chunks  int64 // assistant/chunk events in the log
	Turns   int64 // turn/end events in the log
	Durable int64 // last durable seq the persister reported (-1: none yet, or not resident)
	// Usage sums the usage of every assistant/message of the log.
	Usage messages.TokenUsage
	// Resident says the session's actors are running; a passivated
	// session's Stats are those it had when it passivated.
	Resident bool
	// WriteFailures counts the writes of the session's events that failed
	// (the persister's background retries included); WriteRetries the
	// background retries the persister made after a failure. Both cover
	// the session's life in this host, across passivations.
	WriteFailures int64
	WriteRetries  int64
	// ResidentBytes is a rough estimate of the memory the resident session
	// holds (0 when passivated): sessionOverheadBytes plus, per event of
	// the log, its JSON data length plus eventOverheadBytes. The session
	// actor's log and the agent's mirror share the immutable events, so
	// each event counts once. Compare their sum with the heap
	// (runtime.MemStats) for the real figure.
	ResidentBytes int64
}

// Stats returns a session's counters: a resident one's, or a passivated
// one's as it passivated. A session that is only stored (never resident
// in this host) is ErrNoSession: Resume it first.
func (h *Host) Stats(_ context.Context, id session.SessionID) (Stats, error) {
	e, err := h.resident(id)
	if err != nil {
		h.mu.Lock()
		p, ok := h.parked[id]
		h.mu.Unlock()
		if ok {
			return p.stats(), nil
		}
		return Stats{}, err
	}
	return e.stats(), nil
}
