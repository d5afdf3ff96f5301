package deepseek

import (
	"testing"

	"github.com/dshgo/dsh/messages"
	"github.com/stretchr/testify/require"
)

// decode feeds payloads to a fresh decoder, then [DONE], and returns every
// chunk as JSON (the failure, if any, last).
func decode(t *testing.T, payloads ...string) []string {
	t.Helper()
	d := newDecoder(&Provider{cfg: Config{Name: "deepseek"}})
	var out []string
	add := func(cs []messages.StreamChunk, f *messages.LlmFailure) bool {
		for _, c := range cs {
			out = append(out, c.JSON().String())
		}
		if f != nil {
			out = append(out, "failure "+f.Code)
			return false
		}
		return true
	}
	for _, p := range payloads {
		if !add(d.event([]byte(p))) {
			return out
		}
	}
	add(d.done())
	return out
}

func TestDecoderToolCalls(t *testing.T) {
	t.Run("text before the calls, args split anywhere", func(t *testing.T) {
		got := decode(t,
			deltaJSON(`{"role":"assistant","content":"Let me check."}`),
			deltaJSON(`{"tool_calls":[{"index":0,"id":"call_00_a","type":"function","function":{"name":"f","arguments":""}}]}`),
			deltaJSON(`{"tool_calls":[{"index":0,"function":{"arguments":"{\""}}]}`),
			deltaJSON(`{"tool_calls":[{"index":0,"function":{"arguments":"x\": 1}"}}]}`),
			finishJSON("tool_calls", ""))
		require.Equal(t, []string{
			`{"type":"block-start","index":0,"blockType":"text"}`,
			`{"type":"text-delta","index":0,"text":"Let me check."}`,
			`{"type":"block-start","index":1,"blockType":"tool-call"}`,
			`{"type":"tool-call-delta","index":1,"id":"call_00_a","name":"f","argumentsDelta":""}`,
			`{"type":"tool-call-delta","index":1,"id":"call_00_a","argumentsDelta":"{\""}`,
			`{"type":"tool-call-delta","index":1,"id":"call_00_a","argumentsDelta":"x\": 1}"}`,
			`{"type":"block-end","index":0,"block":{"type":"text","text":"Let me check."}}`,
			`{"type":"block-end","index":1,"block":{"type":"tool-call","id":"call_00_a","name":"f","arguments":"{\"x\": 1}"}}`,
			`{"type":"finish","reason":{"kind":"tool-calls"}}`,
		}, got)
	})
	t.Run("no index: matched by id, then the last call", func(t *testing.T) {
		got := decode(t,
			deltaJSON(`{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{"}}]}`),
			deltaJSON(`{"tool_calls":[{"function":{"arguments":"}"}}]}`),
			deltaJSON(`{"tool_calls":[{"id":"b","function":{"name":"g","arguments":"{}"}}]}`),
			deltaJSON(`{"tool_calls":[{"id":"a","function":{"arguments":" "}}]}`),
			finishJSON("tool_calls", ""))
		require.Contains(t, got, `{"type":"block-end","index":0,"block":{"type":"tool-call","id":"a","name":"f","arguments":"{} "}}`)
		require.Contains(t, got, `{"type":"block-end","index":1,"block":{"type":"tool-call","id":"b","name":"g","arguments":"{}"}}`)
	})
	t.Run("no id: the assembler's fallback id, fixed at the first delta", func(t *testing.T) {
		got := decode(t,
			deltaJSON(`{"content":"x"}`),
			deltaJSON(`{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}`),
			deltaJSON(`{"tool_calls":[{"index":0,"function":{"name":"late","arguments":"}"}}]}`),
			finishJSON("tool_calls", ""))
		require.Contains(t, got, `{"type":"tool-call-delta","index":1,"id":"call-1","argumentsDelta":"{"}`)
		require.Contains(t, got, `{"type":"tool-call-delta","index":1,"id":"call-1","name":"late","argumentsDelta":"}"}`)
		require.Contains(t, got, `{"type":"block-end","index":1,"block":{"type":"tool-call","id":"call-1","name":"late","arguments":"{}"}}`)
	})
	t.Run("several calls in one delta", func(t *testing.T) {
		got := decode(t,
			deltaJSON(`{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}},{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}]}`),
			finishJSON("tool_calls", ""))
		require.Len(t, got, 7)
	})
}

