package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
)

func (h *Host) resident(id session.SessionID) (*entry, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	e, ok := h.sessions[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s (not resident)", ErrNoSession, id)
	}
	select {
	case <-e.ready:
		if e.err != nil {
			return nil, e.err
		}
		return e, nil
	default:
		return nil, fmt.Errorf("%w: %s (starting)", ErrNoSession, id)
	}
}

// CreateOptions are the options of Create.
type CreateOptions struct {
	// ID is the session id; "" mints a UUID.
	ID session.SessionID
	// Cwd is the session's working directory (absolute, or "").
	Cwd string
}

// Create starts a new, empty session.
func (h *Host) Create(ctx context.Context, opts CreateOptions) (session.SessionID, error) {
	id := opts.ID
	if id == "" {
		id = session.SessionID(uuid.NewString())
	}
	hdr := session.Header{ID: id, CreatedAt: h.cfg.Clock(), Cwd: opts.Cwd}
	if err := hdr.Validate(); err != nil {
		return "", err
	}
	e, fresh, err := h.reserve(ctx, id)
	if err != nil {
		return "", err
	}
	if !fresh {
		h.unuse(e)
		return "", fmt.Errorf("%w: %s", ErrExists, id)
	}
	l, err := session.New(hdr)
	if err != nil {
		h.release(e, err)
		return "", err
	}
	if err := h.start(ctx, e, l, 0); err != nil {
		return "", err
	}
	h.unuse(e)
	return id, nil
}

// Resume makes a stored session resident: it is loaded from the store
// (which commits crash repair: a torn tail is cut, an open turn closed),
// seeded (a session/end-seed is appended) and tracked from the loaded
// length. Resuming a resident session is a no-op. Every other method
// resumes a stored session on demand, so calling Resume is optional.
func (h *Host) Resume(ctx context.Context, id session.SessionID) error {
	e, err := h.get(ctx, id, true)
	if err != nil {
		return err
	}
	h.unuse(e)
	return nil
}

// live returns the resident entry of id, resuming it from the store when
// needed (unless Config.ManualResume). On success the entry is in use (it
// cannot passivate) until the caller calls h.unuse(e).
func (h *Host) live(ctx context.Context, id session.SessionID) (*entry, error) {
	return h.get(ctx, id, !h.cfg.ManualResume)
}

// get is live, loading a stored session only when load is set.
func (h *Host) get(ctx context.Context, id session.SessionID, load bool) (*entry, error) {
	e, fresh, err := h.reserve(ctx, id)
	if err != nil {
		return nil, err
	}
	if !fresh {
		select {
		case <-e.ready:
		case <-ctx.Done():
			h.unuse(e)
			return nil, context.Cause(ctx)
		}
		if e.err != nil {
			return nil, e.err
		}
		return e, nil
	}
	if !load {
		err := fmt.Errorf("%w: %s (not resident)", ErrNoSession, id)
		h.release(e, err)
		return nil, err
	}
	st, err := h.store.Load(ctx, id)
	if err != nil {
		if errors.Is(err, persister.ErrNotFound) {
			err = fmt.Errorf("%w: %s", ErrNoSession, id)
		}
		if le := (*persister.LockedError)(nil); errors.As(err, &le) {
			h.logger.Warn("session in use by another writer", "session", string(id), "holder", le.Holder, "err", err)
		}
		h.release(e, err)
		return nil, err
	}
	n := int64(len(st.Events))
	// The loaded events are the caller's (persister.Stored): the log takes
	// them over rather than copying them into pages of its own.
	l, err := session.AdoptSeeded(st.Header, st.Events, h.cfg.Clock())
	if err != nil {
		h.release(e, err)
		return nil, err
	}
	if err := h.start(ctx, e, l, n); err != nil {
		return nil, err
	}
	h.logger.Debug("session resumed", "session", string(id), "events", n)
	return e, nil
}

