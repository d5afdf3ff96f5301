package deepseek

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
)

// The aimock integration test runs the provider against
// @copilotkit/aimock, a real OpenAI-compatible mock server from npm (MIT,
// no dependencies). It is not
// skipped when npm is missing: it fails and says what to install, because
// CI has node.
//
// aimock facts this test relies on (version 1.43.0):
//   - only /v1/... paths are served, so BaseURL is http://127.0.0.1:PORT/v1;
//   - "userMessage" matches a case-sensitive substring of the LAST user
//     message, and the first matching fixture wins; "toolResultContains"
//     matches when the last message is a tool result;
//   - usage comes OpenAI-style in a separate choices:[] chunk, without
//     DeepSeek's cache fields; reasoning chunks come before the role chunk;
//   - truncateAfterChunks needs a latency > 0, or the socket is destroyed
//     before anything is flushed;
//   - AIMOCK_API_KEYS (environment only) makes it check the bearer key and
//     answer 401 otherwise; /ready stays public;
//   - GET /__aimock/journal returns every request it received, body
//     included.
const (
	aimockPackage = "@copilotkit/aimock"
	aimockVersion = "1.43.0"
)

const aimockFixtures = `{ "fixtures": [
  { "match": { "toolResultContains": "sunny" },
    "response": { "content": "It is sunny in Boston." } },
  { "match": { "userMessage": "say-pong" },
    "response": { "content": "PONG", "usage": { "prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10 } } },
  { "match": { "userMessage": "think" },
    "response": { "reasoning": "Let me think about it step by step.", "content": "The answer is 42.",
                  "model": "deepseek-reasoner",
                  "usage": { "prompt_tokens": 20, "completion_tokens": 12, "total_tokens": 32 } } },
  { "match": { "userMessage": "weather" },
    "response": { "toolCalls": [
      { "name": "getCurrentWeather", "arguments": { "location": "Boston, MA" } },
      { "name": "getCurrentTime",    "arguments": { "location": "Boston, MA" } } ] } },
  { "match": { "userMessage": "agent-mode" },
    "response": { "reasoning": "Need the weather tool.",
                  "toolCalls": [ { "name": "getCurrentWeather", "arguments": { "location": "Boston, MA" } } ] } },
  { "match": { "userMessage": "ratelimit" },
    "response": { "error": { "message": "Rate Limit Reached", "type": "rate_limit_error", "code": "rate_limit_exceeded" },
                  "status": 429, "retryAfter": 7 } },
  { "match": { "userMessage": "overloaded" },
    "response": { "error": { "message": "Server Overloaded", "type": "server_error", "code": "overloaded" }, "status": 503 } },
  { "match": { "userMessage": "chaos-drop" }, "chaos": { "dropRate": 1 }, "response": { "content": "never" } },
  { "match": { "userMessage": "chaos-malformed" }, "chaos": { "malformedRate": 1 }, "response": { "content": "never" } },
  { "match": { "userMessage": "chaos-disconnect" }, "chaos": { "disconnectRate": 1 }, "response": { "content": "never" } },
  { "match": { "userMessage": "truncate" }, "truncateAfterChunks": 3, "latency": 5,
    "response": { "content": "This answer will be cut off somewhere in the middle of the stream, never finishing." } }
] }`

