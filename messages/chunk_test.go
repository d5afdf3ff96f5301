package messages_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dshgo/dsh/messages"
)

func TestStreamChunkConstructorsRoundTrip(t *testing.T) {
	failure := messages.LlmFailure{Message: "rate limited", Code: "RATE_LIMIT", Status: 429, ProviderRetryAfterMs: 1500, RequestID: "req-1"}
	for _, tc := range []struct {
		name  string
		chunk messages.StreamChunk
		want  string
	}{
		{"block-start", messages.BlockStartChunk(0, messages.BlockText), `{"type":"block-start","index":0,"blockType":"text"}`},
		{"text-delta", messages.TextDeltaChunk(1, "hé\""), `{"type":"text-delta","index":1,"text":"hé\""}`},
		{"reasoning-delta", messages.ReasoningDeltaChunk(2, "think"), `{"type":"reasoning-delta","index":2,"text":"think"}`},
		{"tool-call-delta", messages.ToolCallDeltaChunk(3, "c1", `{"a":`), `{"type":"tool-call-delta","index":3,"id":"c1","argumentsDelta":"{\"a\":"}`},
		{"named tool-call-delta", messages.NamedToolCallDeltaChunk(3, "c1", "bash", ""), `{"type":"tool-call-delta","index":3,"id":"c1","name":"bash","argumentsDelta":""}`},
		{"block-end", messages.BlockEndChunk(4, messages.ToolCallBlock("c1", "bash", "{}")),
			`{"type":"block-end","index":4,"block":{"type":"tool-call","id":"c1","name":"bash","arguments":"{}"}}`},
		{"usage", messages.UsageChunk(messages.TokenUsage{InputTokens: 10, OutputTokens: 5, CacheReadTokens: messages.Some(0)}),
			`{"type":"usage","usage":{"inputTokens":10,"outputTokens":5,"cacheReadTokens":0}}`},
		{"finish stop", messages.FinishChunk(messages.FinishReason{Kind: messages.FinishStop}, messages.JSON{}),
			`{"type":"finish","reason":{"kind":"stop"}}`},
		{"finish with replay state", messages.FinishChunk(messages.FinishReason{Kind: messages.FinishToolCalls},
			messages.MustParseJSON(`{"response":{"id":"x"},"blocks":[1,2]}`)),
			`{"type":"finish","reason":{"kind":"tool-calls"},"replayState":{"response":{"id":"x"},"blocks":[1,2]}}`},
		{"finish error", messages.FinishChunk(messages.FinishReason{Kind: messages.FinishError, Failure: failure}, messages.JSON{}),
			`{"type":"finish","reason":{"kind":"error","failure":{"message":"rate limited","code":"RATE_LIMIT","status":429,"providerRetryAfterMs":1500,"requestId":"req-1"}}}`},
		{"finish aborted", messages.FinishChunk(messages.FinishReason{Kind: messages.FinishAborted, Failure: messages.LlmFailure{Message: "m", Code: "ABORTED"}}, messages.JSON{}),
			`{"type":"finish","reason":{"kind":"aborted","failure":{"message":"m","code":"ABORTED"}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.chunk.JSON().String())
			p, err := messages.ParseStreamChunk(tc.chunk.JSON())
			require.NoError(t, err)
			require.Equal(t, tc.chunk.JSON(), p.JSON())
			require.Equal(t, tc.chunk.Type(), p.Type())
			require.Equal(t, tc.chunk.Index(), p.Index())
			require.Equal(t, tc.chunk.BlockType(), p.BlockType())
			require.Equal(t, tc.chunk.Text(), p.Text())
			require.Equal(t, tc.chunk.ArgumentsDelta(), p.ArgumentsDelta())
			require.Equal(t, tc.chunk.CallID(), p.CallID())
			wn, wok := tc.chunk.Name()
			gn, gok := p.Name()
			require.Equal(t, wn, gn)
			require.Equal(t, wok, gok)
			require.Equal(t, tc.chunk.Block().JSON(), p.Block().JSON())
			require.Equal(t, tc.chunk.Usage(), p.Usage())
			require.Equal(t, tc.chunk.Reason(), p.Reason())
			require.Equal(t, tc.chunk.ReplayState(), p.ReplayState())
			require.Equal(t, tc.chunk.IsTokenDelta(), p.IsTokenDelta())
			out, err := tc.chunk.MarshalJSON()
			require.NoError(t, err)
			require.Equal(t, tc.want, string(out))
		})
	}
}

func TestParseStreamChunk(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"member order kept", `{"index":0,"type":"text-delta","text":"a"}`, true},
		{"extra members kept", `{"type":"usage","usage":{"inputTokens":1,"outputTokens":2},"x":1}`, true},
		{"index as 1.0", `{"type":"block-start","index":1.0,"blockType":"text"}`, true},
		{"block-start of an unknown block type", `{"type":"block-start","index":0,"blockType":"audio"}`, true},
		{"block-end of an unknown block", `{"type":"block-end","index":0,"block":{"type":"audio"}}`, true},
		{"finish with any replay state", `{"type":"finish","reason":{"kind":"stop"},"replayState":null}`, true},

		{"not an object", `[]`, false},
		{"no type", `{"index":0,"text":"a"}`, false},
		{"unknown type", `{"type":"ping"}`, false},
		{"missing index", `{"type":"text-delta","text":"a"}`, false},
		{"negative index", `{"type":"text-delta","index":-1,"text":"a"}`, false},
		{"fractional index", `{"type":"text-delta","index":1.5,"text":"a"}`, false},
		{"string index", `{"type":"text-delta","index":"0","text":"a"}`, false},
		{"unsafe index", `{"type":"text-delta","index":9007199254740992,"text":"a"}`, false},
		{"block-start without blockType", `{"type":"block-start","index":0}`, false},
		{"block-start empty blockType", `{"type":"block-start","index":0,"blockType":""}`, false},
		{"block-start without index", `{"type":"block-start","blockType":"text"}`, false},
		{"text-delta without text", `{"type":"text-delta","index":0}`, false},
		{"text-delta text not string", `{"type":"text-delta","index":0,"text":null}`, false},
		{"reasoning-delta without text", `{"type":"reasoning-delta","index":0}`, false},
		{"reasoning-delta without index", `{"type":"reasoning-delta","text":"a"}`, false},
		{"tool-call-delta without id", `{"type":"tool-call-delta","index":0,"argumentsDelta":""}`, false},
		{"tool-call-delta without argumentsDelta", `{"type":"tool-call-delta","index":0,"id":"c"}`, false},
		{"tool-call-delta name not string", `{"type":"tool-call-delta","index":0,"id":"c","name":1,"argumentsDelta":""}`, false},
		{"tool-call-delta without index", `{"type":"tool-call-delta","id":"c","argumentsDelta":""}`, false},
		{"block-end without block", `{"type":"block-end","index":0}`, false},
		{"block-end bad block", `{"type":"block-end","index":0,"block":{"type":"text"}}`, false},
		{"block-end without index", `{"type":"block-end","block":{"type":"text","text":""}}`, false},
		{"usage without usage", `{"type":"usage"}`, false},
		{"usage bad usage", `{"type":"usage","usage":{"inputTokens":1}}`, false},
		{"finish without reason", `{"type":"finish"}`, false},
		{"finish unknown kind", `{"type":"finish","reason":{"kind":"done"}}`, false},
		{"finish error without failure", `{"type":"finish","reason":{"kind":"error"}}`, false},
		{"finish error bad failure", `{"type":"finish","reason":{"kind":"error","failure":{"message":"m","code":""}}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := messages.ParseStreamChunk(messages.MustParseJSON(tc.in))
			if !tc.ok {
				require.Error(t, err)
				require.True(t, c.JSON().IsZero())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.in, c.JSON().String())
		})
	}
}

