package deepseek

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
)

// A recording served through the provider, and what must come out.
type recordingCase struct {
	name  string
	body  func(t testing.TB) reply
	check func(t *testing.T, r result)
}

// toolCall is an expected tool call: its name and its arguments as JSON.
type toolCall struct{ name, args string }

func checkToolCalls(t *testing.T, r result, want ...toolCall) {
	t.Helper()
	calls := r.blocksOf(messages.BlockToolCall)
	require.Len(t, calls, len(want))
	ids := map[string]bool{}
	for i, c := range calls {
		require.Equal(t, want[i].name, c.Name())
		require.True(t, json.Valid([]byte(c.Arguments())), "arguments %q are not JSON", c.Arguments())
		require.JSONEq(t, want[i].args, c.Arguments())
		require.NotEmpty(t, c.ID())
		require.False(t, ids[c.ID()], "duplicate call id %s", c.ID())
		ids[c.ID()] = true
	}
}

func checkUsage(t *testing.T, r result, input, output int64, cacheRead, reasoning messages.OptInt) {
	t.Helper()
	require.NotNil(t, r.usage, "no usage chunk")
	require.Equal(t, messages.TokenUsage{InputTokens: input, OutputTokens: output,
		CacheReadTokens: cacheRead, ReasoningTokens: reasoning}, *r.usage)
}

func checkFinish(t *testing.T, r result, kind messages.FinishKind) {
	t.Helper()
	require.NoError(t, r.err)
	require.NotNil(t, r.finish)
	require.Equal(t, kind, r.finish.Kind)
}

// httprrReply serves record i of an httprr trace as it was recorded:
// status, content type and body.
func httprrReply(rel string, i int) func(t testing.TB) reply {
	return func(t testing.TB) reply {
		rec := readHTTPRR(t, rel)[i]
		return reply{status: rec.resp.StatusCode, contentType: rec.resp.Header.Get("Content-Type"),
			header: http.Header{"X-Ratelimit-Limit": rec.resp.Header.Values("X-Ratelimit-Limit")},
			body:   rec.respBody}
	}
}

