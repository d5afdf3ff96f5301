package deepseek

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
)

// Real error bodies: DeepSeek's as quoted in public issue threads,
// OpenAI's documented shapes.
const (
	deepseek401 = `{"error":{"message":"Authentication Fails, Your api key: ****XXXX is invalid","type":"authentication_error","param":null,"code":"invalid_request_error"}}`
	deepseek402 = `{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}`
	deepseek400 = "{\"error\":{\"message\":\"The `reasoning_content` in the thinking mode must be passed back to the API.\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"invalid_request_error\"}}"
	context400  = `{"error":{"message":"This model's maximum context length is 131072 tokens. However, you requested 140000 tokens (139000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}`
	openaiQuota = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
)

func TestHTTPErrors(t *testing.T) {
	fixedNow := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name       string
		status     int
		header     http.Header
		body       string
		code       string
		retryAfter int64
		msg        string
	}{
		{"401 deepseek", 401, nil, deepseek401, llm.CodeAuth, 0, "HTTP 401: Authentication Fails, Your api key: ****XXXX is invalid (type authentication_error, code invalid_request_error)"},
		{"403", 403, nil, `{"error":{"message":"Forbidden region"}}`, llm.CodeAuth, 0, "Forbidden region"},
		{"402 deepseek balance", 402, nil, deepseek402, llm.CodeQuota, 0, "Insufficient Balance"},
		{"400 reasoning_content not passed back", 400, nil, deepseek400, llm.CodeInvalidRequest, 0, "must be passed back"},
		{"400 context window", 400, nil, context400, llm.CodeContextWindowExceeded, 0, "maximum context length is 131072"},
		{"400 context_length_exceeded code", 400, nil, `{"error":{"message":"too long","code":"context_length_exceeded"}}`, llm.CodeContextWindowExceeded, 0, "too long"},
		{"413", 413, nil, "request entity too large", llm.CodeInvalidRequest, 0, "request entity too large"},
		{"422 deepseek invalid parameters", 422, nil, `{"error":{"message":"Invalid Parameters"}}`, "HTTP_422", 0, "Invalid Parameters"},
		{"429 seconds", 429, http.Header{"Retry-After": {"3"}}, `{"error":{"message":"Rate Limit Reached","type":"rate_limit_error"}}`, llm.CodeRateLimit, 3000, "Rate Limit Reached"},
		{"429 fractional seconds", 429, http.Header{"Retry-After": {"0.25"}}, "", llm.CodeRateLimit, 250, "Too Many Requests"},
		{"429 http date", 429, http.Header{"Retry-After": {fixedNow.Add(90 * time.Second).Format(http.TimeFormat)}}, "", llm.CodeRateLimit, 90000, "HTTP 429"},
		{"429 date in the past", 429, http.Header{"Retry-After": {fixedNow.Add(-time.Minute).Format(http.TimeFormat)}}, "", llm.CodeRateLimit, 0, "HTTP 429"},
		{"429 retry-after-ms wins", 429, http.Header{"Retry-After": {"2"}, "Retry-After-Ms": {"1500"}}, "", llm.CodeRateLimit, 1500, "HTTP 429"},
		{"429 garbage retry-after", 429, http.Header{"Retry-After": {"soon"}}, "", llm.CodeRateLimit, 0, "HTTP 429"},
		{"429 openai quota is QUOTA", 429, nil, openaiQuota, llm.CodeQuota, 0, "exceeded your current quota"},
		{"500", 500, nil, `{"error":{"message":"Server Error"}}`, llm.CodeServer, 0, "Server Error"},
		{"503 empty body", 503, http.Header{"Retry-After": {"5"}}, "", llm.CodeServer, 5000, "HTTP 503: Service Unavailable"},
		{"502 html", 502, nil, "<html><body>Bad gateway</body></html>", llm.CodeServer, 0, "<html><body>Bad gateway"},
		{"404", 404, nil, `{"error":"model not found"}`, "HTTP_404", 0, "HTTP 404: model not found"},
		{"418 unknown status", 418, nil, "", "HTTP_418", 0, "I'm a teapot"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{"X-Request-Id": {"req-42"}}
			for k, v := range tc.header {
				h[k] = v
			}
			srv, _ := server(t, reply{status: tc.status, contentType: "application/json", header: h, body: []byte(tc.body)})
			p := newProvider(t, srv)
			p.now = func() time.Time { return fixedNow }
			res := streamOnce(t, p, simpleRequest(t, "hi"))
			require.Empty(t, res.chunks)
			f := res.failure(t)
			require.Equal(t, tc.code, f.Code)
			require.Equal(t, tc.status, f.Status)
			require.Equal(t, tc.retryAfter, f.ProviderRetryAfterMs)
			require.Equal(t, "req-42", f.RequestID)
			require.Contains(t, f.Message, tc.msg)
			require.True(t, strings.HasPrefix(f.Message, "deepseek: "), f.Message)
		})
	}
}

