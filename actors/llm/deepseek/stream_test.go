package deepseek

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestCancelMidStream(t *testing.T) {
	served := make(chan struct{})
	srv, _ := server(t, reply{handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: "+deltaJSON(`{"role":"assistant","content":""}`)+"\n\n")
		_, _ = io.WriteString(w, "data: "+deltaJSON(`{"content":"Hel"}`)+"\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // a slow model: nothing more until the client leaves
		close(served)
	}})
	p := newProvider(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var cancelledAt time.Time
	var texts []string
	var failure error
	for c, err := range p.Stream(ctx, simpleRequest(t, "hi")) {
		if err != nil {
			failure = err
			continue
		}
		if c.Type() == messages.ChunkTextDelta {
			texts = append(texts, c.Text())
			cancelledAt = time.Now()
			cancel()
		}
	}
	elapsed := time.Since(cancelledAt)
	require.Equal(t, []string{"Hel"}, texts)
	f, ok := llm.Failure(failure)
	require.True(t, ok, "%v", failure)
	require.Equal(t, llm.CodeAborted, f.Code)
	require.Contains(t, f.Message, "context canceled")
	require.Less(t, elapsed, 2*time.Second, "the abort must be prompt")
	waitClosed(t, served, "the server saw the client leave")
	srv.Close()
	goleak.VerifyNone(t)
}

func TestCancelCause(t *testing.T) {
	srv, _ := server(t, reply{})
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("user pressed Esc"))
	f := collect(t, newProvider(t, srv).Stream(ctx, simpleRequest(t, "hi"))).failure(t)
	require.Equal(t, llm.CodeAborted, f.Code)
	require.Contains(t, f.Message, "user pressed Esc")
}

func TestCancelBeforeHeaders(t *testing.T) {
	arrived := make(chan struct{})
	left := make(chan struct{})
	srv, _ := server(t, reply{handler: func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
		close(left)
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-arrived
		cancel()
	}()
	f := collect(t, newProvider(t, srv).Stream(ctx, simpleRequest(t, "hi"))).failure(t)
	require.Equal(t, llm.CodeAborted, f.Code)
	waitClosed(t, left, "the server saw the client leave")
}

func TestConsumerStopsEarly(t *testing.T) {
	left := make(chan struct{})
	srv, _ := server(t, reply{handler: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: "+deltaJSON(`{"content":"Hel"}`)+"\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(left)
	}})
	n := 0
	for _, err := range newProvider(t, srv).Stream(context.Background(), simpleRequest(t, "hi")) {
		require.NoError(t, err)
		n++
		if n == 2 { // block-start, text-delta
			break
		}
	}
	waitClosed(t, left, "breaking out of the loop closes the response")
}

func TestTransportFailure(t *testing.T) {
	srv, _ := server(t, reply{})
	url := srv.URL
	srv.Close() // nothing listens there any more
	p, err := New(Config{BaseURL: url, APIKey: testKey, HTTPClient: &http.Client{}})
	require.NoError(t, err)
	f := streamOnce(t, p, simpleRequest(t, "hi")).failure(t)
	require.Equal(t, llm.CodeTransport, f.Code)
	require.Contains(t, f.Message, "request failed")
}

func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting: %s", what)
	}
}

// pipeTransport answers every request with a 200 event stream whose body
// the test writes through a pipe, so the whole call runs inside a
// synctest bubble on the fake clock.
type pipeTransport struct {
	headers bool // false: never answer, wait for the request's context
	// write produces the body; closed is closed when the client closes it.
	write func(w io.Writer, closed <-chan struct{})
}

func (pt pipeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !pt.headers {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	pr, pw := io.Pipe()
	body := &notifyBody{PipeReader: pr, closed: make(chan struct{})}
	go func() {
		pt.write(pw, body.closed)
		_ = pw.Close()
	}()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: body, Request: req}, nil
}

// notifyBody is a pipe reader that tells the writer when it is closed.
type notifyBody struct {
	*io.PipeReader
	once   sync.Once
	closed chan struct{}
}

func (b *notifyBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return b.PipeReader.Close()
}

func pipeProvider(t *testing.T, pt pipeTransport) *Provider {
	t.Helper()
	p, err := New(Config{BaseURL: "http://model.invalid", APIKey: testKey, IdleTimeout: time.Minute,
		HTTPClient: &http.Client{Transport: pt}})
	require.NoError(t, err)
	return p
}

