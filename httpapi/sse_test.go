package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/supervisor"
)

// sseEvent is one event of a stream.
type sseEvent struct {
	id    int64
	event string
	data  string
}

// sseClient reads a session's event stream.
type sseClient struct {
	res      *http.Response
	r        *bufio.Reader
	comments []string
}

func (f *fixture) stream(t *testing.T, ctx context.Context, path string, hdr ...string) *sseClient {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", f.ts.URL+path, nil)
	require.NoError(t, err)
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := f.ts.Client().Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
	c := &sseClient{res: res, r: bufio.NewReader(res.Body)}
	t.Cleanup(func() { res.Body.Close() })
	return c
}

// next returns the next event, collecting the comments before it.
func (c *sseClient) next() (sseEvent, error) {
	ev := sseEvent{id: -1}
	var data []string
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.id >= 0 || data != nil {
				ev.data = strings.Join(data, "\n")
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			c.comments = append(c.comments, strings.TrimSpace(line[1:]))
		case strings.HasPrefix(line, "id: "):
			n, err := strconv.ParseInt(line[4:], 10, 64)
			if err != nil {
				return ev, err
			}
			ev.id = n
		case strings.HasPrefix(line, "event: "):
			ev.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = append(data, line[6:])
		default:
			return ev, fmt.Errorf("unexpected line %q", line)
		}
	}
}

// checkEvents: got are exactly the log's events from seq from on, in
// order, each with its seq as id, its type as event and its line as data.
func checkEvents(t *testing.T, h *supervisor.Host, id session.SessionID, from int64, got []sseEvent) {
	t.Helper()
	evs, err := h.Events(testCtx(t), id, from)
	require.NoError(t, err)
	require.Len(t, got, len(evs))
	for i, ev := range got {
		want := evs[i]
		require.Equal(t, want.Seq(), ev.id)
		require.Equal(t, string(want.Type()), ev.event)
		require.Equal(t, string(session.AppendEvent(nil, want)), ev.data)
	}
}

// TestStreamResumesExactlyAfterLastEventID: a client that disconnects
// mid-turn and reconnects with Last-Event-ID gets every event after the
// last it saw, none twice, none missing; ?from= starts anywhere.
func TestStreamResumesExactlyAfterLastEventID(t *testing.T) {
	model, err := synthetic.New(synthetic.Config{Seed: 2, TextChunks: 300, TokensPerSecond: 600, ReasoningRate: 1, ReasoningChunks: 20})
	require.NoError(t, err)
	f := start(t, supervisor.Config{Provider: model}, Config{})
	f.must(t, http.StatusCreated, "POST", "/v1/sessions", map[string]any{"id": "s"}, nil)

	ctx1, cancel1 := context.WithCancel(testCtx(t))
	c1 := f.stream(t, ctx1, "/v1/sessions/s/events")
	f.must(t, http.StatusAccepted, "POST", "/v1/sessions/s/messages", map[string]any{"text": "tell me"}, nil)
	var got []sseEvent
	chunks := 0
	for chunks < 30 {
		ev, err := c1.next()
		require.NoError(t, err)
		got = append(got, ev)
		if ev.event == string(session.TypeAssistantChunk) {
			chunks++
		}
	}
	cancel1()
	last := got[len(got)-1].id
	info, _, err := f.h.Peek(testCtx(t), "s", 0)
	require.NoError(t, err)
	require.True(t, info.Running, "the turn ended before the reconnect: the test shows nothing")

	c2 := f.stream(t, testCtx(t), "/v1/sessions/s/events", "Last-Event-ID", strconv.FormatInt(last, 10))
	for {
		ev, err := c2.next()
		require.NoError(t, err)
		got = append(got, ev)
		if ev.event == string(session.TypeTurnEnd) {
			break
		}
	}
	require.NoError(t, f.h.WaitIdle(testCtx(t), "s"))
	checkEvents(t, f.h, "s", 0, got)

	// ?from= replays from there, then goes live.
	c3 := f.stream(t, testCtx(t), "/v1/sessions/s/events?from=5")
	f.must(t, http.StatusAccepted, "POST", "/v1/sessions/s/messages", map[string]any{"text": "again"}, nil)
	var tail []sseEvent
	for ends := 0; ends < 2; {
		ev, err := c3.next()
		require.NoError(t, err)
		tail = append(tail, ev)
		if ev.event == string(session.TypeTurnEnd) {
			ends++
		}
	}
	require.NoError(t, f.h.WaitIdle(testCtx(t), "s"))
	checkEvents(t, f.h, "s", 5, tail)
}

