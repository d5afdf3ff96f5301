package httpapi

import (
	"context"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// sendMode says how a message enters a session.
type sendMode string

// The send modes.
const (
	modeFollowup sendMode = "followup" // its own later turn
	modeSteer    sendMode = "steer"    // the running turn's next step, or a new turn when idle
	modeInject   sendMode = "inject"   // staged; rides with the next waking input
)

// Backend is where the sessions live: a *supervisor.Host, or a
// *cluster.Client for the sessions of a cluster (one dialed with a
// ClientConfig.Store, so that listing activates nothing). Its errors
// (supervisor.ErrNoSession, ...) are mapped to the API's error codes.
type Backend = supervisor.Sessions

// deliver sends msg into the session as mode says.
func deliver(ctx context.Context, be Backend, id session.SessionID, mode sendMode, msg messages.Message) error {
	switch mode {
	case modeSteer:
		return be.Steer(ctx, id, msg)
	case modeInject:
		return be.Inject(ctx, id, msg)
	default:
		return be.Followup(ctx, id, msg)
	}
}