func TestLongErrorBodyIsCut(t *testing.T) {
	srv, _ := server(t, reply{status: 500, body: []byte(strings.Repeat("é", 5000))})
	f := streamOnce(t, newProvider(t, srv), simpleRequest(t, "hi")).failure(t)
	require.Less(t, len(f.Message), maxMessageText+100)
	require.True(t, strings.HasSuffix(f.Message, "é…"), "cut on a rune boundary")
}

func TestDeepSeekTraceIDIsRequestID(t *testing.T) {
	srv, _ := server(t, reply{status: 500, header: http.Header{"X-Ds-Trace-Id": {"961986471ad862ea"}}})
	f := streamOnce(t, newProvider(t, srv), simpleRequest(t, "hi")).failure(t)
	require.Equal(t, "961986471ad862ea", f.RequestID)
}

// TestStreamFailures covers what can go wrong after a 200.
func TestStreamFailures(t *testing.T) {
	text := deltaJSON(`{"content":"partial"}`)
	cases := []struct {
		name        string
		contentType string
		body        string
		code        string
		status      int
		msg         string
		blocks      int // block-ends yielded before the failure
	}{
		{name: "error object mid-stream", body: string(sseBody(text, `{"error":{"message":"Rate limit reached for requests","type":"rate_limit_error"}}`)),
			code: llm.CodeRateLimit, msg: "error in stream: Rate limit reached for requests"},
		{name: "openrouter numeric code mid-stream", body: string(sseBody(text, `{"id":"gen-1","error":{"code":502,"message":"Provider returned error"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}`)),
			code: llm.CodeServer, status: 502, msg: "Provider returned error"},
		{name: "context window mid-stream", body: string(sseBody(`{"error":{"message":"maximum context length exceeded"}}`)),
			code: llm.CodeContextWindowExceeded},
		{name: "quota mid-stream", body: string(sseBody(`{"error":{"message":"Insufficient Balance"}}`)),
			code: llm.CodeQuota},
		{name: "auth mid-stream", body: string(sseBody(`{"error":{"message":"Invalid API key","type":"authentication_error"}}`)),
			code: llm.CodeAuth},
		{name: "invalid request mid-stream", body: string(sseBody(`{"error":{"message":"bad","type":"invalid_request_error"}}`)),
			code: llm.CodeInvalidRequest},
		{name: "unclassified error mid-stream", body: string(sseBody(`{"error":{"message":"upstream died"}}`)),
			code: llm.CodeServer, msg: "upstream died"},
		{name: "string error mid-stream", body: string(sseBody(`{"error":"overloaded"}`)),
			code: llm.CodeServer, msg: "overloaded"},
		{name: "event: error", body: "data: " + text + "\n\nevent: error\ndata: {\"message\":\"Too many requests\"}\n\n",
			code: llm.CodeRateLimit, msg: "Too many requests"},
		{name: "malformed chunk", body: string(sseBody(text, `{"choices":[{"delta":`)),
			code: llm.CodeMalformedResponse, msg: "malformed stream chunk"},
		{name: "done without finish_reason", body: string(sseBody(text)),
			code: llm.CodeMalformedResponse, msg: "no finish_reason"},
		{name: "stop with no content", body: string(sseBody(deltaJSON(`{"role":"assistant","content":""}`), finishJSON("stop", `{"prompt_tokens":5,"completion_tokens":0}`))),
			code: llm.CodeEmptyResponse},
		{name: "content_filter", body: string(sseBody(text, finishJSON("content_filter", ""))),
			code: "CONTENT_FILTER", msg: `finish_reason "content_filter"`, blocks: 1},
		{name: "odd finish reason", body: string(sseBody(text, finishJSON("insufficient system-resource", ""))),
			code: "INSUFFICIENT_SYSTEM_RESOURCE", blocks: 1},
		{name: "finish but no [DONE]", body: "data: " + text + "\n\ndata: " + finishJSON("stop", "") + "\n\n",
			code: llm.CodeStreamClosed, msg: "before [DONE]"},
		{name: "empty 200 body", body: "", code: llm.CodeStreamClosed},
		{name: "only keep-alives", body: ": keep-alive\n\n: keep-alive\n\n", code: llm.CodeStreamClosed},
		{name: "200 json, malformed (aimock chaos)", contentType: "application/json", body: "{malformed json: <<<chaos>>>",
			code: llm.CodeMalformedResponse, msg: "expected an event stream"},
		{name: "200 json error object", contentType: "application/json; charset=utf-8", body: `{"error":{"message":"Server busy","code":503}}`,
			code: llm.CodeServer, status: 503, msg: "Server busy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := server(t, reply{contentType: tc.contentType, body: []byte(tc.body)})
			res := streamOnce(t, newProvider(t, srv), simpleRequest(t, "hi"))
			f := res.failure(t)
			require.Equal(t, tc.code, f.Code, f.Message)
			require.Equal(t, tc.status, f.Status)
			require.Contains(t, f.Message, tc.msg)
			require.Len(t, res.blocks, tc.blocks)
		})
	}
}