var recordingCases = []recordingCase{
	{
		name: "deepseek parallel tool calls (httprr)",
		body: httprrReply("langchaingo-deepseek/TestFunctionParallelCall-streaming-deepseek.httprr", 0),
		check: func(t *testing.T, r result) {
			checkFinish(t, r, messages.FinishToolCalls)
			checkToolCalls(t, r,
				toolCall{"getCurrentWeather", `{"location": "Boston, MA", "unit": "fahrenheit"}`},
				toolCall{"getCurrentTime", `{"location": "Boston, MA"}`})
			require.Equal(t, "call_0_4a3f5bbb-26bd-4ebe-bff5-fe84963cab4a", r.blocksOf(messages.BlockToolCall)[0].ID())
			require.Empty(t, r.blocksOf(messages.BlockText), `"content":"" deltas open no block`)
			checkUsage(t, r, 8, 50, messages.Some(256), messages.OptInt{})
		},
	},
	{
		name: "deepseek one tool call (httprr)",
		body: httprrReply("langchaingo-deepseek/TestFunctionCall-streaming-deepseek.httprr", 0),
		check: func(t *testing.T, r result) {
			checkFinish(t, r, messages.FinishToolCalls)
			require.Len(t, r.blocksOf(messages.BlockToolCall), 1)
			c := r.blocksOf(messages.BlockToolCall)[0]
			require.Equal(t, "getCurrentWeather", c.Name())
			require.True(t, json.Valid([]byte(c.Arguments())))
			require.Contains(t, c.Arguments(), "Boston")
			checkUsage(t, r, 35, 26, messages.Some(128), messages.OptInt{})
		},
	},
	{
		name: "deepseek-reasoner reasoning then text (httprr, 183 KB)",
		body: httprrReply("langchaingo-deepseek/TestMultiContentTextWithReasoning-streaming-deepseek.httprr", 0),
		check: func(t *testing.T, r result) {
			checkFinish(t, r, messages.FinishStop)
			require.Equal(t, []int{0, 1}, r.order)
			require.Equal(t, messages.BlockReasoning, r.blocks[0].Type(), "reasoning opens first")
			require.Equal(t, messages.BlockText, r.blocks[1].Type())
			require.Equal(t, 1423, utf8.RuneCountInString(r.text(messages.BlockReasoning)), "characters, as the fixture notes count them")
			require.True(t, strings.HasPrefix(r.text(messages.BlockReasoning), `First, the question is: "What is the factorial of 5?`))
			require.Equal(t, 382, utf8.RuneCountInString(r.text(messages.BlockText)))
			require.True(t, strings.HasSuffix(r.text(messages.BlockText), "Thus, the factorial of 5 is 120."))
			checkUsage(t, r, 22, 588, messages.Some(0), messages.Some(449))
		},
	},
	{
		name: "openai text stream, usage in a choices:[] chunk (httprr)",
		body: httprrReply("langchaingo-openai/TestClient_CreateChatCompletionStream.httprr", 0),
		check: func(t *testing.T, r result) {
			checkFinish(t, r, messages.FinishStop)
			require.Equal(t, "1, 2, 3, 4, 5", r.text(messages.BlockText))
			require.Len(t, r.blocks, 1)
			checkUsage(t, r, 14, 13, messages.Some(0), messages.Some(0))
		},
	},
	{
		name: "openrouter stream with a comment line (httprr)",
		body: httprrReply("langchaingo-openai/TestOpenRouterStreaming.httprr", 0),
		check: func(t *testing.T, r result) {
			checkFinish(t, r, messages.FinishStop)
			require.Equal(t, "test response", r.text(messages.BlockText))
			checkUsage(t, r, 586, 3, messages.Some(0), messages.Some(0))
		},
	},
	{
		name: "openrouter 429 (httprr)",
		body: httprrReply("langchaingo-openai/TestOpenRouterStreaming.httprr", 1),
		check: func(t *testing.T, r result) {
			f := r.failure(t)
			require.Equal(t, llm.CodeRateLimit, f.Code)
			require.Equal(t, http.StatusTooManyRequests, f.Status)
			require.Contains(t, f.Message, "Rate limit exceeded: limit_rpm/meta-llama/llama-3.2-3b-instruct")
			require.Contains(t, f.Message, "code 429")
			require.Zero(t, f.ProviderRetryAfterMs, "no Retry-After in the recording")
		},
	},
	{
		name: "deepseek thinking mode with a tool call (vercel chunks)",
		body: func(t testing.TB) reply {
			return reply{body: chunksTxtBody(t, "vercel-ai-deepseek/deepseek-tool-call.chunks.txt")}
		},
		check: func(t *testing.T, r result) {
			checkFinish(t, r, messages.FinishToolCalls)
			require.Equal(t, messages.BlockReasoning, r.blocks[0].Type())
			require.Equal(t, 191, utf8.RuneCountInString(r.text(messages.BlockReasoning)))
			calls := r.blocksOf(messages.BlockToolCall)
			require.Len(t, calls, 1)
			require.True(t, strings.HasPrefix(calls[0].ID(), "call_00_"))
			require.True(t, json.Valid([]byte(calls[0].Arguments())), calls[0].Arguments())
			checkUsage(t, r, 19, 83, messages.Some(320), messages.Some(39))
		},
	},
	{
		name: "deepseek v4 finish_reason length (vercel chunks)",
		body: func(t testing.TB) reply {
			return reply{body: chunksTxtBody(t, "vercel-ai-deepseek/issue-19789-live-usage.chunks.txt")}
		},
		check: func(t *testing.T, r result) {
			checkFinish(t, r, messages.FinishMaxTokens)
			require.Equal(t, "sanitized", r.text(messages.BlockText))
			checkUsage(t, r, 88, 4, messages.Some(0), messages.Some(4))
		},
	},
	{
		name: "openai 400 error body (vercel json)",
		body: func(t testing.TB) reply {
			return reply{status: http.StatusBadRequest, contentType: "application/json",
				body: readTestdata(t, "vercel-ai-openai/reasoning-model-legacy-parameter-error.json")}
		},
		check: func(t *testing.T, r result) {
			f := r.failure(t)
			require.Equal(t, llm.CodeInvalidRequest, f.Code)
			require.Equal(t, http.StatusBadRequest, f.Status)
			require.Contains(t, f.Message, "Unsupported parameter: 'max_tokens' is not supported with this model.")
			require.Contains(t, f.Message, "invalid_request_error")
		},
	},
	{
		name: "deepseek parallel tools, derived body",
		body: func(t testing.TB) reply {
			return reply{body: readTestdata(t, "derived/deepseek-parallel-tools.body.sse")}
		},
		check: func(t *testing.T, r result) {
			checkFinish(t, r, messages.FinishToolCalls)
			checkToolCalls(t, r,
				toolCall{"getCurrentWeather", `{"location": "Boston, MA", "unit": "fahrenheit"}`},
				toolCall{"getCurrentTime", `{"location": "Boston, MA"}`})
			checkUsage(t, r, 8, 50, messages.Some(256), messages.OptInt{})
		},
	},
	{
		name: "deepseek parallel tools, truncated",
		body: func(t testing.TB) reply {
			return reply{body: readTestdata(t, "derived/deepseek-parallel-tools.truncated.sse")}
		},
		check: func(t *testing.T, r result) {
			f := r.failure(t)
			require.Equal(t, llm.CodeStreamClosed, f.Code)
			require.Zero(t, f.Status)
			// The deltas before the cut were streamed; nothing was
			// closed, and no usage or finish came.
			require.NotEmpty(t, r.chunks)
			require.Empty(t, r.blocks)
			require.Nil(t, r.usage)
			var names []string
			for _, c := range r.chunks {
				if n, ok := c.Name(); ok && c.Type() == messages.ChunkToolCallDelta {
					names = append(names, n)
				}
			}
			require.Equal(t, []string{"getCurrentWeather", "getCurrentTime"}, names)
		},
	},
}

