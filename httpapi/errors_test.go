package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/inbox"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

// TestErrorsOfEveryRoute: each route's refusals, with their codes and
// statuses.
func TestErrorsOfEveryRoute(t *testing.T) {
	f := start(t, supervisor.Config{}, Config{MaxBody: 4096, MaxText: 100})
	f.must(t, http.StatusCreated, "POST", "/v1/sessions", map[string]any{"id": "s"}, nil)

	// NO_SESSION on every route naming a session.
	for _, r := range [][2]string{{"GET", ""}, {"GET", "/messages"}, {"GET", "/events"}, {"POST", "/cancel"}} {
		f.fails(t, codeNoSession, r[0], "/v1/sessions/nobody"+r[1], nil)
	}
	f.fails(t, codeNoSession, "POST", "/v1/sessions/nobody/messages", map[string]any{"text": "x"})
	f.fails(t, codeNoSession, "POST", "/v1/sessions/nobody/fork", map[string]any{"at": 0})
	f.fails(t, codeNoSession, "GET", "/v1/sessions/a%0Ab", nil)

	f.fails(t, codeExists, "POST", "/v1/sessions", map[string]any{"id": "s"})

	// BAD_REQUEST: unknown field, wrong type, text too long, bad values.
	for _, b := range []any{
		map[string]any{"text": "x", "colour": "red"},
		map[string]any{"text": 7},
		map[string]any{"text": strings.Repeat("x", 101)},
		map[string]any{"text": "x", "mode": "shout"},
		map[string]any{"mode": "steer"},
		map[string]any{"text": "x", "id": ""},
		map[string]any{"text": "x", "id": "a\nb"},
		`{"text":"x"} {"text":"y"}`,
		`{"text":`,
		`[1]`,
		``,
	} {
		f.fails(t, codeBadRequest, "POST", "/v1/sessions/s/messages", b)
	}
	msg := f.fails(t, codeBadRequest, "POST", "/v1/sessions/s/messages?wait=true", map[string]any{"text": "x", "mode": "inject"})
	require.Contains(t, msg, "wait")
	f.fails(t, codeBadRequest, "POST", "/v1/sessions/s/messages?wait=perhaps", map[string]any{"text": "x"})
	f.fails(t, codeBadRequest, "POST", "/v1/sessions", map[string]any{"id": 3})
	f.fails(t, codeBadRequest, "POST", "/v1/sessions", map[string]any{"id": strings.Repeat("i", maxIDLen+1)})
	f.fails(t, codeBadRequest, "POST", "/v1/sessions", map[string]any{"system": strings.Repeat("x", 101)})
	f.fails(t, codeBadRequest, "POST", "/v1/sessions", map[string]any{"owner": "me"})
	f.fails(t, codeBadRequest, "POST", "/v1/sessions/s/fork", map[string]any{})
	f.fails(t, codeBadRequest, "POST", "/v1/sessions/s/fork", map[string]any{"at": -1})
	f.fails(t, codeBadRequest, "POST", "/v1/sessions/s/fork", map[string]any{"at": 99})
	f.fails(t, codeBadRequest, "POST", "/v1/sessions/s/cancel", map[string]any{"why": "x"})
	f.fails(t, codeBadRequest, "GET", "/v1/sessions?limit=0", nil)
	f.fails(t, codeBadRequest, "GET", "/v1/sessions?limit=x", nil)
	f.fails(t, codeBadRequest, "GET", "/v1/sessions/s/events?from=-2", nil)
	f.fails(t, codeBadRequest, "GET", "/v1/sessions/s/events", nil, "Last-Event-ID", "x")

	// TOO_LARGE: over the cap, declared or streamed.
	big := `{"text":"` + strings.Repeat("x", 5000) + `"}`
	f.fails(t, codeTooLarge, "POST", "/v1/sessions/s/messages", big)
	req, err := http.NewRequest("POST", f.ts.URL+"/v1/sessions/s/messages", &chunked{strings.NewReader(big)})
	require.NoError(t, err)
	res, err := f.ts.Client().Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, res.StatusCode)

	f.fails(t, codeNotFound, "GET", "/v2/anything", nil)

	// Nothing of all that reached the session.
	evs, err := f.h.Events(testCtx(t), "s", 0)
	require.NoError(t, err)
	require.Zero(t, len(evs))
}