// every writes s every d, times times (forever if negative), then stays
// silent until the client closes the body.
func every(d time.Duration, s string, times int) func(w io.Writer, closed <-chan struct{}) {
	return func(w io.Writer, closed <-chan struct{}) {
		for i := 0; times < 0 || i < times; i++ {
			select {
			case <-time.After(d):
			case <-closed:
				return
			}
			if _, err := io.WriteString(w, s); err != nil {
				return
			}
		}
		<-closed
	}
}

func TestIdleWatchdog(t *testing.T) {
	text := "data: " + deltaJSON(`{"content":"x"}`) + "\n\n"
	cases := []struct {
		name    string
		pt      pipeTransport
		elapsed time.Duration
		deltas  int
	}{
		{"headers, then silence", pipeTransport{headers: true, write: every(time.Hour, "", 0)}, time.Minute, 0},
		{"no headers at all", pipeTransport{}, time.Minute, 0},
		// DeepSeek sends ": keep-alive" while a request waits in its queue;
		// comments prove the connection lives, not that the model works,
		// so they do not re-arm the watchdog.
		{"keep-alive comments do not re-arm", pipeTransport{headers: true, write: every(10*time.Second, ": keep-alive\n\n", -1)}, time.Minute, 0},
		// Data events do: three deltas 40 s apart, then silence.
		{"data events re-arm", pipeTransport{headers: true, write: every(40*time.Second, text, 3)}, 3*40*time.Second + time.Minute, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := pipeProvider(t, tc.pt)
				start := time.Now()
				res := streamOnce(t, p, simpleRequest(t, "hi"))
				elapsed := time.Since(start)
				f := res.failure(t)
				require.Equal(t, llm.CodeTimeout, f.Code, f.Message)
				require.Equal(t, "deepseek: no data for 1m0s", f.Message)
				require.Equal(t, tc.elapsed, elapsed)
				n := 0
				for _, c := range res.chunks {
					if c.Type() == messages.ChunkTextDelta {
						n++
					}
				}
				require.Equal(t, tc.deltas, n)
			})
		})
	}
}

// TestWatchdogQuietOnSuccess: a stream that finishes leaves no timer
// behind to fire later (synctest would report the bubble's goroutines).
func TestWatchdogQuietOnSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		body := string(sseBody(deltaJSON(`{"content":"PONG"}`), finishJSON("stop", "")))
		p := pipeProvider(t, pipeTransport{headers: true, write: func(w io.Writer, _ <-chan struct{}) {
			<-time.After(59 * time.Second)
			_, _ = io.WriteString(w, body)
		}})
		res := streamOnce(t, p, simpleRequest(t, "hi"))
		require.NoError(t, res.err)
		require.Equal(t, "PONG", res.text(messages.BlockText))
		require.True(t, strings.HasPrefix(res.chunks[0].JSON().String(), `{"type":"block-start"`))
	})
}

// TestSlowConsumerIsNotIdle: time the consumer spends holding a chunk does
// not count as the server's silence.
func TestSlowConsumerIsNotIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := "data: " + deltaJSON(`{"content":"a"}`) + "\n\n"
		rest := string(sseBody(deltaJSON(`{"content":"b"}`), finishJSON("stop", "")))
		proceed := make(chan struct{})
		p := pipeProvider(t, pipeTransport{headers: true, write: func(w io.Writer, closed <-chan struct{}) {
			_, _ = io.WriteString(w, first)
			select { // the rest only once the consumer is done with "a"
			case <-proceed:
			case <-closed:
				return
			}
			_, _ = io.WriteString(w, rest)
		}})
		start := time.Now()
		var texts []string
		for c, err := range p.Stream(context.Background(), simpleRequest(t, "hi")) {
			require.NoError(t, err)
			if c.Type() == messages.ChunkTextDelta {
				texts = append(texts, c.Text())
				if c.Text() == "a" {
					<-time.After(5 * time.Minute) // a consumer far slower than the watchdog
					close(proceed)
				}
			}
		}
		require.Equal(t, []string{"a", "b"}, texts)
		require.Equal(t, 5*time.Minute, time.Since(start))
	})
}