// reserve returns the entry of id, in use, creating a starting one (fresh)
// when there is none. It waits for a passivation of id in progress to
// finish.
func (h *Host) reserve(ctx context.Context, id session.SessionID) (e *entry, fresh bool, err error) {
	e, err = h.lockSettled(ctx, id)
	if err != nil {
		return nil, false, err
	}
	defer h.mu.Unlock()
	if e != nil {
		e.inflight++
		return e, false, nil
	}
	e = &entry{id: id, ready: make(chan struct{}), inflight: 1}
	e.durable.Store(-1)
	e.lastUse.Store(int64(time.Since(h.epoch)))
	h.sessions[id] = e
	return e, true, nil
}

// lockSettled locks h.mu and returns id's entry (nil when there is none)
// once no passivation of it is in progress. On error h.mu is not held.
func (h *Host) lockSettled(ctx context.Context, id session.SessionID) (*entry, error) {
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return nil, ErrClosed
		}
		e := h.sessions[id]
		if e == nil || e.passivating == nil {
			return e, nil
		}
		wait := e.passivating
		h.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// unuse ends a use of e begun by live or reserve.
func (h *Host) unuse(e *entry) {
	e.lastUse.Store(int64(time.Since(h.epoch)))
	h.mu.Lock()
	e.inflight--
	h.mu.Unlock()
}

// release forgets a starting entry that failed, and gives up the store's
// hold on the session (the writer lock a Load took, if any).
func (h *Host) release(e *entry, err error) {
	_ = h.store.Release(e.id)
	h.mu.Lock()
	if h.sessions[e.id] == e {
		delete(h.sessions, e.id)
	}
	h.mu.Unlock()
	e.err = err
	close(e.ready)
}

// start spawns the session actor over l and the agent, and tracks the
// session from seq from.
func (h *Host) start(ctx context.Context, e *entry, l *session.Log, from int64) error {
	e.header = l.Header()
	e.events.Store(l.Len())
	for ev := range l.Events().All() {
		e.fold(h, ev, false)
	}
	_, _, open := l.OpenTurn()
	e.open.Store(open)
	obs := append([]session.Observer{e.observe(h)}, h.cfg.SessionObservers...)
	for _, o := range h.cfg.Observers {
		if f := o.Open(e.id, l.Events()); f != nil {
			obs = append(obs, f)
		}
	}
	scfg := session.Config{Log: l, Clock: h.cfg.Clock, Observers: obs}
	if f := h.cfg.OnObserverFailure; f != nil {
		id := e.id
		scfg.OnObserverFailure = func(o session.ObserverFailure) { f(id, o) }
	}
	sp, err := session.Props(scfg)
	if err != nil {
		h.release(e, err)
		return err
	}
	prefix := h.name + "/" + persister.EncodeSegment(string(e.id))
	spid, err := h.sys.Root.SpawnNamed(sp.Configure(h.actorOpts...), prefix+"/session")
	if err != nil {
		h.release(e, err)
		return err
	}
	ap, err := h.agents.Props(spid)
	if err != nil {
		_ = h.sys.Root.PoisonFuture(spid).Wait()
		h.release(e, err)
		return err
	}
	apid, err := h.sys.Root.SpawnNamed(ap.Configure(h.actorOpts...), prefix+"/agent")
	if err != nil {
		_ = h.sys.Root.PoisonFuture(spid).Wait()
		h.release(e, err)
		return err
	}
	e.session, e.agent = spid, apid
	res, err := h.ask(ctx, h.persister, persister.Track{Ref: h.refs.Add(1), Header: e.header, Session: spid, From: from, Owner: h.notices})
	if err == nil {
		if tf, ok := res.(persister.TrackFailed); ok {
			err = tf.Err
			if errors.Is(err, persister.ErrExists) {
				err = fmt.Errorf("%w: %s (stored)", ErrExists, e.id)
			}
		}
	}
	if err != nil {
		_ = h.sys.Root.PoisonFuture(apid).Wait()
		_ = h.sys.Root.PoisonFuture(spid).Wait()
		h.release(e, err)
		return err
	}
	h.mu.Lock()
	if p, ok := h.parked[e.id]; ok {
		st := p.stats()
		e.writeFailures.Store(st.WriteFailures)
		e.writeRetries.Store(st.WriteRetries)
	}
	delete(h.parked, e.id)
	h.mu.Unlock()
	close(e.ready)
	h.armIdle(e)
	return nil
}
