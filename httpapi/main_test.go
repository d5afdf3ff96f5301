package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dshgo/dsh/actors/llm/synthetic"
	"github.com/dshgo/dsh/messages"
	"github.com/dshgo/dsh/supervisor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a host behind a server on a real 127.0.0.1 listener.
type fixture struct {
	h     *supervisor.Host
	srv   *Server
	ts    *httptest.Server
	token string
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func smallModel(t *testing.T) *synthetic.Provider {
	p, err := synthetic.New(synthetic.Config{Seed: 1, TextChunks: 20})
	require.NoError(t, err)
	return p
}

// slowModel streams about 20 s per answer: a turn that is still running
// when the test looks.
func slowModel(t *testing.T) *synthetic.Provider {
	p, err := synthetic.New(synthetic.Config{Seed: 1, TextChunks: 1000, TokensPerSecond: 50})
	require.NoError(t, err)
	return p
}

func start(t *testing.T, hcfg supervisor.Config, cfg Config) *fixture {
	t.Helper()
	if hcfg.Provider == nil {
		hcfg.Provider = smallModel(t)
	}
	h, err := supervisor.Open(hcfg)
	require.NoError(t, err)
	if cfg.Backend == nil {
		cfg.Backend = h
	}
	srv, err := New(cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(srv)
	// Every response a test gets is checked against openapi.json.
	ts.Client().Transport = &validating{t: t, next: ts.Client().Transport}
	f := &fixture{h: h, srv: srv, ts: ts, token: cfg.Token}
	t.Cleanup(func() {
		srv.Close()
		ts.Close()
		srv.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = h.Close(ctx)
	})
	return f
}

// do sends a request (body marshalled unless it is a string or nil) with
// the fixture's token and returns the status and the body.
func (f *fixture) do(t *testing.T, method, path string, body any, hdr ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		require.NoError(t, err)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(testCtx(t), method, f.ts.URL+path, rd)
	require.NoError(t, err)
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := f.ts.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, b
}

// must is do expecting status want; it decodes the answer into out (when
// not nil).
func (f *fixture) must(t *testing.T, want int, method, path string, body, out any, hdr ...string) {
	t.Helper()
	st, b := f.do(t, method, path, body, hdr...)
	require.Equal(t, want, st, "%s %s: %s", method, path, b)
	if out != nil {
		require.NoError(t, json.Unmarshal(b, out), "%s", b)
	}
}

// fails is do expecting the error envelope with code.
func (f *fixture) fails(t *testing.T, code errorCode, method, path string, body any, hdr ...string) string {
	t.Helper()
	st, b := f.do(t, method, path, body, hdr...)
	var e errorBody
	require.NoError(t, json.Unmarshal(b, &e), "%s %s: %s", method, path, b)
	require.Equal(t, code, e.Error.Code, "%s %s: %s", method, path, b)
	require.Equal(t, statusOf[code], st, "%s %s: %s", method, path, b)
	require.NotEmpty(t, e.Error.Message)
	return e.Error.Message
}

// eventually polls cond until it holds or a deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-time.After(2 * time.Millisecond) // the poll interval, not a wait for timing
	}
}

func userMsgT(t *testing.T, text string) messages.Message {
	t.Helper()
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
	require.NoError(t, err)
	return m
}

func userMsgB(text string) messages.Message {
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(text)}, messages.UserSource())
	if err != nil {
		panic(err)
	}
	return m
}
