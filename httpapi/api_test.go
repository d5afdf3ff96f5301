package httpapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/supervisor"
)

type sessionList struct {
	Sessions []sessionJSON `json:"sessions"`
	Next     string        `json:"next"`
}

type messageList struct {
	Messages []map[string]any `json:"messages"`
}

// TestSessionLifecycle drives every happy path: create, get, send with
// wait, messages, list with pages, fork, cancel, healthz.
func TestSessionLifecycle(t *testing.T) {
	f := start(t, supervisor.Config{Dir: t.TempDir()}, Config{Token: "s3cret"})

	var c idJSON
	f.must(t, http.StatusCreated, "POST", "/v1/sessions", map[string]any{"id": "alpha", "system": "be brief"}, &c)
	require.Equal(t, "alpha", c.ID)
	f.must(t, http.StatusCreated, "POST", "/v1/sessions", nil, &c)
	require.NotEmpty(t, c.ID)
	other := c.ID

	var one sessionJSON
	f.must(t, http.StatusOK, "GET", "/v1/sessions/alpha", nil, &one)
	require.Equal(t, sessionJSON{ID: "alpha", Created: one.Created, Status: statusIdle, Events: one.Events}, one)
	require.Positive(t, one.Created)

	var sent sentJSON
	f.must(t, http.StatusOK, "POST", "/v1/sessions/alpha/messages?wait=true", map[string]any{"text": "Hello there\nsecond line"}, &sent)
	require.NotEmpty(t, sent.ID)
	require.EqualValues(t, 1, sent.Turn)
	require.JSONEq(t, `{"kind":"completed"}`, string(sent.Reason))
	st, err := f.h.Stats(testCtx(t), "alpha")
	require.NoError(t, err)

	f.must(t, http.StatusOK, "GET", "/v1/sessions/alpha", nil, &one)
	require.Equal(t, statusIdle, one.Status)
	require.EqualValues(t, 1, one.Turns)
	require.Equal(t, "Hello there", one.Title)
	require.Positive(t, one.Tokens.Output)
	require.EqualValues(t, st.Events, one.Events)

	var ms messageList
	f.must(t, http.StatusOK, "GET", "/v1/sessions/alpha/messages", nil, &ms)
	require.Len(t, ms.Messages, 2)
	require.Equal(t, "user", ms.Messages[0]["role"])
	require.Equal(t, sent.ID, ms.Messages[0]["id"])
	require.Equal(t, "assistant", ms.Messages[1]["role"])

	// A plain send is accepted at once.
	var acc sentJSON
	f.must(t, http.StatusAccepted, "POST", "/v1/sessions/alpha/messages", map[string]any{"text": "more", "mode": "steer"}, &acc)
	require.NotEmpty(t, acc.ID)
	require.Zero(t, acc.Turn)
	require.NoError(t, f.h.WaitIdle(testCtx(t), "alpha"))
	f.must(t, http.StatusAccepted, "POST", "/v1/sessions/alpha/messages", map[string]any{"text": "later", "mode": "inject"}, &acc)

	// Fork at the end of the first turn.
	evs, err := f.h.Events(testCtx(t), "alpha", 0)
	require.NoError(t, err)
	end := int64(-1)
	for _, ev := range evs {
		if ev.Type() == session.TypeTurnEnd {
			end = ev.Seq()
			break
		}
	}
	var fk idJSON
	f.must(t, http.StatusCreated, "POST", "/v1/sessions/alpha/fork", map[string]any{"at": end}, &fk)
	require.NotEqual(t, "alpha", fk.ID)
	f.must(t, http.StatusOK, "GET", "/v1/sessions/"+fk.ID+"/messages", nil, &ms)
	require.Len(t, ms.Messages, 2)

	// Pages of one.
	var seen []string
	after := ""
	for range 10 {
		var page sessionList
		f.must(t, http.StatusOK, "GET", "/v1/sessions?limit=1&after="+after, nil, &page)
		for _, s := range page.Sessions {
			seen = append(seen, s.ID)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	want := []string{"alpha", other, fk.ID}
	require.ElementsMatch(t, want, seen)
	require.IsIncreasing(t, seen)

	var cancelled idJSON
	f.must(t, http.StatusAccepted, "POST", "/v1/sessions/alpha/cancel", nil, &cancelled)
	require.Equal(t, "alpha", cancelled.ID)

	// healthz needs no token.
	f.token = ""
	f.must(t, http.StatusOK, "GET", "/healthz", nil, nil)
}

// TestCancelRunningTurn: cancel ends a running turn {aborted, user}, and
// the session is listed as running, then idle.
func TestCancelRunningTurn(t *testing.T) {
	f := start(t, supervisor.Config{Provider: slowModel(t)}, Config{})
	f.must(t, http.StatusCreated, "POST", "/v1/sessions", map[string]any{"id": "s"}, nil)
	f.must(t, http.StatusAccepted, "POST", "/v1/sessions/s/messages", map[string]any{"text": "talk"}, nil)
	eventually(t, "the session to be running", func() bool {
		var one sessionJSON
		f.must(t, http.StatusOK, "GET", "/v1/sessions/s", nil, &one)
		return one.Status == statusRunning
	})
	f.must(t, http.StatusAccepted, "POST", "/v1/sessions/s/cancel", nil, nil)
	require.NoError(t, f.h.WaitIdle(testCtx(t), "s"))
	var one sessionJSON
	f.must(t, http.StatusOK, "GET", "/v1/sessions/s", nil, &one)
	require.Equal(t, statusIdle, one.Status)
	evs, err := f.h.Events(testCtx(t), "s", 0)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	te, ok := last.Payload().(session.TurnEnd)
	require.True(t, ok, "last event %s", last.Type())
	require.Equal(t, session.EndAborted, te.Reason.Kind)
	require.Equal(t, session.CauseUser, te.Reason.Cause.Kind)
}

// TestWaitForAQueuedFollowup: a followup sent while a turn runs waits
// for its own (the next) turn; one a cancel discards before a turn takes
// it is answered as discarded.
func TestWaitForAQueuedFollowup(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancel=%v", cancel), func(t *testing.T) {
			model := slowModel(t)
			if !cancel {
				var err error
				model, err = synthetic.New(synthetic.Config{Seed: 1, TextChunks: 100, TokensPerSecond: 400})
				require.NoError(t, err)
			}
			f := start(t, supervisor.Config{Provider: model}, Config{})
			f.must(t, http.StatusCreated, "POST", "/v1/sessions", map[string]any{"id": "s"}, nil)
			f.must(t, http.StatusAccepted, "POST", "/v1/sessions/s/messages", map[string]any{"text": "first"}, nil)
			done := make(chan []byte, 1)
			go func() {
				st, b := f.do(t, "POST", "/v1/sessions/s/messages?wait=true", map[string]any{"text": "second"})
				done <- append([]byte(fmt.Sprint(st, " ")), b...)
			}()
			eventually(t, "the followup to be pending", func() bool {
				evs, err := f.h.Events(testCtx(t), "s", 0)
				require.NoError(t, err)
				for _, ev := range evs {
					if ev.Type() == session.TypeInboxSpliced && strings.Contains(ev.Data().String(), "second") {
						return true
					}
				}
				return false
			})
			if cancel {
				f.must(t, http.StatusAccepted, "POST", "/v1/sessions/s/cancel", nil, nil)
			}
			res := string(<-done)
			status, body, _ := strings.Cut(res, " ")
			require.Equal(t, "200", status, body)
			var sent sentJSON
			require.NoError(t, json.Unmarshal([]byte(body), &sent))
			if cancel {
				require.True(t, sent.Discarded, body)
				require.Zero(t, sent.Turn)
				return
			}
			require.EqualValues(t, 2, sent.Turn, body)
			require.JSONEq(t, `{"kind":"completed"}`, string(sent.Reason))
		})
	}
}