// The ways a test server writes a body: the stream must decode the same
// however the bytes are split, whatever the line ends, and with SSE
// comments between the events.
var writeVariants = []struct {
	name      string
	transform func([]byte) []byte
	write     func(w http.ResponseWriter, body []byte)
}{
	{name: "whole"},
	{name: "flush per event", write: func(w http.ResponseWriter, body []byte) {
		for ev := range bytes.SplitAfterSeq(body, []byte("\n\n")) {
			_, _ = w.Write(ev)
			w.(http.Flusher).Flush()
		}
	}},
	{name: "small writes", write: func(w http.ResponseWriter, body []byte) {
		n := 1
		if len(body) > 16<<10 {
			n = 97 // keeps the 183 KB recording fast; 97 splits lines anywhere
		}
		for len(body) > 0 {
			k := min(n, len(body))
			_, _ = w.Write(body[:k])
			w.(http.Flusher).Flush()
			body = body[k:]
		}
	}},
	{name: "crlf", transform: func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")) }},
	{name: "lone cr", transform: func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("\n"), []byte("\r")) }},
	{name: "keep-alive comments", transform: func(b []byte) []byte {
		out := []byte(": keep-alive\n\n")
		return append(out, bytes.ReplaceAll(b, []byte("\n\n"), []byte("\n: keep-alive\n\n: keep-alive\n\n"))...)
	}},
}

