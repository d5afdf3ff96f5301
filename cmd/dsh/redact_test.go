package main

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
)

// wholeLogs serializes every session log under dir (header and every
// event, unpacked), so a test can search all that was stored.
func wholeLogs(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	n := 0
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(d.Name(), ".jsonl") {
			return err
		}
		f, err := session.ReadFile(p)
		require.NoError(t, err, p)
		b.WriteString(f.Header.JSON().String() + "\n")
		b.Write(session.AppendRecords(nil, f.Events, session.Verbatim))
		n++
		return nil
	}))
	require.Positive(t, n, "no log under %s", dir)
	return b.String()
}

// A provider that echoes the API key back, in a response header, an error
// body or the streamed text, gets none of it into the session's log or
// onto the terminal.
func TestRunNeverStoresOrPrintsAnEchoedKey(t *testing.T) {
	const key = "sk-echoed-secret-key-0123456789"
	t.Setenv("DEEPSEEK_API_KEY", key)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	for _, tc := range []struct {
		name    string
		status  int
		handler http.HandlerFunc
	}{
		{"error with the key in x-request-id and the body", exitFailure, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Request-Id", key)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"message":"bad key ` + key + `","type":"invalid_request_error","code":"` + key + `"}}`))
		}},
		{"stream with the key in the text", exitOK, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Request-Id", key)
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(`data: {"choices":[{"index":0,"delta":{"content":"your key is ` + key + `"},"finish_reason":null}]}` + "\n\n" +
				`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":5}}` + "\n\n" +
				"data: [DONE]\n\n"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			dir := t.TempDir()
			code, out, errOut := runDsh("run", "--dir", dir, "--workdir", t.TempDir(), "--base-url", srv.URL, "hi")
			require.Equal(t, tc.status, code, errOut)
			require.NotContains(t, out, key)
			require.NotContains(t, errOut, key)
			require.NotContains(t, wholeLogs(t, dir), key)
			require.Contains(t, out+errOut, "[redacted]", "what the server sent is still shown, redacted")
		})
	}
}
