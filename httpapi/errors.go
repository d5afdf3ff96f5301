package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/persister"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/supervisor"
)

// Code is the code of an error response.
type Code string

// The error codes and the status each is sent with.
const (
	CodeNoSession    Code = "NO_SESSION"   // 404
	CodeExists       Code = "EXISTS"       // 409
	CodeInUse        Code = "IN_USE"       // 409: another process writes the session
	CodeInboxFull    Code = "INBOX_FULL"   // 429
	CodeNotDurable   Code = "NOT_DURABLE"  // 503: the session's last write failed
	CodeClosed       Code = "CLOSED"       // 503: the server is shutting down
	CodeBadRequest   Code = "BAD_REQUEST"  // 400
	CodeUnauthorized Code = "UNAUTHORIZED" // 401
	CodeForbidden    Code = "FORBIDDEN"    // 403: a foreign Host header or origin
	CodeNotFound     Code = "NOT_FOUND"    // 404: no such route
	CodeMethod       Code = "METHOD_NOT_ALLOWED"
	CodeTooLarge     Code = "TOO_LARGE" // 413
	CodeInternal     Code = "INTERNAL"  // 500
)

var statusOf = map[Code]int{
	CodeNoSession: http.StatusNotFound, CodeExists: http.StatusConflict, CodeInUse: http.StatusConflict,
	CodeInboxFull: http.StatusTooManyRequests, CodeNotDurable: http.StatusServiceUnavailable,
	CodeClosed: http.StatusServiceUnavailable, CodeBadRequest: http.StatusBadRequest,
	CodeUnauthorized: http.StatusUnauthorized, CodeForbidden: http.StatusForbidden,
	CodeNotFound: http.StatusNotFound, CodeMethod: http.StatusMethodNotAllowed,
	CodeTooLarge: http.StatusRequestEntityTooLarge, CodeInternal: http.StatusInternalServerError,
}

// apiError is an error with its response code and the message the client
// sees.
type apiError struct {
	code Code
	msg  string
}

func (e *apiError) Error() string { return string(e.code) + ": " + e.msg }

func badRequest(msg string) *apiError { return &apiError{CodeBadRequest, msg} }

// classify maps an error of the backend to its code and the message the
// client sees. An unexpected error is INTERNAL with a generic message (the
// server logs the error itself).
func classify(err error) *apiError {
	var ae *apiError
	var le *persister.LockedError
	var fe *session.ForkError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, supervisor.ErrNoSession):
		return &apiError{CodeNoSession, "no such session"}
	case errors.Is(err, supervisor.ErrExists), errors.Is(err, persister.ErrExists):
		return &apiError{CodeExists, "a session with that id exists"}
	case errors.As(err, &le), errors.Is(err, persister.ErrLocked):
		return &apiError{CodeInUse, "the session is in use by another process"}
	case errors.Is(err, inbox.ErrInboxFull):
		return &apiError{CodeInboxFull, "the session's inbox is full; retry later"}
	case errors.Is(err, supervisor.ErrNotDurable):
		return &apiError{CodeNotDurable, "the session's last write failed; no new turn until a retry succeeds"}
	case errors.Is(err, supervisor.ErrClosed), errors.Is(err, persister.ErrClosed), errors.Is(err, errShuttingDown):
		return &apiError{CodeClosed, "the server is shutting down"}
	case errors.Is(err, session.ErrTooLarge):
		return badRequest("the message is too large to record")
	case errors.As(err, &fe):
		return badRequest(fe.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{CodeInternal, "timed out"}
	}
	return &apiError{CodeInternal, "internal error"}
}

var errShuttingDown = errors.New("httpapi: server shutting down")

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, statusOf[e.code], errorBody{errorDetail{e.code, e.msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"INTERNAL","message":"internal error"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