// TestClientMessageIDDedup: a retried send with the same client message
// id is delivered once, even when the retries race.
func TestClientMessageIDDedup(t *testing.T) {
	f := start(t, supervisor.Config{}, Config{})
	f.must(t, http.StatusCreated, "POST", "/v1/sessions", map[string]any{"id": "s"}, nil)
	var ids [8]sentJSON
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			f.must(t, http.StatusAccepted, "POST", "/v1/sessions/s/messages", map[string]any{"text": "once", "id": "client-1"}, &ids[i])
		})
	}
	wg.Wait()
	for _, s := range ids {
		require.Equal(t, ids[0].ID, s.ID)
	}
	require.NoError(t, f.h.WaitIdle(testCtx(t), "s"))
	// A late retry, with wait, reports the turn that took it.
	var sent sentJSON
	f.must(t, http.StatusOK, "POST", "/v1/sessions/s/messages?wait=true", map[string]any{"text": "once", "id": "client-1"}, &sent)
	require.Equal(t, ids[0].ID, sent.ID)
	require.EqualValues(t, 1, sent.Turn)
	var ms messageList
	f.must(t, http.StatusOK, "GET", "/v1/sessions/s/messages", nil, &ms)
	users := 0
	for _, m := range ms.Messages {
		if m["role"] == "user" {
			users++
			require.Equal(t, ids[0].ID, m["id"])
		}
	}
	require.Equal(t, 1, users)
	// Another session with the same client id is another message.
	f.must(t, http.StatusCreated, "POST", "/v1/sessions", map[string]any{"id": "t"}, nil)
	f.must(t, http.StatusAccepted, "POST", "/v1/sessions/t/messages", map[string]any{"text": "once", "id": "client-1"}, &sent)
	require.NotEqual(t, ids[0].ID, sent.ID)
}