func TestStreamChunkIsTokenDelta(t *testing.T) {
	for _, tc := range []struct {
		name  string
		chunk messages.StreamChunk
		want  bool
	}{
		{"text", messages.TextDeltaChunk(0, "a"), true},
		{"empty text", messages.TextDeltaChunk(0, ""), false},
		{"reasoning", messages.ReasoningDeltaChunk(0, "a"), true},
		{"empty reasoning", messages.ReasoningDeltaChunk(0, ""), false},
		{"tool-call arguments", messages.ToolCallDeltaChunk(0, "c", "{"), true},
		{"tool-call nothing", messages.ToolCallDeltaChunk(0, "c", ""), false},
		{"tool-call name only", messages.NamedToolCallDeltaChunk(0, "c", "bash", ""), true},
		{"tool-call empty name", messages.NamedToolCallDeltaChunk(0, "c", "", ""), true},
		{"block-start", messages.BlockStartChunk(0, messages.BlockText), false},
		{"block-end", messages.BlockEndChunk(0, messages.TextBlock("a")), false},
		{"usage", messages.UsageChunk(messages.TokenUsage{}), false},
		{"finish", messages.FinishChunk(messages.FinishReason{Kind: messages.FinishStop}, messages.JSON{}), false},
	} {
		require.Equal(t, tc.want, tc.chunk.IsTokenDelta(), tc.name)
	}
}