func TestDecoderReasoningAndText(t *testing.T) {
	t.Run("reasoning opens before text within one delta", func(t *testing.T) {
		got := decode(t, deltaJSON(`{"content":"B","reasoning_content":"A"}`), finishJSON("stop", ""))
		require.Equal(t, `{"type":"block-start","index":0,"blockType":"reasoning"}`, got[0])
		require.Equal(t, `{"type":"block-start","index":1,"blockType":"text"}`, got[2])
	})
	t.Run("reasoning after text extends the reasoning block", func(t *testing.T) {
		got := decode(t,
			deltaJSON(`{"reasoning_content":"r1"}`), deltaJSON(`{"content":"t"}`),
			deltaJSON(`{"reasoning_content":"r2","content":null}`), finishJSON("stop", ""))
		require.Contains(t, got, `{"type":"reasoning-delta","index":0,"text":"r2"}`)
		require.Contains(t, got, `{"type":"block-end","index":0,"block":{"type":"reasoning","text":"r1r2"}}`)
	})
	t.Run("OpenRouter's reasoning field, not counted twice", func(t *testing.T) {
		got := decode(t,
			deltaJSON(`{"reasoning":"a"}`), deltaJSON(`{"reasoning":"b","reasoning_content":"b"}`),
			deltaJSON(`{"content":"x"}`), finishJSON("stop", ""))
		require.Contains(t, got, `{"type":"block-end","index":0,"block":{"type":"reasoning","text":"ab"}}`)
	})
	t.Run("null and empty deltas open nothing", func(t *testing.T) {
		got := decode(t,
			deltaJSON(`{"role":"assistant","content":null,"reasoning_content":""}`), deltaJSON(`{}`),
			`{"choices":[]}`, `{"choices":[{"index":0,"delta":null}]}`, finishJSON("length", ""))
		require.Equal(t, []string{`{"type":"finish","reason":{"kind":"max-tokens"}}`}, got)
	})
	t.Run("other choices are ignored", func(t *testing.T) {
		got := decode(t,
			`{"choices":[{"index":1,"delta":{"content":"other"}},{"index":0,"delta":{"content":"mine"}}]}`,
			finishJSON("stop", ""))
		require.Contains(t, got, `{"type":"block-end","index":0,"block":{"type":"text","text":"mine"}}`)
		require.Len(t, got, 4)
	})
}

func TestDecoderUsage(t *testing.T) {
	cases := []struct {
		name, usage, want string
	}{
		{"deepseek: hit subtracted", `{"prompt_tokens":264,"completion_tokens":50,"prompt_tokens_details":{"cached_tokens":256},"prompt_cache_hit_tokens":256,"prompt_cache_miss_tokens":8}`,
			`{"inputTokens":8,"outputTokens":50,"cacheReadTokens":256}`},
		{"openai: cached_tokens", `{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":64},"completion_tokens_details":{"reasoning_tokens":3}}`,
			`{"inputTokens":36,"outputTokens":7,"cacheReadTokens":64,"reasoningTokens":3}`},
		{"aimock: plain counts", `{"prompt_tokens":20,"completion_tokens":12,"total_tokens":32}`,
			`{"inputTokens":20,"outputTokens":12}`},
		{"hit larger than prompt clamps to 0", `{"prompt_tokens":5,"completion_tokens":1,"prompt_cache_hit_tokens":9}`,
			`{"inputTokens":0,"outputTokens":1,"cacheReadTokens":9}`},
		{"nulls", `{"prompt_tokens":3,"completion_tokens":null,"prompt_tokens_details":null,"completion_tokens_details":{"reasoning_tokens":null}}`,
			`{"inputTokens":3,"outputTokens":0}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := decode(t, deltaJSON(`{"content":"x"}`), finishJSON("stop", tc.usage))
			require.Contains(t, got, `{"type":"usage","usage":`+tc.want+`}`)
		})
	}
	t.Run("separate choices:[] chunk after the finish, last usage wins", func(t *testing.T) {
		got := decode(t, deltaJSON(`{"content":"x"}`), finishJSON("stop", `{"prompt_tokens":1,"completion_tokens":1}`),
			`{"choices":[],"usage":{"prompt_tokens":14,"completion_tokens":13}}`)
		require.Equal(t, []string{
			`{"type":"block-start","index":0,"blockType":"text"}`,
			`{"type":"text-delta","index":0,"text":"x"}`,
			`{"type":"block-end","index":0,"block":{"type":"text","text":"x"}}`,
			`{"type":"usage","usage":{"inputTokens":14,"outputTokens":13}}`,
			`{"type":"finish","reason":{"kind":"stop"}}`,
		}, got)
	})
	t.Run("no usage, no usage chunk", func(t *testing.T) {
		got := decode(t, deltaJSON(`{"content":"x"}`), finishJSON("stop", ""))
		require.Len(t, got, 4)
	})
}

func TestFinishCode(t *testing.T) {
	require.Equal(t, "CONTENT_FILTER", finishCode("content_filter"))
	require.Equal(t, "INSUFFICIENT_SYSTEM_RESOURCE", finishCode("insufficient_system_resource"))
	require.Equal(t, "A_B_", finishCode("a-b\u00e9"))
}