// chunked hides its length, so the request is sent chunked.
type chunked struct{ r *strings.Reader }

func (c *chunked) Read(p []byte) (int, error) { return c.r.Read(p) }

// TestAuth: every /v1 route needs the bearer token; healthz does not.
func TestAuth(t *testing.T) {
	f := start(t, supervisor.Config{}, Config{Token: "right"})
	f.must(t, http.StatusCreated, "POST", "/v1/sessions", map[string]any{"id": "s"}, nil)
	for _, tok := range []string{"", "wrong", "righ", "right2"} {
		f.token = tok
		for _, r := range [][2]string{{"GET", "/v1/sessions"}, {"GET", "/v1/sessions/s"}, {"POST", "/v1/sessions"},
			{"POST", "/v1/sessions/s/messages"}, {"GET", "/v1/sessions/s/events"}, {"POST", "/v1/sessions/s/fork"},
			{"POST", "/v1/sessions/s/cancel"}, {"GET", "/v1/sessions/s/messages"}} {
			f.fails(t, codeUnauthorized, r[0], r[1], `{"text":"x"}`)
		}
	}
	f.token = ""
	f.fails(t, codeUnauthorized, "GET", "/v1/sessions", nil, "Authorization", "Basic cmlnaHQ=")
	f.must(t, http.StatusOK, "GET", "/healthz", nil, nil)
	f.token = "right"
	f.must(t, http.StatusOK, "GET", "/v1/sessions", nil, nil)
	evs, err := f.h.Events(testCtx(t), "s", 0)
	require.NoError(t, err)
	require.Zero(t, len(evs))
}

// TestHostAndOrigin: without a token only loopback Host headers are
// served (DNS rebinding), and cross-origin requests are refused unless
// the origin is the configured one.
func TestHostAndOrigin(t *testing.T) {
	f := start(t, supervisor.Config{}, Config{LoopbackOnly: true, CORSOrigin: "https://app.example"})
	for _, h := range []string{"evil.example", "evil.example:8080", "127.0.0.1.evil.example", "10.0.0.1", "[fe80::1]:80"} {
		f.fails(t, codeForbidden, "GET", "/v1/sessions", nil, "Host", h)
		f.fails(t, codeForbidden, "GET", "/healthz", nil, "Host", h)
	}
	for _, h := range []string{"localhost", "LOCALHOST:8080", "127.0.0.1", "127.1.2.3:9", "[::1]:8080", "::1"} {
		f.must(t, http.StatusOK, "GET", "/v1/sessions", nil, nil, "Host", h)
	}
	host := strings.TrimPrefix(f.ts.URL, "http://")
	f.fails(t, codeForbidden, "POST", "/v1/sessions", nil, "Origin", "https://evil.example")
	f.fails(t, codeForbidden, "POST", "/v1/sessions", nil, "Origin", "null")
	f.must(t, http.StatusCreated, "POST", "/v1/sessions", nil, nil, "Origin", "http://"+host)
	var list sessionList
	f.must(t, http.StatusOK, "GET", "/v1/sessions", nil, &list)
	require.Len(t, list.Sessions, 1, "a refused request changed something")

	req, err := http.NewRequest("OPTIONS", f.ts.URL+"/v1/sessions", nil)
	require.NoError(t, err)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	res, err := f.ts.Client().Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusNoContent, res.StatusCode)
	require.Equal(t, "https://app.example", res.Header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, res.Header.Get("Access-Control-Allow-Headers"), "Authorization")
	st, _ := f.do(t, "POST", "/v1/sessions", nil, "Origin", "https://app.example")
	require.Equal(t, http.StatusCreated, st)
}

