package deepseek

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
)

func assistant(t testing.TB, blocks ...messages.ContentBlock) messages.Message {
	t.Helper()
	m, err := messages.NewAssistantMessage(blocks, messages.ModelSource{Provider: "deepseek", Model: "deepseek-reasoner"})
	require.NoError(t, err)
	return m
}

func toolResult(callID, text string, isError bool) messages.Message {
	return messages.NewToolResultMessage(callID, []messages.ContentBlock{messages.TextBlock(text)}, messages.ToolOutcome(isError))
}

// sentRequest runs one call against a minimal successful stream and returns
// the request the server received.
func sentRequest(t *testing.T, p func(*Config), req llm.Request) captured {
	t.Helper()
	srv, requests := server(t, reply{body: sseBody(deltaJSON(`{"content":"ok"}`), finishJSON("stop", ""))})
	prov := newProvider(t, srv)
	if p != nil {
		prov = newProvider(t, srv, p)
	}
	res := streamOnce(t, prov, req)
	require.NoError(t, res.err)
	got := requests()
	require.Len(t, got, 1)
	return got[0]
}

func TestRequestShape(t *testing.T) {
	weather := messages.ToolSchema{Name: "get_weather", Description: "Weather for a city",
		Parameters: messages.MustParseJSON(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}
	noParams := messages.ToolSchema{Name: "now"}
	img, err := messages.ImageBlock(messages.MustParseJSON(`{"attachmentId":"sha256:ab","mediaType":"image/png","url":"https://example.invalid/cat.png"}`))
	require.NoError(t, err)

	history := []messages.Message{
		// Turn 1: the model calls a tool, then answers. Both of its
		// messages carry reasoning_content.
		userText(t, "Weather in Paris?"),
		assistant(t, messages.ReasoningBlock("Need the weather tool."),
			messages.ToolCallBlock("call_1", "get_weather", `{"city":"Paris"}`),
			messages.ToolCallBlock("call_2", "now", "")),
		toolResult("call_1", "sunny, 21 °C", false),
		toolResult("call_2", "boom: <no clock>", true),
		assistant(t, messages.ReasoningBlock("It is sunny."), messages.TextBlock("Sunny, 21 °C.")),
		// Turn 2: no tool call, so no reasoning_content goes back.
		userText(t, "Thanks! And in words?"),
		assistant(t, messages.ReasoningBlock("Just rephrase."), messages.TextBlock("It is warm and sunny.")),
		// Turn 3: text and an image.
		must(messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("What is this?"), img}, messages.UserSource())),
	}
	cfg := messages.CallConfig{Provider: "deepseek", Model: "deepseek-reasoner", ReasoningEffort: "high",
		Temperature: messages.SomeFloat(0.5), MaxTokens: messages.Some(1024)}.WithStop("END", "STOP")
	req := llm.NewRequest(cfg, "You are terse.", history, []messages.ToolSchema{weather, noParams})

	got := sentRequest(t, nil, req)
	require.Equal(t, http.MethodPost, got.method)
	require.Equal(t, "/chat/completions", got.path)
	require.Equal(t, "Bearer "+testKey, got.header.Get("Authorization"))
	require.Equal(t, "application/json", got.header.Get("Content-Type"))
	require.Equal(t, "text/event-stream", got.header.Get("Accept"))
	require.NotContains(t, string(got.body), testKey, "the key travels in the header only")
	require.Contains(t, string(got.body), "<no clock>", "no HTML escaping")

	require.JSONEq(t, `{
	  "model": "deepseek-reasoner",
	  "stream": true,
	  "stream_options": {"include_usage": true},
	  "max_tokens": 1024,
	  "temperature": 0.5,
	  "stop": ["END", "STOP"],
	  "reasoning_effort": "high",
	  "tools": [
	    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
	      "parameters": {"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},
	    {"type": "function", "function": {"name": "now", "parameters": {"type":"object","properties":{}}}}
	  ],
	  "messages": [
	    {"role": "system", "content": "You are terse."},
	    {"role": "user", "content": "Weather in Paris?"},
	    {"role": "assistant", "content": null, "reasoning_content": "Need the weather tool.",
	     "tool_calls": [
	       {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
	       {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": "{}"}}]},
	    {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 °C"},
	    {"role": "tool", "tool_call_id": "call_2", "content": "boom: <no clock>"},
	    {"role": "assistant", "content": "Sunny, 21 °C.", "reasoning_content": "It is sunny."},
	    {"role": "user", "content": "Thanks! And in words?"},
	    {"role": "assistant", "content": "It is warm and sunny."},
	    {"role": "user", "content": [
	      {"type": "text", "text": "What is this?"},
	      {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}}]}
	  ]
	}`, string(got.body))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestRequestDefaultsAndOmissions(t *testing.T) {
	// No system prompt, no tools, no options: none of their fields is sent.
	got := sentRequest(t, nil, simpleRequest(t, "hi"))
	var body map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(got.body, &body))
	require.ElementsMatch(t, []string{"model", "messages", "stream", "stream_options"}, keys(body))
	require.JSONEq(t, `[{"role":"user","content":"hi"}]`, string(body["messages"]))

	// A call config without a model falls back to Config.Model; an empty
	// stop list is not sent.
	req := llm.NewRequest(messages.CallConfig{Provider: "deepseek"}.WithStop(), "", []messages.Message{userText(t, "x")}, nil)
	got = sentRequest(t, func(c *Config) { c.Model = "my-model" }, req)
	require.NoError(t, json.Unmarshal(got.body, &body))
	require.JSONEq(t, `"my-model"`, string(body["model"]))
	require.NotContains(t, body, "stop")
}

