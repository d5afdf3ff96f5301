package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/actors/session"
	"github.com/dshgo/dsh/messages"
)

// hostileText holds what a log or a model could send a terminal: an OSC
// window title ended by BEL, a clear screen, a carriage return that would
// overwrite the line, a bare BEL, a C1 CSI (U+009B), a right-to-left
// override, and DEL.
const hostileText = "title \x1b]0;pwned\x07 clear \x1b[2J\nsecret\rpublic ring \a csi \u009b31m rlo \u202eexe.txt del \x7f end"

// requireNoRawControls fails when out holds a control character other
// than newline and tab, a C1 control or a bidi control, or is not UTF-8.
func requireNoRawControls(t *testing.T, out string) {
	t.Helper()
	require.True(t, utf8.ValidString(out), "output is not UTF-8")
	for i, r := range out {
		switch {
		case r == '\n' || r == '\t':
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || (r >= 0x202a && r <= 0x202e):
			t.Fatalf("raw control %U at byte %d of %q", r, i, out)
		}
	}
}

func TestShowRendersControlCharactersVisibly(t *testing.T) {
	h := session.Header{ID: "hostile", CreatedAt: 1, Cwd: "/tmp/\x1b]0;cwd\x07"}
	l, err := session.New(h)
	require.NoError(t, err)
	m, err := messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock(hostileText)}, messages.UserSource())
	require.NoError(t, err)
	appendOK(t, l, session.UserMessage{Message: m}.Draft())
	path := filepath.Join(t.TempDir(), "hostile.jsonl")
	require.NoError(t, session.WriteFile(path, h, l.Events().Slice(), session.WriteOptions{}))

	code, out, errOut := runDsh("log", "show", path)
	require.Equal(t, exitOK, code, errOut)
	requireNoRawControls(t, out)
	for _, shown := range []string{
		`title \x1b]0;pwned\x07 clear \x1b[2J`,
		`secret\x0dpublic ring \x07 csi \u009b31m rlo \u202eexe.txt del \x7f end`,
		`cwd /tmp/\x1b]0;cwd\x07`,
	} {
		require.Contains(t, out, shown)
	}
	// The text's own newline still starts a new line.
	require.Contains(t, out, `clear \x1b[2J`+"\n")
	require.True(t, strings.HasSuffix(out, "\n"))

	// dsh log messages stays JSON, with nothing raw in it either.
	code, out, errOut = runDsh("log", "messages", path)
	require.Equal(t, exitOK, code, errOut)
	requireNoRawControls(t, out)
	ms := messageLines(t, out)
	require.Len(t, ms, 1)
	require.Equal(t, hostileText, ms[0]["content"].([]any)[0].(map[string]any)["text"])
}

// hostileModel is a chat-completions server whose answer, reasoning and
// error messages carry hostileText.
func hostileModel(t *testing.T, status int) *httptest.Server {
	t.Helper()
	quoted, err := json.Marshal(hostileText)
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status != http.StatusOK {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"error":{"message":` + string(quoted) + `,"type":"invalid_request_error"}}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(`data: {"choices":[{"index":0,"delta":{"reasoning_content":` + string(quoted) + `},"finish_reason":null}]}` + "\n\n" +
			`data: {"choices":[{"index":0,"delta":{"content":` + string(quoted) + `},"finish_reason":null}]}` + "\n\n" +
			`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":5}}` + "\n\n" +
			"data: [DONE]\n\n"))
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	return srv
}

// dsh run streams the model's text, reasoning and errors to the terminal
// with their control characters shown, not obeyed; --json keeps the text
// as it is (JSON escapes it).
func TestRunRendersModelTextVisibly(t *testing.T) {
	t.Setenv("DEEPSEEK_API_KEY", "sk-test")
	srv := hostileModel(t, http.StatusOK)
	dir := t.TempDir()
	code, out, errOut := runDsh("run", "--dir", dir, "--workdir", t.TempDir(), "--base-url", srv.URL, "--show-reasoning", "--verbose", "hi")
	require.Equal(t, exitOK, code, errOut)
	requireNoRawControls(t, out)
	requireNoRawControls(t, strings.ReplaceAll(strings.ReplaceAll(errOut, dimOn, ""), dimOff, ""))
	require.Contains(t, out, `title \x1b]0;pwned\x07 clear \x1b[2J`+"\n"+`secret\x0dpublic`)
	require.Contains(t, errOut, `secret\x0dpublic`, "the reasoning, shown")

	code, out, errOut = runDsh("run", "--dir", dir, "--workdir", t.TempDir(), "--base-url", srv.URL, "--json", "hi")
	require.Equal(t, exitOK, code, errOut)
	requireNoRawControls(t, out)
	var res runResult
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, hostileText, res.Text, "JSON carries the text as it is")

	bad := hostileModel(t, http.StatusBadRequest)
	code, out, errOut = runDsh("run", "--dir", dir, "--workdir", t.TempDir(), "--base-url", bad.URL, "hi")
	require.Equal(t, exitFailure, code)
	requireNoRawControls(t, out)
	requireNoRawControls(t, errOut)
	require.Contains(t, errOut, `\x1b]0;pwned\x07`, "the provider's message, shown")
}

// dsh chat streams through the same renderer; its /messages stays JSON.
func TestChatRendersModelTextVisibly(t *testing.T) {
	t.Setenv("DEEPSEEK_API_KEY", "sk-test")
	srv := hostileModel(t, http.StatusOK)
	stdout, stderr := newNotifyBuffer(), newNotifyBuffer()
	args := []string{"--dir", t.TempDir(), "--workdir", t.TempDir(), "--base-url", srv.URL, "--show-reasoning", "--verbose"}
	err := runChat(testContext(t), args, strings.NewReader("hi\n/wait\n/messages\n"), stdout, stderr, nil, talkEnv{})
	require.NoError(t, err, stderr.String())
	requireNoRawControls(t, stdout.String())
	requireNoRawControls(t, stderr.String())
	require.Contains(t, stdout.String(), `title \x1b]0;pwned\x07 clear \x1b[2J`+"\n"+`secret\x0dpublic`)
	require.Contains(t, stderr.String(), `secret\x0dpublic`, "the reasoning, shown")
	ms := messageLines(t, stdout.String())
	require.Len(t, ms, 2)
	content := ms[1]["content"].([]any)
	require.Equal(t, hostileText, content[len(content)-1].(map[string]any)["text"], "/messages prints JSON, decoding to the text as it is")
}