func TestAimock(t *testing.T) {
	cli := installAimock(t)
	baseURL := startAimock(t, cli, aimockFixtures, "AIMOCK_API_KEYS="+testKey)
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	client := &http.Client{Transport: transport}
	p, err := New(Config{BaseURL: baseURL, APIKey: testKey, HTTPClient: client})
	require.NoError(t, err)
	ask := func(t *testing.T, text string) result {
		return streamOnce(t, p, simpleRequest(t, text))
	}

	t.Run("text", func(t *testing.T) {
		r := ask(t, "please say-pong")
		checkFinish(t, r, messages.FinishStop)
		require.Equal(t, "PONG", r.text(messages.BlockText))
		checkUsage(t, r, 9, 1, messages.OptInt{}, messages.OptInt{})
	})

	t.Run("reasoning", func(t *testing.T) {
		r := ask(t, "please think")
		checkFinish(t, r, messages.FinishStop)
		require.Equal(t, []int{0, 1}, r.order)
		require.Equal(t, messages.BlockReasoning, r.blocks[0].Type())
		require.Equal(t, "Let me think about it step by step.", r.blocks[0].Text())
		require.Equal(t, "The answer is 42.", r.blocks[1].Text())
		checkUsage(t, r, 20, 12, messages.OptInt{}, messages.OptInt{})
	})

	t.Run("parallel tool calls", func(t *testing.T) {
		r := ask(t, "what is the weather and time in Boston?")
		checkFinish(t, r, messages.FinishToolCalls)
		checkToolCalls(t, r,
			toolCall{"getCurrentWeather", `{"location":"Boston, MA"}`},
			toolCall{"getCurrentTime", `{"location":"Boston, MA"}`})
		for _, c := range r.blocksOf(messages.BlockToolCall) {
			require.True(t, strings.HasPrefix(c.ID(), "call_"), c.ID())
		}
	})

	t.Run("reasoning_content goes back on the tool-call turn", func(t *testing.T) {
		q := userText(t, "agent-mode: check Boston")
		cfg := messages.CallConfig{Provider: "deepseek", Model: "deepseek-reasoner"}
		r := streamOnce(t, p, llm.NewRequest(cfg, "", []messages.Message{q}, nil))
		checkFinish(t, r, messages.FinishToolCalls)
		var content []messages.ContentBlock
		for _, i := range r.order {
			content = append(content, r.blocks[i])
		}
		require.Equal(t, "Need the weather tool.", content[0].Text())
		call := r.blocksOf(messages.BlockToolCall)[0]
		asst, err := messages.NewAssistantMessage(content, messages.ModelSource{Provider: "deepseek", Model: "deepseek-reasoner"})
		require.NoError(t, err)
		res := toolResult(call.ID(), "sunny, 72F", false)

		r = streamOnce(t, p, llm.NewRequest(cfg, "", []messages.Message{q, asst, res}, nil))
		checkFinish(t, r, messages.FinishStop)
		require.Equal(t, "It is sunny in Boston.", r.text(messages.BlockText))

		// What aimock received for the second step.
		var sent struct {
			Messages []struct {
				Role             string  `json:"role"`
				Content          *string `json:"content"`
				ReasoningContent *string `json:"reasoning_content"`
				ToolCallID       string  `json:"tool_call_id"`
				ToolCalls        []struct {
					ID       string `json:"id"`
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			} `json:"messages"`
		}
		require.NoError(t, json.Unmarshal(aimockJournalBody(t, client, baseURL, "tool"), &sent))
		require.Len(t, sent.Messages, 3)
		a := sent.Messages[1]
		require.Equal(t, "assistant", a.Role)
		require.NotNil(t, a.ReasoningContent)
		require.Equal(t, "Need the weather tool.", *a.ReasoningContent)
		require.Len(t, a.ToolCalls, 1)
		require.Equal(t, call.ID(), a.ToolCalls[0].ID)
		require.Equal(t, "getCurrentWeather", a.ToolCalls[0].Function.Name)
		require.JSONEq(t, `{"location":"Boston, MA"}`, a.ToolCalls[0].Function.Arguments)
		require.Equal(t, "tool", sent.Messages[2].Role)
		require.Equal(t, call.ID(), sent.Messages[2].ToolCallID)
	})

	t.Run("429 with Retry-After", func(t *testing.T) {
		f := ask(t, "ratelimit me").failure(t)
		require.Equal(t, llm.CodeRateLimit, f.Code)
		require.Equal(t, 429, f.Status)
		require.Equal(t, int64(7000), f.ProviderRetryAfterMs)
		require.Contains(t, f.Message, "Rate Limit Reached")
		require.True(t, strings.HasPrefix(f.RequestID, "req-"), f.RequestID)
	})

	t.Run("503", func(t *testing.T) {
		f := ask(t, "overloaded?").failure(t)
		require.Equal(t, llm.CodeServer, f.Code)
		require.Equal(t, 503, f.Status)
		require.Contains(t, f.Message, "Server Overloaded")
	})

	t.Run("500 chaos drop", func(t *testing.T) {
		f := ask(t, "chaos-drop").failure(t)
		require.Equal(t, llm.CodeServer, f.Code)
		require.Equal(t, 500, f.Status)
		require.Contains(t, f.Message, "Chaos: request dropped")
	})

	t.Run("malformed body", func(t *testing.T) {
		f := ask(t, "chaos-malformed").failure(t)
		require.Equal(t, llm.CodeMalformedResponse, f.Code)
		require.Contains(t, f.Message, "<<<chaos>>>")
	})

	t.Run("connection destroyed", func(t *testing.T) {
		f := ask(t, "chaos-disconnect").failure(t)
		require.Equal(t, llm.CodeTransport, f.Code)
	})

	t.Run("cut stream", func(t *testing.T) {
		r := ask(t, "truncate please")
		f := r.failure(t)
		require.Equal(t, llm.CodeStreamClosed, f.Code)
		var text strings.Builder
		for _, c := range r.chunks {
			text.WriteString(c.Text())
		}
		require.NotEmpty(t, text.String(), "the chunks before the cut were streamed")
		require.True(t, strings.HasPrefix("This answer will be cut off somewhere in the middle of the stream, never finishing.", text.String()))
	})

	t.Run("no fixture matched", func(t *testing.T) {
		f := ask(t, "nothing matches this").failure(t)
		require.Equal(t, "HTTP_404", f.Code)
		require.Equal(t, 404, f.Status)
	})

	t.Run("wrong key", func(t *testing.T) {
		const wrong = "sk-wrong-key-that-must-not-leak-42"
		bad, err := New(Config{BaseURL: baseURL, APIKey: wrong, HTTPClient: client})
		require.NoError(t, err)
		f := streamOnce(t, bad, simpleRequest(t, "please say-pong")).failure(t)
		require.Equal(t, llm.CodeAuth, f.Code)
		require.Equal(t, 401, f.Status)
		require.Contains(t, f.Message, "Invalid API key")
		require.NotContains(t, f.Message, wrong)
	})
}

// aimockJournalBody returns the request body of the most recent journal
// entry whose last message has the given role.
func aimockJournalBody(t *testing.T, client *http.Client, baseURL, lastRole string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, strings.TrimSuffix(baseURL, "/v1")+"/__aimock/journal", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var entries []struct {
		Body json.RawMessage `json:"body"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&entries))
	for i := len(entries) - 1; i >= 0; i-- {
		var b struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		if json.Unmarshal(entries[i].Body, &b) == nil && len(b.Messages) > 0 && b.Messages[len(b.Messages)-1].Role == lastRole {
			return entries[i].Body
		}
	}
	t.Fatalf("no journal entry ends with a %s message", lastRole)
	return nil
}

// installAimock returns the path of aimock's CLI script, installing the
// pinned version into the user's cache when it is not there yet:
// <UserCacheDir>/dsh-test/aimock/<version>. The install goes to a fresh
// temporary directory beside it and is renamed into place, which is
// atomic: two test processes racing both install, one rename wins, the
// other finds the directory present and uses it.
func installAimock(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	require.NoError(t, err, "no user cache directory for the aimock install")
	root := filepath.Join(cache, "dsh-test", "aimock")
	dir := filepath.Join(root, aimockVersion)
	cli := filepath.Join(dir, "node_modules", "@copilotkit", "aimock", "dist", "cli.js")
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("the aimock test needs node and npm on PATH (Debian: apt-get install nodejs npm): %v", err)
	}
	if aimockInstalled(dir) {
		return cli
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("the aimock test needs npm on PATH to install %s@%s (Debian: apt-get install npm): %v", aimockPackage, aimockVersion, err)
	}
	require.NoError(t, os.MkdirAll(root, 0o755))
	tmp, err := os.MkdirTemp(root, ".install-")
	require.NoError(t, err)
	defer os.RemoveAll(tmp) // a no-op once renamed

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", tmp, "--no-audit", "--no-fund",
		"--save-exact", aimockPackage+"@"+aimockVersion)
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm install %s@%s failed: %v\n%s", aimockPackage, aimockVersion, err, out)
	}
	require.True(t, aimockInstalled(tmp), "npm install did not produce %s %s:\n%s", aimockPackage, aimockVersion, out)
	if err := os.Rename(tmp, dir); err != nil {
		if !aimockInstalled(dir) {
			// Not a lost race: dir is there but broken (an interrupted
			// manual copy, say). Move it aside, atomically, and retry.
			aside := fmt.Sprintf("%s.broken-%d-%d", dir, os.Getpid(), time.Now().UnixNano())
			if rerr := os.Rename(dir, aside); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				t.Fatalf("cannot replace the broken aimock install at %s: %v", dir, rerr)
			}
			require.NoError(t, os.Rename(tmp, dir))
		}
	}
	require.True(t, aimockInstalled(dir))
	return cli
}

func aimockInstalled(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "node_modules", "@copilotkit", "aimock", "package.json"))
	if err != nil {
		return false
	}
	var pkg struct{ Version string }
	if json.Unmarshal(b, &pkg) != nil || pkg.Version != aimockVersion {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, "node_modules", "@copilotkit", "aimock", "dist", "cli.js"))
	return err == nil
}

// startAimock runs aimock on 127.0.0.1 with the fixtures, on a port the
// kernel picks (--port 0, read back from its "listening on" line, so no
// other process can take the port between choosing and binding). It
// returns the base URL (ending in /v1) once /ready answers. The process is
// killed and waited for by the test's cleanup.
func startAimock(t *testing.T, cli, fixtures string, env ...string) string {
	t.Helper()
	fx := filepath.Join(t.TempDir(), "fixtures.json")
	require.NoError(t, os.WriteFile(fx, []byte(fixtures), 0o600))

	out := &listenWatch{found: make(chan string, 1)}
	cmd := exec.Command("node", cli, "--host", "127.0.0.1", "--port", "0", "--fixtures", fx, "--chunk-size", "10")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	deadline := time.After(30 * time.Second)
	var origin string
	select {
	case origin = <-out.found:
	case err := <-exited:
		exited <- err // for the cleanup
		t.Fatalf("aimock exited before listening: %v\n%s", err, out.String())
	case <-deadline:
		t.Fatalf("aimock did not report listening within 30s:\n%s", out.String())
	}

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 2 * time.Second}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(origin + "/ready")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return origin + "/v1"
			}
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("aimock at %s not ready within 30s (last error %v):\n%s", origin, err, out.String())
		}
	}
}

// listenWatch collects aimock's output and reports the origin from its
// "listening on http://127.0.0.1:PORT" line.
type listenWatch struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	found chan string
	sent  bool
}

var listenRe = regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`)

func (w *listenWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.sent {
		if m := listenRe.FindSubmatch(w.buf.Bytes()); m != nil {
			w.found <- string(m[1])
			w.sent = true
		}
	}
	return len(p), nil
}

func (w *listenWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