func TestRequestWithoutKeySendsNoAuthorization(t *testing.T) {
	t.Setenv(APIKeyEnv, "")
	srv, requests := server(t, reply{body: sseBody(deltaJSON(`{"content":"ok"}`), finishJSON("stop", ""))})
	p, err := New(Config{BaseURL: srv.URL + "/v1/", HTTPClient: srv.Client()})
	require.NoError(t, err)
	require.NoError(t, streamOnce(t, p, simpleRequest(t, "hi")).err)
	got := requests()
	require.Len(t, got, 1)
	require.Empty(t, got[0].header.Values("Authorization"))
	require.Equal(t, "/v1/chat/completions", got[0].path, "a trailing slash on BaseURL is not doubled")
}

func TestAPIKeyFromEnvironment(t *testing.T) {
	t.Setenv(APIKeyEnv, testKey)
	srv, requests := server(t, reply{body: sseBody(deltaJSON(`{"content":"ok"}`), finishJSON("stop", ""))})
	p, err := New(Config{BaseURL: srv.URL, HTTPClient: srv.Client()})
	require.NoError(t, err)
	require.NoError(t, streamOnce(t, p, simpleRequest(t, "hi")).err)
	require.Equal(t, "Bearer "+testKey, requests()[0].header.Get("Authorization"))
}

func TestReasoningContentRoundTrip(t *testing.T) {
	call := messages.ToolCallBlock("c1", "f", `{}`)
	cases := []struct {
		name    string
		history []messages.Message
		want    []*string // reasoning_content of each assistant message, in order
	}{
		{"no tool calls: never sent", []messages.Message{
			userText(t, "a"), assistant(t, messages.ReasoningBlock("r1"), messages.TextBlock("x")),
			userText(t, "b")}, []*string{nil}},
		{"tool-call turn: every assistant message of the turn", []messages.Message{
			userText(t, "a"), assistant(t, messages.ReasoningBlock("r1"), call), toolResult("c1", "ok", false),
			assistant(t, messages.ReasoningBlock("r2"), messages.TextBlock("done"))},
			[]*string{ptr("r1"), ptr("r2")}},
		{"earlier tool-call turn keeps it, later plain turn does not", []messages.Message{
			userText(t, "a"), assistant(t, messages.ReasoningBlock("r1"), call), toolResult("c1", "ok", false),
			assistant(t, messages.TextBlock("done")),
			userText(t, "b"), assistant(t, messages.ReasoningBlock("r3"), messages.TextBlock("y")),
			userText(t, "c")},
			[]*string{ptr("r1"), nil, nil}},
		{"several reasoning blocks are joined", []messages.Message{
			userText(t, "a"), assistant(t, messages.ReasoningBlock("p1"), messages.ReasoningBlock("p2"), call),
			toolResult("c1", "ok", false)},
			[]*string{ptr("p1\np2")}},
		{"a tool-call message without reasoning (non-thinking model) sends none", []messages.Message{
			userText(t, "a"), assistant(t, call), toolResult("c1", "ok", false)},
			[]*string{nil}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := llm.NewRequest(messages.CallConfig{Provider: "deepseek", Model: "deepseek-reasoner"}, "", tc.history, nil)
			got := sentRequest(t, nil, req)
			var body struct {
				Messages []struct {
					Role             string  `json:"role"`
					ReasoningContent *string `json:"reasoning_content"`
				} `json:"messages"`
			}
			require.NoError(t, json.Unmarshal(got.body, &body))
			var have []*string
			for _, m := range body.Messages {
				if m.Role == "assistant" {
					have = append(have, m.ReasoningContent)
				} else {
					require.Nil(t, m.ReasoningContent, "only assistant messages carry reasoning_content")
				}
			}
			require.Equal(t, tc.want, have)
		})
	}
}

