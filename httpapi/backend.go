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

// Backend is where the sessions live: a *supervisor.Host, or a
// *cluster.Client for the sessions of a cluster (one dialed with a
// ClientConfig.Store, so that listing activates nothing). Its errors
// (supervisor.ErrNoSession, ...) are mapped to the API's error codes.
type Backend = supervisor.Sessions

// deliver sends msg into the session as mode says.
func deliver(ctx context.Context, be Backend, id session.SessionID, mode Mode, msg messages.Message) error {
	switch mode {
	case ModeSteer:
		return be.Steer(ctx, id, msg)
	case ModeInject:
		return be.Inject(ctx, id, msg)
	default:
		return be.Followup(ctx, id, msg)
	}
}
