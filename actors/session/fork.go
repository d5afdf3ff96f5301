package session

import (
	"errors"
	"fmt"

	"github.com/dshgo/dsh/messages"
)

// ForkErrorCode names why a fork was refused.
type ForkErrorCode string

// The fork error codes the log raises (docs/session-log.md#forking): a
// boundary that is not an event of the log, or one inside an open turn.
// The reference's other codes are about its session registry; in dsh a
// missing or existing session is the host's error (supervisor.ErrNoSession,
// supervisor.ErrExists), not a ForkError.
const (
	ForkInvalidBoundary ForkErrorCode = "INVALID_BOUNDARY"
	ForkOpenTurn        ForkErrorCode = "OPEN_TURN"
)

// ErrFork marks every ForkError; use errors.As to read its code.
var ErrFork = errors.New("session: fork refused")

// ForkError is a refused fork.
type ForkError struct {
	Code ForkErrorCode
	Msg  string
}

func (e *ForkError) Error() string { return fmt.Sprintf("session: fork %s: %s", e.Code, e.Msg) }

// Is makes every ForkError match ErrFork.
func (e *ForkError) Is(target error) bool { return target == ErrFork }

// LastEvent is the boundary that forks at the end of the log.
const LastEvent int64 = -1

// ForkPrefix returns the events [0..boundary] (inclusive) a fork at
// boundary inherits. boundary LastEvent means the last event; an empty log
// yields an empty prefix. The prefix must not end inside an open turn: the
// last turn/start or turn/end in it must not be a turn/start (log-only
// events after a turn/end may sit in it). The returned events are the
// log's immutable values in a slice owned by the caller.
func (l *Log) ForkPrefix(boundary int64) ([]Event, error) {
	n := l.events.len()
	if boundary == LastEvent {
		if n == 0 {
			return nil, nil
		}
		boundary = int64(n) - 1
	}
	if boundary < 0 || boundary >= int64(n) || boundary > maxSafe {
		return nil, &ForkError{Code: ForkInvalidBoundary,
			Msg: fmt.Sprintf("boundary %d is not an event of a %d-event log", boundary, n)}
	}
	prefix := l.events.view(0, int(boundary)+1)
	if _, _, open := openTurn(prefix); open {
		return nil, &ForkError{Code: ForkOpenTurn, Msg: fmt.Sprintf("boundary %d is inside an open turn", boundary)}
	}
	return prefix.Slice(), nil
}

// Fork returns a new log seeded with the prefix [0..boundary] of l: its
// header names the parent (parentSession) and the seed length, and keeps
// the parent's cwd; as a seeded log it ends with session/end-seed, stamped
// now. l is never touched.
func (l *Log) Fork(child SessionID, boundary int64, createdAt, now int64) (*Log, error) {
	prefix, err := l.ForkPrefix(boundary)
	if err != nil {
		return nil, err
	}
	return NewSeeded(l.forkHeader(child, createdAt, len(prefix)), prefix, now)
}

// forkHeader is the header of a child forked from l with a seed of
// seedLength events: the parent's cwd, the parent named, the seed length.
func (l *Log) forkHeader(child SessionID, createdAt int64, seedLength int) Header {
	return Header{ID: child, CreatedAt: createdAt, Cwd: l.header.Cwd, ParentSession: string(l.header.ID),
		SeedLength: messages.Some(int64(seedLength))}
}