// TestInboxFullAndInUse: a full inbox is INBOX_FULL; a session another
// process writes is IN_USE.
func TestInboxFullAndInUse(t *testing.T) {
	dir := t.TempDir()
	f := start(t, supervisor.Config{Dir: dir, Provider: slowModel(t), Inbox: inbox.Config{MaxPending: 2}}, Config{})
	f.must(t, http.StatusCreated, "POST", "/v1/sessions", map[string]any{"id": "s"}, nil)
	codes := map[int]int{}
	for i := range 6 {
		st, _ := f.do(t, "POST", "/v1/sessions/s/messages", map[string]any{"text": fmt.Sprint("m", i)})
		codes[st]++
	}
	require.Positive(t, codes[http.StatusTooManyRequests], "%v", codes)
	f.fails(t, codeInboxFull, "POST", "/v1/sessions/s/messages", map[string]any{"text": "one more"})

	// A second host on the same directory: the session is locked by the
	// first.
	g := start(t, supervisor.Config{Dir: dir}, Config{})
	f.must(t, http.StatusCreated, "POST", "/v1/sessions", map[string]any{"id": "mine"}, nil)
	f.must(t, http.StatusAccepted, "POST", "/v1/sessions/mine/messages", map[string]any{"text": "hi", "mode": "inject"}, nil)
	_, err := f.h.Flush(testCtx(t), "mine")
	require.NoError(t, err)
	g.fails(t, codeInUse, "POST", "/v1/sessions/mine/messages", map[string]any{"text": "x"})
	g.fails(t, codeInUse, "GET", "/v1/sessions/mine/messages", nil)
	require.NoError(t, f.h.Cancel(testCtx(t), "s", session.CancelCause{Kind: session.CauseUser}))
}

// failing is a backend whose every call fails with err.
type failing struct {
	*supervisor.Host
	err error
}

func (b failing) Followup(context.Context, session.SessionID, messages.Message) error { return b.err }
func (b failing) Steer(context.Context, session.SessionID, messages.Message) error    { return b.err }
func (b failing) Inject(context.Context, session.SessionID, messages.Message) error   { return b.err }
func (b failing) List(context.Context) ([]supervisor.Info, error)                     { return nil, b.err }

// TestBackendErrorsMapped: NOT_DURABLE, CLOSED and INTERNAL, the last
// without the error's text.
func TestBackendErrorsMapped(t *testing.T) {
	for _, c := range []struct {
		err  error
		code errorCode
	}{
		{fmt.Errorf("%w: s: disk full", supervisor.ErrNotDurable), codeNotDurable},
		{supervisor.ErrClosed, codeClosed},
		{errors.New("secret detail at /srv/x"), codeInternal},
	} {
		h, err := supervisor.Open(supervisor.Config{Provider: smallModel(t)})
		require.NoError(t, err)
		f := start(t, supervisor.Config{}, Config{Backend: failing{h, c.err}})
		f.must(t, http.StatusCreated, "POST", "/v1/sessions", map[string]any{"id": "s"}, nil)
		msg := f.fails(t, c.code, "POST", "/v1/sessions/s/messages", map[string]any{"text": "x"})
		require.NotContains(t, msg, "secret")
		msg = f.fails(t, c.code, "GET", "/v1/sessions", nil)
		require.NotContains(t, msg, "secret")
		require.NoError(t, h.Close(testCtx(t)))
	}
	// A closed host answers CLOSED.
	f := start(t, supervisor.Config{}, Config{})
	require.NoError(t, f.h.Close(testCtx(t)))
	f.fails(t, codeClosed, "POST", "/v1/sessions", nil)
	f.fails(t, codeClosed, "GET", "/v1/sessions", nil)
}