// TestListResumesNothing: a server over a directory lists and describes
// stored sessions without loading them (nothing resident, nothing
// appended).
func TestListResumesNothing(t *testing.T) {
	dir := t.TempDir()
	a := start(t, supervisor.Config{Dir: dir}, Config{})
	for i := range 3 {
		id := fmt.Sprintf("s%d", i)
		a.must(t, http.StatusCreated, "POST", "/v1/sessions", map[string]any{"id": id}, nil)
		a.must(t, http.StatusOK, "POST", "/v1/sessions/"+id+"/messages?wait=true", map[string]any{"text": "hi " + id}, nil)
	}
	var before sessionJSON
	a.must(t, http.StatusOK, "GET", "/v1/sessions/s1", nil, &before)
	require.NoError(t, a.h.Close(testCtx(t)))

	b := start(t, supervisor.Config{Dir: dir}, Config{})
	var page sessionList
	b.must(t, http.StatusOK, "GET", "/v1/sessions", nil, &page)
	require.Len(t, page.Sessions, 3)
	for i, s := range page.Sessions {
		require.Equal(t, statusStored, s.Status)
		require.EqualValues(t, 1, s.Turns)
		require.Equal(t, fmt.Sprintf("hi s%d", i), s.Title)
	}
	var after sessionJSON
	b.must(t, http.StatusOK, "GET", "/v1/sessions/s1", nil, &after)
	before.Status = statusStored
	require.Equal(t, before, after)
	require.Zero(t, b.h.Resident())
}

// TestPageIsServed: the page and its two files are served without a
// token, from this server only (CSP), and refused to a foreign Host.
func TestPageIsServed(t *testing.T) {
	f := start(t, supervisor.Config{}, Config{Token: "t", LoopbackOnly: true})
	f.token = ""
	for _, p := range []struct{ path, ctype, has string }{
		{"/", "text/html", `<script src="/app.js"`},
		{"/app.js", "text/javascript", "Last-Event-ID"},
		{"/app.css", "text/css", "#transcript"},
	} {
		res, err := http.Get(f.ts.URL + p.path)
		require.NoError(t, err)
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode, p.path)
		require.True(t, strings.HasPrefix(res.Header.Get("Content-Type"), p.ctype), p.path)
		require.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'self'")
		require.Contains(t, string(b), p.has)
	}
	f.fails(t, codeForbidden, "GET", "/", nil, "Host", "evil.example")
}