// TestStreamKeepAlive: an idle stream gets a comment every KeepAlive. The
// stream opens with its own comment; keep-alives may already come before
// the inject's splice (the inject can take longer than 10 ms on a loaded
// machine), and after the splice, with nothing else to send, the stream
// keeps sending them.
func TestStreamKeepAlive(t *testing.T) {
	f := start(t, supervisor.Config{}, Config{KeepAlive: 10 * time.Millisecond})
	f.must(t, http.StatusCreated, "POST", "/v1/sessions", map[string]any{"id": "s"}, nil)
	c := f.stream(t, testCtx(t), "/v1/sessions/s/events")
	f.must(t, http.StatusAccepted, "POST", "/v1/sessions/s/messages", map[string]any{"text": "x", "mode": "inject"}, nil)
	ev, err := c.next() // the inject's splice, and the comments before it
	require.NoError(t, err)
	require.Equal(t, string(session.TypeInboxSpliced), ev.event)
	require.NotEmpty(t, c.comments)
	require.Equal(t, "stream of s", c.comments[0])
	before := len(c.comments)
	for len(c.comments) < before+2 {
		line, err := c.r.ReadString('\n')
		require.NoError(t, err)
		if line == "\n" {
			continue
		}
		require.True(t, strings.HasPrefix(line, ":"), "an idle stream sends only comments, got %q", line)
		c.comments = append(c.comments, strings.TrimSpace(line[1:]))
	}
	for i, cm := range c.comments[1:] {
		require.Equal(t, "keep-alive", cm, "comment %d", i+1)
	}
}

// TestSlowStreamClientIsDisconnected: a client that stops reading is
// disconnected, and the session's turn still completes on time; the
// client resumes with Last-Event-ID.
func TestSlowStreamClientIsDisconnected(t *testing.T) {
	// About 8 MB per answer: far more than the sockets buffer.
	model, err := synthetic.New(synthetic.Config{Seed: 3, TextChunks: 2000, ChunkSize: 4096})
	require.NoError(t, err)
	f := start(t, supervisor.Config{Provider: model, SubscriberBuffer: 64}, Config{WriteTimeout: 200 * time.Millisecond})
	f.must(t, http.StatusCreated, "POST", "/v1/sessions", map[string]any{"id": "s"}, nil)

	// A raw client with a small receive buffer that reads nothing.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.DialContext(testCtx(t), "tcp", strings.TrimPrefix(f.ts.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /v1/sessions/s/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	require.NoError(t, err)
	eventually(t, "the stream to open", func() bool { return f.srv.openStreams() == 1 })

	ctx, cancel := context.WithTimeout(testCtx(t), 30*time.Second)
	defer cancel()
	require.NoError(t, f.h.Followup(ctx, "s", userMsgT(t, "a long answer")))
	require.NoError(t, f.h.WaitIdle(ctx, "s"), "the stuck client stalled the turn")
	eventually(t, "the stuck client to be disconnected", func() bool { return f.srv.openStreams() == 0 })

	// The connection is closed: reading drains what was buffered, then
	// ends.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err = io.Copy(io.Discard, conn)
	if err != nil {
		require.ErrorIs(t, err, syscall.ECONNRESET)
	}
}
