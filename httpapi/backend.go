package httpapi

import (
	"context"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// Mode says how a message enters a session.
type Mode string

// The send modes.
const (
	ModeFollowup Mode = "followup" // its own later turn
	ModeSteer    Mode = "steer"    // the running turn's next step, or a new turn when idle
	ModeInject   Mode = "inject"   // staged; rides with the next waking input
)

// Backend is where the sessions live: a supervisor.Host (HostBackend).
// Its methods return the host's errors (supervisor.ErrNoSession, ...),
// which the server maps to the API's error codes.
type Backend interface {
	Create(ctx context.Context, opts supervisor.CreateOptions) (session.SessionID, error)
	SetSystem(ctx context.Context, id session.SessionID, prompt string) error
	Send(ctx context.Context, id session.SessionID, mode Mode, msg messages.Message) error
	Cancel(ctx context.Context, id session.SessionID, cause session.CancelCause) error
	// Flush makes everything the session logged durable.
	Flush(ctx context.Context, id session.SessionID) (int64, error)
	Messages(ctx context.Context, id session.SessionID) ([]messages.Message, error)
	Fork(ctx context.Context, id session.SessionID, at int64) (session.SessionID, error)
	// List names every session, sorted by id, resuming none.
	List(ctx context.Context) ([]supervisor.Info, error)
	// Peek describes the session and returns its events from seq from
	// on, all of them committed so far, resuming nothing a host has
	// stored (a cluster's session may be activated). The slice is owned
	// by the caller.
	Peek(ctx context.Context, id session.SessionID, from int64) (supervisor.Info, []session.Event, error)
	// Inspect is Peek for listing: it never resumes or activates a
	// session, and may lag the live log by the write-behind window where
	// it reads the store. The slice is owned by the caller.
	Inspect(ctx context.Context, id session.SessionID) (supervisor.Info, []session.Event, error)
	// Subscribe delivers the session's events from seq from on: the past,
	// then live ones.
	Subscribe(ctx context.Context, id session.SessionID, from int64) (Stream, error)
}

// Stream is an open subscription to a session's events.
type Stream interface {
	// Events carries the events; it is closed when the stream ends.
	Events() <-chan session.Event
	// Err says why it ended (supervisor.ErrSlowSubscriber for a consumer
	// that fell behind); read it after Events is closed.
	Err() error
	Close()
}

// HostBackend serves the sessions of a supervisor.Host.
type HostBackend struct{ Host *supervisor.Host }

var _ Backend = HostBackend{}

// Create implements Backend.
func (b HostBackend) Create(ctx context.Context, opts supervisor.CreateOptions) (session.SessionID, error) {
	return b.Host.Create(ctx, opts)
}

// SetSystem implements Backend.
func (b HostBackend) SetSystem(ctx context.Context, id session.SessionID, prompt string) error {
	return b.Host.SetSystem(ctx, id, prompt)
}

// Send implements Backend.
func (b HostBackend) Send(ctx context.Context, id session.SessionID, mode Mode, msg messages.Message) error {
	switch mode {
	case ModeSteer:
		return b.Host.Steer(ctx, id, msg)
	case ModeInject:
		return b.Host.Inject(ctx, id, msg)
	default:
		return b.Host.Followup(ctx, id, msg)
	}
}

// Cancel implements Backend.
func (b HostBackend) Cancel(ctx context.Context, id session.SessionID, cause session.CancelCause) error {
	return b.Host.Cancel(ctx, id, cause)
}

// Flush implements Backend.
func (b HostBackend) Flush(ctx context.Context, id session.SessionID) (int64, error) {
	return b.Host.Flush(ctx, id)
}

// Messages implements Backend.
func (b HostBackend) Messages(ctx context.Context, id session.SessionID) ([]messages.Message, error) {
	ms, err := b.Host.Messages(ctx, id)
	return ms.Slice(), err
}

// Fork implements Backend.
func (b HostBackend) Fork(ctx context.Context, id session.SessionID, at int64) (session.SessionID, error) {
	return b.Host.Fork(ctx, id, at)
}

// List implements Backend.
func (b HostBackend) List(ctx context.Context) ([]supervisor.Info, error) { return b.Host.List(ctx) }

// Peek implements Backend.
func (b HostBackend) Peek(ctx context.Context, id session.SessionID, from int64) (supervisor.Info, []session.Event, error) {
	info, evs, err := b.Host.Peek(ctx, id, from)
	return info, evs.Slice(), err
}

// Inspect implements Backend: a host's Peek never resumes.
func (b HostBackend) Inspect(ctx context.Context, id session.SessionID) (supervisor.Info, []session.Event, error) {
	return b.Peek(ctx, id, 0)
}

// Subscribe implements Backend.
func (b HostBackend) Subscribe(ctx context.Context, id session.SessionID, from int64) (Stream, error) {
	sub, err := b.Host.Subscribe(ctx, id, from)
	if err != nil {
		return nil, err
	}
	return hostStream{sub}, nil
}

type hostStream struct{ *supervisor.Subscription }

func (s hostStream) Events() <-chan session.Event { return s.C }