func TestDoneEndsTheStream(t *testing.T) {
	// "[DONE]" is recognised with stray spaces, and nothing after it is read.
	body := "data: " + deltaJSON(`{"content":"x"}`) + "\n\ndata: " + finishJSON("length", "") +
		"\n\ndata:  [DONE] \n\ndata: {\"error\":{\"message\":\"never read\"}}\n\n"
	srv, _ := server(t, reply{body: []byte(body)})
	res := streamOnce(t, newProvider(t, srv), simpleRequest(t, "hi"))
	checkFinish(t, res, messages.FinishMaxTokens)
	require.Equal(t, "x", res.text(messages.BlockText))
}

func TestEmptyResponseStillReportsUsage(t *testing.T) {
	srv, _ := server(t, reply{body: sseBody(finishJSON("stop", `{"prompt_tokens":5,"completion_tokens":0}`))})
	res := streamOnce(t, newProvider(t, srv), simpleRequest(t, "hi"))
	require.Equal(t, llm.CodeEmptyResponse, res.failure(t).Code)
	require.NotNil(t, res.usage)
	require.Equal(t, messages.TokenUsage{InputTokens: 5}, *res.usage)
}

// TestKeyNeverInFailures sends the key back from the server in every
// place a failure message quotes: an error body, a stream error, a
// malformed chunk. The key must not come out.
func TestKeyNeverInFailures(t *testing.T) {
	echo := "your key " + testKey + " is bad"
	bodies := []reply{
		{status: 401, contentType: "application/json", body: []byte(`{"error":{"message":"` + echo + `"}}`)},
		{status: 500, body: []byte(echo)},
		{body: sseBody(`{"error":{"message":"` + echo + `","code":"` + testKey + `"}}`)},
		{body: sseBody(`{"choices":` + echo)},
		{contentType: "application/json", body: []byte(echo)},
	}
	for _, b := range bodies {
		srv, _ := server(t, b)
		f := streamOnce(t, newProvider(t, srv), simpleRequest(t, "hi")).failure(t)
		require.NotContains(t, f.Message, testKey)
		require.NotContains(t, f.Error(), testKey)
		require.NotContains(t, f.JSON().String(), testKey)
		require.Contains(t, f.Message, "[redacted]")
	}
	// A transport failure quotes the URL, which does not hold the key.
	p, err := New(Config{BaseURL: "http://127.0.0.1:1", APIKey: testKey})
	require.NoError(t, err)
	f := streamOnce(t, p, simpleRequest(t, "hi")).failure(t)
	require.Equal(t, llm.CodeTransport, f.Code)
	require.NotContains(t, f.Message, testKey)
}

func TestRetryAfterMs(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    http.Header
		want int64
	}{
		{http.Header{}, 0},
		{http.Header{"Retry-After": {"0"}}, 0},
		{http.Header{"Retry-After": {"-5"}}, 0},
		{http.Header{"Retry-After": {" 7 "}}, 7000},
		{http.Header{"Retry-After": {"1e9"}}, 24 * 60 * 60 * 1000},
		{http.Header{"Retry-After": {"NaN"}}, 0},
		{http.Header{"Retry-After-Ms": {"0"}, "Retry-After": {"1"}}, 1000},
		{http.Header{"Retry-After": {now.Add(1500 * time.Millisecond).Format(http.TimeFormat)}}, 1000},
	} {
		require.Equal(t, tc.want, retryAfterMs(tc.h, now), "%v", tc.h)
	}
}