func TestParseLlmFailure(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     messages.LlmFailure
		ok       bool
	}{
		{"minimal", `{"message":"m","code":"AUTH"}`, messages.LlmFailure{Message: "m", Code: "AUTH"}, true},
		{"full", `{"message":"m","code":"RATE_LIMIT","status":429,"providerRetryAfterMs":2000,"requestId":"r"}`,
			messages.LlmFailure{Message: "m", Code: "RATE_LIMIT", Status: 429, ProviderRetryAfterMs: 2000, RequestID: "r"}, true},
		{"status 100", `{"message":"m","code":"c","status":100}`, messages.LlmFailure{Message: "m", Code: "c", Status: 100}, true},
		{"status 599", `{"message":"m","code":"c","status":599}`, messages.LlmFailure{Message: "m", Code: "c", Status: 599}, true},
		{"status 99", `{"message":"m","code":"c","status":99}`, messages.LlmFailure{}, false},
		{"status 600", `{"message":"m","code":"c","status":600}`, messages.LlmFailure{}, false},
		{"status 0", `{"message":"m","code":"c","status":0}`, messages.LlmFailure{}, false},
		{"status fractional", `{"message":"m","code":"c","status":404.5}`, messages.LlmFailure{}, false},
		{"status string", `{"message":"m","code":"c","status":"404"}`, messages.LlmFailure{}, false},
		{"empty code", `{"message":"m","code":""}`, messages.LlmFailure{}, false},
		{"missing code", `{"message":"m"}`, messages.LlmFailure{}, false},
		{"empty message", `{"message":"","code":"c"}`, messages.LlmFailure{}, false},
		{"missing message", `{"code":"c"}`, messages.LlmFailure{}, false},
		{"message not a string", `{"message":1,"code":"c"}`, messages.LlmFailure{}, false},
		{"retry-after zero", `{"message":"m","code":"c","providerRetryAfterMs":0}`, messages.LlmFailure{}, false},
		{"retry-after negative", `{"message":"m","code":"c","providerRetryAfterMs":-5}`, messages.LlmFailure{}, false},
		{"requestId not a string", `{"message":"m","code":"c","requestId":5}`, messages.LlmFailure{}, false},
		{"not an object", `"m"`, messages.LlmFailure{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := messages.ParseLlmFailure(messages.MustParseJSON(tc.in))
			require.Equal(t, tc.want, f)
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.in, f.JSON().String())
			require.Equal(t, f.Code+": "+f.Message, f.Error())
		})
	}
}

func TestLlmFailureValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    messages.LlmFailure
		ok   bool
	}{
		{"ok", messages.LlmFailure{Message: "m", Code: "c"}, true},
		{"status bounds", messages.LlmFailure{Message: "m", Code: "c", Status: 100}, true},
		{"status 599", messages.LlmFailure{Message: "m", Code: "c", Status: 599}, true},
		{"status 99", messages.LlmFailure{Message: "m", Code: "c", Status: 99}, false},
		{"status 600", messages.LlmFailure{Message: "m", Code: "c", Status: 600}, false},
		{"negative status", messages.LlmFailure{Message: "m", Code: "c", Status: -1}, false},
		{"empty code", messages.LlmFailure{Message: "m"}, false},
		{"empty message", messages.LlmFailure{Code: "c"}, false},
		{"negative retry-after", messages.LlmFailure{Message: "m", Code: "c", ProviderRetryAfterMs: -1}, false},
	} {
		err := tc.f.Validate()
		if tc.ok {
			require.NoError(t, err, tc.name)
		} else {
			require.Error(t, err, tc.name)
		}
	}
}

func TestParseFinishReason(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     messages.FinishReason
		ok       bool
	}{
		{"stop", `{"kind":"stop"}`, messages.FinishReason{Kind: messages.FinishStop}, true},
		{"tool-calls", `{"kind":"tool-calls"}`, messages.FinishReason{Kind: messages.FinishToolCalls}, true},
		{"max-tokens", `{"kind":"max-tokens"}`, messages.FinishReason{Kind: messages.FinishMaxTokens}, true},
		{"error", `{"kind":"error","failure":{"message":"m","code":"AUTH"}}`,
			messages.FinishReason{Kind: messages.FinishError, Failure: messages.LlmFailure{Message: "m", Code: "AUTH"}}, true},
		{"aborted", `{"kind":"aborted","failure":{"message":"m","code":"ABORTED"}}`,
			messages.FinishReason{Kind: messages.FinishAborted, Failure: messages.LlmFailure{Message: "m", Code: "ABORTED"}}, true},
		{"no kind", `{}`, messages.FinishReason{}, false},
		{"kind not a string", `{"kind":1}`, messages.FinishReason{}, false},
		{"unknown kind", `{"kind":"length"}`, messages.FinishReason{}, false},
		{"error without failure", `{"kind":"error"}`, messages.FinishReason{}, false},
		{"aborted with bad failure", `{"kind":"aborted","failure":{"code":"ABORTED"}}`, messages.FinishReason{}, false},
		{"not an object", `"stop"`, messages.FinishReason{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := messages.ParseFinishReason(messages.MustParseJSON(tc.in))
			require.Equal(t, tc.want, r)
			if !tc.ok {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.in, r.JSON().String())
		})
	}
}

func BenchmarkTextDeltaChunk(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		c := messages.TextDeltaChunk(3, "Hello, world — a typical streamed token")
		if c.Index() != 3 {
			b.Fatal(c.Index())
		}
	}
}

func FuzzParseStreamChunk(f *testing.F) {
	for _, s := range []string{
		`{"type":"block-start","index":0,"blockType":"text"}`,
		`{"type":"text-delta","index":0,"text":"a"}`,
		`{"type":"tool-call-delta","index":1,"id":"c","name":"n","argumentsDelta":"{"}`,
		`{"type":"block-end","index":0,"block":{"type":"text","text":"a"}}`,
		`{"type":"usage","usage":{"inputTokens":1,"outputTokens":2,"cacheReadTokens":0}}`,
		`{"type":"finish","reason":{"kind":"error","failure":{"message":"m","code":"c","status":500}}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		j, err := messages.ParseJSONString(s)
		if err != nil {
			return
		}
		c, err := messages.ParseStreamChunk(j)
		if err != nil {
			return
		}
		require.Equal(t, j, c.JSON())
		again, err := messages.ParseStreamChunk(c.JSON())
		require.NoError(t, err)
		require.Equal(t, c, again)
		// The typed parts re-encode to values that parse back the same.
		switch c.Type() {
		case messages.ChunkUsage:
			u, err := messages.ParseTokenUsage(c.Usage().JSON())
			require.NoError(t, err)
			require.Equal(t, c.Usage(), u)
		case messages.ChunkFinish:
			r, err := messages.ParseFinishReason(c.Reason().JSON())
			require.NoError(t, err)
			require.Equal(t, c.Reason(), r)
		}
	})
}