func ptr(s string) *string { return &s }

func TestImageResolution(t *testing.T) {
	noURL, err := messages.ImageBlock(messages.MustParseJSON(`{"attachmentId":"sha256:ab","mediaType":"image/png"}`))
	require.NoError(t, err)
	msg := must(messages.NewUserMessage([]messages.ContentBlock{messages.TextBlock("see"), noURL}, messages.UserSource()))
	req := llm.NewRequest(messages.CallConfig{Provider: "deepseek", Model: "m"}, "", []messages.Message{msg}, nil)

	// Without a URL and without a resolver: a text placeholder, and the
	// content stays a plain string.
	got := sentRequest(t, nil, req)
	require.Contains(t, string(got.body), `"content":"see\n[image omitted: no URL for the attachment]"`)

	// With a resolver: a data URL part.
	got = sentRequest(t, func(c *Config) {
		c.ImageURL = func(att messages.JSON) (string, error) {
			mt, _ := att.Field("mediaType")
			s, _ := mt.AsString()
			return "data:" + s + ";base64,AAAA", nil
		}
	}, req)
	require.Contains(t, string(got.body), `{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}`)

	// A resolver error fails the call before anything is sent.
	srv, requests := server(t, reply{body: sseBody(finishJSON("stop", ""))})
	p := newProvider(t, srv, func(c *Config) {
		c.ImageURL = func(messages.JSON) (string, error) { return "", errors.New("attachment store offline") }
	})
	f := streamOnce(t, p, req).failure(t)
	require.Equal(t, llm.CodeInvalidRequest, f.Code)
	require.Contains(t, f.Message, "attachment store offline")
	require.Empty(t, requests())
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, Config{}.Validate(), "the zero config is valid")
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{BaseURL: "api.deepseek.com"}, "absolute http or https"},
		{Config{BaseURL: "ftp://x"}, "absolute http or https"},
		{Config{BaseURL: "http://x/?a=b"}, "query"},
		{Config{BaseURL: "http://[::1"}, "not a valid URL"},
		{Config{IdleTimeout: -1}, "negative"},
		{Config{APIKey: testKey + "\r\nX-Evil: 1"}, "line break"},
		{Config{Name: " deepseek"}, "spaces"},
	} {
		err := tc.cfg.Validate()
		require.ErrorContains(t, err, tc.want, "%s", tc.cfg)
		require.NotContains(t, err.Error(), testKey)
		_, err = New(tc.cfg)
		require.Error(t, err)
	}
	p, err := New(Config{APIKey: "k"})
	require.NoError(t, err)
	require.Equal(t, DefaultName, p.Name())
	require.Equal(t, DefaultBaseURL+"/chat/completions", p.endpoint)
	require.Equal(t, DefaultIdleTimeout, p.cfg.IdleTimeout)
	p, err = New(Config{Name: "openrouter", APIKey: "k"})
	require.NoError(t, err)
	require.Equal(t, "openrouter", p.Name())
}

// TestKeyNeverPrinted checks the printing side of the key rule: however a
// Config or Provider is formatted or logged, the key does not show.
func TestKeyNeverPrinted(t *testing.T) {
	cfg := Config{APIKey: testKey}
	p, err := New(cfg)
	require.NoError(t, err)
	var logged bytes.Buffer
	lg := slog.New(slog.NewJSONHandler(&logged, nil))
	lg.Info("config", "cfg", cfg, "provider", p)
	lg.Info("config", slog.Any("cfg", p.cfg))
	printed := strings.Join([]string{
		fmt.Sprint(cfg), fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg),
		fmt.Sprint(p), fmt.Sprintf("%v %+v %#v %s", p, p, p, p),
		logged.String(),
	}, "\n")
	require.NotContains(t, printed, testKey)
	require.Contains(t, printed, "[redacted]")
}
