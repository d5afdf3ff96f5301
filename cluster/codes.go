package cluster

import (
	"context"
	"errors"

	"github.com/dshgo/dsh/actors/agent"
	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/cluster/clusterpb"
	"github.com/dshgo/dsh/supervisor"
)

// errInvalid marks a request that could not be understood.
var errInvalid = errors.New("cluster: invalid request")

// codes pairs each wire code with the error a RemoteError of that code
// unwraps to, and with the errors a grain classifies as it. The first
// match wins: LOCKED comes first because a write fenced off by another
// member also fails the session closed (ErrNotDurable wraps it).
var codes = []struct {
	code clusterpb.Code
	err  error   // what RemoteError.Unwrap returns
	also []error // more errors classified as code
}{
	{clusterpb.Code_CODE_LOCKED, persister.ErrLocked, []error{persister.ErrFenced}},
	{clusterpb.Code_CODE_NO_SESSION, supervisor.ErrNoSession, nil},
	{clusterpb.Code_CODE_EXISTS, supervisor.ErrExists, []error{persister.ErrExists}},
	{clusterpb.Code_CODE_NOT_DURABLE, supervisor.ErrNotDurable, nil},
	{clusterpb.Code_CODE_INBOX_FULL, inbox.ErrInboxFull, nil},
	{clusterpb.Code_CODE_DISPOSED, agent.ErrDisposed, nil},
	{clusterpb.Code_CODE_CLOSED, supervisor.ErrClosed, []error{supervisor.ErrEvicted}},
	{clusterpb.Code_CODE_FORK, session.ErrFork, nil},
	{clusterpb.Code_CODE_INVALID, errInvalid, nil},
	{clusterpb.Code_CODE_DIVERGED, ErrDiverged, nil},
	{clusterpb.Code_CODE_DEADLINE, context.DeadlineExceeded, nil},
}

// codeOf classifies an error for the wire.
func codeOf(err error) clusterpb.Code {
	if err == nil {
		return clusterpb.Code_CODE_OK
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
		for _, e := range c.also {
			if errors.Is(err, e) {
				return c.code
			}
		}
	}
	return clusterpb.Code_CODE_INTERNAL
}
