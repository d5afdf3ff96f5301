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

// errorCode is the code of an error response.
type errorCode string

// The error codes and the status each is sent with.
const (
	codeNoSession    errorCode = "NO_SESSION"   // 404
	codeExists       errorCode = "EXISTS"       // 409
	codeInUse        errorCode = "IN_USE"       // 409: another process writes the session
	codeInboxFull    errorCode = "INBOX_FULL"   // 429
	codeNotDurable   errorCode = "NOT_DURABLE"  // 503: the session's last write failed
	codeClosed       errorCode = "CLOSED"       // 503: the server is shutting down
	codeBadRequest   errorCode = "BAD_REQUEST"  // 400
	codeUnauthorized errorCode = "UNAUTHORIZED" // 401
	codeForbidden    errorCode = "FORBIDDEN"    // 403: a foreign Host header or origin
	codeNotFound     errorCode = "NOT_FOUND"    // 404: no such route
	codeMethod       errorCode = "METHOD_NOT_ALLOWED"
	codeTooLarge     errorCode = "TOO_LARGE" // 413
	codeInternal     errorCode = "INTERNAL"  // 500
)

var statusOf = map[errorCode]int{
	codeNoSession: http.StatusNotFound, codeExists: http.StatusConflict, codeInUse: http.StatusConflict,
	codeInboxFull: http.StatusTooManyRequests, codeNotDurable: http.StatusServiceUnavailable,
	codeClosed: http.StatusServiceUnavailable, codeBadRequest: http.StatusBadRequest,
	codeUnauthorized: http.StatusUnauthorized, codeForbidden: http.StatusForbidden,
	codeNotFound: http.StatusNotFound, codeMethod: http.StatusMethodNotAllowed,
	codeTooLarge: http.StatusRequestEntityTooLarge, codeInternal: http.StatusInternalServerError,
}

// apiError is an error with its response code and the message the client
// sees.
type apiError struct {
	code errorCode
	msg  string
}

func (e *apiError) Error() string { return string(e.code) + ": " + e.msg }

func badRequest(msg string) *apiError { return &apiError{codeBadRequest, msg} }

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
		return &apiError{codeNoSession, "no such session"}
	case errors.Is(err, supervisor.ErrExists), errors.Is(err, persister.ErrExists):
		return &apiError{codeExists, "a session with that id exists"}
	case errors.As(err, &le), errors.Is(err, persister.ErrLocked):
		return &apiError{codeInUse, "the session is in use by another process"}
	case errors.Is(err, inbox.ErrInboxFull):
		return &apiError{codeInboxFull, "the session's inbox is full; retry later"}
	case errors.Is(err, supervisor.ErrNotDurable):
		return &apiError{codeNotDurable, "the session's last write failed; no new turn until a retry succeeds"}
	case errors.Is(err, supervisor.ErrClosed), errors.Is(err, persister.ErrClosed), errors.Is(err, errShuttingDown):
		return &apiError{codeClosed, "the server is shutting down"}
	case errors.Is(err, session.ErrTooLarge):
		return badRequest("the message is too large to record")
	case errors.As(err, &fe):
		return badRequest(fe.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{codeInternal, "timed out"}
	}
	return &apiError{codeInternal, "internal error"}
}

var errShuttingDown = errors.New("httpapi: server shutting down")

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    errorCode `json:"code"`
	Message string    `json:"message"`
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