func TestRecordings(t *testing.T) {
	for _, tc := range recordingCases {
		t.Run(tc.name, func(t *testing.T) {
			var want []string
			for _, v := range writeVariants {
				t.Run(v.name, func(t *testing.T) {
					r := tc.body(t)
					if r.status == 0 || r.status == http.StatusOK {
						if v.transform != nil {
							r.body = v.transform(r.body)
						}
						r.write = v.write
					}
					srv, _ := server(t, r)
					res := streamOnce(t, newProvider(t, srv), simpleRequest(t, "hello"))
					tc.check(t, res)
					got := chunkJSON(res)
					if want == nil {
						want = got
					} else {
						require.Equal(t, want, got, "variant %s decodes differently", v.name)
					}
				})
			}
		})
	}
}

func chunkJSON(r result) []string {
	out := make([]string, 0, len(r.chunks)+1)
	for _, c := range r.chunks {
		out = append(out, c.JSON().String())
	}
	if r.err != nil {
		f, _ := llm.Failure(r.err)
		out = append(out, f.JSON().String())
	}
	return out
}

// TestRecordedRequests rebuilds each recorded DeepSeek/OpenAI request
// from its messages and tools and checks that the provider sends the same
// body (model, messages, stream, stream_options, tools) as the client that
// made the recording.
func TestRecordedRequests(t *testing.T) {
	for _, rel := range []string{
		"langchaingo-deepseek/TestFunctionParallelCall-streaming-deepseek.httprr",
		"langchaingo-deepseek/TestFunctionCall-streaming-deepseek.httprr",
		"langchaingo-deepseek/TestMultiContentTextWithReasoning-streaming-deepseek.httprr",
		"langchaingo-openai/TestClient_CreateChatCompletionStream.httprr",
	} {
		t.Run(rel, func(t *testing.T) {
			rec := readHTTPRR(t, rel)[0]
			require.Equal(t, "Bearer test-api-key", rec.req.Header.Get("Authorization"))
			var recorded struct {
				Model    string `json:"model"`
				Messages []struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"messages"`
				Tools []struct {
					Function struct {
						Name        string          `json:"name"`
						Description string          `json:"description"`
						Parameters  json.RawMessage `json:"parameters"`
					} `json:"function"`
				} `json:"tools"`
			}
			require.NoError(t, json.Unmarshal(rec.reqBody, &recorded))
			var msgs []messages.Message
			for _, m := range recorded.Messages {
				require.Equal(t, "user", m.Role)
				msgs = append(msgs, userText(t, m.Content))
			}
			var tools []messages.ToolSchema
			for _, tl := range recorded.Tools {
				params, err := messages.ParseJSON(tl.Function.Parameters)
				require.NoError(t, err)
				tools = append(tools, messages.ToolSchema{Name: tl.Function.Name, Description: tl.Function.Description, Parameters: params})
			}
			req := llm.NewRequest(messages.CallConfig{Provider: "deepseek", Model: recorded.Model}, "", msgs, tools)

			srv, requests := server(t, reply{body: rec.respBody})
			p := newProvider(t, srv, func(c *Config) { c.APIKey = "test-api-key" })
			res := streamOnce(t, p, req)
			require.NoError(t, res.err)
			got := requests()
			require.Len(t, got, 1)
			require.Equal(t, rec.req.Method, got[0].method)
			require.Equal(t, rec.req.Header.Get("Authorization"), got[0].header.Get("Authorization"))
			require.Equal(t, rec.req.Header.Get("Content-Type"), got[0].header.Get("Content-Type"))

			pick := func(body []byte) map[string]json.RawMessage {
				var m map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(body, &m))
				for k := range m {
					switch k {
					case "model", "messages", "stream", "stream_options", "tools":
					default:
						delete(m, k) // max_completion_tokens, temperature: the recording's own options
					}
				}
				return m
			}
			want, have := pick(rec.reqBody), pick(got[0].body)
			require.Equal(t, len(want), len(have), "fields: recorded %v, sent %v", keys(want), keys(have))
			for k, v := range want {
				require.JSONEq(t, string(v), string(have[k]), "field %s", k)
			}
		})
	}
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
